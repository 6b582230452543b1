//! The connection core (`keel_wire::conn`): every event and rule on both sides, a property over
//! random frame sequences, and two cores talking through the codec.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keel_wire::{
    CallRejected, Cancel, Codec, ConnError, Connection, Event, FlowError, Frame, GoAway, Limits,
    Reply, Request, RequestFlags, Side, StatusCode, StopSending, StreamData, StreamEnd,
    WindowConfig, WindowUpdate, DEFAULT_INITIAL_WINDOW, MAX_WINDOW_SIZE,
};
use proptest::collection::vec;
use proptest::prelude::*;

const WINDOW: usize = DEFAULT_INITIAL_WINDOW as usize;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client() -> Connection<&'static str> {
    Connection::new(Side::Client, WindowConfig::default())
}

fn host() -> Connection<()> {
    Connection::new(Side::Host, WindowConfig::default())
}

fn drain<C>(conn: &mut Connection<C>) -> Vec<Frame> {
    std::iter::from_fn(|| conn.poll_transmit()).collect()
}

fn request(call_id: u64, streamed: bool) -> Frame {
    Frame::Request(Request {
        call_id,
        flags: RequestFlags {
            one_way: false,
            streamed,
            accepts_compressed: false,
        },
        deadline_us: 0,
        service: "Files".into(),
        operation: "put".into(),
        metadata: Bytes::new(),
        compression: 0,
        body: Bytes::from_static(b"args"),
    })
}

/// Feeds a host a streamed request and takes the Ping it measures the round trip with (see
/// `a_host_measures_the_round_trip_at_its_first_streamed_request_only`).
fn upload_request(h: &mut Connection<()>, call_id: u64, now: Instant) {
    feed(h, request(call_id, true), now);
    let frames = drain(h);
    assert!(
        matches!(frames[..], [Frame::Ping(_)]),
        "expected the measurement Ping, got {frames:?}"
    );
}

fn reply(call_id: u64, status: StatusCode) -> Frame {
    Frame::Reply(Reply {
        call_id,
        status,
        metadata: Bytes::new(),
        compression: 0,
        details: Bytes::new(),
        body: Bytes::from_static(b"result"),
    })
}

fn data(call_id: u64, n: usize) -> Frame {
    Frame::StreamData(StreamData {
        call_id,
        data: Bytes::from(vec![7; n]),
    })
}

fn end(call_id: u64, status: StatusCode, message: &'static str) -> Frame {
    Frame::StreamEnd(StreamEnd {
        call_id,
        status,
        message: Bytes::from_static(message.as_bytes()),
    })
}

fn window_update(call_id: u64, increment: u32) -> Frame {
    Frame::WindowUpdate(WindowUpdate { call_id, increment })
}

fn stop_sending(call_id: u64) -> Frame {
    Frame::StopSending(StopSending { call_id })
}

fn go_away(last_call_id: u64, reason: &str) -> Frame {
    Frame::GoAway(GoAway {
        last_call_id,
        reason: reason.into(),
    })
}

/// Feeds `frame` and returns the event; panics on a protocol error.
fn feed<C>(conn: &mut Connection<C>, frame: Frame, now: Instant) -> Option<Event<C>> {
    conn.handle(frame, now).expect("no protocol error")
}

// ---- construction, Debug, Display

#[test]
fn a_new_core_is_empty() {
    let c = client();
    assert_eq!(c.side(), Side::Client);
    assert_eq!(host().side(), Side::Host);
    assert_eq!(c.pending_calls(), 0);
    assert_eq!(c.rtt(), None);
    assert!(!c.is_going_away());
    assert!(!c.is_closed());
    assert_eq!(host().last_call_id(), 0);
    assert_eq!(drain(&mut client()), []);
}

/// A slot type without `Debug`: the core, its events and `Closed` still print.
struct Opaque;

#[test]
fn debug_does_not_need_a_debug_slot() {
    let now = Instant::now();
    let mut c = Connection::<Opaque>::new(Side::Client, WindowConfig::default());
    let id = c.start_call(Opaque, true, true).ok().unwrap();
    let printed = format!("{c:?}");
    assert!(printed.contains("pending_calls: 1"), "{printed}");
    assert!(printed.contains("outbound_streams: 1"), "{printed}");
    let event = c.handle(reply(id, StatusCode::Ok), now).unwrap().unwrap();
    let printed = format!("{event:?}");
    assert!(printed.starts_with("Reply {"), "{printed}");
    assert!(printed.contains("download: true"), "{printed}");
    let event = c.handle(data(id, 3), now).unwrap().unwrap();
    assert_eq!(format!("{event:?}"), "StreamData { call_id: 1, len: 3 }");
    c.start_call(Opaque, false, false).ok().unwrap();
    let closed = c.close("gone");
    assert_eq!(
        format!("{closed:?}"),
        "Closed { calls: [2], inbound: [1], outbound: [1] }"
    );
}

#[test]
fn errors_display() {
    assert_eq!(
        ConnError::ClientOnlyFrame { frame: "Request" }.to_string(),
        "protocol error: the host sent a client-only frame (Request)"
    );
    assert_eq!(
        ConnError::HostOnlyFrame { frame: "GoAway" }.to_string(),
        "protocol error: the client sent a host-only frame (GoAway)"
    );
    assert_eq!(
        CallRejected::Closed("connection lost: reset".into()).to_string(),
        "connection closed: connection lost: reset"
    );
    assert!(CallRejected::GoingAway.to_string().contains("going away"));
    let _: &dyn std::error::Error = &ConnError::HostOnlyFrame { frame: "Reply" };
    let _: &dyn std::error::Error = &CallRejected::GoingAway;
}

// ---- which side may receive what

#[test]
fn a_client_refuses_client_only_frames() {
    let now = Instant::now();
    let mut c = client();
    assert_eq!(
        c.handle(request(1, false), now),
        Err(ConnError::ClientOnlyFrame { frame: "Request" })
    );
    assert_eq!(
        c.handle(Frame::Cancel(Cancel { call_id: 1 }), now),
        Err(ConnError::ClientOnlyFrame { frame: "Cancel" })
    );
    assert_eq!(drain(&mut c), []);
}

#[test]
fn a_host_refuses_host_only_frames() {
    let now = Instant::now();
    let mut h = host();
    assert_eq!(
        h.handle(reply(1, StatusCode::Ok), now),
        Err(ConnError::HostOnlyFrame { frame: "Reply" })
    );
    assert_eq!(
        h.handle(go_away(1, "bye"), now),
        Err(ConnError::HostOnlyFrame { frame: "GoAway" })
    );
    assert!(!h.is_going_away());
    assert_eq!(drain(&mut h), []);
}

