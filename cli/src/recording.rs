//! `ptyhub recording INSTANCE SESSION [-o FILE]`: downloads a closed session's asciicast v2
//! recording from the gateway (`GET .../sessions/{sid}/recording`) to a file or to stdout, for
//! `asciinema play` or any asciicast player.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::connection::ConnectionArgs;

#[derive(Debug, clap::Args)]
pub struct RecordingArgs {
    /// The instance, by id or name.
    pub instance: String,
    /// The session id.
    pub session: String,
    /// Where to write the recording; `-` or absent for stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Streams the recording to `args.output`; a failed download leaves no partial file.
pub async fn download_recording(connection: &ConnectionArgs, args: RecordingArgs) -> Result<()> {
    let token = connection.token()?;
    let server = connection.server_url();
    let url = format!(
        "{}/api/v1/instances/{}/terminal/sessions/{}/recording",
        server.trim_end_matches('/'),
        args.instance,
        args.session
    );
    let http = connection.http_client()?;
    let mut response = http
        .get(&url)
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| crate::connection::unreachable(&server))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let detail = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|value| value["detail"].as_str().map(str::to_owned))
            .unwrap_or(body);
        // The gateway publishes a recording when its session closes; say how from here.
        let hint = if status == reqwest::StatusCode::NOT_FOUND && detail.contains("closes") {
            format!("; `ptyhub rm {} {}` closes it", args.instance, args.session)
        } else {
            String::new()
        };
        bail!(
            "cannot download the recording of session {} of instance {:?}: {detail} ({status}){hint}",
            args.session,
            args.instance
        );
    }
    let to_file = args.output.filter(|path| path.as_os_str() != "-");
    let mut sink: Box<dyn std::io::Write> = match &to_file {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let copied = async {
        while let Some(chunk) = response.chunk().await.context("the download broke off")? {
            sink.write_all(&chunk)
                .context("cannot write the recording")?;
        }
        sink.flush().context("cannot write the recording")
    }
    .await;
    if copied.is_err()
        && let Some(path) = &to_file
    {
        let _ = std::fs::remove_file(path);
    }
    copied
}
