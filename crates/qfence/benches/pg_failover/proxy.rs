//! The checks' network path for the soak: a TCP proxy in front of each server that delays
//! every chunk 5–40 ms and, for one chunk in a hundred, 200–1,000 ms, as a lost segment's
//! retransmission would (this kernel has no netem: `tc qdisc add ... netem` answers
//! "Specified qdisc kind is unknown").

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Delayed chunks so far, and how many of them were "lost" (the long delay).
pub static CHUNKS: AtomicU64 = AtomicU64::new(0);
pub static LOST: AtomicU64 = AtomicU64::new(0);

/// Starts a proxy to `127.0.0.1:to`; returns its port.
pub async fn start(to: u16) -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let port = l.local_addr()?.port();
    tokio::spawn(async move {
        let mut seed = u64::from(to).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        while let Ok((inbound, _)) = l.accept().await {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let s = seed;
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)).await else {
                    return;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::join!(pipe(ri, wo, s), pipe(ro, wi, s ^ 0xABCD));
            });
        }
    });
    Ok(port)
}

fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut seed: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        CHUNKS.fetch_add(1, Ordering::Relaxed);
        let r = next(&mut seed);
        let ms = if r.is_multiple_of(100) {
            LOST.fetch_add(1, Ordering::Relaxed);
            200 + (r >> 8) % 800
        } else {
            5 + (r >> 8) % 36
        };
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
