//! Decoding a protobuf message into any `Deserialize` type, the inverse of `encode.rs`. The
//! type drives the decoding (protobuf does not describe itself): a struct's field `i` (from 0,
//! in its declaration order) is field number `i + 1`. A field that is absent takes protobuf's
//! default (0, `false`, `""`, empty, `None`, a struct of defaults, an enum's first variant), as
//! a proto3 sender leaves such fields out; a field the type does not know is skipped (the
//! evolution rules); of a repeated singular field the last wins, as protobuf says. Sans-IO,
//! bounded: nesting by [`Depth`], sizes by the body it reads.

use serde::de::{self, value::BorrowedStrDeserializer, DeserializeSeed, IntoDeserializer, Visitor};
use serde::Deserialize;

use super::index::{Index, Occurrences};
use super::wire::{next_field, read_varint, Field, Value};
use super::{field_number, pinned_number, Layout, ProtoError};
use crate::core::depth::Depth;

type Result<T> = std::result::Result<T, ProtoError>;

/// Decodes the message body `buf` as a `T` (a struct is the message itself, anything else
/// field 1 of a wrapper message).
pub(crate) fn decode<'de, T: Deserialize<'de>>(layout: &Layout, buf: &'de [u8]) -> Result<T> {
    T::deserialize(Depth::new(TopDe { buf, layout }))
}

fn wrong(expected: &str, got: &Value<'_>) -> ProtoError {
    ProtoError::new(format!(
        "expected {expected}, found a {} field",
        got.wire_name()
    ))
}

/// A body: the message itself for a struct, else the wrapper's field 1.
struct TopDe<'a, 'de> {
    buf: &'de [u8],
    layout: &'a Layout,
}

macro_rules! wrapped {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value> {
            let entries = Index::new(self.buf, |n| n == 1)?;
            FieldDe { values: entries.numbered(1), layout: self.layout }
                .$name($($arg,)* visitor)
        })*
    };
}

impl<'de> de::Deserializer<'de> for TopDe<'_, 'de> {
    type Error = ProtoError;

    wrapped! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        Index::new(self.buf, |_| false)?;
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let pinned = self.layout.pinned(name);
        visitor.visit_map(MessageDe::new(self.buf, fields, self.layout, pinned)?)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }
}

/// A message's fields, presented to a struct as a map from field name to value: every field
/// the struct declares (numbered from 1 in order, or as `pinned` says), absent ones with their
/// defaults.
struct MessageDe<'a, 'de> {
    entries: Index<'de>,
    names: &'static [&'static str],
    pinned: Option<&'a [(String, u32)]>,
    /// How many names were given out.
    next: usize,
    layout: &'a Layout,
}

impl<'a, 'de> MessageDe<'a, 'de> {
    fn new(
        buf: &'de [u8],
        names: &'static [&'static str],
        layout: &'a Layout,
        pinned: Option<&'a [(String, u32)]>,
    ) -> Result<Self> {
        let declared = |n: u32| match pinned {
            None => (n as usize) <= names.len(),
            Some(numbers) => numbers.iter().any(|&(_, m)| m == n),
        };
        Ok(MessageDe {
            entries: Index::new(buf, declared)?,
            names,
            pinned,
            next: 0,
            layout,
        })
    }
}

impl<'de> de::MapAccess<'de> for MessageDe<'_, 'de> {
    type Error = ProtoError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let Some(name) = self.names.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        seed.deserialize(BorrowedStrDeserializer::new(name))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let index = self.next.saturating_sub(1);
        let number = match self.pinned {
            None => Some(field_number(None, index, "")?),
            // A name the pins do not know (an alias serde lists) reads as absent.
            Some(numbers) => pinned_number(numbers, self.names[index]),
        };
        seed.deserialize(FieldDe {
            values: number.map_or(Occurrences::NONE, |n| self.entries.numbered(n)),
            layout: self.layout,
        })
    }
}

/// The occurrences of one field (none when it is absent).
struct FieldDe<'a, 'de> {
    values: Occurrences<'a, 'de>,
    layout: &'a Layout,
}

