//! The call model on every binding: metadata both ways (per call, channel defaults, reply
//! metadata), the handler's `Context`, handler-chosen statuses with details, interceptors on
//! both sides, and cancellation reaching the handler. Real sockets on port 0.
#![allow(missing_docs)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Binding;
use keel::client::{self, ClientCall, ReplyMetadata};
use keel::host::Interceptor;
use keel::{Channel, Context, Metadata, Status, StatusCode};
use serde::{Deserialize, Serialize};

/// What a handler saw of its call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Seen {
    pub service: String,
    pub operation: String,
    pub binding: String,
    pub loopback_peer: bool,
    pub remaining_ms: Option<u64>,
    pub metadata: Vec<(String, Vec<u8>)>,
    pub identity: Option<String>,
}

#[keel::contract]
pub trait Calls {
    /// Echoes what the context says; sets reply metadata `served-by` and `echo-bin`.
    async fn inspect(&self, ctx: Context, tag: String) -> Seen;
    /// The same from a plain `fn`, with the context last.
    fn inspect_sync(&self, tag: String, ctx: Context) -> Seen;
    /// `0`: not_found with details and metadata; `1`: ok; `2`: permission_denied; other:
    /// unauthenticated.
    async fn find(&self, id: u64) -> Result<String, Status>;
    /// Waits for cancellation (async): records it through a watcher task.
    async fn wait_async(&self, ctx: Context) -> u32;
    /// Waits for cancellation (blocking): polls the context.
    fn wait_sync(&self, ctx: Context) -> u32;
}

#[derive(Default, Clone)]
struct Impl {
    /// Handlers that saw their call cancelled.
    cancelled: Arc<AtomicUsize>,
}

fn seen(ctx: &Context, tag: &str) -> Seen {
    ctx.insert_reply_metadata("served-by", tag).unwrap();
    ctx.merge_reply_metadata(&{
        let mut md = Metadata::new();
        md.insert_bin("echo-bin", vec![0u8, 255]).unwrap();
        md
    });
    Seen {
        service: ctx.service().into(),
        operation: ctx.operation().into(),
        binding: ctx.binding().into(),
        loopback_peer: ctx.peer_addr().is_some_and(|a| a.ip().is_loopback()),
        remaining_ms: ctx.remaining().map(|d| d.as_millis() as u64),
        metadata: ctx
            .metadata()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        identity: ctx.extension::<Identity>().map(|i| i.0),
    }
}

impl Calls for Impl {
    async fn inspect(&self, ctx: Context, tag: String) -> Seen {
        seen(&ctx, &tag)
    }
    fn inspect_sync(&self, tag: String, ctx: Context) -> Seen {
        seen(&ctx, &tag)
    }
    async fn find(&self, id: u64) -> Result<String, Status> {
        match id {
            0 => {
                let mut md = Metadata::new();
                md.insert("looked-in", "the-archive").unwrap();
                Err(Status::not_found("no account 0")
                    .with_details(vec![1u8, 2, 3])
                    .with_metadata(md))
            }
            1 => Ok("alice".into()),
            2 => Err(Status::permission_denied("not yours")),
            _ => Err(Status::new(StatusCode::Unauthenticated, "who are you?")),
        }
    }
    async fn wait_async(&self, ctx: Context) -> u32 {
        let cancelled = self.cancelled.clone();
        let watcher = ctx.clone();
        // The handler's own future is dropped on cancellation; a watcher outlives it.
        tokio::spawn(async move {
            watcher.cancelled().await;
            cancelled.fetch_add(1, Ordering::SeqCst);
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        0
    }
    fn wait_sync(&self, ctx: Context) -> u32 {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if ctx.is_cancelled() {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                return 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        0
    }
}

/// The caller's identity as the host's interceptor established it.
#[derive(Debug, Clone)]
struct Identity(String);

/// Host interceptor: `deny: yes` is refused; otherwise records the identity from `user` and
/// the order of hooks.
struct HostHook {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl Interceptor for HostHook {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} before {}", self.name, ctx.operation()));
        if ctx.metadata().get("deny").is_some() {
            return Err(Status::permission_denied(format!("{} says no", self.name)));
        }
        if let Some(user) = ctx.metadata().get("user") {
            ctx.insert_extension(Identity(user.to_string()));
        }
        ctx.insert_reply_metadata(&format!("{}-ran", self.name), "yes")
            .unwrap();
        Ok(())
    }
    fn after(&self, ctx: &Context, code: StatusCode) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} after {} {code}", self.name, ctx.operation()));
    }
}

