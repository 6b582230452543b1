//! `quic://` beyond the binding matrix (where every common case runs on it too, `quic::`):
//! 0-RTT on resumption for idempotent calls only, on the client and on the host; mutual TLS;
//! what a client sees when UDP is dropped; and hostile peers written with raw quinn (a stream
//! never finished, an oversized message announced, a handshake never finished, more streams
//! than allowed), each with a well-behaved bystander served meanwhile. Real sockets on port 0.
#![cfg(feature = "quic")]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::*;
use keel::tls::rustls_unstable::rustls;
use keel_wire::{Codec, Frame, Limits, Request, RequestFlags};
use rustls::pki_types::pem::PemObject as _;

/// A counter with one idempotent operation (a read) and one that is not (an increment).
#[keel::contract]
pub trait Ledger {
    /// The count; safe to run twice.
    #[keel(idempotent)]
    fn get(&self) -> u64;
    /// Adds `n`; running it twice would add twice.
    fn add(&self, n: u64) -> u64;
}

#[derive(Clone, Default)]
struct Counts {
    value: Arc<AtomicU64>,
    gets: Arc<AtomicU64>,
    adds: Arc<AtomicU64>,
}

impl Ledger for Counts {
    fn get(&self) -> u64 {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.value.load(Ordering::SeqCst)
    }
    fn add(&self, n: u64) -> u64 {
        self.adds.fetch_add(1, Ordering::SeqCst);
        self.value.fetch_add(n, Ordering::SeqCst) + n
    }
}

fn ledger_host(
    counts: &Counts,
    settings: impl FnOnce(keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> keel::Host {
    let builder = keel::Host::builder()
        .service(LedgerServer::new(counts.clone()))
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("quic://127.0.0.1:0")
        .tls(test_cert().server_tls().unwrap());
    settings(builder).start().expect("host starts")
}

fn channel(url: &str) -> keel::Channel {
    keel::Channel::builder(url)
        .tls(test_cert().client_tls().unwrap())
        .build()
        .unwrap()
}

/// A resumed client sends its idempotent calls as 0-RTT data (the host accepted them: they
/// were answered on streams opened before the handshake completed); a non-idempotent call
/// waits for the handshake, on a fresh connection and on a resumed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_client_sends_only_idempotent_calls_as_0rtt() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h);
    let ch = channel(host.url());
    let c = LedgerClient::new(ch.clone());
    // Fresh: nothing to resume, so nothing goes early.
    assert_eq!(c.add(1).await.unwrap(), 1);
    assert_eq!(c.get().await.unwrap(), 1);
    assert_eq!(ch.stats().calls_sent_early, 0);

    // Resumed, an idempotent call first: 0-RTT.
    ch.close().await;
    assert_eq!(c.get().await.unwrap(), 1);
    assert_eq!(ch.stats().connections_opened, 2);
    assert_eq!(ch.stats().calls_sent_early, 1);

    // Resumed, a non-idempotent call first: it waits for the handshake.
    ch.close().await;
    assert_eq!(c.add(1).await.unwrap(), 2);
    assert_eq!(ch.stats().connections_opened, 3);
    assert_eq!(ch.stats().calls_sent_early, 1);
    assert_eq!(counts.adds.load(Ordering::SeqCst), 2);
    host.shutdown_async().await;
}

/// Mutual TLS as on tcps://: a client with a certificate the host trusts is served, one
/// without is refused at the handshake, and 0-RTT is off on such a host (the certificate a
/// call's context carries is verified only when the handshake completes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_trusted_certificate() {
    let client_cert = keel::tls::self_signed(&["quic-client"]).unwrap();
    let host = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("quic://127.0.0.1:0")
        .tls(
            test_cert()
                .server_tls()
                .unwrap()
                .require_client_certs(client_cert.cert_pem.as_bytes())
                .unwrap(),
        )
        .start()
        .unwrap();
    let good = keel::Channel::builder(host.url())
        .tls(
            test_cert()
                .client_tls()
                .unwrap()
                .with_identity(
                    client_cert.cert_pem.as_bytes(),
                    client_cert.key_pem.as_bytes(),
                )
                .unwrap(),
        )
        .build()
        .unwrap();
    let good_client = ProbeClient::new(good.clone());
    assert_eq!(good_client.echo("in".into()).await.unwrap(), "in");
    good.close().await;
    assert_eq!(good_client.echo("again".into()).await.unwrap(), "again");
    assert_eq!(good.stats().calls_sent_early, 0);

    let anonymous = ProbeClient::new(channel(host.url()));
    let err = anonymous.echo("out".into()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert_eq!(host.stats().connections_open, 1);
    host.shutdown_async().await;
}

/// Where UDP is dropped on the way (a firewall, a middlebox), a quic:// client fails with a
/// connect error once its connect timeout passes, naming the fallback: tcps://.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_dropped_on_the_way_is_a_clear_connect_error_within_the_connect_timeout() {
    // A UDP socket that reads and never answers: what a path dropping UDP looks like.
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let url = format!("quic://{}", silent.local_addr().unwrap());
    let ch = keel::Channel::builder(&url)
        .tls(test_cert().client_tls().unwrap())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let c = ProbeClient::new(ch);
    let started = Instant::now();
    let err = c
        .with_deadline(Duration::from_secs(30))
        .echo("x".into())
        .await
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(err.is_connection(), "{err}");
    let text = err.to_string();
    assert!(text.contains("no QUIC handshake"), "{text}");
    assert!(text.contains("tcps://"), "{text}");
    drop(silent);
}

