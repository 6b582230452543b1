//! The checks behind the argument-decoding fuzz targets in `fuzz/`, shared with
//! `tests/args_decoding.rs` so that stable CI runs them too.
//!
//! A contract, [`Fuzzed`], whose operations take representative argument types (numbers,
//! strings, `Vec`, `Option`, maps, a nested struct, enums, a recursive enum) and, being plain
//! `fn`s, return their arguments unchanged. An input's first byte picks an operation, the rest
//! is the request body. It goes through the generated server's `invoke`, the path a host takes,
//! and through `keel::__private::decode_args` into the generated arguments struct. Neither may
//! panic; both must agree; a refusal is `BadRequest`; and anything that decodes runs the
//! operation, whose reply must decode, and must re-encode to the same bytes (the value
//! survived), as must the decoded arguments.

// Each fuzz target and the stable test use part of this.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::too_many_arguments)]

use std::collections::BTreeMap;

use keel::__private::{decode_args, Format, Invocation, Payload, Service};
use keel::{ByteStream, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A nested struct, as an order from a shop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Order {
    pub id: u64,
    pub customer: Customer,
    pub lines: Vec<Line>,
    pub state: State,
    pub notes: Option<String>,
    pub tags: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Customer {
    pub name: String,
    pub email: Option<String>,
    pub vip: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct Line {
    pub sku: String,
    pub quantity: u32,
    pub price: f64,
}

/// A field-less enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub enum State {
    Open,
    Paid,
    Shipped,
}

/// An enum of every variant kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub enum Shape {
    Point,
    Circle(f64),
    Rect { w: u32, h: u32 },
    Polygon(Vec<(i32, i32)>),
    Label(String, i8),
}

/// A recursive type: a tree as deep as the body allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub enum Tree {
    Leaf(i64),
    Node(Vec<Tree>),
    Wrap(Box<Tree>),
}

/// Every operation returns its arguments.
#[keel::contract]
pub trait Fuzzed {
    fn nothing(&self);
    fn numbers(
        &self,
        a: u8,
        b: i16,
        c: u32,
        d: i64,
        e: u128,
        f: f64,
        g: bool,
        h: char,
    ) -> (u8, i16, u32, i64, u128, f64, bool, char);
    fn text(
        &self,
        s: String,
        list: Vec<String>,
        maybe: Option<String>,
    ) -> (String, Vec<String>, Option<String>);
    fn blobs(
        &self,
        data: Vec<u8>,
        words: Vec<u64>,
        pairs: Vec<(u16, String)>,
    ) -> (Vec<u8>, Vec<u64>, Vec<(u16, String)>);
    fn order(&self, order: Order) -> Order;
    fn shapes(
        &self,
        shape: Shape,
        more: Vec<Shape>,
        choice: Option<Shape>,
    ) -> (Shape, Vec<Shape>, Option<Shape>);
    fn tree(&self, tree: Tree) -> Tree;
    fn fallible(&self, n: i32) -> Result<i32, String>;
    fn upload(&self, tag: String, data: ByteStream) -> String;
}

/// The implementation the fuzz targets run: every operation echoes.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

impl Fuzzed for Echo {
    fn nothing(&self) {}
    fn numbers(
        &self,
        a: u8,
        b: i16,
        c: u32,
        d: i64,
        e: u128,
        f: f64,
        g: bool,
        h: char,
    ) -> (u8, i16, u32, i64, u128, f64, bool, char) {
        (a, b, c, d, e, f, g, h)
    }
    fn text(
        &self,
        s: String,
        list: Vec<String>,
        maybe: Option<String>,
    ) -> (String, Vec<String>, Option<String>) {
        (s, list, maybe)
    }
    fn blobs(
        &self,
        data: Vec<u8>,
        words: Vec<u64>,
        pairs: Vec<(u16, String)>,
    ) -> (Vec<u8>, Vec<u64>, Vec<(u16, String)>) {
        (data, words, pairs)
    }
    fn order(&self, order: Order) -> Order {
        order
    }
    fn shapes(
        &self,
        shape: Shape,
        more: Vec<Shape>,
        choice: Option<Shape>,
    ) -> (Shape, Vec<Shape>, Option<Shape>) {
        (shape, more, choice)
    }
    fn tree(&self, tree: Tree) -> Tree {
        tree
    }
    fn fallible(&self, n: i32) -> Result<i32, String> {
        if n < 0 {
            Err(format!("{n} is negative"))
        } else {
            Ok(n)
        }
    }
    fn upload(&self, tag: String, _data: ByteStream) -> String {
        tag
    }
}