impl<'a, 'de> FieldDe<'a, 'de> {
    fn last(&self) -> Option<Value<'de>> {
        self.values.last().map(|f| f.value)
    }

    fn varint(&self, what: &str) -> Result<u64> {
        match self.last() {
            None => Ok(0),
            Some(Value::Varint(v)) => Ok(v),
            Some(other) => Err(wrong(what, &other)),
        }
    }

    /// The bytes of a length-delimited value (empty when absent).
    fn len(&self, what: &str) -> Result<&'de [u8]> {
        match self.last() {
            None => Ok(&[]),
            Some(Value::Len(b)) => Ok(b),
            Some(other) => Err(wrong(what, &other)),
        }
    }

    fn str(&self) -> Result<&'de str> {
        std::str::from_utf8(self.len("a string")?)
            .map_err(|_| ProtoError::new("a string field is not valid UTF-8"))
    }
}

/// The `deserialize_*` methods of bools and integers, for a deserializer with a `varint(what)`
/// method (a field's last occurrence, or a repeated field's element, packed or not): `int32`
/// and `uint32` truncate a wider value as protobuf's own parsers do; the narrower Rust types
/// refuse a value out of their range.
macro_rules! varint_methods {
    () => {
        fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            visitor.visit_bool(self.varint("a bool")? != 0)
        }
        fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let v = self.varint("an integer")? as i64;
            visitor.visit_i8(i8::try_from(v).map_err(|_| out_of_range(v, "i8"))?)
        }
        fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let v = self.varint("an integer")? as i64;
            visitor.visit_i16(i16::try_from(v).map_err(|_| out_of_range(v, "i16"))?)
        }
        fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            visitor.visit_i32(self.varint("an integer")? as i32)
        }
        fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            visitor.visit_i64(self.varint("an integer")? as i64)
        }
        fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let v = self.varint("an integer")?;
            visitor.visit_u8(u8::try_from(v).map_err(|_| out_of_range(v, "u8"))?)
        }
        fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let v = self.varint("an integer")?;
            visitor.visit_u16(u16::try_from(v).map_err(|_| out_of_range(v, "u16"))?)
        }
        fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            visitor.visit_u32(self.varint("an integer")? as u32)
        }
        fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            visitor.visit_u64(self.varint("an integer")?)
        }
    };
}

fn out_of_range(v: impl std::fmt::Display, ty: &str) -> ProtoError {
    ProtoError::new(format!("{v} is out of range for {ty}"))
}

impl<'de> de::Deserializer<'de> for FieldDe<'_, 'de> {
    type Error = ProtoError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value> {
        Err(ProtoError::new(
            "protobuf does not describe itself, so it cannot decode a type that asks the \
             format what comes next (serde_json::Value, an untagged or internally tagged \
             enum, #[serde(flatten)])",
        ))
    }
    varint_methods!();
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.last() {
            None => visitor.visit_f32(0.0),
            Some(Value::I32(b)) => visitor.visit_f32(f32::from_le_bytes(b)),
            Some(other) => Err(wrong("a float", &other)),
        }
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.last() {
            None => visitor.visit_f64(0.0),
            Some(Value::I64(b)) => visitor.visit_f64(f64::from_le_bytes(b)),
            Some(other) => Err(wrong("a double", &other)),
        }
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.values.is_empty() {
            return visitor.visit_char('\0');
        }
        let s = self.str()?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => visitor.visit_char(c),
            _ => Err(ProtoError::new(format!(
                "expected one character, found {:?}",
                s
            ))),
        }
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_str(self.str()?)
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_bytes(self.len("bytes")?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.values.is_empty() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.len("an empty message")?;
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_unit(visitor)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_seq(SeqDe {
            values: self.values,
            packed: &[],
            layout: self.layout,
        })
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        let entries = Index::new(self.len("a message")?, |n| (n as usize) <= len)?;
        visitor.visit_seq(TupleDe {
            entries,
            next: 1,
            len,
            layout: self.layout,
        })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_map(MapDe {
            values: self.values,
            entry: Index::empty(),
            layout: self.layout,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let pinned = self.layout.pinned(name);
        let body = self.len("a message")?;
        visitor.visit_map(MessageDe::new(body, fields, self.layout, pinned)?)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        if self.layout.is_c_like(name) {
            let v = self.varint("an enum")?;
            let index = u32::try_from(v)
                .ok()
                .filter(|&i| (i as usize) < variants.len())
                .ok_or_else(|| ProtoError::new(format!("{v} is not a value of enum {name}")))?;
            return visitor.visit_enum(EnumDe {
                index,
                content: Index::empty(),
                member: 0,
                layout: self.layout,
            });
        }
        let body = match self.last() {
            None => {
                return Err(ProtoError::new(format!(
                    "no member of the oneof {name} is set"
                )))
            }
            Some(Value::Len(b)) => b,
            Some(other) => return Err(wrong("a oneof message", &other)),
        };
        // The member set last wins, as protobuf says of a oneof.
        let mut number = None;
        let mut pos = 0;
        while let Some(field) = next_field(body, &mut pos).map_err(ProtoError::new)? {
            if (field.number as usize) <= variants.len() {
                number = Some(field.number);
            }
        }
        let number = number
            .ok_or_else(|| ProtoError::new(format!("no member of the oneof {name} is set")))?;
        visitor.visit_enum(EnumDe {
            index: number - 1,
            content: Index::new(body, |n| n == number)?,
            member: number,
            layout: self.layout,
        })
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_any(visitor)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }
}

/// The elements of a repeated field: one per occurrence, or several packed in one.
struct SeqDe<'a, 'de> {
    values: Occurrences<'a, 'de>,
    /// What is left of the packed occurrence being read.
    packed: &'de [u8],
    layout: &'a Layout,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'_, 'de> {
    type Error = ProtoError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        let value = if !self.packed.is_empty() {
            None
        } else if let Some(field) = self.values.pop_front() {
            Some(field)
        } else {
            return Ok(None);
        };
        seed.deserialize(ElemDe {
            value,
            rest: &mut self.packed,
            layout: self.layout,
        })
        .map(Some)
    }
}

