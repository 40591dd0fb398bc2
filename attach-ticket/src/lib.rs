//! Attach tickets: the proof a client shows a pty-broker that session-api let it attach to one
//! session in one role until a moment in time.
//!
//! A ticket is `v2.<payload>.<signature>`, both parts base64url without padding. The payload is
//! `<session uuid>.<role>.<expiry, unix seconds>`, followed by `.<surface>.<principal, base64url>`
//! when the ticket names its [`TicketHolder`]; the signature is Ed25519 over the bytes `v2.`
//! and the encoded payload. The holder is what lets a broker say who is attached (presence)
//! and whose input it writes without trusting the client's word for it. Only session-api holds the private key ([`TicketSigningKey`]); the
//! brokers hold the public key ([`TicketVerifyingKey`]), which checks a ticket and can make none,
//! so a broker that is broken into cannot mint tickets for the sessions of any other broker. A
//! broker needs no database to check one, and a ticket for one session or role is worthless for
//! another.
//!
//! Keys are PEM: the private key PKCS#8 (`-----BEGIN PRIVATE KEY-----`), the public key SPKI
//! (`-----BEGIN PUBLIC KEY-----`), as `openssl genpkey -algorithm ed25519` and
//! `openssl pkey -pubout` write them.

#![forbid(unsafe_code)]

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use ed25519_dalek::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, KeypairBytes};
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
use uuid::Uuid;

const VERSION_PREFIX: &str = "v2";

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

/// Why a key could not be read. The messages never quote the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "not an Ed25519 private key in PKCS#8 PEM (\"-----BEGIN PRIVATE KEY-----\", as `openssl genpkey -algorithm ed25519` writes it)"
    )]
    NotPrivateKey,
    #[error(
        "not an Ed25519 public key in PEM (\"-----BEGIN PUBLIC KEY-----\", as `openssl pkey -pubout` writes it)"
    )]
    NotPublicKey,
    /// A private key where only the public key belongs: whoever holds it can mint tickets, so
    /// it must stay with session-api.
    #[error(
        "this is a private key: give only the public key (`openssl pkey -in KEY -pubout`); the private key must stay with session-api"
    )]
    PrivateKeyGiven,
}

/// The verified contents of a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketClaims {
    pub session_id: Uuid,
    pub role: TicketRole,
    pub expires_at: SystemTime,
    /// Who the ticket was issued for; `None` for a ticket that names nobody.
    pub holder: Option<TicketHolder>,
}

/// Who a ticket was issued for: the subject of the end user's credential (never the
/// credential) and the surface the attach comes through, both as session-api was told by the
/// gateway that asked for the ticket. The default, both empty, stands for nobody: what a broker
/// lists for a ticket that names no holder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TicketHolder {
    pub principal: String,
    /// A surface's name (`web`, `cli`, `grpc`, `mcp`): lowercase letters, digits and `-`.
    pub surface: String,
}

/// session-api's private key, which signs tickets. Its `Debug` never shows the key, and its
/// bytes are wiped when it is dropped.
#[derive(Clone)]
pub struct TicketSigningKey {
    key: SigningKey,
}

impl fmt::Debug for TicketSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TicketSigningKey(<redacted>)")
    }
}

impl TicketSigningKey {
    /// A fresh random key (`ptyhub up`'s first start, tests).
    pub fn generate() -> Self {
        let mut secret: [u8; 32] = rand::random();
        let key = SigningKey::from_bytes(&secret);
        secret.fill(0);
        Self { key }
    }

