//! `cargo xtask tidy`: the checks that keep ARCHITECTURE.md true to the tree. Every path it
//! names exists; every Rust source file is in its code map; every Rust file opens with a `//!`
//! line; generated protobuf types are named only in the adapters its invariant lists; `unsafe`
//! is allowed only in the files its invariant lists; and no crate has more than
//! [`MAX_IMPORT_CYCLES`] cycles between its top-level modules. The same checks run as tests with
//! the workspace's tests, so a change that breaks one fails CI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::run::workspace_root;

/// The most import cycles between the top-level modules of one crate.
pub const MAX_IMPORT_CYCLES: usize = 3;

/// Directories that hold no source of ours.
const SKIPPED_DIRS: [&str; 5] = [".git", "target", "node_modules", "dist", ".ptyhub"];

/// The start of the invariant that lists the adapters, the only files that name generated types.
const ADAPTERS_INVARIANT: &str = "**Invariant:** generated protobuf types never pass";
/// The start of the invariant that lists the files that may hold `unsafe`.
const UNSAFE_INVARIANT: &str = "**Invariant:** `unsafe` code is allowed";

/// Runs every check and prints what each found.
pub fn tidy() -> Result<()> {
    let root = workspace_root();
    let checks: [(&str, Vec<String>); 6] = [
        (
            "paths ARCHITECTURE.md names that do not exist",
            missing_paths(&root),
        ),
        (
            "source files missing from the code map",
            unmapped_sources(&root),
        ),
        (
            "files without a leading `//!` line",
            undocumented_files(&root),
        ),
        (
            "generated types outside the adapters",
            generated_types_outside_adapters(&root),
        ),
        (
            "`unsafe` outside the files the invariant lists",
            unsafe_outside_allowed(&root),
        ),
        (
            "crates over the import-cycle bound",
            crates_over_cycle_bound(&root),
        ),
    ];
    let mut failed = 0;
    for (what, findings) in &checks {
        if findings.is_empty() {
            println!("ok: no {what}");
        } else {
            failed += 1;
            println!("FAILED: {what}:");
            for finding in findings {
                println!("  {finding}");
            }
        }
    }
    println!("import cycles per crate (at most {MAX_IMPORT_CYCLES}):");
    for (krate, cycles) in import_cycles_per_crate(&root) {
        println!("  {krate}: {}", cycles.len());
        for cycle in cycles {
            println!("    {}", cycle.join(" -> "));
        }
    }
    if failed > 0 {
        bail!("{failed} tidy check(s) failed");
    }
    Ok(())
}

fn architecture(root: &Path) -> String {
    std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default()
}

/// The backticked words of `text` that look like paths in the tree: they contain a `/` or end in
/// a file extension, and hold nothing but path characters.
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

/// The paths named in the invariant that starts with `start`, up to the next invariant.
fn invariant_paths(architecture: &str, start: &str) -> Vec<String> {
    let Some(begin) = architecture.find(start) else {
        return Vec::new();
    };
    let rest = &architecture[begin + start.len()..];
    let end = rest.find("**Invariant:**").unwrap_or(rest.len());
    named_paths(&rest[..end])
}

/// Whether `file` is one of `allowed`, or below one that names a directory (ends in `/`).
fn is_listed(file: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|path| file == path || (path.ends_with('/') && file.starts_with(path.as_str())))
}

