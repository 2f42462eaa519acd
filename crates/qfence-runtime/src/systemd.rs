//! The systemd notification protocol (`sd_notify(3)`), spoken directly: one datagram of
//! `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET`. No libsystemd: the
//! protocol is a datagram, and a C library would be the only one in the binary.
//!
//! `qfence serve` under `Type=notify` sends `READY=1` once it has joined the cluster, served
//! its API and finished its first engine tick; `WATCHDOG=1` from the engine's decision loop
//! itself (see [`crate::engine::Heartbeat`]), so a loop that hangs stops the keep-alives and
//! systemd restarts the service after `WatchdogSec=`; `STATUS=` with a short sentence;
//! `STOPPING=1` when it starts draining. Outside systemd (`$NOTIFY_SOCKET` unset) nothing is
//! sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A handle on the service manager's notification socket (cheap to clone).
#[derive(Debug, Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    socket: UnixDatagram,
    to: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier systemd handed this process, if any: `$NOTIFY_SOCKET` (a path, or `@name`
    /// in the abstract namespace) and `$WATCHDOG_USEC` (ignored when `$WATCHDOG_PID` names
    /// another process). A socket that cannot be used is said at WARN and is no notifier.
    pub fn from_env() -> Option<Self> {
        let socket = std::env::var_os("NOTIFY_SOCKET")?;
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|us| *us > 0)
            .filter(|_| {
                std::env::var("WATCHDOG_PID")
                    .ok()
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_none_or(|p| p == std::process::id())
            })
            .map(Duration::from_micros);
        match Self::connect(Path::new(&socket), watchdog) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(socket = ?socket, error = %e,
                    "The service manager's notification socket cannot be used; not notifying it");
                None
            }
        }
    }

    /// A notifier sending to the socket at `path` (`@name`: the abstract namespace), with
    /// the service's watchdog timeout, if it has one.
    pub fn connect(path: &Path, watchdog: Option<Duration>) -> std::io::Result<Self> {
        let to = address(path)?;
        let socket = UnixDatagram::unbound()?;
        // A keep-alive is sent from the decision loop: never block it on a full socket.
        socket.set_nonblocking(true)?;
        Ok(Self {
            inner: Arc::new(Inner {
                socket,
                to,
                watchdog,
            }),
        })
    }

    /// The service's watchdog timeout (`WatchdogSec=`), if it has one.
    pub fn watchdog(&self) -> Option<Duration> {
        self.inner.watchdog
    }

    /// How often to send keep-alives: half the watchdog timeout, as sd_watchdog_enabled(3)
    /// advises.
    pub fn keepalive_every(&self) -> Option<Duration> {
        self.inner.watchdog.map(|w| w / 2)
    }

    /// Sends one notification (`KEY=VALUE` lines). A failure is logged at DEBUG only: the
    /// service manager going away must not disturb the daemon.
    pub fn send(&self, message: &str) {
        if let Err(e) = self
            .inner
            .socket
            .send_to_addr(message.as_bytes(), &self.inner.to)
        {
            tracing::debug!(error = %e, "Could not notify the service manager");
        }
    }

    /// `READY=1` with a status sentence.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `WATCHDOG=1`: the decision loop is alive.
    pub fn keepalive(&self) {
        self.send("WATCHDOG=1");
    }

    /// `STATUS=...`: what `systemctl status` shows.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// `STOPPING=1` with a status sentence.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }
}

/// What the engine's decision loop says on its turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The first tick has run (once).
    FirstTick,
    /// The loop turned: a tick ran, or none was due.
    Alive,
}

