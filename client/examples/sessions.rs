//! Lists the instances a token may use and the live sessions of each.
//!
//! `cargo run -p ptyhub-client --example sessions -- http://127.0.0.1:8080 "$(cat .ptyhub/token)"`

use ptyhub_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(token)) = (args.next(), args.next()) else {
        return Err("usage: sessions GATEWAY_URL TOKEN".into());
    };
    let client = Client::connect(&url, &token).await?;
    for instance in client.instances().await? {
        println!("{} ({} live)", instance.name, instance.live_sessions);
        for session in client.sessions(&instance.id, false).await? {
            println!("  {}  {}", session.id, session.name);
        }
    }
    Ok(())
}
