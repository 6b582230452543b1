//! WCF's Calculator Duplex sample, ported: the client opens a session with a callback, makes
//! one-way calls, and the service calls back with each result and, on `clear`, the equation.
//!
//! ```text
//! cargo run --release --example duplex                                  # both halves
//! cargo run --release --example duplex -- --serve tcp://127.0.0.1:7000  # host only
//! cargo run --release --example duplex -- --connect tcp://127.0.0.1:7000
//! ```
//!
//! Prints, as the WCF sample does:
//!
//! ```text
//! Result(100)
//! Result(50)
//! Result(882.5)
//! Result(441.25)
//! Equation(0 + 100 - 50 * 17.65 / 2 = 441.25)
//! ```

use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use keel_examples::duplex::{self, CalculatorDuplexBlockingClient, CalculatorDuplexCallback};
use keel_examples::{Mode, ModeArgs};

/// WCF's Calculator Duplex sample: host it and run its client in one process (no options), or
/// run either half alone.
#[derive(Debug, Parser)]
#[command(name = "duplex")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
}

/// The client's side of the callback contract: prints each callback as it arrives.
struct Printer(mpsc::Sender<String>);

impl CalculatorDuplexCallback for Printer {
    fn result(&self, value: f64) {
        let _ = self.0.send(format!("Result({})", duplex::dotnet(value)));
    }
    fn equation(&self, text: String) {
        let _ = self.0.send(format!("Equation({text})"));
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let builder = duplex::builder(&url);
            let host = keel_examples::with_admin(builder, cli.mode.admin.as_deref()).start()?;
            keel_examples::serve_until_signal(host)
        }
        Mode::Connect(url) => client(&url),
        Mode::Both => {
            let host = duplex::builder("tcp://127.0.0.1:0").start()?;
            client(host.url())?;
            host.shutdown();
            Ok(())
        }
    }
}

fn client(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (tx, callbacks) = mpsc::channel();
    let session = CalculatorDuplexBlockingClient::connect(url)?.open_session(Printer(tx))?;
    session.add_to(100.0)?;
    session.subtract_from(50.0)?;
    session.multiply_by(17.65)?;
    session.divide_by(2.0)?;
    session.clear()?;
    // Four results and the equation arrive as the service sends them.
    for _ in 0..5 {
        println!("{}", callbacks.recv_timeout(Duration::from_secs(10))?);
    }
    session.close();
    Ok(())
}
