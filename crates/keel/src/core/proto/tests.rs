//! The codec against protobuf's own examples, round trips of every shape the mapping has, and
//! bytes no encoder would write.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::decode::decode;
use super::encode::encode;
use super::schema::{is_c_like, trace_all, trace_of};
use super::Layout;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Color {
    Red,
    Green,
    Blue,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Shape {
    Circle(f64),
    Rect { w: f64, h: f64 },
    Pair(u32, String),
    Nothing,
    Point(Point),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Point {
    x: i32,
    y: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meters(f64);

/// Bytes serialized as bytes (what `serde_bytes` does), not as a sequence of numbers.
#[derive(Debug, Clone, PartialEq)]
struct Blob(Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(v.to_vec()))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Everything {
    flag: bool,
    small: u8,
    neg: i64,
    int: i32,
    big: u64,
    f: f32,
    d: f64,
    c: char,
    name: String,
    blob: Blob,
    raw: Vec<u8>,
    maybe: Option<u32>,
    maybe_point: Option<Point>,
    numbers: Vec<i64>,
    floats: Vec<f64>,
    words: Vec<String>,
    points: Vec<Point>,
    colors: Vec<Color>,
    color: Color,
    shapes: Vec<Shape>,
    index: BTreeMap<String, Point>,
    by_id: BTreeMap<u32, Color>,
    length: Meters,
    nested: Vec<Meters>,
}

/// The enums `Everything` uses, traced as a contract's are.
fn enums() -> Layout {
    let (_, registry) = trace_all(&[trace_of::<Everything>]).unwrap();
    Layout::new(
        registry
            .iter()
            .filter(|(_, c)| is_c_like(c))
            .map(|(n, _)| n.clone()),
    )
}

fn round_trip<T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug>(v: &T) {
    let enums = enums();
    let bytes = encode(&enums, v).unwrap();
    let back: T = decode(&enums, &bytes).unwrap();
    assert_eq!(&back, v);
}

fn sample() -> Everything {
    Everything {
        flag: true,
        small: 200,
        neg: -5,
        int: -1,
        big: u64::MAX,
        f: 1.5,
        d: -2.25,
        c: 'é',
        name: "héllo".into(),
        blob: Blob(vec![0, 1, 255]),
        raw: vec![7, 8],
        maybe: Some(0),
        maybe_point: None,
        numbers: vec![1, -1, 300, i64::MIN],
        floats: vec![0.5, -0.0],
        words: vec!["".into(), "a".into()],
        points: vec![Point { x: 1, y: -2 }, Point { x: 0, y: 0 }],
        colors: vec![Color::Blue, Color::Red],
        color: Color::Green,
        shapes: vec![
            Shape::Circle(1.0),
            Shape::Rect { w: 2.0, h: 3.0 },
            Shape::Pair(4, "four".into()),
            Shape::Nothing,
            Shape::Point(Point { x: 5, y: 6 }),
        ],
        index: [("p".to_string(), Point { x: 9, y: 9 })].into(),
        by_id: [(1, Color::Blue), (2, Color::Red)].into(),
        length: Meters(3.5),
        nested: vec![Meters(1.0), Meters(2.0)],
    }
}

#[test]
fn every_shape_round_trips() {
    round_trip(&sample());
}

#[test]
fn protobufs_own_examples_encode_byte_for_byte() {
    // encoding.md: `message Test1 { int32 a = 1; }` with a = 150 is 08 96 01.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Test1 {
        a: i32,
    }
    let enums = Layout::default();
    assert_eq!(
        encode(&enums, &Test1 { a: 150 }).unwrap(),
        [0x08, 0x96, 0x01]
    );
    // `message Test2 { string b = 2; }` with b = "testing": 12 07 74 65 73 74 69 6e 67.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Test2 {
        skipped: Option<u32>,
        b: String,
    }
    let t2 = Test2 {
        skipped: None,
        b: "testing".into(),
    };
    let bytes = encode(&enums, &t2).unwrap();
    assert_eq!(bytes, b"\x12\x07testing");
    assert_eq!(decode::<Test2>(&enums, &bytes).unwrap(), t2);
    // Packed: `repeated int32 d = 4 [packed]` with 3, 270, 86942 is 22 06 03 8E 02 9E A7 05.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Test5 {
        a: Option<u32>,
        b: Option<u32>,
        c: Option<u32>,
        d: Vec<i32>,
    }
    let t5 = Test5 {
        a: None,
        b: None,
        c: None,
        d: vec![3, 270, 86942],
    };
    let bytes = encode(&enums, &t5).unwrap();
    assert_eq!(bytes, [0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]);
    assert_eq!(decode::<Test5>(&enums, &bytes).unwrap(), t5);
    // The same numbers unpacked (as a proto2 sender writes them) decode the same.
    let unpacked = [0x20, 0x03, 0x20, 0x8e, 0x02, 0x20, 0x9e, 0xa7, 0x05];
    assert_eq!(decode::<Test5>(&enums, &unpacked).unwrap(), t5);
}

