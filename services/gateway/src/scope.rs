//! What a principal may do, in one module: which instances and sessions its credential covers,
//! whether it is an admin, whether it may choose a session's command, and a share link's
//! restrictions (it only views, one instance or one session of it, without the instance's
//! settings or the session's commands). [`Access`] is the rule, the same on every surface;
//! [`crate::authorize`] applies it to the instance and session a request names, and
//! [`SeenBy`] to the records an answer carries: the one view of an instance, a session and a
//! change for REST, events, MCP and the gRPC proxy alike. It depends on the records
//! ([`crate::domain`]) and nothing else of the gateway, so that the principal
//! ([`crate::auth`]) can name it.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use crate::domain::{
    Attendee, ControlRequest, ControlState, Instance, ReservedControl, Screen, ScreenWaitResult,
    Session, SessionChange, TerminalActivity,
};
use crate::error::ApiError;

/// A record as a credential may see it. Every surface answers through these, so that what a
/// share link does not see is said once (the gRPC proxy converts its messages to the records
/// and back to apply it).
pub trait SeenBy: Sized {
    fn seen_by(self, access: &Access) -> Self;
}

impl SeenBy for Instance {
    /// A credential that may not read an instance's settings sees no environment, command,
    /// user, working directory or container.
    fn seen_by(self, access: &Access) -> Self {
        if access.sees_instance_settings() {
            return self;
        }
        Self {
            target: None,
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: String::new(),
            user: String::new(),
            ..self
        }
    }
}

impl SeenBy for TerminalActivity {
    /// A credential that may not read a session's commands (a share link's) sees what the
    /// terminal is doing but not where its shell is nor which command runs: both are of the
    /// commands it may not list.
    fn seen_by(self, access: &Access) -> Self {
        if access.sees_commands() {
            return self;
        }
        Self {
            cwd: None,
            running_command: None,
            ..self
        }
    }
}

impl SeenBy for Session {
    /// What its terminal is doing and who is attached, as the credential sees them.
    fn seen_by(self, access: &Access) -> Self {
        Self {
            terminal: self.terminal.map(|terminal| terminal.seen_by(access)),
            presence: self
                .presence
                .into_iter()
                .map(|attendee| attendee.seen_by(access))
                .collect(),
            ..self
        }
    }
}

impl SeenBy for Attendee {
    /// A credential that may not know who else works in a session (a share link's) sees that
    /// someone is attached, in which role, through what and whether typing, but not who: the
    /// subjects of other people's credentials are not the share's to hand out.
    fn seen_by(self, access: &Access) -> Self {
        if access.sees_principals() {
            return self;
        }
        Self {
            principal: String::new(),
            ..self
        }
    }
}

impl SeenBy for ControlState {
    /// Who controls, for whom control is reserved and who asks, by the rule of presence: a
    /// credential that may not know who works in a session sees that they do, not who.
    fn seen_by(self, access: &Access) -> Self {
        if access.sees_principals() {
            return self;
        }
        Self {
            controller: self.controller.map(|attendee| attendee.seen_by(access)),
            reserved_for: self.reserved_for.map(|reserved| ReservedControl {
                principal: String::new(),
                ..reserved
            }),
            requests: self
                .requests
                .into_iter()
                .map(|request| ControlRequest {
                    principal: String::new(),
                    ..request
                })
                .collect(),
        }
    }
}

impl SeenBy for Screen {
    /// What the terminal was doing as the screen was read, as the credential sees it.
    fn seen_by(self, access: &Access) -> Self {
        Self {
            terminal: self.terminal.map(|terminal| terminal.seen_by(access)),
            ..self
        }
    }
}

impl SeenBy for ScreenWaitResult {
    /// The screen, and what the terminal was doing as the wait answered, as the credential
    /// sees them.
    fn seen_by(self, access: &Access) -> Self {
        Self {
            screen: self.screen.seen_by(access),
            terminal: self.terminal.map(|terminal| terminal.seen_by(access)),
            ..self
        }
    }
}

