//! `Accept-Encoding` (RFC 9110 §12.5.3): which coding a reply to an HTTP client may use.

use crate::core::compress::Compression;

/// A q-value in thousandths (RFC 9110 §12.4.2: `0`, `0.5`, `0.125`, `1`, `1.000`), or `None` if
/// `s` is not one.
fn parse_qvalue(s: &str) -> Option<u16> {
    let (int, frac) = match s.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (s, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The q-value of one `Accept-Encoding` element's parameters (1 if it has none), or `None` if its
/// `q` is not a valid q-value (the element is then ignored). Other parameters, and empty ones
/// (`gzip;`), are ignored.
fn element_q<'a>(params: impl Iterator<Item = &'a str>) -> Option<u16> {
    let mut q = 1000;
    for param in params {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        if name.trim().eq_ignore_ascii_case("q") {
            q = parse_qvalue(value.trim())?;
        }
    }
    Some(q)
}

/// The coding to compress a reply with, among `allowed`, for a client that sent `header` as its
/// `Accept-Encoding`; `None` means reply uncompressed.
///
/// - Each coding's weight is its q-value (RFC 9110 §12.5.3; 1 when none is given); `q=0` means
///   not acceptable. A coding not named takes the weight of `*` if there is one, and is not
///   acceptable otherwise. When a coding is listed twice, the first listing counts.
/// - The heaviest acceptable coding wins. At equal weight a coding the client named beats one
///   matched only by `*`; between two named codings zstd beats gzip (faster, smaller); between
///   two matched only by `*`, gzip beats zstd (a client that names neither is likelier to decode
///   gzip, which every HTTP client does).
/// - `identity` (no compression) is always acceptable to keel, so `identity;q=0` changes nothing.
///   A client that names `identity` with a greater weight than the winner prefers its reply
///   uncompressed: `None`.
/// - Unknown codings (`br`, `deflate`, …), elements with an invalid q-value, and empty elements
///   are ignored; so a header of garbage gives `None`.
pub(crate) fn pick(header: &str, allowed: &[Compression]) -> Option<Compression> {
    let mut named: [Option<u16>; Compression::ALL.len()] = [None; Compression::ALL.len()];
    let mut star = None;
    let mut identity = None;
    for element in header.split(',') {
        let mut parts = element.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        if coding.is_empty() {
            continue;
        }
        let Some(q) = element_q(parts) else {
            continue;
        };
        let slot = if coding == "*" {
            &mut star
        } else if coding.eq_ignore_ascii_case("identity") {
            &mut identity
        } else if let Some(c) = Compression::from_token(coding) {
            &mut named[index(c)]
        } else {
            continue;
        };
        slot.get_or_insert(q);
    }

    // (weight, named by the client, preference): the greatest wins.
    let rank = |c: Compression| -> Option<(u16, bool, u8)> {
        let (q, is_named) = match named[index(c)] {
            Some(q) => (q, true),
            None => (star?, false),
        };
        let preference = match (c, is_named) {
            (Compression::Zstd, true) | (Compression::Gzip, false) => 1,
            (Compression::Gzip, true) | (Compression::Zstd, false) => 0,
        };
        (q > 0).then_some((q, is_named, preference))
    };
    let (best_rank, best) = allowed
        .iter()
        .filter_map(|&c| rank(c).map(|r| (r, c)))
        .max_by_key(|&(r, _)| r)?;
    match identity {
        Some(q) if q > best_rank.0 => None,
        _ => Some(best),
    }
}

/// `c`'s index in [`Compression::ALL`].
fn index(c: Compression) -> usize {
    match c {
        Compression::Zstd => 0,
        Compression::Gzip => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Compression::{Gzip, Zstd};

    #[test]
    fn accept_encoding() {
        let both = &Compression::ALL[..];
        for (header, allowed, picked) in [
            ("gzip, deflate, br", both, Some(Gzip)),
            ("gzip, deflate, br", &[Zstd][..], None),
            ("gzip, deflate, br, zstd", both, Some(Zstd)),
            ("gzip, zstd", &[Gzip][..], Some(Gzip)),
            ("zstd;q=0.5, gzip;q=0.8", both, Some(Gzip)),
            ("zstd;q=0.5, gzip;q=0.8", &[Zstd][..], Some(Zstd)),
            ("zstd;q=0.8, gzip;q=0.5", both, Some(Zstd)),
            ("gzip, zstd", both, Some(Zstd)),
            ("GZIP;Q=0.5, ZSTD;q=0.4", both, Some(Gzip)),
            ("gzip;q=0", both, None),
            ("gzip;q=0.000", both, None),
            ("gzip;q=0.001", both, Some(Gzip)),
            ("gzip;q=0, zstd;q=0", both, None),
            ("gzip;q=0, gzip", both, None),
            ("gzip, gzip;q=0", both, Some(Gzip)),
            ("*", both, Some(Gzip)),
            ("*", &[Zstd][..], Some(Zstd)),
            ("*;q=0", both, None),
            ("gzip;q=0, *", both, Some(Zstd)),
            ("zstd;q=0.5, *", both, Some(Gzip)),
            ("gzip;q=0.5, *;q=0.5", both, Some(Gzip)),
            ("*, zstd;q=0", &[Zstd][..], None),
            ("x-gzip", both, Some(Gzip)),
            ("identity", both, None),
            ("identity;q=0", both, None),
            ("gzip, identity;q=0", both, Some(Gzip)),
            ("gzip;q=0.5, identity", both, None),
            ("gzip;q=0.5, identity;q=0.5", both, Some(Gzip)),
            ("identity;q=0.4, *;q=0.5", both, Some(Gzip)),
            ("gzip;", both, Some(Gzip)),
            ("gzip ; q=0.5 ; level=9", both, Some(Gzip)),
            ("gzip;foo", both, Some(Gzip)),
            ("gzip;q=1.0, zstd;q=1.000", both, Some(Zstd)),
            ("gzip;q=0.5, zstd;q=0.50", both, Some(Zstd)),
            ("gzip", &[][..], None),
            // Garbage: ignored, element by element.
            ("", both, None),
            (",,, ;;; ,", both, None),
            ("gzip;q=abc", both, None),
            ("gzip;q=1.5", both, None),
            ("gzip;q=1.001", both, None),
            ("gzip;q=0.1234", both, None),
            ("gzip;q=-0", both, None),
            ("gzip;q=", both, None),
            ("gzip;q", both, None),
            ("gzip;q=.5", both, None),
            ("gzip;q=abc, zstd;q=0.1", both, Some(Zstd)),
            ("q=1", both, None),
            ("gzip zstd", both, None),
            ("\u{0}gzip\u{7f}", both, None),
            ("gzïp, ☃", both, None),
        ] {
            assert_eq!(pick(header, allowed), picked, "{header:?} {allowed:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn accept_encoding_never_panics_and_picks_an_allowed_coding(
            header in "[a-zA-Z*;=,. 0-9q-]{0,40}",
            only_gzip: bool,
        ) {
            let allowed: &[Compression] = if only_gzip { &[Gzip] } else { &Compression::ALL };
            if let Some(c) = pick(&header, allowed) {
                proptest::prop_assert!(allowed.contains(&c));
            }
        }
    }
}
