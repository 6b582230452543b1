//! Encoding any `Serialize` value as a protobuf message, following the mapping in GRPC.md
//! ("Types"): a struct's fields are numbered from 1 in the order they are serialized (which is
//! their declaration order), a body that is not a struct is field 1 of a wrapper message, an
//! enum whose variants all carry nothing is a protobuf enum, any other enum a `oneof`.

use serde::ser::{self, Impossible, Serialize};

use super::wire::{begin_len, end_len, put_len, put_tag, put_varint, I32, I64, LEN, VARINT};
use super::{field_number, Layout, ProtoError};

type Result<T> = std::result::Result<T, ProtoError>;

/// Encodes `value` as a message body: a struct is the message itself, `()` and unit structs
/// the empty message, a newtype struct its content, anything else field 1 of a wrapper.
pub(crate) fn encode<T: Serialize + ?Sized>(layout: &Layout, value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(layout, value, &mut out)?;
    Ok(out)
}

/// [`encode`], appending to `out`.
pub(crate) fn encode_into<T: Serialize + ?Sized>(
    layout: &Layout,
    value: &T,
    out: &mut Vec<u8>,
) -> Result<()> {
    value.serialize(Top { out, layout })
}

/// The body's own value.
struct Top<'a> {
    out: &'a mut Vec<u8>,
    layout: &'a Layout,
}

impl<'a> Top<'a> {
    /// The value as field 1 of the wrapper message.
    fn wrapped(self) -> FieldSer<'a> {
        FieldSer {
            out: self.out,
            layout: self.layout,
            number: 1,
        }
    }
}

/// Forwards `Top`'s methods for values that are wrapped as field 1.
macro_rules! wrap {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $name(self, $($arg: $ty),*) -> Result<$ret> {
            self.wrapped().$name($($arg),*)
        })*
    };
}

impl<'a> ser::Serializer for Top<'a> {
    type Ok = ();
    type Error = ProtoError;
    type SerializeSeq = SeqSer<'a>;
    type SerializeTuple = MessageSer<'a>;
    type SerializeTupleStruct = MessageSer<'a>;
    type SerializeTupleVariant = MessageSer<'a>;
    type SerializeMap = MapSer<'a>;
    type SerializeStruct = MessageSer<'a>;
    type SerializeStructVariant = MessageSer<'a>;

    wrap! {
        serialize_bool(v: bool) -> ();
        serialize_i8(v: i8) -> ();
        serialize_i16(v: i16) -> ();
        serialize_i32(v: i32) -> ();
        serialize_i64(v: i64) -> ();
        serialize_u8(v: u8) -> ();
        serialize_u16(v: u16) -> ();
        serialize_u32(v: u32) -> ();
        serialize_u64(v: u64) -> ();
        serialize_f32(v: f32) -> ();
        serialize_f64(v: f64) -> ();
        serialize_char(v: char) -> ();
        serialize_str(v: &str) -> ();
        serialize_bytes(v: &[u8]) -> ();
        serialize_none() -> ();
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str) -> ();
        serialize_seq(len: Option<usize>) -> SeqSer<'a>;
        serialize_tuple(len: usize) -> MessageSer<'a>;
        serialize_tuple_struct(name: &'static str, len: usize) -> MessageSer<'a>;
        serialize_tuple_variant(
            name: &'static str, index: u32, variant: &'static str, len: usize
        ) -> MessageSer<'a>;
        serialize_map(len: Option<usize>) -> MapSer<'a>;
        serialize_struct_variant(
            name: &'static str, index: u32, variant: &'static str, len: usize
        ) -> MessageSer<'a>;
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        self.wrapped().serialize_some(value)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        self.wrapped()
            .serialize_newtype_variant(name, index, variant, value)
    }

    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }

    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<MessageSer<'a>> {
        let pinned = self.layout.pinned(name);
        Ok(MessageSer::new(self.out, self.layout, pinned, []))
    }

    fn serialize_i128(self, _v: i128) -> Result<()> {
        Err(no_128())
    }

    fn serialize_u128(self, _v: u128) -> Result<()> {
        Err(no_128())
    }
}

fn no_128() -> ProtoError {
    ProtoError::new("128-bit integers have no protobuf type")
}

/// A value written as field `number` of the message being written to `out`.
struct FieldSer<'a> {
    out: &'a mut Vec<u8>,
    layout: &'a Layout,
    number: u32,
}

impl<'a> FieldSer<'a> {
    fn varint(self, v: u64) -> Result<()> {
        put_tag(self.out, self.number, VARINT);
        put_varint(self.out, v);
        Ok(())
    }

