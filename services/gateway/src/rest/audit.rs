//! `GET /api/v1/audit`: the audit trail, oldest first, with filters and pages. A caller whose
//! scope does not cover every instance sees the events of its own instances only (never the
//! refusals of unknown callers, which are about no instance); the gateway's gRPC surface
//! scopes `ListAuditEvents` the same way ([`scope_audit_listing`]).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use ptyhub_model::AuditKind;
use ptyhub_wire::{ErrorCode, Surface};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::Caller;
use crate::auth::Principal;
use crate::domain::{AuditEvent, AuditListing};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The most events one page holds.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// The filters and the page of a listing.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Instance id or name (an id also finds the events of a deleted instance).
    pub instance: Option<String>,
    /// Session id (a UUID).
    pub session: Option<String>,
    /// The principal (a JWT's `sub`, `api-token-<n>`, `system`).
    pub principal: Option<String>,
    /// RFC 3339: events at or after this time.
    pub since: Option<String>,
    /// RFC 3339: events before this time.
    pub until: Option<String>,
    /// 1..=1000, default 100.
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub events: Vec<AuditEventBody>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// One event: what happened, to what, by whom, from where, through which surface.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEventBody {
    pub id: u64,
    pub at: Option<DateTime<Utc>>,
    /// `instance_created`, `instance_deleted`, `session_created`, `session_renamed`,
    /// `control_mode_changed`, `session_reset`, `session_closed`, `attached`, `detached`,
    /// `takeover`, `input`, `refused`, ... (docs/CONTRACT.md lists them all).
    pub kind: String,
    /// The credential's subject, `system` for ptyhub's own actions, `""` for a refused
    /// credential.
    pub principal: String,
    pub instance_id: Option<String>,
    pub session_id: Option<String>,
    pub client_address: Option<String>,
    /// `rest`, `websocket`, `grpc`, `grpc-web`, `cli` or `system`.
    pub surface: String,
    /// `controller` or `viewer`, for stream events.
    pub role: Option<String>,
    /// One stream's id, the same in its `attached` and `detached`.
    pub attachment_id: Option<String>,
    /// What else the kind carries (`name`, `reason`, `from`, `bytes`, `action`, `count`, ...);
    /// a `refused` event's `count` is how many refusals it stands for.
    pub detail: BTreeMap<String, String>,
}

/// The audit trail; 422 for a bad filter.
#[utoipa::path(
    get, path = "/api/v1/audit", tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPage), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list_audit_events(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let listing = listing_request(query)?;
    let listing = scope_audit_listing(&state, &principal, listing).await?;
    let page = state
        .upstreams
        .acting_for(&principal.actor(Surface::Rest))
        .list_audit_events(listing)
        .await?;
    Ok(Json(AuditPage {
        events: page.events.into_iter().map(event_body).collect(),
        next_cursor: page.next_page_token,
    }))
}

/// The query as session-api's request, every filter checked (422 when one is bad).
fn listing_request(query: AuditQuery) -> Result<AuditListing, ApiError> {
    let present = |value: Option<String>| value.filter(|value| !value.is_empty());
    let time = |name: &str, value: Option<String>| {
        present(value)
            .map(|value| {
                DateTime::parse_from_rfc3339(&value)
                    .map(|at| at.with_timezone(&Utc))
                    .map_err(|_| {
                        ApiError::invalid(format!(
                            "{name} must be an RFC 3339 time, for example 2026-12-01T17:00:00Z"
                        ))
                    })
            })
            .transpose()
    };
    let since = time("since", query.since)?;
    let until = time("until", query.until)?;
    if let (Some(since), Some(until)) = (since, until)
        && until < since
    {
        return Err(ApiError::invalid("until must not be before since"));
    }
    let session_id = present(query.session).unwrap_or_default();
    if !session_id.is_empty() && uuid::Uuid::parse_str(&session_id).is_err() {
        return Err(ApiError::invalid("session must be a session id (a uuid)"));
    }
    let page_size = match present(query.limit) {
        None => 0,
        Some(limit) => match limit.parse::<u32>() {
            Ok(limit @ 1..=MAX_AUDIT_PAGE) => limit,
            _ => {
                return Err(ApiError::invalid(format!(
                    "limit must be a number from 1 to {MAX_AUDIT_PAGE}"
                )));
            }
        },
    };
    let page_token = present(query.cursor).unwrap_or_default();
    if !page_token.is_empty() && page_token.parse::<u64>().is_err() {
        return Err(ApiError::invalid(
            "cursor must be the next_cursor of a previous page",
        ));
    }
    let principal = present(query.principal).unwrap_or_default();
    if principal.len() > ptyhub_wire::MAX_PRINCIPAL_BYTES {
        return Err(ApiError::invalid(format!(
            "principal must be at most {} bytes",
            ptyhub_wire::MAX_PRINCIPAL_BYTES
        )));
    }
    Ok(AuditListing {
        instance: present(query.instance).unwrap_or_default(),
        session_id,
        principal,
        since,
        until,
        page_size,
        page_token,
        only_instances: None,
    })
}

