//! Evolution, tested as a rolling upgrade: a client and a host built from two versions of one
//! contract ([`v1`] and [`v2`] below, both `Inventory`, so one service name on the wire) work
//! together in both directions, on every binding, when the newer version has
//!
//! - added a trailing parameter with a default (`#[keel(default)]`): an old caller leaves it
//!   out and the new host sees the default; an old host ignores it;
//! - added a field with a default (`#[serde(default)]`) to a struct that travels as an argument
//!   and as a return value: the new side reads the default from an old peer, the old side
//!   ignores the field it does not know;
//! - added an operation: an old host answers it with `unknown_operation`, and the connection
//!   keeps working;
//! - added a metadata key on either side: the older side never asks for it and still succeeds;
//!   asked for, it is there (`Context::metadata`, `ReplyMetadata`).
//!
//! Each cross-version test checks the values that arrive, not only that calls succeed; the
//! same-version test is the control that shows the new features do carry values when both
//! sides know them.
//!
//! A status code the older side does not know cannot come from two builds of the same keel, so
//! it is simulated at the protocol level by hand-written hosts: keel-wire's Reply with status
//! byte 200, and an HTTP/1.1 answer with `keel-status: brand_new_code`. Both read as
//! `StatusCode::Unknown` with the host's message (and metadata) kept, and the connection keeps
//! working; the keel-wire host also sends a frame type and a Reply flag bit no keel knows yet,
//! which the client skips as protocol version 2 says.
//!
//! Finally a JSON caller (any HTTP client) may also leave the defaulted parameter out and send
//! fields the host does not know.
#![allow(missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::Binding;
use keel::client::ReplyMetadata;
use keel::{Metadata, StatusCode};

/// The contract as it was.
pub mod v1 {
    use std::sync::{Arc, Mutex};

    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(
        feature = "openapi",
        derive(keel::schemars::JsonSchema),
        schemars(crate = "keel::schemars")
    )]
    pub struct Item {
        pub id: u64,
        pub name: String,
    }

    #[keel::contract]
    pub trait Inventory {
        /// The item `id`.
        fn get(&self, id: u64) -> Item;
        /// Stores `item`; returns its id.
        fn put(&self, item: Item) -> u64;
    }

    /// The old host: records the arguments that reached it.
    #[derive(Debug, Default, Clone)]
    pub struct Store {
        pub gets: Arc<Mutex<Vec<u64>>>,
        pub puts: Arc<Mutex<Vec<Item>>>,
    }

    impl Inventory for Store {
        fn get(&self, id: u64) -> Item {
            self.gets.lock().unwrap().push(id);
            Item {
                id,
                name: format!("item {id}"),
            }
        }
        fn put(&self, item: Item) -> u64 {
            let id = item.id;
            self.puts.lock().unwrap().push(item);
            id
        }
    }
}

/// The contract after one release: a defaulted trailing parameter, a defaulted field, a new
/// operation, and metadata both ways (through a `Context`, which is not part of the wire
/// contract).
pub mod v2 {
    use std::sync::{Arc, Mutex};