impl SeenBy for SessionChange {
    /// The session as the credential sees it, and the commands that started or ended only for
    /// one that may read commands.
    fn seen_by(self, access: &Access) -> Self {
        Self {
            session: self.session.seen_by(access),
            commands: commands_seen_by(self.commands, access),
            kind: self.kind,
        }
    }
}

/// The commands of a change as `access` sees them: none for a credential that may not read a
/// session's commands. Generic, so the gRPC proxy's protobuf commands follow the same rule.
pub fn commands_seen_by<C>(commands: Vec<C>, access: &Access) -> Vec<C> {
    if access.sees_commands() {
        commands
    } else {
        Vec::new()
    }
}

impl NamedInstance for Instance {
    fn id(&self) -> &str {
        &self.id
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// An instance as a scope sees it: by its id and its name, either of which a credential may
/// list.
pub trait NamedInstance {
    fn id(&self) -> &str;
    fn name(&self) -> &str;
}

/// The instances a principal may use, whether it is an admin, whether it may choose the command
/// of the sessions it creates, and whether it may only view (a share link's, of an instance or of
/// one session).
#[derive(Debug, Clone)]
pub struct Access {
    all_instances: bool,
    /// Instance ids or names.
    instances: BTreeSet<String>,
    admin: bool,
    /// Granted without admin by a JWT's `choose_command` claim.
    choose_command: bool,
    /// Never controls, types, resizes, resets, renames, closes or creates, on any surface.
    viewer_only: bool,
    /// The one session it covers, when it covers one session only.
    session: Option<String>,
    /// Whether it sees a session's past (every credential but a share link made without it).
    history: bool,
}

impl Access {
    /// Every instance, and registering and deleting them.
    pub fn admin() -> Self {
        Self {
            all_instances: true,
            instances: BTreeSet::new(),
            admin: true,
            choose_command: true,
            viewer_only: false,
            session: None,
            history: true,
        }
    }

    /// The listed instances (ids or names; `*` means all).
    pub fn scoped(instances: impl IntoIterator<Item = String>, admin: bool) -> Self {
        let mut all_instances = false;
        let mut listed = BTreeSet::new();
        for instance in instances {
            if instance == "*" {
                all_instances = true;
            } else {
                listed.insert(instance);
            }
        }
        Self {
            all_instances,
            instances: listed,
            admin,
            choose_command: admin,
            viewer_only: false,
            session: None,
            history: true,
        }
    }

    /// The same scope, and also choosing commands when `allowed` (admins always may).
    pub fn with_command_choice(mut self, allowed: bool) -> Self {
        self.choose_command = self.admin || allowed;
        self
    }

    /// A share link's: one instance (by id), or one session of it, as a viewer only, and of
    /// the present only (see [`Access::with_history`]).
    pub fn shared(instance_id: &str, session_id: Option<&str>) -> Self {
        Self {
            viewer_only: true,
            session: session_id.map(str::to_owned),
            history: false,
            ..Self::scoped([instance_id.to_owned()], false)
        }
    }

    /// The same access, seeing a session's past or not: a share link's creator chooses.
    pub fn with_history(mut self, history: bool) -> Self {
        self.history = history;
        self
    }

    /// Whether it sees a session's past: a replay of the output from before its stream opened,
    /// and a screen's scrollback. A share link made without `history` shows the present screen
    /// and what follows, and nothing its viewer did not see happen.
    pub fn sees_history(&self) -> bool {
        self.history
    }

    /// Refuses a screen's scrollback (`lines` of it above the visible rows), which is the
    /// session's past, to a credential that sees only the present, with 403. The visible rows
    /// are the present: anyone may read them.
    pub fn check_scrollback(&self, lines: u32) -> Result<(), ApiError> {
        if lines > 0 && !self.history {
            return Err(ApiError::forbidden(
                "scrollback is not allowed: this share link shows the present screen only \
                 (its creator may make one with history)",
            ));
        }
        Ok(())
    }

    /// Whether it may only view.
    pub fn is_viewer_only(&self) -> bool {
        self.viewer_only
    }

    /// Whether it may read how an instance runs its sessions: the environment (which holds
    /// secrets such as API keys), the command, the user and the container. A viewer-only
    /// credential (a share link's) watches a terminal and learns nothing else.
    pub fn sees_instance_settings(&self) -> bool {
        !self.viewer_only
    }

    /// Whether it may read what a session's shell ran: its commands, their output and the
    /// working directory the shell reports. A share link's credential shows the terminal from
    /// when it is opened; the commands are the session's past.
    pub fn sees_commands(&self) -> bool {
        !self.viewer_only
    }

    /// Whether it may know who is attached to a session: the principals in its presence. A
    /// share link's credential watches a terminal, not the people at it.
    pub fn sees_principals(&self) -> bool {
        !self.viewer_only
    }

    /// The one session it covers, when it is restricted to one.
    pub fn only_session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Whether it covers this session of an instance it covers.
    pub fn allows_session(&self, session_id: &str) -> bool {
        self.session
            .as_deref()
            .is_none_or(|only| only == session_id)
    }

    /// Whether it covers this session record (of an instance it covers).
    pub fn allows_session_record(&self, session: &Session) -> bool {
        let mut buffer = uuid::Uuid::encode_buffer();
        self.allows_session(session.id.hyphenated().encode_lower(&mut buffer))
    }

    /// Refuses what only a controller may do (type, resize, reset, rename, close, create,
    /// share) to a viewer-only credential, with 403.
    pub fn require_control(&self, action: &str) -> Result<(), ApiError> {
        if self.viewer_only {
            return Err(ApiError::forbidden(format!(
                "{action} is not allowed: this credential may only view"
            )));
        }
        Ok(())
    }

    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether a session this principal creates may run another command than its instance's.
    /// The instance's command is a restriction: whoever may only use an instance gets the
    /// program its admin chose for it, on every surface.
    pub fn may_choose_command(&self) -> bool {
        self.choose_command
    }

    /// Refuses a command override the principal may not make, with one message on every
    /// surface; no override (`None` or empty) is always fine.
    pub fn check_command_override(&self, command: &[String]) -> Result<(), ApiError> {
        if command.is_empty() || self.may_choose_command() {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "choosing a session's command needs an admin credential or the choose_command claim",
            ))
        }
    }

