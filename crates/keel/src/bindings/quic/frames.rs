//! What both ends of a `quic://` call share: keel-wire frames read from and written to one QUIC
//! stream, the stream ends as [`ByteStream`]s, and the application error codes.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use keel_wire::{Codec, Frame, StreamData, StreamEnd, WireError};

use crate::core::error::{Error, Kind};
use crate::core::status::StatusCode;
use crate::core::stream::ByteStream;
use crate::dispatch::{ReceiveBudget, Reservation};

/// QUIC application error codes keel sends (RESET_STREAM, STOP_SENDING, CONNECTION_CLOSE).
pub(crate) mod code {
    use quinn::VarInt;

    /// No error: the connection is closed after its calls are done (a drain, idle, the client
    /// closing).
    pub(crate) const NO_ERROR: VarInt = VarInt::from_u32(0);
    /// The caller no longer wants the call (its future was dropped, its deadline passed).
    pub(crate) const CANCELLED: VarInt = VarInt::from_u32(1);
    /// Host: the call was not processed (it arrived after GoAway): send it again elsewhere.
    pub(crate) const UNPROCESSED: VarInt = VarInt::from_u32(2);
    /// The peer broke the protocol on this stream (a malformed or oversized frame, a frame
    /// that did not finish in time); the stream is given up.
    pub(crate) const PROTOCOL: VarInt = VarInt::from_u32(3);
    /// The connection is closed for taking too long (a handshake, unsent output), or by a
    /// client whose host sent nothing while calls waited (`client::watch_busy`).
    pub(crate) const TIMED_OUT: VarInt = VarInt::from_u32(4);
}

/// Frames up to this size count against the connection's own receive budget only; larger ones
/// against the host's too (as an HTTP body's first 64 KiB), from when their length is known
/// until they are decoded.
const UNCOUNTED_FRAME: usize = 64 * 1024;

/// Why no frame came.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// The stream ended in the middle of a frame, the peer reset it, or the connection broke.
    Broken(String),
    /// The peer reset its side of the stream with this application code.
    Reset(u64),
    /// The stream was opened in 0-RTT data, which the host rejected: nothing of it arrived.
    ZeroRttRejected,
    /// The frame is larger than the limit (the rest of it is not read).
    TooLarge(WireError),
    /// The bytes are no keel-wire frame.
    Malformed(WireError),
    /// The frame did not finish arriving in time, or the budget had no room for it in time.
    TimedOut,
}

/// Reads keel-wire frames from one QUIC receive stream.
#[derive(Debug)]
pub(crate) struct FrameReader {
    recv: quinn::RecvStream,
    buf: BytesMut,
    codec: Codec,
    /// The host's receive budget, for frames above [`UNCOUNTED_FRAME`].
    budget: Option<ReceiveBudget>,
    /// The time a started frame has to finish (the host's frame timeout).
    frame_timeout: Option<Duration>,
}

impl FrameReader {
    /// A reader of `recv` with `codec`'s limits; on a host, with its `budget` and frame timeout.
    pub(crate) fn new(
        recv: quinn::RecvStream,
        codec: Codec,
        budget: Option<ReceiveBudget>,
        frame_timeout: Option<Duration>,
    ) -> FrameReader {
        FrameReader {
            recv,
            buf: BytesMut::new(),
            codec,
            budget,
            frame_timeout,
        }
    }

    /// The stream being read.
    pub(crate) fn recv_mut(&mut self) -> &mut quinn::RecvStream {
        &mut self.recv
    }