    use keel::Context;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(
        feature = "openapi",
        derive(keel::schemars::JsonSchema),
        schemars(crate = "keel::schemars")
    )]
    pub struct Item {
        pub id: u64,
        pub name: String,
        /// New: units in stock.
        #[serde(default)]
        pub stock: u32,
    }

    #[keel::contract]
    pub trait Inventory {
        /// The item `id`; its stock counts reserved units too if `include_reserved`. Reads
        /// the request metadata `x-region`; sets the reply metadata `x-stock-source`.
        fn get(&self, ctx: Context, id: u64, #[keel(default)] include_reserved: bool) -> Item;
        /// Stores `item`; returns its id.
        fn put(&self, item: Item) -> u64;
        /// New: how many items were stored.
        fn count(&self) -> u64;
    }

    /// Units of every item available, and reserved, on the new host.
    pub const AVAILABLE: u32 = 40;
    pub const RESERVED: u32 = 2;

    /// The reply metadata every `get` of the new host carries.
    pub const STOCK_SOURCE: (&str, &str) = ("x-stock-source", "warehouse-2");

    /// What reached the new host's `get`.
    #[derive(Debug, Clone, PartialEq)]
    pub struct GetSeen {
        pub id: u64,
        pub include_reserved: bool,
        pub region: Option<String>,
    }

    /// The new host: records the arguments that reached it.
    #[derive(Debug, Default, Clone)]
    pub struct Store {
        pub gets: Arc<Mutex<Vec<GetSeen>>>,
        pub puts: Arc<Mutex<Vec<Item>>>,
    }

    impl Inventory for Store {
        fn get(&self, ctx: Context, id: u64, include_reserved: bool) -> Item {
            self.gets.lock().unwrap().push(GetSeen {
                id,
                include_reserved,
                region: ctx.metadata().get("x-region").map(str::to_string),
            });
            ctx.insert_reply_metadata(STOCK_SOURCE.0, STOCK_SOURCE.1)
                .unwrap();
            Item {
                id,
                name: format!("item {id}"),
                stock: AVAILABLE + if include_reserved { RESERVED } else { 0 },
            }
        }
        fn put(&self, item: Item) -> u64 {
            let id = item.id;
            self.puts.lock().unwrap().push(item);
            id
        }
        fn count(&self) -> u64 {
            self.puts.lock().unwrap().len() as u64
        }
    }
}

/// The metadata a new client sends and no old handler reads.
fn region_eu() -> Metadata {
    let mut md = Metadata::new();
    md.insert("x-region", "eu").unwrap();
    md
}

/// An old client, a new host: the host sees the defaults for what the client does not send,
/// the client ignores what the host sends that it does not know.
async fn old_client_new_host(b: Binding) {
    let store = v2::Store::default();
    let host = b.start(keel::Host::builder().service(v2::InventoryServer::new(store.clone())));
    let client = v1::InventoryClient::new(b.channel(host.url()));

    // The reply carries `stock` (40) and reply metadata; the old client reads neither.
    let item = client.get(3).await.unwrap();
    assert_eq!(
        item,
        v1::Item {
            id: 3,
            name: "item 3".into()
        }
    );
    assert_eq!(
        *store.gets.lock().unwrap(),
        [v2::GetSeen {
            id: 3,
            include_reserved: false,
            region: None
        }],
        "{b:?}: the parameter the old client does not send takes its default"
    );

    // The field the old client does not send takes its default.
    let item = v1::Item {
        id: 9,
        name: "bolt".into(),
    };
    assert_eq!(client.put(item).await.unwrap(), 9);
    assert_eq!(
        *store.puts.lock().unwrap(),
        [v2::Item {
            id: 9,
            name: "bolt".into(),
            stock: 0
        }],
        "{b:?}"
    );

    // Reply metadata the old client does not know is there if it asks for reply metadata.
    let reply = ReplyMetadata::new();
    client.with_reply_metadata(&reply).get(4).await.unwrap();
    assert_eq!(
        reply.get().get(v2::STOCK_SOURCE.0),
        Some(v2::STOCK_SOURCE.1)
    );

    assert_eq!(
        client.channel().stats().connections_opened,
        1,
        "{b:?}: one connection throughout"
    );
    host.shutdown_async().await;
}

