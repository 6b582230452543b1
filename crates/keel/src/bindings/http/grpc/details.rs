//! `grpc-status-details-bin`: a `google.rpc.Status` message (`code = 1` int32, `message = 2`
//! string, `details = 3` repeated `google.protobuf.Any` with `type_url = 1`, `value = 2`),
//! encoded and decoded by hand: a few lines of protobuf wire format. Sans-IO.

/// Protobuf's wire types used here.
const VARINT: u8 = 0;
const LEN: u8 = 2;

/// One `google.protobuf.Any`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Any {
    /// `type.googleapis.com/{full message name}`.
    pub(crate) type_url: String,
    /// The message, encoded.
    pub(crate) value: Vec<u8>,
}

/// A `google.rpc.Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpcStatus {
    pub(crate) code: i32,
    pub(crate) message: String,
    pub(crate) details: Vec<Any>,
}

fn put_varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_len(field: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push(field << 3 | LEN);
    put_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// `status` in protobuf's wire format (fields at their default are left out, as protobuf does).
pub(crate) fn encode(status: &RpcStatus) -> Vec<u8> {
    let mut out = Vec::new();
    if status.code != 0 {
        out.push(1 << 3 | VARINT);
        // An int32 is sign-extended to 64 bits.
        put_varint(i64::from(status.code) as u64, &mut out);
    }
    if !status.message.is_empty() {
        put_len(2, status.message.as_bytes(), &mut out);
    }
    for any in &status.details {
        let mut inner = Vec::with_capacity(any.type_url.len() + any.value.len() + 8);
        if !any.type_url.is_empty() {
            put_len(1, any.type_url.as_bytes(), &mut inner);
        }
        if !any.value.is_empty() {
            put_len(2, &any.value, &mut inner);
        }
        put_len(3, &inner, &mut out);
    }
    out
}

/// Reads protobuf fields: `(field number, wire type, varint or bytes)`.
struct Fields<'a>(&'a [u8]);

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

impl Fields<'_> {
    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.0.split_first()?;
            self.0 = rest;
            n |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(n);
            }
        }
        None
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Option<(u64, Value<'a>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        Some((|| {
            let key = self.varint()?;
            let value = match (key & 7) as u8 {
                VARINT => Value::Varint(self.varint()?),
                LEN => {
                    let len = usize::try_from(self.varint()?).ok()?;
                    let bytes = self.0.get(..len)?;
                    self.0 = &self.0[len..];
                    Value::Bytes(bytes)
                }
                // Fixed 64 and 32 bits: skipped, as unknown fields are.
                1 => {
                    self.0 = self.0.get(8..)?;
                    Value::Varint(0)
                }
                5 => {
                    self.0 = self.0.get(4..)?;
                    Value::Varint(0)
                }
                _ => return None,
            };
            Some((key >> 3, value))
        })())
    }
}

/// The `google.rpc.Status` in `bytes`, or `None` if they are not one. Unknown fields are
/// skipped.
pub(crate) fn decode(bytes: &[u8]) -> Option<RpcStatus> {
    let mut status = RpcStatus {
        code: 0,
        message: String::new(),
        details: Vec::new(),
    };
    for field in Fields(bytes) {
        match field? {
            (1, Value::Varint(n)) => status.code = n as i32,
            (2, Value::Bytes(b)) => status.message = String::from_utf8(b.to_vec()).ok()?,
            (3, Value::Bytes(b)) => {
                let mut any = Any {
                    type_url: String::new(),
                    value: Vec::new(),
                };
                for field in Fields(b) {
                    match field? {
                        (1, Value::Bytes(b)) => {
                            any.type_url = String::from_utf8(b.to_vec()).ok()?
                        }
                        (2, Value::Bytes(b)) => any.value = b.to_vec(),
                        _ => {}
                    }
                }
                status.details.push(any);
            }
            _ => {}
        }
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_encodes_as_protobuf_does() {
        let status = RpcStatus {
            code: 2,
            message: "hi".into(),
            details: vec![Any {
                type_url: "t/x".into(),
                value: vec![1, 2],
            }],
        };
        let bytes = encode(&status);
        // Bytes as protoc's encoder writes them for the same message.
        assert_eq!(
            bytes,
            [
                0x08, 2, // code
                0x12, 2, b'h', b'i', // message
                0x1a, 9, // details[0], 9 bytes
                0x0a, 3, b't', b'/', b'x', // type_url
                0x12, 2, 1, 2, // value
            ]
        );
        assert_eq!(decode(&bytes), Some(status));
        // Defaults are left out; a negative code takes ten bytes.
        let empty = RpcStatus {
            code: 0,
            message: String::new(),
            details: vec![],
        };
        assert!(encode(&empty).is_empty());
        let negative = RpcStatus { code: -1, ..empty };
        assert_eq!(encode(&negative).len(), 11);
        assert_eq!(decode(&encode(&negative)), Some(negative));
    }

    #[test]
    fn a_long_value_takes_a_multi_byte_length() {
        let status = RpcStatus {
            code: 16,
            message: "m".repeat(300),
            details: vec![Any {
                type_url: "type.googleapis.com/p.F".into(),
                value: vec![7; 200],
            }],
        };
        let bytes = encode(&status);
        assert_eq!(&bytes[2..5], &[0x12, 0xac, 0x02]); // 300 as a varint
        assert_eq!(decode(&bytes), Some(status));
    }

    #[test]
    fn what_is_not_a_status_is_refused() {
        assert_eq!(decode(&[0x12, 5, b'a']), None); // truncated
        assert_eq!(decode(&[0x08]), None);
        assert_eq!(decode(&[0x0b]), None); // wire type 3 (groups)
    }

    proptest::proptest! {
        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
