//! Refused credentials, limited per client address: each address has a bucket of `per_minute`
//! tries that refills at `per_minute` a minute, and every refused credential takes one. An
//! address with an empty bucket has its refused credentials answered 429 (`RESOURCE_EXHAUSTED`,
//! WebSocket 4029) instead of 401 until the bucket refills, and they take no more. A valid
//! credential is never refused for its address: behind one proxy every client shares an
//! address, and any web page can make a browser send bad tokens, so refusing the address would
//! let a stranger lock everyone out. Guessing is bounded by the credentials themselves (tokens of
//! 32 characters and more, HMAC-signed cookies and JWTs), which no number of online tries finds;
//! the limit keeps a guesser's requests cheap and its refusals out of the logs.
//!
//! Written here rather than with `tower_governor` or `governor`: those limit every request (a
//! browser's many good requests would count), while this counts only the tries that failed.
//! IPv6 addresses count per /64, the block a single host is usually given, so that rotating
//! addresses within it does not reset the count.
//! Buckets that have refilled are forgotten, so the map holds only addresses that failed lately.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How many addresses the map holds before refilled buckets are swept out.
const SWEEP_AT: usize = 4096;

/// The per-address limiter of failed authentications.
#[derive(Debug, Clone)]
pub struct FailedAuthLimiter {
    buckets: Arc<Mutex<HashMap<IpAddr, Bucket>>>,
    capacity: f64,
    /// Tokens per second.
    refill_rate: f64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl FailedAuthLimiter {
    /// `per_minute` failures an address may have in a burst, and a minute; 0 turns the limit off.
    pub fn new(per_minute: u32) -> Self {
        Self {
            buckets: Arc::default(),
            capacity: f64::from(per_minute),
            refill_rate: f64::from(per_minute) / 60.0,
        }
    }

    /// `Ok` when `address` may try a credential now, else how long until it may.
    pub fn check(&self, address: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.capacity <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(bucket) = buckets.get_mut(&key(address)) else {
            return Ok(());
        };
        self.refill(bucket, now);
        if bucket.tokens >= 1.0 {
            return Ok(());
        }
        Err(Duration::from_secs_f64(
            (1.0 - bucket.tokens) / self.refill_rate,
        ))
    }

    /// Counts one refused credential of `address`.
    pub fn record_failure(&self, address: IpAddr, now: Instant) {
        if self.capacity <= 0.0 {
            return;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= SWEEP_AT {
            let capacity = self.capacity;
            let rate = self.refill_rate;
            buckets.retain(|_, bucket| {
                let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
                bucket.tokens + elapsed * rate < capacity
            });
        }
        let bucket = buckets.entry(key(address)).or_insert(Bucket {
            tokens: self.capacity,
            updated: now,
        });
        self.refill(bucket, now);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }

    fn refill(&self, bucket: &mut Bucket, now: Instant) {
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.refill_rate).min(self.capacity);
        bucket.updated = now;
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The client's address: the peer's, or with `trust_forwarded_for` (a proxy in front that the
/// gateway trusts) the last address of `X-Forwarded-For`, the one that proxy added. The peer is
/// [`crate::auth::peer_address`]'s, the one the audit trail records.
pub fn client_address(
    extensions: &http::Extensions,
    headers: &http::HeaderMap,
    trust_forwarded_for: bool,
) -> Option<IpAddr> {
    if trust_forwarded_for
        && let Some(forwarded) = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|entry| entry.trim().parse::<IpAddr>().ok())
            .next_back()
    {
        return Some(forwarded);
    }
    crate::auth::peer_address(extensions).map(|peer| peer.ip())
}

/// The address a bucket is kept for: IPv4 as is (and IPv4 in IPv6 as IPv4), IPv6 by its /64.
fn key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_is_refused_after_its_failures_and_let_in_again_as_the_bucket_refills() {
        let limiter = FailedAuthLimiter::new(3);
        let start = Instant::now();
        let client = address("203.0.113.7");
        for _ in 0..3 {
            assert!(limiter.check(client, start).is_ok());
            limiter.record_failure(client, start);
        }
        let wait = limiter.check(client, start).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_secs(20),
            "one try refills in a minute / 3"
        );
        assert!(
            limiter
                .check(client, start + Duration::from_secs(19))
                .is_err()
        );
        assert!(
            limiter
                .check(client, start + Duration::from_secs(20))
                .is_ok()
        );
        // Another address is not affected.
        assert!(limiter.check(address("203.0.113.8"), start).is_ok());
    }

    #[test]
    fn ipv6_addresses_count_per_64_and_mapped_ipv4_as_ipv4() {
        let limiter = FailedAuthLimiter::new(2);
        let now = Instant::now();
        limiter.record_failure(address("2001:db8:1:2::1"), now);
        limiter.record_failure(address("2001:db8:1:2:ffff::9"), now);
        assert!(limiter.check(address("2001:db8:1:2::77"), now).is_err());
        assert!(limiter.check(address("2001:db8:1:3::1"), now).is_ok());
        limiter.record_failure(address("::ffff:198.51.100.1"), now);
        limiter.record_failure(address("198.51.100.1"), now);
        assert!(limiter.check(address("198.51.100.1"), now).is_err());
    }

    #[test]
    fn refilled_buckets_are_forgotten_so_the_map_stays_small() {
        let limiter = FailedAuthLimiter::new(10);
        let start = Instant::now();
        for index in 0..SWEEP_AT {
            let bytes = u32::try_from(index).unwrap().to_be_bytes();
            limiter.record_failure(IpAddr::from(bytes), start);
        }
        assert_eq!(limiter.tracked(), SWEEP_AT);
        // Six seconds refill one try of ten: every bucket is full again, and swept.
        limiter.record_failure(address("192.0.2.1"), start + Duration::from_secs(6));
        assert_eq!(limiter.tracked(), 1);
    }

    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_says_otherwise() {
        let mut extensions = http::Extensions::new();
        extensions.insert(axum::extract::ConnectInfo(
            "10.0.0.2:5000".parse::<std::net::SocketAddr>().unwrap(),
        ));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            "198.51.100.9, 203.0.113.4".parse().unwrap(),
        );
        assert_eq!(
            client_address(&extensions, &headers, false),
            Some(address("10.0.0.2"))
        );
        // The last entry is the one the trusted proxy added; earlier ones the client may forge.
        assert_eq!(
            client_address(&extensions, &headers, true),
            Some(address("203.0.113.4"))
        );
        assert_eq!(
            client_address(&http::Extensions::new(), &http::HeaderMap::new(), true),
            None
        );
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let limiter = FailedAuthLimiter::new(0);
        let now = Instant::now();
        for _ in 0..100 {
            limiter.record_failure(address("192.0.2.1"), now);
        }
        assert!(limiter.check(address("192.0.2.1"), now).is_ok());
    }
}
