//! Faults every simulator can suffer, whatever protocol it speaks.
//!
//! Two layers: the connection (unreachable for everyone or for some source addresses, a
//! wrong TLS certificate) and HTTP (added latency, a storm of 5xx answers). Protocol faults
//! (a BMC that answers 409 when already off, a slow power change, flapping replication) live
//! in each simulator's own state.
//!
//! [`Faults`] is a cheap clone shared by the handle and the server. Every change bumps an
//! epoch; open connections compare it with the one they were opened under and break when
//! the change concerns them, so a fault takes effect on the very next request.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::watch;

/// How an unreachable simulator treats a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Close it at once: the client sees "connection reset" or "refused" quickly.
    Refuse,
    /// Accept it and never answer: the client waits for its own deadline, as with a dead
    /// route or a powered-off network card.
    Blackhole,
}

/// A run of HTTP errors: every request gets `status` until `remaining` reaches zero
/// (`None`: until cleared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorStorm {
    /// The HTTP status, normally 5xx (500, 502, 503, 504).
    pub status: u16,
    /// How many more requests get it; `None` for as long as the storm is set.
    pub remaining: Option<u32>,
}

/// The protocol-independent faults currently set on one simulator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultSet {
    /// Unreachable for every client, and how.
    pub unreachable: Option<Cut>,
    /// Unreachable for these source addresses only (a partition between sites on loopback:
    /// give each site's orchestrator its own 127.0.0.x address).
    pub cut_peers: BTreeMap<IpAddr, Cut>,
    /// Serve a different self-signed certificate than the one published.
    pub wrong_certificate: bool,
    /// Wait this long before answering each request.
    pub latency: Duration,
    /// Answer requests with an error status.
    pub error_storm: Option<ErrorStorm>,
}

/// What the accept loop does with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    Refuse,
    Blackhole,
}

/// Shared, live fault switches of one simulator. Clones control the same simulator.
#[derive(Debug, Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    set: Mutex<FaultSet>,
    /// The simulated host behind the API is off: nothing listens (connection refused).
    host_down: Mutex<bool>,
    epoch: watch::Sender<u64>,
    certificate_epoch: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                set: Mutex::new(FaultSet::default()),
                host_down: Mutex::new(false),
                epoch: watch::channel(0).0,
                certificate_epoch: AtomicU64::new(0),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FaultSet> {
        // A panic while holding this lock cannot leave a FaultSet half-written: keep going.
        self.inner.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) -> u64 {
        let mut next = 0;
        self.inner.epoch.send_modify(|e| {
            *e += 1;
            next = *e;
        });
        next
    }

    /// The faults currently set.
    pub fn snapshot(&self) -> FaultSet {
        self.lock().clone()
    }

    /// Replaces every fault at once (`FaultSet::default()` heals everything).
    pub fn set(&self, faults: FaultSet) {
        let certificate_changed = {
            let mut set = self.lock();
            let changed = set.wrong_certificate != faults.wrong_certificate;
            *set = faults;
            changed
        };
        let epoch = self.bump();
        if certificate_changed {
            self.inner.certificate_epoch.store(epoch, Ordering::SeqCst);
        }
    }

    /// Changes some faults, leaving the others as they are.
    pub fn update(&self, change: impl FnOnce(&mut FaultSet)) {
        let mut next = self.snapshot();
        change(&mut next);
        self.set(next);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.set(FaultSet::default());
    }

    /// Makes the simulator unreachable for everyone (`Some`) or reachable again (`None`).
    pub fn set_unreachable(&self, cut: Option<Cut>) {
        self.update(|f| f.unreachable = cut);
    }

    /// Makes the simulator unreachable from one source address.
    pub fn cut_peer(&self, peer: IpAddr, cut: Cut) {
        self.update(|f| {
            f.cut_peers.insert(peer, cut);
        });
    }

    /// Makes the simulator reachable again from one source address.
    pub fn restore_peer(&self, peer: IpAddr) {
        self.update(|f| {
            f.cut_peers.remove(&peer);
        });
    }

    /// Serves the impostor certificate (`true`) or the published one (`false`).
    pub fn set_wrong_certificate(&self, on: bool) {
        self.update(|f| f.wrong_certificate = on);
    }

    /// Delays every answer by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.update(|f| f.latency = latency);
    }

    /// Starts (`Some`) or stops (`None`) an error storm.
    pub fn set_error_storm(&self, storm: Option<ErrorStorm>) {
        self.update(|f| f.error_storm = storm);
    }

    pub(crate) fn set_host_down(&self, down: bool) {
        let changed = {
            let mut host_down = self
                .inner
                .host_down
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *host_down, down) != down
        };
        if changed {
            self.bump();
        }
    }

    pub(crate) fn gate(&self, peer: IpAddr) -> Gate {
        if *self
            .inner
            .host_down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
        {
            return Gate::Refuse;
        }
        let set = self.lock();
        match set
            .unreachable
            .or_else(|| set.cut_peers.get(&peer).copied())
        {
            None => Gate::Open,
            Some(Cut::Refuse) => Gate::Refuse,
            Some(Cut::Blackhole) => Gate::Blackhole,
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        *self.inner.epoch.borrow()
    }

    /// Resolves at the next change of any fault.
    pub(crate) async fn changed(&self) {
        let mut rx = self.inner.epoch.subscribe();
        let _ = rx.changed().await;
    }

    pub(crate) fn wrong_certificate(&self) -> bool {
        self.lock().wrong_certificate
    }

    pub(crate) fn certificate_changed_since(&self, epoch: u64) -> bool {
        self.inner.certificate_epoch.load(Ordering::SeqCst) > epoch
    }

    /// The HTTP status the next request must get, if a storm is on (counts it down).
    fn take_storm(&self) -> Option<StatusCode> {
        let (status, ended) = {
            let mut set = self.lock();
            let storm = set.error_storm.as_mut()?;
            let status =
                StatusCode::from_u16(storm.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let ended = match storm.remaining.as_mut() {
                None => false,
                Some(0) => return None,
                Some(n) => {
                    *n -= 1;
                    *n == 0
                }
            };
            if ended {
                set.error_storm = None;
            }
            (status, ended)
        };
        if ended {
            self.bump();
        }
        Some(status)
    }
}

/// The HTTP-level faults, as an axum middleware: latency first, then the storm. `render`
/// writes the error in the simulator's own protocol.
pub(crate) async fn http_faults(
    faults: Faults,
    render: fn(StatusCode) -> Response,
    request: Request,
    next: Next,
) -> Response {
    let latency = faults.snapshot().latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(status) = faults.take_storm() {
        return render(status);
    }
    next.run(request).await
}
