//! What one call costs keel-wire's codec: encoding and decoding a Request and its Reply, as
//! keel's clients and hosts send them for `add(1, 2)` (a 19-byte MessagePack body), without and
//! with five metadata entries. Run with `cargo bench -p keel-wire`; compare runs on the same
//! machine (criterion keeps the previous run and reports the change).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use keel_wire::{metadata, Codec, Frame, Limits, Reply, Request, RequestFlags, StatusCode};
use std::hint::black_box;

/// `{"a": 1.0, "b": 2.0}` as keel's MessagePack encodes the arguments of `add(a, b)`.
const ADD_ARGS: &[u8] = &[
    0x82, 0xa1, b'a', 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xa1, b'b', 0xcb, 0x40, 0, 0, 0, 0, 0, 0,
    0,
];
/// `3.0` as the reply body.
const ADD_REPLY: &[u8] = &[0xcb, 0x40, 0x08, 0, 0, 0, 0, 0, 0];

fn request(md: Bytes) -> Frame {
    Frame::Request(Request {
        call_id: 42,
        flags: RequestFlags {
            accepts_compressed: true,
            ..RequestFlags::default()
        },
        deadline_us: 60_000_000,
        service: "Calculator".into(),
        operation: "add".into(),
        metadata: md,
        compression: 0,
        body: Bytes::from_static(ADD_ARGS),
    })
}

fn reply() -> Frame {
    Frame::Reply(Reply {
        call_id: 42,
        status: StatusCode::Ok,
        metadata: Bytes::new(),
        compression: 0,
        details: Bytes::new(),
        body: Bytes::from_static(ADD_REPLY),
    })
}

/// Five entries of 24-byte text values, as `callbench --metadata 5` sends.
fn five_entries() -> Bytes {
    let mut block = BytesMut::new();
    for i in 0..5 {
        metadata::push(&mut block, &format!("x-entry-{i}"), &[b'v'; 24]).unwrap();
    }
    block.freeze()
}

fn encoded(frame: &Frame) -> Bytes {
    let mut buf = BytesMut::new();
    Codec::new(Limits::default())
        .encode(frame, &mut buf)
        .unwrap();
    buf.freeze()
}

fn bench(c: &mut Criterion) {
    let codec = Codec::new(Limits::default());
    let cases = [
        ("request", request(Bytes::new())),
        ("request+5md", request(five_entries())),
        ("reply", reply()),
    ];
    let mut g = c.benchmark_group("keel-wire");
    g.throughput(Throughput::Elements(1));
    for (name, frame) in &cases {
        g.bench_function(format!("encode/{name}"), |b| {
            let mut buf = BytesMut::with_capacity(4096);
            b.iter(|| {
                buf.clear();
                codec.encode(black_box(frame), &mut buf).unwrap();
                black_box(buf.len())
            })
        });
        let bytes = encoded(frame);
        g.bench_function(format!("decode/{name}"), |b| {
            let mut codec = Codec::new(Limits::default());
            b.iter_batched_ref(
                || BytesMut::from(&bytes[..]),
                |src| black_box(codec.decode(src).unwrap().unwrap()),
                BatchSize::SmallInput,
            )
        });
        if name.starts_with("request") {
            // What a host does: the request read in place, its body borrowed.
            g.bench_function(format!("decode_in_place/{name}"), |b| {
                b.iter(|| {
                    let (req, len) = codec.decode_request_in_place(black_box(&bytes)).unwrap();
                    black_box((req.call_id, req.body.len(), len))
                })
            });
        } else {
            // What a client does: the reply taken off the buffer, its body split off.
            g.bench_function(format!("decode_reply/{name}"), |b| {
                b.iter_batched_ref(
                    || BytesMut::from(&bytes[..]),
                    |src| black_box(codec.decode_reply(src).unwrap()),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
