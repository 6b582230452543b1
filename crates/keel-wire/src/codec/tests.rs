use bytes::Bytes;

use super::*;
use crate::VERSION;

fn request(call_id: u64, body: &[u8]) -> Frame {
    Frame::Request(Request {
        call_id,
        flags: RequestFlags {
            one_way: true,
            streamed: false,
            accepts_compressed: false,
        },
        deadline_us: 1_500_000,
        service: "Calculator".into(),
        operation: "add".into(),
        metadata: Bytes::new(),
        compression: 0,
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
            service: Default::default(),
            operation: "é".repeat(127).into(),
            metadata: Bytes::new(),
            compression: 0,
            body: Bytes::new(),
        }),
        Frame::Reply(Reply {
            call_id: 7,
            status: StatusCode::Ok,
            metadata: Bytes::new(),
            compression: 0,
            details: Bytes::new(),
            body: Bytes::from_static(b"\x05"),
        }),
        Frame::Reply(Reply {
            call_id: 8,
            status: StatusCode::Internal,
            metadata: Bytes::new(),
            compression: 0,
            details: Bytes::new(),
            body: Bytes::new(),
        }),
        Frame::Cancel(Cancel { call_id: 9 }),
        Frame::Ping(0xdead_beef),
        Frame::Pong(u64::MAX),
        Frame::GoAway(GoAway {
            last_call_id: 42,
            reason: "shutting down ✓".into(),
        }),
        Frame::Request(Request {
            call_id: 10,
            flags: RequestFlags {
                one_way: false,
                streamed: true,
                accepts_compressed: false,
            },
            deadline_us: 3,
            service: "Files".into(),
            operation: "upload".into(),
            metadata: Bytes::new(),
            compression: 0,
            body: Bytes::from_static(b"name"),
        }),
        Frame::StreamData(StreamData {
            call_id: 10,
            data: Bytes::from_static(b"chunk of bytes"),
        }),
        Frame::StreamData(StreamData {
            call_id: u64::MAX,
            data: Bytes::new(),
        }),
        Frame::StreamEnd(StreamEnd {
            call_id: 10,
            status: StatusCode::Ok,
            message: Bytes::new(),
        }),
        Frame::StreamEnd(StreamEnd {
            call_id: 11,
            status: StatusCode::Cancelled,
            message: Bytes::from("reader gone ✓"),
        }),
        Frame::WindowUpdate(WindowUpdate {
            call_id: 10,
            increment: 1,
        }),
        Frame::WindowUpdate(WindowUpdate {
            call_id: 0,
            increment: u32::MAX,
        }),
        Frame::StopSending(StopSending { call_id: 12 }),
    ]
}

fn codec() -> Codec {
    Codec::new(Limits::default())
}

