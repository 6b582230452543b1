//! Seed 000's Calculator: host and call it in one process, or run either half alone.
//!
//! ```text
//! cargo run --release --example calculator                                  # both halves
//! cargo run --release --example calculator -- --serve tcp://127.0.0.1:7000  # host only
//! cargo run --release --example calculator -- --connect tcp://127.0.0.1:7000
//! cargo run --release --example calculator -- --serve http://127.0.0.1:7000  # HTTP + JSON
//! python3 examples/clients/calculator.py http://127.0.0.1:7000
//! cargo run --example calculator -- --openapi    # the contract's OpenAPI document
//! cargo run --example calculator -- --proto      # its .proto file (gRPC)
//! ```

use clap::Parser;
use keel_examples::calculator::{self, CalculatorBlockingClient, DivideByZero};
use keel_examples::{Mode, ModeArgs};

/// Seed 000's Calculator: host it and call it in one process (no options), or run either half
/// alone.
#[derive(Debug, Parser)]
#[command(name = "calculator")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
    /// Print the contract's OpenAPI 3.1 document (examples/openapi/calculator.json) and exit
    #[arg(long, conflicts_with_all = ["serve", "connect"])]
    openapi: bool,
    /// Print the contract's `.proto` file (examples/proto/calculator.proto) and exit
    #[arg(long, conflicts_with_all = ["serve", "connect", "openapi"])]
    proto: bool,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    if cli.openapi {
        print!("{}", calculator::openapi());
        return Ok(());
    }
    if cli.proto {
        print!("{}", calculator::proto());
        return Ok(());
    }
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let builder = calculator::builder(&url);
            let host = keel_examples::with_admin(builder, cli.mode.admin.as_deref()).start()?;
            keel_examples::serve_until_signal(host)
        }
        Mode::Connect(url) => call(&url),
        Mode::Both => {
            let host = calculator::host("tcp://127.0.0.1:0")?;
            call(host.url())?;
            host.shutdown();
            Ok(())
        }
    }
}

fn call(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = CalculatorBlockingClient::connect(url)?;
    println!("Add(100, 15.99) = {}", client.add(100.0, 15.99)?);
    println!("Subtract(145, 76.54) = {}", client.subtract(145.0, 76.54)?);
    println!("Multiply(9, 81.25) = {}", client.multiply(9.0, 81.25)?);
    println!("Divide(22, 7) = {}", client.divide(22.0, 7.0)?);
    match client.divide(22.0, 0.0) {
        Ok(v) => return Err(format!("Divide(22, 0) returned {v}, expected a fault").into()),
        Err(e) => match e.fault::<DivideByZero>() {
            Some(f) => println!(
                "Divide(22, 0) = fault DivideByZero {{ dividend: {} }}",
                f.dividend
            ),
            None => return Err(e.into()),
        },
    }
    client.close();
    Ok(())
}
