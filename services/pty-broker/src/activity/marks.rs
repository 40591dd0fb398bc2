//! The marks a terminal's output carries about what it is doing, read from the OSC sequences the
//! screen's emulator hands over (vt100 parses them; this only reads their parameters): the
//! semantic prompt marks of OSC 133 (FinalTerm's, as iTerm2, kitty and WezTerm read them) and
//! VS Code's OSC 633 (the same marks, the command line and properties), the working directory
//! of OSC 7, and a program's notifications (OSC 9, OSC 99, OSC 777) and progress (OSC 9;4).

use ptyhub_model::Progress;

/// The longest command line or notification text kept, in bytes; longer ones are cut on a
/// character boundary.
pub const MAX_MARK_TEXT: usize = 4096;

/// One mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// `133;A`: the prompt starts.
    PromptStart,
    /// `133;B`: the prompt ends; what the user types follows.
    InputStart,
    /// `133;C`: the command line was entered; its output follows.
    OutputStart,
    /// `133;D[;code]`: the command ended, with its exit code where the shell gave one.
    CommandEnd(Option<i32>),
    /// `633;E;<line>`: the command line about to run.
    CommandLine(String),
    /// `7;file://host/path` or `633;P;Cwd=<path>`: the working directory.
    Cwd(String),
    /// `9;<text>`, `777;notify;<title>;<body>`, `99;<metadata>;<text>`: the program asks for
    /// the user.
    Notification(String),
    /// `9;4;<state>;<percent>`: the program's progress; `None` clears it.
    Progress(Option<Progress>),
    /// BEL outside a sequence.
    Bell,
}

