//! A peer that speaks keel-wire by hand, to send what keel's own client never would: another
//! protocol version, unknown operations, oversized and malformed frames.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::{args, echo_args, msgpack};
use keel_wire::{Codec, Frame, Hello, HelloReply, Limits, Request, RequestFlags, StatusCode};

struct RawPeer {
    sock: TcpStream,
    buf: BytesMut,
    codec: Codec,
}

impl RawPeer {
    fn connect(url: &str, version: u16) -> (RawPeer, HelloReply) {
        let addr = url.trim_start_matches("tcp://");
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut out = BytesMut::new();
        keel_wire::encode_hello(
            &Hello {
                version,
                max_message_size: 1 << 20,
            },
            &mut out,
        );
        sock.write_all(&out).unwrap();
        let mut peer = RawPeer {
            sock,
            buf: BytesMut::new(),
            codec: Codec::new(Limits::default()),
        };
        let reply = loop {
            if let Some(r) = keel_wire::decode_hello_reply(&mut peer.buf).unwrap() {
                break r;
            }
            peer.fill();
        };
        (peer, reply)
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 4096];
        let n = self.sock.read(&mut chunk).unwrap();
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    fn request(&mut self, call_id: u64, service: &str, operation: &str, body: Vec<u8>) {
        let mut out = BytesMut::new();
        let frame = Frame::Request(Request {
            call_id,
            flags: RequestFlags::default(),
            deadline_us: 0,
            service: service.to_owned().into(),
            operation: operation.to_owned().into(),
            metadata: Bytes::new(),
            compression: 0,
            body: Bytes::from(body),
        });
        Codec::new(Limits::with_max_message_size(u32::MAX))
            .encode(&frame, &mut out)
            .unwrap();
        self.send_bytes(&out);
    }

    /// The next frame other than a Ping or Pong (a host measures the round trip with a Ping at
    /// the first streamed request, and keepalive pings; this peer leaves them unanswered, which
    /// the host must tolerate), or `None` once the host closed the connection.
    fn next(&mut self) -> Option<Frame> {
        loop {
            match self.codec.decode(&mut self.buf).unwrap() {
                Some(Frame::Ping(_) | Frame::Pong(_)) => continue,
                Some(f) => return Some(f),
                None => {}
            }
            if self.fill() == 0 {
                return None;
            }
        }
    }

