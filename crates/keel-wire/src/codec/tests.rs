use bytes::Bytes;

use super::*;
use crate::VERSION;

fn request(call_id: u64, body: &[u8]) -> Frame {
    Frame::Request(Request {
        call_id,
        flags: RequestFlags { one_way: true },
        deadline_us: 1_500_000,
        service: "Calculator".into(),
        operation: "add".into(),
        body: Bytes::copy_from_slice(body),
    })
}

fn every_frame() -> Vec<Frame> {
    vec![
        request(7, b"args"),
        Frame::Request(Request {
            call_id: u64::MAX,
            flags: RequestFlags::default(),
            deadline_us: 0,
            service: String::new(),
            operation: "é".repeat(127),
            body: Bytes::new(),
        }),
        Frame::Reply(Reply {
            call_id: 7,
            status: StatusCode::Ok,
            body: Bytes::from_static(b"\x05"),
        }),
        Frame::Reply(Reply {
            call_id: 8,
            status: StatusCode::Internal,
            body: Bytes::new(),
        }),
        Frame::Cancel(Cancel { call_id: 9 }),
        Frame::Ping(0xdead_beef),
        Frame::Pong(u64::MAX),
        Frame::GoAway(GoAway {
            last_call_id: 42,
            reason: "shutting down ✓".into(),
        }),
    ]
}

fn codec() -> Codec {
    Codec::new(Limits::default())
}

fn encode(frame: &Frame) -> BytesMut {
    let mut dst = BytesMut::new();
    codec().encode(frame, &mut dst).unwrap();
    dst
}

/// A raw frame: length prefix computed from `rest` (type byte and fields).
fn raw(rest: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u32_le(rest.len() as u32);
    b.put_slice(rest);
    b
}

fn decode_one(bytes: &[u8]) -> Result<Option<Frame>, WireError> {
    codec().decode(&mut BytesMut::from(bytes))
}

#[test]
fn round_trip_every_frame_type() {
    for frame in every_frame() {
        let mut buf = encode(&frame);
        assert_eq!(codec().decode(&mut buf), Ok(Some(frame)));
        assert!(buf.is_empty());
    }
}

#[test]
fn request_layout_is_exact() {
    let buf = encode(&request(0x0102, b"xy"));
    let mut expected = vec![];
    expected.extend_from_slice(&(1 + 17 + 1 + 10 + 1 + 3 + 2u32).to_le_bytes());
    expected.push(1);
    expected.extend_from_slice(&0x0102u64.to_le_bytes());
    expected.push(1);
    expected.extend_from_slice(&1_500_000u64.to_le_bytes());
    expected.push(10);
    expected.extend_from_slice(b"Calculator");
    expected.push(3);
    expected.extend_from_slice(b"add");
    expected.extend_from_slice(b"xy");
    assert_eq!(&buf[..], &expected[..]);
}

#[test]
fn fixed_frames_layout() {
    assert_eq!(
        &encode(&Frame::Ping(1))[..],
        &[9, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0]
    );
    let buf = encode(&Frame::GoAway(GoAway {
        last_call_id: 2,
        reason: "x".into(),
    }));
    assert_eq!(
        &buf[..],
        &[12, 0, 0, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'x']
    );
}

#[test]
fn body_is_zero_copy() {
    let mut buf = encode(&request(1, &[7; 100]));
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let Some(Frame::Request(req)) = codec().decode(&mut buf).unwrap() else {
        panic!("expected a request");
    };
    let body = req.body.as_ptr() as usize;
    assert!(body >= start && body + req.body.len() == end);
}

#[test]
fn hello_round_trip_and_layout() {
    let hello = Hello {
        version: VERSION,
        max_message_size: 1234,
    };
    let mut buf = BytesMut::new();
    encode_hello(&hello, &mut buf);
    assert_eq!(&buf[..], b"KEEL\x01\x00\xd2\x04\x00\x00");
    assert_eq!(decode_hello(&mut buf), Ok(Some(hello)));
    assert!(buf.is_empty());
}

#[test]
fn hello_version_is_not_checked() {
    let mut buf = BytesMut::new();
    let hello = Hello {
        version: 999,
        max_message_size: 0,
    };
    encode_hello(&hello, &mut buf);
    assert_eq!(decode_hello(&mut buf), Ok(Some(hello)));
}

