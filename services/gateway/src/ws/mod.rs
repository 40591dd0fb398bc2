//! The terminal WebSocket: the two routes, the checks before the upgrade (origin, credential,
//! query, session resolution through session-api), and the hand-over of the upgraded socket to
//! the bridge.
//!
//! - `origin.rs`: which browser origins may open a socket;
//! - `frames.rs`: the JSON frames both ways, as typed values;
//! - `bridge.rs`: the socket and one broker `Attach` stream, in one task.

mod bridge;
pub mod frames;

use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ptyhub_model::{Role, TerminalSize};
use ptyhub_wire::limits::MAX_FRAME_BYTES;
use ptyhub_wire::{ErrorCode, Surface};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::{WEBSOCKET_PROTOCOL, WEBSOCKET_TOKEN_PROTOCOL_PREFIX};
use crate::authorize::DEFAULT_SESSION;
use crate::browser::check_origin;
use crate::domain::{AttachTarget, SessionSelector, SessionStatus};
use crate::error::{ApiError, ErrorBody};
use crate::front_door::Authentication;
use crate::grpc::Upstreams;
use crate::rest::{InstancePath, SessionPath};
use crate::state::AppState;
use crate::streams::{CredentialWatch, StreamSlot};

/// The WebSocket's read buffer, allocated when the socket opens and kept while it lives, idle or
/// not: what a client sends is keystrokes, resizes and control frames of a few bytes to a few
/// hundred. tungstenite's default (128 KiB) is zero-filled on the first read; 4 KiB was a fifth
/// of an idle socket's cost on the gateway. A larger frame (a paste) still arrives whole, the
/// buffer grows for it (and is read this much at a time: 2,048 reads for a 1 MiB paste).
const READ_BUFFER_BYTES: usize = 512;

/// How much tungstenite gathers before it writes to the socket: nothing. The bridge flushes
/// every frame it queues before it takes more output, so a buffer in front of the socket would
/// only hold a keystroke's echo until that flush; tungstenite's default (128 KiB) is a size to
/// wait for, not memory it reserves.
const WRITE_BUFFER_BYTES: usize = 0;

/// The most a socket's write buffer may hold: frames the client has not taken yet, which the
/// bridge keeps to one output frame (at most a broker frame, [`MAX_FRAME_BYTES`], beside the
/// batch before it) and a few JSON frames. Past it the socket fails instead of growing; the
/// default is unbounded.
const MAX_WRITE_BUFFER_BYTES: usize = 4 * MAX_FRAME_BYTES;

/// The query parameters of a terminal WebSocket.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TerminalQuery {
    /// The browser tab's id: opens (or creates) the session with alias `client:<client_id>`.
    pub client_id: Option<String>,
    /// Opens the live session with this alias; 4004 when there is none.
    pub alias: Option<String>,
    /// Columns, with `rows`: the size of a session this open creates, applied on attach.
    pub cols: Option<String>,
    /// Rows, with `cols`.
    pub rows: Option<String>,
    /// Resume from this output offset.
    pub since: Option<String>,
    /// `1` or `true`: start with a snapshot of the screen (a `snapshot` frame and one binary
    /// frame) instead of a replay of raw bytes. A `since` older than the ring gets one anyway.
    pub snapshot: Option<String>,
    /// `view` attaches read-only.
    pub mode: Option<String>,
    /// The credential, for programs that can set no header (the front door reads it).
    pub token: Option<String>,
}

/// The `default` session (created when absent), the tab's own session with `?client_id=`, or an
/// aliased one with `?alias=`.
#[utoipa::path(
    get, path = "/ws/tool-instances/{iid}/terminal", tag = "websocket",
    params(InstancePath, TerminalQuery),
    responses(
        (status = 101, description = "WebSocket; see CONTRACT.md for frames and close codes"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "origin not allowed"),
        (status = 426, body = ErrorBody),
    ),
)]
pub async fn open_instance_terminal(
    State(state): State<AppState>,
    Path(path): Path<InstancePath>,
    Query(query): Query<TerminalQuery>,
    authentication: Authentication,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let caller = SocketCaller {
        authentication,
        headers,
    };
    open_terminal(state, path.iid, None, query, caller, upgrade).await
}