fn rust_files_below(directory: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if path.is_dir() {
            if !SKIPPED_DIRS.contains(&name) {
                rust_files_below(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// Every Rust file of the workspace, relative to `root`, sorted.
fn workspace_rust_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files_below(root, &mut files);
    let mut relative: Vec<String> = files
        .iter()
        .filter_map(|path| path.strip_prefix(root).ok())
        .map(|path| path.to_string_lossy().into_owned())
        .collect();
    relative.sort();
    relative
}

/// A file's code before its unit tests: what ships.
fn shipped_code(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// The text of `text` without `//` comments (doc comments included), so that a type named in a
/// sentence is not taken for a use of it.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn missing_paths(root: &Path) -> Vec<String> {
    named_paths(&architecture(root))
        .into_iter()
        .filter(|path| !root.join(path).exists())
        .collect()
}

fn unmapped_sources(root: &Path) -> Vec<String> {
    let named = named_paths(&architecture(root));
    workspace_rust_files(root)
        .into_iter()
        // Test files are mapped by their directory; sources one by one.
        .filter(|file| file.contains("/src/") || file.ends_with("build.rs"))
        .filter(|file| !named.contains(file))
        .collect()
}

fn undocumented_files(root: &Path) -> Vec<String> {
    workspace_rust_files(root)
        .into_iter()
        .filter(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            let first = text
                .lines()
                .map(str::trim)
                .find(|line| !line.is_empty() && !line.starts_with("#!["));
            !first.is_some_and(|line| line.starts_with("//!"))
        })
        .collect()
}

/// The services' source files (their tests aside) that name `ptyhub_proto` and are not one of
/// the adapters the invariant lists.
fn generated_types_outside_adapters(root: &Path) -> Vec<String> {
    files_outside_invariant(root, ADAPTERS_INVARIANT, |file, text| {
        file.starts_with("services/")
            && file.contains("/src/")
            && without_comments(shipped_code(text)).contains("ptyhub_proto")
    })
}

/// The files that allow `unsafe` (the workspace denies it) and are not listed by the invariant.
fn unsafe_outside_allowed(root: &Path) -> Vec<String> {
    files_outside_invariant(root, UNSAFE_INVARIANT, |file, text| {
        !file.starts_with("xtask/") && without_comments(text).contains("allow(unsafe_code)")
    })
}

/// The Rust files for which `breaks(path, text)` holds and that the invariant starting with
/// `invariant` does not list.
fn files_outside_invariant(
    root: &Path,
    invariant: &str,
    breaks: impl Fn(&str, &str) -> bool,
) -> Vec<String> {
    let listed = invariant_paths(&architecture(root), invariant);
    if listed.is_empty() {
        return vec![format!("ARCHITECTURE.md has no invariant {invariant:?}")];
    }
    workspace_rust_files(root)
        .into_iter()
        .filter(|file| !is_listed(file, &listed))
        .filter(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            breaks(file, &text)
        })
        .collect()
}

fn crates_over_cycle_bound(root: &Path) -> Vec<String> {
    import_cycles_per_crate(root)
        .into_iter()
        .filter(|(_, cycles)| cycles.len() > MAX_IMPORT_CYCLES)
        .map(|(krate, cycles)| format!("{krate}: {} cycles", cycles.len()))
        .collect()
}

/// Every crate of the workspace (a directory with a `Cargo.toml` and a `src/`), relative.
fn crates(root: &Path) -> Vec<String> {
    let mut manifests = Vec::new();
    find_crates(root, root, &mut manifests);
    manifests.sort();
    manifests
}

fn find_crates(root: &Path, directory: &Path, found: &mut Vec<String>) {
    if directory.join("Cargo.toml").is_file()
        && directory.join("src").is_dir()
        && let Ok(relative) = directory.strip_prefix(root)
    {
        found.push(relative.to_string_lossy().into_owned());
    }
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() && !SKIPPED_DIRS.contains(&name.as_ref()) && name != "src" {
            find_crates(root, &path, found);
        }
    }
}

/// The import cycles of each crate, by crate.
fn import_cycles_per_crate(root: &Path) -> BTreeMap<String, Vec<Vec<String>>> {
    crates(root)
        .into_iter()
        .map(|krate| {
            let graph = module_graph(&root.join(&krate).join("src"));
            (krate, elementary_cycles(&graph))
        })
        .collect()
}

/// The crate's top-level modules, each with the top-level modules its shipped code names
/// (`crate::x`, `crate::{x, y::z}`, and `super::x` from a module below the top). The crate
/// root (`lib.rs`, `main.rs`) is no module of its own here: it names everything.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files_below(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let mut path: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|last| last == "mod") {
            path.pop();
        }
        if path.is_empty() || path == ["lib"] || path == ["main"] || path[0] == "bin" {
            continue;
        }
        let module = path[0].clone();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let code = without_comments(shipped_code(&text));
        let mut named = BTreeSet::new();
        for reference in crate_references(&code) {
            named.insert(reference);
        }
        // `super::x` from a top-level module names the top-level `x`; from deeper down it
        // stays inside the same top-level module.
        if path.len() == 1 {
            for reference in super_references(&code) {
                named.insert(reference);
            }
        }
        named.remove(&module);
        graph.entry(module).or_default().extend(named);
    }
    graph
}

