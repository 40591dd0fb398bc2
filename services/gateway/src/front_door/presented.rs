//! What a request presents: its bearer credential, found where its surface allows one, and the
//! page's session cookie where the surface takes cookies; and where the request came from.
//!
//! | surface | bearer credential | session cookie |
//! |---|---|---|
//! | REST, Server-Sent Events, the page's API calls | `Authorization: Bearer` | yes |
//! | terminal WebSocket | `?token=`, else a `bearer.<token>` subprotocol, else `Authorization` | yes |
//! | gRPC, gRPC-web, the CLI, the relayed `Attach` | `authorization` metadata | never: programs |
//!
//! `?token=` is read on a WebSocket alone (a browser's WebSocket can set no header, and a
//! program's URL is its own); anywhere else a token in an address would end up in logs and
//! histories, and the page's `?token=` sign-in link is the page's to exchange
//! ([`crate::rest::signin`]).

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Request, Uri};
use ptyhub_wire::Surface;
use serde::Deserialize;

use crate::auth::{bearer_token, peer_address, websocket_protocol_token};
use crate::cookie::RequestCookie;
use crate::state::AppState;

/// The credentials a request presents, and where it came from. A bearer credential, when
/// given, is the one checked; the cookie stands in only without one.
#[derive(Clone, Default)]
pub struct Presented {
    pub bearer: Option<String>,
    pub cookie: Option<RequestCookie>,
    /// Where the request came from, for the limit on refused credentials.
    pub client: Option<IpAddr>,
    /// The TCP peer, the address the audit trail records.
    pub peer: Option<SocketAddr>,
}

/// Never the credentials themselves: a `Debug` of a request's state must not leak them to logs.
impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented")
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("cookie", &self.cookie.as_ref().map(|_| "<redacted>"))
            .field("client", &self.client)
            .field("peer", &self.peer)
            .finish()
    }
}

impl Presented {
    /// What `request`, arriving through `surface`, presents.
    pub fn of_request<B>(state: &AppState, surface: Surface, request: &Request<B>) -> Self {
        let headers = request.headers();
        let takes_cookie = matches!(surface, Surface::Rest | Surface::WebSocket);
        Self {
            bearer: bearer_of(surface, headers, request.uri()),
            cookie: takes_cookie
                .then(|| state.session_cookie(headers, request.uri()))
                .flatten(),
            client: state.client_address(headers, request.extensions()),
            peer: peer_address(request.extensions()),
        }
    }

    /// Whether it presents a bearer credential (an empty one is none).
    pub fn has_bearer(&self) -> bool {
        self.bearer
            .as_deref()
            .is_some_and(|bearer| !bearer.is_empty())
    }

    /// The same request with its session cookie alone.
    pub fn cookie_only(&self) -> Self {
        Self {
            bearer: None,
            ..self.clone()
        }
    }
}

/// The query parameter a WebSocket's credential may come in.
#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// The bearer credential of a request, from the places its surface allows.
fn bearer_of(surface: Surface, headers: &HeaderMap, uri: &Uri) -> Option<String> {
    let header = || bearer_token(headers).map(str::to_owned);
    match surface {
        Surface::WebSocket => query_token(uri)
            .or_else(|| websocket_protocol_token(headers))
            .or_else(header),
        _ => header(),
    }
}

/// `?token=` of a URI; none when the query does not parse (the handler says what is wrong
/// with it).
fn query_token(uri: &Uri) -> Option<String> {
    axum::extract::Query::<TokenQuery>::try_from_uri(uri)
        .ok()
        .and_then(|query| query.0.token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    axum::http::HeaderName::from_static(name),
                    value.parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_websocket_takes_its_token_from_the_query_then_the_protocol_then_the_header() {
        let all = headers(&[
            ("authorization", "Bearer from-header"),
            ("sec-websocket-protocol", "ptyhub, bearer.from-protocol"),
        ]);
        let uri: Uri = "/ws/tool-instances/x/terminal?mode=view&token=from-query"
            .parse()
            .unwrap();
        let plain: Uri = "/ws/tool-instances/x/terminal".parse().unwrap();
        assert_eq!(
            bearer_of(Surface::WebSocket, &all, &uri).as_deref(),
            Some("from-query")
        );
        assert_eq!(
            bearer_of(Surface::WebSocket, &all, &plain).as_deref(),
            Some("from-protocol")
        );
        let header_only = headers(&[("authorization", "Bearer from-header")]);
        assert_eq!(
            bearer_of(Surface::WebSocket, &header_only, &plain).as_deref(),
            Some("from-header")
        );
    }

    #[test]
    fn only_a_websocket_reads_a_token_in_its_address() {
        let uri: Uri = "/api/v1/instances?token=in-the-address".parse().unwrap();
        for surface in [Surface::Rest, Surface::Grpc, Surface::GrpcWeb, Surface::Cli] {
            assert_eq!(
                bearer_of(surface, &HeaderMap::new(), &uri),
                None,
                "{surface:?}"
            );
        }
        let with_header = headers(&[("authorization", "Bearer from-header")]);
        assert_eq!(
            bearer_of(Surface::Grpc, &with_header, &uri).as_deref(),
            Some("from-header")
        );
    }

    #[test]
    fn an_empty_token_is_no_bearer_credential() {
        let empty: Uri = "/ws/tool-instances/x/terminal?token=".parse().unwrap();
        let presented = Presented {
            bearer: bearer_of(Surface::WebSocket, &HeaderMap::new(), &empty),
            ..Presented::default()
        };
        assert!(!presented.has_bearer());
    }

    #[test]
    fn debug_output_never_shows_a_credential() {
        let presented = Presented {
            bearer: Some("secret-token".into()),
            ..Presented::default()
        };
        assert!(!format!("{presented:?}").contains("secret-token"));
    }
}
