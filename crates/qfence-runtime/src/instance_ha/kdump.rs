//! The fence_kdump listener: a crashed compute host whose kdump kernel runs
//! `fence_kdump_send` says so in UDP datagrams (port 7410 by default, one every 10 s), and
//! the core waits for its dump to end before fencing it (step 7, `check_kdump`).
//!
//! # The message
//!
//! fence-agents' `fence_kdump_msg_t`: two `uint32_t`, packed, in the sender's byte order:
//! the magic number `0x1B302A40` and the version, `1` (`FENCE_KDUMP_MSGV1`), 8 bytes. Like
//! `fence_kdump`, which reads `sizeof (msg)`, bytes past the eighth are ignored; anything
//! shorter, with another magic number or another version is refused with a log line.
//! The byte order is read from the magic number, so a big-endian sender is understood too.
//!
//! # Whose message
//!
//! The datagram names no host: as `fence_kdump` does, the sender's address says whose it is.
//! A host's configured `address` matches first; otherwise its name is resolved (as
//! `fence_kdump -n` resolves the node's name), only for hosts waiting on their dump.
//! Every orchestrator listens, so a new leader has the messages of the last minutes too;
//! [`Heard`] keeps them by sender and port, and the cloud's loop maps them to hosts.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_core::Millis;
use qfence_model::config::{CloudConfig, HostName};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::Clock;
use crate::shared::lock;

/// `FENCE_KDUMP_MAGIC`.
pub const MAGIC: u32 = 0x1B30_2A40;
/// `FENCE_KDUMP_MSGV1`, the only version fence-agents defines.
pub const VERSION_1: u32 = 1;
/// The message's size: magic and version.
const MESSAGE_LEN: usize = 8;
/// Messages older than this are forgotten: past the longest sensible `kdump_max_wait_seconds`
/// plus a timeout, with room for a leader change.
pub const KEEP: Duration = Duration::from_secs(15 * 60);
/// Messages kept per sender (fence_kdump_send's 10 s interval fills 90 in `KEEP`).
const PER_SENDER: usize = 128;
/// Senders kept per port: a flood from spoofed addresses cannot grow memory without bound.
const SENDERS: usize = 4096;
/// A sender's refused datagrams are logged once per this, not each.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a datagram is not a fence_kdump message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    Short { len: usize },
    Magic(u32),
    Version(u32),
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Short { len } => write!(
                f,
                "{len} byte(s), a fence_kdump message has {MESSAGE_LEN} (magic and version)"
            ),
            Malformed::Magic(m) => write!(f, "magic number {m:#010X}, expected {MAGIC:#010X}"),
            Malformed::Version(v) => write!(f, "version {v}, expected {VERSION_1}"),
        }
    }
}

/// Reads one datagram as a fence_kdump message.
pub fn parse(datagram: &[u8]) -> Result<(), Malformed> {
    let Some((magic, version)) = datagram.first_chunk::<MESSAGE_LEN>().map(|b| {
        let (m, v) = b.split_at(4);
        (
            <[u8; 4]>::try_from(m).expect("4 bytes"),
            <[u8; 4]>::try_from(v).expect("4 bytes"),
        )
    }) else {
        return Err(Malformed::Short {
            len: datagram.len(),
        });
    };
    let version = if u32::from_le_bytes(magic) == MAGIC {
        u32::from_le_bytes(version)
    } else if u32::from_be_bytes(magic) == MAGIC {
        u32::from_be_bytes(version)
    } else {
        return Err(Malformed::Magic(u32::from_le_bytes(magic)));
    };
    if version == VERSION_1 {
        Ok(())
    } else {
        Err(Malformed::Version(version))
    }
}

/// The messages heard on one port, by sender, oldest first.
#[derive(Debug, Default)]
pub struct Heard {
    by_sender: BTreeMap<IpAddr, VecDeque<Millis>>,
    /// When each sender's refused datagram was last logged.
    logged: BTreeMap<IpAddr, Millis>,
}

impl Heard {
    /// Records a message from `from` at `at`; false when refused (too many senders).
    pub fn record(&mut self, from: IpAddr, at: Millis) -> bool {
        self.forget_older_than(at);
        if !self.by_sender.contains_key(&from) && self.by_sender.len() >= SENDERS {
            return false;
        }
        let times = self.by_sender.entry(from).or_default();
        if times.len() >= PER_SENDER {
            times.pop_front();
        }
        times.push_back(at);
        true
    }

