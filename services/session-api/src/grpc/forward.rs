//! The screen calls (`GetScreen`, `SendInput`, `WaitForScreen`), the command calls
//! (`ListCommands`, `GetCommandOutput`, `Run`, `WatchCommands`) and the control calls
//! (`GetControl`, `RequestControl`, `GrantControl`, `DeclineControl`), which session-api checks
//! and forwards: the caller's request re-addressed to the session's broker, field for field. Each
//! handler does the same first step, [`to_session_broker`]: the session named, checked open on
//! a broker that is up, and the request turned into the broker's ([`ForwardedCall`]); errors
//! become statuses through the one `From<Error> for Status`.
//!
//! The fields are not checked here. Key names, patterns, formats and bounds are the broker's
//! rules, and the broker is where they are enforced; a second copy here could only disagree with
//! it. Nor do the fields or the answers become domain types: the service never looks at them,
//! so they go from this adapter to the broker adapter (`broker_client.rs`) and back unchanged.
//! Each request is taken apart whole, so that a field added to the proto fails to compile here
//! until it is forwarded.

use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as pb;
use uuid::Uuid;

use super::from_pb::{required, session_id_from_pb};
use crate::domain::Broker;
use crate::error::Error;
use crate::service::SessionService;

/// A call on one session that session-api forwards to the session's broker.
pub(super) trait ForwardedCall {
    /// The broker's request for the same call.
    type ToBroker;

    /// The instance the caller named (its id or name).
    fn instance(&self) -> &str;

    /// The session id the caller named, not yet checked.
    fn session_id(&self) -> &str;

    /// The broker's request: every field but the instance, addressed to `session_id`.
    fn to_broker(self, session_id: Uuid) -> Self::ToBroker;
}

/// A call re-addressed to the broker of its session.
pub(super) struct Forwarded<T> {
    pub broker: Broker,
    pub session_id: Uuid,
    pub request: T,
}

/// The first step of every forwarded call: the session id parsed, the session looked up in its
/// instance and checked open, its broker found up, and the request turned into the broker's.
pub(super) async fn to_session_broker<C: ForwardedCall>(
    service: &SessionService,
    call: C,
) -> Result<Forwarded<C::ToBroker>, Error> {
    let session_id = session_id_from_pb(call.session_id())?;
    let broker = service
        .broker_of_open_session(required("instance", call.instance())?, session_id)
        .await?;
    Ok(Forwarded {
        broker,
        session_id,
        request: call.to_broker(session_id),
    })
}

/// Implements [`ForwardedCall`] for a request of session-api's whose broker request has the
/// same fields but `instance`; the destructuring names every field, so that one added to
/// either message fails to compile here until it is forwarded.
macro_rules! forwarded_call {
    ($request:ident => $broker:ident { $($field:ident),* $(,)? }) => {
        impl ForwardedCall for pb::$request {
            type ToBroker = broker_pb::$broker;

            fn instance(&self) -> &str {
                &self.instance
            }

            fn session_id(&self) -> &str {
                &self.session_id
            }

            fn to_broker(self, session_id: Uuid) -> broker_pb::$broker {
                let pb::$request {
                    instance: _,
                    session_id: _,
                    $($field,)*
                } = self;
                broker_pb::$broker {
                    session_id: session_id.to_string(),
                    $($field,)*
                }
            }
        }
    };
}

forwarded_call!(GetScreenRequest => GetScreenRequest { format, scrollback });
forwarded_call!(ListCommandsRequest => ListCommandsRequest { after, limit });
forwarded_call!(GetCommandOutputRequest => GetCommandOutputRequest { command_id, format });
forwarded_call!(RunRequest => RunRequest { command, timeout_ms, force, format });
forwarded_call!(SendInputRequest => SendInputRequest { items, force });
forwarded_call!(WaitForScreenRequest => WaitForScreenRequest {
    pattern,
    timeout_ms,
    quiet_ms,
    after_offset,
    format,
    scrollback,
    wait_for,
});
forwarded_call!(WatchCommandsRequest => WatchCommandsRequest { after_id });
forwarded_call!(GetControlRequest => GetControlRequest {});

/// A standing request for control: who asks is not the caller's to say, so the broker's
/// request leaves the requester unset until the handler fills it in from the actor.
impl ForwardedCall for pb::RequestControlRequest {
    type ToBroker = broker_pb::StandingControlRequest;