// ------------------------------------------------------------------------------------------
// Raw peers (quinn, by hand)
// ------------------------------------------------------------------------------------------

fn addr_of(url: &str) -> SocketAddr {
    url.strip_prefix("quic://").unwrap().parse().unwrap()
}

/// A rustls client config trusting the test certificate, offering `keel/1`, keeping sessions in
/// `resumption`, with 0-RTT on.
fn raw_crypto(resumption: &rustls::client::Resumption) -> quinn::crypto::rustls::QuicClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(test_cert().cert_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"keel/1".to_vec()];
    config.resumption = resumption.clone();
    config.enable_early_data = true;
    quinn::crypto::rustls::QuicClientConfig::try_from(config).unwrap()
}

/// A raw QUIC connection to `addr` (through its own socket).
async fn raw_connect(addr: SocketAddr) -> (quinn::Endpoint, quinn::Connection) {
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = raw_connect_on(&endpoint, addr).await;
    (endpoint, conn)
}

/// A raw QUIC connection to `addr` from `endpoint`'s socket (many connections may share one:
/// each endpoint holds megabytes of receive buffers).
async fn raw_connect_on(endpoint: &quinn::Endpoint, addr: SocketAddr) -> quinn::Connection {
    let resumption = rustls::client::Resumption::in_memory_sessions(4);
    let mut config = quinn::ClientConfig::new(Arc::new(raw_crypto(&resumption)));
    // The peers run in the test's process: what they buffer to send counts in its heap too.
    let mut transport = quinn::TransportConfig::default();
    transport.send_window(1 << 20);
    config.transport_config(Arc::new(transport));
    endpoint
        .connect_with(config, addr, "127.0.0.1")
        .unwrap()
        .await
        .unwrap()
}

/// A Request frame for `service.operation` with `body` (keel-wire version 2).
fn request(service: &'static str, operation: &'static str, body: Vec<u8>) -> Bytes {
    let mut codec = Codec::new(Limits::default());
    codec.set_version(2);
    let mut buf = BytesMut::new();
    codec
        .encode(
            &Frame::Request(Request {
                call_id: 0,
                flags: RequestFlags::default(),
                deadline_us: 0,
                service: service.into(),
                operation: operation.into(),
                metadata: Bytes::new(),
                compression: 0,
                body: Bytes::from(body),
            }),
            &mut buf,
        )
        .unwrap();
    buf.freeze()
}

