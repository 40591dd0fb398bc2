//! The adapter to the pty-brokers' gRPC API: one lazily connected channel per broker, on every
//! call the credential that opens that broker alone (derived from the broker's own credential,
//! or session-api's for a broker that has none), and the broker's messages converted to domain
//! types here, so
//! that nothing inside session-api names a generated broker type. The one exception is the
//! screen calls, which session-api only forwards: their requests come from the gRPC adapter
//! (`grpc/forward.rs`) and their answers go back to it as the broker sent them, adapter to
//! adapter, never through the service.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use ptyhub_attach_ticket::TicketHolder;
use ptyhub_model::proto::{self, ProtoEnum as _};
use ptyhub_model::{Attendee, ControlChangeKind, ControlMode, TerminalSize};
use ptyhub_proto::broker::v1 as pb;
use ptyhub_proto::broker::v1::pty_broker_client::PtyBrokerClient;
use ptyhub_wire::limits::{DEFAULT_WAIT_MS, MAX_WAIT_MS};
use ptyhub_wire::{BearerAuth, ServiceCredential};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use uuid::Uuid;

use crate::domain::{
    Broker, CloseReason, Command, ExitStatus, RecordMode, ScreenFacts, Target, TerminalActivity,
};
use crate::error::Error;

/// What to start on a broker.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub session_id: Uuid,
    pub target: Target,
    /// Already substituted (`{session_id}` replaced).
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    pub user: String,
    pub size: TerminalSize,
    pub record: RecordMode,
    pub recording_title: String,
    /// Start an interactive shell with its integration.
    pub shell_integration: bool,
    /// Who may type into it.
    pub control_mode: ControlMode,
    /// How long a request for control may wait before it is granted; `None`: until answered.
    pub control_grant_timeout: Option<Duration>,
}

/// A session's state as its broker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerSessionState {
    Starting,
    Running,
    Resetting,
    Exited,
    Closed,
}

impl BrokerSessionState {
    /// Whether the broker still has a process (or is about to) for the session.
    pub fn has_process(self) -> bool {
        matches!(
            self,
            BrokerSessionState::Starting
                | BrokerSessionState::Running
                | BrokerSessionState::Resetting
        )
    }
}

/// One session as its broker reports it.
#[derive(Debug, Clone)]
pub struct BrokerSession {
    pub session_id: Uuid,
    pub state: BrokerSessionState,
    pub exit: Option<ExitStatus>,
    pub close_reason: Option<CloseReason>,
    pub attached_clients: u32,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub screen: ScreenFacts,
    /// What its terminal is doing, when the broker tracks it.
    pub terminal: Option<TerminalActivity>,
}

/// A lifecycle event from a broker's WatchEvents stream.
#[derive(Debug, Clone)]
pub enum BrokerEvent {
    /// Always first on a stream: every session the broker has.
    Snapshot {
        boot_id: String,
        sessions: Vec<BrokerSession>,
    },
    Started(BrokerSession),
    Exited {
        session_id: Uuid,
        exit: ExitStatus,
    },
    Activity {
        session_id: Uuid,
        at: DateTime<Utc>,
        screen: ScreenFacts,
    },
    Closed {
        session_id: Uuid,
        reason: CloseReason,
    },
    /// How many bytes one principal typed into a session in a window that began at `since`.
    Typed {
        session_id: Uuid,
        principal: String,
        surface: String,
        bytes: u64,
        since: DateTime<Utc>,
    },
    /// A request for control was answered: by whom (`from`, when someone controlled), for whom
    /// (`to`), how, at `at`.
    ControlChanged {
        session_id: Uuid,
        kind: ControlChangeKind,
        from: Option<TicketHolder>,
        to: TicketHolder,
        request_id: u64,
        at: DateTime<Utc>,
    },
    /// Who is attached changed: how many, and who (presence).
    Attachments {
        session_id: Uuid,
        attached_clients: u32,
        presence: Vec<Attendee>,
    },
    ResetDone(BrokerSession),
    /// What the terminal is doing changed, or commands started or ended.
    Terminal {
        session_id: Uuid,
        terminal: TerminalActivity,
        commands: Vec<Command>,
    },
}

/// The keepalive of broker connections unless configured: session-api's own default.
const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(20);

type BrokerGrpcClient = PtyBrokerClient<InterceptedService<Channel, BearerAuth>>;