/// A new client, an old host: the host ignores the parameter, field and metadata it does not
/// know; the client reads the default for the field the host does not send; the new operation
/// is `unknown_operation`, and the connection carries on.
async fn new_client_old_host(b: Binding) {
    let store = v1::Store::default();
    let host = b.start(keel::Host::builder().service(v1::InventoryServer::new(store.clone())));
    let client = v2::InventoryClient::new(b.channel(host.url()));

    let reply = ReplyMetadata::new();
    let item = client
        .with_metadata(region_eu())
        .with_reply_metadata(&reply)
        .get(3, true)
        .await
        .unwrap();
    assert_eq!(
        item,
        v2::Item {
            id: 3,
            name: "item 3".into(),
            stock: 0
        },
        "{b:?}: the field the old host does not send takes its default"
    );
    assert_eq!(*store.gets.lock().unwrap(), [3]);
    assert_eq!(
        reply.get().get(v2::STOCK_SOURCE.0),
        None,
        "the old host sets no such key"
    );

    let item = v2::Item {
        id: 9,
        name: "bolt".into(),
        stock: 5,
    };
    assert_eq!(client.put(item).await.unwrap(), 9);
    assert_eq!(
        *store.puts.lock().unwrap(),
        [v1::Item {
            id: 9,
            name: "bolt".into()
        }],
        "{b:?}: the old host ignores the field it does not know"
    );

    // The operation the old host does not have.
    let err = client.count().await.unwrap_err();
    assert!(err.is_unknown_operation(), "{b:?}: {err}");
    assert_eq!(
        err.status_code(),
        Some(StatusCode::UnknownOperation),
        "{b:?}: {err}"
    );
    assert!(err.message().contains("count"), "{b:?}: {err}");
    // The connection keeps working.
    assert_eq!(client.get(5, false).await.unwrap().name, "item 5");
    assert_eq!(*store.gets.lock().unwrap(), [3, 5]);
    assert_eq!(
        client.channel().stats().connections_opened,
        1,
        "{b:?}: the unknown operation did not cost the connection"
    );
    host.shutdown_async().await;
}

/// The control: both sides new, so the new parameter, field, operation and metadata carry
/// values.
async fn new_client_new_host(b: Binding) {
    let store = v2::Store::default();
    let host = b.start(keel::Host::builder().service(v2::InventoryServer::new(store.clone())));
    let client = v2::InventoryClient::new(b.channel(host.url()));

    let reply = ReplyMetadata::new();
    let item = client
        .with_metadata(region_eu())
        .with_reply_metadata(&reply)
        .get(3, true)
        .await
        .unwrap();
    assert_eq!(item.stock, v2::AVAILABLE + v2::RESERVED);
    assert_eq!(
        *store.gets.lock().unwrap(),
        [v2::GetSeen {
            id: 3,
            include_reserved: true,
            region: Some("eu".into())
        }]
    );
    assert_eq!(
        reply.get().get(v2::STOCK_SOURCE.0),
        Some(v2::STOCK_SOURCE.1)
    );

    let item = v2::Item {
        id: 9,
        name: "bolt".into(),
        stock: 5,
    };
    assert_eq!(client.put(item.clone()).await.unwrap(), 9);
    assert_eq!(*store.puts.lock().unwrap(), [item]);
    assert_eq!(client.count().await.unwrap(), 1);
    host.shutdown_async().await;
}

common::binding_matrix! {
    [] {
        async fn old_client_new_host;
        async fn new_client_old_host;
        async fn new_client_new_host;
    }
}

/// MessagePack with structs as maps, as keel's own bodies.
fn msgpack<T: serde::Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).unwrap()
}

/// Reads from `sock` into `buf`; false once the peer closed (or the read failed).
fn read_more(sock: &mut impl Read, buf: &mut BytesMut) -> bool {
    let mut chunk = [0u8; 4096];
    match sock.read(&mut chunk) {
        Ok(n) if n > 0 => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        _ => false,
    }
}

