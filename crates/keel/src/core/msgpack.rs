//! A fast path for decoding MessagePack bodies, in front of rmp-serde.
//!
//! [`decode`] reads a body straight from its bytes, borrowing strings and byte arrays, with the
//! nesting limit and the end-of-value check built in. It decodes what keel's encoder (rmp-serde,
//! structs as maps) writes and calls the same visitor methods rmp-serde's `Deserializer` does
//! for the same bytes, but without rmp-serde's reader layers, the [`Depth`](super::depth)
//! wrapper around every visitor, and a second walk over the value to find where it ends: about
//! a third of the instructions for a call's arguments.
//!
//! It only answers when it succeeds. Anything else (malformed bytes, a type mismatch, a value
//! nested too deep, trailing bytes, and the few encodings it leaves alone: MessagePack
//! extensions, 128-bit integers) returns `None`, and the caller
//! decodes the body again with rmp-serde, whose answer (value or error message) is then the
//! only one anybody sees. So a body decodes to the same value, or fails with the same error,
//! with or without this path; `tests` below check that on random and mutated bodies.

use std::fmt;

use serde::de::value::SeqDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, Visitor};

use super::depth::MAX_DEPTH;

/// `body` as a `T`, if it holds exactly one value this path decodes (see the module docs).
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    let mut de = Fast {
        buf: body,
        pos: 0,
        left: MAX_DEPTH,
    };
    let value = T::deserialize(&mut de).ok()?;
    (de.pos == body.len()).then_some(value)
}

/// Why the fast path gave up: the caller decodes again with rmp-serde, which says why.
#[derive(Debug)]
pub(crate) struct GiveUp;

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not decoded by the fast path")
    }
}

impl std::error::Error for GiveUp {}

impl de::Error for GiveUp {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        GiveUp
    }
}

type Result<T> = std::result::Result<T, GiveUp>;

/// The decoder: the body, where it is, and the nesting levels left (counted as
/// [`Depth`](super::depth) counts them: sequences, maps, enums, `Some` and newtype structs).
struct Fast<'de> {
    buf: &'de [u8],
    pos: usize,
    left: usize,
}

impl<'de> Fast<'de> {
    fn peek(&self) -> Result<u8> {
        self.buf.get(self.pos).copied().ok_or(GiveUp)
    }

    fn byte(&mut self) -> Result<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'de [u8]> {
        let end = self.pos.checked_add(n).ok_or(GiveUp)?;
        let bytes = self.buf.get(self.pos..end).ok_or(GiveUp)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| GiveUp)
    }

    /// A length field of 1, 2 or 4 bytes (`width` 0, 1 or 2: how the markers of each kind
    /// count up).
    fn len(&mut self, width: u8) -> Result<u32> {
        match width {
            0 => self.byte().map(u32::from),
            1 => self.array().map(|b| u32::from(u16::from_be_bytes(b))),
            _ => self.array().map(u32::from_be_bytes),
        }
    }

    /// One level deeper, if the limit allows.
    fn enter(&mut self) -> Result<()> {
        self.left = self.left.checked_sub(1).ok_or(GiveUp)?;
        Ok(())
    }

    fn leave(&mut self) {
        self.left += 1;
    }

    /// A scalar after its marker `m`, as rmp-serde's `any_num` visits it.
    fn scalar<V: Visitor<'de>>(&mut self, m: u8, v: V) -> Result<V::Value> {
        match m {
            0x00..=0x7f => v.visit_u8(m),
            0xe0..=0xff => v.visit_i8(m as i8),
            0xc0 => v.visit_unit(),
            0xc2 => v.visit_bool(false),
            0xc3 => v.visit_bool(true),
            0xcc => v.visit_u8(self.byte()?),
            0xcd => v.visit_u16(u16::from_be_bytes(self.array()?)),
            0xce => v.visit_u32(u32::from_be_bytes(self.array()?)),
            0xcf => v.visit_u64(u64::from_be_bytes(self.array()?)),
            0xd0 => v.visit_i8(self.byte()? as i8),
            0xd1 => v.visit_i16(i16::from_be_bytes(self.array()?)),
            0xd2 => v.visit_i32(i32::from_be_bytes(self.array()?)),
            0xd3 => v.visit_i64(i64::from_be_bytes(self.array()?)),
            0xca => v.visit_f32(f32::from_be_bytes(self.array()?)),
            0xcb => v.visit_f64(f64::from_be_bytes(self.array()?)),
            _ => Err(GiveUp),
        }
    }

    /// Any value, as rmp-serde's `any_inner` visits it: `bin` as bytes where `bytes` (bytes may
    /// be asked for), else as a sequence of `u8`.
    fn any<V: Visitor<'de>>(&mut self, v: V, bytes: bool) -> Result<V::Value> {
        let m = self.byte()?;
        match m {
            0xa0..=0xbf => self.str(u32::from(m & 0x1f), v),
            0xd9..=0xdb => {
                let n = self.len(m - 0xd9)?;
                self.str(n, v)
            }
            0x90..=0x9f => self.seq(u32::from(m & 0x0f), v),
            0xdc | 0xdd => {
                let n = self.len(m - 0xdb)?;
                self.seq(n, v)
            }
            0x80..=0x8f => self.map(u32::from(m & 0x0f), v),
            0xde | 0xdf => {
                let n = self.len(m - 0xdd)?;
                self.map(n, v)
            }
            0xc4..=0xc6 => {
                let n = self.len(m - 0xc4)?;
                let data = self.take(n as usize)?;
                if bytes {
                    return v.visit_borrowed_bytes(data);
                }
                // Where a sequence was asked for (a `Vec<u8>`, which keel writes as `bin`): its
                // bytes one by one, as rmp-serde offers them.
                self.enter()?;
                let value = v.visit_seq(SeqDeserializer::<_, GiveUp>::new(data.iter().copied()))?;
                self.leave();
                Ok(value)
            }
            _ => self.scalar(m, v),
        }
    }

    fn str<V: Visitor<'de>>(&mut self, n: u32, v: V) -> Result<V::Value> {
        // rmp-serde offers invalid UTF-8 as bytes first: left to it.
        let s = std::str::from_utf8(self.take(n as usize)?).map_err(|_| GiveUp)?;
        v.visit_borrowed_str(s)
    }

    fn seq<V: Visitor<'de>>(&mut self, len: u32, v: V) -> Result<V::Value> {
        self.enter()?;
        let mut access = Access {
            de: self,
            left: len,
        };
        let value = v.visit_seq(&mut access)?;
        // Elements left unread are rmp-serde's length mismatch.
        if access.left != 0 {
            return Err(GiveUp);
        }
        self.leave();
        Ok(value)
    }

    fn map<V: Visitor<'de>>(&mut self, len: u32, v: V) -> Result<V::Value> {
        self.enter()?;
        let mut access = Access {
            de: self,
            left: len,
        };
        let value = v.visit_map(&mut access)?;
        if access.left != 0 {
            return Err(GiveUp);
        }
        self.leave();
        Ok(value)
    }
}