#[test]
fn handle_request_keeps_the_books_handle_keeps() {
    let now = Instant::now();
    let (mut moved, mut borrowed) = (host(), host());
    for (id, streamed) in [(3, false), (7, true), (5, false)] {
        let frame = request(id, streamed);
        let Frame::Request(req) = &frame else {
            unreachable!()
        };
        assert_eq!(borrowed.handle_request(req, now), Ok(true));
        assert!(matches!(
            feed(&mut moved, frame, now),
            Some(Event::Request(r)) if r.call_id == id
        ));
    }
    for h in [&mut moved, &mut borrowed] {
        assert_eq!(h.last_call_id(), 7);
        // The streamed one's upload was opened: its data is taken, the others' is not.
        assert!(matches!(
            feed(h, data(7, 3), now),
            Some(Event::StreamData { call_id: 7, .. })
        ));
        assert!(feed(h, data(5, 3), now).is_none());
    }
    let Frame::Request(req) = request(9, false) else {
        unreachable!()
    };
    let mut c = client();
    assert_eq!(
        c.handle_request(&req, now),
        Err(ConnError::ClientOnlyFrame { frame: "Request" })
    );
    borrowed.close("done");
    assert_eq!(borrowed.handle_request(&req, now), Ok(false));
    assert_eq!(borrowed.last_call_id(), 7);
}

// ---- client: the call table

#[test]
fn call_ids_count_up_and_replies_find_their_slot() {
    let now = Instant::now();
    let mut c = client();
    assert_eq!(c.start_call("one", false, false), Ok(1));
    assert_eq!(c.start_call("two", false, false), Ok(2));
    assert_eq!(c.start_call("three", false, false), Ok(3));
    assert_eq!(c.pending_calls(), 3);
    assert_eq!(
        feed(&mut c, reply(2, StatusCode::Fault), now),
        Some(Event::Reply {
            reply: Reply {
                call_id: 2,
                status: StatusCode::Fault,
                metadata: Bytes::new(),
                compression: 0,
                details: Bytes::new(),
                body: Bytes::from_static(b"result"),
            },
            slot: "two",
            download: false,
        })
    );
    assert_eq!(c.pending_calls(), 2);
    // Answered once: a second reply finds nobody (and, not Ok, asks for nothing).
    assert_eq!(feed(&mut c, reply(2, StatusCode::Fault), now), None);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn handle_reply_keeps_the_books_handle_keeps() {
    let now = Instant::now();
    let (mut moved, mut borrowed) = (client(), client());
    for c in [&mut moved, &mut borrowed] {
        assert_eq!(c.start_call("plain", false, false), Ok(1));
        assert_eq!(c.start_call("download", true, false), Ok(2));
        assert_eq!(c.start_call("upload", false, true), Ok(3));
    }
    let replies = [
        (1, StatusCode::Ok, "plain", false),
        (2, StatusCode::Ok, "download", true),
        (3, StatusCode::Internal, "upload", false),
    ];
    for (id, status, slot, download) in replies {
        let frame = reply(id, status);
        let Frame::Reply(r) = &frame else {
            unreachable!()
        };
        assert_eq!(borrowed.handle_reply(r, now), Ok(Some((slot, download))));
        assert!(matches!(
            feed(&mut moved, frame, now),
            Some(Event::Reply { slot: s, download: d, .. }) if s == slot && d == download
        ));
    }
    for c in [&mut moved, &mut borrowed] {
        assert_eq!(c.pending_calls(), 0);
        // The download's stream was opened; the failed upload's window is gone.
        assert!(matches!(
            feed(c, data(2, 3), now),
            Some(Event::StreamData { call_id: 2, .. })
        ));
        assert_eq!(c.send_credit(3), None);
        // An Ok reply nobody waits for asks the host to stop its stream.
        let Frame::Reply(late) = reply(1, StatusCode::Ok) else {
            unreachable!()
        };
        assert_eq!(c.handle_reply(&late, now), Ok(None));
        assert_eq!(drain(c), [stop_sending(1)]);
    }
    let Frame::Reply(r) = reply(4, StatusCode::Ok) else {
        unreachable!()
    };
    assert_eq!(
        host().handle_reply(&r, now),
        Err(ConnError::HostOnlyFrame { frame: "Reply" })
    );
    assert_eq!(borrowed.start_call("after", false, false), Ok(4));
    borrowed.close("done");
    assert_eq!(borrowed.handle_reply(&r, now), Ok(None));
}

#[test]
fn an_unstreamed_ok_reply_opens_no_stream() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("plain", false, false).unwrap();
    let Some(Event::Reply { download, .. }) = feed(&mut c, reply(id, StatusCode::Ok), now) else {
        panic!("a reply");
    };
    assert!(!download);
    assert_eq!(feed(&mut c, data(id, 10), now), None);
    assert!(!c.close_inbound(id));
    assert_eq!(drain(&mut c), []);
}

#[test]
#[should_panic(expected = "only a client starts calls")]
fn a_host_cannot_start_calls() {
    let _ = host().start_call((), false, false);
}

#[test]
fn an_ok_reply_to_a_download_opens_its_stream_first() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("download", true, false).unwrap();
    // Data before the reply has no stream yet: dropped.
    assert_eq!(feed(&mut c, data(id, 5), now), None);
    let Some(Event::Reply { slot, download, .. }) = feed(&mut c, reply(id, StatusCode::Ok), now)
    else {
        panic!("a reply");
    };
    assert_eq!((slot, download), ("download", true));
    assert_eq!(
        feed(&mut c, data(id, 5), now),
        Some(Event::StreamData {
            call_id: id,
            data: Bytes::from(vec![7; 5]),
        })
    );
    assert_eq!(
        feed(&mut c, end(id, StatusCode::Ok, ""), now),
        Some(Event::StreamEnd {
            call_id: id,
            status: StatusCode::Ok,
            message: Bytes::new(),
        })
    );
    // Ended: late frames are dropped.
    assert_eq!(feed(&mut c, data(id, 5), now), None);
    assert_eq!(feed(&mut c, end(id, StatusCode::Ok, ""), now), None);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn a_failed_reply_opens_nothing_and_stops_the_upload() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("both", true, true).unwrap();
    assert_eq!(c.send_credit(id), Some(DEFAULT_INITIAL_WINDOW));
    let Some(Event::Reply {
        reply, download, ..
    }) = feed(&mut c, reply(id, StatusCode::Busy), now)
    else {
        panic!("a reply");
    };
    assert_eq!((reply.status, download), (StatusCode::Busy, true));
    assert_eq!(c.send_credit(id), None);
    assert_eq!(feed(&mut c, data(id, 5), now), None);
    // Stopped without a StreamEnd.
    assert_eq!(drain(&mut c), []);
    assert!(!c.finish_outbound(id, StatusCode::Ok, Bytes::new()));
}

#[test]
fn an_ok_reply_leaves_the_upload_running() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("upload", false, true).unwrap();
    c.on_sent(id, 1000);
    feed(&mut c, reply(id, StatusCode::Ok), now).expect("a reply");
    assert_eq!(c.send_credit(id), Some(DEFAULT_INITIAL_WINDOW - 1000));
    assert!(c.finish_outbound(id, StatusCode::Ok, Bytes::new()));
    assert_eq!(drain(&mut c), [end(id, StatusCode::Ok, "")]);
}

#[test]
fn a_reply_nobody_waits_for_is_dropped() {
    let now = Instant::now();
    let mut c = client();
    // Ok: a response stream may follow; ask the host to stop it.
    assert_eq!(feed(&mut c, reply(9, StatusCode::Ok), now), None);
    assert_eq!(drain(&mut c), [stop_sending(9)]);
    // Anything else: no stream follows.
    assert_eq!(feed(&mut c, reply(9, StatusCode::Internal), now), None);
    assert_eq!(drain(&mut c), []);
    // The StreamData that follows finds no stream.
    assert_eq!(feed(&mut c, data(9, 5), now), None);
}