/// One session by id (`default`: the default session, created when absent); 4004 when unknown
/// or closed.
#[utoipa::path(
    get, path = "/ws/tool-instances/{iid}/terminal/{sid}", tag = "websocket",
    params(SessionPath, TerminalQuery),
    responses(
        (status = 101, description = "WebSocket; see CONTRACT.md for frames and close codes"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "origin not allowed"),
        (status = 426, body = ErrorBody),
    ),
)]
pub async fn open_session_terminal(
    State(state): State<AppState>,
    Path(path): Path<SessionPath>,
    Query(query): Query<TerminalQuery>,
    authentication: Authentication,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let caller = SocketCaller {
        authentication,
        headers,
    };
    open_terminal(state, path.iid, Some(path.sid), query, caller, upgrade).await
}

/// What a socket's request says of its caller: its credentials as the front door found them,
/// and its headers (its origin, the protocols it offers).
struct SocketCaller {
    authentication: Authentication,
    headers: HeaderMap,
}

/// Checks the origin, then upgrades; every later refusal (credential, query, session) is a close
/// code on the upgraded socket, which is all a browser's WebSocket can read.
async fn open_terminal(
    state: AppState,
    instance_reference: String,
    session_id: Option<String>,
    query: TerminalQuery,
    caller: SocketCaller,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let SocketCaller {
        authentication,
        headers,
    } = caller;
    // Programs give a token (query, protocol or header); the page sends its session cookie,
    // which this origin check keeps to the gateway's own pages.
    if let Err(error) = check_origin(&state.allowed_origins, &headers) {
        return error.into_response();
    }
    let Ok(upgrade) = upgrade else {
        // A plain HTTP request: say what is wrong with it without creating anything.
        if let Err(error) = authentication.principal().await {
            return error.into_response();
        }
        // 426 is about the transport, not the request, so it has no code in the error table.
        return (
            StatusCode::UPGRADE_REQUIRED,
            Json(ErrorBody {
                detail: "this route needs a websocket upgrade".into(),
                code: None,
            }),
        )
            .into_response();
    };
    let prepared = prepare_attach(
        &state,
        &authentication,
        &instance_reference,
        session_id,
        &query,
    )
    .await;
    let bridges = state.bridges.clone();
    let opening = Box::new(bridge::Opening {
        state,
        prepared,
        instance_reference,
    });
    select_protocol(upgrade, &headers)
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_write_buffer_size(MAX_WRITE_BUFFER_BYTES)
        .max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| bridges.track_future(bridge::serve_terminal(socket, opening)))
}

/// Echoes `ptyhub` when offered, else the `bearer.` entry (a browser fails the handshake when
/// it offered protocols and none is selected).
fn select_protocol(upgrade: WebSocketUpgrade, headers: &HeaderMap) -> WebSocketUpgrade {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|protocol| protocol.trim().to_owned())
        .collect();
    if offered
        .iter()
        .any(|protocol| protocol == WEBSOCKET_PROTOCOL)
    {
        return upgrade.protocols([WEBSOCKET_PROTOCOL]);
    }
    match offered
        .into_iter()
        .find(|protocol| protocol.starts_with(WEBSOCKET_TOKEN_PROTOCOL_PREFIX))
    {
        Some(protocol) => upgrade.protocols([protocol]),
        None => upgrade,
    }
}

/// A session resolved and authorised, ready to attach.
#[derive(Debug)]
struct PreparedAttach {
    /// Acting for the socket's principal: the attach and its audit reports go through them.
    upstreams: Upstreams,
    instance_id: String,
    session_id: String,
    session_name: String,
    attach: AttachTarget,
    role: Role,
    size: Option<TerminalSize>,
    since: Option<u64>,
    snapshot: bool,
    /// What ends the credential (its expiry, a share's revocation); the socket ends then.
    credential: CredentialWatch,
    /// One of the principal's open streams, held for as long as the bridge runs.
    _stream_slot: StreamSlot,
}

