//! What a call costs a keel host between the wire and the socket, without I/O: the generated
//! server's `invoke` (decoding the MessagePack arguments into the operation's parameters), the
//! handler (`add`, a plain `fn`, run as the pool would run it), and encoding its reply; and
//! what it costs a client to encode the arguments. Run with `cargo bench -p keel --bench
//! invoke`; compare runs on the same machine.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel::__private::{Format, Invocation, Payload, Service as _};
use std::hint::black_box;

/// The operation every keel benchmark and peer comparison uses.
#[keel::contract]
pub trait Calculator {
    /// `a + b`, as a plain `fn` (keel-pool runs it).
    fn add(&self, a: f64, b: f64) -> f64;
    /// `a * b`, as an `async fn` (the runtime runs it).
    async fn multiply(&self, a: f64, b: f64) -> f64;
}

struct Calc;

impl Calculator for Calc {
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    async fn multiply(&self, a: f64, b: f64) -> f64 {
        a * b
    }
}

#[derive(serde::Serialize)]
struct AddArgs {
    a: f64,
    b: f64,
}

fn bench(c: &mut Criterion) {
    let server = CalculatorServer::new(Calc);
    let desc = server.descriptor();
    let add = desc.operation_index("add").unwrap();
    let args = match keel::__private::encode_ok(Format::MsgPack, &AddArgs { a: 1.0, b: 2.0 }) {
        Ok(Payload::Body(b)) => b,
        _ => unreachable!("a body"),
    };
    let mut g = c.benchmark_group("keel");
    g.throughput(Throughput::Elements(1));
    g.bench_function("client/encode-args", |b| {
        b.iter(|| {
            keel::__private::encode_ok(Format::MsgPack, black_box(&AddArgs { a: 1.0, b: 2.0 }))
        })
    });
    g.bench_function("host/context+invoke+run+encode (add)", |b| {
        b.iter(|| {
            let ctx = keel::__private::Context::detached("Calculator", "add");
            let inv = server
                .invoke(
                    add,
                    Format::MsgPack,
                    black_box(&args),
                    keel::ByteStream::empty(),
                    &ctx,
                )
                .unwrap();
            match inv {
                Invocation::Blocking(job) => black_box(job()),
                Invocation::Async(_) => unreachable!("add is a plain fn"),
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