#[test]
fn uploads_are_routed_from_the_start() {
    let now = Instant::now();
    let mut c = client();
    let up = c.start_call("up", false, true).unwrap();
    let plain = c.start_call("plain", false, false).unwrap();
    assert_eq!(c.send_credit(plain), None);
    // Credit and StopSending reach the upload before any reply.
    assert_eq!(
        feed(&mut c, window_update(up, 10), now),
        Some(Event::Credit { call_id: up })
    );
    assert_eq!(c.send_credit(up), Some(DEFAULT_INITIAL_WINDOW + 10));
    assert_eq!(
        feed(&mut c, stop_sending(up), now),
        Some(Event::OutboundStopped {
            call_id: up,
            error: None,
        })
    );
    assert_eq!(
        drain(&mut c),
        [end(
            up,
            StatusCode::Cancelled,
            "the receiver stopped reading"
        )]
    );
    assert_eq!(c.pending_calls(), 2);
}

#[test]
fn cancel_call_tells_the_host_once() {
    let mut c = client();
    let id = c.start_call("cancel me", false, true).unwrap();
    assert_eq!(c.cancel_call(id), Some("cancel me"));
    assert_eq!(c.send_credit(id), None);
    assert_eq!(c.pending_calls(), 0);
    assert_eq!(drain(&mut c), [Frame::Cancel(Cancel { call_id: id })]);
    assert_eq!(c.cancel_call(id), None);
    assert_eq!(c.cancel_call(42), None);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn calls_cancelled_together_are_told_to_the_host_oldest_first() {
    let mut c = client();
    let ids: Vec<u64> = ["a1", "b", "a2", "c", "a3"]
        .into_iter()
        .map(|name| c.start_call(name, false, name == "a2").unwrap())
        .collect();
    let mut pending: Vec<(u64, &str)> = c.pending().map(|(id, s)| (id, *s)).collect();
    pending.sort_unstable();
    assert_eq!(pending.len(), 5);
    assert_eq!(pending[2], (ids[2], "a2"));
    assert!(c.is_pending(ids[1]) && !c.is_pending(ids[4] + 1));
    let gone = c.cancel_calls_where(|name| name.starts_with('a'));
    assert_eq!(gone, [(ids[0], "a1"), (ids[2], "a2"), (ids[4], "a3")]);
    // The upload of a2 stopped with its call.
    assert_eq!(c.send_credit(ids[2]), None);
    assert_eq!(
        drain(&mut c),
        [ids[0], ids[2], ids[4]].map(|call_id| Frame::Cancel(Cancel { call_id }))
    );
    assert_eq!(c.pending_calls(), 2);
    assert!(!c.is_pending(ids[0]));
    assert_eq!(c.cancel_calls_where(|_| false), []);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn cancelling_an_answered_call_stops_its_upload_quietly() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("answered", false, true).unwrap();
    feed(&mut c, reply(id, StatusCode::Ok), now).expect("a reply");
    assert_eq!(c.cancel_call(id), None);
    assert_eq!(c.send_credit(id), None);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn forget_call_tells_nobody() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("unsent", false, true).unwrap();
    assert_eq!(c.forget_call(id), Some("unsent"));
    assert_eq!(c.send_credit(id), None);
    assert_eq!(c.forget_call(id), None);
    assert_eq!(drain(&mut c), []);
    // Its reply, should one come, finds nobody.
    assert_eq!(feed(&mut c, reply(id, StatusCode::Internal), now), None);
}

#[test]
fn go_away_stops_new_calls_but_pending_ones_are_answered() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("before", false, false).unwrap();
    assert_eq!(
        feed(&mut c, go_away(id, "draining"), now),
        Some(Event::GoAway(GoAway {
            last_call_id: id,
            reason: "draining".into(),
        }))
    );
    assert!(c.is_going_away());
    assert_eq!(
        c.start_call("after", false, true),
        Err((CallRejected::GoingAway, "after"))
    );
    assert_eq!(c.send_credit(id + 1), None);
    let Some(Event::Reply { slot, .. }) = feed(&mut c, reply(id, StatusCode::Ok), now) else {
        panic!("a reply");
    };
    assert_eq!(slot, "before");
    assert_eq!(drain(&mut c), []);
}

#[test]
fn calls_above_a_go_aways_last_call_id_are_given_back_unprocessed() {
    let now = Instant::now();
    let mut c = client();
    let first = c.start_call("processed", false, false).unwrap();
    let second = c.start_call("refused", false, true).unwrap();
    let third = c.start_call("refused too", false, false).unwrap();
    assert!(matches!(
        feed(&mut c, go_away(first, "idle timeout"), now),
        Some(Event::GoAway(_))
    ));
    assert_eq!(
        c.unprocessed_calls(first),
        [(second, "refused"), (third, "refused too")]
    );
    // Nothing is sent for them, their upload is gone, and taking them again finds none.
    assert_eq!(drain(&mut c), []);
    assert_eq!(c.send_credit(second), None);
    assert_eq!(c.unprocessed_calls(first), []);
    assert_eq!(c.pending_calls(), 1);
    // The host's answer to a refused call finds nobody; the processed one is still answered.
    assert_eq!(
        feed(&mut c, reply(second, StatusCode::ShuttingDown), now),
        None
    );
    let Some(Event::Reply { slot, .. }) = feed(&mut c, reply(first, StatusCode::Ok), now) else {
        panic!("a reply");
    };
    assert_eq!(slot, "processed");
}

// ---- host

#[test]
fn last_call_id_is_the_highest_seen() {
    let now = Instant::now();
    let mut h = host();
    for id in [3, 1, 7, 5] {
        assert_eq!(
            feed(&mut h, request(id, false), now),
            Some(Event::Request(match request(id, false) {
                Frame::Request(r) => r,
                _ => unreachable!(),
            }))
        );
    }
    assert_eq!(h.last_call_id(), 7);
}

#[test]
fn host_go_away_is_sent_once() {
    let now = Instant::now();
    let mut h = host();
    feed(&mut h, request(4, false), now);
    assert!(!h.is_going_away());
    h.go_away("host shutting down");
    assert!(h.is_going_away());
    h.go_away("again");
    assert_eq!(drain(&mut h), [go_away(4, "host shutting down")]);
    // Requests still arrive (the host answers them as it likes) and still count.
    feed(&mut h, request(5, false), now).expect("a request");
    assert_eq!(h.last_call_id(), 5);
}

#[test]
#[should_panic(expected = "only a host sends GoAway")]
fn a_client_cannot_go_away() {
    client().go_away("no");
}

#[test]
fn a_streamed_request_opens_its_stream() {
    let now = Instant::now();
    let mut h = host();
    let Some(Event::Request(r)) = feed(&mut h, request(1, true), now) else {
        panic!("a request");
    };
    assert!(r.flags.streamed);
    assert_eq!(
        feed(&mut h, data(1, 4), now),
        Some(Event::StreamData {
            call_id: 1,
            data: Bytes::from(vec![7; 4]),
        })
    );
    assert_eq!(
        feed(&mut h, end(1, StatusCode::Internal, "disk full"), now),
        Some(Event::StreamEnd {
            call_id: 1,
            status: StatusCode::Internal,
            message: Bytes::from_static(b"disk full"),
        })
    );
    // An unstreamed request has no stream.
    feed(&mut h, request(2, false), now);
    assert_eq!(feed(&mut h, data(2, 4), now), None);
    // Only the round-trip measurement went out.
    assert!(matches!(drain(&mut h)[..], [Frame::Ping(_)]));
}