/// The Reply frame read from `recv` to its end.
async fn reply(recv: &mut quinn::RecvStream) -> keel_wire::Reply {
    let bytes = recv.read_to_end(1 << 20).await.unwrap();
    let mut codec = Codec::new(Limits::default());
    codec.set_version(2);
    let mut buf = BytesMut::from(&bytes[..]);
    match codec.decode(&mut buf).unwrap() {
        Some(Frame::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// The status of a `Ledger.get` call on a new stream of `conn`.
async fn ledger_get(conn: &quinn::Connection) -> keel_wire::StatusCode {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    ledger_get_on(&mut send, &mut recv).await
}

/// The status of a `Ledger.get` call on a stream already open.
async fn ledger_get_on(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
) -> keel_wire::StatusCode {
    send.write_all(&request("Ledger", "get", common::args::<u64>(&[])))
        .await
        .unwrap();
    send.finish().unwrap();
    reply(recv).await.status
}

/// A well-behaved client that must keep being served while a raw peer misbehaves.
async fn bystander_served(url: &str) {
    let c = ProbeClient::new(channel(url));
    for i in 0..5 {
        let s = format!("bystander {i}");
        assert_eq!(c.echo(s.clone()).await.unwrap(), s);
    }
}

/// A stream whose Request frame never finishes is given up after the frame timeout (the
/// stream reset, counted as timed out); the connection and its other calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_never_finished_is_given_up_after_the_frame_timeout() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h.frame_timeout(Duration::from_millis(300)));
    let (_ep, conn) = raw_connect(addr_of(host.url())).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let whole = request("Ledger", "get", common::args::<u64>(&[]));
    // Half of the frame, then nothing.
    send.write_all(&whole[..whole.len() / 2]).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1024)).await;
    match read {
        Ok(Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code)))) => {
            assert_eq!(code.into_inner(), 3, "reset with keel's protocol code");
        }
        other => panic!("expected the stream reset, got {other:?}"),
    }
    assert!(eventually(|| host.stats().connections_timed_out >= 1).await);
    // The same connection serves the next call.
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&whole).await.unwrap();
    send.finish().unwrap();
    assert_eq!(reply(&mut recv).await.status, keel_wire::StatusCode::Ok);
    bystander_served(host.url()).await;
    assert_eq!(counts.gets.load(Ordering::SeqCst), 1);
    host.shutdown_async().await;
}

/// A Request announcing a body far over the message limit is answered TooLarge as soon as its
/// head arrives: nothing is allocated for it, the rest is never waited for, and the connection
/// serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_before_it_arrives() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h.max_message_size(64 * 1024));
    let (_ep, conn) = raw_connect(addr_of(host.url())).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let whole = request("Ledger", "get", vec![0; 16]);
    // The length prefix says 1 GiB; the frame's type and call id follow, nothing else.
    let mut head = BytesMut::new();
    head.extend_from_slice(&(1u32 << 30).to_le_bytes());
    head.extend_from_slice(&whole[4..4 + 1 + 8]);
    send.write_all(&head).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), reply(&mut recv))
        .await
        .expect("answered without the body");
    assert_eq!(r.status, keel_wire::StatusCode::TooLarge);
    assert_eq!(ledger_get(&conn).await, keel_wire::StatusCode::Ok);
    bystander_served(host.url()).await;
    host.shutdown_async().await;
}

/// A peer may not open more streams than the host offers (128, or the call limit if higher):
/// the next one waits for QUIC stream credit until others end; other connections are served
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_limit_wait_for_credit() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h.max_calls_per_connection(4));
    let (_ep, conn) = raw_connect(addr_of(host.url())).await;
    // 128 streams opened, none finished (each holds a stream place on the host).
    let mut held = Vec::new();
    for _ in 0..128 {
        let (mut send, recv) = conn.open_bi().await.unwrap();
        send.write_all(&[0]).await.unwrap();
        held.push((send, recv));
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), conn.open_bi())
            .await
            .is_err(),
        "a 129th stream opened while 128 were open"
    );
    bystander_served(host.url()).await;
    // Some end (reset both ways): their places come back, and a new stream opens. (quinn
    // announces new stream credit once an eighth of the limit is free: 17 streams here.)
    for _ in 0..17 {
        let (mut send, mut recv) = held.pop().unwrap();
        send.reset(quinn::VarInt::from_u32(1)).unwrap();
        let _ = recv.stop(quinn::VarInt::from_u32(1));
    }
    let (mut send, mut recv) = tokio::time::timeout(Duration::from_secs(10), conn.open_bi())
        .await
        .expect("a stream opens once others ended")
        .unwrap();
    // The held streams are not calls (no Request frame arrived): this one is served.
    assert_eq!(
        ledger_get_on(&mut send, &mut recv).await,
        keel_wire::StatusCode::Ok
    );
    drop(held);
    host.shutdown_async().await;
}

