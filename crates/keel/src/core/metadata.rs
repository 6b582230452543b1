//! [`Metadata`]: the key/value pairs that travel with a call beside its arguments (auth tokens,
//! tenant ids, trace context), and with its reply.
//!
//! The same rules hold on every binding: on keel-wire metadata travels in the frames (protocol
//! version 2, at most 16 KiB per message); over HTTP each entry is a header. Keys are lower
//! case `a-z 0-9 - _ .` (what gRPC and HTTP/2 allow; `insert` lower-cases for you). A key
//! ending in `-bin` holds binary bytes (base64 in an HTTP header); any other key holds
//! printable ASCII. Keys that HTTP or keel itself use are reserved ([`Metadata::is_reserved`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};

/// Largest encoded metadata of one message, in bytes (16 KiB): each entry takes its key, its
/// value and 3 bytes.
pub const MAX_METADATA_BYTES: usize = keel_wire::metadata::MAX_METADATA_LEN;

/// Request or reply metadata: an ordered list of `(key, value)` entries; a key may repeat.
///
/// Cloning is cheap (the entries are shared until one of the clones changes), and the encoded
/// form keel-wire sends is kept with them, so metadata set once on a client is not encoded
/// again for every call.
///
/// ```
/// let mut md = keel::Metadata::new();
/// md.insert("Authorization", "Bearer s3cret")?;
/// md.insert_bin("trace-bin", vec![1u8, 2, 3])?;
/// assert_eq!(md.get("authorization"), Some("Bearer s3cret"));
/// assert_eq!(md.get_bin("trace-bin"), Some(&[1u8, 2, 3][..]));
/// assert!(md.insert("content-type", "text/plain").is_err()); // reserved
/// # Ok::<(), keel::metadata::MetadataError>(())
/// ```
#[derive(Clone, Default)]
pub struct Metadata {
    /// `None` for no entries (no allocation).
    inner: Option<Arc<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// `(key, value)`: keys are lower-case ASCII (checked on the way in).
    entries: Vec<(Bytes, Bytes)>,
    /// keel-wire's block for `entries`, once encoded (`None`: more than 16 KiB).
    wire: OnceLock<Option<Bytes>>,
}

impl Clone for Inner {
    fn clone(&self) -> Inner {
        // A clone is about to change: its block is encoded again when needed.
        Inner {
            entries: self.entries.clone(),
            wire: OnceLock::new(),
        }
    }
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Metadata) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for Metadata {}