#[test]
fn a_cancel_removes_both_streams() {
    let now = Instant::now();
    let mut h = host();
    upload_request(&mut h, 1, now);
    h.open_outbound(1);
    assert_eq!(
        feed(&mut h, Frame::Cancel(Cancel { call_id: 1 }), now),
        Some(Event::Cancel { call_id: 1 })
    );
    assert!(!h.close_inbound(1));
    assert_eq!(h.send_credit(1), None);
    assert_eq!(feed(&mut h, data(1, 4), now), None);
    // Nothing is sent for a cancelled call.
    assert!(!h.finish_outbound(1, StatusCode::Ok, Bytes::new()));
    assert_eq!(drain(&mut h), []);
    // A cancel for a call the core knows nothing of is still the caller's to handle.
    assert_eq!(
        feed(&mut h, Frame::Cancel(Cancel { call_id: 8 }), now),
        Some(Event::Cancel { call_id: 8 })
    );
}

// ---- inbound streams

#[test]
fn data_beyond_the_window_fails_the_stream() {
    let now = Instant::now();
    for side in [Side::Client, Side::Host] {
        let mut conn = Connection::<()>::new(side, WindowConfig::default());
        conn.open_inbound(3, now);
        assert!(feed(&mut conn, data(3, WINDOW - 1), now).is_some());
        assert!(feed(&mut conn, data(3, 0), now).is_some());
        assert_eq!(
            feed(&mut conn, data(3, 2), now),
            Some(Event::StreamFailed {
                call_id: 3,
                error: FlowError::WindowExceeded {
                    window: 1,
                    received: 2,
                },
            })
        );
        assert_eq!(drain(&mut conn), [stop_sending(3)]);
        assert_eq!(feed(&mut conn, data(3, 1), now), None);
        assert!(!conn.close_inbound(3));
    }
}

#[test]
fn consumed_bytes_are_granted_back_at_half_a_window() {
    let now = Instant::now();
    let mut h = host();
    upload_request(&mut h, 1, now);
    feed(&mut h, data(1, WINDOW), now);
    h.consumed(1, WINDOW / 2 - 1, now);
    assert_eq!(drain(&mut h), []);
    h.consumed(1, 1, now);
    // No RTT estimate yet, and half the window still buffered (the consumer lags): the window
    // stays as it is.
    assert_eq!(
        drain(&mut h),
        [window_update(1, DEFAULT_INITIAL_WINDOW / 2)]
    );
    h.consumed(1, WINDOW / 2, now);
    // Caught up, still without an estimate: the window doubles once, and the connection's
    // next streams start there (a WindowUpdate on call 0).
    assert_eq!(
        drain(&mut h),
        [
            window_update(1, DEFAULT_INITIAL_WINDOW / 2 + DEFAULT_INITIAL_WINDOW),
            window_update(0, DEFAULT_INITIAL_WINDOW)
        ]
    );
    // Unknown streams are ignored.
    h.consumed(2, 100, now);
    assert_eq!(drain(&mut h), []);
}

#[test]
fn windows_grow_once_there_is_an_rtt() {
    let now = Instant::now();
    let mut h = host();
    h.set_rtt(ms(50));
    feed(&mut h, request(1, true), now);
    feed(&mut h, data(1, WINDOW / 2), now);
    // A consumer keeping up (updates under two round trips apart) doubles the window, and
    // the connection's next streams start from the doubled window (an update on call 0).
    h.consumed(1, WINDOW / 2, now + ms(1));
    assert_eq!(
        drain(&mut h),
        [
            window_update(1, DEFAULT_INITIAL_WINDOW / 2 + DEFAULT_INITIAL_WINDOW),
            window_update(keel_wire::CONNECTION, DEFAULT_INITIAL_WINDOW),
        ]
    );
    assert_eq!(h.inbound_initial_window(), 2 * DEFAULT_INITIAL_WINDOW);
}

#[test]
fn a_learned_window_is_where_the_next_stream_starts_on_both_ends() {
    let now = Instant::now();
    let (mut c, mut h) = (client(), host());
    h.set_rtt(ms(50));
    // The host's first upload stream grows its window...
    feed(&mut h, request(1, true), now);
    feed(&mut h, data(1, WINDOW / 2), now);
    h.consumed(1, WINDOW / 2, now + ms(1));
    let announced: Vec<Frame> = drain(&mut h)
        .into_iter()
        .filter(|f| matches!(f, Frame::WindowUpdate(w) if w.call_id == keel_wire::CONNECTION))
        .collect();
    assert_eq!(announced.len(), 1);
    // ...the client learns it, and its next upload starts with that much credit.
    for frame in announced {
        assert!(feed(&mut c, frame, now).is_none());
    }
    assert_eq!(c.outbound_initial_window(), 2 * DEFAULT_INITIAL_WINDOW);
    let id = c.start_call("upload", false, true).unwrap();
    assert_eq!(c.send_credit(id), Some(2 * DEFAULT_INITIAL_WINDOW));
    // The host accepts that much on its next stream without a window error.
    feed(&mut h, request(id + 1, true), now);
    assert!(matches!(
        feed(&mut h, data(id + 1, 2 * WINDOW), now),
        Some(Event::StreamData { .. })
    ));
    // Learned windows stop at MAX_LEARNED_INITIAL_WINDOW; a stream grows further on its own.
    let mut c = client();
    for _ in 0..20 {
        feed(
            &mut c,
            window_update(keel_wire::CONNECTION, keel_wire::MAX_WINDOW_SIZE),
            now,
        );
    }
    assert_eq!(c.outbound_initial_window(), keel_wire::MAX_WINDOW_SIZE);
}

#[test]
fn windows_grow_up_to_the_configured_max() {
    let now = Instant::now();
    let config = WindowConfig {
        initial: DEFAULT_INITIAL_WINDOW,
        max: 2 * DEFAULT_INITIAL_WINDOW,
    };
    let mut h = Connection::<()>::new(Side::Host, config);
    h.set_rtt(ms(50));
    h.open_inbound(1, now);
    let mut granted = WINDOW;
    let mut received = 0;
    for round in 1..10 {
        let n = granted - received;
        feed(&mut h, data(1, n), now).expect("within the window");
        received += n;
        h.consumed(1, n, now + ms(round));
        for frame in drain(&mut h) {
            let Frame::WindowUpdate(w) = frame else {
                panic!("{frame:?}")
            };
            // Call 0 announces the next streams' initial window, not credit for this one.
            if w.call_id != keel_wire::CONNECTION {
                granted += w.increment as usize;
            }
        }
        // Never more outstanding than the max.
        assert!(granted - received <= 2 * WINDOW);
    }
    assert_eq!(granted - received, 2 * WINDOW);
}

#[test]
fn consuming_more_than_received_counts_what_was_received() {
    let now = Instant::now();
    let mut h = host();
    h.open_inbound(1, now);
    feed(&mut h, data(1, WINDOW), now);
    // An id reused by the peer can leave an old consumer reporting against a new window.
    h.consumed(1, 10 * WINDOW, now);
    // One window consumed (not ten), caught up: granted back, and doubled once (no RTT yet).
    assert_eq!(
        drain(&mut h),
        [
            window_update(1, 2 * DEFAULT_INITIAL_WINDOW),
            window_update(0, DEFAULT_INITIAL_WINDOW)
        ]
    );
    h.consumed(1, 1, now);
    assert_eq!(drain(&mut h), []);
}

