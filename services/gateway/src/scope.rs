//! What a principal may do, in one module: which instances and sessions its credential covers,
//! whether it is an admin, whether it may choose a session's command, and a share link's
//! restrictions (it only views, one instance or one session of it, without the instance's
//! settings or the session's commands). [`Access`] is the rule; the `AppState::authorize_*`
//! checks below apply it to the instance and session a request names, the same way on every
//! surface.

use std::collections::BTreeSet;

use ptyhub_wire::{ErrorCode, Surface};

use crate::auth::Principal;
use crate::domain::{Instance, Session, SessionStatus};
use crate::error::ApiError;
use crate::state::AppState;

/// What a session id in a path may also be: the session with the `default` alias (the legacy
/// single session), as `/terminal/reset` and the WebSocket's `/terminal` name it.
pub const DEFAULT_SESSION: &str = "default";

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
        }
    }

    /// The same scope, and also choosing commands when `allowed` (admins always may).
    pub fn with_command_choice(mut self, allowed: bool) -> Self {
        self.choose_command = self.admin || allowed;
        self
    }

    /// A share link's: one instance (by id), or one session of it, as a viewer only.
    pub fn shared(instance_id: &str, session_id: Option<&str>) -> Self {
        Self {
            viewer_only: true,
            session: session_id.map(str::to_owned),
            ..Self::scoped([instance_id.to_owned()], false)
        }
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
    pub fn allows(&self, instance: &Instance) -> bool {
        self.all_instances
            || self.instances.contains(&instance.id)
            || self.instances.contains(&instance.name)
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

impl AppState {
    /// [`AppState::authorize_instance`], reporting a refusal for scope (403) to the audit trail
    /// as an attempt through `surface`: what every surface's instance check is.
    pub async fn authorize_instance_through(
        &self,
        principal: &Principal,
        instance_reference: &str,
        surface: Surface,
    ) -> Result<Instance, ApiError> {
        self.authorize_instance(principal, instance_reference)
            .await
            .inspect_err(|error| {
                if error.code == ErrorCode::Forbidden {
                    self.report_refusal(
                        Some(principal),
                        principal.client_address,
                        surface,
                        "forbidden",
                        format!("instance {instance_reference}"),
                    );
                }
            })
    }

    /// Looks up the instance and checks that the principal may use it.
    ///
    /// An unknown instance the scope does not name is 403, not 404, so a scoped token cannot
    /// probe which instances exist.
    pub async fn authorize_instance(
        &self,
        principal: &Principal,
        instance_reference: &str,
    ) -> Result<Instance, ApiError> {
        let instance = match self.upstreams.get_instance(instance_reference).await {
            Ok(instance) => instance,
            Err(error) if error.code == ErrorCode::NotFound => {
                return Err(if principal.access.names(instance_reference) {
                    ApiError::not_found("instance not found")
                } else {
                    forbidden_instance()
                });
            }
            Err(error) => return Err(error),
        };
        if !principal.access.allows(&instance) {
            return Err(forbidden_instance());
        }
        Ok(instance)
    }

    /// Looks up a session of an instance the caller may use; a session of another instance, or
    /// one a share of another session does not cover, is 404, never an action on the other.
    /// [`DEFAULT_SESSION`] names the live session with the `default` alias (404 while there is
    /// none).
    pub async fn authorize_session(
        &self,
        principal: &Principal,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self.find_session(instance, session_id).await?;
        if !principal.access.allows_session(&session.id) {
            return Err(ApiError::not_found("session not found"));
        }
        Ok(session)
    }

    async fn find_session(
        &self,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        if session_id == DEFAULT_SESSION {
            return self
                .upstreams
                .list_sessions(&instance.id, false)
                .await?
                .into_iter()
                .find(|session| session.aliases.iter().any(|alias| alias == DEFAULT_SESSION))
                .ok_or_else(|| ApiError::not_found("the instance has no default session"));
        }
        if uuid::Uuid::parse_str(session_id).is_err() {
            return Err(ApiError::not_found("session not found"));
        }
        let session = self.upstreams.get_session(&instance.id, session_id).await?;
        if session.instance_id != instance.id {
            return Err(ApiError::not_found("session not found"));
        }
        Ok(session)
    }

    /// Like [`AppState::authorize_session`], for the calls that need the session's process
    /// (its screen, its input): a closed session is 404 too.
    pub async fn authorize_live_session(
        &self,
        principal: &Principal,
        instance: &Instance,
        session_id: &str,
    ) -> Result<Session, ApiError> {
        let session = self
            .authorize_session(principal, instance, session_id)
            .await?;
        if session.status == SessionStatus::Closed {
            return Err(ApiError::not_found("session not found or closed"));
        }
        Ok(session)
    }
}

fn forbidden_instance() -> ApiError {
    ApiError::forbidden("not allowed for this instance")
}