/// A key as text (keys are ASCII by construction).
fn key_str(key: &Bytes) -> &str {
    std::str::from_utf8(key).unwrap_or_default()
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

    fn entries(&self) -> &[(Bytes, Bytes)] {
        self.inner.as_ref().map_or(&[], |i| &i.entries)
    }

    /// The entries, to change: unshared first, and the cached block dropped.
    fn entries_mut(&mut self) -> &mut Vec<(Bytes, Bytes)> {
        let inner = Arc::make_mut(self.inner.get_or_insert_with(Default::default));
        inner.wire = OnceLock::new();
        &mut inner.entries
    }

    /// Whether `key` is reserved: HTTP's own headers (`content-type`, `connection`, `host`,
    /// `te`, ...) and every key starting with `keel-` (keel's HTTP convention) or `grpc-`.
    pub fn is_reserved(key: &str) -> bool {
        // Compared without lower-casing a copy: this runs for every header of every HTTP call.
        let prefix = |p: &str| {
            key.get(..p.len())
                .is_some_and(|k| k.eq_ignore_ascii_case(p))
        };
        prefix("keel-") || prefix("grpc-") || RESERVED.iter().any(|r| r.eq_ignore_ascii_case(key))
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
        Metadata::text(&key, value)?;
        self.remove(&key);
        self.entries_mut()
            .push((Bytes::from(key), Bytes::copy_from_slice(value.as_bytes())));
        Ok(self)
    }

    /// Adds a text value for `key` (lower-cased), keeping the values it had.
    pub fn append(&mut self, key: &str, value: &str) -> Result<&mut Metadata, MetadataError> {
        let key = Metadata::check_key(key)?;
        Metadata::text(&key, value)?;
        self.entries_mut()
            .push((Bytes::from(key), Bytes::copy_from_slice(value.as_bytes())));
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
        self.entries_mut().push((Bytes::from(key), value.into()));
        Ok(self)
    }

    fn text(key: &str, value: &str) -> Result<(), MetadataError> {
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
        self.entries()
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .map(|(_, v)| &v[..])
    }

    /// Every value of `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.entries()
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .map(|(_, v)| &v[..])
    }

    /// Removes every value of `key`; returns whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let present = self
            .entries()
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(key.as_bytes()));
        if present {
            self.entries_mut()
                .retain(|(k, _)| !k.eq_ignore_ascii_case(key.as_bytes()));
        }
        present
    }

    /// Every entry, in order, as `(key, value bytes)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries().iter().map(|(k, v)| (key_str(k), &v[..]))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// Adds `other`'s entries; a key `other` has replaces this one's values of it.
    pub fn merge(&mut self, other: &Metadata) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other.clone();
            return;
        }
        for (k, _) in other.entries() {
            self.remove(key_str(k));
        }
        self.entries_mut().extend(other.entries().iter().cloned());
    }

    /// The entries whose key is one of `keys` (lower-case), in order.
    pub(crate) fn only(&self, keys: &[String]) -> Metadata {
        let mut kept = Metadata::new();
        for (k, v) in self.entries() {
            if keys
                .iter()
                .any(|key| k.eq_ignore_ascii_case(key.as_bytes()))
            {
                kept.entries_mut().push((k.clone(), v.clone()));
            }
        }
        kept
    }

    /// The encoded size on keel-wire, to check against [`MAX_METADATA_BYTES`].
    pub fn encoded_len(&self) -> usize {
        self.entries()
            .iter()
            .map(|(k, v)| 3 + k.len() + v.len())
            .sum()
    }

    /// keel-wire's block for these entries (encoded once, then kept); fails when it would
    /// exceed 16 KiB.
    pub(crate) fn to_wire(&self) -> Result<Bytes, MetadataError> {
        let Some(inner) = &self.inner else {
            return Ok(Bytes::new());
        };
        let block = inner.wire.get_or_init(|| {
            let mut block = BytesMut::with_capacity(self.encoded_len());
            for (k, v) in &inner.entries {
                keel_wire::metadata::push(&mut block, key_str(k), v).ok()?;
            }
            Some(block.freeze())
        });
        block.clone().ok_or_else(|| {
            MetadataError::new(format!("more than {MAX_METADATA_BYTES} bytes of metadata"))
        })
    }

    /// The entries of a block keel-wire's decoder validated, copied (a request decoded in
    /// place borrows its block from the read buffer).
    pub(crate) fn from_wire_block(block: &[u8]) -> Metadata {
        if block.is_empty() {
            return Metadata::new();
        }
        Metadata::from_wire(&Bytes::copy_from_slice(block))
    }

    /// The entries of a block keel-wire's decoder validated (sharing its memory).
    pub(crate) fn from_wire(block: &Bytes) -> Metadata {
        if block.is_empty() {
            return Metadata::new();
        }
        Metadata {
            inner: Some(Arc::new(Inner {
                entries: keel_wire::metadata::entries(block).collect(),
                wire: OnceLock::from(Some(block.clone())),
            })),
        }
    }

    /// Adds an entry that arrived from a peer, unchecked against the reserved names (the
    /// binding checked the syntax).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn push_raw(&mut self, key: &str, value: Bytes) {
        self.entries_mut()
            .push((Bytes::copy_from_slice(key.as_bytes()), value));
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in self.entries() {
            let k = key_str(k);
            if keel_wire::metadata::is_binary_key(k) {
                m.entry(&k, &format_args!("<{} bytes>", v.len()));
            } else {
                m.entry(&k, &String::from_utf8_lossy(v));
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
    fn clones_share_until_changed_and_the_cached_block_follows_changes() {
        let mut a = Metadata::new();
        a.insert("k", "1").unwrap();
        let first = a.to_wire().unwrap();
        let mut b = a.clone();
        b.insert("k", "2").unwrap();
        assert_eq!(a.get("k"), Some("1"), "the original is untouched");
        assert_eq!(a.to_wire().unwrap(), first);
        assert_ne!(b.to_wire().unwrap(), first);
        assert_eq!(
            Metadata::from_wire(&b.to_wire().unwrap()).get("k"),
            Some("2")
        );
        a.append("k", "3").unwrap();
        assert_eq!(
            Metadata::from_wire(&a.to_wire().unwrap())
                .get_all("k")
                .count(),
            2
        );
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