    pub fn covers_all_instances(&self) -> bool {
        self.all_instances
    }

    /// Whether the scope names this reference literally (or covers everything). Used before the
    /// instance is known, so an unknown instance outside the scope gives 403 rather than
    /// revealing that it does not exist.
    pub fn names(&self, instance_reference: &str) -> bool {
        self.all_instances || self.instances.contains(instance_reference)
    }

    /// Whether the scope covers this instance, by id or by name.
    pub fn allows(&self, instance: &impl NamedInstance) -> bool {
        self.allows_id_or_name(instance.id(), instance.name())
    }

    /// No instance at all (a share's principal before its share is checked).
    pub fn none() -> Self {
        Self::scoped(Vec::new(), false)
    }

    /// The scope as a list of ids and names, `*` standing for all.
    pub fn listed(&self) -> Vec<String> {
        let mut listed: Vec<String> = self.instances.iter().cloned().collect();
        if self.all_instances {
            listed.insert(0, "*".to_owned());
        }
        listed
    }

    /// Same as [`Access::allows`] for an instance known only by its id and name.
    pub fn allows_id_or_name(&self, id: &str, name: &str) -> bool {
        self.all_instances || self.instances.contains(id) || self.instances.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ChangeKind, RecordMode, SessionStatus, Target, TerminalActivity};

    fn instance() -> Instance {
        Instance {
            id: "6b1c1a52-0000-4c5f-9b36-2a4f0f2c7d10".to_owned(),
            name: "web".to_owned(),
            target: Some(Target::Docker {
                container: "web-1".to_owned(),
            }),
            command: vec!["bash".to_owned()],
            env: BTreeMap::from([("API_KEY".to_owned(), "secret".to_owned())]),
            cwd: "/srv".to_owned(),
            user: "app".to_owned(),
            max_sessions: 5,
            labels: BTreeMap::new(),
            broker_id: "local".to_owned(),
            created_at: None,
            live_sessions: 1,
            record: RecordMode::Off,
            record_is_default: true,
            shell_integration: true,
            control_grant_timeout_secs: None,
        }
    }

