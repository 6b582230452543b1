//! The streaming workload's message: a price quote, what every system's server streams and every
//! client hands out, whatever it travels as (MessagePack in keel's envelope frames, protobuf in
//! gRPC's, raw's own frames).

use serde::{Deserialize, Serialize};

/// One price quote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub(crate) struct Quote {
    /// The symbol quoted (the one the client asked for).
    pub(crate) symbol: String,
    /// Counts the call's quotes from 0 (wrapping).
    pub(crate) seq: u32,
    /// The price.
    pub(crate) price: f64,
}

/// The symbol every client watches: a short string, so a quote is about 30 bytes encoded.
pub(crate) const SYMBOL: &str = "KEEL";

/// The count a client asks for when it ends the stream itself (by dropping it).
pub(crate) const ENDLESS: u64 = u64::MAX;

impl Quote {
    /// Quote number `seq` of `symbol`: every server makes the same ones.
    pub(crate) fn new(symbol: &str, seq: u64) -> Quote {
        Quote {
            symbol: symbol.to_string(),
            seq: seq as u32,
            price: price(seq),
        }
    }
}

/// The price of quote `seq`.
pub(crate) fn price(seq: u64) -> f64 {
    100.0 + (seq % 50) as f64 * 0.25
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_count_and_wrap() {
        let q = Quote::new(SYMBOL, 51);
        assert_eq!((q.symbol.as_str(), q.seq, q.price), ("KEEL", 51, 100.25));
        assert_eq!(Quote::new("X", (1 << 32) + 3).seq, 3);
    }
}