/// Client interceptor: adds `user`, refuses calls whose operation is `find` when told to, and
/// records outcomes.
struct ClientHook {
    refuse_find: bool,
    log: Arc<Mutex<Vec<String>>>,
}

impl client::Interceptor for ClientHook {
    fn before(&self, call: &mut ClientCall) -> Result<(), Status> {
        if self.refuse_find && call.operation() == "find" {
            return Err(Status::failed_precondition("find is off"));
        }
        call.metadata_mut().insert("user", "alice").unwrap();
        Ok(())
    }
    fn after(&self, call: &ClientCall, outcome: Result<(), &keel::Error>) {
        let what = match outcome {
            Ok(()) => "ok".to_string(),
            Err(e) => e.status_code().map_or("local".into(), |c| c.to_string()),
        };
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.{} {what}", call.service(), call.operation()));
    }
}

fn host(b: Binding, imp: Impl, log: &Arc<Mutex<Vec<String>>>) -> keel::Host {
    b.start(
        keel::Host::builder()
            .service(CallsServer::new(imp))
            .interceptor(HostHook {
                name: "first",
                log: log.clone(),
            })
            .interceptor(HostHook {
                name: "second",
                log: log.clone(),
            }),
    )
}

async fn metadata_and_context_travel_both_ways(b: Binding) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = host(b, Impl::default(), &log);
    let channel = b.channel_with(host.url(), |c| {
        c.default_metadata("x-tenant", "acme")
            .default_metadata("x-overridden", "default")
    });
    let client = CallsClient::new(channel);
    let mut md = Metadata::new();
    md.insert("x-overridden", "per-call").unwrap();
    md.append("x-multi", "1")
        .unwrap()
        .append("x-multi", "2")
        .unwrap();
    md.insert_bin("blob-bin", vec![0u8, 10, 13, 255]).unwrap();
    let reply = ReplyMetadata::new();
    for sync in [false, true] {
        let c = client
            .with_metadata(md.clone())
            .with_reply_metadata(&reply)
            .with_deadline(Duration::from_secs(20));
        let seen = if sync {
            c.inspect_sync("tagged".into()).await.unwrap()
        } else {
            c.inspect("tagged".into()).await.unwrap()
        };
        let op = if sync { "inspect_sync" } else { "inspect" };
        assert_eq!(
            (seen.service.as_str(), seen.operation.as_str()),
            ("Calls", op)
        );
        let scheme = host.url().split("://").next().unwrap();
        assert_eq!(seen.binding, scheme);
        assert_eq!(seen.loopback_peer, b != Binding::Unix, "{b:?}");
        let remaining = seen
            .remaining_ms
            .expect("keel's clients always send a deadline");
        assert!(remaining > 10_000 && remaining <= 20_000, "{remaining}");
        let get = |k: &str| -> Vec<Vec<u8>> {
            seen.metadata
                .iter()
                .filter(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .collect()
        };
        assert_eq!(get("x-tenant"), vec![b"acme".to_vec()]);
        assert_eq!(get("x-overridden"), vec![b"per-call".to_vec()]);
        assert_eq!(get("x-multi"), vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(get("blob-bin"), vec![vec![0u8, 10, 13, 255]]);
        // Reply metadata from the handler and from both interceptors.
        let back = reply.get();
        assert_eq!(back.get("served-by"), Some("tagged"), "{back:?}");
        assert_eq!(back.get_bin("echo-bin"), Some(&[0u8, 255][..]));
        assert_eq!(back.get("first-ran"), Some("yes"));
        assert_eq!(back.get("second-ran"), Some("yes"));
    }
    host.shutdown_async().await;
}

async fn handlers_answer_with_any_status_with_details_and_metadata(b: Binding) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = host(b, Impl::default(), &log);
    let client = CallsClient::new(b.channel(host.url()));
    let reply = ReplyMetadata::new();
    let err = client
        .with_reply_metadata(&reply)
        .find(0)
        .await
        .unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::NotFound), "{err}");
    assert_eq!(err.message(), "no account 0");
    assert_eq!(err.details(), &[1, 2, 3]);
    assert_eq!(err.metadata().get("looked-in"), Some("the-archive"));
    assert_eq!(
        err.metadata().get("first-ran"),
        Some("yes"),
        "interceptors' too"
    );
    assert_eq!(reply.get().get("looked-in"), Some("the-archive"));
    assert_eq!(client.find(1).await.unwrap(), "alice");
    let err = client.find(2).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::PermissionDenied));
    assert!(err.details().is_empty());
    let err = client.find(3).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unauthenticated));
    assert_eq!(err.to_string(), "unauthenticated: who are you?");
    host.shutdown_async().await;
}

