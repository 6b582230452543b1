//! Argument decoding as a host does it, on stable (proptest): arbitrary bytes never panic it in
//! either format, valid arguments round-trip, and a valid value followed by more bytes is
//! refused as `BadRequest`. The same checks run under cargo-fuzz (`fuzz/`, targets `args_json`,
//! `args_postcard` and `args_msgpack`).
#![allow(missing_docs)]

use keel::__private::Format;
use keel::StatusCode;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

#[path = "support/args_core.rs"]
mod args_core;

use args_core::{Customer, Line, Order, Shape, State, Tree, OPERATIONS};

const FORMATS: [Format; 3] = [Format::Json, Format::Postcard, Format::MsgPack];

/// A finite float (NaN is not equal to itself, and JSON has no infinities).
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        Just(0.0),
        Just(-0.0),
        Just(1.5),
    ]
}

fn order() -> impl Strategy<Value = Order> {
    let customer = (any::<String>(), any::<Option<String>>(), any::<bool>())
        .prop_map(|(name, email, vip)| Customer { name, email, vip });
    let line = (any::<String>(), any::<u32>(), float()).prop_map(|(sku, quantity, price)| Line {
        sku,
        quantity,
        price,
    });
    let state = prop_oneof![Just(State::Open), Just(State::Paid), Just(State::Shipped)];
    (
        any::<u64>(),
        customer,
        vec(line, 0..4),
        state,
        any::<Option<String>>(),
        btree_map(any::<String>(), any::<i32>(), 0..4),
    )
        .prop_map(|(id, customer, lines, state, notes, tags)| Order {
            id,
            customer,
            lines,
            state,
            notes,
            tags,
        })
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Point),
        float().prop_map(Shape::Circle),
        (any::<u32>(), any::<u32>()).prop_map(|(w, h)| Shape::Rect { w, h }),
        vec(any::<(i32, i32)>(), 0..5).prop_map(Shape::Polygon),
        (any::<String>(), any::<i8>()).prop_map(|(s, n)| Shape::Label(s, n)),
    ]
}

fn tree() -> impl Strategy<Value = Tree> {
    any::<i64>()
        .prop_map(Tree::Leaf)
        .prop_recursive(6, 64, 4, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Tree::Node),
                inner.prop_map(|t| Tree::Wrap(Box::new(t))),
            ]
        })
}

fn numbers() -> impl Strategy<Value = args_core::Numbers> {
    (
        any::<u8>(),
        any::<i16>(),
        any::<u32>(),
        any::<i64>(),
        any::<u128>(),
        float(),
        any::<bool>(),
        any::<char>(),
    )
}

/// Bytes after a value that must make it fail in `format`: anything non-empty for postcard;
/// for JSON, something besides the whitespace JSON allows after a value.
fn trailing() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let json = vec(any::<u8>(), 1..8).prop_filter("not only JSON whitespace", |b| {
        b.iter().any(|c| !b" \t\r\n".contains(c))
    });
    (json, vec(any::<u8>(), 1..8))
}

