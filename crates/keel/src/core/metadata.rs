//! [`Metadata`]: the key/value pairs that travel with a call beside its arguments (auth tokens,
//! tenant ids, trace context), and with its reply.
//!
//! The same rules hold on every binding: on keel-wire metadata travels in the frames (protocol
//! version 2, at most 16 KiB per message); over HTTP each entry is a header. Keys are lower
//! case `a-z 0-9 - _ .` (what gRPC and HTTP/2 allow; `insert` lower-cases for you). A key
//! ending in `-bin` holds binary bytes (base64 in an HTTP header); any other key holds
//! printable ASCII. Keys that HTTP or keel itself use are reserved ([`Metadata::is_reserved`]).

use std::fmt;

use bytes::{Bytes, BytesMut};

/// Largest encoded metadata of one message, in bytes (16 KiB): each entry takes its key, its
/// value and 3 bytes.
pub const MAX_METADATA_BYTES: usize = keel_wire::metadata::MAX_METADATA_LEN;

/// Request or reply metadata: an ordered list of `(key, value)` entries; a key may repeat.
///
/// ```
/// let mut md = keel::Metadata::new();
/// md.insert("Authorization", "Bearer s3cret")?;
/// md.insert_bin("trace-bin", vec![1u8, 2, 3])?;
/// assert_eq!(md.get("authorization"), Some("Bearer s3cret"));
/// assert_eq!(md.get_bin("trace-bin"), Some(&[1u8, 2, 3][..]));
/// assert!(md.insert("content-type", "text/plain").is_err()); // reserved
/// # Ok::<(), keel::MetadataError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    entries: Vec<(String, Bytes)>,
}

/// Why a metadata key or value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataError {
    message: String,
}

impl MetadataError {
    fn new(message: impl Into<String>) -> MetadataError {
        MetadataError {
            message: message.into(),
        }
    }
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid metadata: {}", self.message)
    }
}

impl std::error::Error for MetadataError {}

/// Header names HTTP or keel's HTTP convention use, refused as metadata keys.
const RESERVED: &[&str] = &[
    "accept-encoding",
    "connection",
    "content-encoding",
    "content-length",
    "content-type",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
    "retry-after",
    "date",
    "server",
    "vary",
];

impl Metadata {
    /// No entries.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Whether `key` is reserved: HTTP's own headers (`content-type`, `connection`, `host`,
    /// `te`, ...) and every key starting with `keel-` (keel's HTTP convention) or `grpc-`.
    pub fn is_reserved(key: &str) -> bool {
        let key = key.to_ascii_lowercase();
        key.starts_with("keel-") || key.starts_with("grpc-") || RESERVED.contains(&&*key)
    }

    fn check_key(key: &str) -> Result<String, MetadataError> {
        let key = key.to_ascii_lowercase();
        if !keel_wire::metadata::is_valid_key(&key) {
            return Err(MetadataError::new(format!(
                "key `{key}`: 1 to 255 characters of a-z 0-9 - _ ."
            )));
        }
        if Metadata::is_reserved(&key) {
            return Err(MetadataError::new(format!("key `{key}` is reserved")));
        }
        Ok(key)
    }

