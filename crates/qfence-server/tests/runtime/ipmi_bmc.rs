//! An IPMI BMC for the dead-man runtime tests: RMCP+ (cipher suite 3) on loopback UDP, built
//! from the driver's wire module from the BMC's side (it computes RAKP 2 and 4 and checks
//! RAKP 3), with a watchdog that follows IPMI v2.0 §27 where `ipmi_sim` does not: Reset
//! Watchdog Timer restarts the countdown, so renewals postpone the expiry, and Get Watchdog
//! Timer answers all 8 bytes with the running bit and the present countdown. On expiry with
//! action power-down it powers the host off: the host's power is a `watch` line the
//! Proxmox simulator follows, as the Redfish simulator's is.
//!
//! The lab can reach behind qfence's back (`ipmitool mc watchdog off`, a BMC cold reset) and
//! cut the BMC off the network while its watchdog keeps running. [`UdpRelay`] does the same
//! for `ipmi_sim`, which runs in its own process.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_controllers::ipmi::wire::{self, CipherSuite, Rakp, SessionKeys, cmd, netfn, payload};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

const GUID: [u8; 16] = *b"qfence-lab-ipmi1";
const RC: [u8; 16] = [0x5A; 16];
/// The lab BMC's password (and ipmi_sim's, in start-ipmi-sim.sh).
pub const PASSWORD: &str = "password";

/// What the watchdog is doing, as the lab sees it.
#[derive(Debug, Clone, Default)]
pub struct Watchdog {
    pub action: u8,
    /// Tenths of a second; 0 = never set since the BMC started.
    pub initial: u16,
    pub running: bool,
    pub expires: Option<Instant>,
    /// Accepted Reset Watchdog Timer commands.
    pub resets: u32,
    /// Accepted Set Watchdog Timer commands.
    pub sets: u32,
    /// When it expired with action power-down and powered the host off.
    pub fired: Option<Instant>,
    /// The longest time between two accepted Resets (renewals), and when the last was.
    pub longest_gap: Duration,
    pub last_reset: Option<Instant>,
}

#[derive(Default)]
struct Session {
    rakp: Option<Rakp>,
    keys: Option<SessionKeys>,
    seq: u32,
}

struct State {
    session: Session,
    wd: Watchdog,
    /// Set Watchdog Timer is refused (a firmware that disabled the watchdog).
    refuse_set: bool,
    power: watch::Sender<bool>,
}

/// The lab's IPMI BMC of one host, stopped on drop.
pub struct LabIpmi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    dark: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for LabIpmi {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl LabIpmi {
    /// Starts it with the host powered on.
    pub async fn start() -> anyhow::Result<Self> {
        let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
        let addr = sock.local_addr()?;
        let (power, _) = watch::channel(true);
        let state = Arc::new(Mutex::new(State {
            session: Session::default(),
            wd: Watchdog::default(),
            refuse_set: false,
            power,
        }));
        let dark = Arc::new(AtomicBool::new(false));
        let serve = {
            let (state, dark) = (state.clone(), dark.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                while let Ok((n, from)) = sock.recv_from(&mut buf).await {
                    if dark.load(Ordering::SeqCst) {
                        continue;
                    }
                    let reply = lock(&state).answer(&buf[..n]);
                    if let Some(reply) = reply {
                        let _ = sock.send_to(&reply, from).await;
                    }
                }
            })
        };
        // The watchdog expires on its own, answered or not.
        let expire = {
            let state = state.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    lock(&state).tick();
                }
            })
        };
        Ok(Self {
            addr,
            state,
            dark,
            tasks: vec![serve, expire],
        })
    }

    /// `host:port` for the controller's `endpoint`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Follows whether the host is powered.
    pub fn power_line(&self) -> watch::Receiver<bool> {
        lock(&self.state).power.subscribe()
    }

    pub fn powered(&self) -> bool {
        *lock(&self.state).power.borrow()
    }

    pub fn watchdog(&self) -> Watchdog {
        lock(&self.state).wd.clone()
    }

    /// Cuts the BMC off the network (`true`) or back; its watchdog keeps running either way.
    pub fn set_dark(&self, dark: bool) {
        self.dark.store(dark, Ordering::SeqCst);
    }

    /// `ipmitool mc watchdog off` from someone else: action none, timer stopped.
    pub fn watchdog_off_behind_qfences_back(&self) {
        let mut s = lock(&self.state);
        s.wd.action = 0;
        s.wd.running = false;
        s.wd.expires = None;
    }

    /// A firmware update that stops the watchdog and refuses to set it again.
    pub fn firmware_disables_the_watchdog(&self) {
        self.watchdog_off_behind_qfences_back();
        lock(&self.state).refuse_set = true;
    }
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn checksum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x)).wrapping_neg()
}

