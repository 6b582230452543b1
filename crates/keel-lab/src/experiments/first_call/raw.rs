//! The seed's sequence on raw TCP, in the same process as keel's: what the machine alone
//! costs for a first round trip on a new connection, beside keel's first call.
//!
//! The echo host is one tokio runtime of two workers (keel's host runs on its own runtime
//! too); a sync test is a blocking `std::net::TcpStream`, an async test a tokio one on the
//! lab's client runtime. Each round trip is 40 bytes out and back, about keel's request.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::experiments::us;

/// Bytes each round trip sends and receives.
const MESSAGE: usize = 40;

/// What raw TCP measured: the seed's eight timed round trips and a steady-state p50.
#[derive(Debug)]
pub(super) struct Raw {
    /// The timed round trips, in the seed's order (sync, async, async, sync; two each).
    pub(super) calls_us: Vec<f64>,
    /// p50 of steady-state async round trips on one connection, µs.
    pub(super) steady_p50_us: f64,
}

/// Runs raw TCP's sequence and `steady` steady-state round trips on `rt`'s clients.
pub(super) fn run(rt: &tokio::runtime::Runtime, steady: usize) -> anyhow::Result<Raw> {
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("raw-echo")
        .enable_all()
        .build()?;
    let listener = host.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    host.spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(echo(socket));
        }
    });
    let mut calls_us = Vec::new();
    for is_async in [false, true, true, false] {
        if is_async {
            calls_us.extend(rt.block_on(async_round_trips(addr, 2))?);
        } else {
            calls_us.extend(sync_round_trips(addr, 2)?);
        }
    }
    let mut steady_us = rt.block_on(async_round_trips(addr, steady.max(1)))?;
    steady_us.sort_by(f64::total_cmp);
    let steady_p50_us = steady_us[steady_us.len() / 2];
    host.shutdown_background();
    Ok(Raw {
        calls_us,
        steady_p50_us,
    })
}

async fn echo(mut socket: tokio::net::TcpStream) {
    let _ = socket.set_nodelay(true);
    let mut buf = [0u8; 256];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if socket.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A new connection (not timed), then `n` timed round trips.
async fn async_round_trips(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    let mut buf = [0u8; MESSAGE];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        socket.write_all(&[1; MESSAGE]).await?;
        socket.read_exact(&mut buf).await?;
        out.push(us(t.elapsed()));
    }
    Ok(out)
}

/// A new blocking connection (not timed), then `n` timed round trips.
fn sync_round_trips(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut socket = std::net::TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let mut buf = [0u8; MESSAGE];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        socket.write_all(&[1; MESSAGE])?;
        socket.read_exact(&mut buf)?;
        out.push(us(t.elapsed()));
    }
    Ok(out)
}
