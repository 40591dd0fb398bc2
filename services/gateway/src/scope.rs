//! What a principal may do, in one module: which instances and sessions its credential covers,
//! whether it is an admin, whether it may choose a session's command, and a share link's
//! restrictions (it only views, one instance or one session of it, without the instance's
//! settings or the session's commands). [`Access`] is the rule, the same on every surface;
//! [`crate::authorize`] applies it to the instance and session a request names. It depends on
//! nothing else of the gateway, so that the principal ([`crate::auth`]) and the records
//! ([`crate::domain`]) can both name it.

use std::collections::BTreeSet;

use crate::error::ApiError;

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
