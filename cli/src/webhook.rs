//! `ptyhub webhook add|ls|rm`: an instance's webhooks over the gateway's REST API
//! (`/api/v1/instances/{iid}/webhooks`). The secret is read from a file or a variable, never
//! from the command line, where every user of the host could read it.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::connection::ConnectionArgs;
use crate::manage::{Output, print_json, print_table};

/// The variable `webhook add` reads the secret from when no file is given.
pub const SECRET_VARIABLE: &str = "PTYHUB_WEBHOOK_SECRET";

#[derive(Debug, clap::Subcommand)]
pub enum WebhookCommand {
    /// Register a webhook: session-api POSTs each event to URL as JSON, signed with the
    /// secret in `X-Ptyhub-Signature-256` (HMAC-SHA256).
    Add(AddArgs),
    /// List an instance's webhooks with their last delivery.
    Ls {
        /// The instance, by id or name.
        instance: String,
    },
    /// Delete a webhook: nothing more is delivered to it.
    Rm {
        /// The instance, by id or name.
        instance: String,
        /// The webhook's id, as `ptyhub webhook ls` prints it.
        webhook: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The instance, by id or name.
    pub instance: String,
    /// Where deliveries go: http:// or https://.
    pub url: String,
    /// An event to deliver: `state_changed` or `command_finished` (repeatable; default both).
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// A file holding the secret (16 to 256 bytes; one trailing newline is ignored). Without
    /// it, the secret is read from PTYHUB_WEBHOOK_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
}

pub async fn webhook(
    connection: &ConnectionArgs,
    command: WebhookCommand,
    output: Output,
) -> Result<()> {
    let gateway = Gateway::new(connection)?;
    match command {
        WebhookCommand::Add(args) => {
            let secret = read_secret(args.secret_file.as_deref())?;
            let events = if args.events.is_empty() {
                vec!["state_changed".to_owned(), "command_finished".to_owned()]
            } else {
                args.events
            };
            let created = gateway
                .call(
                    reqwest::Method::POST,
                    &args.instance,
                    "",
                    Some(json!({"url": args.url, "events": events, "secret": secret})),
                    "register the webhook",
                )
                .await?;
            match output {
                Output::Json => print_json(&created)?,
                Output::Plain => println!("{}", text(&created["id"])),
            }
        }
        WebhookCommand::Ls { instance } => {
            let listed = gateway
                .call(
                    reqwest::Method::GET,
                    &instance,
                    "",
                    None,
                    "list the webhooks",
                )
                .await?;
            match output {
                Output::Json => print_json(&listed)?,
                Output::Plain => print_webhooks(&listed),
            }
        }
        WebhookCommand::Rm { instance, webhook } => {
            let deleted = gateway
                .call(
                    reqwest::Method::DELETE,
                    &instance,
                    &format!("/{webhook}"),
                    None,
                    "delete the webhook",
                )
                .await?;
            if let Output::Json = output {
                print_json(&deleted)?;
            }
        }
    }
    Ok(())
}

/// The secret from `file` (one trailing newline dropped), else from [`SECRET_VARIABLE`].
fn read_secret(file: Option<&std::path::Path>) -> Result<String> {
    let secret = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --secret-file {}", path.display()))?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            text.strip_suffix('\r').unwrap_or(text).to_owned()
        }
        None => std::env::var(SECRET_VARIABLE).map_err(|_| {
            anyhow::anyhow!(
                "no secret: pass --secret-file FILE or set {SECRET_VARIABLE} (16 to 256 bytes, for example `openssl rand -hex 32`)"
            )
        })?,
    };
    Ok(secret)
}

/// One table row per webhook: its id, events, last delivery and URL.
fn print_webhooks(listed: &Value) {
    let webhooks = listed["webhooks"].as_array().cloned().unwrap_or_default();
    print_table(
        &["ID", "EVENTS", "LAST DELIVERY", "ATTEMPTS", "AT", "URL"],
        webhooks.iter().map(|webhook| {
            let events: Vec<String> = webhook["events"]
                .as_array()
                .map(|events| events.iter().map(text).collect())
                .unwrap_or_default();
            let last = &webhook["last_delivery"];
            let result = if last.is_null() {
                "-".to_owned()
            } else if let Some(status) = last["status_code"].as_u64() {
                format!("{} ({status})", text(&last["outcome"]))
            } else {
                format!("{} ({})", text(&last["outcome"]), text(&last["error"]))
            };
            vec![
                text(&webhook["id"]),
                events.join(","),
                result,
                last["attempts"]
                    .as_u64()
                    .map_or_else(|| "-".to_owned(), |attempts| attempts.to_string()),
                last["at"].as_str().unwrap_or("-").to_owned(),
                text(&webhook["url"]),
            ]
        }),
    );
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// The gateway's REST API, with the CLI's token and TLS.
struct Gateway {
    http: reqwest::Client,
    server: String,
    token: String,
}

impl Gateway {
    fn new(connection: &ConnectionArgs) -> Result<Self> {
        Ok(Self {
            token: connection.token()?,
            server: connection.server_url(),
            http: connection.http_client()?,
        })
    }

    /// `method` on the instance's webhooks (with `suffix`), answered with its JSON; a refusal
    /// is an error with the gateway's `detail`.
    async fn call(
        &self,
        method: reqwest::Method,
        instance: &str,
        suffix: &str,
        body: Option<Value>,
        what: &str,
    ) -> Result<Value> {
        let url = format!(
            "{}/api/v1/instances/{instance}/webhooks{suffix}",
            self.server.trim_end_matches('/')
        );
        let mut request = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| crate::connection::unreachable(&self.server))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let detail = value["detail"].as_str().map_or(text.clone(), str::to_owned);
            bail!("cannot {what} of instance {instance:?}: {detail} ({status})");
        }
        Ok(value)
    }
}
