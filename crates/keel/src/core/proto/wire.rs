//! Protobuf's wire format, sans-IO: varints, tags, and a message's fields as they lie in its
//! bytes (<https://protobuf.dev/programming-guides/encoding/>).

/// Wire type of `int32`, `int64`, `uint32`, `uint64`, `bool` and enums.
pub(crate) const VARINT: u8 = 0;
/// Wire type of `fixed64`, `sfixed64` and `double`.
pub(crate) const I64: u8 = 1;
/// Wire type of strings, bytes, embedded messages and packed repeated fields.
pub(crate) const LEN: u8 = 2;
/// Wire type of `fixed32`, `sfixed32` and `float`.
pub(crate) const I32: u8 = 5;

/// The largest field number protobuf allows (2^29 - 1).
pub(crate) const MAX_FIELD: u32 = (1 << 29) - 1;

/// Appends `v` as a varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends the tag of field `number` with wire type `wire`.
pub(crate) fn put_tag(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

/// Appends field `number` as a length-delimited field holding `bytes`.
pub(crate) fn put_len(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_tag(out, number, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Starts a length-delimited value whose length is not known yet: a one-byte placeholder that
/// [`end_len`] fills in. Returns where the placeholder is.
pub(crate) fn begin_len(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len() - 1
}

/// Fills in the length of the value begun at `at` by [`begin_len`]: everything written after
/// the placeholder. A length of 128 or more takes more than the placeholder's byte, and the
/// value is moved up to make room.
pub(crate) fn end_len(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        put_varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

/// A varint at `buf[*pos..]`; moves `*pos` past it. `None` if it is cut short or longer than
/// ten bytes (a 64-bit value takes at most ten; the tenth may only hold its top bit).
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// One field's value as it lies on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    /// A varint.
    Varint(u64),
    /// Eight little-endian bytes.
    I64([u8; 8]),
    /// Length-delimited bytes: a string, bytes, a message or a packed repeated field.
    Len(&'a [u8]),
    /// Four little-endian bytes.
    I32([u8; 4]),
}

impl Value<'_> {
    /// The name of its wire type, for errors.
    pub(crate) fn wire_name(&self) -> &'static str {
        match self {
            Value::Varint(_) => "varint",
            Value::I64(_) => "64-bit",
            Value::Len(_) => "length-delimited",
            Value::I32(_) => "32-bit",
        }
    }
}

/// One field of a message: its number and value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Field<'a> {
    /// The field number (1 to [`MAX_FIELD`]).
    pub(crate) number: u32,
    /// Its value.
    pub(crate) value: Value<'a>,
}

/// The field at `buf[*pos..]`, or `Ok(None)` at the end of `buf`; moves `*pos` past it.
pub(crate) fn next_field<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<Field<'a>>, String> {
    if *pos >= buf.len() {
        return Ok(None);
    }
    let at = *pos;
    let tag = read_varint(buf, pos).ok_or_else(|| format!("malformed field tag at byte {at}"))?;
    let number = tag >> 3;
    if number == 0 || number > u64::from(MAX_FIELD) {
        return Err(format!(
            "field number {number} at byte {at} is out of range"
        ));
    }
    let number = number as u32;
    let cut = || format!("field {number} at byte {at} is cut short");
    let value = match (tag & 7) as u8 {
        VARINT => Value::Varint(read_varint(buf, pos).ok_or_else(cut)?),
        I64 => {
            let bytes = buf.get(*pos..*pos + 8).ok_or_else(cut)?;
            *pos += 8;
            Value::I64(bytes.try_into().expect("eight bytes"))
        }
        LEN => {
            let len = read_varint(buf, pos).ok_or_else(cut)?;
            let end = usize::try_from(len)
                .ok()
                .and_then(|len| pos.checked_add(len))
                .filter(|&end| end <= buf.len())
                .ok_or_else(cut)?;
            let bytes = &buf[*pos..end];
            *pos = end;
            Value::Len(bytes)
        }
        I32 => {
            let bytes = buf.get(*pos..*pos + 4).ok_or_else(cut)?;
            *pos += 4;
            Value::I32(bytes.try_into().expect("four bytes"))
        }
        3 | 4 => {
            return Err(format!(
                "field {number} at byte {at} is a group (wire types 3 and 4), which proto3 \
                 does not have"
            ))
        }
        other => return Err(format!("field {number} at byte {at} has wire type {other}")),
    };
    Ok(Some(Field { number, value }))
}

/// Every field of the message `buf`, in the order they lie, or what is wrong with it.
#[cfg(test)]
pub(crate) fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(field) = next_field(buf, &mut pos)? {
        out.push(field);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        // protobuf's own example: 150 is 0x96 0x01.
        let mut out = Vec::new();
        put_varint(&mut out, 150);
        assert_eq!(out, [0x96, 0x01]);
    }

    #[test]
    fn overlong_and_cut_varints_are_refused() {
        assert_eq!(read_varint(&[0x80; 10], &mut 0), None);
        assert_eq!(read_varint(&[0xff, 0xff], &mut 0), None);
        let mut eleven = vec![0x80; 10];
        eleven.push(0);
        assert_eq!(read_varint(&eleven, &mut 0), None);
        // The tenth byte may hold only bit 63.
        let mut max = vec![0xff; 9];
        max.push(0x02);
        assert_eq!(read_varint(&max, &mut 0), None);
    }

    #[test]
    fn a_length_filled_in_later_moves_a_long_value_up() {
        for len in [0usize, 5, 127, 128, 20_000] {
            let mut out = vec![0xaa];
            let at = begin_len(&mut out);
            out.resize(out.len() + len, 7u8);
            end_len(&mut out, at);
            let mut pos = 1;
            assert_eq!(read_varint(&out, &mut pos), Some(len as u64));
            assert_eq!(out.len() - pos, len);
        }
    }

    #[test]
    fn fields_of_every_wire_type_are_read_and_bad_ones_refused() {
        let mut msg = Vec::new();
        put_tag(&mut msg, 1, VARINT);
        put_varint(&mut msg, 150);
        put_tag(&mut msg, 2, I64);
        msg.extend_from_slice(&1.5f64.to_le_bytes());
        put_len(&mut msg, 3, b"hi");
        put_tag(&mut msg, 4, I32);
        msg.extend_from_slice(&2.5f32.to_le_bytes());
        let fields = fields(&msg).unwrap();
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[0].value, Value::Varint(150));
        assert_eq!(fields[1].value, Value::I64(1.5f64.to_le_bytes()));
        assert_eq!(fields[2].value, Value::Len(b"hi"));
        assert_eq!(fields[3].number, 4);

        // A length past the end, a group, wire type 7, field 0.
        for bad in [&[0x1a, 0x05, b'h'][..], &[0x0b], &[0x0f, 0], &[0x00, 0x01]] {
            assert!(super::fields(bad).is_err(), "{bad:?}");
        }
        // A length that would overflow the position.
        let mut huge = vec![0x1a];
        put_varint(&mut huge, u64::MAX);
        assert!(super::fields(&huge).is_err());
    }
}