fn tenths(t: u16) -> Duration {
    Duration::from_millis(u64::from(t) * 100)
}

impl State {
    fn tick(&mut self) {
        let now = Instant::now();
        if self.wd.running && self.wd.expires.is_some_and(|at| now >= at) {
            self.wd.running = false;
            self.wd.expires = None;
            // §27.7 timeout actions: 1 hard reset, 2 power down, 3 power cycle
            if matches!(self.wd.action & 7, 1..=3) {
                self.wd.fired = Some(now);
                self.power.send_replace(false);
            }
        }
    }

    fn answer(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let suite = CipherSuite::Three;
        if let Ok(req) = wire::parse_sessionless(bytes) {
            // Get Channel Authentication Capabilities: IPMI 2.0, named users only, no Kg
            let mut r = vec![0x81, (netfn::APP + 1) << 2];
            r.push(checksum(&r));
            let body = [0x20, req[4], req[5], 0, 0x01, 0x80, 0x04, 0x02, 0, 0, 0, 0];
            r.extend_from_slice(&body);
            r.push(checksum(&body));
            return Some(wire::build_sessionless(&r));
        }
        let p = wire::parse_packet(bytes, suite.icv_len()).ok()?;
        let m = p.payload;
        let handshake = |kind, m: &[u8]| wire::build_packet(kind, false, 0, 0, m, None);
        match p.payload_type {
            payload::OPEN_SESSION_REQUEST => {
                if [m[12], m[20], m[28]] != suite.algorithms() {
                    return Some(handshake(
                        payload::OPEN_SESSION_RESPONSE,
                        &[m[0], 0x11, 0, 0],
                    ));
                }
                let mut r = vec![m[0], 0, 4, 0];
                r.extend_from_slice(&m[4..8]);
                r.extend_from_slice(&0x0B0C_0D0Eu32.to_le_bytes());
                for (i, a) in suite.algorithms().into_iter().enumerate() {
                    r.extend_from_slice(&[i as u8, 0, 0, 8, a, 0, 0, 0]);
                }
                self.session = Session {
                    rakp: Some(Rakp {
                        console_sid: u32::from_le_bytes(m[4..8].try_into().ok()?),
                        bmc_sid: 0x0B0C_0D0E,
                        rm: [0; 16],
                        role: 0,
                        username: vec![],
                        suite,
                    }),
                    keys: None,
                    seq: 0,
                };
                Some(handshake(payload::OPEN_SESSION_RESPONSE, &r))
            }
            payload::RAKP1 => {
                let rakp = self.session.rakp.as_mut()?;
                rakp.rm = m[8..24].try_into().ok()?;
                rakp.role = m[24];
                let len = usize::from(m[27]);
                rakp.username = m[28..28 + len].to_vec();
                let mut r = vec![m[0], 0, 0, 0];
                r.extend_from_slice(&rakp.console_sid.to_le_bytes());
                r.extend_from_slice(&RC);
                r.extend_from_slice(&GUID);
                r.extend_from_slice(&rakp.expected_rakp2_code(PASSWORD.as_bytes(), &RC, &GUID));
                Some(handshake(payload::RAKP2, &r))
            }
            payload::RAKP3 => {
                let rakp = self.session.rakp.as_ref()?;
                let ok = rakp.message3(m[0], PASSWORD.as_bytes(), &RC) == m;
                let mut r = vec![m[0], if ok { 0 } else { 0x0F }, 0, 0];
                r.extend_from_slice(&rakp.console_sid.to_le_bytes());
                if ok {
                    let sik = rakp.sik(PASSWORD.as_bytes(), &RC);
                    r.extend_from_slice(&rakp.expected_rakp4_icv(&sik, &GUID));
                    self.session.keys = Some(SessionKeys::from_sik(suite, &sik));
                }
                Some(handshake(payload::RAKP4, &r))
            }
            payload::IPMI => {
                let keys = self.session.keys.as_ref()?;
                wire::verify(&p, keys).ok()?;
                let req = keys.decrypt(m).ok()?;
                let (nf, seq, c, data) = (req[1] >> 2, req[4], req[5], &req[6..req.len() - 1]);
                let (cc, out) = self.command(nf, c, data);
                let mut r = vec![0x81, (nf + 1) << 2];
                r.push(checksum(&r));
                let body_at = r.len();
                r.extend_from_slice(&[0x20, seq, c, cc]);
                r.extend_from_slice(&out);
                r.push(checksum(&r[body_at..]));
                let keys = self.session.keys.as_ref()?;
                let enc = keys.encrypt(&r, [3; 16]);
                self.session.seq += 1;
                let console_sid = self.session.rakp.as_ref()?.console_sid;
                Some(wire::build_packet(
                    payload::IPMI,
                    true,
                    console_sid,
                    self.session.seq,
                    &enc,
                    Some(keys),
                ))
            }
            _ => None,
        }
    }