#[test]
fn hello_reply_round_trip() {
    let replies = [
        HelloReply::Accept {
            version: VERSION,
            max_message_size: 4096,
        },
        HelloReply::Reject {
            supported_version: VERSION,
            reason: "version 2 not supported".into(),
        },
        HelloReply::Reject {
            supported_version: 3,
            reason: String::new(),
        },
    ];
    for reply in replies {
        let mut buf = BytesMut::new();
        encode_hello_reply(&reply, &mut buf);
        buf.extend_from_slice(b"next");
        assert_eq!(decode_hello_reply(&mut buf), Ok(Some(reply)));
        assert_eq!(&buf[..], b"next");
    }
}

#[test]
fn hello_reply_reason_truncated_on_char_boundary() {
    let mut buf = BytesMut::new();
    // 3-byte characters: 1024 is not a boundary, 1023 is.
    let reason = "€".repeat(400);
    encode_hello_reply(
        &HelloReply::Reject {
            supported_version: 1,
            reason: reason.clone(),
        },
        &mut buf,
    );
    let Some(HelloReply::Reject { reason: got, .. }) = decode_hello_reply(&mut buf).unwrap() else {
        panic!("expected a reject");
    };
    assert_eq!(got.len(), 1023);
    assert!(reason.starts_with(&got));
}

#[test]
fn partial_input_byte_by_byte() {
    let mut all = BytesMut::new();
    for frame in every_frame() {
        codec().encode(&frame, &mut all).unwrap();
    }
    let mut c = codec();
    let mut src = BytesMut::new();
    let mut got = vec![];
    for &b in all.iter() {
        src.put_u8(b);
        if let Some(frame) = c.decode(&mut src).unwrap() {
            got.push(frame);
            // Exactly one frame completes per byte at most.
            assert_eq!(c.decode(&mut src), Ok(None));
        }
    }
    assert_eq!(got, every_frame());
    assert!(src.is_empty());
}

#[test]
fn hello_byte_by_byte() {
    let mut full = BytesMut::new();
    encode_hello(
        &Hello {
            version: 1,
            max_message_size: 9,
        },
        &mut full,
    );
    let mut src = BytesMut::new();
    for (i, &b) in full.iter().enumerate() {
        src.put_u8(b);
        let r = decode_hello(&mut src).unwrap();
        assert_eq!(r.is_some(), i == full.len() - 1);
    }
    for reply in [
        HelloReply::Accept {
            version: 1,
            max_message_size: 2,
        },
        HelloReply::Reject {
            supported_version: 1,
            reason: "no".into(),
        },
    ] {
        let mut full = BytesMut::new();
        encode_hello_reply(&reply, &mut full);
        let mut src = BytesMut::new();
        for (i, &b) in full.iter().enumerate() {
            src.put_u8(b);
            let r = decode_hello_reply(&mut src).unwrap();
            assert_eq!(r.is_some(), i == full.len() - 1);
        }
    }
}

#[test]
fn many_frames_in_one_buffer() {
    let mut src = BytesMut::new();
    let frames = every_frame();
    for frame in frames.iter().chain(&frames) {
        codec().encode(frame, &mut src).unwrap();
    }
    let mut c = codec();
    let mut got = vec![];
    while let Some(frame) = c.decode(&mut src).unwrap() {
        got.push(frame);
    }
    assert_eq!(got.len(), 2 * frames.len());
    assert_eq!(&got[..frames.len()], &frames[..]);
    assert_eq!(&got[frames.len()..], &frames[..]);
}

#[test]
fn bad_magic_fails_fast() {
    for input in [
        &b"G"[..],
        b"KEX",
        b"GET / HTTP/1.1\r\n",
        b"KEEX\x01\x00\x00\x00\x00\x00",
    ] {
        let err = decode_hello(&mut BytesMut::from(input)).unwrap_err();
        assert_eq!(err, WireError::Malformed("bad magic"));
        assert!(err.is_fatal());
    }
    // Prefixes of the magic are fine.
    for n in 0..4 {
        assert_eq!(decode_hello(&mut BytesMut::from(&MAGIC[..n])), Ok(None));
    }
}

#[test]
fn malformed_hello_reply() {
    let m = |b: &[u8]| decode_hello_reply(&mut BytesMut::from(b));
    assert_eq!(
        m(&[2]),
        Err(WireError::Malformed("unknown hello reply tag"))
    );
    let mut too_long = vec![1, 1, 0];
    too_long.extend_from_slice(&1025u16.to_le_bytes());
    assert_eq!(
        m(&too_long),
        Err(WireError::Malformed("reject reason too long"))
    );
    assert_eq!(
        m(&[1, 1, 0, 2, 0, 0xff, 0xfe]),
        Err(WireError::Malformed("invalid UTF-8"))
    );
}

