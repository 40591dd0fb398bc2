//! Every long-lived request of every principal, on every surface, in one registry: terminal
//! WebSockets, relayed `Attach` streams, session events (Server-Sent Events and gRPC
//! `WatchSessions`), screen waits (REST `.../wait` and gRPC `WaitForScreen`), and whatever
//! stream a surface adds later. Each holds one of its principal's slots while it lasts, so one
//! credential cannot hold an unbounded number of them open (`--max-streams-per-principal`,
//! refused as 429, WebSocket 4029, `RESOURCE_EXHAUSTED`); and each gets its credential's
//! [`CredentialWatch`], which completes when the credential expires or, for a share link's, when
//! the share is revoked, so that every stream of a revoked share ends at once.
//!
//! A share revoked through this gateway ends its streams at once ([`StreamRegistry::revoke_share`]);
//! one revoked through another replica is seen by looking each watched share up once a second
//! ([`SHARE_RECHECK`]) while any stream watches it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ptyhub_wire::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::Clock;
use crate::auth::{Principal, Via};
use crate::domain::ShareLookup;
use crate::error::ApiError;
use crate::grpc::Upstreams;
use crate::metrics::{GaugeGuard, Metrics};

/// How often a gateway asks session-api whether a share with open streams still stands, so
/// that a revoke made through another replica ends them too (one made here ends them at once).
const SHARE_RECHECK: Duration = Duration::from_secs(1);

/// The open streams of every principal, bounded per principal, and the shares they watch.
/// Clones share one registry.
#[derive(Debug, Clone)]
pub struct StreamRegistry {
    slots: Slots,
    shares: ShareWatches,
    /// What credentials' expiry is read by.
    clock: Clock,
}

impl StreamRegistry {
    /// A registry that lets each principal hold `max_per_principal` streams, counts them in
    /// `metrics`, ends them when `clock` reaches their credential's expiry, and looks shares up
    /// with `upstreams` until `shutdown`.
    pub fn new(
        max_per_principal: usize,
        metrics: Metrics,
        upstreams: Upstreams,
        clock: Clock,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            slots: Slots {
                held: Arc::default(),
                max_per_principal,
                metrics,
            },
            shares: ShareWatches {
                watched: Arc::default(),
                upstreams,
                shutdown,
            },
            clock,
        }
    }

    /// One more open stream of `principal` (by subject), given back when the [`OpenStream`] is
    /// dropped; 429 when it holds the most it may. A share's is watched before its slot is
    /// counted, so a stream counted in `/metrics` is one its share's revocation ends.
    pub fn open(&self, principal: &Principal) -> Result<OpenStream, ApiError> {
        let revoked = match &principal.via {
            Via::Share(share_id) => Some(Arc::new(self.shares.watch(share_id))),
            _ => None,
        };
        let slot = self.slots.acquire(&principal.subject)?;
        Ok(OpenStream {
            slot,
            credential: CredentialWatch {
                expires_at: principal.expires_at,
                clock: self.clock.clone(),
                revoked,
            },
        })
    }

    /// Ends the streams of `share_id` now: it was revoked through this gateway.
    pub fn revoke_share(&self, share_id: &str) {
        let watched = self
            .shares
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((ended, _)) = watched.get(share_id) {
            ended.cancel();
        }
    }
}

/// How many streams each principal (by subject) holds, and the most it may.
#[derive(Debug, Clone)]
struct Slots {
    held: Arc<Mutex<HashMap<String, usize>>>,
    max_per_principal: usize,
    /// Where the slots held on every principal's behalf are counted (`/metrics`).
    metrics: Metrics,
}

impl Slots {
    fn acquire(&self, subject: &str) -> Result<StreamSlot, ApiError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(subject.to_owned()).or_default();
        if *count >= self.max_per_principal {
            return Err(ApiError::new(
                ErrorCode::TooManyRequests,
                format!(
                    "this credential holds {} streams already, the most it may",
                    self.max_per_principal
                ),
            ));
        }
        *count += 1;
        Ok(StreamSlot {
            held: self.held.clone(),
            subject: subject.to_owned(),
            _counted: self.metrics.stream_opened(),
        })
    }
}

/// One open stream: a slot of its principal, and what ends its credential.
#[derive(Debug)]
pub struct OpenStream {
    slot: StreamSlot,
    credential: CredentialWatch,
}

impl OpenStream {
    /// What ends the credential the stream was opened with.
    pub fn credential(&self) -> &CredentialWatch {
        &self.credential
    }

    /// Runs `work` (a wait) while the slot is held, cut short when the credential ends first:
    /// a revoked share's wait must not answer the screen after the revocation.
    pub async fn unless_credential_ends<F: Future>(
        &self,
        work: F,
    ) -> Result<F::Output, CredentialEnd> {
        tokio::select! {
            output = work => Ok(output),
            end = self.credential.ended() => Err(end),
        }
    }

    /// The slot, held for as long as the stream lasts, and the credential's watch, for a stream
    /// that keeps them in different places.
    pub fn into_parts(self) -> (StreamSlot, CredentialWatch) {
        (self.slot, self.credential)
    }
}

/// One held slot of [`StreamRegistry`], given back when dropped.
#[derive(Debug)]
pub struct StreamSlot {
    held: Arc<Mutex<HashMap<String, usize>>>,
    subject: String,
    /// Keeps the slot in `ptyhub_gateway_streams_open` while it is held.
    _counted: GaugeGuard,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.subject) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.subject);
            }
        }
    }
}

