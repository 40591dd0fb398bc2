//! Attach tickets: the proof a client shows a pty-broker that session-api let it attach to one
//! session in one role until a moment in time.
//!
//! A ticket is `v1.<payload>.<mac>`, both parts base64url without padding. The payload is
//! `<session uuid>.<role>.<expiry, unix seconds>`; the mac is HMAC-SHA256 over the bytes `v1.` and
//! the encoded payload, keyed by a secret that session-api and the brokers share. A broker needs
//! no database to check one, and a ticket for one session or role is worthless for another.

#![forbid(unsafe_code)]

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

const VERSION_PREFIX: &str = "v1";

/// Shortest secret accepted: anything shorter is too easy to guess.
pub const MIN_SECRET_BYTES: usize = 16;

/// How long a ticket is valid by default: long enough to open a stream, short enough that a
/// leaked one is soon useless.
pub const DEFAULT_TICKET_TTL: Duration = Duration::from_secs(60);

/// What a ticket lets its holder do. A controller ticket also admits a viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketRole {
    Controller,
    Viewer,
}

impl TicketRole {
    fn as_str(self) -> &'static str {
        match self {
            TicketRole::Controller => "controller",
            TicketRole::Viewer => "viewer",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "controller" => Some(TicketRole::Controller),
            "viewer" => Some(TicketRole::Viewer),
            _ => None,
        }
    }

    /// Whether a ticket issued for `self` admits a client asking for `requested`.
    pub fn admits(self, requested: TicketRole) -> bool {
        self == TicketRole::Controller || requested == TicketRole::Viewer
    }
}

/// Why a ticket was refused. `Malformed`, `BadSignature` and `Expired` mean the caller is not
/// authenticated; `WrongSession` and `RoleNotGranted` mean it is, but not for this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("attach ticket is malformed")]
    Malformed,
    #[error("attach ticket signature is invalid")]
    BadSignature,
    #[error("attach ticket has expired")]
    Expired,
    #[error("attach ticket is for another session")]
    WrongSession,
    #[error("attach ticket does not grant the {0} role")]
    RoleNotGranted(&'static str),
    #[error("ticket secret must be at least {MIN_SECRET_BYTES} bytes")]
    SecretTooShort,
}

impl TicketError {
    /// True when the ticket itself cannot be trusted (as opposed to a valid ticket for something
    /// else).
    pub fn is_unauthenticated(&self) -> bool {
        matches!(
            self,
            TicketError::Malformed | TicketError::BadSignature | TicketError::Expired
        )
    }
}

/// The verified contents of a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketClaims {
    pub session_id: Uuid,
    pub role: TicketRole,
    pub expires_at: SystemTime,
}

/// The shared secret. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct TicketKey {
    secret: Vec<u8>,
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TicketKey(<redacted>)")
    }
}

