//! The Proxmox VE simulator's read counters: every VM and replication read a client makes is
//! counted as it arrives, whatever the answer, so a benchmark sees what a refused client
//! costs too.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use qfence_lab::proxmox::VmReads;
use reqwest::{Method, StatusCode};

use crate::common::{call, phase};
use crate::proxmox::{ROOT_TOKEN, api, pve, state};

/// Which counter of [`VmReads`] a read adds to.
type Counter = fn(&VmReads) -> &AtomicU64;

/// Each counted read: its path and the counter it adds to.
const READS: [(&str, Counter); 4] = [
    ("/nodes/pve-b/qemu", |r| &r.listings),
    ("/nodes/pve-b/qemu/101/status/current", |r| {
        &r.status_current
    }),
    ("/nodes/pve-b/replication", |r| &r.job_listings),
    ("/nodes/pve-b/replication/101-0/status", |r| &r.job_status),
];

#[tokio::test]
async fn a_refused_read_still_counts_as_a_read() -> Result<()> {
    let (h, c) = pve(state()).await?;
    let base = format!("{}/api2/json", h.base_url());
    for (path, counter) in READS {
        phase(&format!(
            "{path}: no credentials, then a wrong secret: 401, each counted"
        ));
        let none = call(c.get(format!("{base}{path}"))).await?;
        assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(counter(h.reads()).load(Ordering::Relaxed), 1, "{path}");
        let wrong = "PVEAPIToken=root@pam!qfence=wrong";
        let bad = api(&c, &h, Method::GET, path, wrong).await?;
        assert_eq!(bad.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(counter(h.reads()).load(Ordering::Relaxed), 2, "{path}");

        phase(&format!("{path}: the root token's read counts once more"));
        let read = api(&c, &h, Method::GET, path, ROOT_TOKEN).await?;
        assert_ne!(read.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(counter(h.reads()).load(Ordering::Relaxed), 3, "{path}");
    }
    phase("each read counted only under its own kind");
    for (path, counter) in READS {
        assert_eq!(counter(h.reads()).load(Ordering::Relaxed), 3, "{path}");
    }
    h.shutdown().await;
    Ok(())
}