    /// Reads a PKCS#8 PEM private key.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        SigningKey::from_pkcs8_pem(pem.trim())
            .map(|key| Self { key })
            .map_err(|_| KeyError::NotPrivateKey)
    }

    /// The key as PKCS#8 PEM, for a file only its owner may read. Version 1 of the format (the
    /// private key alone), which every tool reads (OpenSSL 3.0 reads no other).
    pub fn to_pem(&self) -> String {
        KeypairBytes {
            secret_key: self.key.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_pem(LineEnding::LF)
        .expect("an Ed25519 key always encodes")
        .to_string()
    }

    /// The public key that checks this key's tickets: what the brokers hold.
    pub fn verifying_key(&self) -> TicketVerifyingKey {
        TicketVerifyingKey {
            key: self.key.verifying_key(),
        }
    }

    /// Signs a ticket for `session_id` and `role` that expires at `expires_at`, naming nobody.
    pub fn sign(&self, session_id: Uuid, role: TicketRole, expires_at: SystemTime) -> String {
        self.sign_payload(&payload_text(session_id, role, expires_at))
    }

    /// Signs a ticket like [`TicketSigningKey::sign`] that also names its holder. A surface
    /// name with characters other than lowercase letters, digits and `-` is left out (named
    /// `""`), since a `.` would change the payload's fields.
    pub fn sign_for(
        &self,
        session_id: Uuid,
        role: TicketRole,
        expires_at: SystemTime,
        holder: &TicketHolder,
    ) -> String {
        let surface = if is_surface_name(&holder.surface) {
            holder.surface.as_str()
        } else {
            ""
        };
        let payload = format!(
            "{}.{surface}.{}",
            payload_text(session_id, role, expires_at),
            URL_SAFE_NO_PAD.encode(&holder.principal)
        );
        self.sign_payload(&payload)
    }

    fn sign_payload(&self, payload: &str) -> String {
        let payload = URL_SAFE_NO_PAD.encode(payload);
        let signature: Signature = ed25519_dalek::Signer::sign(&self.key, &signed_bytes(&payload));
        let signature = URL_SAFE_NO_PAD.encode(signature.to_bytes());
        format!("{VERSION_PREFIX}.{payload}.{signature}")
    }
}

/// session-api's public key, which checks tickets and can make none.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketVerifyingKey {
    key: VerifyingKey,
}

impl fmt::Debug for TicketVerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TicketVerifyingKey({})",
            URL_SAFE_NO_PAD.encode(self.key.as_bytes())
        )
    }
}

impl TicketVerifyingKey {
    /// Reads an SPKI PEM public key. A private key is refused: it does not belong where only
    /// tickets are checked.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        if pem.contains("PRIVATE KEY-----") {
            return Err(KeyError::PrivateKeyGiven);
        }
        VerifyingKey::from_public_key_pem(pem.trim())
            .map(|key| Self { key })
            .map_err(|_| KeyError::NotPublicKey)
    }

    /// The key as SPKI PEM.
    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("an Ed25519 public key always encodes")
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
        let (Some(VERSION_PREFIX), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TicketError::Malformed);
        };
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TicketError::Malformed)?;
        let signature = Signature::from_slice(&signature).map_err(|_| TicketError::Malformed)?;
        // Strict: no malleable signatures, no weak keys.
        self.key
            .verify_strict(&signed_bytes(payload), &signature)
            .map_err(|_| TicketError::BadSignature)?;

        // Only a payload session-api signed gets this far, but parse it defensively all the same.
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TicketError::Malformed)?;
        let payload = String::from_utf8(payload).map_err(|_| TicketError::Malformed)?;
        let fields: Vec<&str> = payload.split('.').collect();
        let (session_id, role, expiry, holder) = match fields[..] {
            [session_id, role, expiry] => (session_id, role, expiry, None),
            [session_id, role, expiry, surface, principal] => {
                (session_id, role, expiry, Some(holder(surface, principal)?))
            }
            _ => return Err(TicketError::Malformed),
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
            holder,
        })
    }
}

/// The payload's first three fields: session, role, expiry.
fn payload_text(session_id: Uuid, role: TicketRole, expires_at: SystemTime) -> String {
    let expiry_seconds = expires_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("{}.{}.{}", session_id, role.as_str(), expiry_seconds)
}