impl TicketKey {
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<Self, TicketError> {
        let secret = secret.into();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(TicketError::SecretTooShort);
        }
        Ok(Self { secret })
    }

    /// A fresh random key, for a single process that both signs and verifies (`ptyhub up`).
    pub fn generate() -> Self {
        let secret: [u8; 32] = rand::random();
        Self {
            secret: secret.to_vec(),
        }
    }

    /// Signs a ticket for `session_id` and `role` that expires at `expires_at`.
    pub fn sign(&self, session_id: Uuid, role: TicketRole, expires_at: SystemTime) -> String {
        let expiry_seconds = expires_at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let payload = URL_SAFE_NO_PAD.encode(format!(
            "{}.{}.{}",
            session_id,
            role.as_str(),
            expiry_seconds
        ));
        let mac = URL_SAFE_NO_PAD.encode(self.mac(&payload).finalize().into_bytes());
        format!("{VERSION_PREFIX}.{payload}.{mac}")
    }

    /// Checks the signature and expiry, and that the ticket is for `session_id` and admits
    /// `requested_role`.
    pub fn verify(
        &self,
        ticket: &str,
        session_id: Uuid,
        requested_role: TicketRole,
        now: SystemTime,
    ) -> Result<TicketClaims, TicketError> {
        let claims = self.decode(ticket, now)?;
        if claims.session_id != session_id {
            return Err(TicketError::WrongSession);
        }
        if !claims.role.admits(requested_role) {
            return Err(TicketError::RoleNotGranted(requested_role.as_str()));
        }
        Ok(claims)
    }

    /// Checks the signature and expiry and returns what the ticket says.
    pub fn decode(&self, ticket: &str, now: SystemTime) -> Result<TicketClaims, TicketError> {
        let mut parts = ticket.split('.');
        let (Some(VERSION_PREFIX), Some(payload), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TicketError::Malformed);
        };
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| TicketError::Malformed)?;
        self.mac(payload)
            .verify_slice(&mac)
            .map_err(|_| TicketError::BadSignature)?;

        // Only a payload we signed gets this far, but parse it defensively all the same.
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TicketError::Malformed)?;
        let payload = String::from_utf8(payload).map_err(|_| TicketError::Malformed)?;
        let mut fields = payload.split('.');
        let (Some(session_id), Some(role), Some(expiry), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(TicketError::Malformed);
        };
        let session_id = Uuid::parse_str(session_id).map_err(|_| TicketError::Malformed)?;
        let role = TicketRole::parse(role).ok_or(TicketError::Malformed)?;
        let expiry_seconds: u64 = expiry.parse().map_err(|_| TicketError::Malformed)?;
        let expires_at = UNIX_EPOCH + Duration::from_secs(expiry_seconds);
        if now >= expires_at {
            return Err(TicketError::Expired);
        }
        Ok(TicketClaims {
            session_id,
            role,
            expires_at,
        })
    }

    fn mac(&self, encoded_payload: &str) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("hmac accepts keys of any length");
        mac.update(VERSION_PREFIX.as_bytes());
        mac.update(b".");
        mac.update(encoded_payload.as_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TicketKey {
        TicketKey::new(*b"0123456789abcdef0123456789abcdef").unwrap()
    }

    fn in_a_minute() -> SystemTime {
        SystemTime::now() + Duration::from_secs(60)
    }

    #[test]
    fn signed_ticket_verifies_for_its_session_and_role() {
        let session_id = Uuid::new_v4();
        let ticket = key().sign(session_id, TicketRole::Controller, in_a_minute());
        let claims = key()
            .verify(
                &ticket,
                session_id,
                TicketRole::Controller,
                SystemTime::now(),
            )
            .unwrap();
        assert_eq!(claims.session_id, session_id);
        assert_eq!(claims.role, TicketRole::Controller);
    }

    #[test]
    fn controller_ticket_admits_viewer_but_not_the_reverse() {
        let session_id = Uuid::new_v4();
        let controller = key().sign(session_id, TicketRole::Controller, in_a_minute());
        let viewer = key().sign(session_id, TicketRole::Viewer, in_a_minute());
        let now = SystemTime::now();
        assert!(
            key()
                .verify(&controller, session_id, TicketRole::Viewer, now)
                .is_ok()
        );
        assert_eq!(
            key().verify(&viewer, session_id, TicketRole::Controller, now),
            Err(TicketError::RoleNotGranted("controller"))
        );
    }

    #[test]
    fn expired_ticket_is_refused() {
        let session_id = Uuid::new_v4();
        let expires_at = UNIX_EPOCH + Duration::from_secs(1_000);
        let ticket = key().sign(session_id, TicketRole::Viewer, expires_at);
        let just_after = expires_at + Duration::from_secs(1);
        let just_before = expires_at - Duration::from_secs(1);
        assert_eq!(
            key().verify(&ticket, session_id, TicketRole::Viewer, just_after),
            Err(TicketError::Expired)
        );
        assert!(
            key()
                .verify(&ticket, session_id, TicketRole::Viewer, just_before)
                .is_ok()
        );
    }

    #[test]
    fn ticket_for_another_session_is_refused() {
        let ticket = key().sign(Uuid::new_v4(), TicketRole::Controller, in_a_minute());
        let error = key()
            .verify(
                &ticket,
                Uuid::new_v4(),
                TicketRole::Viewer,
                SystemTime::now(),
            )
            .unwrap_err();
        assert_eq!(error, TicketError::WrongSession);
        assert!(!error.is_unauthenticated());
    }

    #[test]
    fn ticket_signed_with_another_key_is_refused() {
        let session_id = Uuid::new_v4();
        let other = TicketKey::new(*b"another secret of enough bytes!!").unwrap();
        let ticket = other.sign(session_id, TicketRole::Controller, in_a_minute());
        assert_eq!(
            key().verify(&ticket, session_id, TicketRole::Viewer, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn tampered_payload_is_refused() {
        let session_id = Uuid::new_v4();
        let viewer = key().sign(session_id, TicketRole::Viewer, in_a_minute());
        let forged_payload = URL_SAFE_NO_PAD.encode(format!("{session_id}.controller.99999999999"));
        let mac = viewer.rsplit('.').next().unwrap();
        let forged = format!("v1.{forged_payload}.{mac}");
        assert_eq!(
            key().decode(&forged, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [
            "",
            ".",
            "v1",
            "v1..",
            "v2.a.b",
            "v1.a.b.c",
            "v1.!!!.???",
            "v1.\u{1F600}.x",
        ] {
            let error = key().decode(garbage, SystemTime::now()).unwrap_err();
            assert!(error.is_unauthenticated(), "{garbage:?} gave {error:?}");
        }
    }

    #[test]
    fn short_secret_is_refused() {
        assert_eq!(
            TicketKey::new(b"short".to_vec()).unwrap_err(),
            TicketError::SecretTooShort
        );
    }

    #[test]
    fn debug_does_not_show_the_secret() {
        assert_eq!(format!("{:?}", key()), "TicketKey(<redacted>)");
    }
}
