//! The broker's own limits on where and as whom sessions run (`--allow-containers`,
//! `--deny-user`, `--allow-root`), checked by [`crate::Broker::spawn`] before a session exists.
//! They sit below session-api and the gateway, so no credential of theirs, an admin's
//! included, reaches past them: whoever may register instances still gets only the containers
//! and users the broker's operator allows.
//!
//! Root is decided by uid, not by name: a Docker exec without a user runs as the container's
//! configured user (root when it has none), and a name is looked up in the container's own
//! `/etc/passwd`, so `toor:x:0:0` is root too. A name the broker cannot look up while a user
//! rule is in force is refused rather than guessed.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Which containers may host sessions and which users sessions may not run as.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct SpawnPolicy {
    /// The containers sessions may run in: `name:GLOB` (or just GLOB) for a container's name,
    /// `label:KEY` or `label:KEY=VALUE` for a label it carries; repeat or separate with commas.
    /// Unset: every container of the engine.
    #[arg(
        long = "allow-containers",
        env = "PTYHUB_BROKER_ALLOW_CONTAINERS",
        value_delimiter = ',',
        value_name = "RULE"
    )]
    pub allowed_containers: Vec<ContainerRule>,
    /// A user (name or uid) no session may run as, on any target, local ones included (where
    /// a session names no user, the broker's own); repeat or separate with commas.
    #[arg(
        long = "deny-user",
        env = "PTYHUB_BROKER_DENY_USERS",
        value_delimiter = ',',
        value_name = "USER"
    )]
    pub denied_users: Vec<String>,
    /// Let sessions in containers run as root (uid 0, whatever its name), which they may not by
    /// default: a container's root is the first step to the host's.
    #[arg(long, env = "PTYHUB_BROKER_ALLOW_ROOT")]
    pub allow_root: bool,
}

/// One entry of `--allow-containers`: `name:GLOB` (or a bare GLOB) matches the container's
/// name, `label:KEY` a label it carries, `label:KEY=VALUE` a label with that value.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerRule {
    Name(glob::Pattern),
    Label { key: String, value: Option<String> },
}

/// What the policy needs to know of a container.
#[derive(Debug, Clone, Copy)]
pub struct ContainerFacts<'a> {
    /// Without Docker's leading `/`.
    pub name: &'a str,
    pub labels: &'a HashMap<String, String>,
}

/// Whom a session would run as, as far as the broker could tell before starting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUser {
    /// As named (or as the uid's entry in the passwd file names it).
    pub name: Option<String>,
    /// `None` when the name could not be looked up.
    pub uid: Option<u32>,
}

/// Why the policy refused a spawn. Each is PERMISSION_DENIED on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyRefusal {
    #[error("container {0} is not one this broker may run sessions in (--allow-containers)")]
    ContainerNotAllowed(String),
    #[error("this broker does not run sessions as root in containers (--allow-root allows it)")]
    Root,
    /// [`PolicyRefusal::Root`] when an instance is registered: the whole sentence, with what to
    /// do instead.
    #[error("{0}")]
    RootTarget(String),
    #[error("this broker does not run sessions as user {0} (--deny-user)")]
    DeniedUser(String),
    #[error("cannot tell whether user {user} is allowed: {reason}")]
    UnknownUser { user: String, reason: String },
}

/// A passwd file's entries: name and uid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passwd {
    entries: Vec<(String, u32)>,
}

impl Passwd {
    /// Reads `/etc/passwd` text; malformed lines are skipped.
    pub fn parse(text: &str) -> Self {
        let entries = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?.trim();
                let _password = fields.next()?;
                let uid = fields.next()?.trim().parse().ok()?;
                (!name.is_empty()).then(|| (name.to_owned(), uid))
            })
            .collect();
        Self { entries }
    }

    pub fn uid_of(&self, name: &str) -> Option<u32> {
        self.entries
            .iter()
            .find(|(entry, _)| entry == name)
            .map(|(_, uid)| *uid)
    }

    pub fn name_of(&self, uid: u32) -> Option<&str> {
        self.entries
            .iter()
            .find(|(_, entry)| *entry == uid)
            .map(|(name, _)| name.as_str())
    }
}

impl SpawnPolicy {
    /// Whether a user rule is in force for this kind of target, so that an unknown user must be
    /// refused rather than let through.
    pub fn checks_users(&self, docker: bool) -> bool {
        (docker && !self.allow_root) || !self.denied_users.is_empty()
    }