/// The number of operations of [`Fuzzed`], in declaration order.
pub const OPERATIONS: usize = 9;

pub fn encode<T: Serialize>(format: Format, value: &T) -> Vec<u8> {
    match format {
        Format::Postcard => postcard::to_stdvec(value).expect("postcard encodes"),
        Format::MsgPack => {
            // As keel encodes it: structs as maps, byte sequences as `bin`.
            let mut buf = Vec::new();
            let mut se = rmp_serde::Serializer::new(&mut buf)
                .with_struct_map()
                .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
            value.serialize(&mut se).expect("MessagePack encodes");
            buf
        }
        _ => serde_json::to_vec(value).expect("JSON encodes"),
    }
}

/// `body` decoded as `A` (the generated arguments struct) directly, with the host's
/// invocation's outcome `reply` (`None`: it refused the body): both agree; a decoded value
/// re-encodes to bytes that decode and re-encode to themselves; the reply, if any, decodes as
/// `R` and re-encodes to itself. Returns the re-encoded arguments.
fn check<A, R>(format: Format, body: &[u8], reply: Option<Vec<u8>>) -> Option<Vec<u8>>
where
    A: Serialize + DeserializeOwned,
    R: Serialize + DeserializeOwned,
{
    let args = match decode_args::<A>(format, body) {
        Ok(args) => args,
        Err(status) => {
            assert_eq!(status.code(), StatusCode::BadRequest, "{status:?}");
            assert!(reply.is_none(), "the host decoded what decode_args refused");
            return None;
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
    if format == Format::Postcard {
        // An echo's reply is its arguments, field after field: the same bytes.
        assert_eq!(
            reply, once,
            "the operation did not get the arguments decoded"
        );
    }
    Some(once)
}

/// Runs the invocation of a plain `fn` operation and returns its reply body, or the fault's.
fn run(invocation: Invocation) -> Vec<u8> {
    let Invocation::Blocking(f) = invocation else {
        panic!("Fuzzed's operations are plain fns");
    };
    match f() {
        Ok(Payload::Body(body)) => body.to_vec(),
        Ok(Payload::Stream(_)) => panic!("no operation streams its reply"),
        Err(status) => {
            assert_eq!(status.code(), StatusCode::Fault, "{status:?}");
            status.details().to_vec()
        }
    }
}

/// The check for one input: `data[0]` picks the operation, the rest is the body in `format`.
pub fn decode_args_input(format: Format, data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    // One more than there are: an unknown operation.
    let op = usize::from(pick) % (OPERATIONS + 1);
    decode_op(format, op, body);
}

/// The check for one body of operation `op`; returns the re-encoded arguments if it decoded.
pub fn decode_op(format: Format, op: usize, body: &[u8]) -> Option<Vec<u8>> {
    use __keel_fuzzed as a;
    let server = FuzzedServer::new(Echo);
    let reply = match server.invoke(
        op,
        format,
        body,
        ByteStream::empty(),
        &keel::__private::Context::detached("Fuzzed", "op"),
    ) {
        Ok(invocation) => Some(run(invocation)),
        Err(status) => {
            let expected = if op < OPERATIONS {
                StatusCode::BadRequest
            } else {
                StatusCode::UnknownOperation
            };
            assert_eq!(status.code(), expected, "{status:?}");
            None
        }
    };
    match op {
        0 => check::<a::__Fuzzed_nothing_args, ()>(format, body, reply),
        1 => check::<a::__Fuzzed_numbers_args, Numbers>(format, body, reply),
        2 => check::<a::__Fuzzed_text_args, (String, Vec<String>, Option<String>)>(
            format, body, reply,
        ),
        3 => check::<a::__Fuzzed_blobs_args, (Vec<u8>, Vec<u64>, Vec<(u16, String)>)>(
            format, body, reply,
        ),
        4 => check::<a::__Fuzzed_order_args, Order>(format, body, reply),
        5 => check::<a::__Fuzzed_shapes_args, (Shape, Vec<Shape>, Option<Shape>)>(
            format, body, reply,
        ),
        6 => check::<a::__Fuzzed_tree_args, Tree>(format, body, reply),
        7 => {
            let args = decode_args::<a::__Fuzzed_fallible_args>(format, body);
            assert_eq!(args.is_ok(), reply.is_some());
            let n = args.ok()?.n;
            let reply = reply.expect("decoded");
            if n < 0 {
                let fault: String = decode_args(format, &reply).expect("the fault decodes");
                assert_eq!(fault, format!("{n} is negative"));
            } else {
                assert_eq!(decode_args::<i32>(format, &reply).ok(), Some(n));
            }
            Some(encode(format, &(n,)))
        }
        8 => {
            // The streamed operation's arguments: everything but the stream.
            check::<a::__Fuzzed_upload_args, String>(format, body, reply)
        }
        _ => {
            assert!(reply.is_none());
            None
        }
    }
}

/// Encodes `args` (a generated arguments struct), appends `trailing`, decodes it back as the
/// host does and hands the decoded struct to `out`.
fn round_trip<A, V>(
    format: Format,
    args: A,
    trailing: &[u8],
    out: impl FnOnce(A) -> V,
) -> Result<V, keel::Status>
where
    A: Serialize + DeserializeOwned,
{
    let mut body = encode(format, &args);
    body.extend_from_slice(trailing);
    decode_args::<A>(format, &body).map(out)
}

/// [`Fuzzed::order`]'s arguments through the host's decoding (see [`round_trip`]).
pub fn order_round_trip(
    format: Format,
    order: &Order,
    trailing: &[u8],
) -> Result<Order, keel::Status> {
    let args = __keel_fuzzed::__Fuzzed_order_args {
        order: order.clone(),
    };
    round_trip(format, args, trailing, |a| a.order)
}

/// [`Fuzzed::shapes`]'s arguments through the host's decoding (see [`round_trip`]).
pub fn shapes_round_trip(
    format: Format,
    value: &(Shape, Vec<Shape>, Option<Shape>),
    trailing: &[u8],
) -> Result<(Shape, Vec<Shape>, Option<Shape>), keel::Status> {
    let (shape, more, choice) = value.clone();
    let args = __keel_fuzzed::__Fuzzed_shapes_args {
        shape,
        more,
        choice,
    };
    round_trip(format, args, trailing, |a| (a.shape, a.more, a.choice))
}

/// [`Fuzzed::tree`]'s arguments through the host's decoding (see [`round_trip`]).
pub fn tree_round_trip(format: Format, tree: &Tree, trailing: &[u8]) -> Result<Tree, keel::Status> {
    let args = __keel_fuzzed::__Fuzzed_tree_args { tree: tree.clone() };
    round_trip(format, args, trailing, |a| a.tree)
}

/// [`Fuzzed::numbers`]' arguments.
pub type Numbers = (u8, i16, u32, i64, u128, f64, bool, char);

/// [`Fuzzed::numbers`]' arguments through the host's decoding (see [`round_trip`]).
pub fn numbers_round_trip(
    format: Format,
    n: &Numbers,
    trailing: &[u8],
) -> Result<Numbers, keel::Status> {
    let &(a, b, c, d, e, f, g, h) = n;
    let args = __keel_fuzzed::__Fuzzed_numbers_args {
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
    };
    round_trip(format, args, trailing, |x| {
        (x.a, x.b, x.c, x.d, x.e, x.f, x.g, x.h)
    })
}

/// [`Fuzzed::text`]'s arguments.
pub type Text = (String, Vec<String>, Option<String>);

/// [`Fuzzed::text`]'s arguments through the host's decoding (see [`round_trip`]).
pub fn text_round_trip(format: Format, t: &Text, trailing: &[u8]) -> Result<Text, keel::Status> {
    let (s, list, maybe) = t.clone();
    let args = __keel_fuzzed::__Fuzzed_text_args { s, list, maybe };
    round_trip(format, args, trailing, |x| (x.s, x.list, x.maybe))
}

/// Whether `body` decodes as [`Fuzzed::tree`]'s arguments.
pub fn tree_decodes(format: Format, body: &[u8]) -> Result<(), keel::Status> {
    decode_args::<__keel_fuzzed::__Fuzzed_tree_args>(format, body).map(|_| ())
}