    fn session() -> Session {
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a time");
        Session {
            id: uuid::Uuid::from_u128(1),
            instance_id: uuid::Uuid::from_u128(2),
            name: "Session 1".to_owned(),
            status: SessionStatus::Active,
            close_reason: None,
            exit: None,
            aliases: Vec::new(),
            size: ptyhub_model::TerminalSize::new(80, 24).expect("a size"),
            broker_id: "local".to_owned(),
            created_at: at,
            last_activity_at: at,
            closed_at: None,
            attached_clients: 0,
            title: None,
            last_bell_at: None,
            terminal: Some(TerminalActivity {
                cwd: Some("/src".to_owned()),
                integrated: true,
                running_command: Some(7),
                ..TerminalActivity::default()
            }),
            presence: vec![Attendee {
                principal: "alice".to_owned(),
                role: ptyhub_model::Role::Controller,
                surface: "web".to_owned(),
                since: at,
                typing: true,
            }],
            control_mode: ptyhub_model::ControlMode::Shared,
        }
    }

    fn share() -> Access {
        Access::shared("6b1c1a52-0000-4c5f-9b36-2a4f0f2c7d10", None)
    }

    #[test]
    fn a_share_sees_neither_where_the_shell_is_nor_which_command_runs() {
        let seen = session().seen_by(&share());
        let terminal = seen.terminal.expect("what the terminal is doing");
        assert_eq!(terminal.cwd, None);
        assert_eq!(terminal.running_command, None);
        assert!(terminal.integrated, "the rest of the terminal is seen");
        for access in [Access::admin(), Access::scoped(["web".to_owned()], false)] {
            assert_eq!(session().seen_by(&access), session());
        }
    }

    #[test]
    fn a_share_sees_who_is_attached_but_not_their_names() {
        let seen = session().seen_by(&share());
        let attendee = &seen.presence[0];
        assert_eq!(attendee.principal, "");
        assert_eq!(
            (attendee.role, attendee.surface.as_str(), attendee.typing),
            (ptyhub_model::Role::Controller, "web", true)
        );
        let seen = session().seen_by(&Access::scoped(["web".to_owned()], false));
        assert_eq!(seen.presence[0].principal, "alice");
    }

    #[test]
    fn a_share_sees_a_change_without_its_commands_and_an_instance_without_its_settings() {
        let command = ptyhub_model::Command {
            id: 7,
            command: "make".to_owned(),
            cwd: None,
            started_at: std::time::UNIX_EPOCH,
            ended_at: None,
            exit_code: None,
            output_start: 0,
            output_end: None,
        };
        let change = SessionChange {
            kind: ChangeKind::Terminal,
            session: session(),
            commands: vec![command],
        };
        let seen = change.clone().seen_by(&share());
        assert!(seen.commands.is_empty());
        assert_eq!(seen.session, session().seen_by(&share()));
        assert_eq!(
            change.clone().seen_by(&Access::admin()).commands,
            change.commands
        );

        let seen = instance().seen_by(&share());
        assert_eq!(seen.target, None);
        assert!(seen.command.is_empty() && seen.env.is_empty());
        assert!(seen.cwd.is_empty() && seen.user.is_empty());
        assert_eq!(
            (seen.id.as_str(), seen.name.as_str()),
            ("6b1c1a52-0000-4c5f-9b36-2a4f0f2c7d10", "web")
        );
        assert_eq!(instance().seen_by(&Access::admin()).env, instance().env);
    }

    #[test]
    fn a_share_of_one_session_covers_that_record_only() {
        let only = Access::shared("web", Some(&uuid::Uuid::from_u128(1).to_string()));
        assert!(only.allows_session_record(&session()));
        let other = Session {
            id: uuid::Uuid::from_u128(3),
            ..session()
        };
        assert!(!only.allows_session_record(&other));
        assert!(share().allows_session_record(&other));
    }
}
