//! Metadata blocks: the key/value pairs a [`Request`](crate::Request) or a
//! [`Reply`](crate::Reply) carries besides its body (protocol version 2 and later).
//!
//! A block is a sequence of entries, each `key_len u8, key, value_len u16 (LE), value`, at most
//! [`MAX_METADATA_LEN`] bytes in all. Keys are 1 to 255 bytes of `a-z 0-9 - _ .` (the names
//! gRPC and HTTP/2 allow, lower case). A key ending in `-bin` has a binary value (any bytes);
//! any other key has a text value of printable ASCII (`0x20..=0x7E`). A key may repeat; the
//! order of entries is kept. Decoders validate a block before handing it on, so the
//! [`entries`] of a decoded frame are always well formed.
//!
//! ```
//! use bytes::BytesMut;
//! use keel_wire::metadata;
//!
//! let mut block = BytesMut::new();
//! metadata::push(&mut block, "authorization", b"Bearer s3cret")?;
//! metadata::push(&mut block, "trace-bin", &[0, 159, 146, 150])?;
//! let block = block.freeze();
//! metadata::validate(&block)?;
//! let entries: Vec<_> = metadata::entries(&block).collect();
//! assert_eq!(&entries[0].0[..], b"authorization");
//! assert_eq!(&entries[1].1[..], &[0, 159, 146, 150]);
//! # Ok::<(), keel_wire::WireError>(())
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::WireError;

/// Largest metadata block a frame may carry, in bytes (16 KiB, twice gRPC's usual 8 KiB header
/// list, so that a few large tokens fit).
pub const MAX_METADATA_LEN: usize = 16 * 1024;

/// Longest key, in bytes (its length travels in one byte).
pub const MAX_KEY_LEN: usize = 255;

/// Whether `key` may be a metadata key: 1 to [`MAX_KEY_LEN`] bytes of `a-z 0-9 - _ .`.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.'))
}

/// Whether `key` names a binary value (it ends in `-bin`).
pub fn is_binary_key(key: &str) -> bool {
    key.ends_with("-bin")
}

/// Whether `value` may be the value of a text (not `-bin`) key: printable ASCII.
pub fn is_valid_text_value(value: &[u8]) -> bool {
    value.iter().all(|b| (0x20..=0x7E).contains(b))
}

/// Appends one entry to `block`. Fails, writing nothing, when the key or value is invalid (see
/// the module docs) or the block would exceed [`MAX_METADATA_LEN`].
pub fn push(block: &mut BytesMut, key: &str, value: &[u8]) -> Result<(), WireError> {
    if !is_valid_key(key) {
        return Err(WireError::InvalidMetadata("invalid metadata key"));
    }
    if !is_binary_key(key) && !is_valid_text_value(value) {
        return Err(WireError::InvalidMetadata(
            "a text metadata value must be printable ASCII (binary values need a `-bin` key)",
        ));
    }
    let size = 1 + key.len() + 2 + value.len();
    if block.len() + size > MAX_METADATA_LEN {
        return Err(WireError::InvalidMetadata("metadata exceeds 16 KiB"));
    }
    block.reserve(size);
    block.put_u8(key.len() as u8);
    block.put_slice(key.as_bytes());
    block.put_u16_le(value.len() as u16);
    block.put_slice(value);
    Ok(())
}

/// Checks that `block` is a well-formed metadata block of at most [`MAX_METADATA_LEN`] bytes.
pub fn validate(block: &[u8]) -> Result<(), WireError> {
    if block.len() > MAX_METADATA_LEN {
        return Err(WireError::Malformed("metadata block too long"));
    }
    let mut rest = block;
    while !rest.is_empty() {
        let (key, value, tail) =
            split_entry(rest).ok_or(WireError::Malformed("truncated metadata entry"))?;
        let key = std::str::from_utf8(key)
            .ok()
            .filter(|k| is_valid_key(k))
            .ok_or(WireError::Malformed("invalid metadata key"))?;
        if !is_binary_key(key) && !is_valid_text_value(value) {
            return Err(WireError::Malformed("invalid metadata text value"));
        }
        rest = tail;
    }
    Ok(())
}