#[test]
fn malformed_frames() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "truncated frame"),
        (vec![0], "unknown frame type"),
        (vec![7, 0, 0, 0, 0, 0, 0, 0, 0], "unknown frame type"),
        (vec![9], "unknown frame type"),
        (vec![200], "unknown frame type"),
        // Reply with status 12.
        (
            [&[2u8][..], &1u64.to_le_bytes(), &[12]].concat(),
            "unknown status code",
        ),
        // Request with flag bit 1 set.
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[2]].concat(),
            "unknown request flags",
        ),
        // Truncated fixed fields inside complete frames.
        (vec![1, 1, 2, 3], "truncated frame"),
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[0], &[0; 7]].concat(),
            "truncated frame",
        ),
        // Service name runs past the end.
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[0], &[0; 8], &[5, b'a']].concat(),
            "truncated frame",
        ),
        // Missing operation length.
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[0], &[0; 8], &[1, b'a']].concat(),
            "truncated frame",
        ),
        (
            [&[2u8][..], &1u64.to_le_bytes()].concat(),
            "truncated frame",
        ),
        (vec![3, 1, 2, 3, 4, 5, 6, 7], "truncated frame"),
        (vec![4], "truncated frame"),
        (vec![6, 0, 0, 0, 0, 0, 0, 0, 0, 1], "truncated frame"),
        (
            [&[6u8][..], &[0; 8], &[3, 0], b"ab"].concat(),
            "truncated frame",
        ),
        // Invalid UTF-8 in names and reasons.
        (
            [
                &[1u8][..],
                &1u64.to_le_bytes(),
                &[0],
                &[0; 8],
                &[1, 0xff, 0],
            ]
            .concat(),
            "invalid UTF-8",
        ),
        (
            [
                &[1u8][..],
                &1u64.to_le_bytes(),
                &[0],
                &[0; 8],
                &[0, 2, 0xc3, 0x28],
            ]
            .concat(),
            "invalid UTF-8",
        ),
        (
            [&[6u8][..], &[0; 8], &[1, 0], &[0x80]].concat(),
            "invalid UTF-8",
        ),
        // Trailing bytes.
        (
            [&[3u8][..], &[0; 8], &[0]].concat(),
            "trailing bytes in frame",
        ),
        ([&[4u8][..], &[0; 9]].concat(), "trailing bytes in frame"),
        ([&[5u8][..], &[0; 10]].concat(), "trailing bytes in frame"),
        (
            [&[6u8][..], &[0; 8], &[1, 0], b"ab"].concat(),
            "trailing bytes in frame",
        ),
        // GoAway reason length beyond the protocol's bound.
        (
            [&[6u8][..], &[0; 8], &1025u16.to_le_bytes()].concat(),
            "goaway reason too long",
        ),
    ];
    for (rest, what) in cases {
        let err = decode_one(&raw(&rest)).unwrap_err();
        assert_eq!(err, WireError::Malformed(what), "input {rest:?}");
        assert!(err.is_fatal());
    }
}

fn oversized_request_prefix(call_id: u64, len: u32) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u32_le(len);
    b.put_u8(1);
    b.put_u64_le(call_id);
    b
}

#[test]
fn oversized_request_reports_call_id_and_skips() {
    let mut c = Codec::new(Limits::with_max_message_size(100));
    let len = 100 + MAX_HEADER + 1;
    let mut src = oversized_request_prefix(77, len);
    src.extend_from_slice(&vec![0xaa; len as usize - 9]);
    let next = request(78, b"ok");
    c.encode(&next, &mut src).unwrap();

    let err = c.decode(&mut src).unwrap_err();
    assert_eq!(
        err,
        WireError::TooLarge {
            call_id: Some(77),
            size: u64::from(len),
            limit: 100
        }
    );
    assert!(!err.is_fatal());
    assert_eq!(c.decode(&mut src), Ok(Some(next)));
    assert!(src.is_empty());
}

