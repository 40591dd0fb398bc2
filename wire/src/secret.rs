//! Secrets in configuration: every secret a service reads (service credentials, the ticket
//! keys, users' tokens, JWT and cookie secrets) comes from its variable or from a file, never
//! from the command line, where `/proc/<pid>/cmdline` shows it to every user of the host.
//! [`SecretSource`] is the one way a service declares such a setting to clap and reads it.
//!
//! A file holds the secret alone; one trailing newline (as `echo` and editors leave it, and as
//! Kubernetes and Docker secrets are often written) is not part of it.
//!
//! What the services keep on disk (the database, a broker's records, `ptyhub up`'s token) is
//! private to the user that runs them: directories 0700, files 0600, whatever the umask.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use secrecy::SecretString;

/// Where one secret setting of a service may come from: its variable (`PTYHUB_…`), or a file
/// named by `--…-file` or its variable (`PTYHUB_…_FILE`). A value on the command line is refused
/// with a message that names the variable and the file flag instead: the flag is there, hidden,
/// only to say so. Values are [`SecretString`]s, which never print in `Debug` or logs.
///
/// A service lists its sources as constants and adds [`SecretSource::arguments`] to its
/// configuration's flags; its `clap::FromArgMatches` reads them with [`SecretSource::read`] or
/// [`SecretSource::read_list`].
#[derive(Debug, Clone, Copy)]
pub struct SecretSource {
    /// The setting's name in messages, and the id of its value in clap's matches.
    pub setting: &'static str,
    /// The refused flag that would carry the value (`service-token`).
    pub flag: &'static str,
    /// The variable that holds the value.
    pub variable: &'static str,
    /// The flag that names the file (`service-token-file`), also the id of its value.
    pub file_flag: &'static str,
    /// The variable that names the file.
    pub file_variable: &'static str,
    /// What the secret is, for `--help`.
    pub help: &'static str,
    /// Several values: separated by commas in the variable, one per line in the file, and both
    /// sources may be given together.
    pub list: bool,
}

impl SecretSource {
    /// The two arguments behind the setting: the hidden value (its variable, or the refused
    /// flag) and the file.
    pub fn arguments(&self) -> [clap::Arg; 2] {
        let value = clap::Arg::new(self.setting)
            .long(self.flag)
            .env(self.variable)
            .hide(true)
            .hide_env_values(true)
            .required(false);
        let value = if self.list {
            value.action(clap::ArgAction::Append).value_delimiter(',')
        } else {
            value.action(clap::ArgAction::Set)
        };
        let (what, instead) = if self.list {
            ("one per line", "the values themselves, comma separated,")
        } else {
            ("the secret alone", "the value itself")
        };
        let file = clap::Arg::new(self.file_flag)
            .long(self.file_flag)
            .env(self.file_variable)
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .action(clap::ArgAction::Set)
            .help(format!(
                "{} A file holding {what}; or {instead} in {} (never on the command line)",
                self.help, self.variable
            ));
        [value, file]
    }

    /// The secret, from its variable or its file; `None` when neither was given.
    pub fn read(&self, matches: &clap::ArgMatches) -> Result<Option<SecretString>, SecretError> {
        self.refuse_command_line(matches)?;
        let value = matches.get_one::<String>(self.setting).cloned();
        let file = matches.get_one::<PathBuf>(self.file_flag);
        Ok(secret_from(self.setting, value, file.map(PathBuf::as_path))?.map(SecretString::from))
    }

    /// Every value of a list setting, from its variable and its file together, empty lines and
    /// entries left out.
    pub fn read_list(&self, matches: &clap::ArgMatches) -> Result<Vec<SecretString>, SecretError> {
        self.refuse_command_line(matches)?;
        let mut values: Vec<String> = matches
            .get_many::<String>(self.setting)
            .into_iter()
            .flatten()
            .map(|value| value.trim().to_owned())
            .collect();
        if let Some(file) = matches.get_one::<PathBuf>(self.file_flag) {
            values.extend(read_secret_lines(self.setting, file)?);
        }
        Ok(values
            .into_iter()
            .filter(|value| !value.is_empty())
            .map(SecretString::from)
            .collect())
    }