/// The entries of a block, in order, as `(key, value)`; both share the block's memory (a key
/// of a validated block is ASCII). A block that is not well formed (see [`validate`]) ends the
/// iteration early.
pub fn entries(block: &Bytes) -> Entries {
    Entries {
        block: block.clone(),
        pos: 0,
    }
}

/// Iterator over a metadata block's entries; see [`entries`].
#[derive(Debug, Clone)]
pub struct Entries {
    block: Bytes,
    pos: usize,
}

impl Iterator for Entries {
    type Item = (Bytes, Bytes);

    fn next(&mut self) -> Option<(Bytes, Bytes)> {
        let rest = &self.block[self.pos..];
        let (key, value, tail) = split_entry(rest)?;
        let key_start = self.pos + 1;
        let key = self.block.slice(key_start..key_start + key.len());
        let start = self.pos + (rest.len() - tail.len()) - value.len();
        let value = self.block.slice(start..start + value.len());
        self.pos += rest.len() - tail.len();
        Some((key, value))
    }
}

/// One entry from the front of `b`: `(key, value, rest)`, or `None` when truncated.
fn split_entry(b: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (&key_len, b) = b.split_first()?;
    let key_len = usize::from(key_len);
    if b.len() < key_len + 2 {
        return None;
    }
    let (key, b) = b.split_at(key_len);
    let value_len = usize::from(u16::from_le_bytes([b[0], b[1]]));
    let b = &b[2..];
    if b.len() < value_len {
        return None;
    }
    let (value, rest) = b.split_at(value_len);
    Some((key, value, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_in_order_with_repeats() {
        let mut b = BytesMut::new();
        push(&mut b, "a", b"1").unwrap();
        push(&mut b, "a", b"2").unwrap();
        push(&mut b, "x-bin", &[0xff, 0]).unwrap();
        push(&mut b, "empty", b"").unwrap();
        let b = b.freeze();
        validate(&b).unwrap();
        let got: Vec<_> = entries(&b).collect();
        assert_eq!(got.len(), 4);
        assert_eq!((&got[1].0[..], &got[1].1[..]), (&b"a"[..], &b"2"[..]));
        assert_eq!(&got[2].1[..], &[0xff, 0]);
        assert!(got[3].1.is_empty());
    }

    #[test]
    fn bad_keys_values_and_sizes_are_refused() {
        let mut b = BytesMut::new();
        for key in ["", "Upper", "sp ace", "colon:", &"k".repeat(256)] {
            assert!(push(&mut b, key, b"v").is_err(), "{key:?}");
        }
        assert!(push(&mut b, "text", b"line\nbreak").is_err());
        assert!(push(&mut b, "text", &[0x80]).is_err());
        assert!(b.is_empty(), "nothing written on failure");
        let big = vec![b'v'; 8 * 1024];
        push(&mut b, "one", &big).unwrap();
        assert!(push(&mut b, "two", &big).is_err(), "over 16 KiB");
    }

    #[test]
    fn malformed_blocks_are_malformed() {
        for block in [
            &[1u8][..],                 // key length, no key
            &[1, b'a', 5, 0, b'x'][..], // value runs past the end
            &[1, b'A', 0, 0][..],       // upper-case key
            &[0, 0, 0][..],             // empty key
            &[1, b'a', 1, 0, 0x07][..], // control byte in a text value
        ] {
            assert!(
                matches!(validate(block), Err(WireError::Malformed(_))),
                "{block:?}"
            );
        }
        assert!(validate(&[]).is_ok());
        assert!(validate(&[5, b'x', b'-', b'b', b'i', b'n', 1, 0, 0x07]).is_ok());
    }
}