/// Calls to brokers, with one channel per broker endpoint kept for reuse.
#[derive(Debug, Clone)]
pub struct BrokerClients {
    /// What brokers without a credential of their own accept: session-api's credential.
    authorization: BearerAuth,
    /// What each broker with a credential of its own accepts: the credential derived from it.
    broker_authorizations: Arc<HashMap<String, BearerAuth>>,
    call_timeout: Duration,
    /// The HTTP/2 keepalive interval and ping timeout that find a frozen or unplugged broker:
    /// they end its event stream (so it is marked down) and the calls forwarded to it.
    keep_alive: Duration,
    /// `https://` brokers are dialled with TLS, trusting the configured CA.
    tls: ptyhub_wire::TlsConfig,
    /// Whether an `http://` broker may be called in plain text (no TLS of session-api's own, or
    /// the development setting that allows it).
    plaintext_allowed: bool,
    channels: Arc<Mutex<HashMap<String, (String, Channel)>>>,
}

impl BrokerClients {
    /// Clients that present, to each broker of `broker_credentials` (id and its own
    /// credential), the credential derived from that broker's, and to any other broker
    /// `credential`; they give up on a unary call after `call_timeout`. Unless
    /// `plaintext_allowed`, they call no `http://` broker.
    pub fn new(
        credential: &ServiceCredential,
        broker_credentials: impl IntoIterator<Item = (String, ServiceCredential)>,
        call_timeout: Duration,
        tls: ptyhub_wire::TlsConfig,
        plaintext_allowed: bool,
    ) -> Self {
        let broker_authorizations = broker_credentials
            .into_iter()
            .map(|(broker_id, own)| (broker_id, own.broker_control_credential().bearer_auth()))
            .collect();
        Self {
            authorization: credential.bearer_auth(),
            broker_authorizations: Arc::new(broker_authorizations),
            call_timeout,
            keep_alive: DEFAULT_KEEP_ALIVE,
            tls,
            plaintext_allowed,
            channels: Arc::default(),
        }
    }

    /// Dials brokers with this HTTP/2 keepalive interval and ping timeout.
    pub fn with_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// The credential `broker_id` accepts on its control calls.
    fn authorization_for(&self, broker_id: &str) -> BearerAuth {
        self.broker_authorizations
            .get(broker_id)
            .unwrap_or(&self.authorization)
            .clone()
    }

    fn client(&self, broker: &Broker) -> Result<BrokerGrpcClient, Error> {
        // Registrations and the configuration are checked too; this also covers an endpoint
        // stored before session-api used TLS.
        if !self.plaintext_allowed && !broker.endpoint.starts_with("https://") {
            return Err(Error::BrokerUnavailable {
                broker_id: broker.id.clone(),
                message: format!(
                    "its endpoint {:?} is plain text and session-api uses TLS: the broker must advertise an https:// endpoint",
                    broker.endpoint
                ),
            });
        }
        let mut channels = self
            .channels
            .lock()
            .expect("channel map lock is never poisoned");
        let channel = match channels.get(&broker.id) {
            Some((endpoint, channel)) if *endpoint == broker.endpoint => channel.clone(),
            _ => {
                let channel = self
                    .tls
                    .endpoint(&broker.endpoint)
                    .map_err(|error| Error::BrokerUnavailable {
                        broker_id: broker.id.clone(),
                        message: format!("endpoint {:?}: {error}", broker.endpoint),
                    })?
                    .connect_timeout(self.call_timeout)
                    .http2_keep_alive_interval(self.keep_alive)
                    .keep_alive_timeout(self.keep_alive)
                    .keep_alive_while_idle(true)
                    .connect_lazy();
                channels.insert(
                    broker.id.clone(),
                    (broker.endpoint.clone(), channel.clone()),
                );
                channel
            }
        };
        Ok(PtyBrokerClient::with_interceptor(
            channel,
            self.authorization_for(&broker.id),
        ))
    }