    /// The next frame, with the budget it holds (released when dropped); `Ok(None)` at the
    /// stream's clean end between frames. A frame that started arriving must finish within the
    /// frame timeout, if there is one.
    pub(crate) async fn next(&mut self) -> Result<Option<(Frame, Reservation)>, ReadFail> {
        let mut reserved = Reservation::default();
        let mut counted = false;
        let mut started: Option<tokio::time::Instant> = None;
        loop {
            let size = self.codec.pending_frame_size(&self.buf);
            if !self.buf.is_empty() {
                if let (false, Some(size), Some(budget)) = (counted, size, &self.budget) {
                    // Every byte of a frame is reserved before it is read: the connection's
                    // own budget for a small frame (no connection waits behind others' large
                    // ones for it), the connection's and the host's for a large one. Streams
                    // are many: even small frames, uncounted, would add up.
                    counted = true;
                    let deadline = self.deadline(&mut started);
                    let got = if size > UNCOUNTED_FRAME {
                        budget.reserve(size, deadline).await
                    } else {
                        budget.reserve_own(size, deadline).await
                    };
                    match got {
                        Some(r) => reserved.merge(r),
                        None => return Err(ReadFail::TimedOut),
                    }
                }
                match self.codec.decode(&mut self.buf) {
                    Ok(Some(frame)) => return Ok(Some((frame, reserved))),
                    Ok(None) => {}
                    Err(e @ WireError::TooLarge { .. }) => return Err(ReadFail::TooLarge(e)),
                    Err(e) => return Err(ReadFail::Malformed(e)),
                }
            }
            // Never more than the frame's own bytes: its length prefix first, then the rest of
            // it (reserved above), or a frame head's worth when the length is over the limit.
            let want = match size {
                _ if self.buf.len() < keel_wire::LEN_PREFIX_SIZE => {
                    keel_wire::LEN_PREFIX_SIZE - self.buf.len()
                }
                Some(size) => size.saturating_sub(self.buf.len()).max(1),
                None => 32,
            };
            let was_empty = self.buf.is_empty();
            let deadline = self.deadline(&mut started.clone());
            let read = self.recv.read_chunk(want, true);
            let chunk = match (self.frame_timeout, was_empty) {
                // Between frames, the stream may rest as long as its call runs.
                (Some(_), false) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(r) => r,
                    Err(_) => return Err(ReadFail::TimedOut),
                },
                _ => read.await,
            };
            match chunk {
                Ok(Some(chunk)) => {
                    if was_empty && started.is_none() {
                        // The frame starts now.
                        let _ = self.deadline(&mut started);
                    }
                    self.buf.extend_from_slice(&chunk.bytes);
                }
                Ok(None) if self.buf.is_empty() => return Ok(None),
                Ok(None) => return Err(ReadFail::Broken("the stream ended inside a frame".into())),
                Err(quinn::ReadError::Reset(code)) => return Err(ReadFail::Reset(code.into())),
                Err(quinn::ReadError::ZeroRttRejected) => return Err(ReadFail::ZeroRttRejected),
                Err(e) => return Err(ReadFail::Broken(e.to_string())),
            }
        }
    }

    /// When the frame being read must be whole (set when it starts).
    fn deadline(&self, started: &mut Option<tokio::time::Instant>) -> tokio::time::Instant {
        let start = *started.get_or_insert_with(tokio::time::Instant::now);
        start + self.frame_timeout.unwrap_or(Duration::from_secs(3600))
    }
}

/// Encodes `frame` with `codec`.
pub(crate) fn encode(codec: &Codec, frame: &Frame) -> Result<Bytes, WireError> {
    let mut buf = BytesMut::new();
    codec.encode(frame, &mut buf)?;
    Ok(buf.freeze())
}

/// The error for an inbound stream that ended with `status` other than `Ok`.
fn aborted(status: keel_wire::StatusCode, message: &[u8]) -> Error {
    Error::new(
        Kind::Status(StatusCode::from_wire(status)),
        String::from_utf8_lossy(message).into_owned(),
    )
}

/// An inbound stream (a streamed request's on the host, a streamed reply's on the client): the
/// StreamData frames of `reader` until its StreamEnd, read by a task of the current runtime (the
/// consumer may be a blocking handler on a pool thread, or a blocking client). Dropped before
/// its end, the QUIC stream is stopped (STOP_SENDING, [`code::CANCELLED`]). `held` lives as long
/// as the reading.
pub(crate) fn inbound(reader: FrameReader, held: Option<Box<dyn Send + Sync>>) -> ByteStream {
    // Two chunks may wait: QUIC's stream window is what bounds the bytes in flight.
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(read_inbound(reader, tx, held));
    ByteStream::from_results(Inbound { rx })
}

