//! Seed 002's Service1 (`get_data` blocks for a while): host and call it in one process, or run
//! either half alone. The in-process run fires 100 concurrent calls, like the seed's burst.
//!
//! ```text
//! cargo run --release --example service1                                  # burst of 100 × 2 s
//! cargo run --release --example service1 -- --serve tcp://127.0.0.1:7001  # host only
//! cargo run --release --example service1 -- --connect tcp://127.0.0.1:7001
//! ```

use std::time::Instant;

use clap::Parser;
use keel_examples::service1::{Service1BlockingClient, Service1Impl, Service1Server};
use keel_examples::{Mode, ModeArgs};

const CLIENTS: usize = 100;
const WORK_MS: u64 = 2000;

/// Seed 002's Service1 (`get_data` blocks for a while): host it and fire a burst of 100
/// concurrent 2 s calls at it in one process (no options), or run either half alone.
#[derive(Debug, Parser)]
#[command(name = "service1")]
struct Cli {
    #[command(flatten)]
    mode: ModeArgs,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn host(url: &str) -> Result<keel::Host, keel::Error> {
    builder(url).start()
}

fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(Service1Server::new(Service1Impl))
        .endpoint(url)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    match cli.mode.mode() {
        Mode::Serve(url) => {
            let host = keel_examples::with_admin(builder(&url), cli.mode.admin.as_deref());
            keel_examples::serve_until_signal(host.start()?)
        }
        Mode::Connect(url) => burst(&url),
        Mode::Both => {
            let host = host("tcp://127.0.0.1:0")?;
            burst(host.url())?;
            host.shutdown();
            Ok(())
        }
    }
}

/// Opens `CLIENTS` clients first, then releases all their calls at once.
fn burst(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let clients = (0..CLIENTS)
        .map(|_| Service1BlockingClient::connect(url))
        .collect::<Result<Vec<_>, _>>()?;
    let barrier = std::sync::Barrier::new(CLIENTS + 1);
    let start = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    c.get_data(i as i32, WORK_MS)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("client thread panicked")?;
        }
        Ok::<_, keel::Error>(start)
    })?;
    println!(
        "{CLIENTS} concurrent calls of {WORK_MS} ms each: all answered after {} ms",
        start.elapsed().as_millis()
    );
    Ok(())
}
