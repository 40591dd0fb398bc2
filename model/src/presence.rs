//! Who is attached to a session ([`Attendee`]): the principal, its role, the surface it came
//! through, since when, and whether it is typing. The session's broker owns this truth (it
//! knows its attachments); everyone else reads it from the broker's reports.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use ptyhub_wire::Surface;

use crate::Role;

/// How long after its last input an attendee still counts as typing.
pub const TYPING_WINDOW: Duration = Duration::from_secs(3);

/// One attached stream of a session (docs/CONTRACT.md, "Presence"). Its JSON form is
/// `{"principal", "role", "surface", "since", "typing"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attendee {
    /// The subject of the credential the stream was opened with; `""` when its ticket named
    /// none (one minted outside the gateway).
    pub principal: String,
    /// `controller` or `viewer`. A controller taken over from reads on as a viewer.
    #[serde(with = "role_name")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "controller"))]
    pub role: Role,
    /// What the stream came through: `web`, `cli`, `grpc` or `mcp`; `""` when its ticket named
    /// none.
    pub surface: String,
    /// When the stream attached.
    pub since: DateTime<Utc>,
    /// Whether the stream wrote input within the last 3 seconds.
    pub typing: bool,
}

/// The name presence gives the surface a stream came through: the page's WebSocket and a
/// browser's gRPC-web are both `web`; what never attaches (REST, the system) keeps its own name.
pub fn presence_surface(surface: Surface) -> &'static str {
    match surface {
        Surface::WebSocket | Surface::GrpcWeb => "web",
        Surface::Grpc => "grpc",
        Surface::Cli => "cli",
        Surface::Mcp => "mcp",
        Surface::Rest => "rest",
        Surface::System => "system",
    }
}

/// The surface a presence name stands for, as the audit trail names it: `web` is the page's
/// WebSocket (a browser's gRPC-web attach is named `web` too, and is told apart nowhere else);
/// a name no surface has (a ticket that named nobody) is the system's.
pub fn surface_of_presence(name: &str) -> Surface {
    match name {
        "web" => Surface::WebSocket,
        "grpc" => Surface::Grpc,
        "cli" => Surface::Cli,
        "mcp" => Surface::Mcp,
        "rest" => Surface::Rest,
        _ => Surface::System,
    }
}

/// A [`Role`] by its contract spelling, for serde.
mod role_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    use crate::Role;

    pub fn serialize<S: Serializer>(role: &Role, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(role.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Role, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attendee_has_the_contracts_json_form() {
        let attendee = Attendee {
            principal: "alice".to_owned(),
            role: Role::Viewer,
            surface: "web".to_owned(),
            since: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            typing: true,
        };
        let json = serde_json::to_value(&attendee).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "principal": "alice",
                "role": "viewer",
                "surface": "web",
                "since": "2023-11-14T22:13:20Z",
                "typing": true,
            })
        );
        assert_eq!(serde_json::from_value::<Attendee>(json).unwrap(), attendee);
        let unknown_role = serde_json::json!({
            "principal": "alice", "role": "owner", "surface": "web",
            "since": "2023-11-14T22:13:20Z", "typing": false,
        });
        assert!(serde_json::from_value::<Attendee>(unknown_role).is_err());
    }

    #[test]
    fn every_surface_has_a_presence_name() {
        let names: Vec<_> = Surface::ALL.into_iter().map(presence_surface).collect();
        assert_eq!(
            names,
            ["rest", "web", "grpc", "web", "cli", "mcp", "system"]
        );
        for surface in Surface::ALL {
            let back = surface_of_presence(presence_surface(surface));
            assert_eq!(
                presence_surface(back),
                presence_surface(surface),
                "{surface}"
            );
        }
        assert_eq!(surface_of_presence(""), Surface::System);
    }
}
