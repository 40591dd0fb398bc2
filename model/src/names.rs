//! The rules of names and aliases: one rule for instance and session names, one for the three
//! kinds of alias, each with the one message a client is shown.

use std::fmt;

use ptyhub_wire::limits::{MAX_ALIAS_CHARS, is_forbidden_in_names};

use crate::Invalid;

/// What a [`Name`] names: it says so in the message of a refused one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Instance,
    Session,
}

impl NameKind {
    fn subject(self) -> &'static str {
        match self {
            NameKind::Instance => "instance name",
            NameKind::Session => "session name",
        }
    }
}

/// A name of an instance or a session: 1..=255 characters after trimming, with no control,
/// format or bidirectional characters ([`is_forbidden_in_names`]), which would make a name
/// print as another or not at all. Holding one means it was checked and trimmed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    pub const MAX_CHARS: usize = 255;

    /// Checks and trims `raw`.
    pub fn parse(kind: NameKind, raw: &str) -> Result<Self, Invalid> {
        let trimmed = raw.trim();
        let length = trimmed.chars().count();
        if !(1..=Self::MAX_CHARS).contains(&length) {
            return Err(Invalid(format!(
                "{} must be 1 to {} characters after trimming",
                kind.subject(),
                Self::MAX_CHARS
            )));
        }
        if trimmed.chars().any(is_forbidden_in_names) {
            return Err(Invalid(format!(
                "{} must not contain control, format or bidirectional characters",
                kind.subject()
            )));
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A session's name: a [`Name`], and `Session N` when its creator gave none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionName(Name);

impl SessionName {
    /// Checks and trims `raw` as [`Name::parse`] does.
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        Name::parse(NameKind::Session, raw).map(Self)
    }

    /// `Session N`, the default name.
    pub fn numbered(number: u32) -> Self {
        Self(Name(format!("Session {number}")))
    }

    /// The number of a default name (`Session 3` is 3), if this is one.
    pub fn default_number(name: &str) -> Option<u32> {
        let digits = name.strip_prefix("Session ")?;
        if digits.is_empty()
            || digits.starts_with('0')
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        digits.parse().ok()
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// The smallest `N >= 1` such that no name in `names` is `Session N`.
pub fn smallest_free_session_number<'a>(names: impl IntoIterator<Item = &'a str>) -> u32 {
    let mut used: Vec<u32> = names
        .into_iter()
        .filter_map(SessionName::default_number)
        .collect();
    used.sort_unstable();
    used.dedup();
    let mut candidate = 1;
    for number in used {
        if number == candidate {
            candidate += 1;
        } else if number > candidate {
            break;
        }
    }
    candidate
}

/// A name that resolves to one live session of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Alias {
    /// `default`: the legacy single session.
    Default,
    /// `client:<id>`: one per browser tab.
    Client(String),
    /// Any other pre-assigned external id.
    External(String),
}

impl Alias {
    const CLIENT_PREFIX: &'static str = "client:";
    /// The longest client id a `client:` alias carries.
    pub const MAX_CLIENT_ID_CHARS: usize = 64;

    /// Checks an alias as the contract defines the three kinds.
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        if raw == "default" {
            return Ok(Alias::Default);
        }
        if let Some(client_id) = raw.strip_prefix(Self::CLIENT_PREFIX) {
            return Self::client(client_id);
        }
        let valid = (1..=MAX_ALIAS_CHARS).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !valid {
            return Err(Invalid(format!(
                "alias {raw:?} must match ^[A-Za-z0-9_.:-]{{1,{MAX_ALIAS_CHARS}}}$"
            )));
        }
        Ok(Alias::External(raw.to_owned()))
    }

    /// The alias `client:<client_id>` of a browser tab.
    pub fn client(client_id: &str) -> Result<Self, Invalid> {
        if !Self::is_client_id(client_id) {
            return Err(Invalid(format!(
                "client id {client_id:?} must match ^[A-Za-z0-9-]{{1,{}}}$",
                Self::MAX_CLIENT_ID_CHARS
            )));
        }
        Ok(Alias::Client(client_id.to_owned()))
    }

    /// Whether `client_id` may follow `client:`.
    pub fn is_client_id(client_id: &str) -> bool {
        (1..=Self::MAX_CLIENT_ID_CHARS).contains(&client_id.len())
            && client_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    }

    /// The stored and displayed form.
    pub fn to_text(&self) -> String {
        match self {
            Alias::Default => "default".to_owned(),
            Alias::Client(id) => format!("{}{id}", Self::CLIENT_PREFIX),
            Alias::External(text) => text.clone(),
        }
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn names_are_trimmed_and_say_what_they_name_when_refused() {
        assert_eq!(
            Name::parse(NameKind::Instance, "  build  ")
                .unwrap()
                .as_str(),
            "build"
        );
        let empty = Name::parse(NameKind::Session, "   ").unwrap_err();
        assert_eq!(
            empty.message(),
            "session name must be 1 to 255 characters after trimming"
        );
        let long = Name::parse(NameKind::Instance, &"x".repeat(256)).unwrap_err();
        assert!(long.message().starts_with("instance name must be 1 to 255"));
        assert!(Name::parse(NameKind::Session, &"日".repeat(255)).is_ok());
        let bidi = Name::parse(NameKind::Session, "evil\u{202e}txt").unwrap_err();
        assert!(bidi.message().contains("bidirectional"), "{bidi}");
    }

    #[test]
    fn default_names_are_numbered_from_the_smallest_free_number() {
        assert_eq!(SessionName::default_number("Session 12"), Some(12));
        for not_default in [
            "Session 0",
            "Session 01",
            "Session ",
            "Session x",
            "session 1",
        ] {
            assert_eq!(
                SessionName::default_number(not_default),
                None,
                "{not_default}"
            );
        }
        assert_eq!(smallest_free_session_number([]), 1);
        assert_eq!(
            smallest_free_session_number(["Session 1", "Session 3", "build", "Session 2"]),
            4
        );
        assert_eq!(smallest_free_session_number(["Session 2"]), 1);
    }

    #[test]
    fn the_three_kinds_of_alias_are_told_apart() {
        assert_eq!(Alias::parse("default").unwrap(), Alias::Default);
        assert_eq!(
            Alias::parse("client:tab-1").unwrap(),
            Alias::Client("tab-1".to_owned())
        );
        assert_eq!(
            Alias::parse("ci:job.7").unwrap(),
            Alias::External("ci:job.7".to_owned())
        );
        for bad in ["", "has space", "client:", "client:a_b", &"a".repeat(129)] {
            assert!(Alias::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            Alias::parse("client:")
                .unwrap_err()
                .message()
                .starts_with("client id")
        );
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(SessionName::parse("  build  ").unwrap().as_str(), "build");
        assert!(SessionName::parse("").is_err());
        assert!(SessionName::parse("   ").is_err());
        assert!(SessionName::parse(&"x".repeat(256)).is_err());
        assert!(SessionName::parse(&"é".repeat(255)).is_ok());
        assert!(SessionName::parse("a\u{7}b").is_err());
        assert!(SessionName::parse("a\nb").is_err());
        assert!(SessionName::parse("a\u{9b}b").is_err());
    }

    #[test]
    fn smallest_free_number_fills_holes() {
        assert_eq!(smallest_free_session_number([]), 1);
        assert_eq!(smallest_free_session_number(["Session 1", "Session 2"]), 3);
        assert_eq!(smallest_free_session_number(["Session 1", "Session 3"]), 2);
        assert_eq!(smallest_free_session_number(["Session 2", "build"]), 1);
        assert_eq!(
            smallest_free_session_number(["Session 01", "Session x", "Session 1"]),
            2
        );
    }

    #[test]
    fn aliases_follow_the_contract() {
        assert_eq!(Alias::parse("default").unwrap(), Alias::Default);
        assert_eq!(
            Alias::parse("client:tab-1").unwrap(),
            Alias::Client("tab-1".to_owned())
        );
        assert!(Alias::parse("client:").is_err());
        assert!(Alias::parse("client:a_b").is_err());
        assert!(Alias::parse(&format!("client:{}", "a".repeat(65))).is_err());
        assert_eq!(
            Alias::parse("conv.42:x_y-z").unwrap(),
            Alias::External("conv.42:x_y-z".to_owned())
        );
        assert!(Alias::parse("").is_err());
        assert!(Alias::parse("has space").is_err());
        assert!(Alias::parse(&"a".repeat(129)).is_err());
        assert_eq!(Alias::Client("t".to_owned()).to_text(), "client:t");
    }

    proptest! {
        /// Every alias that parses is written back as the text it came from, and parses again
        /// to the same alias: what is stored is what was asked for.
        #[test]
        fn an_alias_is_stored_as_it_was_given(raw in "(client:)?[A-Za-z0-9_.:-]{0,130}") {
            if let Ok(alias) = Alias::parse(&raw) {
                prop_assert_eq!(alias.to_text(), raw.clone());
                prop_assert_eq!(Alias::parse(&alias.to_text()).unwrap(), alias);
            }
        }

        /// A name that parses parses again to itself: trimming and checking are idempotent.
        #[test]
        fn a_checked_name_is_checked_again_unchanged(raw in "\\PC{0,260}") {
            if let Ok(name) = Name::parse(NameKind::Session, &raw) {
                prop_assert_eq!(Name::parse(NameKind::Session, name.as_str()).unwrap(), name);
            }
        }
    }

    /// The contract's alias rule, written from docs/CONTRACT.md rather than from the code:
    /// `default`; `client:` and an id of 1 to 64 of `A-Za-z0-9-`; else 1 to 128 of
    /// `A-Za-z0-9_.:-`.
    fn alias_by_the_contract(raw: &str) -> Option<Alias> {
        let all_of = |text: &str, extra: &str, max: usize| {
            (1..=max).contains(&text.chars().count())
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
        };
        if raw == "default" {
            Some(Alias::Default)
        } else if let Some(id) = raw.strip_prefix("client:") {
            all_of(id, "-", 64).then(|| Alias::Client(id.to_owned()))
        } else {
            all_of(raw, "_.:-", 128).then(|| Alias::External(raw.to_owned()))
        }
    }

    /// Text near the alias rule's edges: its prefixes, its characters and their neighbours
    /// (`_` in a client id, `/`, a space, non-ASCII), lengths around 64 and 128.
    fn alias_like() -> impl Strategy<Value = String> {
        prop_oneof![
            "(client:|default|Default|client|)[A-Za-z0-9_.:/ é-]{0,10}",
            "client:[A-Za-z0-9-]{62,66}",
            "client:[A-Za-z0-9_-]{1,8}",
            "[A-Za-z0-9_.:-]{126,130}",
            "\\PC{0,20}",
            ".{0,20}",
        ]
    }

    /// Characters a name may hold, and ones it may not (controls, format and bidirectional
    /// characters, line and paragraph separators), as the contract lists them: each with
    /// whether a name may hold it.
    fn name_character() -> impl Strategy<Value = (char, bool)> {
        let allowed = prop::sample::select(vec![
            'a', 'Z', '0', ' ', '-', '_', 'é', '日', '🙂', '\u{a0}', '\u{3000}', '\u{fffd}',
        ]);
        let forbidden = prop::sample::select(vec![
            '\0', '\t', '\n', '\r', '\u{1b}', '\u{7f}', '\u{85}', '\u{9b}', '\u{202e}', '\u{202a}',
            '\u{2066}', '\u{200b}', '\u{200d}', '\u{200e}', '\u{feff}', '\u{61c}', '\u{2028}',
            '\u{2029}',
        ]);
        prop_oneof![
            8 => allowed.prop_map(|c| (c, true)),
            1 => forbidden.prop_map(|c| (c, false)),
        ]
    }

    proptest! {
        /// Any text is an alias exactly when the contract says so, of the kind it says.
        #[test]
        fn fuzz_aliases_are_what_the_contract_says(raw in alias_like()) {
            prop_assert_eq!(Alias::parse(&raw).ok(), alias_by_the_contract(&raw), "{:?}", raw);
        }

        /// A client id is accepted alone exactly when it is accepted after `client:`, and its
        /// alias is written back as `client:<id>`.
        #[test]
        fn fuzz_client_ids_are_one_rule(id in prop_oneof!["[A-Za-z0-9_-]{0,66}", ".{0,8}"]) {
            let alone = Alias::client(&id);
            prop_assert_eq!(alone.is_ok(), Alias::is_client_id(&id));
            prop_assert_eq!(alone.clone().ok(), Alias::parse(&format!("client:{id}")).ok());
            match alone {
                Ok(alias) => prop_assert_eq!(alias.to_text(), format!("client:{id}")),
                Err(refused) => prop_assert!(refused.message().starts_with("client id")),
            }
        }

        /// A name is accepted exactly when, trimmed, it has 1 to 255 characters and none the
        /// contract forbids; it is kept trimmed, and a refusal names what was refused.
        #[test]
        fn fuzz_names_are_what_the_contract_says(
            characters in prop::collection::vec(name_character(), 0..12),
            padding in prop::sample::select(vec!["", " ", "\t", "\n ", "\u{a0}", "\u{2028}"]),
            long in prop_oneof![Just(0usize), 240..260usize],
        ) {
            let core: String =
                characters.iter().map(|(c, _)| *c).collect::<String>() + &"x".repeat(long);
            let raw = format!("{padding}{core}{padding}");
            let trimmed = raw.trim();
            let forbidden: Vec<char> = characters
                .iter()
                .filter(|(_, allowed)| !allowed)
                .map(|(c, _)| *c)
                .collect();
            let holds_forbidden = trimmed.chars().any(|c| forbidden.contains(&c));
            let valid = (1..=255).contains(&trimmed.chars().count()) && !holds_forbidden;
            for kind in [NameKind::Instance, NameKind::Session] {
                match Name::parse(kind, &raw) {
                    Ok(name) => {
                        prop_assert!(valid, "{:?} was accepted", raw);
                        prop_assert_eq!(name.as_str(), trimmed);
                    }
                    Err(refused) => {
                        prop_assert!(!valid, "{:?} was refused: {}", raw, refused);
                        prop_assert!(refused.message().starts_with(kind.subject()), "{}", refused);
                    }
                }
            }
        }
    }
}
