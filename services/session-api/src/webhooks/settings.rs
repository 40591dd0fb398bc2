//! How webhooks are delivered: attempts, backoff, timeout, concurrency and polling, from
//! `--webhook-*` flags and `PTYHUB_SESSION_API_WEBHOOK_*` variables.

use std::time::Duration;

/// The delivery settings of one session-api replica.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct WebhookSettings {
    /// How many times a delivery is tried before it is given up (1..=20).
    #[arg(long = "webhook-attempts", env = "PTYHUB_SESSION_API_WEBHOOK_ATTEMPTS",
          default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub attempts: u32,

    /// The wait after a delivery's first failed attempt; each later wait is three times the
    /// one before, give or take a fifth (jitter). The default spreads 6 attempts over ~10 min.
    #[arg(long = "webhook-retry-base", env = "PTYHUB_SESSION_API_WEBHOOK_RETRY_BASE",
          default_value = "5s", value_parser = positive_duration)]
    pub retry_base: Duration,

    /// How long one attempt waits for the receiver's answer.
    #[arg(long = "webhook-timeout", env = "PTYHUB_SESSION_API_WEBHOOK_TIMEOUT",
          default_value = "10s", value_parser = positive_duration)]
    pub request_timeout: Duration,

    /// How many deliveries this replica has in flight at most (1..=1024).
    #[arg(long = "webhook-concurrency", env = "PTYHUB_SESSION_API_WEBHOOK_CONCURRENCY",
          default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,

    /// How often this replica looks for due deliveries: retries, and deliveries other replicas
    /// queued (its own it claims at once).
    #[arg(long = "webhook-poll", env = "PTYHUB_SESSION_API_WEBHOOK_POLL",
          default_value = "1s", value_parser = positive_duration)]
    pub poll_interval: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            attempts: 6,
            retry_base: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            concurrency: 16,
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl WebhookSettings {
    /// How long a claimed delivery is this replica's: its attempt's timeout and a margin. A
    /// replica that dies mid-attempt leaves the delivery to the others once it passed.
    pub fn lease(&self) -> Duration {
        self.request_timeout + Duration::from_secs(30)
    }
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be more than 0".to_owned()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!("{error} (use for example 5s, 500ms)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        webhooks: WebhookSettings,
    }

    #[test]
    fn the_flags_default_to_the_contract_and_refuse_nonsense() {
        let parsed = Flags::try_parse_from(["session-api"]).expect("defaults");
        assert_eq!(parsed.webhooks, WebhookSettings::default());
        let parsed = Flags::try_parse_from([
            "session-api",
            "--webhook-retry-base",
            "50ms",
            "--webhook-attempts",
            "3",
        ])
        .expect("valid flags");
        assert_eq!(parsed.webhooks.retry_base, Duration::from_millis(50));
        assert_eq!(parsed.webhooks.attempts, 3);
        for refused in [
            ["--webhook-attempts", "0"],
            ["--webhook-poll", "0s"],
            ["--webhook-timeout", "soon"],
            ["--webhook-concurrency", "0"],
        ] {
            let flags = std::iter::once("session-api").chain(refused);
            assert!(Flags::try_parse_from(flags).is_err(), "{refused:?}");
        }
    }
}
