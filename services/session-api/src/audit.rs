//! The audit trail's vocabulary: what an [`AuditEvent`] says happened ([`AuditKind`]), who did it
//! (a [`ptyhub_wire::Actor`]), and the [`AuditFilter`] a listing takes. The rows live in the
//! `audit_events` table (`store/audit.rs`), which is appended to and never changed; events older
//! than the retention (`--audit-retention`) are deleted.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ptyhub_model::Role;
use ptyhub_wire::Actor;
use uuid::Uuid;

use crate::error::Error;

/// The most events one page of a listing holds.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The page size of a listing that asks for none.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// The detail of a `refused` event that says how many refusals it stands for: a gateway reports
/// a principal's, address's and reason's refusals of a minute as one event.
pub const COUNT_DETAIL: &str = "count";
/// The most detail entries an event reported by a gateway may carry, and their longest value.
pub const MAX_DETAIL_ENTRIES: usize = 16;
pub const MAX_DETAIL_VALUE_BYTES: usize = 1024;

pub use ptyhub_model::AuditKind;

/// An event about to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEvent {
    pub kind: AuditKind,
    pub actor: Actor,
    pub instance_id: Option<Uuid>,
    pub session_id: Option<Uuid>,
    pub role: Option<Role>,
    pub attachment_id: Option<Uuid>,
    pub detail: BTreeMap<String, String>,
}

impl NewAuditEvent {
    pub fn new(kind: AuditKind, actor: &Actor) -> Self {
        Self {
            kind,
            actor: actor.clone(),
            instance_id: None,
            session_id: None,
            role: None,
            attachment_id: None,
            detail: BTreeMap::new(),
        }
    }

    pub fn instance(mut self, instance_id: Uuid) -> Self {
        self.instance_id = Some(instance_id);
        self
    }

    pub fn session(mut self, instance_id: Uuid, session_id: Uuid) -> Self {
        self.instance_id = Some(instance_id);
        self.session_id = Some(session_id);
        self
    }

    pub fn detail(mut self, key: &str, value: impl Into<String>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// An event as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub id: u64,
    pub at: DateTime<Utc>,
    pub kind: AuditKind,
    pub principal: String,
    pub instance_id: Option<Uuid>,
    pub session_id: Option<Uuid>,
    pub client_address: Option<String>,
    pub surface: String,
    pub role: Option<Role>,
    pub attachment_id: Option<Uuid>,
    pub detail: BTreeMap<String, String>,
}

/// Which events a listing returns, and which page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub instance_id: Option<Uuid>,
    pub session_id: Option<Uuid>,
    pub principal: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// `Some`: only events of these instances (a scoped caller's), none about no instance.
    pub only_instances: Option<Vec<Uuid>>,
    /// Events with an id above this one (the page token).
    pub after_id: Option<u64>,
    pub page_size: u32,
}

impl AuditFilter {
    /// Checks the bounds a listing must keep: a page size of at most [`MAX_PAGE_SIZE`] (0 is
    /// the default) and `until` not before `since`.
    pub fn validated(mut self) -> Result<Self, Error> {
        if self.page_size == 0 {
            self.page_size = DEFAULT_PAGE_SIZE;
        }
        if self.page_size > MAX_PAGE_SIZE {
            return Err(Error::InvalidRequest(format!(
                "page_size must be at most {MAX_PAGE_SIZE}"
            )));
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && until < since
        {
            return Err(Error::InvalidRequest(
                "until must not be before since".into(),
            ));
        }
        Ok(self)
    }
}

/// One page of events, and where the next begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub events: Vec<AuditEvent>,
    /// The id to list after for the next page; `None` on the last.
    pub next_after_id: Option<u64>,
}

/// A page token as the listing hands it out: the last id of the page, in decimal.
pub fn parse_page_token(token: &str) -> Result<Option<u64>, Error> {
    if token.is_empty() {
        return Ok(None);
    }
    token
        .parse::<u64>()
        .map(Some)
        .map_err(|_| Error::InvalidRequest("page_token is not one this listing handed out".into()))
}