    /// Refuses a container no `--allow-containers` rule matches (none given: all match).
    pub fn check_container(&self, container: ContainerFacts<'_>) -> Result<(), PolicyRefusal> {
        if self.allowed_containers.is_empty()
            || self
                .allowed_containers
                .iter()
                .any(|rule| rule.matches(container))
        {
            Ok(())
        } else {
            Err(PolicyRefusal::ContainerNotAllowed(
                container.name.to_owned(),
            ))
        }
    }

    /// Refuses root in a container (unless allowed) and every denied user. `uid_of` looks the
    /// denied names up where the session would run, so a denied user is refused by number too.
    pub fn check_user(
        &self,
        user: &SessionUser,
        docker: bool,
        uid_of: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<(), PolicyRefusal> {
        let shown = || {
            user.name
                .clone()
                .or_else(|| user.uid.map(|uid| uid.to_string()))
                .unwrap_or_default()
        };
        if docker
            && !self.allow_root
            && (user.uid == Some(0) || user.name.as_deref() == Some("root"))
        {
            return Err(PolicyRefusal::Root);
        }
        for denied in &self.denied_users {
            let denied_uid = denied
                .parse::<u32>()
                .ok()
                .or_else(|| uid_of(denied))
                .or_else(|| (denied == "root").then_some(0));
            let same_name = user.name.as_deref() == Some(denied.as_str());
            let same_uid = user.uid.is_some() && user.uid == denied_uid;
            if same_name || same_uid {
                return Err(PolicyRefusal::DeniedUser(shown()));
            }
        }
        if user.uid.is_none() && self.checks_users(docker) {
            return Err(PolicyRefusal::UnknownUser {
                user: shown(),
                reason: "it is not in the target's passwd file".to_owned(),
            });
        }
        Ok(())
    }
}

impl ContainerRule {
    fn matches(&self, container: ContainerFacts<'_>) -> bool {
        match self {
            ContainerRule::Name(pattern) => pattern.matches(container.name),
            ContainerRule::Label { key, value } => match (container.labels.get(key), value) {
                (Some(_), None) => true,
                (Some(found), Some(wanted)) => found == wanted,
                (None, _) => false,
            },
        }
    }
}

impl FromStr for ContainerRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(label) = text.strip_prefix("label:") {
            let (key, value) = match label.split_once('=') {
                Some((key, value)) => (key, Some(value.to_owned())),
                None => (label, None),
            };
            if key.is_empty() {
                return Err(format!(
                    "{text:?}: a label rule needs a key (label:KEY[=VALUE])"
                ));
            }
            return Ok(ContainerRule::Label {
                key: key.to_owned(),
                value,
            });
        }
        let pattern = text.strip_prefix("name:").unwrap_or(text);
        if pattern.is_empty() {
            return Err("an empty container pattern (use name:GLOB or label:KEY[=VALUE])".into());
        }
        glob::Pattern::new(pattern)
            .map(ContainerRule::Name)
            .map_err(|error| format!("{pattern:?} is not a glob pattern: {error}"))
    }
}

impl fmt::Display for ContainerRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContainerRule::Name(pattern) => write!(f, "name:{pattern}"),
            ContainerRule::Label { key, value: None } => write!(f, "label:{key}"),
            ContainerRule::Label {
                key,
                value: Some(value),
            } => write!(f, "label:{key}={value}"),
        }
    }
}

/// The user part of Docker's `user[:group]`, with the container's configured user standing in
/// for none, and root for neither (what the engine does).
pub fn docker_exec_user<'a>(requested: Option<&'a str>, configured: Option<&'a str>) -> &'a str {
    let user = [requested, configured]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|user| !user.is_empty())
        .unwrap_or("root");
    user.split(':').next().unwrap_or(user)
}