/// Reads `reader`'s stream into `tx` until its end, or until the consumer is gone.
async fn read_inbound(
    mut reader: FrameReader,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, Error>>,
    _held: Option<Box<dyn Send + Sync>>,
) {
    loop {
        let step = tokio::select! {
            step = read_step(&mut reader) => step,
            _ = tx.closed() => {
                let _ = reader.recv.stop(code::CANCELLED);
                return;
            }
        };
        match step {
            Step::Data(data) => {
                if tx.send(Ok(data)).await.is_err() {
                    let _ = reader.recv.stop(code::CANCELLED);
                    return;
                }
            }
            Step::End(None) => return,
            Step::End(Some(e)) => {
                let _ = reader.recv.stop(code::PROTOCOL);
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
}

/// What one read of an inbound stream gave.
enum Step {
    Data(Bytes),
    End(Option<Error>),
}

/// The consumer's end of an inbound stream.
struct Inbound {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, Error>>,
}

impl Stream for Inbound {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

async fn read_step(reader: &mut FrameReader) -> Step {
    loop {
        match reader.next().await {
            Ok(Some((Frame::StreamData(StreamData { data, .. }), _))) => {
                if !data.is_empty() {
                    return Step::Data(data);
                }
            }
            Ok(Some((
                Frame::StreamEnd(StreamEnd {
                    status, message, ..
                }),
                _,
            ))) => {
                return Step::End(
                    (status != keel_wire::StatusCode::Ok).then(|| aborted(status, &message)),
                )
            }
            // Frames a later version may add between data frames are skipped.
            Ok(Some(_)) => {}
            Ok(None) => {
                return Step::End(Some(Error::new(
                    Kind::Connection,
                    "the stream ended without its end frame",
                )))
            }
            Err(ReadFail::Reset(_) | ReadFail::ZeroRttRejected) => {
                return Step::End(Some(Error::new(
                    Kind::Connection,
                    "the peer reset the stream",
                )))
            }
            Err(ReadFail::TooLarge(e)) => {
                return Step::End(Some(Error::new(Kind::TooLarge, e.to_string())))
            }
            Err(ReadFail::Malformed(e)) => {
                return Step::End(Some(Error::new(Kind::Protocol, e.to_string())))
            }
            Err(ReadFail::TimedOut) => {
                return Step::End(Some(Error::new(
                    Kind::Timeout,
                    "a stream frame did not arrive in time",
                )))
            }
            Err(ReadFail::Broken(why)) => {
                return Step::End(Some(Error::new(Kind::Connection, why)))
            }
        }
    }
}

/// Writes `stream` to `send` as StreamData frames and a StreamEnd, each chunk at most
/// `max_chunk` bytes. Returns `Err` when the peer stopped the stream or the connection broke;
/// each write must make progress within `write_timeout`, if set (the peer must read).
pub(crate) async fn pump(
    send: &mut quinn::SendStream,
    codec: &Codec,
    mut stream: ByteStream,
    max_chunk: usize,
    write_timeout: Option<Duration>,
) -> Result<(), PumpFail> {
    let end = loop {
        match stream.next().await {
            None => break (keel_wire::StatusCode::Ok, Bytes::new()),
            Some(Ok(mut chunk)) => {
                while !chunk.is_empty() {
                    let data = chunk.split_to(chunk.len().min(max_chunk));
                    let frame = Frame::StreamData(StreamData { call_id: 0, data });
                    let bytes = encode(codec, &frame).map_err(|_| PumpFail::Broken)?;
                    write(send, bytes, write_timeout).await?;
                }
            }
            Some(Err(e)) => {
                let code = e
                    .status_code()
                    .map_or(keel_wire::StatusCode::Internal, |c| c.to_wire());
                break (code, Bytes::from(e.message().to_string()));
            }
        }
    };
    let frame = Frame::StreamEnd(StreamEnd {
        call_id: 0,
        status: end.0,
        message: end.1,
    });
    let bytes = encode(codec, &frame).map_err(|_| PumpFail::Broken)?;
    write(send, bytes, write_timeout).await
}

/// Why a stream could not be written to the end.
#[derive(Debug)]
pub(crate) enum PumpFail {
    /// The peer stopped the stream or the connection broke.
    Broken,
    /// The peer did not read within the write timeout.
    TimedOut,
}

/// Writes `bytes` to `send`, within `timeout` if set.
pub(crate) async fn write(
    send: &mut quinn::SendStream,
    bytes: Bytes,
    timeout: Option<Duration>,
) -> Result<(), PumpFail> {
    let written = send.write_chunk(bytes);
    let written = match timeout {
        Some(t) => tokio::time::timeout(t, written)
            .await
            .map_err(|_| PumpFail::TimedOut)?,
        None => written.await,
    };
    written.map_err(|_| PumpFail::Broken)
}