/// A UDP forwarder between a client and the host that can stop passing the host's packets back:
/// the client's first flight (ClientHello and 0-RTT data) reaches the host, and the handshake
/// never completes, which is what a replay of a captured first flight looks like to the host.
struct Forwarder {
    addr: SocketAddr,
    replies: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    async fn start(host: SocketAddr) -> Forwarder {
        let front = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let back = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        back.connect(host).await.unwrap();
        let addr = front.local_addr().unwrap();
        let replies = Arc::new(AtomicBool::new(true));
        let client = Arc::new(parking_lot::Mutex::new(None::<SocketAddr>));
        let task = tokio::spawn({
            let replies = replies.clone();
            async move {
                let mut a = [0u8; 65536];
                let mut b = [0u8; 65536];
                loop {
                    tokio::select! {
                        Ok((n, from)) = front.recv_from(&mut a) => {
                            *client.lock() = Some(from);
                            let _ = back.send(&a[..n]).await;
                        }
                        Ok(n) = back.recv(&mut b) => {
                            let to = *client.lock();
                            if let (true, Some(to)) = (replies.load(Ordering::SeqCst), to) {
                                let _ = front.send_to(&b[..n], to).await;
                            }
                        }
                    }
                }
            }
        });
        Forwarder {
            addr,
            replies,
            task,
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The host's side of the 0-RTT rule, with a raw client that sends a non-idempotent call in
/// 0-RTT data (keel's own client never does): on a connection whose handshake never completes
/// (a replayed first flight), the idempotent call runs and the non-idempotent one never does;
/// the connection is closed at the handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_first_flight_never_runs_a_non_idempotent_call() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h.handshake_timeout(Duration::from_millis(500)));
    let fwd = Forwarder::start(addr_of(host.url())).await;
    let resumption = rustls::client::Resumption::in_memory_sessions(4);
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let config = quinn::ClientConfig::new(Arc::new(raw_crypto(&resumption)));
    // A first connection, to get a session ticket.
    let conn = endpoint
        .connect_with(config.clone(), fwd.addr, "127.0.0.1")
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ledger_get(&conn).await, keel_wire::StatusCode::Ok);
    conn.close(quinn::VarInt::from_u32(0), b"done");
    assert!(eventually(|| host.stats().connections_open == 0).await);

    // The host's answers no longer reach the client: its handshake cannot complete.
    fwd.replies.store(false, Ordering::SeqCst);
    let (conn, _accepted) = endpoint
        .connect_with(config, fwd.addr, "127.0.0.1")
        .unwrap()
        .into_0rtt()
        .unwrap_or_else(|_| panic!("a session to resume"));
    let (mut add, _add_recv) = conn.open_bi().await.unwrap();
    add.write_all(&request("Ledger", "add", common::args(&[("n", 5u64)])))
        .await
        .unwrap();
    add.finish().unwrap();
    let (mut get, _get_recv) = conn.open_bi().await.unwrap();
    get.write_all(&request("Ledger", "get", common::args::<u64>(&[])))
        .await
        .unwrap();
    get.finish().unwrap();
    // The idempotent call ran on 0-RTT data...
    assert!(eventually(|| counts.gets.load(Ordering::SeqCst) == 2).await);
    // ...the connection is closed at the handshake timeout...
    assert!(eventually(|| host.stats().connections_timed_out >= 1).await);
    assert!(eventually(|| host.stats().connections_open == 0).await);
    // ...and the non-idempotent one never ran.
    assert_eq!(counts.adds.load(Ordering::SeqCst), 0);
    assert_eq!(counts.value.load(Ordering::SeqCst), 0);
    bystander_served(host.url()).await;
    host.shutdown_async().await;
}

/// A connection with no call for the idle timeout is closed by the host (counted as timed out);
/// the client's next call reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_and_the_client_reconnects() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h.idle_timeout(Duration::from_millis(300)));
    let ch = channel(host.url());
    let c = LedgerClient::new(ch.clone());
    assert_eq!(c.get().await.unwrap(), 0);
    assert!(eventually(|| host.stats().connections_timed_out >= 1).await);
    assert!(eventually(|| host.stats().connections_open == 0).await);
    assert!(eventually(|| !ch.is_connected()).await);
    assert_eq!(c.get().await.unwrap(), 0);
    assert_eq!(ch.stats().connections_opened, 2);
    host.shutdown_async().await;
}

/// `Host::reload_tls` reaches a quic:// endpoint: new handshakes use the new certificate (a
/// client trusting only it connects), the connection already open keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_certificate_is_used_by_new_quic_handshakes() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h);
    let old = LedgerClient::new(channel(host.url()));
    assert_eq!(old.get().await.unwrap(), 0);
    let renewed = keel::tls::self_signed(&["localhost", "127.0.0.1"]).unwrap();
    let trusting_renewed = || {
        LedgerClient::new(
            keel::Channel::builder(host.url())
                .tls(renewed.client_tls().unwrap())
                .connect_timeout(Duration::from_secs(2))
                .build()
                .unwrap(),
        )
    };
    let err = trusting_renewed().get().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    host.reload_tls(renewed.server_tls().unwrap()).unwrap();
    assert_eq!(trusting_renewed().get().await.unwrap(), 0);
    assert_eq!(old.get().await.unwrap(), 0);
    assert_eq!(host.stats().tls_reloads, 1);
    host.shutdown_async().await;
}