/// A keel-wire host by hand, speaking protocol version 2 on one connection: it answers the
/// first Request with the status byte 200 (a code no keel knows yet), a message and reply
/// metadata, and every later one `Ok` with a v1 [`v1::Item`], preceded by a frame of a type no
/// keel knows yet (42) and with a Reply flag bit no keel knows yet (bit 7), both of which
/// version 2 says to skip. Returns the operations it was asked for, once the client closed the
/// connection.
fn future_wire_host() -> (String, std::thread::JoinHandle<Vec<String>>) {
    use keel_wire::{Codec, Frame, HelloReply, Limits, Reply, StatusCode as Wire};

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", listener.local_addr().unwrap());
    let host = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = BytesMut::new();
        while keel_wire::decode_hello(&mut buf).unwrap().is_none() {
            assert!(read_more(&mut sock, &mut buf), "no Hello");
        }
        let mut out = BytesMut::new();
        keel_wire::encode_hello_reply(
            &HelloReply::Accept {
                version: 2,
                max_message_size: 1 << 20,
            },
            &mut out,
        );
        sock.write_all(&out).unwrap();
        let codec = Codec::new(Limits::default());
        let mut decoder = Codec::new(Limits::default());
        let mut asked = Vec::new();
        loop {
            let frame = match decoder.decode(&mut buf).unwrap() {
                Some(frame) => frame,
                None if read_more(&mut sock, &mut buf) => continue,
                None => return asked,
            };
            let mut out = BytesMut::new();
            match frame {
                Frame::Request(req) if asked.is_empty() => {
                    asked.push(req.operation.to_string());
                    let mut metadata = BytesMut::new();
                    keel_wire::metadata::push(&mut metadata, "x-new-key", b"kept").unwrap();
                    let reply = Reply {
                        call_id: req.call_id,
                        status: Wire::Unknown,
                        metadata: metadata.freeze(),
                        compression: 0,
                        details: Bytes::new(),
                        body: Bytes::from_static(b"a code from the future"),
                    };
                    codec.encode(&Frame::Reply(reply), &mut out).unwrap();
                    // len u32, type u8, call_id u64, then the status byte.
                    assert_eq!(out[13], Wire::Unknown as u8);
                    out[13] = 200;
                }
                Frame::Request(req) => {
                    asked.push(req.operation.to_string());
                    let item = v1::Item {
                        id: 2,
                        name: "item 2".into(),
                    };
                    let reply = Reply {
                        call_id: req.call_id,
                        status: Wire::Ok,
                        metadata: Bytes::new(),
                        compression: 0,
                        details: Bytes::new(),
                        body: Bytes::from(msgpack(&item)),
                    };
                    // A frame of an unknown type: len u32 (type and payload), type, payload.
                    let future = b"a frame from the future";
                    out.extend_from_slice(&(1 + future.len() as u32).to_le_bytes());
                    out.extend_from_slice(&[42]);
                    out.extend_from_slice(future);
                    let at = out.len();
                    codec.encode(&Frame::Reply(reply), &mut out).unwrap();
                    // len u32, type u8, call_id u64, status u8, then the flags.
                    assert_eq!(out[at + 14], 0);
                    out[at + 14] = 0x80;
                }
                Frame::Ping(nonce) => codec.encode(&Frame::Pong(nonce), &mut out).unwrap(),
                _ => {}
            }
            sock.write_all(&out).unwrap();
        }
    });
    (url, host)
}

/// keel-wire: a status byte this keel does not know reads as `unknown`, with the host's
/// message and metadata kept, and the connection carries on (past a frame type and a Reply
/// flag it does not know either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_wire_status_reads_as_unknown_with_its_message() {
    let (url, host) = future_wire_host();
    let client = v1::InventoryClient::new(keel::Channel::new(&url).unwrap());
    let err = client.get(1).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unknown), "{err}");
    assert!(err.message().contains("a code from the future"), "{err}");
    assert_eq!(err.metadata().get("x-new-key"), Some("kept"), "{err}");
    // The same connection answers the next call.
    assert_eq!(
        client.get(2).await.unwrap(),
        v1::Item {
            id: 2,
            name: "item 2".into()
        }
    );
    assert_eq!(client.channel().stats().connections_opened, 1);
    client.close().await;
    assert_eq!(host.join().unwrap(), ["get", "get"]);
}

/// The position of `needle` in `hay`.
#[cfg(feature = "http")]
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One HTTP/1.1 message off `sock`: the head (as text) and the body (by `content-length`),
/// or `None` once the peer closed.
#[cfg(feature = "http")]
fn read_http_message(sock: &mut impl Read, buf: &mut BytesMut) -> Option<(String, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        if !read_more(sock, buf) {
            return None;
        }
    };
    let head = String::from_utf8(buf.split_to(head_end).to_vec()).unwrap();
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.trim().parse::<usize>().unwrap());
    while buf.len() < len {
        assert!(read_more(sock, buf), "the body ended early");
    }
    Some((head, buf.split_to(len).to_vec()))
}

