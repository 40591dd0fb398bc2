//! Turning what a request presents into its principal: a share link's token or cookie checked
//! with session-api, any other bearer credential or cookie by the [`crate::auth::Authenticator`],
//! anonymous when the gateway has no credentials; refused credentials counted per client
//! address, and answered 429 once the address is out of tries.

use ptyhub_wire::ErrorCode;
use tokio::time::Instant;

use super::Presented;
use crate::auth::{Principal, SHARE_TOKEN_PREFIX, Via};
use crate::domain::ShareLookup;
use crate::error::{ApiError, AuthError};
use crate::scope::Access;
use crate::state::AppState;

/// Whether [`authenticate`] refused the credential: 401, or 429 for an address out of tries,
/// whose credential was refused all the same (the limit changes only the answer). Both are
/// refusals in the audit trail, where a flood costs a row a minute
/// ([`crate::refusals::RefusalAudit`]).
pub fn credential_refused(error: &ApiError) -> bool {
    matches!(
        error.code,
        ErrorCode::Unauthenticated | ErrorCode::TooManyRequests
    )
}

/// The principal of a request's credentials. Each refused credential (not a missing one, nor a
/// cookie that merely ended) counts against its client address; once an address is out of
/// tries, a credential it presents that is refused is answered 429 instead of 401. A valid
/// credential always passes, so that nobody (a page of another site firing bad tokens at the
/// gateway, a stranger behind the same proxy) can lock its owner out.
pub(super) async fn authenticate(
    state: &AppState,
    presented: &Presented,
) -> Result<Principal, ApiError> {
    let now = Instant::now();
    let result = authenticate_unlimited(state, presented)
        .await
        .map(|principal| principal.from_address(presented.peer));
    if let (Err(error), Some(client)) = (&result, presented.client)
        && counts_as_a_guess(presented, error)
    {
        if let Err(wait) = state.failed_auth.check(client, now) {
            return Err(ApiError::new(
                ErrorCode::TooManyRequests,
                format!(
                    "too many refused credentials from this address: try again in {} s",
                    wait.as_secs().max(1)
                ),
            ));
        }
        state.failed_auth.record_failure(client, now);
        tracing::info!(%client, reason = %error.message, "credential refused");
    }
    result
}

/// Whether a refusal looks like a guess: a bearer credential that did not verify, or a cookie
/// that is not ours. Missing credentials and cookies that expired or were signed out do not
/// count, so a browser with an old cookie is never locked out.
fn counts_as_a_guess(presented: &Presented, error: &ApiError) -> bool {
    if error.code != ErrorCode::Unauthenticated {
        return false;
    }
    if presented.has_bearer() {
        return true;
    }
    presented.cookie.is_some() && error.message == AuthError::Invalid.to_string()
}

async fn authenticate_unlimited(
    state: &AppState,
    presented: &Presented,
) -> Result<Principal, ApiError> {
    let principal = match (&presented.bearer, &presented.cookie) {
        (Some(bearer), _) if bearer.starts_with(SHARE_TOKEN_PREFIX) => {
            return share_principal(state, ShareLookup::Token(bearer)).await;
        }
        (Some(bearer), _) if !bearer.is_empty() => {
            state.authenticator.authenticate(Some(bearer))?
        }
        (_, Some(cookie)) => {
            let (principal, _) = state.authenticator.authenticate_cookie(cookie)?;
            match &principal.via {
                // A share's cookie is as good as its share: revoked or expired, it ends.
                Via::Share(share_id) => {
                    let mut shared = share_principal(state, ShareLookup::Id(share_id)).await?;
                    shared.expires_at = match (shared.expires_at, principal.expires_at) {
                        (Some(share), Some(cookie)) => Some(share.min(cookie)),
                        (share, cookie) => share.or(cookie),
                    };
                    shared
                }
                _ => principal,
            }
        }
        _ => state.authenticator.authenticate(None)?,
    };
    Ok(principal)
}

/// The viewer-only principal of a live share.
async fn share_principal(state: &AppState, lookup: ShareLookup<'_>) -> Result<Principal, ApiError> {
    let share = match state.upstreams.find_share(lookup).await {
        Ok(share) => share,
        Err(error) if error.code == ErrorCode::NotFound || error.code == ErrorCode::Invalid => {
            return Err(ApiError::unauthenticated(
                "share link not found, expired or revoked",
            ));
        }
        Err(error) => return Err(error),
    };
    Ok(Principal {
        subject: format!("share:{}", share.id),
        access: Access::shared(&share.instance_id, share.session_id.as_deref())
            .with_history(share.history),
        expires_at: share
            .expires_at
            .and_then(|at| u64::try_from(at.timestamp()).ok()),
        via: Via::Share(share.id),
        client_address: None,
    })
}