fn is_surface_name(text: &str) -> bool {
    text.bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

/// The holder of a signed payload's last two fields.
fn holder(surface: &str, principal: &str) -> Result<TicketHolder, TicketError> {
    if !is_surface_name(surface) {
        return Err(TicketError::Malformed);
    }
    let principal = URL_SAFE_NO_PAD
        .decode(principal)
        .map_err(|_| TicketError::Malformed)?;
    Ok(TicketHolder {
        principal: String::from_utf8(principal).map_err(|_| TicketError::Malformed)?,
        surface: surface.to_owned(),
    })
}

/// What a signature covers: the version, so that a signature of one format is never read as
/// another's, and the encoded payload.
fn signed_bytes(encoded_payload: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(VERSION_PREFIX.len() + 1 + encoded_payload.len());
    bytes.extend_from_slice(VERSION_PREFIX.as_bytes());
    bytes.push(b'.');
    bytes.extend_from_slice(encoded_payload.as_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, Mac as _};
    use sha2::Sha256;

    use super::*;

    /// A key written by `openssl genpkey -algorithm ed25519`, and its public half by
    /// `openssl pkey -pubout`: the files an operator makes are read as they are.
    const OPENSSL_PRIVATE_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMN0Jpn1HHtTfqtJ/ZDeRAn+L9og+Sxlzm4m2hAcsyHG
-----END PRIVATE KEY-----
";
    const OPENSSL_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAff+zQUXye12i1DSl0qgx+ieyMuPEcUPEPQ6DS6Hcu+Q=
-----END PUBLIC KEY-----
";

    fn key() -> TicketSigningKey {
        TicketSigningKey::from_pem(OPENSSL_PRIVATE_KEY).unwrap()
    }

    fn public() -> TicketVerifyingKey {
        TicketVerifyingKey::from_pem(OPENSSL_PUBLIC_KEY).unwrap()
    }

    fn in_a_minute() -> SystemTime {
        SystemTime::now() + Duration::from_secs(60)
    }

    #[test]
    fn signed_ticket_verifies_for_its_session_and_role() {
        let session_id = Uuid::new_v4();
        let ticket = key().sign(session_id, TicketRole::Controller, in_a_minute());
        assert!(ticket.starts_with("v2."), "{ticket}");
        let claims = public()
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
    fn a_ticket_names_its_holder_and_an_older_one_names_nobody() {
        let session_id = Uuid::new_v4();
        let holder = TicketHolder {
            principal: "alice.example@corp.test".to_owned(),
            surface: "web".to_owned(),
        };
        let ticket = key().sign_for(session_id, TicketRole::Viewer, in_a_minute(), &holder);
        let claims = public()
            .verify(&ticket, session_id, TicketRole::Viewer, SystemTime::now())
            .unwrap();
        assert_eq!(claims.holder, Some(holder));

        let anonymous = key().sign(session_id, TicketRole::Viewer, in_a_minute());
        let claims = public()
            .verify(
                &anonymous,
                session_id,
                TicketRole::Viewer,
                SystemTime::now(),
            )
            .unwrap();
        assert_eq!(claims.holder, None);

        // A surface that would split the payload is left out rather than signed as given.
        let odd = TicketHolder {
            principal: "bob".to_owned(),
            surface: "we.b".to_owned(),
        };
        let ticket = key().sign_for(session_id, TicketRole::Viewer, in_a_minute(), &odd);
        let claims = public()
            .verify(&ticket, session_id, TicketRole::Viewer, SystemTime::now())
            .unwrap();
        assert_eq!(claims.holder.unwrap().surface, "");
    }

    #[test]
    fn keys_written_by_openssl_are_read_and_written_back_the_same() {
        assert_eq!(key().verifying_key(), public());
        assert_eq!(key().to_pem(), OPENSSL_PRIVATE_KEY);
        assert_eq!(public().to_pem(), OPENSSL_PUBLIC_KEY);
        let generated = TicketSigningKey::generate();
        let again = TicketSigningKey::from_pem(&generated.to_pem()).unwrap();
        assert_eq!(again.verifying_key(), generated.verifying_key());
        assert_ne!(generated.verifying_key(), public(), "a fresh key each time");
    }

    #[test]
    fn controller_ticket_admits_viewer_but_not_the_reverse() {
        let session_id = Uuid::new_v4();
        let controller = key().sign(session_id, TicketRole::Controller, in_a_minute());
        let viewer = key().sign(session_id, TicketRole::Viewer, in_a_minute());
        let now = SystemTime::now();
        assert!(
            public()
                .verify(&controller, session_id, TicketRole::Viewer, now)
                .is_ok()
        );
        assert_eq!(
            public().verify(&viewer, session_id, TicketRole::Controller, now),
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
            public().verify(&ticket, session_id, TicketRole::Viewer, just_after),
            Err(TicketError::Expired)
        );
        assert!(
            public()
                .verify(&ticket, session_id, TicketRole::Viewer, just_before)
                .is_ok()
        );
    }

    #[test]
    fn ticket_for_another_session_is_refused() {
        let ticket = key().sign(Uuid::new_v4(), TicketRole::Controller, in_a_minute());
        let error = public()
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
        let other = TicketSigningKey::generate();
        let ticket = other.sign(session_id, TicketRole::Controller, in_a_minute());
        assert_eq!(
            public().verify(&ticket, session_id, TicketRole::Viewer, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
    }

    /// What a broker held before tickets were signed with session-api's private key: a secret
    /// shared with session-api, with which any broker could make a valid ticket. Such tickets,
    /// and any HMAC in the place of the signature, are refused.
    #[test]
    fn hmac_tickets_of_a_shared_secret_are_refused() {
        let session_id = Uuid::new_v4();
        let payload = URL_SAFE_NO_PAD.encode(format!("{session_id}.controller.99999999999"));
        for version in ["v1", "v2"] {
            let mut mac =
                <Hmac<Sha256> as hmac::Mac>::new_from_slice(b"a secret every broker held").unwrap();
            mac.update(format!("{version}.{payload}").as_bytes());
            let mac = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
            let forged = format!("{version}.{payload}.{mac}");
            let error = public().decode(&forged, SystemTime::now()).unwrap_err();
            assert!(error.is_unauthenticated(), "{version}: {error:?}");
        }
    }

    #[test]
    fn tampered_payload_is_refused() {
        let session_id = Uuid::new_v4();
        let viewer = key().sign(session_id, TicketRole::Viewer, in_a_minute());
        let forged_payload = URL_SAFE_NO_PAD.encode(format!("{session_id}.controller.99999999999"));
        let signature = viewer.rsplit('.').next().unwrap();
        let forged = format!("v2.{forged_payload}.{signature}");
        assert_eq!(
            public().decode(&forged, SystemTime::now()),
            Err(TicketError::BadSignature)
        );
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [
            "",
            ".",
            "v2",
            "v2..",
            "v1.a.b",
            "v2.a.b.c",
            "v2.!!!.???",
            "v2.\u{1F600}.x",
            "v2.YQ.YQ",
        ] {
            let error = public().decode(garbage, SystemTime::now()).unwrap_err();
            assert!(error.is_unauthenticated(), "{garbage:?} gave {error:?}");
        }
    }

    #[test]
    fn keys_of_the_wrong_kind_are_refused_by_name() {
        assert_eq!(
            TicketVerifyingKey::from_pem(OPENSSL_PRIVATE_KEY).unwrap_err(),
            KeyError::PrivateKeyGiven
        );
        assert_eq!(
            TicketSigningKey::from_pem(OPENSSL_PUBLIC_KEY).unwrap_err(),
            KeyError::NotPrivateKey
        );
        assert_eq!(
            TicketSigningKey::from_pem("a ticket secret of old").unwrap_err(),
            KeyError::NotPrivateKey
        );
        assert_eq!(
            TicketVerifyingKey::from_pem("").unwrap_err(),
            KeyError::NotPublicKey
        );
    }

    #[test]
    fn debug_does_not_show_the_private_key() {
        assert_eq!(format!("{:?}", key()), "TicketSigningKey(<redacted>)");
        assert!(format!("{:?}", public()).starts_with("TicketVerifyingKey("));
    }
}
