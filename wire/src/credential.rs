//! Credentials on internal gRPC calls: the service credential every tier holds, the one client
//! interceptor that sends a bearer token, and the one server check that verifies it.
//!
//! A credential travels as `authorization: Bearer <token>` metadata. It is compared in constant
//! time, never printed (`Debug` redacts it) and marked sensitive in metadata so that HTTP/2 header
//! compression does not index it.

use std::str::FromStr;
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key that carries a credential on gRPC calls.
pub const AUTHORIZATION_METADATA: &str = "authorization";

/// The shared secret that services present to each other. At least 16 printable ASCII characters
/// without spaces, so that it always fits in a header.
#[derive(Clone)]
pub struct ServiceCredential(Arc<SecretString>);

impl ServiceCredential {
    /// The shortest credential accepted.
    pub const MIN_LEN: usize = 16;

    pub fn new(token: impl Into<String>) -> Result<Self, InvalidCredential> {
        let token = token.into();
        if token.len() < Self::MIN_LEN {
            return Err(InvalidCredential::TooShort {
                min_len: Self::MIN_LEN,
            });
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(InvalidCredential::NotPrintable);
        }
        Ok(Self(Arc::new(SecretString::from(token))))
    }

    /// The credential itself, for the one place that must hand it to another program (the
    /// environment of a child service, say).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Whether `presented` is this credential, compared in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        self.expose().as_bytes().ct_eq(presented.as_bytes()).into()
    }

    /// The interceptor that sends this credential on every call of a client.
    pub fn bearer_auth(&self) -> BearerAuth {
        BearerAuth::new(self.expose()).expect("a service credential is printable ascii")
    }

    /// The interceptor that admits only calls presenting this credential.
    pub fn require(&self) -> RequireCredential {
        RequireCredential::any_of([self.clone()])
    }

    /// A name for this credential that can be stored and compared without keeping the
    /// credential itself: the SHA-256 of it, in hex.
    pub fn fingerprint(&self) -> String {
        Sha256::digest(self.expose().as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The credential session-api presents on the control calls of the broker whose own
    /// credential (the one it registers with) is this one: derived one way from it (SHA-256 over
    /// the credential and a fixed label). So a broker with a credential of its own holds nothing
    /// that opens another broker, and session-api, which holds every broker's credential to check
    /// their registrations, needs no second secret per broker.
    pub fn broker_control_credential(&self) -> ServiceCredential {
        self.derive("ptyhub-broker-control")
    }

    /// A credential derived one way from this one for `label`: SHA-256 over the credential, `/`
    /// and the label, in hex.
    fn derive(&self, label: &str) -> ServiceCredential {
        let digest = Sha256::new()
            .chain_update(self.expose().as_bytes())
            .chain_update(b"/")
            .chain_update(label.as_bytes())
            .finalize();
        let token: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        ServiceCredential::new(token).expect("64 hex digits make a valid credential")
    }
}

impl std::fmt::Debug for ServiceCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceCredential(<redacted>)")
    }
}

impl PartialEq for ServiceCredential {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.expose())
    }
}

impl Eq for ServiceCredential {}

impl FromStr for ServiceCredential {
    type Err = InvalidCredential;

    fn from_str(token: &str) -> Result<Self, InvalidCredential> {
        Self::new(token)
    }
}

/// One credential per tier, as a deployment holds them: session-api's (the only one the brokers'
/// control calls accept), the gateways' (the only one session-api's session calls accept), and
/// the brokers' (the only one session-api's registry accepts for registrations and heartbeats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierCredentials {
    pub session_api: ServiceCredential,
    pub gateway: ServiceCredential,
    pub broker: ServiceCredential,
}

impl TierCredentials {
    /// The tiers of one process (`ptyhub up`, a test stack): session-api's credential is `seed`,
    /// and the others are derived from it one way (SHA-256 over the seed and the tier's name), so
    /// that a caller that knows the seed can reach every tier while the gateway's credential
    /// reveals nothing of the others.
    pub fn derived_from(seed: &ServiceCredential) -> Self {
        Self {
            session_api: seed.clone(),
            gateway: seed.derive("ptyhub-tier/gateway"),
            broker: seed.derive("ptyhub-tier/broker"),
        }
    }
}

/// A token that cannot be a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCredential {
    #[error("a service credential must be at least {min_len} characters")]
    TooShort { min_len: usize },
    #[error("a service credential must be printable ascii without spaces")]
    NotPrintable,
    #[error("a token must be printable ascii to be sent in a header")]
    NotAHeaderValue,
}

/// Adds `authorization: Bearer <token>` to every call of a tonic client: the one client-side
/// interceptor for service credentials and users' tokens alike.
#[derive(Clone)]
pub struct BearerAuth {
    header: MetadataValue<Ascii>,
}

