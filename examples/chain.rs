//! Calls that chain: a handler calls another service with its `Context`, so the caller's
//! deadline, cancellation and request id follow the call two hops down.
//!
//! ```text
//! cargo run --release --example chain                                   # all in one process
//! cargo run --release --example chain -- --binding http                 # the same over HTTP
//! cargo run --release --example chain -- --backend tcp://127.0.0.1:7100
//! cargo run --release --example chain -- --serve tcp://127.0.0.1:7000 --next tcp://127.0.0.1:7100
//! cargo run --release --example chain -- --connect tcp://127.0.0.1:7000 --deadline-ms 200
//! ```
//!
//! `Backend.work(delay_ms)` sleeps (async), unless its call is cancelled first; `stats()`
//! counts the works started, completed and cancelled. `Frontdesk.ask(delay_ms)` calls
//! `Backend.work(delay_ms)` on `--next` with its context (`with_context(&ctx)`). A caller that
//! asks for 2 s of work with a 200 ms deadline gets `deadline_exceeded`, and Backend's work is
//! cancelled at once, not 2 s later: the deadline went down with the call, and so does a
//! caller's cancellation. The caller's `x-request-id` arrives at Backend, which echoes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use keel::{Context, Metadata, Status};
use serde::{Deserialize, Serialize};

/// What Backend's works did so far.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, keel::schemars::JsonSchema,
)]
#[schemars(crate = "keel::schemars")]
pub struct Stats {
    /// Works started.
    pub started: u64,
    /// Works that slept their whole delay.
    pub completed: u64,
    /// Works whose call was cancelled (or whose deadline passed) first.
    pub cancelled: u64,
}

/// What a work did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Done {
    /// How long it slept.
    pub slept_ms: u64,
    /// The `x-request-id` its call carried.
    pub request_id: Option<String>,
    /// The time its call had left when it started, in ms.
    pub had_ms: Option<u64>,
}

/// The service at the end of the chain.
#[keel::contract]
pub trait Backend {
    /// Sleeps `delay_ms` (async), unless the call is cancelled first.
    async fn work(&self, ctx: Context, delay_ms: u64) -> Done;
    /// What the works did so far.
    fn stats(&self) -> Stats;
}

/// The service in the middle.
#[keel::contract]
pub trait Frontdesk {
    /// `Backend.work(delay_ms)` on the next host, made with this call's context.
    async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<Done, Status>;
    /// `Backend.stats()` on the next host.
    async fn backend_stats(&self, ctx: Context) -> Result<Stats, Status>;
}

#[derive(Default)]
struct Worker {
    started: AtomicU64,
    completed: AtomicU64,
    cancelled: Arc<AtomicU64>,
}

/// Counts a work that did not complete as cancelled, however it ended: its context
/// cancelled, or its future dropped (the host aborts an async handler whose call is over).
struct Unfinished(Option<Arc<AtomicU64>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(cancelled) = self.0.take() {
            cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Backend for Worker {
    async fn work(&self, ctx: Context, delay_ms: u64) -> Done {
        self.started.fetch_add(1, Ordering::SeqCst);
        let had_ms = ctx.remaining().map(|d| d.as_millis() as u64);
        let mut unfinished = Unfinished(Some(self.cancelled.clone()));
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {
                unfinished.0 = None;
                self.completed.fetch_add(1, Ordering::SeqCst);
            }
            () = ctx.cancelled() => {}
        }
        Done {
            slept_ms: delay_ms,
            request_id: ctx.metadata().get("x-request-id").map(str::to_owned),
            had_ms,
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            started: self.started.load(Ordering::SeqCst),
            completed: self.completed.load(Ordering::SeqCst),
            cancelled: self.cancelled.load(Ordering::SeqCst),
        }
    }
}

struct Desk {
    next: BackendClient,
}

impl Frontdesk for Desk {
    async fn ask(&self, ctx: Context, delay_ms: u64) -> Result<Done, Status> {
        // With the context: the deadline left, the cancellation, `x-request-id` and the trace
        // context go along. Without it, this call would get the channel's default deadline
        // (60 s) and run on after the caller gave up.
        Ok(self.next.with_context(&ctx).work(delay_ms).await?)
    }

    async fn backend_stats(&self, ctx: Context) -> Result<Stats, Status> {
        Ok(self.next.with_context(&ctx).stats().await?)
    }
}

/// Propagated deadlines, cancellation and request ids, two hops deep.
#[derive(Debug, Parser)]
#[command(name = "chain")]
struct Cli {
    /// Host Backend on URL (e.g. tcp://127.0.0.1:7100), until interrupted
    #[arg(long, value_name = "URL", conflicts_with_all = ["serve", "connect"])]
    backend: Option<String>,
    /// Host Frontdesk on URL, calling Backend on --next, until interrupted
    #[arg(
        long,
        value_name = "URL",
        requires = "next",
        conflicts_with = "connect"
    )]
    serve: Option<String>,
    /// With --serve: Backend's URL
    #[arg(long, value_name = "URL", requires = "serve")]
    next: Option<String>,
    /// Client only: call the Frontdesk listening on URL
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// The caller's deadline for the long call
    #[arg(long, default_value_t = 200)]
    deadline_ms: u64,
    /// The work the long call asks for
    #[arg(long, default_value_t = 2000)]
    delay_ms: u64,
    /// With neither --backend, --serve nor --connect: the scheme both hosts listen on
    /// (tcp, unix, http)
    #[arg(long, default_value = "tcp")]
    binding: String,
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
    if let Some(url) = &cli.backend {
        let host = keel::Host::builder()
            .service(BackendServer::new(Worker::default()))
            .endpoint(url)
            .start()?;
        keel_examples::serve_until_signal(host)
    }
    if let (Some(url), Some(next)) = (&cli.serve, &cli.next) {
        let host = frontdesk(url, next)?;
        keel_examples::serve_until_signal(host)
    }
    if let Some(url) = &cli.connect {
        return call(url, &cli).await;
    }
    let url = match cli.binding.as_str() {
        "unix" => format!(
            "unix://{}/keel-chain-{}.sock",
            std::env::temp_dir().display(),
            std::process::id()
        ),
        scheme => format!("{scheme}://127.0.0.1:0"),
    };
    let backend = keel::Host::builder()
        .service(BackendServer::new(Worker::default()))
        .endpoint(&url)
        .start()?;
    let frontdesk_url = url.replace("keel-chain-", "keel-chain-frontdesk-");
    let desk = frontdesk(&frontdesk_url, backend.url())?;
    let result = call(desk.url(), &cli).await;
    desk.shutdown_async().await;
    backend.shutdown_async().await;
    result
}