    fn unary<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.call_timeout);
        request
    }

    /// The deadline of a screen wait asking for `timeout_ms`: the wait itself (as the broker
    /// reads `timeout_ms`) plus an ordinary call's allowance, so that the broker's own answer
    /// (a match, or DEADLINE_EXCEEDED) always arrives before this side gives up. A timeout over
    /// the maximum is the broker's to refuse, at once.
    fn wait_deadline(&self, timeout_ms: u32) -> Duration {
        let wait_ms = match timeout_ms {
            0 => DEFAULT_WAIT_MS,
            timeout_ms => timeout_ms.min(MAX_WAIT_MS),
        };
        Duration::from_millis(u64::from(wait_ms)) + self.call_timeout
    }

    /// Starts the session's process on `broker`.
    pub async fn spawn(&self, broker: &Broker, spec: &SpawnSpec) -> Result<(), Error> {
        let request = pb::SpawnRequest {
            session_id: spec.session_id.to_string(),
            target: Some(spec.target.clone().into()),
            command: spec.command.clone(),
            env: spec.env.clone().into_iter().collect(),
            cwd: spec.cwd.clone(),
            user: spec.user.clone(),
            size: Some(spec.size.into()),
            record: spec.record.to_proto(),
            recording_title: spec.recording_title.clone(),
            shell_integration: spec.shell_integration,
            control_mode: spec.control_mode.to_proto(),
            control_grant_timeout_secs: spec
                .control_grant_timeout
                .map(|timeout| u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX)),
        };
        self.client(broker)?
            .spawn(self.unary(request))
            .await
            .map_err(|status| Error::from_broker_status(&broker.id, status))?;
        Ok(())
    }

    /// Asks the broker whether its policy admits sessions on `target` as `user`; its refusal
    /// (PERMISSION_DENIED) comes back as [`Error::BrokerRefused`].
    pub async fn check_target(
        &self,
        broker: &Broker,
        target: &Target,
        user: &str,
    ) -> Result<(), Error> {
        let request = pb::CheckTargetRequest {
            target: Some(target.clone().into()),
            user: user.to_owned(),
        };
        self.client(broker)?
            .check_target(self.unary(request))
            .await
            .map_err(|status| Error::from_broker_status(&broker.id, status))?;
        Ok(())
    }

    /// Ends the session's process group. A session the broker does not have is not an error.
    pub async fn kill(&self, broker: &Broker, session_id: Uuid) -> Result<(), Error> {
        let request = pb::KillRequest {
            session_id: session_id.to_string(),
        };
        match self.client(broker)?.kill(self.unary(request)).await {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            Err(status) => Err(Error::from_broker_status(&broker.id, status)),
        }
    }

    /// Restarts the session's command on the same PTY.
    pub async fn reset(&self, broker: &Broker, session_id: Uuid) -> Result<(), Error> {
        let request = pb::ResetRequest {
            session_id: session_id.to_string(),
        };
        self.client(broker)?
            .reset(self.unary(request))
            .await
            .map_err(|status| Error::from_broker_status(&broker.id, status))?;
        Ok(())
    }

    /// Changes the control mode of the session on its broker, which moves the roles of the
    /// streams attached to it at once.
    pub async fn set_control_mode(
        &self,
        broker: &Broker,
        session_id: Uuid,
        control_mode: ControlMode,
    ) -> Result<(), Error> {
        let request = pb::SetControlModeRequest {
            session_id: session_id.to_string(),
            control_mode: control_mode.to_proto(),
        };
        self.client(broker)?
            .set_control_mode(self.unary(request))
            .await
            .map_err(|status| Error::from_broker_status(&broker.id, status))?;
        Ok(())
    }

    /// Whether the broker has the session at all (live or tombstoned).
    pub async fn has_session(&self, broker: &Broker, session_id: Uuid) -> Result<bool, Error> {
        let request = pb::GetRequest {
            session_id: session_id.to_string(),
        };
        match self.client(broker)?.get(self.unary(request)).await {
            Ok(reply) => Ok(session_from_pb(reply.into_inner())
                .is_some_and(|s| s.state != BrokerSessionState::Closed)),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(Error::from_broker_status(&broker.id, status)),
        }
    }

    /// The session's screen, as the broker answers it.
    pub async fn get_screen(
        &self,
        broker: &Broker,
        request: pb::GetScreenRequest,
    ) -> Result<pb::Screen, Error> {
        self.client(broker)?
            .get_screen(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// The session's commands, as the broker answers them.
    pub async fn list_commands(
        &self,
        broker: &Broker,
        request: pb::ListCommandsRequest,
    ) -> Result<pb::ListCommandsResponse, Error> {
        self.client(broker)?
            .list_commands(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// One command's output, as the broker answers it.
    pub async fn get_command_output(
        &self,
        broker: &Broker,
        request: pb::GetCommandOutputRequest,
    ) -> Result<pb::CommandOutput, Error> {
        self.client(broker)?
            .get_command_output(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// Types into the session, as the broker answers it.
    pub async fn send_input(
        &self,
        broker: &Broker,
        request: pb::SendInputRequest,
    ) -> Result<pb::SendInputResponse, Error> {
        self.client(broker)?
            .send_input(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// The session's control state, as the broker answers it.
    pub async fn get_control(
        &self,
        broker: &Broker,
        request: pb::GetControlRequest,
    ) -> Result<pb::ControlState, Error> {
        self.client(broker)?
            .get_control(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// A standing request for control, made by the broker for the requester it names.
    pub async fn request_control_for(
        &self,
        broker: &Broker,
        request: pb::StandingControlRequest,
    ) -> Result<pb::ControlRequest, Error> {
        self.client(broker)?
            .request_control_for(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// An answer to a request for control by the principal it names; the control state after.
    pub async fn answer_control_as(
        &self,
        broker: &Broker,
        request: pb::ControlAnswer,
    ) -> Result<pb::ControlState, Error> {
        self.client(broker)?
            .answer_control_as(self.unary(request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// Waits for the session's screen to match, as the broker answers it. The call may last as
    /// long as the wait asks for (up to five minutes), so it gets that deadline, not an ordinary
    /// call's.
    pub async fn wait_for_screen(
        &self,
        broker: &Broker,
        request: pb::WaitForScreenRequest,
    ) -> Result<pb::WaitForScreenResponse, Error> {
        let deadline = self.wait_deadline(request.timeout_ms);
        let mut call = tonic::Request::new(request);
        call.set_timeout(deadline);
        self.client(broker)?
            .wait_for_screen(call)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// The session's commands as they happen, as the broker sends them. No deadline: the stream
    /// lasts as long as the session's process, and HTTP/2 keepalive watches the connection.
    pub async fn watch_commands(
        &self,
        broker: &Broker,
        request: pb::WatchCommandsRequest,
    ) -> Result<impl Stream<Item = Result<pb::Command, Error>> + Send + use<>, Error> {
        let stream = self
            .client(broker)?
            .watch_commands(tonic::Request::new(request))
            .await
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))?
            .into_inner();
        let broker_id = broker.id.clone();
        Ok(stream.map(move |item| {
            item.map_err(|status| Error::from_forwarded_status(&broker_id, status))
        }))
    }

    /// Runs a command at the session's prompt, as the broker answers it. Like a screen wait,
    /// the call may last as long as the run asks for.
    pub async fn run(
        &self,
        broker: &Broker,
        request: pb::RunRequest,
    ) -> Result<pb::RunResponse, Error> {
        let deadline = self.wait_deadline(request.timeout_ms);
        let mut call = tonic::Request::new(request);
        call.set_timeout(deadline);
        self.client(broker)?
            .run(call)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| Error::from_forwarded_status(&broker.id, status))
    }

    /// Subscribes to the broker's lifecycle events. The stream ends (or yields an error) when
    /// the connection is lost; events that cannot be understood are logged and skipped.
    pub async fn watch_events(
        &self,
        broker: &Broker,
    ) -> Result<impl Stream<Item = Result<BrokerEvent, Error>> + Send + use<>, Error> {
        // No deadline: the stream lives as long as the connection, which HTTP/2 keepalive
        // watches.
        let stream = self
            .client(broker)?
            .watch_events(tonic::Request::new(pb::WatchEventsRequest {}))
            .await
            .map_err(|status| Error::from_broker_status(&broker.id, status))?
            .into_inner();
        let broker_id = broker.id.clone();
        Ok(stream.filter_map(move |item| {
            let broker_id = broker_id.clone();
            async move {
                match item {
                    Ok(event) => {
                        let event = event_from_pb(event);
                        if event.is_none() {
                            tracing::warn!(
                                broker_id,
                                "skipped a broker event that could not be read"
                            );
                        }
                        event.map(Ok)
                    }
                    Err(status) => Some(Err(Error::from_broker_status(&broker_id, status))),
                }
            }
        }))
    }
}

fn parse_session_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text).ok()
}

/// Who a broker's event names (a ticket's holder, or a caller session-api named).
fn holder_from_pb(holder: pb::TicketHolder) -> TicketHolder {
    TicketHolder {
        principal: holder.principal,
        surface: holder.surface,
    }
}

fn timestamp_from_pb(timestamp: Option<prost_types::Timestamp>) -> Option<DateTime<Utc>> {
    let timestamp = timestamp?;
    DateTime::from_timestamp(timestamp.seconds, u32::try_from(timestamp.nanos).ok()?)
}

/// The record's close reason for a broker's (the model's translation); `None` when the broker
/// gave none or one this build does not know.
fn close_reason_from_pb(reason: i32) -> Option<CloseReason> {
    proto::optional_broker_close_reason(reason)
        .ok()
        .flatten()
        .map(CloseReason::from)
}

fn screen_from_pb(title: &str, last_bell_at: Option<prost_types::Timestamp>) -> ScreenFacts {
    ScreenFacts::reported(title, timestamp_from_pb(last_bell_at))
}

fn session_from_pb(info: pb::SessionInfo) -> Option<BrokerSession> {
    let state = match pb::SessionState::try_from(info.state).ok()? {
        pb::SessionState::Unspecified => return None,
        pb::SessionState::Starting => BrokerSessionState::Starting,
        pb::SessionState::Running => BrokerSessionState::Running,
        pb::SessionState::Resetting => BrokerSessionState::Resetting,
        pb::SessionState::Exited => BrokerSessionState::Exited,
        pb::SessionState::Closed => BrokerSessionState::Closed,
    };
    Some(BrokerSession {
        session_id: parse_session_id(&info.session_id)?,
        state,
        exit: info.exit.map(ExitStatus::from),
        close_reason: close_reason_from_pb(info.close_reason),
        attached_clients: info.controllers.saturating_add(info.viewers),
        last_activity_at: timestamp_from_pb(info.last_activity_at),
        screen: screen_from_pb(&info.title, info.last_bell_at),
        terminal: info
            .terminal
            .and_then(|terminal| TerminalActivity::try_from(terminal).ok()),
    })
}

fn event_from_pb(event: pb::BrokerEvent) -> Option<BrokerEvent> {
    use pb::broker_event::Event;
    Some(match event.event? {
        Event::Snapshot(snapshot) => BrokerEvent::Snapshot {
            boot_id: snapshot.boot_id,
            sessions: snapshot
                .sessions
                .into_iter()
                .filter_map(session_from_pb)
                .collect(),
        },
        Event::Started(started) => BrokerEvent::Started(session_from_pb(started.session?)?),
        Event::Exited(exited) => BrokerEvent::Exited {
            session_id: parse_session_id(&exited.session_id)?,
            exit: exited.exit.map(ExitStatus::from)?,
        },
        Event::Activity(activity) => BrokerEvent::Activity {
            session_id: parse_session_id(&activity.session_id)?,
            at: timestamp_from_pb(activity.last_activity_at)?,
            screen: screen_from_pb(&activity.title, activity.last_bell_at),
        },
        Event::Closed(closed) => BrokerEvent::Closed {
            session_id: parse_session_id(&closed.session_id)?,
            reason: close_reason_from_pb(closed.reason).unwrap_or(CloseReason::BrokerLost),
        },
        Event::AttachmentsChanged(changed) => BrokerEvent::Attachments {
            session_id: parse_session_id(&changed.session_id)?,
            attached_clients: changed.controllers.saturating_add(changed.viewers),
            presence: changed
                .presence
                .into_iter()
                .map(Attendee::try_from)
                .collect::<Result<_, _>>()
                .ok()?,
        },
        Event::Reset(reset) => BrokerEvent::ResetDone(session_from_pb(reset.session?)?),
        Event::Typed(typed) => BrokerEvent::Typed {
            session_id: parse_session_id(&typed.session_id)?,
            principal: typed.principal,
            surface: typed.surface,
            bytes: typed.bytes,
            since: timestamp_from_pb(typed.since)?,
        },
        Event::ControlChanged(changed) => BrokerEvent::ControlChanged {
            session_id: parse_session_id(&changed.session_id)?,
            kind: ControlChangeKind::from_proto(changed.kind).ok()?,
            from: changed.from.map(holder_from_pb),
            to: holder_from_pb(changed.to?),
            request_id: changed.request_id,
            at: timestamp_from_pb(Some(event.at?))?,
        },
        Event::Terminal(changed) => BrokerEvent::Terminal {
            session_id: parse_session_id(&changed.session_id)?,
            terminal: TerminalActivity::try_from(changed.terminal?).ok()?,
            commands: changed.commands.into_iter().map(Into::into).collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: &str, endpoint: &str) -> Broker {
        Broker {
            id: id.to_owned(),
            endpoint: endpoint.to_owned(),
            up: true,
            docker: false,
            configured: false,
            last_heartbeat_at: None,
        }
    }

    fn presented(authorization: BearerAuth) -> String {
        let mut request = tonic::Request::new(());
        authorization.authorize(&mut request);
        request
            .metadata()
            .get("authorization")
            .expect("a credential")
            .to_str()
            .expect("ascii")
            .to_owned()
    }

    #[test]
    fn each_broker_is_called_with_the_credential_that_opens_it_alone() {
        let own = ServiceCredential::new("test-service-token-0123456789").unwrap();
        let broker_a = ServiceCredential::new("broker-a-token-0123456789").unwrap();
        let broker_b = ServiceCredential::new("broker-b-token-0123456789").unwrap();
        let clients = BrokerClients::new(
            &own,
            [
                ("a".to_owned(), broker_a.clone()),
                ("b".to_owned(), broker_b.clone()),
            ],
            Duration::from_secs(30),
            ptyhub_wire::TlsConfig::plain(),
            true,
        );
        let bearer = |credential: &ServiceCredential| format!("Bearer {}", credential.expose());
        let to_a = presented(clients.authorization_for("a"));
        assert_eq!(to_a, bearer(&broker_a.broker_control_credential()));
        assert_ne!(to_a, bearer(&broker_a), "not the broker's own");
        assert_eq!(
            presented(clients.authorization_for("b")),
            bearer(&broker_b.broker_control_credential())
        );
        assert_eq!(
            presented(clients.authorization_for("configured")),
            bearer(&own),
            "a broker without a credential of its own gets session-api's"
        );
    }

    #[tokio::test]
    async fn under_tls_no_broker_is_called_in_plain_text() {
        let own = ServiceCredential::new("test-service-token-0123456789").unwrap();
        let strict = BrokerClients::new(
            &own,
            [],
            Duration::from_secs(30),
            ptyhub_wire::TlsConfig::plain(),
            false,
        );
        let refused = strict
            .client(&broker("b1", "http://127.0.0.1:9"))
            .expect_err("an http:// broker under TLS");
        assert!(
            matches!(refused, Error::BrokerUnavailable { .. }),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("https://"), "{refused}");
        let allowed = BrokerClients::new(
            &own,
            [],
            Duration::from_secs(30),
            ptyhub_wire::TlsConfig::plain(),
            true,
        );
        assert!(allowed.client(&broker("b1", "http://127.0.0.1:9")).is_ok());
    }

    #[test]
    fn a_screen_wait_gets_its_own_timeout_plus_an_ordinary_calls_allowance() {
        let credential = ServiceCredential::new("test-service-token-0123456789").unwrap();
        let clients = BrokerClients::new(
            &credential,
            [],
            Duration::from_secs(30),
            ptyhub_wire::TlsConfig::plain(),
            true,
        );
        let allowance = Duration::from_secs(30);
        assert_eq!(
            clients.wait_deadline(0),
            Duration::from_millis(u64::from(DEFAULT_WAIT_MS)) + allowance,
            "0 is the default wait"
        );
        assert_eq!(
            clients.wait_deadline(1),
            Duration::from_millis(1) + allowance
        );
        assert_eq!(
            clients.wait_deadline(MAX_WAIT_MS),
            Duration::from_millis(u64::from(MAX_WAIT_MS)) + allowance,
            "the longest wait outlasts an ordinary call"
        );
        assert_eq!(
            clients.wait_deadline(u32::MAX),
            Duration::from_millis(u64::from(MAX_WAIT_MS)) + allowance,
            "a wait over the maximum is refused by the broker at once"
        );
    }

    #[test]
    fn the_title_and_bell_a_broker_reports_are_kept_as_the_record_keeps_them() {
        let info = pb::SessionInfo {
            session_id: Uuid::nil().to_string(),
            state: pb::SessionState::Running.into(),
            title: format!("{}\u{1b}", "t".repeat(2000)),
            last_bell_at: Some(prost_types::Timestamp {
                seconds: 1_800_000_000,
                nanos: 5,
            }),
            ..Default::default()
        };
        let session = session_from_pb(info).expect("a session");
        assert_eq!(session.screen.title(), Some("t".repeat(1024).as_str()));
        assert_eq!(
            session.screen.last_bell_at(),
            DateTime::from_timestamp(1_800_000_000, 5)
        );
        let untitled = session_from_pb(pb::SessionInfo {
            session_id: Uuid::nil().to_string(),
            state: pb::SessionState::Running.into(),
            ..Default::default()
        })
        .expect("a session");
        assert_eq!(untitled.screen, ScreenFacts::default());
    }
}