impl BearerAuth {
    /// An interceptor that sends `token`, which must be printable ascii.
    pub fn new(token: &str) -> Result<Self, InvalidCredential> {
        let mut header: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| InvalidCredential::NotAHeaderValue)?;
        header.set_sensitive(true);
        Ok(Self { header })
    }

    /// Adds the credential to one request, for a client that is not intercepted.
    pub fn authorize<T>(&self, request: &mut Request<T>) {
        request
            .metadata_mut()
            .insert(AUTHORIZATION_METADATA, self.header.clone());
    }
}

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerAuth(<redacted>)")
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.authorize(&mut request);
        Ok(request)
    }
}

/// Admits only calls that present one of a tier's service credentials: the one server-side
/// check, as a tonic interceptor for whole services and as [`RequireCredential::check`] for the
/// calls of a service that admits some calls by other means (the broker's `Attach` takes a
/// ticket) or admits different tiers to different calls (session-api's registry).
#[derive(Clone, Debug)]
pub struct RequireCredential {
    credentials: Arc<[ServiceCredential]>,
}

impl RequireCredential {
    /// Admits calls that present any of `credentials` (none: admits nothing).
    pub fn any_of(credentials: impl IntoIterator<Item = ServiceCredential>) -> Self {
        Self {
            credentials: credentials.into_iter().collect(),
        }
    }

    /// `UNAUTHENTICATED` unless `metadata` carries one of the expected credentials.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        self.identify(metadata).map(|_| ())
    }

    /// Which of the expected credentials `metadata` carries, or `UNAUTHENTICATED`.
    pub fn identify(&self, metadata: &MetadataMap) -> Result<&ServiceCredential, Status> {
        let header = metadata
            .get(AUTHORIZATION_METADATA)
            .ok_or_else(|| Status::unauthenticated("missing service credential"))?
            .to_str()
            .map_err(|_| Status::unauthenticated("malformed authorization metadata"))?;
        let token = bearer_token(header)
            .ok_or_else(|| Status::unauthenticated("authorization must be a bearer token"))?;
        // Every credential is compared, so that the time taken does not tell which one matched.
        let mut matched = None;
        for credential in self.credentials.iter() {
            if credential.matches(token) {
                matched = Some(credential);
            }
        }
        matched.ok_or_else(|| Status::unauthenticated("invalid service credential"))
    }
}

impl Interceptor for RequireCredential {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(request.metadata())?;
        Ok(request)
    }
}