/// One element of a repeated field: an occurrence of its own (`value`), or the next number
/// of a packed occurrence (`value` is `None` and `rest` holds the numbers left; an element
/// that is a number and finds a length-delimited occurrence starts reading it as packed).
struct ElemDe<'x, 'a, 'de> {
    value: Option<Field<'de>>,
    rest: &'x mut &'de [u8],
    layout: &'a Layout,
}

impl<'de> ElemDe<'_, '_, 'de> {
    /// The packed numbers to read the element from, if it is read from packed numbers.
    fn packed(&mut self) -> Option<Result<()>> {
        match self.value {
            None => Some(Ok(())),
            Some(Field {
                value: Value::Len(b),
                ..
            }) => {
                if b.is_empty() {
                    return Some(Err(ProtoError::new("an empty packed repeated field")));
                }
                *self.rest = b;
                Some(Ok(()))
            }
            Some(_) => None,
        }
    }

    fn varint(mut self, what: &str) -> Result<u64> {
        match self.packed() {
            Some(ready) => {
                ready?;
                let mut pos = 0;
                let v = read_varint(self.rest, &mut pos)
                    .ok_or_else(|| ProtoError::new("a packed varint is cut short"))?;
                *self.rest = &self.rest[pos..];
                Ok(v)
            }
            None => match self.value.map(|f| f.value) {
                Some(Value::Varint(v)) => Ok(v),
                Some(other) => Err(wrong(what, &other)),
                None => unreachable!("a missing value reads packed"),
            },
        }
    }

    fn fixed<const N: usize>(mut self, what: &str) -> Result<[u8; N]> {
        match self.packed() {
            Some(ready) => {
                ready?;
                let bytes: [u8; N] = self
                    .rest
                    .get(..N)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| ProtoError::new(format!("a packed {what} is cut short")))?;
                *self.rest = &self.rest[N..];
                Ok(bytes)
            }
            None => match self.value.map(|f| f.value) {
                Some(Value::I64(b)) if N == 8 => Ok(b[..].try_into().expect("N bytes")),
                Some(Value::I32(b)) if N == 4 => Ok(b[..].try_into().expect("N bytes")),
                Some(other) => Err(wrong(what, &other)),
                None => unreachable!("a missing value reads packed"),
            },
        }
    }

    /// The element as a value of its own (a string, bytes, a message).
    fn whole<R>(self, f: impl FnOnce(FieldDe<'_, 'de>) -> Result<R>) -> Result<R> {
        match self.value {
            Some(field) => f(FieldDe {
                values: Occurrences::One(field),
                layout: self.layout,
            }),
            None => Err(ProtoError::new(
                "a packed repeated field holds numbers, not the element type",
            )),
        }
    }
}