async fn interceptors_run_in_order_on_both_sides(b: Binding) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let host = host(b, Impl::default(), &log);
    let client_log = Arc::new(Mutex::new(Vec::new()));
    let channel = b.channel_with(host.url(), |c| {
        c.interceptor(ClientHook {
            refuse_find: true,
            log: client_log.clone(),
        })
    });
    let client = CallsClient::new(channel);
    // The client interceptor adds `user`; the host's records it as the identity.
    let seen = client.inspect("x".into()).await.unwrap();
    assert_eq!(seen.identity.as_deref(), Some("alice"));
    assert_eq!(
        *log.lock().unwrap(),
        [
            "first before inspect",
            "second before inspect",
            "second after inspect ok",
            "first after inspect ok"
        ]
    );
    log.lock().unwrap().clear();
    // The first host interceptor refuses: the second and the handler never run, the first's
    // `after` does.
    let mut deny = Metadata::new();
    deny.insert("deny", "yes").unwrap();
    let err = client
        .with_metadata(deny)
        .inspect("x".into())
        .await
        .unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::PermissionDenied));
    assert_eq!(err.message(), "first says no");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "first before inspect",
            "first after inspect permission_denied"
        ]
    );
    log.lock().unwrap().clear();
    // The client interceptor refuses `find`: nothing reaches the host.
    let calls_before = host.stats().calls_total;
    let err = client.find(1).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::FailedPrecondition));
    assert_eq!(host.stats().calls_total, calls_before);
    assert!(log.lock().unwrap().is_empty());
    assert_eq!(
        *client_log.lock().unwrap(),
        [
            "Calls.inspect ok",
            "Calls.inspect permission_denied",
            "Calls.find failed_precondition"
        ]
    );
    host.shutdown_async().await;
}

async fn cancellation_reaches_the_handler(b: Binding) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let imp = Impl::default();
    let host = host(b, imp.clone(), &log);
    let client = CallsClient::new(b.channel(host.url()));
    client.open().await.unwrap();
    let short = client.with_deadline(Duration::from_millis(300));
    assert!(short.wait_async().await.unwrap_err().is_timeout());
    assert!(short.wait_sync().await.unwrap_err().is_timeout());
    assert!(
        common::eventually(|| imp.cancelled.load(Ordering::SeqCst) == 2).await,
        "{b:?}: handlers saw {} cancellations",
        imp.cancelled.load(Ordering::SeqCst)
    );
    // The interceptors heard of both calls, as cancelled or timed out.
    assert!(
        common::eventually(|| log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("first after wait"))
            .count()
            == 2)
        .await,
        "{:?}",
        log.lock().unwrap()
    );
    host.shutdown_async().await;
}

common::binding_matrix! {
    [] {
        async fn metadata_and_context_travel_both_ways;
        async fn handlers_answer_with_any_status_with_details_and_metadata;
        async fn interceptors_run_in_order_on_both_sides;
        async fn cancellation_reaches_the_handler;
    }
}

/// Metadata larger than the 16 KiB every binding allows is refused before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_metadata_is_refused_locally_on_every_binding() {
    for b in [Binding::Tcp, Binding::Http1, Binding::Http2] {
        let log = Arc::new(Mutex::new(Vec::new()));
        let host = host(b, Impl::default(), &log);
        let client = CallsClient::new(b.channel(host.url()));
        let mut md = Metadata::new();
        md.insert_bin("a-bin", vec![0u8; 9000]).unwrap();
        md.insert_bin("b-bin", vec![0u8; 9000]).unwrap();
        let err = client.with_metadata(md).find(1).await.unwrap_err();
        assert!(err.is_too_large(), "{b:?}: {err}");
        assert_eq!(host.stats().calls_total, 0, "{b:?}");
        assert_eq!(client.find(1).await.unwrap(), "alice");
        host.shutdown_async().await;
    }
}

/// `default_metadata` keeps the builder's chain: an invalid key or value is reported by
/// `build`, naming it, and nothing is built.
#[test]
fn an_invalid_default_metadata_fails_the_build() {
    let err = Channel::builder("tcp://127.0.0.1:1")
        .default_metadata("x-fine", "yes")
        .default_metadata("content-type", "text/plain")
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("content-type"), "{err}");
    assert!(Channel::builder("tcp://127.0.0.1:1")
        .default_metadata("x-fine", "yes")
        .build()
        .is_ok());
}
