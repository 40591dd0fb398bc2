//! Runs a command in an instance through the gateway, streams its output, exits with its code.
//!
//! `cargo run -p ptyhub-client --example exec -- http://127.0.0.1:8080 "$TOKEN" local uname -a`

use std::io::Write as _;

use ptyhub_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, token, instance, command @ ..] = args.as_slice() else {
        return Err("usage: exec GATEWAY_URL TOKEN INSTANCE COMMAND [ARG...]".into());
    };
    if command.is_empty() {
        return Err("usage: exec GATEWAY_URL TOKEN INSTANCE COMMAND [ARG...]".into());
    }
    let client = Client::connect(url, token).await?;
    let mut exec = client.exec(instance, command.to_vec()).await?;
    exec.close_input().await?;
    let mut stdout = std::io::stdout();
    while let Some(chunk) = exec.next_output().await? {
        stdout.write_all(&chunk)?;
        stdout.flush()?;
    }
    let status = exec.wait().await?;
    std::process::exit(status.code);
}