/// Checks what a gateway reports about a stream or a refusal before it is stored.
pub fn validate_reported(event: &NewAuditEvent) -> Result<(), Error> {
    if !event.kind.reported_by_gateways() {
        return Err(Error::InvalidRequest(format!(
            "{} events are recorded by session-api itself",
            event.kind.as_str()
        )));
    }
    if event.detail.len() > MAX_DETAIL_ENTRIES {
        return Err(Error::InvalidRequest(format!(
            "an audit event carries at most {MAX_DETAIL_ENTRIES} details"
        )));
    }
    for (key, value) in &event.detail {
        if key.is_empty() || key.len() > 64 || value.len() > MAX_DETAIL_VALUE_BYTES {
            return Err(Error::InvalidRequest(format!(
                "audit detail keys are 1..=64 bytes and values at most {MAX_DETAIL_VALUE_BYTES}"
            )));
        }
    }
    // A gateway reports refusals coalesced, each event standing for `count` of them.
    if let Some(count) = event.detail.get(COUNT_DETAIL)
        && !count.parse::<u64>().is_ok_and(|count| count >= 1)
    {
        return Err(Error::InvalidRequest(
            "an audit event's count is a whole number of at least 1".into(),
        ));
    }
    if matches!(
        event.kind,
        AuditKind::Attached | AuditKind::Detached | AuditKind::SessionReset
    ) && (event.instance_id.is_none()
        || event.session_id.is_none()
        || event.attachment_id.is_none()
        || event.role.is_none())
    {
        return Err(Error::InvalidRequest(
            "stream events need an instance, a session, an attachment id and a role".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use ptyhub_test_support::fuzz;
    use ptyhub_wire::Surface;

    use super::*;

    #[test]
    fn a_filter_keeps_its_bounds() {
        let filter = AuditFilter::default()
            .validated()
            .expect("the default is fine");
        assert_eq!(filter.page_size, DEFAULT_PAGE_SIZE);
        let too_big = AuditFilter {
            page_size: MAX_PAGE_SIZE + 1,
            ..AuditFilter::default()
        };
        assert!(too_big.validated().is_err());
        let now = Utc::now();
        let backwards = AuditFilter {
            since: Some(now),
            until: Some(now - chrono::Duration::seconds(1)),
            ..AuditFilter::default()
        };
        assert!(backwards.validated().is_err());
        assert_eq!(parse_page_token("").unwrap(), None);
        assert_eq!(parse_page_token("42").unwrap(), Some(42));
        assert!(parse_page_token("forty-two").is_err());
    }

    #[test]
    fn gateways_report_only_what_session_api_cannot_see() {
        let actor = Actor::new("alice", None, Surface::WebSocket);
        let closed = NewAuditEvent::new(AuditKind::SessionClosed, &actor);
        assert!(validate_reported(&closed).is_err());
        let refused = NewAuditEvent::new(AuditKind::Refused, &actor).detail("reason", "forbidden");
        validate_reported(&refused).expect("a refusal is the gateway's to report");
        validate_reported(&refused.clone().detail(COUNT_DETAIL, "37"))
            .expect("refusals coalesced with their count");
        for count in ["0", "-1", "many", ""] {
            assert!(
                validate_reported(&refused.clone().detail(COUNT_DETAIL, count)).is_err(),
                "count {count:?}"
            );
        }
        let bare_attach = NewAuditEvent::new(AuditKind::Attached, &actor);
        assert!(
            validate_reported(&bare_attach).is_err(),
            "no session, no attachment"
        );
    }

    /// Every page token a listing hands out (an event's id in decimal) reads back as that id,
    /// and no other text reads as an id it does not spell: a token is the id's digits, with
    /// nothing but an optional `+` and leading zeros around them.
    #[test]
    fn fuzz_page_tokens_read_back_as_the_id_they_were_made_of() {
        fuzz::check(1024, any::<u64>(), |id| {
            prop_assert_eq!(parse_page_token(&id.to_string()).unwrap(), Some(id));
            Ok(())
        });
        let token = prop_oneof![
            "[0-9]{0,22}",
            "[+-]?[0-9a-f ]{0,22}",
            ".{0,24}",
            any::<u64>().prop_map(|id| format!("{id}0")),
        ];
        fuzz::check(1024, token, |token| {
            match parse_page_token(&token) {
                Ok(None) => prop_assert!(token.is_empty()),
                Ok(Some(id)) => {
                    let digits = token.strip_prefix('+').unwrap_or(&token);
                    prop_assert!(
                        digits.bytes().all(|byte| byte.is_ascii_digit()),
                        "{token:?}"
                    );
                    let significant = digits.trim_start_matches('0');
                    let spelled = if significant.is_empty() {
                        "0"
                    } else {
                        significant
                    };
                    prop_assert_eq!(spelled, id.to_string());
                }
                Err(error) => prop_assert!(
                    error.to_string().contains("page_token"),
                    "{token:?}: {error}"
                ),
            }
            Ok(())
        });
    }
}