/// A codec speaking protocol version 1, whose rules for unknown types, flags and statuses are
/// strict.
fn v1(limits: Limits) -> Codec {
    let mut c = Codec::new(limits);
    c.set_version(1);
    c
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

/// Decodes with version 1's strict rules (version 2's tolerance has tests of its own).
fn decode_one(bytes: &[u8]) -> Result<Option<Frame>, WireError> {
    v1(Limits::default()).decode(&mut BytesMut::from(bytes))
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
fn known_names_are_borrowed_and_decode_the_same() {
    let mut known = codec();
    known.set_known_names(KnownNames::new(["Calculator", "add", "", "é"]));
    assert_eq!(KnownNames::new(["a", "a"]).len(), 1);
    assert!(KnownNames::new([]).is_empty());
    let named = |service: &str, operation: &str| {
        Frame::Request(Request {
            call_id: 3,
            flags: RequestFlags::default(),
            deadline_us: 0,
            service: service.to_owned().into(),
            operation: operation.to_owned().into(),
            metadata: Bytes::new(),
            compression: 0,
            body: Bytes::from_static(b"x"),
        })
    };
    let cases = [
        ("Calculator", "add", true, true),
        ("Calculator", "sub", true, false),
        ("Calc", "", false, true),
        ("é", "ée", true, false),
    ];
    for (service, operation, service_known, op_known) in cases {
        let frame = named(service, operation);
        let decoded = known.decode(&mut encode(&frame)).unwrap().unwrap();
        assert_eq!(decoded, frame);
        assert_eq!(
            codec().decode(&mut encode(&frame)),
            Ok(Some(decoded.clone()))
        );
        let Frame::Request(req) = decoded else {
            panic!("not a request")
        };
        assert_eq!(matches!(req.service, Cow::Borrowed(_)), service_known);
        assert_eq!(matches!(req.operation, Cow::Borrowed(_)), op_known);
    }
    // A name that is not UTF-8 is malformed whatever is known.
    let mut bad = encode(&named("Calculator", "add"));
    let at = bad.len() - 1 - 3;
    bad[at] = 0xff;
    assert_eq!(
        known.decode(&mut bad),
        Err(WireError::Malformed("invalid UTF-8"))
    );
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
    assert_eq!(&buf[..], b"KEEL\x02\x00\xd2\x04\x00\x00");
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
        (vec![0, 0, 0, 0, 0, 0, 0, 0, 0], "unknown frame type"),
        (vec![11, 0, 0, 0, 0, 0, 0, 0, 0], "unknown frame type"),
        (vec![11], "unknown frame type"),
        (vec![200], "unknown frame type"),
        (vec![255], "unknown frame type"),
        // Reply with status 25 (the first unassigned).
        (
            [&[2u8][..], &1u64.to_le_bytes(), &[25]].concat(),
            "unknown status code",
        ),
        // Requests with unknown flag bits (2 and 7) set.
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[4]].concat(),
            "unknown request flags",
        ),
        (
            [&[1u8][..], &1u64.to_le_bytes(), &[0x83]].concat(),
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
        let mut c = v1(Limits::with_max_message_size(10));
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
    let mut c = v1(Limits::with_max_message_size(0));
    let mut src = BytesMut::new();
    src.put_u32_le(u32::MAX);
    assert_eq!(c.decode(&mut src), Ok(None));
    src.put_u8(11);
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
    // Exactly at the limit: long names, the largest metadata block, a compressed full body.
    let mut md = BytesMut::new();
    crate::metadata::push(
        &mut md,
        "k-bin",
        &vec![7; crate::metadata::MAX_METADATA_LEN - 8],
    )
    .unwrap();
    assert_eq!(md.len(), crate::metadata::MAX_METADATA_LEN);
    let frame = Frame::Request(Request {
        call_id: 3,
        flags: RequestFlags::default(),
        deadline_us: 0,
        service: "s".repeat(MAX_NAME_LEN).into(),
        operation: "o".repeat(MAX_NAME_LEN).into(),
        metadata: md.freeze(),
        compression: 1,
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
        metadata: Bytes::new(),
        compression: 0,
        details: Bytes::new(),
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
    req.service = "s".repeat(256).into();
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
    req.operation = "ö".repeat(128).into();
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
    let mut c = v1(Limits::with_max_message_size(0));
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
    let flags = |one_way, streamed| RequestFlags {
        one_way,
        streamed,
        accepts_compressed: false,
    };
    for (byte, f) in [
        (0, flags(false, false)),
        (1, flags(true, false)),
        (2, flags(false, true)),
        (3, flags(true, true)),
    ] {
        assert_eq!(RequestFlags::from_u8(byte), Some(f));
        assert_eq!(f.to_u8(), byte);
    }
    for byte in 4..=255 {
        assert_eq!(RequestFlags::from_u8(byte), None, "{byte:#x}");
    }
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

fn stream_end(call_id: u64, status: StatusCode, message: &[u8]) -> Frame {
    Frame::StreamEnd(StreamEnd {
        call_id,
        status,
        message: Bytes::copy_from_slice(message),
    })
}

#[test]
fn stream_frames_layout() {
    let data = encode(&Frame::StreamData(StreamData {
        call_id: 0x0102,
        data: Bytes::from_static(b"xyz"),
    }));
    assert_eq!(
        &data[..],
        &[12, 0, 0, 0, 7, 2, 1, 0, 0, 0, 0, 0, 0, b'x', b'y', b'z']
    );
    let empty = encode(&Frame::StreamData(StreamData {
        call_id: 3,
        data: Bytes::new(),
    }));
    assert_eq!(&empty[..], &[9, 0, 0, 0, 7, 3, 0, 0, 0, 0, 0, 0, 0]);
    let end = encode(&stream_end(4, StatusCode::Internal, b"no"));
    assert_eq!(
        &end[..],
        &[14, 0, 0, 0, 8, 4, 0, 0, 0, 0, 0, 0, 0, 11, 2, 0, b'n', b'o']
    );
    let ok = encode(&stream_end(4, StatusCode::Ok, b""));
    assert_eq!(&ok[..], &[12, 0, 0, 0, 8, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let update = encode(&Frame::WindowUpdate(WindowUpdate {
        call_id: 5,
        increment: 0x0403_0201,
    }));
    assert_eq!(
        &update[..],
        &[13, 0, 0, 0, 9, 5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]
    );
    let stop = encode(&Frame::StopSending(StopSending { call_id: 6 }));
    assert_eq!(&stop[..], &[9, 0, 0, 0, 10, 6, 0, 0, 0, 0, 0, 0, 0]);
    let streamed = encode(&Frame::Request(Request {
        call_id: 1,
        flags: RequestFlags {
            one_way: false,
            streamed: true,
            accepts_compressed: false,
        },
        deadline_us: 0,
        service: Default::default(),
        operation: Default::default(),
        metadata: Bytes::new(),
        compression: 0,
        body: Bytes::new(),
    }));
    // The flags byte follows the type and the call id.
    assert_eq!(streamed[4 + 1 + 8], 2);
}

#[test]
fn stream_payloads_are_zero_copy() {
    let mut buf = encode(&Frame::StreamData(StreamData {
        call_id: 1,
        data: Bytes::from(vec![7; 100]),
    }));
    encode_into(&stream_end(1, StatusCode::Fault, b"gone"), &mut buf);
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let mut c = codec();
    let Some(Frame::StreamData(d)) = c.decode(&mut buf).unwrap() else {
        panic!("expected stream data");
    };
    let Some(Frame::StreamEnd(e)) = c.decode(&mut buf).unwrap() else {
        panic!("expected a stream end");
    };
    for b in [&d.data, &e.message] {
        let p = b.as_ptr() as usize;
        assert!(p >= start && p + b.len() <= end);
    }
    assert_eq!(e.message, Bytes::from_static(b"gone"));
}

fn encode_into(frame: &Frame, dst: &mut BytesMut) {
    codec().encode(frame, dst).unwrap();
}

#[test]
fn malformed_stream_frames() {
    let id = 1u64.to_le_bytes();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // StreamData: call id cut short.
        (vec![7], "truncated frame"),
        (vec![7, 1, 2, 3, 4, 5, 6, 7], "truncated frame"),
        // StreamEnd: missing status, missing reason length, reason past the end.
        ([&[8u8][..], &id[..7]].concat(), "truncated frame"),
        ([&[8u8][..], &id].concat(), "truncated frame"),
        ([&[8u8][..], &id, &[0]].concat(), "truncated frame"),
        ([&[8u8][..], &id, &[0, 1]].concat(), "truncated frame"),
        (
            [&[8u8][..], &id, &[4, 3, 0], b"ab"].concat(),
            "truncated frame",
        ),
        // StreamEnd: trailing bytes after the reason.
        (
            [&[8u8][..], &id, &[0, 0, 0, 0]].concat(),
            "trailing bytes in frame",
        ),
        (
            [&[8u8][..], &id, &[4, 1, 0], b"ab"].concat(),
            "trailing bytes in frame",
        ),
        // StreamEnd: unknown status.
        (
            [&[8u8][..], &id, &[25, 0, 0]].concat(),
            "unknown status code",
        ),
        (
            [&[8u8][..], &id, &[255, 0, 0]].concat(),
            "unknown status code",
        ),
        // StreamEnd: reason longer than the protocol allows.
        (
            [&[8u8][..], &id, &[4], &1025u16.to_le_bytes(), &[b'a'; 1025]].concat(),
            "stream end reason too long",
        ),
        (
            [&[8u8][..], &id, &[4], &u16::MAX.to_le_bytes()].concat(),
            "stream end reason too long",
        ),
        // StreamEnd: invalid UTF-8 (a lone continuation byte, a cut 3-byte character).
        (
            [&[8u8][..], &id, &[4, 1, 0, 0x80]].concat(),
            "invalid UTF-8",
        ),
        (
            [&[8u8][..], &id, &[4, 2, 0, 0xe2, 0x82]].concat(),
            "invalid UTF-8",
        ),
        // WindowUpdate: truncated, trailing bytes, increment 0.
        ([&[9u8][..], &id].concat(), "truncated frame"),
        ([&[9u8][..], &id, &[1, 0, 0]].concat(), "truncated frame"),
        (
            [&[9u8][..], &id, &[1, 0, 0, 0, 0]].concat(),
            "trailing bytes in frame",
        ),
        (
            [&[9u8][..], &id, &[0, 0, 0, 0]].concat(),
            "zero window increment",
        ),
        // StopSending: truncated, trailing bytes.
        (vec![10], "truncated frame"),
        ([&[10u8][..], &id[..7]].concat(), "truncated frame"),
        ([&[10u8][..], &id, &[0]].concat(), "trailing bytes in frame"),
        // Streamed request with an unknown flag bit too.
        (
            [&[1u8][..], &id, &[0b110]].concat(),
            "unknown request flags",
        ),
    ];
    for (rest, what) in cases {
        let err = decode_one(&raw(&rest)).unwrap_err();
        assert_eq!(err, WireError::Malformed(what), "input {rest:?}");
        assert!(err.is_fatal());
    }
}

#[test]
fn longest_stream_end_reason_is_fine() {
    let reason = "a".repeat(MAX_REASON_LEN);
    let frame = stream_end(1, StatusCode::Internal, reason.as_bytes());
    let buf = encode(&frame);
    assert_eq!(buf.len(), 4 + 12 + MAX_REASON_LEN);
    assert_eq!(decode_one(&buf), Ok(Some(frame)));
}

#[test]
fn stream_end_reason_truncated_on_char_boundary() {
    let reason = "€".repeat(400);
    let Ok(Some(Frame::StreamEnd(e))) = decode_one(&encode(&stream_end(
        1,
        StatusCode::Internal,
        reason.as_bytes(),
    ))) else {
        panic!("expected a stream end");
    };
    assert_eq!(e.message.len(), 1023);
    assert!(reason.as_bytes().starts_with(&e.message));

    // Text that is not UTF-8 is converted lossily, so the peer can still decode it.
    let Ok(Some(Frame::StreamEnd(e))) = decode_one(&encode(&stream_end(
        1,
        StatusCode::Internal,
        b"bad \xff byte",
    ))) else {
        panic!("expected a stream end");
    };
    assert_eq!(&e.message[..], "bad \u{fffd} byte".as_bytes());
    let long_invalid = [&[0xffu8][..], &[b'a'; 2000]].concat();
    let Ok(Some(Frame::StreamEnd(e))) =
        decode_one(&encode(&stream_end(1, StatusCode::Internal, &long_invalid)))
    else {
        panic!("expected a stream end");
    };
    assert_eq!(e.message.len(), MAX_REASON_LEN);
    assert!(e.message.starts_with("\u{fffd}a".as_bytes()));
}

#[test]
fn oversized_stream_data_is_named_and_skipped() {
    // Beyond the frame limit: reported from the length prefix, dropped without buffering.
    let mut c = Codec::new(Limits::with_max_message_size(100));
    let len = 100 + MAX_HEADER + 1;
    let mut src = BytesMut::new();
    src.put_u32_le(len);
    src.put_u8(7);
    src.put_u64_le(33);
    src.extend_from_slice(&vec![0xaa; len as usize - 9]);
    let next = stream_end(33, StatusCode::Ok, b"");
    c.encode(&next, &mut src).unwrap();
    let err = c.decode(&mut src).unwrap_err();
    assert_eq!(
        err,
        WireError::TooLarge {
            call_id: Some(33),
            size: u64::from(len),
            limit: 100
        }
    );
    assert!(!err.is_fatal());
    assert_eq!(c.decode(&mut src), Ok(Some(next)));
    assert!(src.is_empty());

    // Within the frame limit but over the message limit: consumed, then the next frame.
    let big = Codec::new(Limits::with_max_message_size(101));
    let mut src = BytesMut::new();
    big.encode(
        &Frame::StreamData(StreamData {
            call_id: 34,
            data: Bytes::from(vec![1; 101]),
        }),
        &mut src,
    )
    .unwrap();
    let next = Frame::WindowUpdate(WindowUpdate {
        call_id: 34,
        increment: 7,
    });
    big.encode(&next, &mut src).unwrap();
    assert_eq!(
        c.decode(&mut src),
        Err(WireError::TooLarge {
            call_id: Some(34),
            size: 101,
            limit: 100
        })
    );
    assert_eq!(c.decode(&mut src), Ok(Some(next)));
    assert!(src.is_empty());

    // Exactly at the limit is fine.
    let frame = Frame::StreamData(StreamData {
        call_id: 35,
        data: Bytes::from(vec![2; 100]),
    });
    let mut src = BytesMut::new();
    c.encode(&frame, &mut src).unwrap();
    assert_eq!(c.decode(&mut src), Ok(Some(frame)));
}

#[test]
fn oversized_control_frames_name_no_call() {
    for ty in [9u8, 10] {
        let mut c = v1(Limits::with_max_message_size(0));
        let mut src = BytesMut::new();
        src.put_u32_le(MAX_HEADER + 1);
        src.put_u8(ty);
        src.extend_from_slice(&vec![1; MAX_HEADER as usize]);
        src.extend_from_slice(&encode(&Frame::Ping(5)));
        assert_eq!(
            c.decode(&mut src),
            Err(WireError::TooLarge {
                call_id: None,
                size: u64::from(MAX_HEADER + 1),
                limit: 0
            })
        );
        assert_eq!(c.decode(&mut src), Ok(Some(Frame::Ping(5))));
    }
}

#[test]
fn stream_end_arrives_whatever_the_message_limit() {
    let reason = "r".repeat(MAX_REASON_LEN);
    let frame = stream_end(9, StatusCode::Internal, reason.as_bytes());
    let mut c = v1(Limits::with_max_message_size(0));
    let mut buf = BytesMut::new();
    c.encode(&frame, &mut buf).unwrap();
    assert!(buf.len() as u64 > 4 + c.frame_limit());
    assert_eq!(c.decode(&mut buf), Ok(Some(frame)));
    // Beyond its own bound a StreamEnd is oversized, and names its call.
    let mut src = BytesMut::new();
    src.put_u32_le(12 + 1025);
    src.put_u8(8);
    src.put_u64_le(9);
    assert!(matches!(
        c.decode(&mut src),
        Err(WireError::TooLarge {
            call_id: Some(9),
            ..
        })
    ));
}

#[test]
fn encode_refuses_bad_stream_frames_and_writes_nothing() {
    let c = Codec::new(Limits::with_max_message_size(10));
    let mut dst = BytesMut::from(&b"keep"[..]);
    assert_eq!(
        c.encode(
            &Frame::StreamData(StreamData {
                call_id: 3,
                data: Bytes::from(vec![0; 11]),
            }),
            &mut dst
        ),
        Err(WireError::TooLarge {
            call_id: Some(3),
            size: 11,
            limit: 10
        })
    );
    let err = c
        .encode(
            &Frame::WindowUpdate(WindowUpdate {
                call_id: 4,
                increment: 0,
            }),
            &mut dst,
        )
        .unwrap_err();
    assert_eq!(err, WireError::ZeroWindowIncrement { call_id: 4 });
    assert!(!err.is_fatal());
    assert_eq!(err.to_string(), "window update with increment 0 (call 4)");
    assert_eq!(&dst[..], b"keep");
}

#[test]
fn in_frame_and_pending_size_follow_a_partial_frame() {
    let mut codec = Codec::new(Limits::with_max_message_size(1024));
    let whole = encode(&request(7, &[1; 100]));
    let mut buf = BytesMut::new();
    assert!(!codec.in_frame(&buf));
    assert_eq!(codec.pending_frame_size(&buf), None);
    buf.extend_from_slice(&whole[..3]);
    assert!(codec.in_frame(&buf));
    assert_eq!(codec.pending_frame_size(&buf), None, "length not known yet");
    buf.extend_from_slice(&whole[3..10]);
    assert_eq!(codec.pending_frame_size(&buf), Some(whole.len()));
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    buf.extend_from_slice(&whole[10..]);
    assert!(codec.decode(&mut buf).unwrap().is_some());
    assert!(!codec.in_frame(&buf));

    // An oversized frame is dropped, not buffered: no size to reserve, but still in a frame
    // until its last byte went by.
    let mut big = raw(&[1]);
    big[..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
    big.extend_from_slice(&[0; 8]);
    assert_eq!(codec.pending_frame_size(&big), None);
    assert!(matches!(
        codec.decode(&mut big),
        Err(WireError::TooLarge { .. })
    ));
    assert!(
        codec.in_frame(&big),
        "the rest of the oversized frame is still to come"
    );
    assert_eq!(codec.pending_frame_size(&big), None);
}

// ---- Protocol version 2: metadata, compression, details, and what it tolerates. ----

fn metadata_block(entries: &[(&str, &[u8])]) -> Bytes {
    let mut b = BytesMut::new();
    for (k, v) in entries {
        crate::metadata::push(&mut b, k, v).unwrap();
    }
    b.freeze()
}

#[test]
fn v2_request_and_reply_carry_metadata_compression_and_details() {
    let md = metadata_block(&[("authorization", b"Bearer t"), ("trace-bin", &[0, 1, 255])]);
    let req = Frame::Request(Request {
        call_id: 7,
        flags: RequestFlags {
            one_way: false,
            streamed: true,
            accepts_compressed: false,
        },
        deadline_us: 9,
        service: "Accounts".into(),
        operation: "get".into(),
        metadata: md.clone(),
        compression: 1,
        body: Bytes::from_static(b"args"),
    });
    let rep = Frame::Reply(Reply {
        call_id: 7,
        status: StatusCode::NotFound,
        metadata: md,
        compression: 2,
        details: Bytes::from_static(b"\x01\x02"),
        body: Bytes::from_static(b"no such account"),
    });
    for f in [req, rep] {
        let mut buf = encode(&f);
        assert_eq!(codec().decode(&mut buf), Ok(Some(f)));
        assert!(buf.is_empty());
    }
    // Without them, a version-2 request is byte for byte a version-1 request, and a reply
    // has one flags byte more.
    let plain = request(1, b"xy");
    let mut v1_bytes = BytesMut::new();
    v1(Limits::default()).encode(&plain, &mut v1_bytes).unwrap();
    assert_eq!(encode(&plain), v1_bytes);
    let reply = Frame::Reply(Reply {
        call_id: 1,
        status: StatusCode::Ok,
        metadata: Bytes::new(),
        compression: 0,
        details: Bytes::new(),
        body: Bytes::from_static(b"r"),
    });
    assert_eq!(
        &encode(&reply)[..],
        &[12, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'r']
    );
}

#[test]
fn v2_tolerates_unknown_frame_types_flags_and_statuses() {
    let mut c = codec();
    let mut src = BytesMut::new();
    // An unknown frame type, small and then oversized, is skipped; the next frame decodes.
    src.extend_from_slice(&raw(&[200, 1, 2, 3]));
    src.extend_from_slice(&encode(&Frame::Ping(1)));
    assert_eq!(c.decode(&mut src), Ok(Some(Frame::Ping(1))));
    let mut c = Codec::new(Limits::with_max_message_size(0));
    let mut big = BytesMut::new();
    big.put_u32_le(1_000_000);
    big.put_u8(77);
    assert_eq!(c.decode(&mut big), Ok(None), "skipping, not buffering");
    assert!(big.is_empty());
    let mut rest = BytesMut::from(&vec![0u8; 999_999][..]);
    rest.extend_from_slice(&encode(&Frame::Pong(2)));
    assert_eq!(c.decode(&mut rest), Ok(Some(Frame::Pong(2))));
    // Unknown request flag bits (4..=7) are ignored.
    let mut bytes = encode(&request(3, b"b"));
    bytes[4 + 1 + 8] |= 0b1111_0000;
    let Ok(Some(Frame::Request(r))) = codec().decode(&mut bytes) else {
        panic!("request with unknown flags");
    };
    assert_eq!(r.body, Bytes::from_static(b"b"));
    // An unknown status reads as `unknown`, in a reply and in a stream end.
    let reply = raw(&[&[2u8][..], &5u64.to_le_bytes(), &[250, 0], b"why"].concat());
    let Ok(Some(Frame::Reply(r))) = codec().decode(&mut reply.clone()) else {
        panic!("reply with an unknown status");
    };
    assert_eq!((r.status, &r.body[..]), (StatusCode::Unknown, &b"why"[..]));
    let end = raw(&[&[8u8][..], &5u64.to_le_bytes(), &[250, 0, 0]].concat());
    assert!(matches!(
        codec().decode(&mut end.clone()),
        Ok(Some(Frame::StreamEnd(StreamEnd {
            status: StatusCode::Unknown,
            ..
        })))
    ));
}

#[test]
fn v2_malformed_metadata_is_malformed_and_encoders_refuse_it() {
    // Request flagged with metadata whose block runs past the frame.
    let mut req = vec![1u8];
    req.extend_from_slice(&1u64.to_le_bytes());
    req.push(0b100);
    req.extend_from_slice(&0u64.to_le_bytes());
    req.extend_from_slice(&[1, b's', 1, b'o']);
    req.extend_from_slice(&10u16.to_le_bytes());
    req.extend_from_slice(&[1, b'k']);
    assert_eq!(
        codec().decode(&mut raw(&req)),
        Err(WireError::Malformed("truncated frame"))
    );
    // A block with an upper-case key.
    let mut req2 = req[..req.len() - 4].to_vec();
    req2.extend_from_slice(&4u16.to_le_bytes());
    req2.extend_from_slice(&[1, b'K', 0, 0]);
    assert_eq!(
        codec().decode(&mut raw(&req2)),
        Err(WireError::Malformed("invalid metadata key"))
    );
    // Encoders refuse a malformed block, and version 1 refuses compression.
    let Frame::Request(mut bad) = request(1, b"") else {
        unreachable!()
    };
    bad.metadata = Bytes::from_static(&[1, b'K', 0, 0]);
    let mut dst = BytesMut::new();
    let err = codec()
        .encode(&Frame::Request(bad.clone()), &mut dst)
        .unwrap_err();
    assert!(matches!(err, WireError::InvalidMetadata(_)) && !err.is_fatal());
    bad.metadata = Bytes::new();
    bad.compression = 1;
    assert!(v1(Limits::default())
        .encode(&Frame::Request(bad), &mut dst)
        .is_err());
    assert!(dst.is_empty());
}

#[test]
fn v1_codec_drops_what_version_1_cannot_carry() {
    let md = metadata_block(&[("a", b"b")]);
    let rep = Frame::Reply(Reply {
        call_id: 2,
        status: StatusCode::NotFound,
        metadata: md.clone(),
        compression: 0,
        details: Bytes::from_static(b"d"),
        body: Bytes::from_static(b"gone"),
    });
    let mut c = v1(Limits::default());
    let mut buf = BytesMut::new();
    c.encode(&rep, &mut buf).unwrap();
    // A code version 1 does not know travels as `internal`; metadata and details stay behind.
    let Ok(Some(Frame::Reply(r))) = c.decode(&mut buf) else {
        panic!("reply");
    };
    assert_eq!(r.status, StatusCode::Internal);
    assert!(r.metadata.is_empty() && r.details.is_empty());
    assert_eq!(&r.body[..], b"gone");
    assert_eq!(c.version(), 1);
    c.set_version(9);
    assert_eq!(c.version(), VERSION);
}