#[test]
fn abandoning_a_stream_asks_the_producer_to_stop() {
    let now = Instant::now();
    let mut c = client();
    let id = c.start_call("download", true, false).unwrap();
    feed(&mut c, reply(id, StatusCode::Ok), now);
    assert!(c.abandon_inbound(id));
    assert_eq!(drain(&mut c), [stop_sending(id)]);
    assert!(!c.abandon_inbound(id));
    // What was in flight is dropped, the producer's StreamEnd too.
    assert_eq!(feed(&mut c, data(id, 100), now), None);
    assert_eq!(
        feed(
            &mut c,
            end(id, StatusCode::Cancelled, "the receiver stopped reading"),
            now
        ),
        None
    );
    assert_eq!(drain(&mut c), []);
}

#[test]
fn closing_a_stream_sends_nothing() {
    let now = Instant::now();
    let mut h = host();
    upload_request(&mut h, 1, now);
    assert!(h.close_inbound(1));
    assert!(!h.close_inbound(1));
    assert!(!h.abandon_inbound(1));
    assert_eq!(drain(&mut h), []);
}

// ---- outbound streams

#[test]
fn credit_counts_down_and_up() {
    let now = Instant::now();
    let mut h = host();
    assert_eq!(h.send_credit(1), None);
    h.open_outbound(1);
    assert_eq!(h.send_credit(1), Some(DEFAULT_INITIAL_WINDOW));
    h.on_sent(1, WINDOW);
    assert_eq!(h.send_credit(1), Some(0));
    assert_eq!(
        feed(&mut h, window_update(1, 500), now),
        Some(Event::Credit { call_id: 1 })
    );
    assert_eq!(h.send_credit(1), Some(500));
    // Unknown streams: nothing.
    assert_eq!(feed(&mut h, window_update(2, 500), now), None);
    h.on_sent(2, 10);
    assert_eq!(drain(&mut h), []);
}

#[test]
fn credit_reaches_the_protocol_max_and_no_further() {
    let now = Instant::now();
    let mut h = host();
    h.open_outbound(1);
    let to_max = MAX_WINDOW_SIZE - DEFAULT_INITIAL_WINDOW;
    assert_eq!(
        feed(&mut h, window_update(1, to_max), now),
        Some(Event::Credit { call_id: 1 })
    );
    assert_eq!(h.send_credit(1), Some(MAX_WINDOW_SIZE));
    assert_eq!(
        feed(&mut h, window_update(1, 1), now),
        Some(Event::OutboundStopped {
            call_id: 1,
            error: Some(FlowError::Overflow),
        })
    );
    assert_eq!(h.send_credit(1), None);
    assert_eq!(
        drain(&mut h),
        [end(
            1,
            StatusCode::BadRequest,
            "flow control window overflow"
        )]
    );
    assert!(!h.finish_outbound(1, StatusCode::Ok, Bytes::new()));
    assert_eq!(drain(&mut h), []);
}

#[test]
fn stop_sending_stops_the_producer() {
    let now = Instant::now();
    let mut h = host();
    h.open_outbound(1);
    assert_eq!(
        feed(&mut h, stop_sending(1), now),
        Some(Event::OutboundStopped {
            call_id: 1,
            error: None,
        })
    );
    assert_eq!(h.send_credit(1), None);
    assert_eq!(
        drain(&mut h),
        [end(
            1,
            StatusCode::Cancelled,
            "the receiver stopped reading"
        )]
    );
    // The producer's own end comes too late: nothing more is sent.
    assert!(!h.finish_outbound(1, StatusCode::Ok, Bytes::new()));
    // A StopSending for a stream that ended (or never was) changes nothing.
    assert_eq!(feed(&mut h, stop_sending(1), now), None);
    assert_eq!(drain(&mut h), []);
}

#[test]
fn finishing_sends_one_stream_end() {
    let mut h = host();
    h.open_outbound(1);
    assert!(h.finish_outbound(1, StatusCode::Internal, Bytes::from_static(b"boom")));
    assert!(!h.finish_outbound(1, StatusCode::Ok, Bytes::new()));
    assert_eq!(drain(&mut h), [end(1, StatusCode::Internal, "boom")]);
    assert_eq!(h.send_credit(1), None);
}

#[test]
fn stopping_sends_nothing() {
    let mut h = host();
    h.open_outbound(1);
    assert!(h.stop_outbound(1));
    assert!(!h.stop_outbound(1));
    assert_eq!(h.send_credit(1), None);
    assert_eq!(drain(&mut h), []);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "credit")]
fn sending_beyond_the_credit_is_a_bug() {
    let mut h = host();
    h.open_outbound(1);
    h.on_sent(1, WINDOW + 1);
}

// ---- ping / RTT

#[test]
fn pings_are_answered_on_both_sides() {
    let now = Instant::now();
    let mut c = client();
    let mut h = host();
    assert_eq!(feed(&mut c, Frame::Ping(17), now), None);
    assert_eq!(feed(&mut h, Frame::Ping(18), now), None);
    assert_eq!(drain(&mut c), [Frame::Pong(17)]);
    assert_eq!(drain(&mut h), [Frame::Pong(18)]);
    assert_eq!(c.rtt(), None);
}

#[test]
fn the_pong_to_our_ping_measures_the_round_trip() {
    let now = Instant::now();
    let mut c = client();
    c.ping(now);
    // At most one measurement ping in flight.
    c.ping(now + ms(1));
    let [Frame::Ping(nonce)] = drain(&mut c)[..] else {
        panic!("one ping");
    };
    // Someone else's pong: ignored.
    assert_eq!(
        feed(&mut c, Frame::Pong(nonce.wrapping_add(1)), now + ms(5)),
        None
    );
    assert_eq!(c.rtt(), None);
    assert_eq!(feed(&mut c, Frame::Pong(nonce), now + ms(10)), None);
    assert_eq!(c.rtt(), Some(ms(10)));
    // Answered: a repeat changes nothing, and a new ping has a new nonce.
    feed(&mut c, Frame::Pong(nonce), now + ms(100));
    assert_eq!(c.rtt(), Some(ms(10)));
    c.ping(now + ms(20));
    let [Frame::Ping(second)] = drain(&mut c)[..] else {
        panic!("one ping");
    };
    assert_ne!(second, nonce);
    feed(&mut c, Frame::Pong(second), now + ms(20) + ms(90));
    // Smoothed: 7/8 · 10 ms + 1/8 · 90 ms.
    assert_eq!(c.rtt(), Some(ms(20)));
    assert_eq!(drain(&mut c), []);
}

#[test]
fn rtt_is_smoothed_and_never_zero() {
    let mut h = host();
    h.set_rtt(ms(80));
    assert_eq!(h.rtt(), Some(ms(80)));
    h.set_rtt(ms(160));
    assert_eq!(h.rtt(), Some(ms(90)));
    let mut h = host();
    h.set_rtt(Duration::ZERO);
    assert_eq!(h.rtt(), Some(Duration::from_micros(1)));
    h.set_rtt(Duration::MAX);
    assert!(h.rtt().unwrap() > Duration::from_secs(1 << 50));
}

