//! Compression on every binding: negotiated per call above a size threshold (a keel client with
//! compression on compresses its requests and asks for compressed replies; the host compresses
//! replies only for callers that accept it), measured in bytes through a counting proxy; and
//! zip bombs answered `too_large` with the connection kept, over keel-wire and HTTP.
#![allow(missing_docs)]

mod common;

use std::io::Write as _;

use common::{Binding, Proxy};
use keel::Compression;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[keel::contract]
pub trait Blobs {
    /// The length of an upload.
    fn size(&self, data: Vec<u8>) -> u64;
    /// `n` bytes of very compressible text.
    fn text(&self, n: u64) -> Vec<u8>;
    /// A short answer (below any threshold).
    fn ping(&self) -> String;
}

struct Impl;

fn text(n: usize) -> Vec<u8> {
    b"the quick brown fox jumps over the lazy dog; "
        .iter()
        .copied()
        .cycle()
        .take(n)
        .collect()
}

impl Blobs for Impl {
    fn size(&self, data: Vec<u8>) -> u64 {
        assert_eq!(data, text(data.len()), "the upload arrived intact");
        data.len() as u64
    }
    fn text(&self, n: u64) -> Vec<u8> {
        text(n as usize)
    }
    fn ping(&self) -> String {
        "pong".into()
    }
}

const BIG: usize = 200 * 1024;

/// Round trips of 200 KiB each way, with and without compression; the bytes on the wire tell
/// whether it happened.
async fn compressed_on_request_uncompressed_by_default(b: Binding) {
    let host = b.start(keel::Host::builder().service(BlobsServer::new(Impl)));
    let proxy = Proxy::start(host.url()).await;
    for codec in [None, Some(Compression::Zstd), Some(Compression::Gzip)] {
        let channel = b.channel_with(proxy.url(), |c| match codec {
            Some(codec) => c.compression(codec),
            None => c,
        });
        let client = BlobsClient::new(channel);
        assert_eq!(client.ping().await.unwrap(), "pong");
        proxy.take_bytes();
        assert_eq!(client.size(text(BIG)).await.unwrap(), BIG as u64);
        assert_eq!(client.text(BIG as u64).await.unwrap(), text(BIG));
        let carried = proxy.take_bytes();
        match codec {
            None => assert!(carried > 2 * BIG as u64, "{b:?}: {carried} bytes"),
            // Text this repetitive shrinks a hundredfold; both ways together stay far below
            // one body. (Over keel-wire the reply is always zstd.)
            Some(c) => assert!(carried < (BIG / 4) as u64, "{b:?} {c}: {carried} bytes"),
        }
        client.channel().close().await;
    }
    host.shutdown_async().await;
}

/// 64 MiB of zeros, zstd-compressed to a few KiB: the bomb.
fn zstd_bomb() -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        enc.write_all(&zeros).unwrap();
    }
    enc.finish().unwrap()
}

fn gzip_bomb() -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        enc.write_all(&zeros).unwrap();
    }
    enc.finish().unwrap()
}

