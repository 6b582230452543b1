//! The checks behind the `args_proto` fuzz target in `fuzz/`, shared with
//! `tests/proto_decoding.rs` so that stable CI runs them too.
//!
//! A contract, [`Mapped`], whose operations take types of every shape the protobuf mapping has
//! (GRPC.md, "Types"): numbers of every width, strings, bytes, `Option`, `Vec` (packed and
//! not), maps, a nested struct, a protobuf enum, a oneof enum of every variant kind, a
//! recursive struct. An input's first byte picks an operation, the rest is a protobuf request
//! body. It goes through the generated server's `invoke` (the path a host takes for a gRPC
//! call) and through `keel::__private::decode_args`. Neither may panic; both must agree; a
//! refusal is `BadRequest`; anything that decodes runs the operation (each echoes its
//! arguments), whose reply must decode to the arguments, and re-encoding must be stable (the
//! bytes of encode(decode(encode(x))) are those of encode(x)).

#![allow(dead_code, unreachable_pub, missing_docs, clippy::too_many_arguments)]

use std::collections::BTreeMap;

use keel::__private::{decode_args, proto_format, Format, Invocation, Payload, Service};
use keel::{ByteStream, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Item {
    pub sku: String,
    pub quantity: u32,
    pub price: f64,
    pub weight: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub enum Status {
    Open,
    Paid,
    Shipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub enum Payment {
    Cash,
    Card(String),
    Transfer {
        iban: String,
        reference: Option<String>,
    },
    Split(u32, Item),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Node {
    pub label: String,
    pub children: Vec<Node>,
}

#[keel::contract]
pub trait Mapped {
    fn numbers(
        &self,
        a: u8,
        b: i16,
        c: u32,
        d: i64,
        e: u64,
        f: i32,
        g: bool,
        h: char,
    ) -> (u8, i16, u32, i64, u64, i32, bool, char);
    fn order(
        &self,
        items: Vec<Item>,
        status: Status,
        history: Vec<Status>,
        payment: Option<Payment>,
        notes: BTreeMap<String, String>,
        counts: BTreeMap<u32, i64>,
        words: Vec<String>,
        totals: Vec<f64>,
    ) -> Vec<Item>;
    fn payment(&self, payment: Payment) -> Payment;
    fn tree(&self, root: Node) -> Node;
}

/// Every operation echoes.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

impl Mapped for Echo {
    fn numbers(
        &self,
        a: u8,
        b: i16,
        c: u32,
        d: i64,
        e: u64,
        f: i32,
        g: bool,
        h: char,
    ) -> (u8, i16, u32, i64, u64, i32, bool, char) {
        (a, b, c, d, e, f, g, h)
    }
    #[allow(clippy::too_many_arguments)]
    fn order(
        &self,
        items: Vec<Item>,
        _status: Status,
        _history: Vec<Status>,
        _payment: Option<Payment>,
        _notes: BTreeMap<String, String>,
        _counts: BTreeMap<u32, i64>,
        _words: Vec<String>,
        _totals: Vec<f64>,
    ) -> Vec<Item> {
        items
    }
    fn payment(&self, payment: Payment) -> Payment {
        payment
    }
    fn tree(&self, root: Node) -> Node {
        root
    }
}

pub const OPERATIONS: usize = 4;

/// The contract's protobuf format.
pub fn format() -> Format {
    proto_format(MappedClient::descriptor()).expect("Mapped's types all map to protobuf")
}

fn encode<T: Serialize>(format: Format, value: &T) -> Vec<u8> {
    match keel::__private::encode_ok(format, value) {
        Ok(Payload::Body(b)) => b.to_vec(),
        other => panic!("cannot encode: {other:?}"),
    }
}

/// `body` decoded as `A` and by the host; a decoded value re-encodes stably, the reply
/// decodes as `R`.
fn check<A, R>(format: Format, body: &[u8], reply: Option<Vec<u8>>) -> bool
where
    A: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let args = match decode_args::<A>(format, body) {
        Ok(args) => args,
        Err(status) => {
            assert_eq!(status.code(), StatusCode::BadRequest, "{status:?}");
            assert!(reply.is_none(), "the host decoded what decode_args refused");
            return false;
        }
    };
    let reply = reply.expect("the host refused what decode_args decoded");
    let once = encode(format, &args);
    let again: A = decode_args(format, &once).expect("re-encoded arguments decode");
    assert_eq!(
        encode(format, &again),
        once,
        "arguments changed in a round trip"
    );
    let value: R = decode_args(format, &reply).expect("the reply decodes");
    assert_eq!(
        encode(format, &value),
        reply,
        "the reply changed in a round trip"
    );
    true
}

fn run(invocation: Invocation) -> Vec<u8> {
    let Invocation::Blocking(f) = invocation else {
        panic!("Mapped's operations are plain fns");
    };
    match f() {
        Ok(Payload::Body(body)) => body.to_vec(),
        other => panic!("an echo answers with a body: {other:?}"),
    }
}

/// The check for one input: `data[0]` picks the operation, the rest is the protobuf body.
pub fn proto_input(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    decode_op(usize::from(pick) % OPERATIONS, body);
}

/// The check for one body of operation `op`; whether it decoded.
pub fn decode_op(op: usize, body: &[u8]) -> bool {
    use __keel_mapped as a;
    let format = format();
    let server = MappedServer::new(Echo);
    let reply = match server.invoke(
        op,
        format,
        body,
        ByteStream::empty(),
        &keel::__private::Context::detached("Mapped", "op"),
    ) {
        Ok(invocation) => Some(run(invocation)),
        Err(status) => {
            assert_eq!(status.code(), StatusCode::BadRequest, "{status:?}");
            None
        }
    };
    match op {
        0 => check::<a::__Mapped_numbers_args, (u8, i16, u32, i64, u64, i32, bool, char)>(
            format, body, reply,
        ),
        1 => check::<a::__Mapped_order_args, Vec<Item>>(format, body, reply),
        2 => check::<a::__Mapped_payment_args, Payment>(format, body, reply),
        _ => check::<a::__Mapped_tree_args, Node>(format, body, reply),
    }
}

/// A valid body of each operation, to mutate.
pub fn seeds() -> Vec<(usize, Vec<u8>)> {
    use __keel_mapped as a;
    let format = format();
    let item = Item {
        sku: "A-1".into(),
        quantity: 3,
        price: 9.5,
        weight: 0.25,
    };
    vec![
        (
            0,
            encode(
                format,
                &a::__Mapped_numbers_args {
                    a: 255,
                    b: -300,
                    c: 70_000,
                    d: -1,
                    e: u64::MAX,
                    f: i32::MIN,
                    g: true,
                    h: 'ß',
                },
            ),
        ),
        (
            1,
            encode(
                format,
                &a::__Mapped_order_args {
                    items: vec![item.clone(), item.clone()],
                    status: Status::Paid,
                    history: vec![Status::Open, Status::Paid],
                    payment: Some(Payment::Transfer {
                        iban: "DE00".into(),
                        reference: None,
                    }),
                    notes: [("gift".to_string(), "yes".to_string())].into(),
                    counts: [(1, -1), (2, 2)].into(),
                    words: vec!["a".into(), "".into()],
                    totals: vec![1.0, -2.5],
                },
            ),
        ),
        (
            2,
            encode(
                format,
                &a::__Mapped_payment_args {
                    payment: Payment::Split(2, item),
                },
            ),
        ),
        (
            3,
            encode(
                format,
                &a::__Mapped_tree_args {
                    root: Node {
                        label: "r".into(),
                        children: vec![Node {
                            label: "c".into(),
                            children: vec![],
                        }],
                    },
                },
            ),
        ),
    ]
}