    fn instance(&self) -> &str {
        &self.instance
    }

    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn to_broker(self, session_id: Uuid) -> broker_pb::StandingControlRequest {
        let pb::RequestControlRequest {
            instance: _,
            session_id: _,
        } = self;
        broker_pb::StandingControlRequest {
            session_id: session_id.to_string(),
            requester: None,
        }
    }
}

/// An answer to a request for control: who answers, and whether it grants, are the handler's
/// to fill in (from the actor and the call it serves).
impl ForwardedCall for pb::AnswerControlRequest {
    type ToBroker = broker_pb::ControlAnswer;

    fn instance(&self) -> &str {
        &self.instance
    }

    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn to_broker(self, session_id: Uuid) -> broker_pb::ControlAnswer {
        let pb::AnswerControlRequest {
            instance: _,
            session_id: _,
            request_id,
        } = self;
        broker_pb::ControlAnswer {
            session_id: session_id.to_string(),
            principal: String::new(),
            request_id,
            grant: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_a_screen_call_reaches_the_broker_addressed_to_the_session() {
        let session_id = Uuid::new_v4();
        let screen = pb::GetScreenRequest {
            instance: "web".into(),
            session_id: "ignored: the parsed id is sent".into(),
            format: broker_pb::ScreenFormat::Cells.into(),
            scrollback: 42,
        }
        .to_broker(session_id);
        assert_eq!(
            screen,
            broker_pb::GetScreenRequest {
                session_id: session_id.to_string(),
                format: broker_pb::ScreenFormat::Cells.into(),
                scrollback: 42,
            }
        );

        let items = vec![
            broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Text("ptyhub".into())),
            },
            broker_pb::InputItem {
                item: Some(broker_pb::input_item::Item::Key("Enter".into())),
            },
        ];
        let input = pb::SendInputRequest {
            instance: "web".into(),
            session_id: session_id.to_string(),
            items: items.clone(),
            force: true,
        }
        .to_broker(session_id);
        assert_eq!(
            input,
            broker_pb::SendInputRequest {
                session_id: session_id.to_string(),
                items,
                force: true,
            }
        );

        let wait = pb::WaitForScreenRequest {
            instance: "web".into(),
            session_id: session_id.to_string(),
            pattern: r"hi \w+".into(),
            timeout_ms: 1234,
            quiet_ms: 56,
            after_offset: Some(789),
            format: broker_pb::ScreenFormat::Ansi.into(),
            scrollback: 10,
            wait_for: broker_pb::TerminalState::Idle.into(),
        }
        .to_broker(session_id);
        assert_eq!(
            wait,
            broker_pb::WaitForScreenRequest {
                session_id: session_id.to_string(),
                pattern: r"hi \w+".into(),
                timeout_ms: 1234,
                quiet_ms: 56,
                after_offset: Some(789),
                format: broker_pb::ScreenFormat::Ansi.into(),
                scrollback: 10,
                wait_for: broker_pb::TerminalState::Idle.into(),
            }
        );

        let listing = pb::ListCommandsRequest {
            instance: "web".into(),
            session_id: "ignored".into(),
            after: 3,
            limit: 50,
        }
        .to_broker(session_id);
        assert_eq!(
            listing,
            broker_pb::ListCommandsRequest {
                session_id: session_id.to_string(),
                after: 3,
                limit: 50,
            }
        );

        let output = pb::GetCommandOutputRequest {
            instance: "web".into(),
            session_id: "ignored".into(),
            command_id: 7,
            format: broker_pb::ScreenFormat::Ansi.into(),
        }
        .to_broker(session_id);
        assert_eq!(
            output,
            broker_pb::GetCommandOutputRequest {
                session_id: session_id.to_string(),
                command_id: 7,
                format: broker_pb::ScreenFormat::Ansi.into(),
            }
        );

        let run = pb::RunRequest {
            instance: "web".into(),
            session_id: "ignored".into(),
            command: "make test".into(),
            timeout_ms: 900,
            force: true,
            format: broker_pb::ScreenFormat::Text.into(),
        }
        .to_broker(session_id);
        assert_eq!(
            run,
            broker_pb::RunRequest {
                session_id: session_id.to_string(),
                command: "make test".into(),
                timeout_ms: 900,
                force: true,
                format: broker_pb::ScreenFormat::Text.into(),
            }
        );

        let watch = pb::WatchCommandsRequest {
            instance: "web".into(),
            session_id: "ignored".into(),
            after_id: 41,
        }
        .to_broker(session_id);
        assert_eq!(
            watch,
            broker_pb::WatchCommandsRequest {
                session_id: session_id.to_string(),
                after_id: 41,
            }
        );
    }
}