/// A Frontdesk host on `url` calling the Backend on `next`.
fn frontdesk(url: &str, next: &str) -> Result<keel::Host, keel::Error> {
    let next = BackendClient::new(keel::Channel::new(next)?);
    keel::Host::builder()
        .service(FrontdeskServer::new(Desk { next }))
        .endpoint(url)
        .start()
}

/// The demonstration, against the Frontdesk at `url`.
async fn call(url: &str, cli: &Cli) -> Result<(), Box<dyn std::error::Error>> {
    let frontdesk = FrontdeskClient::connect(url).await?;
    let before = frontdesk.backend_stats().await?;

    // A short call with time to spare: the answer, and what Backend saw of its call.
    let mut md = Metadata::new();
    md.insert("x-request-id", "req-1")?;
    let done = frontdesk
        .with_metadata(md)
        .with_deadline(Duration::from_secs(5))
        .ask(20)
        .await?;
    let had = done.had_ms.ok_or("Backend saw no deadline")?;
    if had > 5_000 {
        return Err(
            format!("Backend's call had {had} ms: the caller's 5 s did not go down").into(),
        );
    }
    println!(
        "ask(20) with a 5 s deadline: Backend slept {} ms for request {} (its call had at most 5 s: {had} ms)",
        done.slept_ms,
        done.request_id.as_deref().unwrap_or("none"),
    );

    // A long call with a short deadline: deadline_exceeded here, cancelled there.
    let deadline = Duration::from_millis(cli.deadline_ms);
    let asked = Instant::now();
    let err = match frontdesk.with_deadline(deadline).ask(cli.delay_ms).await {
        Ok(done) => return Err(format!("ask({}) answered: {done:?}", cli.delay_ms).into()),
        Err(e) => e,
    };
    let failed = asked.elapsed();
    if !err.is_timeout() {
        return Err(format!("expected deadline_exceeded, got {err}").into());
    }
    println!(
        "ask({}) with a {} ms deadline: deadline_exceeded (after {} ms)",
        cli.delay_ms,
        cli.deadline_ms,
        failed.as_millis()
    );
    // Backend's work ends (cancelled) well before its sleep would have.
    let want = Stats {
        started: before.started + 2,
        completed: before.completed + 1,
        cancelled: before.cancelled + 1,
    };
    let mut stats = frontdesk.backend_stats().await?;
    while stats != want && asked.elapsed() < Duration::from_millis(cli.delay_ms) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        stats = frontdesk.backend_stats().await?;
    }
    let cancelled_after = asked.elapsed();
    if stats != want {
        return Err(format!("Backend's stats are {stats:?}, expected {want:?}").into());
    }
    println!(
        "Backend: started {}, completed {}, cancelled {} (the long work was cancelled after {} ms of its {} ms)",
        stats.started - before.started,
        stats.completed - before.completed,
        stats.cancelled - before.cancelled,
        cancelled_after.as_millis(),
        cli.delay_ms
    );
    Ok(())
}
