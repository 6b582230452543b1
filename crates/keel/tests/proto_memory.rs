//! What a protobuf body can make a host hold while it is decoded: the decoder indexes only the
//! fields the type declares, so a flood of fields it does not declare costs nothing beyond the
//! body itself, and a declared repeated field costs about what the decoded value holds.
//! One test per case in this binary, run one after another (the heap's peak is process-wide).

use keel::__private::{decode_args, proto_format};
use serde::{Deserialize, Serialize};

#[global_allocator]
static ALLOC: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

/// What the cases decode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Field 1: repeated, sent unpacked by the cases (one tag per element).
    pub ids: Vec<u32>,
    /// Field 2.
    pub note: String,
}

/// A contract that uses [`Batch`], for its protobuf codec.
#[keel::contract]
pub trait Tally {
    /// How many ids.
    fn count(&self, batch: Batch) -> u32;
}

/// 4 MiB of the 2-byte field `tag` with the value 1.
fn flood(tag: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 << 20);
    while body.len() < 4 << 20 {
        body.extend_from_slice(&[tag, 0x01]);
    }
    body
}

/// Decodes `body` as a [`Batch`]; the heap's peak growth while doing so.
fn decode_peak(body: &[u8]) -> (Batch, usize) {
    let format = proto_format(TallyClient::descriptor()).unwrap();
    let base = ALLOC.current_usage();
    ALLOC.reset_peak_usage();
    let batch: Batch = decode_args(format, body).unwrap();
    (batch, ALLOC.peak_usage().saturating_sub(base))
}

#[test]
fn decoding_holds_little_beyond_what_it_decodes() {
    // Field 15 (tag 0x78), which `Batch` does not declare: 2 Mi fields.
    let (batch, grew) = decode_peak(&flood(0x78));
    eprintln!("unknown fields: the heap grew {} KiB", grew >> 10);
    assert_eq!(batch.ids.len(), 0);
    assert!(
        grew < 64 << 10,
        "the heap grew {} KiB for fields nobody reads",
        grew >> 10
    );

    // Field 1 (tag 0x08), unpacked: 2 Mi ids, 8 MiB as a Vec<u32> (up to 24 MiB while it
    // grows). In order, the index is one entry.
    let (batch, grew) = decode_peak(&flood(0x08));
    eprintln!(
        "2 Mi unpacked ids, in order: the heap grew {} MiB",
        grew >> 20
    );
    assert_eq!(batch.ids.len(), 2 << 20);
    assert!(
        grew < 25 << 20,
        "the heap grew {} MiB for 8 MiB of ids",
        grew >> 20
    );

    // The same after field 2: out of order, 8 bytes of index per id (16 MiB) on top.
    let mut body = vec![0x12, 0x01, b'n'];
    body.extend_from_slice(&flood(0x08));
    let (batch, grew) = decode_peak(&body);
    eprintln!(
        "2 Mi unpacked ids, out of order: the heap grew {} MiB",
        grew >> 20
    );
    assert_eq!((batch.ids.len(), batch.note.as_str()), (2 << 20, "n"));
    assert!(
        grew < 41 << 20,
        "the heap grew {} MiB for 8 MiB of ids",
        grew >> 20
    );
}
