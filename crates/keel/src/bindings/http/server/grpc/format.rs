//! The one place a gRPC call's message encoding is chosen: its content type's subtype to a
//! [`Format`]. Everything else on the gRPC path encodes and decodes through `core::codec` and
//! the message streams with the format chosen here.

use crate::core::format::Format;
use crate::core::service::ServiceDescriptor;
use crate::core::status::{Status, StatusCode};

/// The format of a gRPC call's messages to the contract `desc`, from its content type's
/// subtype (`""` for `application/grpc`, which means protobuf): protobuf derived from the
/// contract's types (GRPC.md, "Types"), or JSON.
pub(super) fn message_format(
    subtype: &str,
    desc: &'static ServiceDescriptor,
) -> Result<Format, Status> {
    if subtype.eq_ignore_ascii_case("json") {
        return Ok(Format::Json);
    }
    if subtype.is_empty() || subtype.eq_ignore_ascii_case("proto") {
        return desc.proto_codec().map(Format::Protobuf).map_err(|why| {
            Status::new(
                StatusCode::Unimplemented,
                format!("{why}; send application/grpc+json"),
            )
        });
    }
    Err(Status::new(
        StatusCode::Unimplemented,
        format!(
            "gRPC message encoding `{subtype}` is not supported by this host; send \
             application/grpc (protobuf) or application/grpc+json"
        ),
    ))
}

// The generated client's methods are `pub` in a test-private contract.
#[allow(unreachable_pub)]
#[cfg(test)]
mod tests {
    use super::*;

    #[crate::contract]
    trait Adder {
        fn add(&self, a: u32, b: u32) -> u32;
    }

    #[test]
    fn json_and_protobuf_are_chosen_and_the_rest_is_unimplemented() {
        let desc = AdderClient::descriptor();
        assert_eq!(message_format("json", desc), Ok(Format::Json));
        assert_eq!(message_format("JSON", desc), Ok(Format::Json));
        for proto in ["", "proto"] {
            assert!(matches!(
                message_format(proto, desc),
                Ok(Format::Protobuf(_))
            ));
        }
        let status = message_format("cbor", desc).unwrap_err();
        assert_eq!(status.code(), StatusCode::Unimplemented);
    }
}
