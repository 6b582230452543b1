//! The one place a gRPC call's message encoding is chosen: its content type's subtype to a
//! [`Format`]. Everything else on the gRPC path encodes and decodes through `core::codec` and
//! the message streams with the format chosen here.

use crate::core::format::Format;
use crate::core::status::{Status, StatusCode};

/// The format of a gRPC call's messages, from its content type's subtype (`""` for
/// `application/grpc`, which means protobuf).
pub(super) fn message_format(subtype: &str) -> Result<Format, Status> {
    if subtype.eq_ignore_ascii_case("json") {
        return Ok(Format::Json);
    }
    if subtype.is_empty() || subtype.eq_ignore_ascii_case("proto") {
        // protobuf: filled in when core/proto lands
        return Err(Status::new(
            StatusCode::Unimplemented,
            "the protobuf encoding of gRPC messages is not yet supported by this host; \
             send application/grpc+json",
        ));
    }
    Err(Status::new(
        StatusCode::Unimplemented,
        format!(
            "gRPC message encoding `{subtype}` is not supported by this host; \
             send application/grpc+json"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_chosen_and_the_rest_is_unimplemented() {
        assert_eq!(message_format("json"), Ok(Format::Json));
        assert_eq!(message_format("JSON"), Ok(Format::Json));
        for other in ["", "proto", "cbor"] {
            let status = message_format(other).unwrap_err();
            assert_eq!(status.code(), StatusCode::Unimplemented, "{other}");
        }
    }
}
