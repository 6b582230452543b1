//! `grpc-timeout` (PROTOCOL-HTTP2.md): 1 to 8 ASCII digits and a unit, `H` hours, `M` minutes,
//! `S` seconds, `m` milliseconds, `u` microseconds, `n` nanoseconds. Sans-IO.

use std::time::Duration;

/// The duration a `grpc-timeout` value says, or why it says none.
pub(crate) fn parse(value: &[u8]) -> Result<Duration, &'static str> {
    let Some((&unit, digits)) = value.split_last() else {
        return Err("empty");
    };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err("expected 1 to 8 digits and a unit (H, M, S, m, u or n), e.g. `100m`");
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err("unknown unit: expected H, M, S, m, u or n"),
    })
}

/// `budget` as a `grpc-timeout` value: whole milliseconds, rounded up (so a remainder under a
/// millisecond is not sent as no time at all), or a coarser unit, rounded up, when that takes
/// more than 8 digits.
pub(crate) fn encode(budget: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let ms = budget.as_nanos().div_ceil(1_000_000).max(1);
    if ms <= MAX {
        return format!("{ms}m");
    }
    let s = ms.div_ceil(1000);
    if s <= MAX {
        return format!("{s}S");
    }
    let m = s.div_ceil(60);
    if m <= MAX {
        return format!("{m}M");
    }
    format!("{}H", m.div_ceil(60).min(MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_encode_rounded_up_and_parse_back_no_shorter() {
        assert_eq!(encode(Duration::from_millis(250)), "250m");
        assert_eq!(encode(Duration::from_micros(1)), "1m");
        assert_eq!(encode(Duration::ZERO), "1m");
        assert_eq!(encode(Duration::from_micros(1500)), "2m");
        assert_eq!(encode(Duration::from_secs(200_000)), "200000S");
        assert_eq!(encode(Duration::MAX), "99999999H");
        for d in [
            Duration::from_nanos(1),
            Duration::from_millis(99_999_999),
            Duration::from_millis(100_000_001),
            Duration::from_secs(99_999_999 * 60),
        ] {
            let back = parse(encode(d).as_bytes()).unwrap();
            assert!(back >= d, "{d:?} came back as {back:?}");
        }
    }

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse(b"100m"), Ok(Duration::from_millis(100)));
        assert_eq!(parse(b"5S"), Ok(Duration::from_secs(5)));
        assert_eq!(parse(b"2M"), Ok(Duration::from_secs(120)));
        assert_eq!(parse(b"1H"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse(b"7u"), Ok(Duration::from_micros(7)));
        assert_eq!(parse(b"0n"), Ok(Duration::ZERO));
        assert_eq!(
            parse(b"99999999H"),
            Ok(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            &b""[..],
            b"m",
            b"100",
            b"100x",
            b"123456789m",
            b"-1S",
            b"1.5S",
            b" 1S",
            b"1 S",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12)) {
            let _ = parse(&bytes);
        }
    }
}