/// An HTTP/1.1 host by hand, on one keep-alive connection: it answers the first request with
/// `keel-status: brand_new_code` (a code no keel knows yet), a message and a metadata header,
/// and every later one `ok` with a v1 [`v1::Item`]. Returns the request lines it got, once the
/// client closed the connection.
#[cfg(feature = "http")]
fn future_http_host() -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let host = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = BytesMut::new();
        let mut asked = Vec::new();
        while let Some((head, _body)) = read_http_message(&mut sock, &mut buf) {
            let first = asked.is_empty();
            asked.push(head.lines().next().unwrap_or("").to_string());
            let (status, headers, body) = if first {
                (
                    "500 Internal Server Error",
                    concat!(
                        "keel-status: brand_new_code\r\n",
                        "content-type: text/plain\r\n",
                        "x-new-key: kept\r\n",
                    ),
                    b"a code from the future".to_vec(),
                )
            } else {
                let item = v1::Item {
                    id: 2,
                    name: "item 2".into(),
                };
                (
                    "200 OK",
                    "keel-status: ok\r\ncontent-type: application/vnd.msgpack\r\n",
                    msgpack(&item),
                )
            };
            let head = format!(
                "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n",
                body.len()
            );
            sock.write_all(head.as_bytes()).unwrap();
            sock.write_all(&body).unwrap();
        }
        asked
    });
    (url, host)
}

/// HTTP: a `keel-status` this keel does not know reads as `unknown`, its name and the host's
/// message in the error's message and its metadata kept, and the connection carries on.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_http_status_reads_as_unknown_with_its_name() {
    let (url, host) = future_http_host();
    let client = v1::InventoryClient::new(Binding::Http1.channel(&url));
    let err = client.get(1).await.unwrap_err();
    assert_eq!(err.status_code(), Some(StatusCode::Unknown), "{err}");
    assert!(err.message().contains("brand_new_code"), "{err}");
    assert!(err.message().contains("a code from the future"), "{err}");
    assert_eq!(err.metadata().get("x-new-key"), Some("kept"), "{err}");
    // The same connection answers the next call.
    assert_eq!(
        client.get(2).await.unwrap(),
        v1::Item {
            id: 2,
            name: "item 2".into()
        }
    );
    assert_eq!(client.channel().stats().connections_opened, 1);
    client.close().await;
    assert_eq!(
        host.join().unwrap(),
        [
            "POST /Inventory/get HTTP/1.1",
            "POST /Inventory/get HTTP/1.1"
        ]
    );
}

/// `request` (a whole HTTP/1.1 request with `connection: close`) sent to `url`; the answer's
/// head and body.
#[cfg(feature = "http")]
fn http_exchange(url: &str, request: &str) -> (String, Vec<u8>) {
    let mut sock = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(request.as_bytes()).unwrap();
    let mut buf = BytesMut::new();
    read_http_message(&mut sock, &mut buf).expect("an answer")
}

/// A JSON POST of `body` to `path`, as any HTTP client would send it.
#[cfg(feature = "http")]
fn json_post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A JSON caller built from an older (or newer) contract: it leaves out the defaulted
/// parameter and field, and sends a parameter and a field the host does not know.
#[cfg(feature = "http")]
#[test]
fn a_json_caller_may_omit_defaults_and_send_unknown_fields() {
    let store = v2::Store::default();
    let host = Binding::Http1
        .start(keel::Host::builder().service(v2::InventoryServer::new(store.clone())));

    let (head, body) = http_exchange(
        host.url(),
        &json_post("/Inventory/get", r#"{"id": 3, "from_v3": [1, 2]}"#),
    );
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(head.contains("keel-status: ok"), "{head}");
    let item: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        item,
        serde_json::json!({"id": 3, "name": "item 3", "stock": v2::AVAILABLE})
    );
    assert_eq!(
        *store.gets.lock().unwrap(),
        [v2::GetSeen {
            id: 3,
            include_reserved: false,
            region: None
        }]
    );

    let (head, body) = http_exchange(
        host.url(),
        &json_post(
            "/Inventory/put",
            r#"{"item": {"id": 9, "name": "bolt", "colour": "red"}, "urgent": true}"#,
        ),
    );
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(body, b"9");
    assert_eq!(
        *store.puts.lock().unwrap(),
        [v2::Item {
            id: 9,
            name: "bolt".into(),
            stock: 0
        }]
    );
    host.shutdown();
}