/// Narrows a listing to what `principal` may see: the instance it names must be one the
/// principal may use (403 otherwise, as everywhere), and a principal whose scope does not cover
/// every instance gets only the events of the instances it may use.
pub async fn scope_audit_listing(
    state: &AppState,
    principal: &Principal,
    mut listing: AuditListing,
) -> Result<AuditListing, ApiError> {
    // A share link shows a terminal, never who did what on the instance.
    principal
        .access
        .require_control("reading the audit trail")?;
    if !listing.instance.is_empty() {
        match state.authorize_instance(principal, &listing.instance).await {
            Ok(instance) => listing.instance = instance.id,
            // A deleted instance's history, by the id the principal's scope names.
            Err(error)
                if error.code == ErrorCode::NotFound
                    && uuid::Uuid::parse_str(&listing.instance).is_ok()
                    && principal.access.names(&listing.instance) => {}
            Err(error) => return Err(error),
        }
    }
    if !principal.access.covers_all_instances() {
        listing.only_instances = Some(
            state
                .upstreams
                .list_instances()
                .await?
                .into_iter()
                .filter(|instance| principal.access.allows(instance))
                .map(|instance| instance.id)
                .collect(),
        );
    }
    Ok(listing)
}

fn event_body(event: AuditEvent) -> AuditEventBody {
    AuditEventBody {
        id: event.id,
        at: event.at,
        kind: event.kind.map_or("unknown", AuditKind::as_str).to_owned(),
        principal: event.principal,
        instance_id: event.instance_id,
        session_id: event.session_id,
        client_address: event.client_address,
        surface: event.surface,
        role: event.role.map(|role| role.as_str().to_owned()),
        attachment_id: event.attachment_id,
        detail: event.detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> AuditQuery {
        let mut query = AuditQuery::default();
        for (key, value) in pairs {
            let value = Some((*value).to_owned());
            match *key {
                "since" => query.since = value,
                "until" => query.until = value,
                "limit" => query.limit = value,
                "session" => query.session = value,
                "cursor" => query.cursor = value,
                _ => unreachable!("no such filter in these tests"),
            }
        }
        query
    }

    #[test]
    fn bad_filters_are_refused_before_session_api_is_asked() {
        for bad in [
            &[("since", "yesterday")][..],
            &[("until", "2026-13-01T00:00:00Z")],
            &[
                ("since", "2026-12-02T00:00:00Z"),
                ("until", "2026-12-01T00:00:00Z"),
            ],
            &[("limit", "0")],
            &[("limit", "1001")],
            &[("limit", "-5")],
            &[("session", "not-a-uuid")],
            &[("cursor", "abc")],
        ] {
            let refused = listing_request(query(bad)).expect_err("a bad filter");
            assert_eq!(refused.code, ErrorCode::Invalid, "{bad:?}");
            assert_eq!(refused.code.http_status().as_u16(), 422, "{bad:?}");
        }
        let fine = listing_request(query(&[
            ("since", "2026-12-01T00:00:00+01:00"),
            ("until", "2026-12-01T00:00:00Z"),
            ("limit", "1000"),
            ("cursor", "17"),
        ]))
        .expect("good filters");
        assert_eq!(fine.page_size, 1000);
        assert_eq!(
            fine.since.expect("since") + chrono::Duration::hours(1),
            fine.until.expect("until")
        );
    }
}