    fn command(&mut self, nf: u8, c: u8, data: &[u8]) -> (u8, Vec<u8>) {
        self.tick();
        let now = Instant::now();
        match (nf, c) {
            (netfn::APP, cmd::SET_SESSION_PRIVILEGE) => (0, vec![data[0]]),
            (netfn::APP, cmd::GET_SESSION_INFO) => (0, vec![1, 0x3F, 1, 2, 4, 0x11]),
            (netfn::APP, cmd::GET_SYSTEM_GUID) => (0, GUID.to_vec()),
            (netfn::APP, cmd::GET_DEVICE_ID) => (
                0,
                vec![0x20, 1, 1, 0x10, 0x02, 0xBF, 0x57, 0x01, 0, 0x34, 0x12],
            ),
            (netfn::APP, cmd::CLOSE_SESSION) => (0, vec![]),
            (netfn::CHASSIS, cmd::GET_CHASSIS_STATUS) => {
                (0, vec![u8::from(*self.power.borrow()), 0, 0])
            }
            (netfn::CHASSIS, cmd::CHASSIS_CONTROL) => {
                self.power.send_replace(data[0] == 1);
                (0, vec![])
            }
            (netfn::APP, cmd::SET_WATCHDOG) if self.refuse_set => (0xD5, vec![]),
            (netfn::APP, cmd::SET_WATCHDOG) => {
                self.wd.sets += 1;
                self.wd.action = data[1];
                self.wd.initial = u16::from_le_bytes([data[4], data[5]]);
                if data[0] & 0x40 == 0 {
                    self.wd.running = false;
                    self.wd.expires = None;
                } else if self.wd.running {
                    // "don't stop": a running timer goes on from the new countdown
                    self.wd.expires = Some(now + tenths(self.wd.initial));
                }
                (0, vec![])
            }
            (netfn::APP, cmd::RESET_WATCHDOG) => {
                if self.wd.initial == 0 {
                    return (0x80, vec![]);
                }
                // §27.5: (re)starts the timer from its initial countdown
                self.wd.resets += 1;
                if let Some(last) = self.wd.last_reset {
                    self.wd.longest_gap = self.wd.longest_gap.max(now - last);
                }
                self.wd.last_reset = Some(now);
                self.wd.running = true;
                self.wd.expires = Some(now + tenths(self.wd.initial));
                (0, vec![])
            }
            (netfn::APP, cmd::GET_WATCHDOG) => {
                let present = match self.wd.expires {
                    Some(at) if self.wd.running => {
                        u16::try_from(at.saturating_duration_since(now).as_millis() / 100)
                            .unwrap_or(u16::MAX)
                    }
                    _ => self.wd.initial,
                };
                let (i, p) = (self.wd.initial.to_le_bytes(), present.to_le_bytes());
                let running = if self.wd.running { 0x40 } else { 0 };
                (
                    0,
                    vec![0x04 | running, self.wd.action, 0, 0, i[0], i[1], p[0], p[1]],
                )
            }
            _ => (0xC1, vec![]),
        }
    }
}

/// A UDP relay in front of a BMC in another process (`ipmi_sim`): cutting it makes the BMC
/// unreachable while the BMC itself, and its watchdog, go on.
pub struct UdpRelay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl UdpRelay {
    /// Relays datagrams to `target` (one client at a time: the orchestrator's driver).
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
        let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
        back.connect(target).await?;
        let addr = front.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let task = {
            let cut = cut.clone();
            tokio::spawn(async move {
                let mut a = [0u8; 2048];
                let mut b = [0u8; 2048];
                loop {
                    tokio::select! {
                        r = front.recv_from(&mut a) => {
                            let Ok((n, from)) = r else { return };
                            *client.lock().unwrap_or_else(|p| p.into_inner()) = Some(from);
                            if !cut.load(Ordering::SeqCst) {
                                let _ = back.send(&a[..n]).await;
                            }
                        }
                        r = back.recv(&mut b) => {
                            let Ok(n) = r else { continue };
                            let to = *client.lock().unwrap_or_else(|p| p.into_inner());
                            if let (Some(to), false) = (to, cut.load(Ordering::SeqCst)) {
                                let _ = front.send_to(&b[..n], to).await;
                            }
                        }
                    }
                }
            })
        };
        Ok(Self { addr, cut, task })
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}