/// The MessagePack arguments of `Blobs.size` with `len` zero bytes, as a bomb's payload: a
/// `bin 32` header, then the zeros (the bombs above hold only zeros; the header is prepended
/// uncompressed by a second frame/member, which both codecs accept).
fn bomb_args_prefix(len: u32) -> Vec<u8> {
    let mut v = vec![0x81, 0xa4];
    v.extend_from_slice(b"data");
    v.push(0xc6);
    v.extend_from_slice(&len.to_be_bytes());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zip_bomb_over_keel_wire_is_too_large_and_the_connection_kept() {
    use keel_wire::{Codec, Frame, Hello, HelloReply, Limits, Request, RequestFlags};
    let host = Binding::Tcp.start(keel::Host::builder().service(BlobsServer::new(Impl)));
    let mut sock = TcpStream::connect(host.url().trim_start_matches("tcp://"))
        .await
        .unwrap();
    let mut out = bytes::BytesMut::new();
    keel_wire::encode_hello(
        &Hello {
            version: keel_wire::VERSION,
            max_message_size: 1 << 20,
        },
        &mut out,
    );
    let codec = Codec::new(Limits::default());
    let prefix = zstd::bulk::compress(&bomb_args_prefix(64 << 20), 1).unwrap();
    let body = [prefix, zstd_bomb()].concat();
    assert!(body.len() < 64 * 1024, "a bomb of {} bytes", body.len());
    for (call_id, compression) in [(1u64, 1u8), (2, 9)] {
        codec
            .encode(
                &Frame::Request(Request {
                    call_id,
                    flags: RequestFlags::default(),
                    deadline_us: 0,
                    service: "Blobs".into(),
                    operation: "size".into(),
                    metadata: bytes::Bytes::new(),
                    compression,
                    body: body.clone().into(),
                }),
                &mut out,
            )
            .unwrap();
    }
    sock.write_all(&out).await.unwrap();
    let mut buf = bytes::BytesMut::new();
    let reply = loop {
        if let Some(r) = keel_wire::decode_hello_reply(&mut buf).unwrap() {
            break r;
        }
        assert!(sock.read_buf(&mut buf).await.unwrap() > 0);
    };
    assert!(matches!(reply, HelloReply::Accept { .. }));
    let mut dec = Codec::new(Limits::default());
    let mut replies = Vec::new();
    while replies.len() < 2 {
        match dec.decode(&mut buf).unwrap() {
            Some(Frame::Reply(r)) => replies.push(r),
            Some(_) => {}
            None => assert!(sock.read_buf(&mut buf).await.unwrap() > 0, "closed"),
        }
    }
    replies.sort_by_key(|r| r.call_id);
    assert_eq!(replies[0].status, keel_wire::StatusCode::TooLarge);
    assert!(String::from_utf8_lossy(&replies[0].body).contains("decompresses to more than"));
    // An id this host does not know is a bad request, not a closed connection.
    assert_eq!(replies[1].status, keel_wire::StatusCode::BadRequest);
    // The same connection still serves a plain call.
    let mut out = bytes::BytesMut::new();
    codec
        .encode(
            &Frame::Request(Request {
                call_id: 3,
                flags: RequestFlags::default(),
                deadline_us: 0,
                service: "Blobs".into(),
                operation: "ping".into(),
                metadata: bytes::Bytes::new(),
                compression: 0,
                body: bytes::Bytes::from_static(&[0x80]),
            }),
            &mut out,
        )
        .unwrap();
    sock.write_all(&out).await.unwrap();
    let pong = loop {
        match dec.decode(&mut buf).unwrap() {
            Some(Frame::Reply(r)) => break r,
            Some(_) => {}
            None => assert!(sock.read_buf(&mut buf).await.unwrap() > 0, "closed"),
        }
    };
    assert_eq!((pong.call_id, pong.status), (3, keel_wire::StatusCode::Ok));
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zip_bomb_over_http_is_413_and_the_connection_kept() {
    let host = Binding::Http1.start(keel::Host::builder().service(BlobsServer::new(Impl)));
    let addr = host.url().trim_start_matches("http://").to_string();
    let mut sock = TcpStream::connect(&addr).await.unwrap();
    // JSON args cannot be built from zeros; MessagePack can: the bin header, then the zeros.
    for (encoding, bomb) in [
        (
            "zstd",
            [
                zstd::bulk::compress(&bomb_args_prefix(64 << 20), 1).unwrap(),
                zstd_bomb(),
            ]
            .concat(),
        ),
        ("gzip", {
            let mut prefix = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            prefix.write_all(&bomb_args_prefix(64 << 20)).unwrap();
            [prefix.finish().unwrap(), gzip_bomb()].concat()
        }),
    ] {
        let head = format!(
            "POST /Blobs/size HTTP/1.1\r\nhost: x\r\ncontent-type: application/vnd.msgpack\r\n\
             content-encoding: {encoding}\r\ncontent-length: {}\r\n\r\n",
            bomb.len()
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        sock.write_all(&bomb).await.unwrap();
        let response = read_response(&mut sock).await;
        assert!(
            response.starts_with("HTTP/1.1 413"),
            "{encoding}: {response}"
        );
        assert!(response.contains("keel-status: too_large"), "{response}");
    }
    // An encoding keel does not speak: 415, and the connection still serves.
    let head = "POST /Blobs/ping HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-encoding: br\r\ncontent-length: 2\r\n\r\n{}";
    sock.write_all(head.as_bytes()).await.unwrap();
    let response = read_response(&mut sock).await;
    assert!(response.starts_with("HTTP/1.1 415"), "{response}");
    let ok = "POST /Blobs/ping HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 2\r\n\r\n{}";
    sock.write_all(ok.as_bytes()).await.unwrap();
    let response = read_response(&mut sock).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    host.shutdown_async().await;
}

/// One HTTP/1.1 response with a content-length body, as text.
async fn read_response(sock: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if body.len() >= len {
                return text;
            }
        }
    }
}

/// curl's `--compressed` gets a gzip- or zstd-encoded answer it decodes itself.
#[test]
fn curl_compressed_gets_an_encoded_reply() {
    if !common::have_curl() {
        return;
    }
    let host = keel::Host::builder()
        .service(BlobsServer::new(Impl))
        .endpoint("http://127.0.0.1:0")
        .start()
        .unwrap();
    let url = format!("{}/Blobs/text", host.url());
    for (accept, expected) in [
        ("gzip", Some("gzip")),
        ("zstd, gzip;q=0.5", Some("zstd")),
        ("identity", None),
    ] {
        let out = std::process::Command::new("curl")
            .args(["-sS", "-D", "-", "-o", "/dev/null", "--max-time", "10"])
            .args([
                "-H",
                "content-type: application/json",
                "-d",
                r#"{"n": 100000}"#,
            ])
            .args(["-H", &format!("accept-encoding: {accept}")])
            .arg(&url)
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        match expected {
            Some(enc) => assert!(
                head.contains(&format!("content-encoding: {enc}")),
                "{accept}: {head}"
            ),
            None => assert!(!head.contains("content-encoding"), "{accept}: {head}"),
        }
    }
    // And with --compressed curl decodes it: the JSON array of 100,000 numbers arrives whole.
    let out = std::process::Command::new("curl")
        .args(["-sS", "--compressed", "--max-time", "10"])
        .args([
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"n": 100000}"#,
        ])
        .arg(&url)
        .output()
        .unwrap();
    let body: Vec<u8> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body, text(100_000));
    host.shutdown();
}

// The counting proxy forwards TCP: every TCP-based binding (a Unix socket carries the same
// keel-wire frames as tcp://).
common::binding_matrix! {
    [over_tcp] {
        async fn compressed_on_request_uncompressed_by_default;
    }
}
