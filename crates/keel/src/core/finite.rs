//! Whether a value holds a non-finite float (infinity or NaN): JSON has no such numbers, and
//! `serde_json` writes them as `null`, which would tell a JSON caller that a `f64` answer was
//! `null` (found by schemathesis: `Calculator.add(1e308, 1e308)` answered 200 `null`). A
//! serializer that writes nothing and stops at the first such float.

use std::fmt;

use serde::ser::{self, Serialize};

/// Whether `value` serializes a non-finite `f32` or `f64` anywhere in it.
pub(crate) fn has_non_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    matches!(value.serialize(&mut Finder), Err(Stop::Found))
}

struct Finder;

#[derive(Debug)]
enum Stop {
    /// A non-finite float.
    Found,
    /// The value's own `Serialize` failed (encoding it will report that).
    Other,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stop::Found => "a non-finite float",
            Stop::Other => "the value does not serialize",
        })
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<M: fmt::Display>(_msg: M) -> Self {
        Stop::Other
    }
}

type Done = Result<(), Stop>;

impl ser::Serializer for &mut Finder {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_f32(self, v: f32) -> Done {
        if v.is_finite() {
            Ok(())
        } else {
            Err(Stop::Found)
        }
    }
    fn serialize_f64(self, v: f64) -> Done {
        if v.is_finite() {
            Ok(())
        } else {
            Err(Stop::Found)
        }
    }
    fn serialize_bool(self, _: bool) -> Done {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Done {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Done {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Done {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Done {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Done {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Done {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Done {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Done {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Done {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Done {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Done {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Done {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Ok(())
    }
    fn serialize_none(self) -> Done {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Done {
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Stop> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Stop> {
        Ok(self)
    }
}

/// The compound serializers only walk into what they are given: `$method` for each element or
/// field (`$name` when the field is named), then `end`.
macro_rules! walk_into {
    ($($kind:ident :: $method:ident $(, $name:ty)?;)*) => {$(
        impl ser::$kind for &mut Finder {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, $(_: $name,)? value: &T) -> Done {
                value.serialize(&mut **self)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )*};
}

walk_into! {
    SerializeSeq::serialize_element;
    SerializeTuple::serialize_element;
    SerializeTupleStruct::serialize_field;
    SerializeTupleVariant::serialize_field;
    SerializeStruct::serialize_field, &'static str;
    SerializeStructVariant::serialize_field, &'static str;
}

impl ser::SerializeMap for &mut Finder {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::has_non_finite;

    #[test]
    fn finds_non_finite_floats_at_any_depth() {
        assert!(!has_non_finite(&1.5f64));
        assert!(has_non_finite(&f64::INFINITY));
        assert!(has_non_finite(&f32::NAN));
        assert!(has_non_finite(&Some(vec![(1u8, f64::NEG_INFINITY)])));
        assert!(!has_non_finite(&Some(vec![(1u8, 2.0f64)])));
        let mut map = BTreeMap::new();
        map.insert("a".to_string(), vec![0.0, f64::NAN]);
        assert!(has_non_finite(&map));
        assert!(!has_non_finite(&("text", (), [1u64, 2], f64::MAX)));
    }
}