fn trailing_for(format: Format, (json, postcard): &(Vec<u8>, Vec<u8>)) -> &[u8] {
    match format {
        // Any byte after a binary value is one too many.
        Format::Postcard | Format::MsgPack => postcard,
        _ => json,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes, for every operation (and one unknown), in both formats: never a panic,
    /// the host's `invoke` and `decode_args` agree, a refusal is `BadRequest`, and what decodes
    /// round-trips (see `args_core`).
    #[test]
    fn arbitrary_bytes_never_panic(op in 0..=OPERATIONS, body in vec(any::<u8>(), 0..200)) {
        for format in FORMATS {
            args_core::decode_op(format, op, &body);
        }
    }

    /// Bytes that look like JSON reach further into the JSON decoder than random ones.
    #[test]
    fn json_like_text_never_panics(
        op in 0..=OPERATIONS,
        body in "[{}\\[\\]\":,0-9a-z\\\\.eE+ -]{0,80}",
    ) {
        args_core::decode_op(Format::Json, op, body.as_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn orders_round_trip_and_trailing_bytes_are_refused(o in order(), t in trailing()) {
        for format in FORMATS {
            prop_assert_eq!(args_core::order_round_trip(format, &o, b""), Ok(o.clone()));
            let e = args_core::order_round_trip(format, &o, trailing_for(format, &t)).unwrap_err();
            prop_assert_eq!(e.code(), StatusCode::BadRequest);
        }
    }

    #[test]
    fn shapes_round_trip_and_trailing_bytes_are_refused(
        s in (shape(), vec(shape(), 0..4), proptest::option::of(shape())),
        t in trailing(),
    ) {
        for format in FORMATS {
            prop_assert_eq!(args_core::shapes_round_trip(format, &s, b""), Ok(s.clone()));
            let e = args_core::shapes_round_trip(format, &s, trailing_for(format, &t)).unwrap_err();
            prop_assert_eq!(e.code(), StatusCode::BadRequest);
        }
    }

    #[test]
    fn trees_round_trip_and_trailing_bytes_are_refused(tree in tree(), t in trailing()) {
        for format in FORMATS {
            prop_assert_eq!(args_core::tree_round_trip(format, &tree, b""), Ok(tree.clone()));
            let e = args_core::tree_round_trip(format, &tree, trailing_for(format, &t)).unwrap_err();
            prop_assert_eq!(e.code(), StatusCode::BadRequest);
        }
    }

    #[test]
    fn numbers_round_trip_and_trailing_bytes_are_refused(n in numbers(), t in trailing()) {
        for format in FORMATS {
            prop_assert_eq!(args_core::numbers_round_trip(format, &n, b""), Ok(n));
            let e = args_core::numbers_round_trip(format, &n, trailing_for(format, &t)).unwrap_err();
            prop_assert_eq!(e.code(), StatusCode::BadRequest);
        }
    }

    #[test]
    fn text_round_trips_and_trailing_bytes_are_refused(
        x in (any::<String>(), vec(any::<String>(), 0..4), any::<Option<String>>()),
        t in trailing(),
    ) {
        for format in FORMATS {
            prop_assert_eq!(args_core::text_round_trip(format, &x, b""), Ok(x.clone()));
            let e = args_core::text_round_trip(format, &x, trailing_for(format, &t)).unwrap_err();
            prop_assert_eq!(e.code(), StatusCode::BadRequest);
        }
    }

    /// A valid body of every operation, mutated a little, goes through the fuzz check too.
    #[test]
    fn mutated_valid_bodies_never_panic(
        o in order(),
        mutations in vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        for format in FORMATS {
            let mut body = args_core::encode(format, &(o.clone(),));
            if format == Format::Json {
                body = serde_json::to_vec(&serde_json::json!({ "order": o })).unwrap();
            }
            for (i, b) in &mutations {
                let i = i % body.len();
                body[i] = *b;
            }
            args_core::decode_op(format, 4, &body);
        }
    }
}

#[test]
fn malformed_json_bodies_are_refused() {
    for body in [&b"[]"[..], b"{\"order\": 1}", b"null", b""] {
        assert_eq!(args_core::decode_op(Format::Json, 4, body), None);
    }
}

/// Found by the round-trip properties above: without serde_json's `float_roundtrip` these
/// arrived one unit in the last place off (6.678069837718966e96 as 6.678069837718965e96).
#[test]
fn json_floats_arrive_exactly() {
    for f in [
        6.678069837718966e96,
        1.0099148294391581e145,
        1.4605117548899369e197,
    ] {
        let n: args_core::Numbers = (0, 0, 0, 0, 0, f, false, 'a');
        let back = args_core::numbers_round_trip(Format::Json, &n, b"").unwrap();
        assert_eq!(
            back.5.to_bits(),
            f.to_bits(),
            "{f:e} arrived as {:e}",
            back.5
        );
    }
}

/// Found while writing the fuzz targets (a libFuzzer input of 4 KiB is too short to reach it):
/// postcard has no nesting limit, so a recursive argument nested ~10,000
/// levels deep (10 KB of postcard) overflowed a 2 MiB stack and aborted the host. Now both
/// formats refuse values nested deeper than 128 levels with `BadRequest`, and decode those within.
#[test]
fn deeply_nested_arguments_are_refused_without_overflowing() {
    fn postcard(levels: usize) -> Vec<u8> {
        // Tree::Wrap is variant 2; Tree::Leaf(0) is [0, 0].
        let mut body = vec![2u8; levels];
        body.extend_from_slice(&[0, 0]);
        body
    }
    fn msgpack(levels: usize) -> Vec<u8> {
        // {"tree": {"Wrap": ... {"Leaf": 0}}}: maps of one entry, keys as fixstr.
        let mut body = vec![0x81, 0xa4];
        body.extend_from_slice(b"tree");
        for _ in 0..levels {
            body.extend_from_slice(&[0x81, 0xa4]);
            body.extend_from_slice(b"Wrap");
        }
        body.extend_from_slice(&[0x81, 0xa4]);
        body.extend_from_slice(b"Leaf");
        body.push(0);
        body
    }
    fn json(levels: usize) -> Vec<u8> {
        let mut body = b"{\"tree\":".to_vec();
        body.extend(std::iter::repeat_n(&b"{\"Wrap\":"[..], levels).flatten());
        body.extend_from_slice(b"{\"Leaf\":0}");
        body.extend(std::iter::repeat_n(b'}', levels + 1));
        body
    }
    let outcomes = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let mut outcomes = vec![];
            for levels in [100, 1_000, 100_000, 1_000_000] {
                for (format, body) in [
                    (Format::Postcard, postcard(levels)),
                    (Format::Json, json(levels)),
                    (Format::MsgPack, msgpack(levels)),
                ] {
                    let outcome = args_core::tree_decodes(format, &body).map_err(|e| e.code());
                    outcomes.push((levels, format, outcome));
                }
            }
            outcomes
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    for (levels, format, outcome) in outcomes {
        let expected = if levels <= 100 {
            Ok(())
        } else {
            Err(StatusCode::BadRequest)
        };
        assert_eq!(outcome, expected, "{format:?}, {levels} levels");
    }
}