    /// Whether a refused datagram from `from` is to be logged now (once per `LOG_EVERY`).
    fn log_refusal(&mut self, from: IpAddr, at: Millis) -> bool {
        if self.logged.len() >= SENDERS {
            self.logged.clear();
        }
        match self.logged.get(&from) {
            Some(t) if at.since(*t) < LOG_EVERY => false,
            _ => {
                self.logged.insert(from, at);
                true
            }
        }
    }

    /// Forgets what is older than `KEEP` at `now`.
    fn forget_older_than(&mut self, now: Millis) {
        self.by_sender.retain(|_, times| {
            while times.front().is_some_and(|t| now.since(*t) > KEEP) {
                times.pop_front();
            }
            !times.is_empty()
        });
    }

    /// The messages from `from`, oldest first.
    pub fn from(&self, from: &IpAddr) -> impl Iterator<Item = Millis> + '_ {
        self.by_sender.get(from).into_iter().flatten().copied()
    }
}

/// The messages heard, by port.
pub type HeardByPort = Arc<Mutex<BTreeMap<u16, Heard>>>;

/// Each host's messages for the core: those from its configured `address`, else from the
/// addresses its name resolved to (`resolved`, none when not resolved), for every host Nova
/// reports.
pub fn by_host<'a, 'r>(
    cloud: &CloudConfig,
    heard: &Heard,
    hosts: impl Iterator<Item = &'a HostName>,
    resolved: impl Fn(&HostName) -> &'r [IpAddr],
) -> BTreeMap<HostName, Vec<Millis>> {
    let mut out = BTreeMap::new();
    for host in hosts {
        let configured = cloud.hosts.get(host.as_str()).and_then(|e| e.address);
        let addresses = match &configured {
            Some(a) => std::slice::from_ref(a),
            None => resolved(host),
        };
        let mut times: Vec<Millis> = addresses.iter().flat_map(|a| heard.from(a)).collect();
        if times.is_empty() {
            continue;
        }
        times.sort();
        times.dedup();
        out.insert(host.clone(), times);
    }
    out
}

/// The addresses `host`'s name resolves to, within `limit` (none when it does not resolve).
pub async fn resolve(host: &HostName, limit: Duration) -> Vec<IpAddr> {
    let lookup = tokio::net::lookup_host((host.as_str(), 0));
    match tokio::time::timeout(limit, lookup).await {
        Ok(Ok(addrs)) => {
            let mut v: Vec<IpAddr> = addrs.map(|a| a.ip().to_canonical()).collect();
            v.sort();
            v.dedup();
            v
        }
        _ => Vec::new(),
    }
}

/// A socket on `port` of every address: IPv6 and IPv4 together where the system allows,
/// else IPv4 alone.
pub async fn bind(port: u16) -> std::io::Result<UdpSocket> {
    match UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))).await {
        Ok(s) => Ok(s),
        Err(_) => UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], port))).await,
    }
}