/// The first segment of every path that starts with `crate::`, braces expanded.
fn crate_references(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    push_first_segment(&item, &mut found);
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            push_first_segment(rest, &mut found);
        }
    }
    found
}

/// The first segment after every `super::`.
fn super_references(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("super::") {
        push_first_segment(&code[at + "super::".len()..], &mut found);
    }
    found
}

fn push_first_segment(path: &str, found: &mut Vec<String>) {
    let segment: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    // A lowercase first segment is a module; `crate::Type` names an item of the root.
    if segment.starts_with(|c: char| c.is_ascii_lowercase()) && segment != "self" {
        found.push(segment);
    }
}

/// The elementary cycles of `graph`, each once, starting at its smallest module.
fn elementary_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut cycles = Vec::new();
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        extend_cycles(graph, start, &mut path, &mut cycles);
    }
    cycles
}

fn extend_cycles(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    path: &mut Vec<String>,
    cycles: &mut Vec<Vec<String>>,
) {
    let Some(last) = path.last().cloned() else {
        return;
    };
    for next in graph.get(&last).into_iter().flatten() {
        if next == start {
            let mut cycle = path.clone();
            cycle.push(start.to_owned());
            cycles.push(cycle);
        } else if next.as_str() > start && !path.contains(next) {
            path.push(next.clone());
            extend_cycles(graph, start, path, cycles);
            path.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_architecture_md_names_exists() {
        let missing = missing_paths(&workspace_root());
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md names paths that do not exist: {missing:?}"
        );
    }

    #[test]
    fn every_source_file_is_in_the_code_map() {
        let unmapped = unmapped_sources(&workspace_root());
        assert!(
            unmapped.is_empty(),
            "source files missing from ARCHITECTURE.md's code map: {unmapped:?}"
        );
    }

    #[test]
    fn every_rust_file_opens_with_a_module_doc_line() {
        let undocumented = undocumented_files(&workspace_root());
        assert!(
            undocumented.is_empty(),
            "files without a leading `//!` line: {undocumented:?}"
        );
    }

    #[test]
    fn generated_types_are_named_only_in_the_adapters() {
        let leaks = generated_types_outside_adapters(&workspace_root());
        assert!(
            leaks.is_empty(),
            "files outside the adapters of ARCHITECTURE.md's invariant name generated types: {leaks:?}"
        );
    }

    #[test]
    fn unsafe_is_allowed_only_where_the_invariant_says() {
        let unlisted = unsafe_outside_allowed(&workspace_root());
        assert!(
            unlisted.is_empty(),
            "files allow unsafe code without being listed in ARCHITECTURE.md: {unlisted:?}"
        );
    }

    #[test]
    fn no_crate_has_more_import_cycles_than_the_bound() {
        let over = crates_over_cycle_bound(&workspace_root());
        assert!(over.is_empty(), "{over:?}");
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

    #[test]
    fn references_are_found_in_paths_and_groups_but_not_in_comments_or_types() {
        let code = without_comments(
            "use crate::a::X;\nuse crate::{b, c::{D, e}, Root};\nlet x = crate::f::g();\n\
             // crate::commented\nmy_crate::not_ours();",
        );
        assert_eq!(crate_references(&code), ["a", "b", "c", "f"]);
    }

    #[test]
    fn cycles_are_found_once_each() {
        let graph: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["a", "c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
        ]
        .into_iter()
        .map(|(module, named)| {
            (
                module.to_owned(),
                named.into_iter().map(str::to_owned).collect(),
            )
        })
        .collect();
        let cycles = elementary_cycles(&graph);
        let expected: Vec<Vec<String>> = [&["a", "b", "a"][..], &["a", "b", "c", "a"][..]]
            .iter()
            .map(|cycle| cycle.iter().map(|module| (*module).to_owned()).collect())
            .collect();
        assert_eq!(cycles, expected);
    }

    #[test]
    fn a_listed_directory_covers_the_files_below_it() {
        let allowed = vec!["services/x/src/grpc/".to_owned(), "a/b.rs".to_owned()];
        assert!(is_listed("services/x/src/grpc/mod.rs", &allowed));
        assert!(is_listed("a/b.rs", &allowed));
        assert!(!is_listed("services/x/src/grpc.rs", &allowed));
    }
}