    fn reply(&mut self) -> (u64, StatusCode, Bytes) {
        match self.next() {
            Some(Frame::Reply(r)) => (r.call_id, r.status, r.body),
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

#[test]
fn a_newer_protocol_version_is_negotiated_down() {
    let host = common::host();
    let (_peer, reply) = RawPeer::connect(host.url(), keel_wire::VERSION + 1);
    match reply {
        HelloReply::Accept { version, .. } => assert_eq!(version, keel_wire::VERSION),
        other => panic!("expected an accept, got {other:?}"),
    }
    host.shutdown();
}

#[test]
fn a_version_1_client_is_served_in_version_1() {
    // Version 1: postcard arguments, no metadata; the host answers in kind.
    let host = common::host();
    let (mut peer, reply) = RawPeer::connect(host.url(), 1);
    assert!(
        matches!(reply, HelloReply::Accept { version: 1, .. }),
        "{reply:?}"
    );
    peer.codec.set_version(1);
    peer.request(
        1,
        "Probe",
        "echo",
        postcard::to_stdvec(&("v1".to_string(),)).unwrap(),
    );
    let (id, status, body) = peer.reply();
    assert_eq!((id, status), (1, StatusCode::Ok));
    assert_eq!(postcard::from_bytes::<String>(&body).unwrap(), "v1");
    host.shutdown();
}

#[test]
fn unknown_operation_and_bad_arguments_keep_the_connection() {
    let host = common::host();
    let (mut peer, reply) = RawPeer::connect(host.url(), keel_wire::VERSION);
    assert!(matches!(reply, HelloReply::Accept { .. }));
    peer.request(1, "Probe", "no_such_op", vec![]);
    let (id, status, body) = peer.reply();
    assert_eq!((id, status), (1, StatusCode::UnknownOperation));
    assert!(String::from_utf8_lossy(&body).contains("no_such_op"));
    peer.request(2, "Probe", "echo", vec![0xff, 0xff, 0xff]);
    assert_eq!(peer.reply().1, StatusCode::BadRequest);
    peer.request(3, "Probe", "echo", echo_args("ok"));
    let (id, status, body) = peer.reply();
    assert_eq!((id, status), (3, StatusCode::Ok));
    assert_eq!(rmp_serde::from_slice::<String>(&body).unwrap(), "ok");
    host.shutdown();
}

#[test]
fn an_oversized_request_is_answered_and_skipped_without_closing() {
    let host = common::host_with(|h| h.max_message_size(1024), "tcp://127.0.0.1:0");
    let (mut peer, _) = RawPeer::connect(host.url(), keel_wire::VERSION);
    peer.request(
        7,
        "Probe",
        "blob_len",
        args(&[("data", vec![1u8; 64 * 1024])]),
    );
    let (id, status, body) = peer.reply();
    assert_eq!((id, status), (7, StatusCode::TooLarge));
    assert!(String::from_utf8_lossy(&body).contains("1024"));
    // The same connection goes on.
    peer.request(8, "Probe", "echo", echo_args("after"));
    assert_eq!(peer.reply().0, 8);
    host.shutdown();
}

#[test]
fn a_malformed_frame_closes_only_that_connection_with_a_reason() {
    let host = common::host();
    let good = common::ProbeBlockingClient::connect(host.url()).unwrap();
    let (mut peer, _) = RawPeer::connect(host.url(), keel_wire::VERSION);
    // Length 0: not a frame (a frame has at least its type byte).
    peer.send_bytes(&[0, 0, 0, 0]);
    match peer.next() {
        Some(Frame::GoAway(g)) => assert!(g.reason.contains("protocol error"), "{}", g.reason),
        other => panic!("expected goaway, got {other:?}"),
    }
    assert!(
        peer.next().is_none(),
        "the host should close the connection"
    );
    assert_eq!(good.echo("unaffected".into()).unwrap(), "unaffected");
    host.shutdown();
}

#[test]
fn not_a_keel_client_is_closed_quietly() {
    let host = common::host();
    let mut sock = TcpStream::connect(host.url().trim_start_matches("tcp://")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Not HTTP either (an HTTP client is answered in HTTP: tests/newcomer_errors.rs).
    sock.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(sock.read(&mut buf).unwrap_or(0), 0);
    let good = common::ProbeBlockingClient::connect(host.url()).unwrap();
    assert_eq!(good.echo("still serving".into()).unwrap(), "still serving");
    host.shutdown();
}

/// A host by hand: accepts one connection, reads keel's Hello *and the first Request* before
/// answering either (so a client that waited for the HelloReply first would never get one),
/// then answers with `reply`.
fn pipelining_host(reply: HelloReply) -> (String, std::thread::JoinHandle<bool>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", listener.local_addr().unwrap());
    let host = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = BytesMut::new();
        let mut codec = Codec::new(Limits::default());
        let mut read = |buf: &mut BytesMut| {
            let mut chunk = [0u8; 4096];
            match sock.read(&mut chunk) {
                Ok(n) if n > 0 => {
                    buf.extend_from_slice(&chunk[..n]);
                    true
                }
                _ => false,
            }
        };
        while keel_wire::decode_hello(&mut buf).unwrap().is_none() {
            assert!(read(&mut buf), "no Hello");
        }
        let request = loop {
            if let Some(Frame::Request(r)) = codec.decode(&mut buf).unwrap() {
                break r;
            }
            if !read(&mut buf) {
                return false; // The Request never came before the HelloReply: not pipelined.
            }
        };
        let mut out = BytesMut::new();
        let accepted = matches!(reply, HelloReply::Accept { .. });
        keel_wire::encode_hello_reply(&reply, &mut out);
        if accepted {
            let body = msgpack("pipelined");
            codec
                .encode(
                    &Frame::Reply(keel_wire::Reply {
                        call_id: request.call_id,
                        status: StatusCode::Ok,
                        metadata: Bytes::new(),
                        compression: 0,
                        details: Bytes::new(),
                        body: Bytes::from(body),
                    }),
                    &mut out,
                )
                .unwrap();
        }
        let mut sock = sock;
        sock.write_all(&out).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        true
    });
    (url, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_clients_first_call_rides_with_the_handshake() {
    let (url, host) = pipelining_host(HelloReply::Accept {
        version: keel_wire::VERSION,
        max_message_size: 1 << 20,
    });
    // No `open`: the first call connects, and goes out right behind the Hello.
    let client = common::ProbeClient::new(keel::Channel::new(&url).unwrap());
    assert_eq!(client.echo("x".into()).await.unwrap(), "pipelined");
    assert!(
        host.join().unwrap(),
        "the request waited for the HelloReply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handshake_fails_the_pipelined_call_with_the_reason() {
    let (url, host) = pipelining_host(HelloReply::Reject {
        supported_version: 9,
        reason: "only version 9 here".into(),
    });
    let client = common::ProbeClient::new(keel::Channel::new(&url).unwrap());
    let err = client.echo("x".into()).await.unwrap_err();
    assert!(err.is_protocol(), "{err}");
    assert!(err.to_string().contains("only version 9 here"), "{err}");
    assert!(host.join().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_uploads_per_connection_are_bounded() {
    let host = common::host_with(|h| h.max_streams_per_connection(4), "tcp://127.0.0.1:0");
    let client = common::ProbeClient::connect(host.url()).await.unwrap();
    // Four uploads that do not end yet: each holds a stream open on the host.
    let mut senders = Vec::new();
    let mut open = Vec::new();
    for i in 0..4 {
        let (tx, stream) = keel::ByteStream::channel(1);
        tx.send(vec![1u8; 10]).await.unwrap();
        senders.push(tx);
        let c = client.clone();
        open.push(tokio::spawn(async move {
            c.upload(format!("u{i}"), stream).await
        }));
    }
    assert!(common::eventually(|| host.stats().calls_in_flight == 4).await);
    // A fifth is refused at once, and told to stop sending.
    let (tx, stream) = keel::ByteStream::channel(1);
    tx.send(vec![2u8; 10]).await.unwrap();
    let err = client.upload("fifth".into(), stream).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    // Unstreamed calls carry on meanwhile; the open uploads finish as their streams end.
    assert_eq!(
        client.echo("still here".into()).await.unwrap(),
        "still here"
    );
    drop(senders);
    for call in open {
        let (_, len, _) = call.await.unwrap().unwrap();
        assert_eq!(len, 10);
    }
    host.shutdown_async().await;
}

impl RawPeer {
    fn send_frame(&mut self, frame: &Frame) {
        let mut out = BytesMut::new();
        Codec::new(Limits::default())
            .encode(frame, &mut out)
            .unwrap();
        self.send_bytes(&out);
    }

    /// Every frame until the host closes the connection (pings included).
    fn rest(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            while let Some(f) = self.codec.decode(&mut self.buf).unwrap() {
                frames.push(f);
            }
            if self.fill() == 0 {
                return frames;
            }
        }
    }
}

/// Pings closer together than the host's limit, with no call between them, are strikes: one
/// past the limit and the host says GoAway ("too many pings") and closes. Pings sent with calls,
/// however close, are never strikes.
#[test]
fn a_ping_flood_is_sent_away_but_pings_with_calls_are_not() {
    let host = common::host();
    let (mut peer, _) = RawPeer::connect(host.url(), keel_wire::VERSION);
    for i in 0..20u64 {
        peer.request(i + 1, "Probe", "echo", echo_args("with a ping"));
        peer.send_frame(&Frame::Ping(i));
        assert_eq!(peer.reply().1, StatusCode::Ok);
    }
    // Two more pings with no call between (the last call's ping was the first): two
    // strikes, tolerated; then a call clears them.
    for i in 0..2 {
        peer.send_frame(&Frame::Ping(100 + i));
    }
    peer.request(50, "Probe", "echo", echo_args("still"));
    assert_eq!(
        peer.reply(),
        (50, StatusCode::Ok, Bytes::from(msgpack("still")))
    );

    // A flood: the first ping is free (a call came before it), the next three are strikes,
    // and the third strike is one too many.
    for i in 0..4 {
        peer.send_frame(&Frame::Ping(200 + i));
    }
    let frames = peer.rest();
    let pongs = frames
        .iter()
        .filter(|f| matches!(f, Frame::Pong(_)))
        .count();
    let go_away = frames.iter().find_map(|f| match f {
        Frame::GoAway(g) => Some(g.clone()),
        _ => None,
    });
    let go_away = go_away.expect("a GoAway before the close");
    assert_eq!(go_away.reason, "too many pings");
    assert_eq!(go_away.last_call_id, 50);
    assert!(pongs <= 3, "{pongs} pongs: the flood was answered");
    // The socket closes a moment before the host's accounting of it.
    assert!(no_connection_left(&host), "{:?}", host.stats());
    host.shutdown();
}

/// Waits (up to 10 s) until the host counts no open connection.
fn no_connection_left(host: &keel::Host) -> bool {
    common::eventually_blocking(Duration::from_secs(10), || {
        host.stats().connections_open == 0
    })
}

/// A client that stops answering (it vanished, or the path to it did) is closed by the host's
/// keepalive: a ping after `interval` of quiet, and nothing back within `timeout`.
#[test]
fn a_client_that_stops_answering_is_closed_by_the_host() {
    let host = common::host_with(
        |h| {
            h.keepalive(Some(keel::host::Keepalive::new(
                Duration::from_millis(300),
                Duration::from_millis(300),
            )))
        },
        "tcp://127.0.0.1:0",
    );
    let (mut peer, _) = RawPeer::connect(host.url(), keel_wire::VERSION);
    peer.request(1, "Probe", "echo", echo_args("once"));
    assert_eq!(peer.reply().1, StatusCode::Ok);
    let quiet = std::time::Instant::now();
    // This peer never answers a ping: the host closes it.
    let frames = peer.rest();
    let waited = quiet.elapsed();
    assert!(
        frames.iter().any(|f| matches!(f, Frame::Ping(_))),
        "{frames:?}"
    );
    assert!(
        waited >= Duration::from_millis(300),
        "closed after {waited:?}"
    );
    assert!(no_connection_left(&host), "{:?}", host.stats());
    assert_eq!(host.stats().connections_timed_out, 1);
    host.shutdown();
}

/// Encodes `Probe.sleep_ms(ms)` as call `call_id` into `out`.
fn sleep_request(call_id: u64, ms: u64, out: &mut BytesMut) {
    let frame = Frame::Request(Request {
        call_id,
        flags: RequestFlags::default(),
        deadline_us: 0,
        service: "Probe".into(),
        operation: "sleep_ms".into(),
        metadata: Bytes::new(),
        compression: 0,
        body: Bytes::from(args(&[("ms", ms)])),
    });
    Codec::new(Limits::default()).encode(&frame, out).unwrap();
}

/// Sends, in one write (so that the host reads them together), `before` quick calls of
/// `Probe.sleep_ms`, one that blocks for 3 s, and `after` quick ones; checks that every quick
/// call is answered before the blocking one could have finished, and the blocking one last.
fn quick_calls_around_a_blocking_one(peer: &mut RawPeer, first_id: u64, before: u64, after: u64) {
    let blocking = first_id + before;
    let mut out = BytesMut::new();
    for call_id in first_id..blocking {
        sleep_request(call_id, 0, &mut out);
    }
    sleep_request(blocking, 3_000, &mut out);
    for call_id in blocking + 1..=blocking + after {
        sleep_request(call_id, 0, &mut out);
    }
    let sent = Instant::now();
    peer.send_bytes(&out);
    let mut answered = Vec::new();
    for _ in 0..before + after {
        let (call_id, status, _) = peer.reply();
        assert_eq!(status, StatusCode::Ok);
        answered.push(call_id);
    }
    let quick = sent.elapsed();
    assert!(
        !answered.contains(&blocking),
        "the blocking call was answered before calls read with it: {answered:?}"
    );
    // The blocking call sleeps 3 s from when it starts, after `sent`: replies that waited for it
    // cannot have come sooner.
    assert!(
        quick < Duration::from_millis(2_900),
        "the quick calls' replies came after {quick:?}, with the blocking call's"
    );
    let (call_id, status, _) = peer.reply();
    assert_eq!((call_id, status), (blocking, StatusCode::Ok));
}

#[test]
fn a_quick_operation_that_blocks_once_holds_up_no_call_read_with_it() {
    // Calls of an operation known to be quick, read together, run one after another on one
    // pool thread (dispatch/runs.rs). If one of them blocks, the calls behind it must still be
    // started at once, not after it (the run's guard hands them to other threads: the first
    // part fails without that), and the replies of those before it must be written without
    // waiting for it.
    let host = common::host();
    let (mut peer, _) = RawPeer::connect(host.url(), keel_wire::VERSION);
    for call_id in 1..=8 {
        let mut out = BytesMut::new();
        sleep_request(call_id, 0, &mut out);
        peer.send_bytes(&out);
        assert_eq!(peer.reply().1, StatusCode::Ok);
    }
    // Calls behind the blocking one.
    quick_calls_around_a_blocking_one(&mut peer, 100, 3, 10);
    // Replies produced before it, with nothing behind it.
    quick_calls_around_a_blocking_one(&mut peer, 200, 5, 0);
    host.shutdown();
}