#[test]
fn oversized_frames_in_small_pieces() {
    for piece in [1, 2, 3, 7, 13, 64, 1000] {
        let mut c = Codec::new(Limits::with_max_message_size(10));
        let len = 5_000u32;
        let mut wire = oversized_request_prefix(5, len).to_vec();
        wire.extend(std::iter::repeat_n(0x55, len as usize - 9));
        // An oversized reply and an oversized ping follow, then a valid frame.
        let mut reply = BytesMut::new();
        reply.put_u32_le(len);
        reply.put_u8(2);
        reply.put_u64_le(6);
        reply.extend_from_slice(&vec![0; len as usize - 9]);
        wire.extend_from_slice(&reply);
        let mut ping = BytesMut::new();
        ping.put_u32_le(len);
        ping.put_u8(4);
        ping.extend_from_slice(&vec![0; len as usize - 1]);
        wire.extend_from_slice(&ping);
        let next = Frame::Pong(99);
        wire.extend_from_slice(&encode(&next));

        let mut src = BytesMut::new();
        let mut events = vec![];
        for chunk in wire.chunks(piece) {
            src.extend_from_slice(chunk);
            loop {
                match c.decode(&mut src) {
                    Ok(Some(f)) => events.push(Ok(f)),
                    Ok(None) => break,
                    Err(e) => {
                        assert!(!e.is_fatal());
                        events.push(Err(e));
                    }
                }
                // Discarded bytes are never kept.
                assert!(src.len() < CALL_ID_END + piece);
            }
        }
        let too_large = |call_id| {
            Err(WireError::TooLarge {
                call_id,
                size: u64::from(len),
                limit: 10,
            })
        };
        assert_eq!(
            events,
            vec![
                too_large(Some(5)),
                too_large(Some(6)),
                too_large(None),
                Ok(next)
            ],
            "piece size {piece}"
        );
    }
}

#[test]
fn oversized_unknown_type_is_malformed() {
    let mut c = Codec::new(Limits::with_max_message_size(0));
    let mut src = BytesMut::new();
    src.put_u32_le(u32::MAX);
    assert_eq!(c.decode(&mut src), Ok(None));
    src.put_u8(8);
    assert_eq!(
        c.decode(&mut src),
        Err(WireError::Malformed("unknown frame type"))
    );
}

#[test]
fn huge_declared_length_allocates_nothing() {
    let mut c = Codec::new(Limits::with_max_message_size(1024));
    let mut src = BytesMut::with_capacity(64);
    src.put_u32_le(u32::MAX);
    src.put_u8(1);
    for b in 0..8 {
        assert_eq!(c.decode(&mut src), Ok(None));
        src.put_u8(b);
    }
    assert!(matches!(
        c.decode(&mut src),
        Err(WireError::TooLarge { call_id: Some(_), size, .. }) if size == u64::from(u32::MAX)
    ));
    for _ in 0..1000 {
        src.extend_from_slice(&[0; 1000]);
        assert_eq!(c.decode(&mut src), Ok(None));
        assert!(src.capacity() <= 64 + 1000, "capacity {}", src.capacity());
    }
}

#[test]
fn partial_frame_reserves_only_declared_length() {
    let mut c = Codec::new(Limits::with_max_message_size(10_000));
    let mut src = BytesMut::new();
    src.put_u32_le(5_000);
    src.put_u8(2);
    assert_eq!(c.decode(&mut src), Ok(None));
    assert!(src.capacity() >= 5_004);
    assert!(
        src.capacity() < 10_000 + MAX_HEADER as usize,
        "{}",
        src.capacity()
    );
}

#[test]
fn frame_limit_boundary() {
    let max = 64u32;
    let mut c = Codec::new(Limits::with_max_message_size(max));
    assert_eq!(c.frame_limit(), u64::from(max + MAX_HEADER));
    // Exactly at the limit: long names plus a full body.
    let frame = Frame::Request(Request {
        call_id: 3,
        flags: RequestFlags::default(),
        deadline_us: 0,
        service: "s".repeat(MAX_NAME_LEN),
        operation: "o".repeat(MAX_NAME_LEN),
        body: Bytes::from(vec![1; max as usize]),
    });
    let mut src = BytesMut::new();
    c.encode(&frame, &mut src).unwrap();
    assert_eq!(src.len(), 4 + (max + MAX_HEADER) as usize);
    assert_eq!(c.decode(&mut src), Ok(Some(frame)));
}