/// GoAway on quic:// (a unidirectional stream of the host's): a connection past its maximum
/// age is told to go away, the client moves its next calls to a new connection, and not one
/// call fails across the moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_moves_calls_to_a_new_connection_without_failing_one() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| {
        h.max_connection_age(Duration::from_millis(200), Duration::from_secs(5))
    });
    let ch = channel(host.url());
    let c = LedgerClient::new(ch.clone());
    let mut calls = 0u64;
    while ch.stats().connections_opened < 4 {
        c.add(1).await.unwrap();
        calls += 1;
        assert!(calls < 100_000, "no GoAway after {calls} calls");
    }
    assert_eq!(counts.value.load(Ordering::SeqCst), calls);
    assert_eq!(counts.adds.load(Ordering::SeqCst), calls);
    host.shutdown_async().await;
}

/// Counts the process's live heap bytes, for the memory case (as in `hostile.rs`).
#[global_allocator]
static ALLOC: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

/// A flood of half-sent messages on many streams of many connections stays within the receive
/// budgets and QUIC's windows: 8 connections of 100 streams, each announcing a 1 MiB message and
/// sending 600 KiB of it (480 MiB if the host kept it all), hold the heap to a bound far below;
/// every stream is given up after the frame timeout, and a bystander is served meanwhile. In the
/// `slow` group: it runs alone, so the heap's peak is its own.
#[ignore = "slow: a memory case, run alone"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_messages_on_many_streams_stay_within_the_budgets() {
    const BOUND: usize = 64 << 20;
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| {
        h.max_message_size(1 << 20)
            .max_receive_bytes_per_connection(2 << 20)
            .max_receive_bytes(8 << 20)
            .frame_timeout(Duration::from_secs(2))
    });
    let addr = addr_of(host.url());
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ALLOC.reset_peak_usage();
    let before = ALLOC.current_usage();
    let mut conns = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..8 {
        let conn = raw_connect_on(&endpoint, addr).await;
        for _ in 0..100 {
            let (mut send, recv) = conn.open_bi().await.unwrap();
            writers.push(tokio::spawn(async move {
                let mut head = BytesMut::new();
                head.extend_from_slice(&((1u32 << 20) + 64).to_le_bytes());
                let _ = send.write_all(&head).await;
                // One chunk for every writer: the test's own memory is not the host's.
                static CHUNK: [u8; 60 * 1024] = [7; 60 * 1024];
                for _ in 0..10 {
                    if send.write_all(&CHUNK).await.is_err() {
                        break;
                    }
                }
                (send, recv)
            }));
        }
        conns.push(conn);
    }
    bystander_served(host.url()).await;
    // Every stream is given up (reset) once the frame timeout passes.
    for w in writers {
        let (_send, mut recv) = tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("the writes end")
            .unwrap();
        let read = tokio::time::timeout(Duration::from_secs(60), recv.read_to_end(1024)).await;
        assert!(
            matches!(read, Ok(Err(_))),
            "the stream was not given up: {read:?}"
        );
    }
    let grew = ALLOC.peak_usage().saturating_sub(before);
    println!("heap grew by {} KiB at its peak", grew / 1024);
    assert!(grew < BOUND, "the heap grew by {grew} bytes");
    bystander_served(host.url()).await;
    drop(conns);
    host.shutdown_async().await;
}

/// A peer that never reads its answers: the host's writes stop at QUIC's windows (its send
/// window is `max_unsent_bytes`), and the connection is closed once a write makes no progress
/// for the frame timeout (counted as timed out); other clients are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_its_answers_is_closed() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| {
        h.max_message_size(16 << 20)
            .max_unsent_bytes(64 * 1024)
            .frame_timeout(Duration::from_millis(300))
    });
    let (_ep, conn) = raw_connect(addr_of(host.url())).await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    // 8 MiB of answer, far more than the client's stream window: never read.
    send.write_all(&request(
        "Probe",
        "make_blob",
        common::args(&[("n", 8u64 << 20)]),
    ))
    .await
    .unwrap();
    send.finish().unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(20), conn.closed()).await;
    assert!(
        matches!(closed, Ok(quinn::ConnectionError::ApplicationClosed(ref c)) if c.error_code.into_inner() == 4),
        "{closed:?}"
    );
    assert!(eventually(|| host.stats().connections_timed_out >= 1).await);
    bystander_served(host.url()).await;
    host.shutdown_async().await;
}

