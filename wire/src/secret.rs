//! Secrets in configuration: every secret a service reads (service credentials, the ticket
//! signing key, users' tokens, JWT keys) comes from its variable or from a file, so that none has
//! to be on a command line, where `/proc/<pid>/cmdline` shows it to every user of the host.
//!
//! A file holds the secret alone; one trailing newline (as `echo` and editors leave it, and as
//! Kubernetes and Docker secrets are often written) is not part of it.
//!
//! What the services keep on disk (the database, a broker's records, `ptyhub up`'s token) is
//! private to the user that runs them: directories 0700, files 0600, whatever the umask.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Creates `path` (and its parents) if missing, and makes it 0700: only its owner may list or
/// enter it.
pub fn create_private_directory(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Creates the file `path` empty and 0600 if it is missing, and makes it 0600 if it exists.
pub fn create_private_file(path: &Path) -> std::io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        }
        Err(error) => Err(error),
    }
}

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("invalid setting {setting}: cannot read {path}: {source}")]
    Unreadable {
        setting: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid setting {setting}: {path} is empty")]
    Empty {
        setting: &'static str,
        path: PathBuf,
    },
    #[error("invalid setting {setting}: give the value or a file, not both")]
    Both { setting: &'static str },
}

/// Reads the secret of `setting` from `path`, without its trailing newline.
pub fn read_secret_file(setting: &'static str, path: &Path) -> Result<String, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Unreadable {
        setting,
        path: path.to_owned(),
        source,
    })?;
    let secret = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if secret.is_empty() {
        return Err(SecretError::Empty {
            setting,
            path: path.to_owned(),
        });
    }
    Ok(secret.to_owned())
}

/// The secret of `setting` from its value (a variable, or a flag) or its file, whichever was
/// given; `None` when neither was.
pub fn secret_from(
    setting: &'static str,
    value: Option<String>,
    file: Option<&Path>,
) -> Result<Option<String>, SecretError> {
    match (value, file) {
        (Some(_), Some(_)) => Err(SecretError::Both { setting }),
        (Some(value), None) => Ok(Some(value)),
        (None, Some(path)) => read_secret_file(setting, path).map(Some),
        (None, None) => Ok(None),
    }
}

/// Secrets from a file of one per line (static API tokens, brokers' credentials), without empty
/// lines.
pub fn read_secret_lines(setting: &'static str, path: &Path) -> Result<Vec<String>, SecretError> {
    let text = read_secret_file(setting, path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_directories_and_files_are_the_owners_alone() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let nested = dir.path().join("a/b");
        create_private_directory(&nested).expect("create");
        let mode =
            |path: &Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&nested), 0o700);
        std::fs::set_permissions(&nested, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        create_private_directory(&nested).expect("again");
        assert_eq!(mode(&nested), 0o700, "an existing directory is tightened");
        let file = nested.join("db");
        create_private_file(&file).expect("create");
        assert_eq!(mode(&file), 0o600);
        std::fs::write(&file, "kept").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        create_private_file(&file).expect("again");
        assert_eq!(mode(&file), 0o600, "an existing file is tightened");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "kept");
    }

    #[test]
    fn a_secret_file_loses_its_trailing_newline_only() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("token");
        std::fs::write(&path, "  0123456789abcdef \n").expect("write");
        assert_eq!(
            read_secret_file("token", &path).expect("read"),
            "  0123456789abcdef "
        );
        std::fs::write(&path, "\n").expect("write");
        assert!(matches!(
            read_secret_file("token", &path),
            Err(SecretError::Empty { .. })
        ));
        let missing = read_secret_file("token", &dir.path().join("missing"))
            .expect_err("a missing file is an error");
        assert!(
            missing.to_string().contains("invalid setting token"),
            "{missing}"
        );
    }

    #[test]
    fn a_value_or_a_file_but_not_both() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("token");
        std::fs::write(&path, "from-file\n").expect("write");
        assert_eq!(
            secret_from("token", None, Some(&path)).expect("read"),
            Some("from-file".to_owned())
        );
        assert_eq!(
            secret_from("token", Some("value".to_owned()), None).expect("read"),
            Some("value".to_owned())
        );
        assert!(secret_from("token", None, None).expect("read").is_none());
        assert!(matches!(
            secret_from("token", Some("value".to_owned()), Some(&path)),
            Err(SecretError::Both { .. })
        ));
        std::fs::write(&path, "one\n\n two \n").expect("write");
        assert_eq!(
            read_secret_lines("tokens", &path).expect("read"),
            ["one", "two"]
        );
    }
}
