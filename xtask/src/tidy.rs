//! Checks that keep the docs true to the tree: every path ARCHITECTURE.md names exists, every
//! Rust source file of the workspace is in its code map, and every Rust file opens with a `//!`
//! line that says what it owns. They run with the workspace's tests.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::run::workspace_root;

    /// Directories that hold no source of ours.
    const SKIPPED_DIRS: [&str; 5] = [".git", "target", "node_modules", "dist", ".ptyhub"];

    fn architecture() -> String {
        std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md is readable")
    }

    /// The backticked words of `text` that look like paths in the tree: they contain a `/` or end
    /// in a file extension, and hold nothing but path characters.
    fn named_paths(text: &str) -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|word| {
                !word.is_empty()
                    && word
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
                    && !word.starts_with('/')
                    && !word.starts_with('.')
                    && (word.contains('/')
                        || [
                            ".rs", ".md", ".toml", ".proto", ".mjs", ".js", ".json", ".yaml",
                        ]
                        .iter()
                        .any(|extension| word.ends_with(extension)))
            })
            .map(str::to_owned)
            .collect()
    }

    fn rust_files(directory: &Path, found: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(directory).expect("a readable directory");
        for entry in entries {
            let path = entry.expect("a readable entry").path();
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if path.is_dir() {
                if !SKIPPED_DIRS.contains(&name) {
                    rust_files(&path, found);
                }
            } else if name.ends_with(".rs") {
                found.push(path);
            }
        }
    }

    fn workspace_rust_files() -> Vec<String> {
        let root = workspace_root();
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        let mut relative: Vec<String> = files
            .iter()
            .map(|path| {
                path.strip_prefix(&root)
                    .expect("below the root")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        relative.sort();
        relative
    }

    #[test]
    fn every_path_architecture_md_names_exists() {
        let root = workspace_root();
        let missing: Vec<String> = named_paths(&architecture())
            .into_iter()
            .filter(|path| !root.join(path).exists())
            .collect();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md names paths that do not exist: {missing:?}"
        );
    }

    #[test]
    fn every_source_file_is_in_the_code_map() {
        let named = named_paths(&architecture());
        let unmapped: Vec<String> = workspace_rust_files()
            .into_iter()
            // Test files are mapped by their directory; sources one by one.
            .filter(|file| file.contains("/src/") || file.ends_with("build.rs"))
            .filter(|file| !named.contains(file))
            .collect();
        assert!(
            unmapped.is_empty(),
            "source files missing from ARCHITECTURE.md's code map: {unmapped:?}"
        );
    }

    #[test]
    fn every_rust_file_opens_with_a_module_doc_line() {
        let root = workspace_root();
        let undocumented: Vec<String> = workspace_rust_files()
            .into_iter()
            .filter(|file| {
                let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
                let first = text
                    .lines()
                    .map(str::trim)
                    .find(|line| !line.is_empty() && !line.starts_with("#!["));
                !first.is_some_and(|line| line.starts_with("//!"))
            })
            .collect();
        assert!(
            undocumented.is_empty(),
            "files without a leading `//!` line: {undocumented:?}"
        );
    }

    #[test]
    fn the_path_finder_takes_paths_and_leaves_other_code() {
        let text = "`services/pty-broker/src/ring.rs`, `Cargo.toml`, `OutputRing`, `a b/c`, \
                    `--since`, `/healthz`, `tests/`";
        assert_eq!(
            named_paths(text),
            ["services/pty-broker/src/ring.rs", "Cargo.toml", "tests/"]
        );
    }
}