    /// Begins a length-delimited field: its tag and a placeholder for its length.
    fn begin(self) -> (&'a mut Vec<u8>, usize) {
        put_tag(self.out, self.number, LEN);
        let at = begin_len(self.out);
        (self.out, at)
    }
}

impl<'a> ser::Serializer for FieldSer<'a> {
    type Ok = ();
    type Error = ProtoError;
    type SerializeSeq = SeqSer<'a>;
    type SerializeTuple = MessageSer<'a>;
    type SerializeTupleStruct = MessageSer<'a>;
    type SerializeTupleVariant = MessageSer<'a>;
    type SerializeMap = MapSer<'a>;
    type SerializeStruct = MessageSer<'a>;
    type SerializeStructVariant = MessageSer<'a>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.varint(u64::from(v))
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        // int32 and int64: two's complement, a negative number sign-extended to 64 bits.
        self.varint(v as u64)
    }
    fn serialize_i128(self, _v: i128) -> Result<()> {
        Err(no_128())
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.varint(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.varint(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.varint(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.varint(v)
    }
    fn serialize_u128(self, _v: u128) -> Result<()> {
        Err(no_128())
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        put_tag(self.out, self.number, I32);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        put_tag(self.out, self.number, I64);
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        put_len(self.out, self.number, v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        put_len(self.out, self.number, v);
        Ok(())
    }
    fn serialize_none(self) -> Result<()> {
        // An absent field.
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        put_len(self.out, self.number, &[]);
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        _variant: &'static str,
    ) -> Result<()> {
        if self.layout.is_c_like(name) {
            self.varint(u64::from(index))
        } else {
            // A oneof whose member `index + 1` is an empty message.
            let (out, at) = self.begin();
            put_len(out, index + 1, &[]);
            end_len(out, at);
            Ok(())
        }
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<()> {
        let layout = self.layout;
        let (out, at) = self.begin();
        value.serialize(FieldSer {
            out,
            layout,
            number: index + 1,
        })?;
        end_len(out, at);
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<SeqSer<'a>> {
        Ok(SeqSer {
            out: self.out,
            layout: self.layout,
            number: self.number,
            packed: Vec::new(),
        })
    }
    fn serialize_tuple(self, _len: usize) -> Result<MessageSer<'a>> {
        let layout = self.layout;
        let (out, at) = self.begin();
        Ok(MessageSer::new(out, layout, None, [Some(at)]))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<MessageSer<'a>> {
        self.serialize_tuple(len)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<MessageSer<'a>> {
        let layout = self.layout;
        let (out, outer) = self.begin();
        put_tag(out, index + 1, LEN);
        let inner = begin_len(out);
        Ok(MessageSer::new(
            out,
            layout,
            None,
            [Some(inner), Some(outer)],
        ))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<MapSer<'a>> {
        Ok(MapSer {
            out: self.out,
            layout: self.layout,
            number: self.number,
            entry: None,
        })
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<MessageSer<'a>> {
        let layout = self.layout;
        let (out, at) = self.begin();
        Ok(MessageSer::new(
            out,
            layout,
            layout.pinned(name),
            [Some(at)],
        ))
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MessageSer<'a>> {
        self.serialize_tuple_variant(name, index, variant, len)
    }
}

/// The fields of a message, numbered from 1 in the order they come (a field skipped with
/// `skip_serializing_if` keeps its number), or as `pinned` says; the lengths at `patches`
/// (innermost first) are filled in at the end.
pub(crate) struct MessageSer<'a> {
    out: &'a mut Vec<u8>,
    layout: &'a Layout,
    pinned: Option<&'a [(String, u32)]>,
    /// The next field's index (from 0).
    next: usize,
    patches: [Option<usize>; 2],
}

impl<'a> MessageSer<'a> {
    fn new<const N: usize>(
        out: &'a mut Vec<u8>,
        layout: &'a Layout,
        pinned: Option<&'a [(String, u32)]>,
        patches: [Option<usize>; N],
    ) -> Self {
        let mut all = [None; 2];
        all[..N].copy_from_slice(&patches);
        MessageSer {
            out,
            layout,
            pinned,
            next: 0,
            patches: all,
        }
    }

    /// The next field, serde's `key` (`""` for a tuple's element).
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        let number = field_number(self.pinned, self.next, key)?;
        self.next += 1;
        value.serialize(FieldSer {
            out: self.out,
            layout: self.layout,
            number,
        })
    }

    fn finish(self) -> Result<()> {
        for at in self.patches.into_iter().flatten() {
            end_len(self.out, at);
        }
        Ok(())
    }
}

impl ser::SerializeStruct for MessageSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.field(key, value)
    }
    fn skip_field(&mut self, _key: &'static str) -> Result<()> {
        self.next += 1;
        Ok(())
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for MessageSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.field(key, value)
    }
    fn skip_field(&mut self, _key: &'static str) -> Result<()> {
        self.next += 1;
        Ok(())
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl ser::SerializeTuple for MessageSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.field("", value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for MessageSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.field("", value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for MessageSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.field("", value)
    }
    fn end(self) -> Result<()> {
        self.finish()
    }
}

/// A repeated field: numbers, bools and protobuf layout packed into one length-delimited field
/// (written at the end), anything else one field per element.
pub(crate) struct SeqSer<'a> {
    out: &'a mut Vec<u8>,
    layout: &'a Layout,
    number: u32,
    packed: Vec<u8>,
}