    /// Sets the text value of `key` (lower-cased), replacing any values it had. Fails for an
    /// invalid or reserved key, a `-bin` key (use [`Metadata::insert_bin`]), or a value that
    /// is not printable ASCII.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<&mut Metadata, MetadataError> {
        let key = Metadata::check_key(key)?;
        self.text(&key, value)?;
        self.remove(&key);
        self.entries
            .push((key, Bytes::copy_from_slice(value.as_bytes())));
        Ok(self)
    }

    /// Adds a text value for `key` (lower-cased), keeping the values it had.
    pub fn append(&mut self, key: &str, value: &str) -> Result<&mut Metadata, MetadataError> {
        let key = Metadata::check_key(key)?;
        self.text(&key, value)?;
        self.entries
            .push((key, Bytes::copy_from_slice(value.as_bytes())));
        Ok(self)
    }

    /// Sets the binary value of `key`, which must end in `-bin`, replacing any values it had.
    pub fn insert_bin(
        &mut self,
        key: &str,
        value: impl Into<Bytes>,
    ) -> Result<&mut Metadata, MetadataError> {
        let key = Metadata::check_key(key)?;
        if !keel_wire::metadata::is_binary_key(&key) {
            return Err(MetadataError::new(format!(
                "key `{key}`: binary values need a key ending in `-bin`"
            )));
        }
        self.remove(&key);
        self.entries.push((key, value.into()));
        Ok(self)
    }

    fn text(&self, key: &str, value: &str) -> Result<(), MetadataError> {
        if keel_wire::metadata::is_binary_key(key) {
            return Err(MetadataError::new(format!(
                "key `{key}` ends in `-bin`: use insert_bin"
            )));
        }
        if !keel_wire::metadata::is_valid_text_value(value.as_bytes()) {
            return Err(MetadataError::new(format!(
                "the value of `{key}` must be printable ASCII"
            )));
        }
        Ok(())
    }

    /// The first text value of `key` (case-insensitive).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.get_bin(key)
            .filter(|_| !keel_wire::metadata::is_binary_key(key))
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The first value of `key` as bytes (case-insensitive); any key, text or binary.
    pub fn get_bin(&self, key: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| &v[..])
    }

    /// Every value of `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.entries
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| &v[..])
    }

    /// Removes every value of `key`; returns whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        self.entries.len() != before
    }

    /// Every entry, in order, as `(key, value bytes)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(k, v)| (k.as_str(), &v[..]))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `other`'s entries; a key `other` has replaces this one's values of it.
    pub fn merge(&mut self, other: &Metadata) {
        for (k, _) in &other.entries {
            self.remove(k);
        }
        self.entries.extend(other.entries.iter().cloned());
    }

    /// The encoded size on keel-wire, to check against [`MAX_METADATA_BYTES`].
    pub fn encoded_len(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| 3 + k.len() + v.len())
            .sum()
    }

    /// keel-wire's block for these entries; fails when it would exceed 16 KiB.
    pub(crate) fn to_wire(&self) -> Result<Bytes, MetadataError> {
        if self.entries.is_empty() {
            return Ok(Bytes::new());
        }
        let mut block = BytesMut::with_capacity(self.encoded_len());
        for (k, v) in &self.entries {
            keel_wire::metadata::push(&mut block, k, v).map_err(|_| {
                MetadataError::new(format!("more than {MAX_METADATA_BYTES} bytes of metadata"))
            })?;
        }
        Ok(block.freeze())
    }

    /// The entries of a block keel-wire's decoder validated.
    pub(crate) fn from_wire(block: &Bytes) -> Metadata {
        Metadata {
            entries: keel_wire::metadata::entries(block).collect(),
        }
    }

    /// Adds an entry that arrived from a peer, unchecked against the reserved names (the
    /// binding checked the syntax).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn push_raw(&mut self, key: String, value: Bytes) {
        self.entries.push((key, value));
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.entries {
            if keel_wire::metadata::is_binary_key(k) {
                m.entry(k, &format_args!("<{} bytes>", v.len()));
            } else {
                m.entry(k, &String::from_utf8_lossy(v));
            }
        }
        m.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_lower_cased_checked_and_reserved() {
        let mut md = Metadata::new();
        md.insert("X-Tenant", "acme").unwrap();
        assert_eq!(md.get("x-tenant"), Some("acme"));
        assert_eq!(md.get("X-TENANT"), Some("acme"));
        for bad in [
            "",
            "sp ace",
            "keel-deadline",
            "content-type",
            "grpc-status",
            "a:b",
        ] {
            assert!(md.insert(bad, "v").is_err(), "{bad:?}");
        }
        assert!(md.insert("k", "line\nbreak").is_err());
        assert!(md.insert("k-bin", "text").is_err());
        assert!(md.insert_bin("k", vec![0]).is_err());
        assert_eq!(md.len(), 1);
    }

    #[test]
    fn insert_replaces_append_keeps_merge_overrides() {
        let mut md = Metadata::new();
        md.append("a", "1").unwrap().append("a", "2").unwrap();
        assert_eq!(md.get_all("a").count(), 2);
        md.insert("a", "3").unwrap();
        assert_eq!(md.get_all("a").collect::<Vec<_>>(), vec![&b"3"[..]]);
        let mut other = Metadata::new();
        other.insert("a", "4").unwrap().insert("b", "5").unwrap();
        md.merge(&other);
        assert_eq!(
            (md.get("a"), md.get("b"), md.len()),
            (Some("4"), Some("5"), 2)
        );
        assert!(md.remove("a") && !md.remove("a"));
    }

    #[test]
    fn wire_round_trip_and_size_limit() {
        let mut md = Metadata::new();
        md.insert("authorization", "Bearer t").unwrap();
        md.insert_bin("id-bin", vec![0u8, 255]).unwrap();
        let block = md.to_wire().unwrap();
        assert_eq!(block.len(), md.encoded_len());
        assert_eq!(Metadata::from_wire(&block), md);
        assert!(Metadata::new().to_wire().unwrap().is_empty());
        let mut big = Metadata::new();
        big.insert_bin("a-bin", vec![0u8; 9000]).unwrap();
        big.insert_bin("b-bin", vec![0u8; 9000]).unwrap();
        assert!(big.to_wire().is_err());
    }
}