/// Takes the caller's principal, reads the query, and resolves (or creates) the session through
/// session-api.
async fn prepare_attach(
    state: &AppState,
    authentication: &Authentication,
    instance_reference: &str,
    session_id: Option<String>,
    query: &TerminalQuery,
) -> Result<PreparedAttach, ApiError> {
    let principal = authentication.principal().await?;
    let (stream_slot, credential) = state.streams.open(&principal)?.into_parts();
    let cols = parse_number::<u32>("cols", query.cols.as_deref())?;
    let rows = parse_number::<u32>("rows", query.rows.as_deref())?;
    let size = TerminalSize::from_optional(cols, rows)
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    let since = parse_number::<u64>("since", query.since.as_deref())?;
    let snapshot = parse_flag("snapshot", query.snapshot.as_deref())?;
    let role = match query.mode.as_deref() {
        // A viewer-only credential (a share link's) is a viewer whatever it asks for.
        None | Some("") if principal.access.is_viewer_only() => Role::Viewer,
        None | Some("") => Role::Controller,
        Some("view") => Role::Viewer,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown mode {other:?}, expected \"view\""
            )));
        }
    };
    let (selector, create_if_absent) = match (session_id, &query.client_id, &query.alias) {
        // `/terminal/default` is `/terminal`: the default session, created when absent.
        (Some(session_id), _, _) if session_id == DEFAULT_SESSION => {
            (SessionSelector::Default, true)
        }
        (Some(session_id), _, _) => {
            if uuid::Uuid::parse_str(&session_id).is_err() {
                return Err(ApiError::not_found("session not found"));
            }
            (SessionSelector::Id(session_id), false)
        }
        (None, Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "use either client_id or alias, not both",
            ));
        }
        (None, Some(client_id), None) => (SessionSelector::ClientId(client_id.clone()), true),
        (None, None, Some(alias)) => (SessionSelector::Alias(alias.clone()), false),
        (None, None, None) => (SessionSelector::Default, true),
    };
    // A viewer creates nothing: it watches sessions that exist.
    let create_if_absent = create_if_absent && !principal.access.is_viewer_only();
    let instance = state
        .authorize_instance_through(&principal, instance_reference, Surface::WebSocket)
        .await?;
    let upstreams = state
        .upstreams
        .acting_for(&principal.actor(Surface::WebSocket));
    // The ticket admits a controller whenever the credential may control, so that a viewer may
    // ask for control on the same socket; the stream itself attaches as `role`.
    let ticket_role = if principal.access.is_viewer_only() {
        Role::Viewer
    } else {
        Role::Controller
    };
    let resolved = upstreams
        .resolve_session(&instance.id, selector, create_if_absent, size, ticket_role)
        .await
        .map_err(|error| match error.code {
            // session-api refuses a session id it will not attach to (closed, another
            // instance's) as a failed precondition; for the client that is "not found".
            ErrorCode::WrongState | ErrorCode::AlreadyExists if !create_if_absent => {
                ApiError::not_found(error.message)
            }
            _ => error,
        })?;
    let session = resolved.session;
    if session.instance_id.to_string() != instance.id
        || session.status == SessionStatus::Closed
        || !principal.access.allows_session_record(&session)
    {
        return Err(ApiError::not_found("session not found or closed"));
    }
    Ok(PreparedAttach {
        upstreams,
        instance_id: instance.id,
        session_id: session.id.to_string(),
        session_name: session.name,
        attach: AttachTarget {
            // A share link without history: the present screen and what follows, whatever
            // `since` and `snapshot` ask for.
            present_only: !principal.access.sees_history(),
            // The stream's own role; its ticket may admit more (a controller's, to ask for
            // control).
            role,
            ..resolved.attach
        },
        role,
        size,
        since,
        snapshot,
        credential,
        _stream_slot: stream_slot,
    })
}

/// A yes/no query parameter: `1`/`true` or `0`/`false`, absent meaning no.
fn parse_flag(name: &str, value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "{name} must be 1, true, 0 or false, not {other:?}"
        ))),
    }
}

fn parse_number<T: std::str::FromStr>(
    name: &str,
    value: Option<&str>,
) -> Result<Option<T>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(value) => value
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("{name} must be a non-negative integer"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_numbers_are_optional_and_malformed_ones_refused() {
        assert_eq!(parse_number::<u32>("cols", None).unwrap(), None);
        assert_eq!(parse_number::<u32>("cols", Some("")).unwrap(), None);
        assert_eq!(parse_number::<u64>("since", Some("42")).unwrap(), Some(42));
        let refused = parse_number::<u32>("cols", Some("-1")).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Malformed);
        assert_eq!(refused.message, "cols must be a non-negative integer");
    }

    #[test]
    fn the_snapshot_flag_is_one_true_zero_or_false() {
        for (value, expected) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("1"), true),
            (Some("true"), true),
        ] {
            assert_eq!(
                parse_flag("snapshot", value).unwrap(),
                expected,
                "{value:?}"
            );
        }
        for value in ["maybe", "yes", "TRUE", "2"] {
            let refused = parse_flag("snapshot", Some(value)).unwrap_err();
            assert_eq!(refused.code, ErrorCode::Malformed, "{value}");
            assert_eq!(refused.websocket_close_code(), 1008, "{value}");
        }
    }
}
