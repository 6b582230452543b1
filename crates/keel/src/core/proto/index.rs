//! Where a message's fields lie, by number: what the decoder (`decode.rs`) asks for as a type
//! asks for its fields. Sans-IO, and small whatever the message holds:
//!
//! - only the numbers the type declares are kept (a flood of fields it does not know costs
//!   nothing: they are read, to refuse a malformed message, and forgotten);
//! - a message whose fields came in order (as protobuf's own encoders write them) costs one
//!   entry per declared number present, the bytes of its run, however often it repeats;
//! - a message that came out of order costs 8 bytes per kept occurrence (its number and
//!   where it starts), read again when asked for.

use smallvec::SmallVec;

use super::wire::{next_field, Field};
use super::ProtoError;

type Result<T> = std::result::Result<T, ProtoError>;

/// The fields of one message that its type declares, by number.
pub(crate) enum Index<'de> {
    /// The fields came in order: each kept number's run, back to back in the message
    /// (number, start, end), sorted by number.
    Runs {
        buf: &'de [u8],
        runs: SmallVec<[(u32, usize, usize); 8]>,
    },
    /// They came out of order: each kept occurrence's number and where it starts, sorted by
    /// number (a stable sort: a repeated field's elements keep their order).
    Sorted {
        buf: &'de [u8],
        at: SmallVec<[(u32, u32); 8]>,
    },
}

impl<'de> Index<'de> {
    /// No fields.
    pub(crate) fn empty() -> Self {
        Index::Runs {
            buf: &[],
            runs: SmallVec::new(),
        }
    }

    /// The fields of the message `buf` whose numbers `wanted` keeps; every field is read, so a
    /// malformed message is refused here whatever its type reads of it.
    pub(crate) fn new(buf: &'de [u8], wanted: impl Fn(u32) -> bool) -> Result<Self> {
        let mut runs: SmallVec<[(u32, usize, usize); 8]> = SmallVec::new();
        let mut pos = 0;
        let mut last = 0;
        loop {
            let start = pos;
            let Some(field) = next_field(buf, &mut pos).map_err(ProtoError::new)? else {
                return Ok(Index::Runs { buf, runs });
            };
            if field.number < last {
                return Self::sorted(buf, wanted);
            }
            last = field.number;
            if !wanted(field.number) {
                continue;
            }
            match runs.last_mut() {
                // In order, so nothing else lies between two occurrences of one number.
                Some((n, _, end)) if *n == field.number => *end = pos,
                _ => runs.push((field.number, start, pos)),
            }
        }
    }

    /// The index of a message that came out of order: counted first, so that it is allocated
    /// once at its size.
    fn sorted(buf: &'de [u8], wanted: impl Fn(u32) -> bool) -> Result<Self> {
        let too_long = || ProtoError::new("a message longer than 4 GiB");
        let mut count = 0;
        let mut pos = 0;
        while let Some(field) = next_field(buf, &mut pos).map_err(ProtoError::new)? {
            count += usize::from(wanted(field.number));
        }
        let mut at: SmallVec<[(u32, u32); 8]> = SmallVec::with_capacity(count);
        let mut pos = 0;
        loop {
            let start = u32::try_from(pos).map_err(|_| too_long())?;
            let Some(field) = next_field(buf, &mut pos).map_err(ProtoError::new)? else {
                break;
            };
            if wanted(field.number) {
                at.push((field.number, start));
            }
        }
        at.sort_by_key(|&(n, _)| n);
        Ok(Index::Sorted { buf, at })
    }

    /// The occurrences of field `n`, in the order they came (none when it is absent).
    pub(crate) fn numbered(&self, n: u32) -> Occurrences<'_, 'de> {
        match self {
            Index::Runs { buf, runs } => match runs.binary_search_by_key(&n, |&(n, _, _)| n) {
                Ok(i) => Occurrences::Run(&buf[runs[i].1..runs[i].2]),
                Err(_) => Occurrences::NONE,
            },
            Index::Sorted { buf, at } => {
                let start = at.partition_point(|&(m, _)| m < n);
                let end = start + at[start..].partition_point(|&(m, _)| m == n);
                Occurrences::Listed {
                    buf,
                    at: &at[start..end],
                }
            }
        }
    }
}

