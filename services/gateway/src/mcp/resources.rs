//! Each live session's screen as an MCP resource, `ptyhub://instances/{iid}/sessions/{sid}/screen`:
//! listed for the instances the caller may use, read as the screen's text, checked as the
//! screen route checks it. A refusal is a protocol error here (resources have no error result):
//! `-32002` for a screen that is not there, `-32602` for a URI that names none, `-32600` for a
//! credential that may not read it, each with the contract's detail.

use rmcp::ErrorData;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents, ResourceTemplate};

use ptyhub_wire::{ErrorCode, Surface};

use crate::auth::Principal;
use crate::domain::{Instance, ScreenRequest, Session};
use crate::error::ApiError;
use crate::state::AppState;

const SCHEME_AND_INSTANCES: &str = "ptyhub://instances/";
const SESSIONS: &str = "/sessions/";
const SCREEN: &str = "/screen";
const MIME_TYPE: &str = "text/plain";

/// A screen resource's URI, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenUri {
    /// The instance's id or name, as the URI gives it.
    pub instance: String,
    /// The session's id (or `default`).
    pub session: String,
}

impl ScreenUri {
    /// `ptyhub://instances/{iid}/sessions/{sid}/screen`, else a message saying what is expected.
    pub fn parse(uri: &str) -> Result<Self, String> {
        let malformed = || {
            format!(
                "{uri:?} is not a screen: expected ptyhub://instances/{{instance}}/sessions/{{session}}/screen"
            )
        };
        let rest = uri
            .strip_prefix(SCHEME_AND_INSTANCES)
            .ok_or_else(malformed)?;
        let rest = rest.strip_suffix(SCREEN).ok_or_else(malformed)?;
        let (instance, session) = rest.split_once(SESSIONS).ok_or_else(malformed)?;
        let is_segment = |part: &str| !part.is_empty() && !part.contains('/');
        if !is_segment(instance) || !is_segment(session) {
            return Err(malformed());
        }
        Ok(Self {
            instance: instance.to_owned(),
            session: session.to_owned(),
        })
    }

    pub fn to_uri(&self) -> String {
        format!(
            "{SCHEME_AND_INSTANCES}{}{SESSIONS}{}{SCREEN}",
            self.instance, self.session
        )
    }

    /// The instance and live session it names, once `principal` may read them.
    pub async fn authorize(
        &self,
        state: &AppState,
        principal: &Principal,
    ) -> Result<(Instance, Session), ApiError> {
        let instance = state
            .authorize_instance_through(principal, &self.instance, Surface::Mcp)
            .await?;
        let session = state
            .authorize_live_session(principal, &instance, &self.session)
            .await?;
        Ok((instance, session))
    }
}

/// The template clients fill in to read a screen they know the ids of.
pub fn screen_template() -> ResourceTemplate {
    ResourceTemplate::new(
        format!("{SCHEME_AND_INSTANCES}{{instance}}{SESSIONS}{{session}}{SCREEN}"),
        "screen",
    )
    .with_title("A session's screen")
    .with_description(
        "What a terminal session shows now, as text; subscribe to hear when it changes.",
    )
    .with_mime_type(MIME_TYPE)
}

/// The screen of every live session of every instance `principal` may use.
pub async fn list_screens(
    state: &AppState,
    principal: &Principal,
) -> Result<Vec<Resource>, ErrorData> {
    let instances = state
        .upstreams
        .list_instances()
        .await
        .map_err(protocol_error)?
        .into_iter()
        .filter(|instance| principal.access.allows(instance));
    let mut screens = Vec::new();
    for instance in instances {
        let sessions = state
            .upstreams
            .list_sessions(&instance.id, false)
            .await
            .map_err(protocol_error)?;
        for session in sessions
            .into_iter()
            .filter(|session| principal.access.allows_session_record(session))
        {
            let uri = ScreenUri {
                instance: instance.id.clone(),
                session: session.id.to_string(),
            };
            screens.push(
                Resource::new(
                    uri.to_uri(),
                    format!("{} / {}", instance.name, session.name),
                )
                .with_description(format!(
                    "The screen of session {:?} of instance {:?}",
                    session.name, instance.name
                ))
                .with_mime_type(MIME_TYPE),
            );
        }
    }
    Ok(screens)
}

/// The screen's visible rows as text, trailing spaces trimmed (REST's `format=text`).
pub async fn read_screen(
    state: &AppState,
    principal: &Principal,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    let screen_uri =
        ScreenUri::parse(uri).map_err(|message| ErrorData::invalid_params(message, None))?;
    let (instance, session) = screen_uri
        .authorize(state, principal)
        .await
        .map_err(protocol_error)?;
    let screen = state
        .upstreams
        .get_screen(&instance.id, &session.id, ScreenRequest::default())
        .await
        .map_err(protocol_error)?;
    let text = match screen.content {
        crate::domain::ScreenContent::Text(lines) => lines.join("\n"),
        // A text request is answered with text; anything else would be the broker's mistake.
        _ => {
            return Err(ErrorData::internal_error(
                "the broker answered a text screen in another format",
                None,
            ));
        }
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type(MIME_TYPE),
    ]))
}

/// A refusal where MCP has only protocol errors: the code that says what went wrong, with the
/// contract's detail as the message.
pub fn protocol_error(error: ApiError) -> ErrorData {
    match error.code {
        ErrorCode::NotFound | ErrorCode::Gone => ErrorData::resource_not_found(error.message, None),
        ErrorCode::Malformed | ErrorCode::Invalid | ErrorCode::LimitExceeded => {
            ErrorData::invalid_params(error.message, None)
        }
        ErrorCode::Internal | ErrorCode::Unavailable => {
            ErrorData::internal_error(error.message, None)
        }
        _ => ErrorData::invalid_request(error.message, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screen_uris_round_trip_and_strangers_are_refused() {
        let uri = ScreenUri {
            instance: "web-1".into(),
            session: "0b0e5b8e-1a52-4c5f-9b36-2a4f0f2c7d10".into(),
        };
        assert_eq!(ScreenUri::parse(&uri.to_uri()), Ok(uri));
        for stranger in [
            "ptyhub://instances/web-1/sessions//screen",
            "ptyhub://instances//sessions/s/screen",
            "ptyhub://instances/web-1/sessions/s/screen/more",
            "ptyhub://instances/a/b/sessions/s/screen",
            "file:///etc/passwd",
            "ptyhub://instances/web-1/sessions/s",
        ] {
            assert!(ScreenUri::parse(stranger).is_err(), "{stranger}");
        }
    }
}
