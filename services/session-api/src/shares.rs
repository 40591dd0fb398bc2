//! `ShareService`: share links made, listed, revoked and checked. A link's token is 256 random
//! bits made here and shown once; the store keeps its SHA-256, so a copy of the database opens
//! no terminal.

use chrono::{SubsecRound, Utc};
use ptyhub_wire::limits::{MAX_SHARE_TTL, MAX_SHARES_PER_INSTANCE, MIN_SHARE_TTL};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::domain::{NewShare, SessionStatus, Share};
use crate::error::Error;
use crate::store::{ShareKey, Store};

/// The prefix of every share token, so that a gateway tells one from a JWT or an API token
/// before it asks, and a secret scanner recognises a leaked one.
pub const SHARE_TOKEN_PREFIX: &str = "ptyhub-share-";

/// Share links over the store.
#[derive(Debug, Clone)]
pub struct ShareService {
    store: Store,
}

impl ShareService {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Makes the share `grant` describes; returns it with its token.
    pub async fn create(&self, grant: &NewShare) -> Result<(Share, String), Error> {
        let ttl = grant.ttl;
        if !(MIN_SHARE_TTL..=MAX_SHARE_TTL).contains(&ttl) {
            return Err(Error::InvalidRequest(format!(
                "ttl_seconds must be {}..={}",
                MIN_SHARE_TTL.as_secs(),
                MAX_SHARE_TTL.as_secs()
            )));
        }
        if grant.created_by.trim().is_empty() {
            return Err(Error::InvalidRequest("created_by is required".into()));
        }
        let instance = self.store.find_instance(&grant.instance).await?;
        if let Some(session_id) = grant.session_id {
            match self.store.find_session(session_id).await? {
                Some(session)
                    if session.instance_id == instance.id
                        && session.status != SessionStatus::Closed => {}
                _ => return Err(Error::SessionNotFound(session_id)),
            }
        }
        let secret: [u8; 32] = rand::random();
        let token = format!("{SHARE_TOKEN_PREFIX}{}", hex(&secret));
        // Microseconds, as PostgreSQL keeps them: the share answered is the share stored.
        let expires_at = (Utc::now()
            + chrono::Duration::from_std(ttl).map_err(|_| Error::InvalidRequest("ttl".into()))?)
        .trunc_subsecs(6);
        let share = self
            .store
            .insert_share(
                instance.id,
                grant,
                token_sha256(&token),
                expires_at,
                MAX_SHARES_PER_INSTANCE,
            )
            .await?;
        Ok((share, token))
    }

    /// The shares of `instance` (id or name), newest first.
    pub async fn list(&self, instance: &str, include_ended: bool) -> Result<Vec<Share>, Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store.list_shares(instance.id, include_ended).await
    }

    /// Ends a share of `instance`; answers it, and whether this call ended it (revoking a
    /// revoked share answers it unchanged).
    pub async fn revoke(&self, instance: &str, share_id: Uuid) -> Result<(Share, bool), Error> {
        let instance = self.store.find_instance(instance).await?;
        self.store.revoke_share(instance.id, share_id).await
    }

    /// The live share of a token.
    pub async fn find_by_token(&self, token: &str) -> Result<Share, Error> {
        if !token.starts_with(SHARE_TOKEN_PREFIX) || token.len() > 256 {
            return Err(Error::ShareNotFound);
        }
        self.store
            .find_live_share(ShareKey::TokenSha256(&token_sha256(token)))
            .await
    }

    /// The live share with this id.
    pub async fn find_by_id(&self, share_id: Uuid) -> Result<Share, Error> {
        self.store.find_live_share(ShareKey::Id(share_id)).await
    }
}

fn token_sha256(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_hash_is_the_sha256_of_the_whole_token() {
        assert_eq!(
            token_sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