/// Why a credential's streams end before their clients leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialEnd {
    Expired,
    Revoked,
}

impl From<CredentialEnd> for ApiError {
    /// A stream or wait its credential outlived: 401 (`UNAUTHENTICATED`), saying why.
    fn from(end: CredentialEnd) -> Self {
        ApiError::unauthenticated(end.reason())
    }
}

impl CredentialEnd {
    /// The words a closing stream gives (a WebSocket's close reason, a gRPC status message).
    pub fn reason(self) -> &'static str {
        match self {
            CredentialEnd::Expired => "credential expired",
            CredentialEnd::Revoked => "share link revoked",
        }
    }
}

/// What ends the streams a credential opened: its expiry, and for a share's credential the
/// share's revocation. Clones share one watch.
#[derive(Debug, Clone)]
pub struct CredentialWatch {
    /// When the credential expires, in Unix seconds by `clock`; `None` for one that does not.
    expires_at: Option<u64>,
    clock: Clock,
    revoked: Option<Arc<ShareWatch>>,
}

impl CredentialWatch {
    /// Whether the credential can end at all: it expires, or it is a share's (which can be
    /// revoked). A stream need not wait for the end of one that cannot.
    pub fn can_end(&self) -> bool {
        self.expires_at.is_some() || self.revoked.is_some()
    }

    /// Completes when the credential ends, saying why; never for one that does not.
    pub async fn ended(&self) -> CredentialEnd {
        match &self.revoked {
            None => {
                self.expired().await;
                CredentialEnd::Expired
            }
            Some(watch) => tokio::select! {
                () = self.expired() => CredentialEnd::Expired,
                () = watch.ended.cancelled() => CredentialEnd::Revoked,
            },
        }
    }

    /// Completes when the clock reaches the credential's expiry; never for a credential
    /// without one. Every stream a credential opened ends with it, at its `exp` itself: the
    /// skew a request's JWT is allowed ([`crate::auth::JWT_CLOCK_SKEW`]) does not lengthen it.
    async fn expired(&self) {
        match self.expires_at {
            None => std::future::pending().await,
            Some(at) => self.clock.reached(at).await,
        }
    }
}

/// The shares whose credentials hold streams open here, each with a token cancelled when the
/// share ends, and how many streams watch it.
#[derive(Debug, Clone)]
struct ShareWatches {
    watched: Arc<Mutex<HashMap<String, (CancellationToken, usize)>>>,
    upstreams: Upstreams,
    shutdown: CancellationToken,
}

/// One stream's watch of a share; the share is looked up while any stream watches it.
#[derive(Debug)]
struct ShareWatch {
    watches: ShareWatches,
    share_id: String,
    ended: CancellationToken,
}

impl Drop for ShareWatch {
    fn drop(&mut self) {
        let mut watched = self
            .watches
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, count)) = watched.get_mut(&self.share_id) {
            *count -= 1;
            if *count == 0 {
                watched.remove(&self.share_id);
            }
        }
    }
}

impl ShareWatches {
    fn watch(&self, share_id: &str) -> ShareWatch {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        let (ended, count) = watched.entry(share_id.to_owned()).or_insert_with(|| {
            let ended = CancellationToken::new();
            tokio::spawn(recheck_share(
                self.clone(),
                share_id.to_owned(),
                ended.clone(),
            ));
            (ended, 0)
        });
        *count += 1;
        ShareWatch {
            watches: self.clone(),
            share_id: share_id.to_owned(),
            ended: ended.clone(),
        }
    }

    fn is_watched(&self, share_id: &str) -> bool {
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(share_id)
    }
}

/// Looks `share_id` up every [`SHARE_RECHECK`] while streams watch it, and cancels `ended` once
/// session-api no longer finds it live (revoked or expired). A failed lookup is tried again:
/// streams end for a share that ended, never for a session-api that did not answer.
async fn recheck_share(watches: ShareWatches, share_id: String, ended: CancellationToken) {
    loop {
        tokio::select! {
            () = ended.cancelled() => return,
            () = watches.shutdown.cancelled() => return,
            () = tokio::time::sleep(SHARE_RECHECK) => {}
        }
        if !watches.is_watched(&share_id) {
            return;
        }
        match watches
            .upstreams
            .find_share(ShareLookup::Id(&share_id))
            .await
        {
            Ok(_) => {}
            Err(error) if error.code == ErrorCode::NotFound || error.code == ErrorCode::Invalid => {
                tracing::info!(%share_id, "share ended: ending its streams");
                ended.cancel();
                return;
            }
            Err(error) => {
                tracing::debug!(%share_id, %error, "cannot check a share: trying again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_streams_and_gets_them_back() {
        let metrics = Metrics::default();
        let slots = Slots {
            held: Arc::default(),
            max_per_principal: 2,
            metrics: metrics.clone(),
        };
        let first = slots.acquire("alice").expect("a slot");
        let _second = slots.acquire("alice").expect("a slot");
        let refused = slots.acquire("alice").expect_err("over the limit");
        assert_eq!(refused.code, ErrorCode::TooManyRequests);
        assert_eq!(refused.code.http_status().as_u16(), 429);
        let _other = slots.acquire("bob").expect("another principal has its own");
        assert!(metrics.render().contains("ptyhub_gateway_streams_open 3\n"));
        drop(first);
        assert!(metrics.render().contains("ptyhub_gateway_streams_open 2\n"));
        slots.acquire("alice").expect("a slot given back");
    }
}
