//! gRPC's route guide with keel: the four kinds of call (unary, server streaming, client
//! streaming, bidirectional), as tonic's `routeguide` client makes them.
//!
//! ```text
//! cargo run --release --example routeguide                                  # both halves
//! cargo run --release --example routeguide -- --serve tcp://127.0.0.1:7000  # host only
//! cargo run --release --example routeguide -- --connect tcp://127.0.0.1:7000
//! cargo run --example routeguide -- --openapi   # the contract's OpenAPI document
//! cargo run --example routeguide -- --proto     # its .proto file (gRPC)
//! ```
//!
//! Bidirectional streams need keel-wire (`tcp://`, `unix://`, `tcps://`) or HTTP/2 (`https://`,
//! or `http://` with a channel built for HTTP/2); over HTTP/1.1 `route_chat` is refused.

use clap::Parser;
use keel::MessageStream;
use keel_examples::routeguide::{self, Point, Rectangle, RouteGuideClient, RouteNote};
use keel_examples::{Mode, ModeArgs};

/// gRPC's route guide: host it and run its client in one process (no options), or run either
/// half alone.
#[derive(Debug, Parser)]
#[command(name = "routeguide")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
    /// Print the contract's OpenAPI 3.1 document (its streams as NDJSON) and exit
    #[arg(long, conflicts_with_all = ["serve", "connect"])]
    openapi: bool,
    /// Print the contract's `.proto` file (examples/proto/routeguide.proto) and exit
    #[arg(long, conflicts_with_all = ["serve", "connect", "openapi"])]
    proto: bool,
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
    if cli.proto {
        print!("{}", keel_examples::routeguide::proto());
        return Ok(());
    }
    if cli.openapi {
        println!(
            "{}",
            keel::openapi::document(&[RouteGuideClient::descriptor()])
        );
        return Ok(());
    }
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let builder = routeguide::builder(&url);
            let host = keel_examples::with_admin(builder, cli.mode.admin.as_deref()).start()?;
            println!("serving RouteGuide on {}", host.url());
            host.serve_until_signal_async().await?;
            Ok(())
        }
        Mode::Connect(url) => client(&url).await,
        Mode::Both => {
            let host = routeguide::builder("tcp://127.0.0.1:0").start()?;
            client(host.url()).await?;
            host.shutdown_async().await;
            Ok(())
        }
    }
}

async fn client(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let guide = RouteGuideClient::connect(url).await?;

    // Unary.
    let feature = guide
        .get_feature(Point {
            latitude: 409146138,
            longitude: -746188906,
        })
        .await?;
    println!("FEATURE = {feature:?}");

    // Server streaming.
    let rect = Rectangle {
        lo: Point {
            latitude: 400000000,
            longitude: -750000000,
        },
        hi: Point {
            latitude: 420000000,
            longitude: -730000000,
        },
    };
    let mut features = guide.list_features(rect).await?;
    while let Some(feature) = features.next().await {
        println!("FEATURE = {:?}", feature?);
    }

    // Client streaming: a route through some of the features (and points between them).
    let route: Vec<Point> = (0..10)
        .map(|i| Point {
            latitude: 406109563 + i * 1_000_000,
            longitude: -742186778 - i * 500_000,
        })
        .collect();
    let summary = guide.record_route(MessageStream::from_iter(route)).await?;
    println!("SUMMARY = {summary:?}");

    // Bidirectional: notes at three points, each answered with the notes left there before.
    let at = |latitude, longitude, message: &str| RouteNote {
        location: Point {
            latitude,
            longitude,
        },
        message: message.to_string(),
    };
    let notes = vec![
        at(0, 1, "First message"),
        at(0, 2, "Second message"),
        at(0, 3, "Third message"),
        at(0, 1, "Fourth message"),
        at(0, 2, "Fifth message"),
        at(0, 3, "Sixth message"),
    ];
    let mut replies = guide.route_chat(MessageStream::from_iter(notes)).await?;
    while let Some(note) = replies.next().await {
        println!("NOTE = {:?}", note?);
    }
    Ok(())
}