// ---- close

#[test]
fn close_hands_back_what_was_open() {
    let now = Instant::now();
    let mut c = client();
    let a = c.start_call("a", false, true).unwrap();
    let b = c.start_call("b", true, false).unwrap();
    let d = c.start_call("d", true, false).unwrap();
    feed(&mut c, reply(d, StatusCode::Ok), now);
    c.cancel_call(a);
    c.ping(now);
    let queued = drain(&mut c);
    assert_eq!(queued.len(), 2, "{queued:?}");
    let closed = c.close("connection lost: reset");
    assert_eq!(closed.calls, [(b, "b")]);
    assert_eq!(closed.inbound, [d]);
    assert!(closed.outbound.is_empty());
    assert!(c.is_closed());
    assert_eq!(c.pending_calls(), 0);
    assert_eq!(
        c.start_call("late", false, false),
        Err((
            CallRejected::Closed("connection lost: reset".into()),
            "late"
        ))
    );
    // Closing again hands back nothing and keeps the first reason.
    let again = c.close("dropped");
    assert!(again.calls.is_empty() && again.inbound.is_empty() && again.outbound.is_empty());
    assert_eq!(
        c.start_call("later", false, false),
        Err((
            CallRejected::Closed("connection lost: reset".into()),
            "later"
        ))
    );
}

#[test]
fn a_closed_core_ignores_frames_and_queues_nothing_new() {
    let now = Instant::now();
    let mut h = host();
    upload_request(&mut h, 1, now);
    h.open_outbound(2);
    h.open_outbound(1);
    h.go_away("bye");
    let closed = h.close("connection closed");
    assert_eq!(closed.inbound, [1]);
    assert_eq!(closed.outbound, [1, 2]);
    // What was queued before stays queued.
    assert_eq!(drain(&mut h), [go_away(1, "bye")]);
    for frame in [
        Frame::Ping(1),
        request(3, true),
        reply(1, StatusCode::Ok),
        data(1, 1),
        stop_sending(2),
    ] {
        assert_eq!(h.handle(frame, now), Ok(None));
    }
    h.ping(now);
    h.open_inbound(4, now);
    h.open_outbound(4);
    h.consumed(4, 1, now);
    assert!(!h.abandon_inbound(4));
    assert_eq!(h.send_credit(4), None);
    assert!(!h.finish_outbound(4, StatusCode::Ok, Bytes::new()));
    assert_eq!(drain(&mut h), []);
    assert_eq!(h.last_call_id(), 1);
}

// ---- property: random frames never panic, errors are the documented ones

/// One thing done to a core.
#[derive(Debug, Clone)]
enum Step {
    Feed(Frame),
    StartCall {
        download: bool,
        upload: bool,
    },
    CancelCall(u64),
    ForgetCall(u64),
    Consumed(u64, usize),
    Abandon(u64),
    CloseInbound(u64),
    OpenInbound(u64),
    OpenOutbound(u64),
    /// Sends up to this many bytes, within the credit.
    Sent(u64, usize),
    Finish(u64, StatusCode),
    Stop(u64),
    Ping,
    /// Answers the last ping the core sent.
    Pong,
    SetRtt(u64),
    Wait(u64),
    GoAway,
    Close,
}

fn call_id() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0..6u64, 1 => any::<u64>()]
}

fn status() -> impl Strategy<Value = StatusCode> {
    (0..=11u8).prop_map(|v| StatusCode::from_u8(v).unwrap())
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0..100usize, 1 => 0..=2 * WINDOW]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (call_id(), any::<(bool, bool)>()).prop_map(|(call_id, (one_way, streamed))| {
            Frame::Request(Request {
                call_id,
                flags: RequestFlags {
                    one_way,
                    streamed,
                    accepts_compressed: false,
                },
                deadline_us: 0,
                service: "S".into(),
                operation: "o".into(),
                metadata: Bytes::new(),
                compression: 0,
                body: Bytes::new(),
            })
        }),
        (call_id(), status()).prop_map(|(id, status)| reply(id, status)),
        call_id().prop_map(|call_id| Frame::Cancel(Cancel { call_id })),
        any::<u64>().prop_map(Frame::Ping),
        any::<u64>().prop_map(Frame::Pong),
        call_id().prop_map(|id| go_away(id, "going")),
        (call_id(), size()).prop_map(|(id, n)| data(id, n)),
        (call_id(), status()).prop_map(|(id, status)| end(id, status, "why")),
        (call_id(), prop_oneof![1..=WINDOW as u32, 1..=u32::MAX])
            .prop_map(|(id, increment)| window_update(id, increment)),
        call_id().prop_map(stop_sending),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => frame().prop_map(Step::Feed),
        2 => any::<(bool, bool)>()
            .prop_map(|(download, upload)| Step::StartCall { download, upload }),
        1 => call_id().prop_map(Step::CancelCall),
        1 => call_id().prop_map(Step::ForgetCall),
        2 => (call_id(), size()).prop_map(|(id, n)| Step::Consumed(id, n)),
        1 => call_id().prop_map(Step::Abandon),
        1 => call_id().prop_map(Step::CloseInbound),
        1 => call_id().prop_map(Step::OpenInbound),
        1 => call_id().prop_map(Step::OpenOutbound),
        2 => (call_id(), size()).prop_map(|(id, n)| Step::Sent(id, n)),
        1 => (call_id(), status()).prop_map(|(id, s)| Step::Finish(id, s)),
        1 => call_id().prop_map(Step::Stop),
        1 => Just(Step::Ping),
        1 => Just(Step::Pong),
        1 => (0..1000u64).prop_map(Step::SetRtt),
        1 => (0..1000u64).prop_map(Step::Wait),
        1 => Just(Step::GoAway),
        1 => prop_oneof![9 => Just(Step::Wait(0)), 1 => Just(Step::Close)],
    ]
}

/// What `side` may send, and what it must answer `frame` with.
fn expected_error(side: Side, frame: &Frame) -> Option<ConnError> {
    match (side, frame) {
        (Side::Client, Frame::Request(_)) => Some(ConnError::ClientOnlyFrame { frame: "Request" }),
        (Side::Client, Frame::Cancel(_)) => Some(ConnError::ClientOnlyFrame { frame: "Cancel" }),
        (Side::Host, Frame::Reply(_)) => Some(ConnError::HostOnlyFrame { frame: "Reply" }),
        (Side::Host, Frame::GoAway(_)) => Some(ConnError::HostOnlyFrame { frame: "GoAway" }),
        _ => None,
    }
}