impl Mark {
    /// The mark an OSC sequence is, from its parameters as vt100 splits them at `;`; `None`
    /// for every other sequence.
    pub fn from_osc(params: &[&[u8]]) -> Option<Mark> {
        let (kind, rest) = params.split_first()?;
        match *kind {
            b"133" | b"633" => semantic(*kind == b"633", rest),
            b"7" => {
                let url = join(rest);
                file_url_path(&url).map(Mark::Cwd)
            }
            b"9" => match rest {
                [b"4", progress @ ..] => Some(Mark::Progress(progress_report(progress))),
                [] => None,
                text => Some(Mark::Notification(cut(join(text)))),
            },
            b"777" => match rest {
                [b"notify", title, body @ ..] => {
                    let title = String::from_utf8_lossy(title);
                    let body = join(body);
                    let text = match (title.is_empty(), body.is_empty()) {
                        (_, true) => title.into_owned(),
                        (true, false) => body,
                        (false, false) => format!("{title}: {body}"),
                    };
                    Some(Mark::Notification(cut(clean(&text))))
                }
                _ => None,
            },
            // kitty's desktop notifications: `99;<key=value:...>;<payload>`; a title and a body
            // may come in two sequences, each of which asks for the user.
            b"99" => match rest {
                [metadata, payload @ ..] if !metadata.split(|b| *b == b':').any(is_query) => {
                    Some(Mark::Notification(cut(join(payload))))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// `p=?` asks the terminal what it supports: not a notification.
fn is_query(pair: &[u8]) -> bool {
    pair == b"p=?"
}

fn semantic(vscode: bool, rest: &[&[u8]]) -> Option<Mark> {
    let (letter, args) = rest.split_first()?;
    match *letter {
        b"A" => Some(Mark::PromptStart),
        b"B" => Some(Mark::InputStart),
        b"C" => Some(Mark::OutputStart),
        b"D" => Some(Mark::CommandEnd(
            args.first()
                .and_then(|code| std::str::from_utf8(code).ok())
                .and_then(|code| code.trim().parse().ok()),
        )),
        b"E" if vscode => {
            // `E;<line>[;<nonce>]`: the line escapes `;` and control characters itself.
            let line = unescape(args.first().copied().unwrap_or_default());
            Some(Mark::CommandLine(cut(line)))
        }
        b"P" if vscode => {
            let property = args.first()?;
            let value = property.strip_prefix(b"Cwd=")?;
            let path = unescape(value);
            (!path.is_empty()).then_some(Mark::Cwd(cut(path)))
        }
        _ => None,
    }
}

/// `9;4;<state>;<percent>`: 0 clears, 1 is a percent, 2 an error, 3 indeterminate, 4 paused.
fn progress_report(params: &[&[u8]]) -> Option<Progress> {
    let number = |index: usize| -> Option<u8> {
        let text = std::str::from_utf8(params.get(index)?).ok()?;
        text.parse::<u32>().ok().map(|value| value.min(100) as u8)
    };
    match number(0)? {
        1 => Some(Progress::Percent(number(1).unwrap_or(0))),
        2 => Some(Progress::Error(number(1).unwrap_or(0))),
        3 => Some(Progress::Indeterminate),
        4 => Some(Progress::Paused(number(1).unwrap_or(0))),
        _ => None,
    }
}

/// VS Code's escaping in 633 sequences: `\\` is a backslash and `\xHH` a byte.
fn unescape(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut index = 0;
    while index < text.len() {
        match (text[index], text.get(index + 1)) {
            (b'\\', Some(b'\\')) => {
                out.push(b'\\');
                index += 2;
            }
            (b'\\', Some(b'x')) => match text.get(index + 2..index + 4).and_then(hex_byte) {
                Some(byte) => {
                    out.push(byte);
                    index += 4;
                }
                None => {
                    out.push(b'\\');
                    index += 1;
                }
            },
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()
}

/// The path of a `file://host/path` URL, percent-decoded; `None` for anything else.
fn file_url_path(url: &str) -> Option<String> {
    let rest = url.strip_prefix("file://")?;
    let path = &rest[rest.find('/')?..];
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && let Some(byte) = bytes.get(index + 1..index + 3).and_then(hex_byte)
        {
            out.push(byte);
            index += 3;
            continue;
        }
        out.push(bytes[index]);
        index += 1;
    }
    let path = String::from_utf8_lossy(&out).into_owned();
    Some(cut(path))
}

/// The parameters vt100 split at `;`, joined back.
fn join(parts: &[&[u8]]) -> String {
    clean(&String::from_utf8_lossy(&parts.join(&b';')))
}

/// Without control characters.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// At most [`MAX_MARK_TEXT`] bytes, cut on a character boundary.
pub fn cut(mut text: String) -> String {
    if text.len() > MAX_MARK_TEXT {
        let mut end = MAX_MARK_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sequence: &str) -> Option<Mark> {
        let params: Vec<&[u8]> = sequence.split(';').map(str::as_bytes).collect();
        Mark::from_osc(&params)
    }

    #[test]
    fn semantic_prompt_marks_are_read_from_both_families() {
        assert_eq!(parse("133;A"), Some(Mark::PromptStart));
        assert_eq!(parse("633;A"), Some(Mark::PromptStart));
        assert_eq!(parse("133;B"), Some(Mark::InputStart));
        assert_eq!(parse("133;C"), Some(Mark::OutputStart));
        assert_eq!(parse("133;D;7"), Some(Mark::CommandEnd(Some(7))));
        assert_eq!(parse("633;D"), Some(Mark::CommandEnd(None)));
        assert_eq!(parse("133;D;x"), Some(Mark::CommandEnd(None)));
        assert_eq!(parse("133;A;aid=12;cl=m"), Some(Mark::PromptStart));
        assert_eq!(parse("133;Z"), None);
        assert_eq!(parse("133"), None);
        // E and P are VS Code's only.
        assert_eq!(parse("133;E;ls"), None);
    }

    #[test]
    fn command_lines_and_cwds_are_unescaped() {
        assert_eq!(
            parse(r"633;E;echo a\x3bb \\ c\x0ad;nonce"),
            Some(Mark::CommandLine("echo a;b \\ c\nd".to_owned()))
        );
        assert_eq!(
            parse(r"633;E;bad \xZZ"),
            Some(Mark::CommandLine(r"bad \xZZ".to_owned()))
        );
        assert_eq!(
            parse(r"633;P;Cwd=/tmp/a\x3bb"),
            Some(Mark::Cwd("/tmp/a;b".to_owned()))
        );
        assert_eq!(parse("633;P;Other=1"), None);
        assert_eq!(
            parse("7;file://host/home/me/my%20dir"),
            Some(Mark::Cwd("/home/me/my dir".to_owned()))
        );
        assert_eq!(parse("7;file:///tmp"), Some(Mark::Cwd("/tmp".to_owned())));
        assert_eq!(parse("7;http://host/tmp"), None);
    }

    #[test]
    fn notifications_and_progress_are_told_apart() {
        assert_eq!(
            parse("9;Claude needs your permission"),
            Some(Mark::Notification(
                "Claude needs your permission".to_owned()
            ))
        );
        assert_eq!(
            parse("9;4;1;42"),
            Some(Mark::Progress(Some(Progress::Percent(42))))
        );
        assert_eq!(
            parse("9;4;3"),
            Some(Mark::Progress(Some(Progress::Indeterminate)))
        );
        assert_eq!(parse("9;4;0"), Some(Mark::Progress(None)));
        assert_eq!(
            parse("9;4;2;300"),
            Some(Mark::Progress(Some(Progress::Error(100))))
        );
        assert_eq!(
            parse("777;notify;Build;done; 3 warnings"),
            Some(Mark::Notification("Build: done; 3 warnings".to_owned()))
        );
        assert_eq!(
            parse("99;i=1:d=0;Waiting for you"),
            Some(Mark::Notification("Waiting for you".to_owned()))
        );
        assert_eq!(parse("99;i=1:p=?;"), None);
        assert_eq!(parse("777;other"), None);
        assert_eq!(parse("0;title"), None);
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let long = format!("9;{}", "é".repeat(MAX_MARK_TEXT));
        let Some(Mark::Notification(text)) = parse(&long) else {
            panic!("a notification");
        };
        assert!(text.len() <= MAX_MARK_TEXT && text.len() > MAX_MARK_TEXT - 2);
        assert!(text.chars().all(|c| c == 'é'));
    }
}
