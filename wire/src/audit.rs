//! Who an action is done for, as a gateway tells session-api: the [`Actor`] (the end user's
//! principal, the client's address, the surface it came through) travels as gRPC metadata on
//! the gateway's calls, so session-api's audit trail names the person or program rather than
//! the gateway. Only the subject of a credential ever travels, never the credential.

use std::fmt;

use tonic::metadata::{MetadataMap, MetadataValue};

/// The principal's subject (`sub` of a JWT, `api-token-<n>`, `anonymous`).
pub const ACTOR_PRINCIPAL_METADATA: &str = "ptyhub-actor-principal";
/// The client's address as the gateway saw it (`ip:port`).
pub const ACTOR_ADDRESS_METADATA: &str = "ptyhub-actor-address";
/// The surface: one of [`Surface::as_str`].
pub const ACTOR_SURFACE_METADATA: &str = "ptyhub-actor-surface";

/// How the `ptyhub` CLI's user agent begins, so the gateway can tell its calls (surface `cli`)
/// from other gRPC clients'.
pub const CLI_USER_AGENT_PREFIX: &str = "ptyhub-cli/";

/// The longest principal an audit event keeps; a longer subject is cut (at a character
/// boundary), so a JWT cannot fill the trail with one claim.
pub const MAX_PRINCIPAL_BYTES: usize = 256;

/// What an action came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    Rest,
    WebSocket,
    Grpc,
    GrpcWeb,
    /// The `ptyhub` CLI (gRPC through the gateway, told apart by its user agent).
    Cli,
    /// The gateway's Model Context Protocol endpoint (`/mcp`), for agents.
    Mcp,
    /// session-api itself: an exit, an idle reap, a lost broker.
    System,
}

impl Surface {
    pub const ALL: [Surface; 7] = [
        Surface::Rest,
        Surface::WebSocket,
        Surface::Grpc,
        Surface::GrpcWeb,
        Surface::Cli,
        Surface::Mcp,
        Surface::System,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Rest => "rest",
            Surface::WebSocket => "websocket",
            Surface::Grpc => "grpc",
            Surface::GrpcWeb => "grpc-web",
            Surface::Cli => "cli",
            Surface::Mcp => "mcp",
            Surface::System => "system",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|surface| surface.as_str() == text)
    }
}

impl fmt::Display for Surface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end user an action is done for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub principal: String,
    pub client_address: Option<String>,
    pub surface: Surface,
}

impl Actor {
    /// `principal` (cut to [`MAX_PRINCIPAL_BYTES`]) acting through `surface`.
    pub fn new(principal: &str, client_address: Option<String>, surface: Surface) -> Self {
        Self {
            principal: truncated(principal, MAX_PRINCIPAL_BYTES).to_owned(),
            client_address,
            surface,
        }
    }

    /// A caller whose credential named nobody (it was missing or refused).
    pub fn unknown(client_address: Option<String>, surface: Surface) -> Self {
        Self::new("", client_address, surface)
    }

    /// session-api acting on its own (`system`).
    pub fn system() -> Self {
        Self::new("system", None, Surface::System)
    }

    /// Puts the actor on a request's metadata. A value that cannot be a header value (a
    /// subject with control characters) is percent-encoded rather than dropped.
    pub fn insert_into(&self, metadata: &mut MetadataMap) {
        let mut insert = |key: &'static str, value: &str| {
            if let Ok(value) = MetadataValue::try_from(header_safe(value).as_str()) {
                metadata.insert(key, value);
            }
        };
        insert(ACTOR_PRINCIPAL_METADATA, &self.principal);
        if let Some(address) = &self.client_address {
            insert(ACTOR_ADDRESS_METADATA, address);
        }
        insert(ACTOR_SURFACE_METADATA, self.surface.as_str());
    }

    /// The actor a request names, if it names one; `None` without the principal's key (an
    /// empty principal is a caller whose credential was refused). An unknown surface reads as
    /// gRPC.
    pub fn from_metadata(metadata: &MetadataMap) -> Option<Self> {
        let text = |key: &str| {
            metadata
                .get(key)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
        };
        // Present but empty: a refused caller whose credential named nobody.
        let principal = metadata
            .get(ACTOR_PRINCIPAL_METADATA)
            .and_then(|value| value.to_str().ok())?;
        let surface = text(ACTOR_SURFACE_METADATA)
            .and_then(Surface::parse)
            .unwrap_or(Surface::Grpc);
        Some(Self::new(
            principal,
            text(ACTOR_ADDRESS_METADATA).map(|address| truncated(address, 128).to_owned()),
            surface,
        ))
    }
}

/// `text` cut to at most `bytes` bytes at a character boundary.
fn truncated(text: &str, bytes: usize) -> &str {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Visible ASCII as it is; everything else (and `%`) as `%XX` of its UTF-8 bytes.
fn header_safe(text: &str) -> String {
    let mut safe = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            safe.push(char::from(byte));
        } else {
            safe.push_str(&format!("%{byte:02X}"));
        }
    }
    safe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_survives_the_metadata_round_trip() {
        let actor = Actor::new("alice", Some("127.0.0.1:5000".into()), Surface::WebSocket);
        let mut metadata = MetadataMap::new();
        actor.insert_into(&mut metadata);
        assert_eq!(Actor::from_metadata(&metadata), Some(actor));
    }

    #[test]
    fn a_request_without_a_principal_names_no_actor() {
        let mut metadata = MetadataMap::new();
        metadata.insert(ACTOR_SURFACE_METADATA, "rest".parse().unwrap());
        assert_eq!(Actor::from_metadata(&metadata), None);
    }

    #[test]
    fn odd_subjects_are_encoded_and_long_ones_cut() {
        let actor = Actor::new("ali\nce%é", None, Surface::Rest);
        let mut metadata = MetadataMap::new();
        actor.insert_into(&mut metadata);
        let read = Actor::from_metadata(&metadata).expect("an actor");
        assert_eq!(read.principal, "ali%0Ace%25%C3%A9");
        assert_eq!(read.surface, Surface::Rest);

        let long = "é".repeat(200);
        let actor = Actor::new(&long, None, Surface::Grpc);
        assert!(actor.principal.len() <= MAX_PRINCIPAL_BYTES);
        assert!(actor.principal.chars().all(|c| c == 'é'));
    }

    #[test]
    fn every_surface_parses_from_its_name() {
        for surface in Surface::ALL {
            assert_eq!(Surface::parse(surface.as_str()), Some(surface));
        }
        assert_eq!(Surface::parse("telnet"), None);
    }
}
