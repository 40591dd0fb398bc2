//! A command's output as plain text: what the program printed with its escape sequences and
//! control characters taken out (vte parses them), tabs and line feeds kept, carriage returns
//! dropped. This is the text of the bytes, not of a screen: a progress bar redrawn with `\r`
//! shows every state it passed through.

/// `data` as plain text.
pub fn plain_text(data: &[u8]) -> String {
    let mut parser = vte::Parser::new();
    let mut text = PlainText(String::with_capacity(data.len()));
    parser.advance(&mut text, data);
    text.0
}

struct PlainText(String);

impl vte::Perform for PlainText {
    fn print(&mut self, c: char) {
        self.0.push(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => self.0.push('\n'),
            b'\t' => self.0.push('\t'),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_and_controls_go_and_lines_stay() {
        assert_eq!(
            plain_text(b"\x1b[?2004l\x1b]0;pwd /tmp\x07\x1b[30m\x1b(B\x1b[m\r/tmp\r\n"),
            "/tmp\n"
        );
        assert_eq!(plain_text(b"a\tb\r\n\x1b[1mbold\x1b[0m\x07"), "a\tb\nbold");
        assert_eq!(plain_text("é ✓\n".as_bytes()), "é ✓\n");
        assert_eq!(plain_text(b"cut \xff here"), "cut \u{fffd} here");
    }
}