#[test]
fn body_over_limit_with_short_names_is_too_large_but_consumed() {
    let big = Codec::new(Limits::with_max_message_size(100));
    let mut src = BytesMut::new();
    big.encode(&request(4, &[0; 100]), &mut src).unwrap();
    big.encode(&Frame::Ping(1), &mut src).unwrap();
    let mut small = Codec::new(Limits::with_max_message_size(99));
    assert_eq!(
        small.decode(&mut src),
        Err(WireError::TooLarge {
            call_id: Some(4),
            size: 100,
            limit: 99
        })
    );
    assert_eq!(small.decode(&mut src), Ok(Some(Frame::Ping(1))));
}

#[test]
fn encode_refuses_oversized_bodies_and_writes_nothing() {
    let c = Codec::new(Limits::with_max_message_size(10));
    let mut dst = BytesMut::from(&b"keep"[..]);
    assert_eq!(
        c.encode(&request(1, &[0; 11]), &mut dst),
        Err(WireError::TooLarge {
            call_id: Some(1),
            size: 11,
            limit: 10
        })
    );
    let reply = Frame::Reply(Reply {
        call_id: 2,
        status: StatusCode::Ok,
        body: Bytes::from(vec![0; 11]),
    });
    assert!(matches!(
        c.encode(&reply, &mut dst),
        Err(WireError::TooLarge {
            call_id: Some(2),
            ..
        })
    ));
    assert_eq!(&dst[..], b"keep");
    assert!(c.encode(&request(1, &[0; 10]), &mut dst).is_ok());
}

#[test]
fn encode_refuses_long_names() {
    let c = codec();
    let mut dst = BytesMut::new();
    let Frame::Request(mut req) = request(1, b"") else {
        unreachable!()
    };
    req.service = "s".repeat(256);
    let err = c
        .encode(&Frame::Request(req.clone()), &mut dst)
        .unwrap_err();
    assert_eq!(
        err,
        WireError::NameTooLong {
            field: "service",
            len: 256
        }
    );
    assert!(!err.is_fatal());
    req.service = "s".into();
    req.operation = "ö".repeat(128);
    assert!(matches!(
        c.encode(&Frame::Request(req), &mut dst),
        Err(WireError::NameTooLong {
            field: "operation",
            len: 256
        })
    ));
    assert!(dst.is_empty());
}

#[test]
fn goaway_reason_truncated_on_char_boundary() {
    let reason = format!("a{}", "€".repeat(500));
    let buf = encode(&Frame::GoAway(GoAway {
        last_call_id: 1,
        reason: reason.clone(),
    }));
    let Ok(Some(Frame::GoAway(g))) = decode_one(&buf) else {
        panic!("expected a goaway");
    };
    assert_eq!(g.reason.len(), 1024);
    assert!(reason.starts_with(&g.reason));

    // Even with a tiny message limit, a GoAway with the longest reason is not cut and arrives.
    let mut c = Codec::new(Limits::with_max_message_size(0));
    let mut buf = BytesMut::new();
    c.encode(
        &Frame::GoAway(GoAway {
            last_call_id: 1,
            reason,
        }),
        &mut buf,
    )
    .unwrap();
    assert_eq!(buf.len(), 4 + 11 + 1024);
    assert!(matches!(c.decode(&mut buf), Ok(Some(Frame::GoAway(g))) if g.reason.len() == 1024));
    // Beyond its own bound a GoAway is oversized like any frame.
    let mut src = BytesMut::new();
    src.put_u32_le(11 + 1025);
    src.put_u8(6);
    assert!(matches!(
        c.decode(&mut src),
        Err(WireError::TooLarge { call_id: None, .. })
    ));
}

#[test]
fn set_max_message_size_applies() {
    let mut c = codec();
    c.set_max_message_size(3);
    assert_eq!(c.limits().max_message_size, 3);
    assert!(c
        .encode(&request(1, b"four"), &mut BytesMut::new())
        .is_err());
}

#[test]
fn request_flags_bits() {
    assert_eq!(RequestFlags::from_u8(0), Some(RequestFlags::default()));
    assert_eq!(
        RequestFlags::from_u8(1),
        Some(RequestFlags { one_way: true })
    );
    assert_eq!(RequestFlags::from_u8(2), None);
    assert_eq!(RequestFlags { one_way: true }.to_u8(), 1);
}

#[test]
fn display() {
    let e = WireError::TooLarge {
        call_id: Some(3),
        size: 10,
        limit: 5,
    };
    assert_eq!(
        e.to_string(),
        "message too large: 10 bytes, limit 5 (call 3)"
    );
    assert_eq!(
        WireError::Malformed("bad magic").to_string(),
        "malformed keel wire data: bad magic"
    );
    let _: &dyn std::error::Error = &e;
}
