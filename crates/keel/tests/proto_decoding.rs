//! Protobuf request bodies (gRPC's encoding) decoded as a host decodes them: arbitrary and
//! mutated bytes never panic, are refused as `BadRequest` or decode to values that re-encode
//! stably (`tests/support/proto_core.rs`; the `args_proto` fuzz target runs the same checks).

#[path = "support/proto_core.rs"]
mod proto_core;

use proptest::collection::vec;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(op in 0..proto_core::OPERATIONS, body in vec(any::<u8>(), 0..200)) {
        proto_core::decode_op(op, &body);
    }

    #[test]
    fn mutated_valid_bodies_never_panic(
        pick in 0..4usize,
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let (op, mut body) = proto_core::seeds().swap_remove(pick);
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        proto_core::decode_op(op, &body);
        let end = cut.index(body.len() + 1);
        proto_core::decode_op(op, &body[..end]);
    }
}

#[test]
fn valid_bodies_decode_and_echo() {
    for (op, body) in proto_core::seeds() {
        assert!(
            proto_core::decode_op(op, &body),
            "operation {op}'s valid body was refused"
        );
    }
}
