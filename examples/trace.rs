//! One OpenTelemetry trace across a keel client and a keel host in two processes.
//!
//! ```text
//! cargo run --release --example trace                              # keel-wire over TCP
//! cargo run --release --example trace -- --url http://127.0.0.1:0  # HTTP
//! ```
//!
//! The host runs in a child process (this binary with `--serve`). Each process has a `tracing`
//! registry with a `tracing-opentelemetry` layer over an OpenTelemetry SDK tracer provider.
//! The client makes three Calculator calls inside an application span, `checkout`; its channel
//! has [`InjectTraceContext`], which sends the W3C `traceparent` and `tracestate` of each call's
//! `keel.call` span as metadata, and the host has [`ExtractTraceContext`], which makes its own
//! `keel.call` span a child of it (see [`keel_examples::otel`]).
//!
//! Both processes collect their finished spans; the host prints its own as JSON lines when its
//! standard input closes. The example prints every span of both processes as a tree and checks
//! that they form one trace: `checkout` at the root, each client `keel.call` its child, each
//! host `keel.call` the child of one client `keel.call`, and the `tracestate` set on the root
//! (`example=checkout`) seen on the host. It exits non-zero if not.
//!
//! Both layers are `tracing-opentelemetry`'s defaults: keel hands the host's interceptors its
//! span before entering it, so its parent can still be set.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use clap::Parser;
use keel_examples::calculator::{self, CalculatorClient};
use keel_examples::otel::{ExtractTraceContext, InjectTraceContext};
use opentelemetry::trace::{
    Link, SpanKind, TraceContextExt as _, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    Sampler, SamplingDecision, SamplingResult, SdkTracerProvider, ShouldSample, SpanData,
    SpanExporter,
};
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

/// A trace across a keel client and host in two processes.
#[derive(Debug, Parser)]
#[command(name = "trace")]
struct Cli {
    /// Where the host listens (port 0 picks one): tcp://, http://, unix://, ...
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    url: String,
    /// Host only, until standard input closes; then print its spans as JSON lines (what the
    /// example starts in its child process)
    #[arg(long, hide = true)]
    serve: bool,
}

/// The `tracestate` the client puts on its root span.
const TRACE_STATE: (&str, &str) = ("example", "checkout");

/// A finished span, as both processes report it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// `client` or `host`.
    process: String,
    trace_id: String,
    span_id: String,
    /// All zeros for a root span.
    parent_span_id: String,
    /// Whether the parent is in another process (came in a `traceparent`).
    parent_is_remote: bool,
    name: String,
    kind: String,
    trace_state: String,
    /// `rpc.code` for a `keel.call` span.
    code: String,
}

impl Record {
    fn new(process: &str, span: &SpanData) -> Record {
        let code = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "rpc.code")
            .map(|kv| kv.value.to_string())
            .unwrap_or_default();
        Record {
            process: process.to_string(),
            trace_id: span.span_context.trace_id().to_string(),
            span_id: span.span_context.span_id().to_string(),
            parent_span_id: span.parent_span_id.to_string(),
            parent_is_remote: span.parent_span_is_remote,
            name: span.name.to_string(),
            kind: match span.span_kind {
                SpanKind::Client => "client",
                SpanKind::Server => "server",
                SpanKind::Producer => "producer",
                SpanKind::Consumer => "consumer",
                SpanKind::Internal => "internal",
            }
            .to_string(),
            trace_state: span.span_context.trace_state().header(),
            code,
        }
    }

    fn is_root(&self) -> bool {
        self.parent_span_id == opentelemetry::trace::SpanId::INVALID.to_string()
    }
}

/// An exporter that keeps every finished span in memory.
#[derive(Debug, Clone, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl Collect {
    fn take(&self, process: &str) -> Vec<Record> {
        let spans = std::mem::take(&mut *self.0.lock().unwrap());
        spans.iter().map(|s| Record::new(process, s)).collect()
    }
}

