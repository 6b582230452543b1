//! Server streaming: a ticker that sends `count` quotes, one every `interval_ms`, and a client
//! that prints each as it arrives.
//!
//! ```text
//! cargo run --release --example ticker                                  # both halves
//! cargo run --release --example ticker -- --serve tcp://127.0.0.1:7000  # host only
//! cargo run --release --example ticker -- --connect tcp://127.0.0.1:7000
//! cargo run --release --example ticker -- --serve http://127.0.0.1:7000
//! curl -N --json '{"symbols": ["KEEL"], "count": 5, "interval_ms": 200}' \
//!      http://127.0.0.1:7000/Ticker/watch                               # NDJSON
//! curl -N 'http://127.0.0.1:7000/Ticker/watch?args=%7B%22symbols%22%3A%5B%22KEEL%22%5D%2C%22count%22%3A5%2C%22interval_ms%22%3A200%7D' \
//!      -H 'accept: text/event-stream'                                   # Server-Sent Events
//! ```

use clap::Parser;
use keel_examples::ticker::{self, TickerClient};
use keel_examples::{Mode, ModeArgs};

/// Server streaming: host a ticker and watch it in one process (no options), or run either
/// half alone.
#[derive(Debug, Parser)]
#[command(name = "ticker")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
    /// Symbols to watch
    #[arg(long, value_delimiter = ',', default_value = "KEEL,WCF")]
    symbols: Vec<String>,
    /// Quotes to receive
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Milliseconds between quotes
    #[arg(long, default_value_t = 100)]
    interval_ms: u32,
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
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let builder = ticker::builder(&url);
            let host = keel_examples::with_admin(builder, cli.mode.admin.as_deref()).start()?;
            println!("serving Ticker on {}", host.url());
            host.serve_until_signal_async().await?;
            Ok(())
        }
        Mode::Connect(url) => watch(&url, &cli).await,
        Mode::Both => {
            let host = ticker::builder("tcp://127.0.0.1:0").start()?;
            watch(host.url(), &cli).await?;
            host.shutdown_async().await;
            Ok(())
        }
    }
}

async fn watch(url: &str, cli: &Cli) -> Result<(), Box<dyn std::error::Error>> {
    let client = TickerClient::connect(url).await?;
    let mut quotes = client
        .watch(cli.symbols.clone(), cli.count, cli.interval_ms)
        .await?;
    let mut received = 0;
    while let Some(quote) = quotes.next().await {
        let q = quote?;
        println!("{:>3} {:<6} {:>8.2}", q.seq, q.symbol, q.price);
        received += 1;
    }
    if received != cli.count {
        return Err(format!("received {received} quotes, expected {}", cli.count).into());
    }
    Ok(())
}
