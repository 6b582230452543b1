//! Authentication with metadata and an interceptor, and answers with status codes.
//!
//! ```text
//! cargo run --release --example auth                                        # both halves
//! cargo run --release --example auth -- --serve http://127.0.0.1:7000       # host only
//! cargo run --release --example auth -- --serve tcp://127.0.0.1:7001 --token T
//! cargo run --release --example auth -- --connect tcp://127.0.0.1:7001 --token T
//! curl -s http://127.0.0.1:7000/Accounts/whoami -H 'authorization: Bearer s3cret' --json '{}'
//! curl -si http://127.0.0.1:7000/Accounts/get --json '{"id": 0}' -H 'authorization: Bearer s3cret'
//! cargo run --example auth -- --openapi          # the contract's OpenAPI document
//! ```
//!
//! The host accepts one token (default `s3cret`, see `--token`) for the user `demo`. A call
//! without it, or with another token, is answered `unauthenticated` (HTTP 401); `get` of an
//! unknown account is `not_found` (HTTP 404, `keel-status: not_found`).

use clap::Parser;
use keel_examples::accounts::{self, AccountsClient, SendToken, DEFAULT_TOKEN};
use keel_examples::{Mode, ModeArgs};

/// Bearer-token authentication over any binding.
#[derive(Debug, Parser)]
#[command(name = "auth")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
    /// The token the host accepts (with --serve) or the client sends (with --connect)
    #[arg(long, default_value = DEFAULT_TOKEN)]
    token: String,
    /// Print the contract's OpenAPI 3.1 document (examples/openapi/accounts.json) and exit
    #[arg(long, conflicts_with_all = ["serve", "connect"])]
    openapi: bool,
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    if cli.openapi {
        print!("{}", accounts::openapi());
        return Ok(());
    }
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let builder = accounts::builder(&url, &cli.token);
            let host = keel_examples::with_admin(builder, cli.mode.admin.as_deref()).start()?;
            println!("accepting `authorization: Bearer {}`", cli.token);
            keel_examples::serve_until_signal(host)
        }
        Mode::Connect(url) => call(&url, &cli.token).await,
        Mode::Both => {
            let host = accounts::host("tcp://127.0.0.1:0", &cli.token)?;
            call(host.url(), &cli.token).await?;
            host.shutdown_async().await;
            Ok(())
        }
    }
}

async fn call(url: &str, token: &str) -> Result<(), Box<dyn std::error::Error>> {
    // Without the token: refused before anything runs.
    let anonymous = AccountsClient::connect(url).await?;
    match anonymous.whoami().await {
        Err(e) if e.status_code() == Some(keel::StatusCode::Unauthenticated) => {
            println!("without a token: {e}")
        }
        other => return Err(format!("expected unauthenticated, got {other:?}").into()),
    }
    // With it: every call of this channel carries it.
    let channel = keel::Channel::builder(url)
        .interceptor(SendToken(token.to_string()))
        .connect()
        .await?;
    let client = AccountsClient::new(channel);
    println!("whoami = {}", client.whoami().await?);
    println!("get(1) = {:?}", client.get(1).await?);
    match client.get(0).await {
        Err(e) if e.status_code() == Some(keel::StatusCode::NotFound) => println!("get(0): {e}"),
        other => return Err(format!("expected not_found, got {other:?}").into()),
    }
    Ok(())
}