/// Receives on `socket` until `stop`: each fence_kdump message is recorded in `heard` with
/// its time; anything else is refused with a log line (once a minute per sender).
pub async fn listen(socket: UdpSocket, heard: HeardByPort, clock: Clock, stop: CancellationToken) {
    let port = socket.local_addr().map_or(0, |a| a.port());
    let mut buf = [0u8; 64];
    loop {
        let got = tokio::select! {
            () = stop.cancelled() => break,
            got = socket.recv_from(&mut buf) => got,
        };
        let (len, from) = match got {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!(port, "The fence_kdump listener's receive failed: {e}");
                // An error may repeat at once: do not spin on it.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let at = clock.now();
        let sender = from.ip().to_canonical();
        let mut heard = lock(&heard);
        let heard = heard.entry(port).or_default();
        match parse(&buf[..len]) {
            Ok(()) => {
                if heard.record(sender, at) {
                    tracing::debug!(port, from = %sender, "A fence_kdump message arrived");
                } else if heard.log_refusal(sender, at) {
                    tracing::warn!(port, from = %sender, "A fence_kdump message was dropped: {SENDERS} senders are already kept");
                }
            }
            Err(why) => {
                if heard.log_refusal(sender, at) {
                    tracing::warn!(port, from = %sender, "A datagram that is not a fence_kdump message was refused: {why}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(magic: u32, version: u32) -> Vec<u8> {
        [magic.to_le_bytes(), version.to_le_bytes()].concat()
    }

    #[test]
    fn fence_kdump_sends_magic_and_version_one_in_its_byte_order() {
        // What fence_kdump_send sent on x86-64, captured.
        assert_eq!(parse(&[0x40, 0x2a, 0x30, 0x1b, 1, 0, 0, 0]), Ok(()));
        assert_eq!(parse(&[0x1b, 0x30, 0x2a, 0x40, 0, 0, 0, 1]), Ok(()));
        // fence_kdump reads 8 bytes and ignores the rest.
        assert_eq!(parse(&[message(MAGIC, 1), vec![9; 8]].concat()), Ok(()));
    }

    #[test]
    fn malformed_datagrams_are_refused_with_the_reason() {
        assert_eq!(parse(&[]), Err(Malformed::Short { len: 0 }));
        assert_eq!(
            parse(&message(MAGIC, 1)[..7]),
            Err(Malformed::Short { len: 7 })
        );
        assert_eq!(
            parse(&message(0xDEAD_BEEF, 1)),
            Err(Malformed::Magic(0xDEAD_BEEF))
        );
        assert_eq!(parse(&message(MAGIC, 2)), Err(Malformed::Version(2)));
        assert_eq!(
            Malformed::Magic(0xDEAD_BEEF).to_string(),
            "magic number 0xDEADBEEF, expected 0x1B302A40"
        );
    }

    #[test]
    fn old_messages_are_forgotten_and_a_sender_keeps_its_latest() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let mut h = Heard::default();
        assert!(h.record(a, Millis(1_000)));
        let later = Millis(1_000).plus(KEEP).plus(Duration::from_millis(1));
        assert!(h.record(b, later));
        assert_eq!(h.from(&a).count(), 0, "older than KEEP");
        for i in 0..PER_SENDER as u64 + 5 {
            h.record(b, Millis(later.0 + i));
        }
        let times: Vec<Millis> = h.from(&b).collect();
        assert_eq!(times.len(), PER_SENDER);
        assert_eq!(times.last(), Some(&Millis(later.0 + PER_SENDER as u64 + 4)));
    }

    #[test]
    fn a_refused_sender_is_logged_once_a_minute() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mut h = Heard::default();
        assert!(h.log_refusal(a, Millis(0)));
        assert!(!h.log_refusal(a, Millis(59_000)));
        assert!(h.log_refusal(a, Millis(60_000)));
    }

    #[test]
    fn a_message_is_a_hosts_by_its_configured_address_else_by_its_resolved_name() {
        let text = "cluster: {name: t}\nsites: {dc1: {}}\norchestrators:\n  o1: {site: dc1, \
                    address: \"127.0.0.1:7401\"}\ncontrollers:\n  nova: {type: nova, endpoint: \
                    \"https://k:5000/v3\", site: dc1, secret: nv, username: u, project: p}\n\
                    instance_ha:\n  c:\n    nova: nova\n    hosts:\n      \
                    compute-1: {address: 192.0.2.1}\n";
        let loaded = qfence_model::config::load_str(text, "t.yaml").unwrap();
        let cloud = loaded.config.cloud("c").unwrap().clone();
        let host = |h: &str| HostName::new(h).unwrap();
        let ip = |a: &str| -> IpAddr { a.parse().unwrap() };
        let mut heard = Heard::default();
        heard.record(ip("192.0.2.1"), Millis(10));
        heard.record(ip("192.0.2.2"), Millis(20));
        heard.record(ip("192.0.2.2"), Millis(30));
        heard.record(ip("192.0.2.9"), Millis(40));
        // compute-1's name resolving elsewhere does not matter: its address is configured.
        let resolved = BTreeMap::from([
            (host("compute-1"), vec![ip("192.0.2.9")]),
            (host("compute-2"), vec![ip("192.0.2.2")]),
        ]);
        let hosts = [host("compute-1"), host("compute-2"), host("compute-3")];
        let got = by_host(&cloud, &heard, hosts.iter(), |h| {
            resolved.get(h).map_or(&[][..], Vec::as_slice)
        });
        assert_eq!(
            got,
            BTreeMap::from([
                (host("compute-1"), vec![Millis(10)]),
                (host("compute-2"), vec![Millis(20), Millis(30)]),
            ])
        );
    }

    #[tokio::test]
    async fn a_name_resolves_to_its_addresses() {
        let localhost = HostName::new("localhost").unwrap();
        let addrs = resolve(&localhost, Duration::from_secs(2)).await;
        assert!(
            addrs.contains(&"127.0.0.1".parse().unwrap())
                || addrs.contains(&"::1".parse().unwrap()),
            "{addrs:?}"
        );
        let nowhere = HostName::new("no-such-host.invalid").unwrap();
        assert!(resolve(&nowhere, Duration::from_secs(2)).await.is_empty());
    }
}
