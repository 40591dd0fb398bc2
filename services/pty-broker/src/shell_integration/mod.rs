//! Shell integration: a session whose program is an interactive bash, zsh, fish or POSIX `sh`
//! (busybox ash, dash) is started so that its shell marks its prompts, command lines, command
//! output and exit codes, and working directory in its output (OSC 133, OSC 633 E, OSC 7), which
//! the session's activity reads (`activity/`).
//!
//! Nothing is installed anywhere: the program is started through a short `/bin/sh` bootstrap
//! (`bootstrap.sh`) that receives the integration script in its environment, writes it to a
//! private temporary directory and starts the shell on it as that shell's own startup file
//! (`--rcfile` for bash, `$ENV` for sh, `ZDOTDIR` for zsh, `--init-command` for fish). The
//! script runs the user's own startup files first, removes the directory, and adds its hooks.
//! The same argv works for a local PTY and a `docker exec`, so the scripts travel with the exec.
//! A program that is not such a shell, or a shell given a script or `-c`, starts unchanged;
//! where the directory cannot be made, the shell starts as it would have without integration.

use std::path::Path;

const BOOTSTRAP: &str = include_str!("bootstrap.sh");
const BASH: &str = include_str!("bash.sh");
const POSIX: &str = include_str!("posix.sh");
const ZSH: &str = include_str!("zsh.zsh");
const FISH: &str = include_str!("fish.fish");

/// The shells that have an integration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Posix,
    Zsh,
    Fish,
}

impl Shell {
    /// The shell `argv` starts interactively, if it is one with an integration: its program's
    /// name, and nothing after it but the options that make a login or an interactive shell.
    pub fn of(argv: &[String]) -> Option<Shell> {
        let (program, args) = argv.split_first()?;
        let name = Path::new(program).file_name()?.to_str()?;
        let name = name.strip_prefix('-').unwrap_or(name);
        let shell = match name {
            "bash" => Shell::Bash,
            "sh" | "ash" | "dash" => Shell::Posix,
            "zsh" => Shell::Zsh,
            "fish" => Shell::Fish,
            _ => return None,
        };
        let interactive = args.iter().all(|arg| match shell {
            Shell::Posix => matches!(arg.as_str(), "-l" | "-i"),
            _ => matches!(arg.as_str(), "-l" | "-i" | "--login"),
        });
        interactive.then_some(shell)
    }

    /// Its name in the bootstrap, and in a hand-off.
    pub fn kind(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Posix => "sh",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }

    /// The shell [`Shell::kind`] names.
    pub fn from_kind(kind: &str) -> Option<Shell> {
        [Shell::Bash, Shell::Posix, Shell::Zsh, Shell::Fish]
            .into_iter()
            .find(|shell| shell.kind() == kind)
    }

    /// `lines` as one command of this shell: a group, so that a shell that reads them as they
    /// come still runs one command (one prompt, one exit code).
    pub fn one_command(self, lines: &str) -> String {
        match self {
            Shell::Fish => format!("begin\n{lines}\nend"),
            Shell::Bash | Shell::Posix | Shell::Zsh => format!("{{\n{lines}\n}}"),
        }
    }

    fn script(self) -> &'static str {
        match self {
            Shell::Bash => BASH,
            Shell::Posix => POSIX,
            Shell::Zsh => ZSH,
            Shell::Fish => FISH,
        }
    }
}

/// A program started with its shell's integration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrated {
    pub shell: Shell,
    pub argv: Vec<String>,
    /// Variables the bootstrap reads and removes before the shell starts.
    pub env: Vec<(String, String)>,
}

/// `argv` started with its shell's integration, or `None` when it is not a shell that has one.
pub fn integrate(argv: &[String]) -> Option<Integrated> {
    let shell = Shell::of(argv)?;
    let mut wrapped = vec!["/bin/sh".to_owned(), "-c".to_owned(), BOOTSTRAP.to_owned()];
    wrapped.extend(argv.iter().cloned());
    Some(Integrated {
        shell,
        argv: wrapped,
        env: vec![
            ("PTYHUB_SHELL_KIND".to_owned(), shell.kind().to_owned()),
            ("PTYHUB_SHELL_SCRIPT".to_owned(), shell.script().to_owned()),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| (*word).to_owned()).collect()
    }

    #[test]
    fn interactive_shells_are_recognised_by_name_and_options() {
        assert_eq!(Shell::of(&argv(&["/bin/bash"])), Some(Shell::Bash));
        assert_eq!(Shell::of(&argv(&["bash", "-l"])), Some(Shell::Bash));
        assert_eq!(Shell::of(&argv(&["-bash"])), Some(Shell::Bash));
        assert_eq!(Shell::of(&argv(&["/bin/sh"])), Some(Shell::Posix));
        assert_eq!(Shell::of(&argv(&["ash", "-i"])), Some(Shell::Posix));
        assert_eq!(Shell::of(&argv(&["/usr/bin/dash"])), Some(Shell::Posix));
        assert_eq!(Shell::of(&argv(&["zsh", "--login"])), Some(Shell::Zsh));
        assert_eq!(Shell::of(&argv(&["/usr/bin/fish"])), Some(Shell::Fish));
    }

    #[test]
    fn scripts_commands_and_other_programs_start_unchanged() {
        assert_eq!(Shell::of(&argv(&["bash", "-c", "make"])), None);
        assert_eq!(Shell::of(&argv(&["sh", "script.sh"])), None);
        assert_eq!(Shell::of(&argv(&["sh", "--login"])), None);
        assert_eq!(Shell::of(&argv(&["python3"])), None);
        assert_eq!(Shell::of(&argv(&["busybox", "sh"])), None);
        assert_eq!(Shell::of(&argv(&[])), None);
        assert_eq!(integrate(&argv(&["vim"])), None);
    }

    #[test]
    fn the_shell_goes_after_the_bootstrap_with_its_own_arguments() {
        let integrated = integrate(&argv(&["/bin/bash", "-l"])).expect("bash has one");
        assert_eq!(&integrated.argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(&integrated.argv[3..], ["/bin/bash", "-l"]);
        assert!(
            integrated
                .env
                .contains(&("PTYHUB_SHELL_KIND".to_owned(), "bash".to_owned()))
        );
    }
}