impl ser::SerializeSeq for SeqSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        value.serialize(ElemSer { seq: self })
    }
    fn end(self) -> Result<()> {
        if !self.packed.is_empty() {
            put_len(self.out, self.number, &self.packed);
        }
        Ok(())
    }
}

/// One element of a repeated field.
struct ElemSer<'s, 'a> {
    seq: &'s mut SeqSer<'a>,
}

impl<'s, 'a> ElemSer<'s, 'a> {
    fn packed_varint(self, v: u64) -> Result<()> {
        put_varint(&mut self.seq.packed, v);
        Ok(())
    }

    /// The element as a field of its own.
    fn field(self) -> FieldSer<'s> {
        FieldSer {
            out: &mut *self.seq.out,
            layout: self.seq.layout,
            number: self.seq.number,
        }
    }
}

fn nested(what: &str) -> ProtoError {
    ProtoError::new(format!(
        "a sequence of {what} has no protobuf type (a repeated field's elements cannot be \
         repeated, maps or optional); wrap the element in a struct"
    ))
}

impl<'s, 'a> ser::Serializer for ElemSer<'s, 'a> {
    type Ok = ();
    type Error = ProtoError;
    type SerializeSeq = Impossible<(), ProtoError>;
    type SerializeTuple = MessageSer<'s>;
    type SerializeTupleStruct = MessageSer<'s>;
    type SerializeTupleVariant = MessageSer<'s>;
    type SerializeMap = Impossible<(), ProtoError>;
    type SerializeStruct = MessageSer<'s>;
    type SerializeStructVariant = MessageSer<'s>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.packed_varint(u64::from(v))
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.packed_varint(v as u64)
    }
    fn serialize_i128(self, _v: i128) -> Result<()> {
        Err(no_128())
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.packed_varint(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.packed_varint(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.packed_varint(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.packed_varint(v)
    }
    fn serialize_u128(self, _v: u128) -> Result<()> {
        Err(no_128())
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.seq.packed.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.seq.packed.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.field().serialize_char(v)
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.field().serialize_str(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.field().serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<()> {
        Err(nested("optional values"))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<()> {
        Err(nested("optional values"))
    }
    fn serialize_unit(self) -> Result<()> {
        self.field().serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<()> {
        self.field().serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<()> {
        if self.seq.layout.is_c_like(name) {
            self.packed_varint(u64::from(index))
        } else {
            self.field().serialize_unit_variant(name, index, variant)
        }
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        self.field()
            .serialize_newtype_variant(name, index, variant, value)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(nested("sequences"))
    }
    fn serialize_tuple(self, len: usize) -> Result<MessageSer<'s>> {
        self.field().serialize_tuple(len)
    }
    fn serialize_tuple_struct(self, name: &'static str, len: usize) -> Result<MessageSer<'s>> {
        self.field().serialize_tuple_struct(name, len)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MessageSer<'s>> {
        self.field()
            .serialize_tuple_variant(name, index, variant, len)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        Err(nested("maps"))
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<MessageSer<'s>> {
        self.field().serialize_struct(name, len)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MessageSer<'s>> {
        self.field()
            .serialize_struct_variant(name, index, variant, len)
    }
}

/// A map field: one entry message `{ key = 1; value = 2; }` per entry.
pub(crate) struct MapSer<'a> {
    out: &'a mut Vec<u8>,
    layout: &'a Layout,
    number: u32,
    /// Where the length of the entry begun by the last key goes.
    entry: Option<usize>,
}

impl ser::SerializeMap for MapSer<'_> {
    type Ok = ();
    type Error = ProtoError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        put_tag(self.out, self.number, LEN);
        self.entry = Some(begin_len(self.out));
        key.serialize(FieldSer {
            out: self.out,
            layout: self.layout,
            number: 1,
        })
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let at = self
            .entry
            .take()
            .ok_or_else(|| ProtoError::new("a map value without its key"))?;
        value.serialize(FieldSer {
            out: self.out,
            layout: self.layout,
            number: 2,
        })?;
        end_len(self.out, at);
        Ok(())
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}