/// Runs `steps` on a core of `side`, checking what it returns and sends.
fn run(side: Side, steps: &[Step]) -> Result<(), TestCaseError> {
    let codec = Codec::new(Limits::default());
    let mut now = Instant::now();
    let mut conn = Connection::<u64>::new(side, WindowConfig::default());
    let mut started = 0u64;
    let mut pending = std::collections::BTreeSet::new();
    let mut last_ping = None;
    for step in steps {
        match step.clone() {
            Step::Feed(frame) => {
                let expected = expected_error(side, &frame);
                let closed = conn.is_closed();
                match conn.handle(frame, now) {
                    Err(e) => {
                        prop_assert!(!closed, "a closed core reported {e}");
                        prop_assert_eq!(Some(e), expected);
                    }
                    Ok(event) => {
                        prop_assert!(closed || expected.is_none(), "{:?} accepted", expected);
                        prop_assert!(!closed || event.is_none());
                        match event {
                            Some(Event::Request(_) | Event::Cancel { .. }) => {
                                prop_assert_eq!(side, Side::Host)
                            }
                            Some(Event::Reply { reply, slot, .. }) => {
                                prop_assert_eq!(side, Side::Client);
                                prop_assert_eq!(slot, reply.call_id);
                                prop_assert!(pending.remove(&slot));
                            }
                            Some(Event::GoAway(_)) => {
                                prop_assert_eq!(side, Side::Client);
                                prop_assert!(conn.is_going_away());
                            }
                            Some(Event::StreamFailed { error, .. }) => {
                                prop_assert!(
                                    matches!(error, FlowError::WindowExceeded { .. }),
                                    "{:?}",
                                    error
                                );
                            }
                            Some(Event::OutboundStopped { call_id, .. }) => {
                                prop_assert_eq!(conn.send_credit(call_id), None);
                            }
                            Some(Event::Credit { call_id }) => {
                                prop_assert!(conn.send_credit(call_id).is_some());
                            }
                            Some(Event::StreamData { .. } | Event::StreamEnd { .. }) | None => {}
                            Some(other) => {
                                prop_assert!(false, "an event of a later version: {other:?}")
                            }
                        }
                    }
                }
            }
            Step::StartCall { download, upload } => {
                if side == Side::Client {
                    let slot = started + 1;
                    match conn.start_call(slot, download, upload) {
                        Ok(id) => {
                            started += 1;
                            prop_assert_eq!(id, slot);
                            pending.insert(id);
                        }
                        Err((CallRejected::Closed(_), s)) => {
                            prop_assert!(conn.is_closed());
                            prop_assert_eq!(s, slot);
                        }
                        Err((CallRejected::GoingAway, s)) => {
                            prop_assert!(conn.is_going_away());
                            prop_assert_eq!(s, slot);
                        }
                        Err((other, _)) => prop_assert!(false, "unknown rejection {other:?}"),
                    }
                }
            }
            Step::CancelCall(id) => {
                let slot = conn.cancel_call(id);
                prop_assert_eq!(slot.is_some(), pending.remove(&id));
                prop_assert_eq!(conn.send_credit(id), None);
            }
            Step::ForgetCall(id) => {
                let slot = conn.forget_call(id);
                prop_assert_eq!(slot.is_some(), pending.remove(&id));
            }
            Step::Consumed(id, n) => conn.consumed(id, n, now),
            Step::Abandon(id) => {
                conn.abandon_inbound(id);
            }
            Step::CloseInbound(id) => {
                conn.close_inbound(id);
            }
            Step::OpenInbound(id) => conn.open_inbound(id, now),
            Step::OpenOutbound(id) => conn.open_outbound(id),
            Step::Sent(id, n) => {
                let credit = conn.send_credit(id).unwrap_or(0) as usize;
                conn.on_sent(id, n.min(credit));
            }
            Step::Finish(id, status) => {
                let registered = conn.send_credit(id).is_some();
                prop_assert_eq!(
                    conn.finish_outbound(id, status, Bytes::from_static(b"done")),
                    registered
                );
            }
            Step::Stop(id) => {
                let registered = conn.send_credit(id).is_some();
                prop_assert_eq!(conn.stop_outbound(id), registered);
            }
            Step::Ping => conn.ping(now),
            Step::Pong => {
                if let Some(nonce) = last_ping.take() {
                    prop_assert_eq!(conn.handle(Frame::Pong(nonce), now), Ok(None));
                }
            }
            Step::SetRtt(n) => conn.set_rtt(ms(n)),
            Step::Wait(n) => now += ms(n),
            Step::GoAway => {
                if side == Side::Host {
                    conn.go_away("draining");
                    prop_assert!(conn.is_going_away() || conn.is_closed());
                }
            }
            Step::Close => {
                let closed = conn.close("closed");
                for (id, slot) in &closed.calls {
                    prop_assert_eq!(id, slot);
                    prop_assert!(pending.remove(id));
                }
                prop_assert!(pending.is_empty());
            }
        }
        prop_assert_eq!(conn.pending_calls(), pending.len());
        if let Some(rtt) = conn.rtt() {
            prop_assert!(rtt > Duration::ZERO);
        }
        // Everything queued is a frame this side may send, and encodes.
        while let Some(frame) = conn.poll_transmit() {
            let allowed = match &frame {
                Frame::Request(_) | Frame::Reply(_) | Frame::StreamData(_) => false,
                Frame::Cancel(_) => side == Side::Client,
                Frame::GoAway(_) => side == Side::Host,
                Frame::Ping(nonce) => {
                    last_ping = Some(*nonce);
                    true
                }
                _ => true,
            };
            prop_assert!(allowed, "{:?} sent {:?}", side, frame);
            let mut wire = BytesMut::new();
            prop_assert_eq!(codec.encode(&frame, &mut wire), Ok(()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_frames_never_panic_and_errors_are_documented(steps in vec(step(), 0..80)) {
        run(Side::Client, &steps)?;
        run(Side::Host, &steps)?;
    }
}

// ---- two cores, through the codec

/// One direction of a connection: frames are encoded and decoded as on a socket.
struct Link {
    codec: Codec,
    wire: BytesMut,
}

impl Link {
    fn new() -> Link {
        Link {
            codec: Codec::new(Limits::default()),
            wire: BytesMut::new(),
        }
    }

    fn send(&mut self, frame: &Frame) {
        self.codec.encode(frame, &mut self.wire).unwrap();
    }

    /// Moves what `from` queued onto the wire; returns it too.
    fn flush<C>(&mut self, from: &mut Connection<C>) -> Vec<Frame> {
        let frames = drain(from);
        for frame in &frames {
            self.send(frame);
        }
        frames
    }

    /// Delivers everything on the wire to `to`.
    fn deliver<C>(&mut self, to: &mut Connection<C>, now: Instant) -> Vec<Event<C>> {
        let mut events = vec![];
        while let Some(frame) = self.codec.decode(&mut self.wire).unwrap() {
            events.extend(to.handle(frame, now).unwrap());
        }
        assert!(self.wire.is_empty());
        events
    }
}

/// The events for the stream data of one call, as (bytes, other events).
fn stream_bytes<C>(events: Vec<Event<C>>, call_id: u64) -> (usize, Vec<Event<C>>) {
    let mut bytes = 0;
    let mut rest = vec![];
    for event in events {
        match event {
            Event::StreamData { call_id: id, data } if id == call_id => bytes += data.len(),
            other => rest.push(other),
        }
    }
    (bytes, rest)
}

#[test]
fn two_cores_over_the_codec() {
    const CHUNK: usize = 64 * 1024;
    let mut now = Instant::now();
    let mut c = client();
    let mut h = host();
    let mut up = Link::new(); // client → host
    let mut down = Link::new(); // host → client

    // The host measures the round trip: 10 ms.
    h.ping(now);
    down.flush(&mut h);
    assert!(down.deliver(&mut c, now).is_empty());
    up.flush(&mut c);
    now += ms(10);
    assert!(up.deliver(&mut h, now).is_empty());
    assert_eq!(h.rtt(), Some(ms(10)));
    c.set_rtt(ms(10));

    // 1. An upload of 4 MiB: the host's window grows, so the client's credit does too.
    let total = 4 << 20;
    let id = c.start_call("upload", false, true).unwrap();
    up.send(&request(id, true));
    let events = up.deliver(&mut h, now);
    assert!(matches!(&events[..], [Event::Request(r)] if r.flags.streamed));
    let (mut sent, mut received, mut most_credit) = (0, 0, 0);
    while sent < total {
        let credit = c.send_credit(id).unwrap() as usize;
        most_credit = most_credit.max(credit);
        let n = CHUNK.min(credit).min(total - sent);
        assert!(n > 0, "stalled at {sent}");
        c.on_sent(id, n);
        up.send(&data(id, n));
        sent += n;
        // The host's application reads what arrived, a millisecond later.
        now += ms(1);
        let (bytes, rest) = stream_bytes(up.deliver(&mut h, now), id);
        assert!(rest.is_empty(), "{rest:?}");
        received += bytes;
        h.consumed(id, bytes, now);
        for event in {
            down.flush(&mut h);
            down.deliver(&mut c, now)
        } {
            assert_eq!(event, Event::Credit { call_id: id });
        }
    }
    assert_eq!(received, total);
    assert!(
        most_credit > 2 * WINDOW,
        "the window did not grow: {most_credit}"
    );
    assert!(c.finish_outbound(id, StatusCode::Ok, Bytes::new()));
    up.flush(&mut c);
    assert_eq!(
        up.deliver(&mut h, now),
        [Event::StreamEnd {
            call_id: id,
            status: StatusCode::Ok,
            message: Bytes::new(),
        }]
    );
    down.send(&reply(id, StatusCode::Ok));
    let events = down.deliver(&mut c, now);
    assert!(matches!(&events[..], [Event::Reply { slot: "upload", .. }]));

    // 2. A streamed reply of 1 MiB: registered before the Ok reply, pumped within credit.
    let total = 1 << 20;
    let id = c.start_call("download", true, false).unwrap();
    up.send(&request(id, false));
    assert_eq!(up.deliver(&mut h, now).len(), 1);
    h.open_outbound(id);
    down.send(&reply(id, StatusCode::Ok));
    let (mut sent, mut received) = (0, 0);
    let mut replied = false;
    while sent < total {
        let credit = h.send_credit(id).unwrap() as usize;
        let n = CHUNK.min(credit).min(total - sent);
        assert!(n > 0, "stalled at {sent}");
        h.on_sent(id, n);
        down.send(&data(id, n));
        sent += n;
        now += ms(1);
        let (bytes, rest) = stream_bytes(down.deliver(&mut c, now), id);
        for event in rest {
            assert!(matches!(
                event,
                Event::Reply {
                    slot: "download",
                    download: true,
                    ..
                }
            ));
            replied = true;
        }
        received += bytes;
        c.consumed(id, bytes, now);
        up.flush(&mut c);
        for event in up.deliver(&mut h, now) {
            assert_eq!(event, Event::Credit { call_id: id });
        }
    }
    assert!(replied);
    assert_eq!(received, total);
    assert!(h.finish_outbound(id, StatusCode::Ok, Bytes::new()));
    down.flush(&mut h);
    assert!(matches!(
        &down.deliver(&mut c, now)[..],
        [Event::StreamEnd {
            status: StatusCode::Ok,
            ..
        }]
    ));

    // 3. A cancelled upload: the host forgets both streams; late credit is dropped.
    let id = c.start_call("cancelled", false, true).unwrap();
    up.send(&request(id, true));
    up.deliver(&mut h, now);
    c.on_sent(id, 100);
    up.send(&data(id, 100));
    let (bytes, _) = stream_bytes(up.deliver(&mut h, now), id);
    h.consumed(id, bytes, now);
    h.open_outbound(id);
    assert_eq!(c.cancel_call(id), Some("cancelled"));
    assert_eq!(c.send_credit(id), None);
    assert_eq!(up.flush(&mut c), [Frame::Cancel(Cancel { call_id: id })]);
    assert_eq!(up.deliver(&mut h, now), [Event::Cancel { call_id: id }]);
    assert!(!h.close_inbound(id));
    assert_eq!(h.send_credit(id), None);
    down.send(&window_update(id, 1000));
    assert!(down.deliver(&mut c, now).is_empty());

    // 4. A download abandoned halfway: StopSending, and the host ends its stream as cancelled.
    let id = c.start_call("abandoned", true, false).unwrap();
    up.send(&request(id, false));
    up.deliver(&mut h, now);
    h.open_outbound(id);
    down.send(&reply(id, StatusCode::Ok));
    h.on_sent(id, 10);
    down.send(&data(id, 10));
    assert_eq!(down.deliver(&mut c, now).len(), 2);
    assert!(c.abandon_inbound(id));
    up.flush(&mut c);
    assert_eq!(
        up.deliver(&mut h, now),
        [Event::OutboundStopped {
            call_id: id,
            error: None,
        }]
    );
    assert!(!h.finish_outbound(id, StatusCode::Ok, Bytes::new()));
    down.flush(&mut h);
    assert!(down.deliver(&mut c, now).is_empty());

    // 5. GoAway: no new calls, but the call already sent is answered.
    let id = c.start_call("last", false, false).unwrap();
    up.send(&request(id, false));
    up.deliver(&mut h, now);
    h.go_away("host shutting down");
    down.flush(&mut h);
    assert_eq!(
        down.deliver(&mut c, now),
        [Event::GoAway(GoAway {
            last_call_id: id,
            reason: "host shutting down".into(),
        })]
    );
    assert_eq!(
        c.start_call("refused", false, false),
        Err((CallRejected::GoingAway, "refused"))
    );
    down.send(&reply(id, StatusCode::ShuttingDown));
    assert!(matches!(
        &down.deliver(&mut c, now)[..],
        [Event::Reply { slot: "last", .. }]
    ));

    // Nothing is left open on either side.
    let closed = c.close("done");
    assert!(closed.calls.is_empty() && closed.inbound.is_empty() && closed.outbound.is_empty());
    let closed = h.close("done");
    assert!(closed.calls.is_empty() && closed.inbound.is_empty() && closed.outbound.is_empty());
}

#[test]
fn a_host_measures_the_round_trip_at_its_first_streamed_request_only() {
    let now = Instant::now();
    let mut h = host();
    // Unary calls need no round-trip time: the host sends nothing of its own.
    feed(&mut h, request(1, false), now);
    assert_eq!(drain(&mut h), []);
    // The first streamed request does (its window grows against it): one Ping, the
    // measurement, whose Pong gives the sample.
    feed(&mut h, request(2, true), now);
    let frames = drain(&mut h);
    let [Frame::Ping(nonce)] = frames[..] else {
        panic!("expected one Ping, got {frames:?}");
    };
    // Another stream while that Ping is out sends none.
    feed(&mut h, request(3, true), now);
    assert_eq!(drain(&mut h), []);
    feed(&mut h, Frame::Pong(nonce), now + ms(40));
    assert_eq!(h.rtt(), Some(ms(40)));
    // Nor once there is a sample.
    feed(&mut h, request(4, true), now + ms(41));
    assert_eq!(drain(&mut h), []);
}
