//! A nesting limit for any serde [`Deserializer`].
//!
//! postcard decodes recursively with no limit of its own, so a body that nests a recursive
//! argument type (a tree, a linked list) a few bytes per level overflows the decoding thread's
//! stack, which aborts the whole process: about 10,000 levels, 10 KB of postcard, were enough on
//! a 2 MiB stack (found by fuzzing; `tests/args_decoding.rs`). serde_json stops at 128 levels;
//! [`Depth`] gives postcard the same limit. Every sequence, tuple, struct, map, enum variant,
//! `Some` and newtype struct is one level.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Nesting levels a decoded value may have, as serde_json allows.
pub(crate) const MAX_DEPTH: usize = 128;

/// `D`, refusing values nested more than `left` levels deeper.
pub(crate) struct Depth<D> {
    de: D,
    left: usize,
}

impl<D> Depth<D> {
    /// `de` with the [`MAX_DEPTH`] limit.
    pub(crate) fn new(de: D) -> Self {
        Depth {
            de,
            left: MAX_DEPTH,
        }
    }
}

/// A visitor of a value at a depth with `left` levels below it.
struct Guard<V> {
    inner: V,
    left: usize,
}

impl<V> Guard<V> {
    /// The levels below a compound value entered here, or the error if there are none.
    fn enter<E: de::Error>(&self) -> Result<usize, E> {
        self.left.checked_sub(1).ok_or_else(|| {
            E::custom(format_args!(
                "value nested more than {MAX_DEPTH} levels deep"
            ))
        })
    }
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.de.$method($($arg,)* Guard { inner: visitor, left: self.left })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Depth<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Guard<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let left = self.enter()?;
        self.inner.visit_some(Depth { de, left })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let left = self.enter()?;
        self.inner.visit_newtype_struct(Depth { de, left })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let left = self.enter()?;
        self.inner.visit_seq(Guard { inner: seq, left })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let left = self.enter()?;
        self.inner.visit_map(Guard { inner: map, left })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let left = self.enter()?;
        self.inner.visit_enum(Guard { inner: data, left })
    }
}

/// A seed whose value is decoded with `left` levels to go.
struct Seed<S> {
    inner: S,
    left: usize,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Depth {
            de,
            left: self.left,
        })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Guard<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Guard<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Guard<A> {
    type Error = A::Error;
    type Variant = Guard<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Guard<A::Variant>), A::Error> {
        let left = self.left;
        let (value, variant) = self.inner.variant_seed(Seed { inner: seed, left })?;
        Ok((
            value,
            Guard {
                inner: variant,
                left,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Guard<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(
            len,
            Guard {
                inner: visitor,
                left: self.left,
            },
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner.struct_variant(
            fields,
            Guard {
                inner: visitor,
                left: self.left,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    enum List {
        Nil,
        Cons(u8, Box<List>),
    }

    fn list(levels: usize) -> Vec<u8> {
        let mut body = vec![];
        for _ in 0..levels {
            body.extend_from_slice(&[1, 7]);
        }
        body.push(0);
        body
    }

    fn decode(body: &[u8]) -> postcard::Result<List> {
        let mut de = postcard::Deserializer::from_bytes(body);
        List::deserialize(Depth::new(&mut de))
    }

    #[test]
    fn values_up_to_the_limit_decode() {
        // Each Cons is an enum level and a tuple level.
        let n = MAX_DEPTH / 2 - 1;
        let mut value = decode(&list(n)).unwrap();
        let mut seen = 0;
        while let List::Cons(7, next) = value {
            value = *next;
            seen += 1;
        }
        assert_eq!((seen, value), (n, List::Nil));
    }

    #[test]
    fn deeper_values_are_refused_without_recursing() {
        assert!(decode(&list(MAX_DEPTH / 2 + 1)).is_err());
        // Deep enough to overflow a 2 MiB stack without the limit; here, on one, an error.
        let body = list(1 << 20);
        let refused = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || decode(&body).is_err())
            .unwrap()
            .join()
            .unwrap();
        assert!(refused);
    }
}