/// The elements of a sequence, or the entries of a map (`left` counts entries, not keys and
/// values, as rmp-serde's does).
struct Access<'a, 'de> {
    de: &'a mut Fast<'de>,
    left: u32,
}

impl<'de> de::SeqAccess<'de> for Access<'_, 'de> {
    type Error = GiveUp;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        usize::try_from(self.left).ok()
    }
}

impl<'de> de::MapAccess<'de> for Access<'_, 'de> {
    type Error = GiveUp;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.de)
    }

    fn size_hint(&self) -> Option<usize> {
        usize::try_from(self.left).ok()
    }
}

/// An enum written as a map of one entry: its variant, then its content.
struct Variant<'a, 'de>(&'a mut Fast<'de>);

impl<'a, 'de> de::EnumAccess<'de> for Variant<'a, 'de> {
    type Error = GiveUp;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let variant = seed.deserialize(&mut *self.0)?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_, 'de> {
    type Error = GiveUp;

    fn unit_variant(self) -> Result<()> {
        match self.0.byte()? {
            0xc0 => Ok(()),
            _ => Err(GiveUp),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        seed.deserialize(self.0)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value> {
        self.0.any(v, false)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        self.0.any(v, false)
    }
}

/// An enum written as its variant alone (a unit variant's name).
struct UnitVariant<'a, 'de>(&'a mut Fast<'de>);

impl<'a, 'de> de::EnumAccess<'de> for UnitVariant<'a, 'de> {
    type Error = GiveUp;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let variant = seed.deserialize(&mut *self.0)?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for UnitVariant<'_, 'de> {
    type Error = GiveUp;

    fn unit_variant(self) -> Result<()> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _seed: T) -> Result<T::Value> {
        Err(GiveUp)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _v: V) -> Result<V::Value> {
        Err(GiveUp)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _v: V,
    ) -> Result<V::Value> {
        Err(GiveUp)
    }
}

macro_rules! scalars {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
                let m = self.byte()?;
                self.scalar(m, v)
            }
        )*
    };
}

macro_rules! anything {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
                self.any(v, true)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for &mut Fast<'de> {
    type Error = GiveUp;

    scalars! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_f32 deserialize_f64
    }

    anything! {
        deserialize_any deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_map deserialize_identifier
        deserialize_ignored_any
    }

    fn deserialize_i128<V: Visitor<'de>>(self, _v: V) -> Result<V::Value> {
        Err(GiveUp)
    }

    fn deserialize_u128<V: Visitor<'de>>(self, _v: V) -> Result<V::Value> {
        Err(GiveUp)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        if self.peek()? == 0xc0 {
            self.pos += 1;
            return v.visit_none();
        }
        self.enter()?;
        let value = v.visit_some(&mut *self)?;
        self.leave();
        Ok(value)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value> {
        // Written as `[]`; nil is taken too, as rmp-serde does.
        match self.peek()? {
            0xc0 | 0x90 => {
                self.pos += 1;
                v.visit_unit()
            }
            _ => self.any(v, true),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value> {
        // rmp-serde's way of reading a MessagePack extension: left to it.
        if name == "_ExtStruct" {
            return Err(GiveUp);
        }
        self.enter()?;
        let value = v.visit_newtype_struct(&mut *self)?;
        self.leave();
        Ok(value)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value> {
        self.any(v, false)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value> {
        self.any(v, false)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value> {
        self.any(v, false)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        self.any(v, false)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value> {
        // A map of one entry holds a variant and its content; anything else is the variant
        // alone (a unit variant's name), whose marker stays for the variant to read.
        let m = self.peek()?;
        let at = self.pos;
        let entries = match m {
            0x80..=0x8f => Some(u32::from(m & 0x0f)),
            0xde | 0xdf => {
                self.pos += 1;
                Some(self.len(m - 0xdd)?)
            }
            _ => None,
        };
        self.enter()?;
        let value = match entries {
            Some(1) => {
                if self.pos == at {
                    self.pos += 1;
                }
                v.visit_enum(Variant(&mut *self))?
            }
            Some(_) => return Err(GiveUp),
            None => v.visit_enum(UnitVariant(&mut *self))?,
        };
        self.leave();
        Ok(value)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}