fn nested_seq() -> ProtoError {
    ProtoError::new("a repeated field's elements cannot be repeated, maps or optional")
}

impl<'de> de::Deserializer<'de> for ElemDe<'_, '_, 'de> {
    type Error = ProtoError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_any(visitor))
    }
    varint_methods!();
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_f32(f32::from_le_bytes(self.fixed::<4>("float")?))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_f64(f64::from_le_bytes(self.fixed::<8>("double")?))
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_char(visitor))
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_str(visitor))
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_str(visitor))
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_bytes(visitor))
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_bytes(visitor))
    }
    fn deserialize_option<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value> {
        Err(nested_seq())
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_unit(visitor))
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.whole(|f| f.deserialize_unit_struct(name, visitor))
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value> {
        Err(nested_seq())
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        self.whole(|f| f.deserialize_tuple(len, visitor))
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.whole(|f| f.deserialize_tuple_struct(name, len, visitor))
    }
    fn deserialize_map<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value> {
        Err(nested_seq())
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.whole(|f| f.deserialize_struct(name, fields, visitor))
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        if self.layout.is_c_like(name) {
            let layout = self.layout;
            let v = self.varint("an enum")?;
            let index = u32::try_from(v)
                .ok()
                .filter(|&i| (i as usize) < variants.len())
                .ok_or_else(|| ProtoError::new(format!("{v} is not a value of enum {name}")))?;
            visitor.visit_enum(EnumDe {
                index,
                content: Index::empty(),
                member: 0,
                layout,
            })
        } else {
            self.whole(|f| f.deserialize_enum(name, variants, visitor))
        }
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_any(visitor)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        // Consume a packed number so the next element starts after it.
        if self.value.is_none() {
            self.varint("a number")?;
        }
        visitor.visit_unit()
    }
}

/// A tuple's (or tuple struct's) elements: fields 1 to `len` of its message.
struct TupleDe<'a, 'de> {
    entries: Index<'de>,
    next: u32,
    len: usize,
    layout: &'a Layout,
}

impl<'de> de::SeqAccess<'de> for TupleDe<'_, 'de> {
    type Error = ProtoError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.next as usize > self.len {
            return Ok(None);
        }
        let number = self.next;
        self.next += 1;
        seed.deserialize(FieldDe {
            values: self.entries.numbered(number),
            layout: self.layout,
        })
        .map(Some)
    }
}

/// A map field's entries, each a message `{ key = 1; value = 2; }`.
struct MapDe<'a, 'de> {
    values: Occurrences<'a, 'de>,
    /// The fields of the entry whose key was read last.
    entry: Index<'de>,
    layout: &'a Layout,
}

impl<'de> de::MapAccess<'de> for MapDe<'_, 'de> {
    type Error = ProtoError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let Some(field) = self.values.pop_front() else {
            return Ok(None);
        };
        self.entry = match field.value {
            Value::Len(b) => Index::new(b, |n| n <= 2)?,
            other => return Err(wrong("a map entry", &other)),
        };
        seed.deserialize(FieldDe {
            values: self.entry.numbered(1),
            layout: self.layout,
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(FieldDe {
            values: self.entry.numbered(2),
            layout: self.layout,
        })
    }
}

/// An enum's variant: its index and, for a oneof member, the member's occurrences (field
/// `member` of `content`).
struct EnumDe<'a, 'de> {
    index: u32,
    content: Index<'de>,
    member: u32,
    layout: &'a Layout,
}

impl<'a, 'de> de::EnumAccess<'de> for EnumDe<'a, 'de> {
    type Error = ProtoError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let index: de::value::U32Deserializer<ProtoError> = self.index.into_deserializer();
        Ok((seed.deserialize(index)?, self))
    }
}

impl<'de> de::VariantAccess<'de> for EnumDe<'_, 'de> {
    type Error = ProtoError;

    fn unit_variant(self) -> Result<()> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(FieldDe {
            values: self.content.numbered(self.member),
            layout: self.layout,
        })
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        de::Deserializer::deserialize_tuple(
            FieldDe {
                values: self.content.numbered(self.member),
                layout: self.layout,
            },
            len,
            visitor,
        )
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        de::Deserializer::deserialize_struct(
            FieldDe {
                values: self.content.numbered(self.member),
                layout: self.layout,
            },
            "",
            fields,
            visitor,
        )
    }
}