/// The token of an `Authorization` header value `Bearer <token>` (the scheme in any case, as RFC
/// 9110 says), or `None` for another scheme or an empty token. Every service and the gateway
/// parse the header with this.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TOKEN: &str = "0123456789abcdef-service";

    fn request_with(header: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(header) = header {
            request.metadata_mut().insert(
                AUTHORIZATION_METADATA,
                header.parse().expect("a valid header"),
            );
        }
        request
    }

    #[test]
    fn credentials_must_be_long_printable_and_never_show_in_debug() {
        assert_eq!(
            ServiceCredential::new("short"),
            Err(InvalidCredential::TooShort { min_len: 16 })
        );
        assert_eq!(
            ServiceCredential::new("0123456789abcdef ghi"),
            Err(InvalidCredential::NotPrintable)
        );
        let credential = ServiceCredential::new(TOKEN).expect("a valid credential");
        assert!(!format!("{credential:?}").contains(TOKEN));
        assert!(!format!("{:?}", credential.bearer_auth()).contains(TOKEN));
        assert!(credential.matches(TOKEN));
        assert!(!credential.matches("0123456789abcdef-servicf"));
    }

    #[test]
    fn the_bearer_header_is_parsed_one_way_everywhere() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn what_the_client_sends_the_server_admits_and_nothing_else() {
        let credential = ServiceCredential::new(TOKEN).expect("a valid credential");
        let mut check = credential.require();
        let sent = credential
            .bearer_auth()
            .call(Request::new(()))
            .expect("the interceptor never fails");
        assert!(
            sent.metadata()
                .get(AUTHORIZATION_METADATA)
                .expect("sent")
                .is_sensitive()
        );
        assert!(check.call(sent).is_ok());

        for header in [
            None,
            Some("Bearer 0123456789abcdef-other"),
            Some(TOKEN),
            Some("Basic 0123456789abcdef-service"),
        ] {
            let refused = check
                .call(request_with(header))
                .expect_err("refused without the credential");
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{header:?}");
        }
    }

    #[test]
    fn a_brokers_control_credential_is_its_own_and_opens_no_other() {
        let broker_a = ServiceCredential::new("broker-a-credential-0123456789").unwrap();
        let broker_b = ServiceCredential::new("broker-b-credential-0123456789").unwrap();
        let control_a = broker_a.broker_control_credential();
        assert_eq!(control_a, broker_a.broker_control_credential(), "stable");
        assert_ne!(control_a, broker_a);
        assert_ne!(control_a, broker_b.broker_control_credential());
        // Pinned, so that session-api and brokers of different versions derive the same, and an
        // operator can check it: `printf %s "$TOKEN/ptyhub-broker-control" | sha256sum`.
        assert_eq!(
            control_a.expose(),
            "347ff04532c2051eec23eb189707573fa5340cfb42e900eb86b1e54575006c6b"
        );
    }

    #[test]
    fn derived_tiers_differ_and_are_stable() {
        let seed = ServiceCredential::new(TOKEN).expect("valid");
        let tiers = TierCredentials::derived_from(&seed);
        assert_eq!(tiers.session_api, seed);
        assert_ne!(tiers.gateway, seed);
        assert_ne!(tiers.broker, seed);
        assert_ne!(tiers.gateway, tiers.broker);
        assert_eq!(tiers, TierCredentials::derived_from(&seed));
        assert!(!tiers.gateway.expose().contains(TOKEN));
        assert_eq!(
            tiers.gateway.expose(),
            "5bdb6903407b201e71f9f4c32c7c7d026da3a252115e3fbd3093a3275c39422c",
            "pinned"
        );
    }

    #[test]
    fn a_tier_admits_any_of_its_credentials_and_says_which() {
        let first = ServiceCredential::new("0123456789abcdef-first").expect("valid");
        let second = ServiceCredential::new("0123456789abcdef-second").expect("valid");
        let check = RequireCredential::any_of([first.clone(), second.clone()]);
        let mut sent = Request::new(());
        second.bearer_auth().authorize(&mut sent);
        assert_eq!(check.identify(sent.metadata()).expect("admitted"), &second);
        assert_ne!(first.fingerprint(), second.fingerprint());
        assert_eq!(second.fingerprint().len(), 64);
        assert!(!second.fingerprint().contains("second"));
        let nobody = RequireCredential::any_of([]);
        assert!(nobody.check(sent.metadata()).is_err());
    }

    /// `bearer` in any case.
    fn bearer_scheme() -> impl Strategy<Value = String> {
        prop::collection::vec(any::<bool>(), 6).prop_map(|upper| {
            "bearer"
                .chars()
                .zip(upper)
                .map(|(c, upper)| if upper { c.to_ascii_uppercase() } else { c })
                .collect()
        })
    }

    proptest! {
        /// `Bearer <token>`, the scheme in any case, one or more spaces after it and any spaces
        /// around the whole, gives the token back, whatever printable characters it has.
        #[test]
        fn fuzz_a_bearer_header_gives_its_token_back(
            scheme in bearer_scheme(),
            token in "[!-~]{1,80}",
            before in " {0,3}",
            between in " {1,3}",
            after in " {0,3}",
        ) {
            let header = format!("{before}{scheme}{between}{token}{after}");
            prop_assert_eq!(bearer_token(&header), Some(token.as_str()));
        }

        /// Whatever the header, a token found is the non-empty rest of a header whose scheme is
        /// `bearer`, with no spaces around it; any other scheme gives none.
        #[test]
        fn fuzz_any_authorization_header_gives_a_bearer_token_or_none(
            header in prop_oneof![
                "[ -~]{0,40}",
                "(Bearer|bearer|Basic|Bearerx|Bear) {0,2}[ -~]{0,20}",
                ".{0,30}",
            ],
        ) {
            match bearer_token(&header) {
                Some(token) => {
                    prop_assert!(!token.is_empty());
                    prop_assert_eq!(token, token.trim());
                    let (scheme, rest) = header.trim().split_at(6);
                    prop_assert!(scheme.eq_ignore_ascii_case("bearer"), "{:?}", header);
                    prop_assert!(rest.starts_with(' '), "{:?}", header);
                    prop_assert_eq!(rest.trim(), token);
                }
                None => {
                    let trimmed = header.trim();
                    let scheme_is_bearer = trimmed.len() > 7
                        && trimmed.is_char_boundary(7)
                        && trimmed[..7].eq_ignore_ascii_case("bearer ")
                        && !trimmed[7..].trim().is_empty();
                    prop_assert!(!scheme_is_bearer, "a bearer header gave no token: {:?}", header);
                }
            }
        }

        /// What a client's interceptor sends for a credential, the server's check admits as that
        /// credential, and a check of another credential refuses it.
        #[test]
        fn fuzz_a_credential_sent_is_the_credential_admitted(
            token in "[!-~]{16,64}",
            other in "[!-~]{16,64}",
        ) {
            let credential = ServiceCredential::new(token.as_str()).unwrap();
            let sent = credential.bearer_auth().call(Request::new(())).unwrap();
            let header = sent.metadata().get(AUTHORIZATION_METADATA).unwrap().to_str().unwrap();
            prop_assert_eq!(bearer_token(header), Some(token.as_str()));
            prop_assert!(credential.require().check(sent.metadata()).is_ok());
            let other = ServiceCredential::new(other.as_str()).unwrap();
            prop_assert_eq!(other.require().check(sent.metadata()).is_ok(), other == credential);
        }
    }
}