impl SpanExporter for Collect {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// Samples every span; a root span gets [`TRACE_STATE`] as its `tracestate`, every other span
/// its parent's.
#[derive(Debug, Clone)]
struct RootTraceState(TraceState);

impl ShouldSample for RootTraceState {
    fn should_sample(
        &self,
        parent: Option<&opentelemetry::Context>,
        _trace_id: TraceId,
        _name: &str,
        _kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let trace_state = match parent.map(|cx| cx.span().span_context().clone()) {
            Some(sc) if sc.is_valid() => sc.trace_state().clone(),
            _ => self.0.clone(),
        };
        SamplingResult {
            decision: SamplingDecision::RecordAndSample,
            attributes: Vec::new(),
            trace_state,
        }
    }
}

/// Installs this process's pipeline: a `tracing` registry with a `tracing-opentelemetry`
/// layer over an SDK tracer provider that keeps finished spans in the returned [`Collect`],
/// and warnings printed to stderr.
fn install(sampler: impl ShouldSample + 'static) -> (SdkTracerProvider, Collect) {
    let spans = Collect::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .with_sampler(sampler)
        .build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("keel-examples/trace"));
    let warnings = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(LevelFilter::WARN);
    let subscriber = tracing_subscriber::registry().with(otel).with(warnings);
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    (provider, spans)
}

fn main() {
    let cli = Cli::parse();
    let result = if cli.serve {
        serve(&cli)
    } else {
        tokio::runtime::Runtime::new()
            .expect("a runtime")
            .block_on(run(&cli))
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The child process: the host, until standard input closes; then its spans on stdout.
fn serve(cli: &Cli) -> Result<(), Box<dyn std::error::Error>> {
    // The caller's sampling decision and tracestate carry over to the host's spans.
    let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
    let (provider, spans) = install(sampler);
    let host = calculator::builder(&cli.url)
        .interceptor(ExtractTraceContext::new())
        .start()?;
    println!("listening on {}", host.url());
    std::io::stdout().flush()?;
    std::io::stdin().read_to_end(&mut Vec::new())?;
    // Every call has finished, and so has its span.
    host.shutdown();
    provider.force_flush()?;
    let mut out = std::io::stdout().lock();
    for record in spans.take("host") {
        writeln!(out, "span {}", serde_json::to_string(&record)?)?;
    }
    out.flush()?;
    Ok(())
}

/// The parent process: the client, its calls in a `checkout` span, then every span checked.
async fn run(cli: &Cli) -> Result<(), Box<dyn std::error::Error>> {
    let root_state = TraceState::from_key_value([TRACE_STATE])?;
    let (provider, spans) = install(RootTraceState(root_state));

    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["--serve", "--url", &cli.url]);
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let url = loop {
        let line = lines.next().ok_or("the host exited before listening")??;
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.to_string();
        }
    };
    // The host's spans, once it has stopped.
    let host_spans = std::thread::spawn(move || -> Result<Vec<Record>, String> {
        let mut records = Vec::new();
        for line in lines {
            let line = line.map_err(|e| e.to_string())?;
            if let Some(json) = line.strip_prefix("span ") {
                records.push(serde_json::from_str(json).map_err(|e| e.to_string())?);
            }
        }
        Ok(records)
    });

    let channel = keel::Channel::builder(&url)
        .interceptor(InjectTraceContext::new())
        .connect()
        .await?;
    let client = CalculatorClient::new(channel);
    async {
        println!("add(2, 3) = {}", client.add(2.0, 3.0).await?);
        println!("multiply(4, 5) = {}", client.multiply(4.0, 5.0).await?);
        match client.divide(1.0, 0.0).await {
            Err(e) if e.status_code() == Some(keel::StatusCode::Fault) => {
                println!("divide(1, 0): {e}")
            }
            other => return Err(format!("expected a fault, got {other:?}").into()),
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .instrument(tracing::info_span!("checkout"))
    .await?;
    drop(client);

    drop(child.stdin.take()); // the host stops, prints its spans and exits
    let host = host_spans.join().expect("reader thread")?;
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the host exited with {status}").into());
    }
    provider.force_flush()?;
    let mut all = spans.take("client");
    all.extend(host);

    println!();
    print_tree(&all);
    println!();
    let problems = check(&all);
    if problems.is_empty() {
        println!(
            "OK: one trace, `checkout` at its root; each host keel.call span is the child of a \
             client keel.call span; tracestate `{}={}` reached the host",
            TRACE_STATE.0, TRACE_STATE.1
        );
        Ok(())
    } else {
        for p in &problems {
            println!("FAILED: {p}");
        }
        Err(format!("{} problem(s) with the trace", problems.len()).into())
    }
}

/// Prints the spans as a tree under each root, children in the order they started.
fn print_tree(all: &[Record]) {
    println!(
        "{:<32}  {:<16}  {:<16}  {:<6}  {:<8}  {:<30}  {:<16}  rpc.code",
        "trace id", "span id", "parent span id", "proc", "kind", "name", "tracestate"
    );
    let mut children: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    let ids: Vec<&str> = all.iter().map(|r| r.span_id.as_str()).collect();
    let mut roots = Vec::new();
    for r in all {
        if ids.contains(&r.parent_span_id.as_str()) {
            children.entry(&r.parent_span_id).or_default().push(r);
        } else {
            roots.push(r); // a root, or a span whose parent was not collected
        }
    }
    fn show<'a>(r: &'a Record, depth: usize, children: &BTreeMap<&str, Vec<&'a Record>>) {
        let name = format!("{}{}", "  ".repeat(depth), r.name);
        println!(
            "{:<32}  {:<16}  {:<16}  {:<6}  {:<8}  {:<30}  {:<16}  {}",
            r.trace_id, r.span_id, r.parent_span_id, r.process, r.kind, name, r.trace_state, r.code
        );
        for child in children.get(r.span_id.as_str()).into_iter().flatten() {
            show(child, depth + 1, children);
        }
    }
    for root in roots {
        show(root, 0, &children);
    }
}

