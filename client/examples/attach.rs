//! Attaches to an instance's session with the alias `example`, types a line, and prints what
//! the terminal shows until the line's answer comes back. Resumes by itself when the connection
//! drops (try restarting the gateway while it runs).
//!
//! `cargo run -p ptyhub-client --example attach -- http://127.0.0.1:8080 "$TOKEN" local`

use std::io::Write as _;

use ptyhub_client::{AttachOptions, Client, Event, Selector};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, token, instance] = args.as_slice() else {
        return Err("usage: attach GATEWAY_URL TOKEN INSTANCE".into());
    };
    let client = Client::connect(url, token).await?;
    let session = client
        .resolve_session(instance, Selector::Alias("example".into()), true, None)
        .await?
        .session;
    let mut terminal = client
        .attach(instance, &session.id, AttachOptions::default())
        .await?;
    terminal.send_input("echo answer-$((6*7))\n").await?;
    let mut seen = Vec::new();
    while let Some(event) = terminal.next().await? {
        match event {
            Event::Output { data, .. } => {
                std::io::stdout().write_all(&data)?;
                seen.extend_from_slice(&data);
                if String::from_utf8_lossy(&seen).contains("answer-42") {
                    break;
                }
            }
            Event::Reconnecting { reason } => eprintln!("[reconnecting: {reason}]"),
            Event::TakenOver => return Err("another controller took over".into()),
            Event::Exited(status) => std::process::exit(status.code),
            _ => {}
        }
    }
    println!();
    Ok(())
}