/// What the decision loop tells a supervisor: [`Beat::FirstTick`] once, [`Beat::Alive`] on
/// every turn; with `every`, the loop turns at least that often even when no tick is due.
/// A loop that hangs (a tick stuck on a lock, a disk, the cluster) stops beating, and a
/// watchdog fed by the beats ([`Notifier::keepalive`]) restarts the process.
#[derive(Clone)]
pub struct Heartbeat {
    pub every: Option<Duration>,
    pub beat: Arc<dyn Fn(Beat) + Send + Sync>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Heartbeat {
    /// Sleeps until the next turn is due (forever without `every`).
    pub(crate) async fn due(this: Option<&Self>) {
        match this.and_then(|h| h.every) {
            Some(every) => tokio::time::sleep(every).await,
            None => std::future::pending().await,
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(target_os = "linux")]
fn address(path: &Path) -> std::io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    match path.as_os_str().as_bytes().split_first() {
        Some((b'@', name)) => SocketAddr::from_abstract_name(name),
        _ => SocketAddr::from_pathname(path),
    }
}

#[cfg(not(target_os = "linux"))]
fn address(path: &Path) -> std::io::Result<SocketAddr> {
    SocketAddr::from_pathname(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(socket: &UnixDatagram) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn notifications_arrive_as_datagrams_of_key_value_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_nonblocking(true).unwrap();
        let n = Notifier::connect(&path, Some(Duration::from_secs(60))).unwrap();
        assert_eq!(n.keepalive_every(), Some(Duration::from_secs(30)));
        n.ready("leading at term 3\nwith 2 plans");
        n.keepalive();
        n.stopping("draining");
        assert_eq!(
            received(&systemd),
            [
                "READY=1\nSTATUS=leading at term 3 with 2 plans",
                "WATCHDOG=1",
                "STOPPING=1\nSTATUS=draining"
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_socket_is_named_with_an_at_sign() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("qfence-notify-test-{}", std::process::id());
        let systemd =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        systemd.set_nonblocking(true).unwrap();
        let n = Notifier::connect(Path::new(&format!("@{name}")), None).unwrap();
        assert_eq!(n.keepalive_every(), None);
        n.keepalive();
        assert_eq!(received(&systemd), ["WATCHDOG=1"]);
    }

    #[test]
    fn a_manager_gone_away_disturbs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::connect(&path, None).unwrap();
        drop(systemd);
        n.keepalive();
        n.ready("still here");
    }
}

/// The keep-alive comes from the engine's own decision loop: a loop stuck on its event log's
/// disk stops it, and it resumes when the loop does.
#[cfg(test)]
mod loop_tests {
    use std::os::unix::net::UnixDatagram;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
    use qfence_cluster::tls::CertificateAuthority;
    use qfence_controllers::SecretStore;
    use qfence_model::OrchestratorId;
    use tokio_util::sync::CancellationToken;

    use super::{Beat, Heartbeat, Notifier};
    use crate::Metrics;
    use crate::events::{EventLog, JsonlStore};
    use crate::{ConfigCell, DriverExecutor, Engine, EngineOptions, LocalDrivers};

    /// Keep-alives received in `[from, to)`.
    fn keepalives(got: &[(Instant, String)], from: Instant, to: Instant) -> usize {
        got.iter()
            .filter(|(at, m)| *at >= from && *at < to && m == "WATCHDOG=1")
            .count()
    }

    async fn engine_at(dir: &std::path::Path, heartbeat: Heartbeat) -> (Engine, ClusterNode) {
        qfence_cluster::tls::install_crypto_provider();
        let text = include_str!("../../../examples/lab.yaml");
        let config = qfence_model::config::load_str(text, "lab.yaml")
            .expect("the lab configuration validates")
            .config;
        let me = OrchestratorId::new("dc1-a").unwrap();
        let ca = CertificateAuthority::generate("lab").unwrap();
        let cell = ConfigCell::new(config.clone(), text);
        // No secrets: every driver is unavailable and each check reads UNKNOWN at once.
        let drivers = Arc::new(LocalDrivers::build(
            me.clone(),
            &cell,
            &SecretStore::default(),
        ));
        let node = ClusterNode::start(
            NodeOptions {
                name: me,
                site: qfence_model::SiteId::new("dc1").unwrap(),
                witness: false,
                listen: "127.0.0.1:0".parse().unwrap(),
                advertise: None,
                data_dir: dir.join("data"),
                tls: ca.issue("dc1-a", &["127.0.0.1".into()]).unwrap(),
                timing: Timing::fast(),
                admin_api: false,
            },
            Arc::new(DriverExecutor(drivers)),
        )
        .await
        .unwrap();
        node.initialize().await.unwrap();
        let log = EventLog::open(JsonlStore::open(dir.join("events.jsonl")).unwrap()).unwrap();
        let mut options = EngineOptions::for_config(&config);
        options.heartbeat = Some(heartbeat);
        (
            Engine::new(cell, node.clone(), log, Metrics::new(), options),
            node,
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keepalives_come_from_the_decision_loop_and_stop_while_it_hangs() {
        let dir = tempfile::tempdir().unwrap();
        // systemd's end, read on a thread of its own: the hang below may block the runtime.
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 512];
                while !done.load(Ordering::SeqCst) {
                    if let Ok(n) = systemd.recv(&mut buf) {
                        got.push((
                            qfence_model::time::monotonic_now(),
                            String::from_utf8_lossy(&buf[..n]).into_owned(),
                        ));
                    }
                }
                got
            })
        };
        let notifier = Notifier::connect(&path, Some(Duration::from_millis(200))).unwrap();
        let n = notifier.clone();
        let heartbeat = Heartbeat {
            every: notifier.keepalive_every(),
            beat: Arc::new(move |beat| match beat {
                Beat::FirstTick => n.ready("first tick"),
                Beat::Alive => n.keepalive(),
            }),
        };
        let (engine, node) = engine_at(dir.path(), heartbeat).await;
        let stop = CancellationToken::new();
        let started = qfence_model::time::monotonic_now();
        let task = tokio::spawn(engine.clone().run(stop.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;

        // The event log's disk hangs for three seconds: the next tick that records an event
        // blocks on it (on a loaded machine, that tick can come most of a second later).
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let inner = engine.inner.clone();
        let holder = std::thread::spawn(move || {
            let events = inner.events.lock().unwrap();
            let from = qfence_model::time::monotonic_now();
            held_tx.send(from).unwrap();
            std::thread::sleep(Duration::from_secs(3));
            drop(events);
            (from, qfence_model::time::monotonic_now())
        });
        let _ = held_rx.recv();
        engine.wake();
        let (held, released) = tokio::task::spawn_blocking(move || holder.join().unwrap())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stop.cancel();
        task.await.unwrap();
        node.shutdown().await;
        done.store(true, Ordering::SeqCst);
        let got = reader.join().unwrap();

        let first = got.first().map(|(_, m)| m.as_str()).unwrap_or_default();
        assert!(first.starts_with("READY=1\n"), "READY=1 first: {got:?}");
        let ms = Duration::from_millis;
        let before = keepalives(&got, started + ms(500), held);
        let during = keepalives(&got, held + ms(1000), released);
        let after = keepalives(&got, released + ms(500), released + ms(1500));
        eprintln!("keep-alives: {before} before the hang, {during} during it, {after} after");
        assert!(
            before >= 10,
            "about ten keep-alives a second while the loop turns: {got:?}"
        );
        assert_eq!(during, 0, "none while the decision loop hangs: {got:?}");
        assert!(after >= 5, "they resume with the loop: {got:?}");
    }
}