/// The occurrences of one field number, in the order they came, taken one at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Occurrences<'a, 'de> {
    /// Fields of the one number lying back to back.
    Run(&'de [u8]),
    /// Fields of the one number, each starting at `buf[at[i].1]`.
    Listed {
        buf: &'de [u8],
        at: &'a [(u32, u32)],
    },
    /// A single field (an element of a repeated field, read as a value of its own).
    One(Field<'de>),
}

impl<'de> Occurrences<'_, 'de> {
    /// No occurrence: an absent field.
    pub(crate) const NONE: Self = Occurrences::Run(&[]);

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Occurrences::Run(run) => run.is_empty(),
            Occurrences::Listed { at, .. } => at.is_empty(),
            Occurrences::One(_) => false,
        }
    }

    /// Takes the first occurrence off.
    pub(crate) fn pop_front(&mut self) -> Option<Field<'de>> {
        match self {
            Occurrences::Run(run) => {
                let mut pos = 0;
                // The index read these bytes already: they hold whole, valid fields.
                let field = next_field(run, &mut pos).ok().flatten()?;
                *run = &run[pos..];
                Some(field)
            }
            Occurrences::Listed { buf, at } => {
                let (&(_, start), rest) = at.split_first()?;
                *at = rest;
                next_field(buf, &mut (start as usize)).ok().flatten()
            }
            Occurrences::One(field) => {
                let field = *field;
                *self = Self::NONE;
                Some(field)
            }
        }
    }

    /// The last occurrence (of a singular field, the one that counts).
    pub(crate) fn last(&self) -> Option<Field<'de>> {
        match *self {
            Occurrences::Listed { buf, at } => {
                let &(_, start) = at.last()?;
                next_field(buf, &mut (start as usize)).ok().flatten()
            }
            mut other => {
                let mut last = None;
                while let Some(field) = other.pop_front() {
                    last = Some(field);
                }
                last
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{put_tag, put_varint, Value, VARINT};
    use super::*;

    fn message(numbers: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &n) in numbers.iter().enumerate() {
            put_tag(&mut out, n, VARINT);
            put_varint(&mut out, i as u64);
        }
        out
    }

    fn values(mut o: Occurrences<'_, '_>) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(f) = o.pop_front() {
            match f.value {
                Value::Varint(v) => out.push(v),
                other => panic!("{other:?}"),
            }
        }
        out
    }

    #[test]
    fn in_order_and_out_of_order_messages_give_the_same_occurrences() {
        // Field 2 repeated, field 9 unknown, field 1 once; in order, then shuffled.
        for (numbers, ordered) in [
            (&[1, 2, 2, 2, 9, 9][..], true),
            (&[2, 9, 1, 2, 9, 2][..], false),
        ] {
            let buf = message(numbers);
            let index = Index::new(&buf, |n| n <= 3).unwrap();
            assert_eq!(matches!(index, Index::Runs { .. }), ordered);
            let positions = |n: u32| {
                numbers
                    .iter()
                    .enumerate()
                    .filter(|&(_, &m)| m == n)
                    .map(|(i, _)| i as u64)
                    .collect::<Vec<_>>()
            };
            assert_eq!(values(index.numbered(1)), positions(1));
            assert_eq!(values(index.numbered(2)), positions(2));
            assert!(index.numbered(3).is_empty());
            // Not wanted: not kept.
            assert!(index.numbered(9).is_empty());
            let last = index.numbered(2).last().unwrap();
            assert_eq!(last.value, Value::Varint(*positions(2).last().unwrap()));
        }
    }

    #[test]
    fn a_malformed_field_is_refused_even_when_not_wanted() {
        let mut buf = message(&[1]);
        buf.extend_from_slice(&[0x12, 0x05, b'h']); // field 2, 5 bytes announced, 1 sent
        assert!(Index::new(&buf, |n| n == 1).is_err());
        let mut shuffled = message(&[3, 1]);
        shuffled.extend_from_slice(&[0x12, 0x05, b'h']);
        assert!(Index::new(&shuffled, |n| n == 1).is_err());
    }
}