/// Handshakes that never finish (the host's answers never reach the client) are closed at the
/// handshake timeout and counted, on a host with 0-RTT and on one requiring client
/// certificates (no 0-RTT: the connection is not registered before its handshake); other
/// clients are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_never_finished_are_closed_at_the_handshake_timeout() {
    let client_cert = keel::tls::self_signed(&["quic-client"]).unwrap();
    for mtls in [false, true] {
        let mut tls = test_cert().server_tls().unwrap();
        if mtls {
            tls = tls
                .require_client_certs(client_cert.cert_pem.as_bytes())
                .unwrap();
        }
        let host = keel::Host::builder()
            .service(ProbeServer::new(ProbeImpl::default()))
            .endpoint("quic://127.0.0.1:0")
            .tls(tls)
            .handshake_timeout(Duration::from_millis(300))
            .start()
            .unwrap();
        let fwd = Forwarder::start(addr_of(host.url())).await;
        fwd.replies.store(false, Ordering::SeqCst);
        let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let resumption = rustls::client::Resumption::in_memory_sessions(4);
        let config = quinn::ClientConfig::new(Arc::new(raw_crypto(&resumption)));
        let mut connecting = Vec::new();
        for _ in 0..5 {
            connecting.push(
                endpoint
                    .connect_with(config.clone(), fwd.addr, "127.0.0.1")
                    .unwrap(),
            );
        }
        assert!(
            eventually(|| host.stats().connections_timed_out >= 5).await,
            "mtls {mtls}: {:?}",
            host.stats()
        );
        assert!(
            eventually(|| host.stats().connections_open == 0).await,
            "mtls {mtls}"
        );
        if !mtls {
            bystander_served(host.url()).await;
        }
        drop(connecting);
        host.shutdown_async().await;
    }
}

/// QUIC datagrams are only the clients' liveness pings: the host offers room for a few bytes
/// (its transport parameter, which bounds what it holds unread: quinn's default offered 1.25
/// MB; a larger datagram cannot be sent to it), and a peer that floods it with tiny ones is
/// still served on the same connection, as are others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_are_tiny_and_a_flood_of_them_harms_nothing() {
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| h);
    let (_ep, conn) = raw_connect(addr_of(host.url())).await;
    let max = conn.max_datagram_size().expect("the host takes datagrams");
    assert!(max <= 64, "the host offers datagrams of {max} bytes");
    assert!(matches!(
        conn.send_datagram(Bytes::from(vec![0u8; 1200])),
        Err(quinn::SendDatagramError::TooLarge)
    ));
    for _ in 0..20_000 {
        conn.send_datagram(Bytes::from_static(&[0; 16])).unwrap();
        tokio::task::yield_now().await;
    }
    assert_eq!(ledger_get(&conn).await, keel_wire::StatusCode::Ok);
    assert!(conn.close_reason().is_none(), "{:?}", conn.close_reason());
    bystander_served(host.url()).await;
    host.shutdown_async().await;
}

/// CUBIC instead of BBR on both ends (`quic_congestion`): calls, a 1 MiB argument each way and
/// a streamed download go through as with the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cubic_on_both_ends_carries_calls_both_ways() {
    use keel::client::QuicCongestion;
    let counts = Counts::default();
    let host = ledger_host(&counts, |h| {
        h.quic_congestion(keel::host::QuicCongestion::Cubic)
    });
    let channel = keel::Channel::builder(host.url())
        .tls(test_cert().client_tls().unwrap())
        .quic_congestion(QuicCongestion::Cubic)
        .build()
        .unwrap();
    assert_eq!(host.config().quic_congestion, QuicCongestion::Cubic);
    let c = ProbeClient::new(channel);
    assert_eq!(c.echo("cubic".into()).await.unwrap(), "cubic");
    let blob = vec![7u8; 1 << 20];
    assert_eq!(c.blob_len(blob).await.unwrap(), 1 << 20);
    assert_eq!(c.make_blob(1 << 20).await.unwrap().len(), 1 << 20);
    let stream = c.download(1 << 20, 64 * 1024).await.unwrap();
    assert_eq!(checksum(stream).await.unwrap(), pattern_checksum(1 << 20));
    host.shutdown_async().await;
}