#[test]
fn a_body_that_is_not_a_struct_is_field_one_of_a_wrapper() {
    let enums = Layout::default();
    assert_eq!(encode(&enums, &2.0f64).unwrap()[0], 0x09);
    assert_eq!(
        decode::<f64>(&enums, &encode(&enums, &2.0f64).unwrap()),
        Ok(2.0)
    );
    assert_eq!(encode(&enums, &()).unwrap(), b"");
    assert_eq!(decode::<()>(&enums, b""), Ok(()));
    assert_eq!(decode::<Option<u32>>(&enums, b""), Ok(None));
    assert_eq!(
        decode::<Vec<String>>(&enums, &encode(&enums, &vec!["a", "b"]).unwrap()),
        Ok(vec!["a".to_string(), "b".to_string()])
    );
    // A newtype struct is what it holds.
    assert_eq!(
        encode(&enums, &Meters(1.0)).unwrap(),
        encode(&enums, &1.0f64).unwrap()
    );
}

#[test]
fn absent_fields_take_protobufs_defaults_and_unknown_ones_are_skipped() {
    let enums = enums();
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Old {
        flag: bool,
    }
    // A proto3 sender leaves zero values out: an empty message is every field's default.
    let empty: Everything = decode(&enums, b"").unwrap();
    assert_eq!(empty.name, "");
    assert_eq!(empty.color, Color::Red);
    assert_eq!(empty.maybe, None);
    assert!(empty.shapes.is_empty());
    // A newer sender's fields are ignored by an older receiver.
    let bytes = encode(&enums, &sample()).unwrap();
    assert_eq!(decode::<Old>(&enums, &bytes).unwrap(), Old { flag: true });
    // Of a singular field sent twice, the last wins.
    assert_eq!(
        decode::<Old>(&enums, &[0x08, 0x01, 0x08, 0x00]).unwrap(),
        Old { flag: false }
    );
}

#[test]
fn bytes_no_encoder_writes_are_refused_with_a_reason() {
    let enums = enums();
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct S {
        small: u8,
        name: String,
    }
    let cases: [(&[u8], &str); 5] = [
        (&[0x08, 0xac, 0x02], "out of range for u8"),
        (&[0x12, 0x02, 0xff, 0xfe], "UTF-8"),
        (&[0x0a, 0x00], "expected an integer"),
        (&[0x12, 0x05, b'a'], "cut short"),
        (&[0x0b], "group"),
    ];
    for (bytes, why) in cases {
        let e = decode::<S>(&enums, bytes).unwrap_err().to_string();
        assert!(e.contains(why), "{bytes:?}: {e}");
    }
    // An enum value the type does not have.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct C {
        color: Color,
    }
    let e = decode::<C>(&enums, &[0x08, 0x07]).unwrap_err().to_string();
    assert!(e.contains("not a value of enum Color"), "{e}");
}

#[test]
fn nesting_is_bounded() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Tree {
        children: Vec<Tree>,
    }
    // 1,000 levels of `children`, a few bytes each.
    let mut bytes: Vec<u8> = Vec::new();
    for _ in 0..1000 {
        let mut outer = vec![0x0a];
        super::wire::put_varint(&mut outer, bytes.len() as u64);
        outer.extend_from_slice(&bytes);
        bytes = outer;
    }
    let e = decode::<Tree>(&Layout::default(), &bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nest"), "{e}");
}

#[test]
fn what_protobuf_cannot_say_is_an_error_not_a_wrong_message() {
    let enums = Layout::default();
    assert!(encode(&enums, &vec![vec![1u32]]).is_err());
    assert!(encode(&enums, &vec![Some(1u32)]).is_err());
    assert!(encode(&enums, &1u128).is_err());
    assert!(decode::<serde_json::Value>(&enums, b"").is_err());
}

fn point() -> impl Strategy<Value = Point> {
    (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Point { x, y })
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
            .prop_map(Shape::Circle),
        (any::<u32>(), ".*").prop_map(|(n, s)| Shape::Pair(n, s)),
        Just(Shape::Nothing),
        point().prop_map(Shape::Point),
    ]
}

fn color() -> impl Strategy<Value = Color> {
    prop_oneof![Just(Color::Red), Just(Color::Green), Just(Color::Blue)]
}

prop_compose! {
    fn everything()(
        flag in any::<bool>(), small in any::<u8>(), neg in any::<i64>(), int in any::<i32>(),
        big in any::<u64>(), c in any::<char>(), name in ".*",
        blob in proptest::collection::vec(any::<u8>(), 0..20),
        maybe in any::<Option<u32>>(), maybe_point in proptest::option::of(point()),
        numbers in proptest::collection::vec(any::<i64>(), 0..10),
        words in proptest::collection::vec(".*", 0..4),
        points in proptest::collection::vec(point(), 0..4),
        colors in proptest::collection::vec(color(), 0..4), color in color(),
        shapes in proptest::collection::vec(shape(), 0..4),
        by_id in proptest::collection::btree_map(any::<u32>(), color(), 0..4),
    ) -> Everything {
        Everything {
            flag, small, neg, int, big, f: 0.25, d: -1.0, c, name, blob: Blob(blob.clone()), raw: blob,
            maybe, maybe_point, numbers, floats: vec![1.0], words, points, colors, color, shapes,
            index: BTreeMap::new(), by_id, length: Meters(0.0), nested: Vec::new(),
        }
    }
}

proptest! {
    #[test]
    fn any_value_round_trips(v in everything()) {
        let enums = enums();
        let bytes = encode(&enums, &v).unwrap();
        prop_assert_eq!(decode::<Everything>(&enums, &bytes).unwrap(), v);
    }

    #[test]
    fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode::<Everything>(&enums(), &bytes);
    }
}