/// Whom a user as Docker or a passwd file names it (a name or a uid) is, with `passwd` when
/// the broker could read one.
pub fn resolve_user(user: &str, passwd: Option<&Passwd>) -> SessionUser {
    match user.parse::<u32>() {
        Ok(uid) => SessionUser {
            name: passwd
                .and_then(|passwd| passwd.name_of(uid))
                .map(str::to_owned),
            uid: Some(uid),
        },
        Err(_) => SessionUser {
            name: Some(user.to_owned()),
            uid: passwd
                .and_then(|passwd| passwd.uid_of(user))
                .or_else(|| (user == "root").then_some(0)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\ntoor:x:0:0::/:/bin/sh\n\
                          tester:x:1000:1000::/home/tester:/bin/sh\nbroken line\n";

    fn policy() -> SpawnPolicy {
        SpawnPolicy::default()
    }

    fn lookup(passwd: &Passwd) -> impl Fn(&str) -> Option<u32> + '_ {
        |name| passwd.uid_of(name)
    }

    fn nothing(_: &str) -> Option<u32> {
        None
    }

    #[test]
    fn root_is_refused_in_containers_by_uid_whatever_it_is_called() {
        let passwd = Passwd::parse(PASSWD);
        for user in ["root", "0", "toor"] {
            let user = resolve_user(user, Some(&passwd));
            assert_eq!(
                policy().check_user(&user, true, &lookup(&passwd)),
                Err(PolicyRefusal::Root),
                "{user:?}"
            );
        }
        let tester = resolve_user("tester", Some(&passwd));
        assert_eq!(policy().check_user(&tester, true, &lookup(&passwd)), Ok(()));
        let allowed = SpawnPolicy {
            allow_root: true,
            ..policy()
        };
        let root = resolve_user("root", Some(&passwd));
        assert_eq!(allowed.check_user(&root, true, &lookup(&passwd)), Ok(()));
        // Local sessions are limited by --deny-user alone.
        assert_eq!(policy().check_user(&root, false, &nothing), Ok(()));
    }

    #[test]
    fn no_user_means_the_containers_and_then_root() {
        assert_eq!(docker_exec_user(None, None), "root");
        assert_eq!(docker_exec_user(Some(""), Some("tester")), "tester");
        assert_eq!(docker_exec_user(Some("1000:1000"), Some("root")), "1000");
        assert_eq!(docker_exec_user(None, Some(" ")), "root");
    }

    #[test]
    fn an_unknown_name_is_refused_while_a_user_rule_is_in_force() {
        let stranger = resolve_user("stranger", None);
        assert!(matches!(
            policy().check_user(&stranger, true, &nothing),
            Err(PolicyRefusal::UnknownUser { .. })
        ));
        let open = SpawnPolicy {
            allow_root: true,
            ..policy()
        };
        assert_eq!(open.check_user(&stranger, true, &nothing), Ok(()));
    }

    #[test]
    fn denied_users_are_refused_by_name_and_by_uid() {
        let passwd = Passwd::parse(PASSWD);
        let denying = SpawnPolicy {
            denied_users: vec!["tester".into()],
            allow_root: true,
            ..policy()
        };
        for user in ["tester", "1000"] {
            let user = resolve_user(user, Some(&passwd));
            assert_eq!(
                denying.check_user(&user, false, &lookup(&passwd)),
                Err(PolicyRefusal::DeniedUser("tester".into()))
            );
        }
        let root = resolve_user("root", Some(&passwd));
        assert_eq!(denying.check_user(&root, true, &lookup(&passwd)), Ok(()));
        let denying_root = SpawnPolicy {
            denied_users: vec!["root".into()],
            ..policy()
        };
        let toor = resolve_user("toor", Some(&passwd));
        assert!(
            denying_root
                .check_user(&toor, false, &lookup(&passwd))
                .is_err()
        );
    }

    #[test]
    fn container_rules_match_names_and_labels() {
        let labels = HashMap::from([("ptyhub.allow".to_owned(), "yes".to_owned())]);
        let container = ContainerFacts {
            name: "web-1",
            labels: &labels,
        };
        let with = |rules: &[&str]| SpawnPolicy {
            allowed_containers: rules.iter().map(|rule| rule.parse().unwrap()).collect(),
            ..policy()
        };
        assert!(with(&[]).check_container(container).is_ok());
        assert!(with(&["web-*"]).check_container(container).is_ok());
        assert!(with(&["name:web-?"]).check_container(container).is_ok());
        assert!(
            with(&["label:ptyhub.allow"])
                .check_container(container)
                .is_ok()
        );
        assert!(
            with(&["label:ptyhub.allow=yes"])
                .check_container(container)
                .is_ok()
        );
        assert!(
            with(&["db-*", "label:ptyhub.allow=yes"])
                .check_container(container)
                .is_ok()
        );
        for refused in [&["db-*"][..], &["label:ptyhub.allow=no"], &["label:other"]] {
            assert_eq!(
                with(refused).check_container(container),
                Err(PolicyRefusal::ContainerNotAllowed("web-1".into())),
                "{refused:?}"
            );
        }
        assert!("label:".parse::<ContainerRule>().is_err());
        assert!("".parse::<ContainerRule>().is_err());
        assert!("name:[".parse::<ContainerRule>().is_err());
        assert_eq!(
            "label:a=b".parse::<ContainerRule>().unwrap().to_string(),
            "label:a=b"
        );
    }
}