    fn refuse_command_line(&self, matches: &clap::ArgMatches) -> Result<(), SecretError> {
        if matches.value_source(self.setting) == Some(ValueSource::CommandLine) {
            return Err(SecretError::OnCommandLine {
                setting: self.setting,
                flag: self.flag,
                variable: self.variable,
                file_flag: self.file_flag,
                file_variable: self.file_variable,
            });
        }
        Ok(())
    }
}

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
    #[error(
        "invalid setting {setting}: --{flag} is refused, since every user of the host reads a command line in /proc; set {variable}, or name a file with --{file_flag} or {file_variable}"
    )]
    OnCommandLine {
        setting: &'static str,
        flag: &'static str,
        variable: &'static str,
        file_flag: &'static str,
        file_variable: &'static str,
    },
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

    const TOKEN: SecretSource = SecretSource {
        setting: "service_token",
        flag: "service-token",
        variable: "PTYHUB_WIRE_TEST_SERVICE_TOKEN",
        file_flag: "service-token-file",
        file_variable: "PTYHUB_WIRE_TEST_SERVICE_TOKEN_FILE",
        help: "The test's credential.",
        list: false,
    };
    const TOKENS: SecretSource = SecretSource {
        setting: "api_tokens",
        flag: "api-token",
        variable: "PTYHUB_WIRE_TEST_API_TOKENS",
        file_flag: "api-token-file",
        file_variable: "PTYHUB_WIRE_TEST_API_TOKEN_FILE",
        help: "The test's tokens.",
        list: true,
    };

    fn matches(args: &[&str]) -> clap::ArgMatches {
        clap::Command::new("service")
            .args(TOKEN.arguments())
            .args(TOKENS.arguments())
            .try_get_matches_from(std::iter::once("service").chain(args.iter().copied()))
            .expect("the flags parse")
    }

    fn exposed(secret: Option<SecretString>) -> Option<String> {
        use secrecy::ExposeSecret as _;
        secret.map(|secret| secret.expose_secret().to_owned())
    }

    fn exposed_all(secrets: Vec<SecretString>) -> Vec<String> {
        use secrecy::ExposeSecret as _;
        secrets
            .iter()
            .map(|secret| secret.expose_secret().to_owned())
            .collect()
    }

    #[test]
    fn a_secret_source_reads_the_file_a_flag_names() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("token");
        std::fs::write(&path, "from-a-file-0123456789\n").expect("write");
        let lines = dir.path().join("tokens");
        std::fs::write(&lines, "one\n\n two \n").expect("write");
        let matches = matches(&[
            &format!("--service-token-file={}", path.display()),
            &format!("--api-token-file={}", lines.display()),
        ]);
        assert_eq!(
            exposed(TOKEN.read(&matches).expect("read")).as_deref(),
            Some("from-a-file-0123456789")
        );
        assert_eq!(
            exposed_all(TOKENS.read_list(&matches).expect("read")),
            ["one", "two"]
        );
        let none = matches_without_secrets();
        assert!(TOKEN.read(&none).expect("read").is_none());
        assert!(TOKENS.read_list(&none).expect("read").is_empty());
    }

    fn matches_without_secrets() -> clap::ArgMatches {
        matches(&[])
    }

    #[test]
    fn a_secret_on_the_command_line_is_refused_without_being_quoted() {
        for (source, args) in [
            (TOKEN, ["--service-token", "leaked-on-argv-0123456789"]),
            (TOKENS, ["--api-token", "leaked-on-argv-0123456789"]),
        ] {
            let matches = matches(&args);
            let refused = if source.list {
                source.read_list(&matches).map(|_| ()).expect_err("refused")
            } else {
                source.read(&matches).map(|_| ()).expect_err("refused")
            };
            let message = refused.to_string();
            assert!(message.contains(source.variable), "{message}");
            assert!(message.contains(source.file_flag), "{message}");
            assert!(!message.contains("leaked-on-argv"), "{message}");
        }
    }

    #[test]
    fn a_missing_secret_file_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("missing");
        let refused = TOKEN
            .read(&matches(&[&format!(
                "--service-token-file={}",
                missing.display()
            )]))
            .expect_err("a missing file");
        let message = refused.to_string();
        assert!(
            message.contains("invalid setting service_token"),
            "{message}"
        );
        assert!(message.contains("missing"), "{message}");
    }

    #[test]
    fn the_help_names_both_variables_and_never_offers_the_value_flag() {
        let mut command = clap::Command::new("service").args(TOKEN.arguments());
        let help = command.render_help().to_string();
        assert!(help.contains("--service-token-file <FILE>"), "{help}");
        assert!(
            help.contains("PTYHUB_WIRE_TEST_SERVICE_TOKEN_FILE"),
            "{help}"
        );
        assert!(help.contains("PTYHUB_WIRE_TEST_SERVICE_TOKEN "), "{help}");
        assert!(!help.contains("--service-token "), "{help}");
    }

    /// Run by [`secrets_come_from_their_variables_and_never_print`] in a child process whose
    /// environment holds the variables.
    #[test]
    #[ignore = "runs in a child process with its variables set"]
    fn child_reads_secrets_from_variables() {
        if !ptyhub_test_support::child::is_child() {
            return;
        }
        let matches = matches(&[]);
        let token = TOKEN
            .read(&matches)
            .expect("read")
            .expect("from the variable");
        assert_eq!(
            exposed(Some(token.clone())).as_deref(),
            Some("from-the-variable-0123")
        );
        assert!(
            !format!("{token:?}").contains("from-the-variable"),
            "{token:?}"
        );
        assert_eq!(
            exposed_all(TOKENS.read_list(&matches).expect("read")),
            ["first-0123", "second-0123", "from-the-file-0123"]
        );
        // A value and a file of one secret are refused together.
        let doubled = clap::Command::new("service")
            .args(TOKEN.arguments())
            .try_get_matches_from(["service", "--service-token-file=/dev/null"])
            .expect("the flags parse");
        assert!(matches!(
            TOKEN.read(&doubled),
            Err(SecretError::Both { .. })
        ));
    }

    #[test]
    fn secrets_come_from_their_variables_and_never_print() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("tokens");
        std::fs::write(&file, "from-the-file-0123\n").expect("write");
        ptyhub_test_support::child::assert_passes_in_child(
            "secret::tests::child_reads_secrets_from_variables",
            &[
                (
                    "PTYHUB_WIRE_TEST_SERVICE_TOKEN",
                    "from-the-variable-0123".to_owned(),
                ),
                (
                    "PTYHUB_WIRE_TEST_API_TOKENS",
                    "first-0123, second-0123".to_owned(),
                ),
                (
                    "PTYHUB_WIRE_TEST_API_TOKEN_FILE",
                    file.display().to_string(),
                ),
            ],
        );
    }
}