/// What is wrong with the trace; nothing if it is one trace stitched across both processes.
fn check(all: &[Record]) -> Vec<String> {
    let mut problems = Vec::new();
    let roots: Vec<&Record> = all.iter().filter(|r| r.is_root()).collect();
    let [root] = roots[..] else {
        problems.push(format!(
            "{} root spans ({}), expected one: checkout",
            roots.len(),
            roots
                .iter()
                .map(|r| &*r.name)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return problems;
    };
    if (&*root.name, &*root.process) != ("checkout", "client") {
        problems.push(format!("the root is {} in the {}", root.name, root.process));
    }
    for r in all.iter().filter(|r| r.trace_id != root.trace_id) {
        problems.push(format!(
            "{} {} ({}) is in trace {}, not {}",
            r.process, r.name, r.span_id, r.trace_id, root.trace_id
        ));
    }
    let calls = |process: &str| -> Vec<&Record> {
        all.iter()
            .filter(|r| r.process == process && r.name.starts_with("Calculator/"))
            .collect()
    };
    let (client, host) = (calls("client"), calls("host"));
    if client.len() != 3 || host.len() != 3 {
        problems.push(format!(
            "{} client and {} host keel.call spans, expected 3 and 3",
            client.len(),
            host.len()
        ));
    }
    for c in &client {
        if c.kind != "client" || c.parent_span_id != root.span_id {
            problems.push(format!(
                "client {} ({}) is not a client span under checkout",
                c.name, c.span_id
            ));
        }
        let served: Vec<&&Record> = host
            .iter()
            .filter(|h| h.parent_span_id == c.span_id)
            .collect();
        match served[..] {
            [h] if h.name == c.name && h.kind == "server" && h.parent_is_remote => {}
            _ => problems.push(format!(
                "client {} ({}) has {} host server span(s) as children, expected one of the \
                 same name, with a remote parent",
                c.name,
                c.span_id,
                served.len()
            )),
        }
    }
    let expected_state = format!("{}={}", TRACE_STATE.0, TRACE_STATE.1);
    for r in all.iter().filter(|r| r.trace_state != expected_state) {
        problems.push(format!(
            "{} {} ({}) has tracestate `{}`, not `{expected_state}`",
            r.process, r.name, r.span_id, r.trace_state
        ));
    }
    problems
}
