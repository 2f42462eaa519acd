//! One RMCP+ session over a connected UDP socket: the handshake (Open Session, RAKP 1-4,
//! Set Session Privilege Level), signed and encrypted requests with retries, and Close
//! Session. A session lives for one driver call; if the call is dropped (deadline,
//! cancellation) the session's `Drop` sends Close Session without waiting, so nothing
//! outlives the call.

use std::net::SocketAddr;
use std::time::Duration;

use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};
use zeroize::Zeroizing;

use super::wire::{self, CipherSuite, IpmiResponse, Packet, Privilege, Rakp, SessionKeys, payload};
use crate::driver::ErrorKind;

/// Why a session step failed, before the driver names the controller and call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    /// Whether the request may have reached the BMC (no answer came back).
    pub maybe_delivered: bool,
    /// The BMC refused the privilege level asked for; a lower one may work.
    pub role_refused: bool,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            maybe_delivered: false,
            role_refused: false,
        }
    }
}

/// How patient a session is with a lossy network.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// How long to wait for an answer before sending again.
    pub interval: Duration,
    /// How many times a message is sent before giving up.
    pub tries: u32,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(1000),
            tries: 3,
        }
    }
}

/// What opening a session needs.
#[derive(Debug)]
pub struct Params<'a> {
    pub addr: SocketAddr,
    pub username: &'a str,
    pub password: &'a SecretString,
    /// The privileges to ask for, highest first; the first the BMC grants is used.
    pub privileges: &'a [Privilege],
    pub suite: CipherSuite,
    pub retry: Retry,
}

/// An open RMCP+ session.
#[derive(Debug)]
pub struct Session {
    sock: UdpSocket,
    keys: SessionKeys,
    console_sid: u32,
    bmc_sid: u32,
    /// Our outbound session sequence number.
    seq: u32,
    /// The BMC's highest session sequence number taken so far: an answer that does not go
    /// beyond it is a replay (BMCs that always send 0 get no such check).
    bmc_seq: u32,
    rq_seq: u8,
    open: bool,
    retry: Retry,
    /// The privilege the BMC set for this session.
    pub privilege: Privilege,
    /// The BMC's GUID as sent in RAKP 2.
    pub rakp_guid: [u8; 16],
}

fn random<const N: usize>(rng: &SystemRandom) -> Result<[u8; N], Failure> {
    let mut b = [0u8; N];
    rng.fill(&mut b)
        .map_err(|_| Failure::new(ErrorKind::Protocol, "no randomness from the system"))?;
    Ok(b)
}

fn io_failure(addr: SocketAddr, e: &std::io::Error) -> Failure {
    let message = if e.kind() == std::io::ErrorKind::ConnectionRefused {
        format!("UDP {addr}: connection refused (nothing listens there)")
    } else {
        format!("UDP {addr}: {e}")
    };
    Failure::new(ErrorKind::Unreachable, message)
}

/// What to do with a datagram that came back.
enum Answer<T> {
    /// The answer.
    Take(T),
    /// Not for us (an answer to an earlier try, another session).
    Ignore,
    /// Bytes that do not follow the protocol.
    Junk(wire::Malformed),
}

/// Sends what `make` builds until `accept` takes an answer, or the tries run out. `make` is
/// called once per try (a retry needs a fresh sequence number and IV). If only junk came back,
/// the failure is a protocol error naming the last junk; if nothing came, the BMC is
/// unreachable.
async fn exchange<T>(
    sock: &UdpSocket,
    addr: SocketAddr,
    retry: Retry,
    what: &str,
    mut make: impl FnMut() -> Result<Vec<u8>, Failure>,
    mut accept: impl FnMut(&[u8]) -> Result<Answer<T>, Failure>,
) -> Result<T, Failure> {
    let mut buf = vec![0u8; 1024];
    let mut junk = None;
    for _ in 0..retry.tries.max(1) {
        let packet = make()?;
        sock.send(&packet).await.map_err(|e| io_failure(addr, &e))?;
        let until = Instant::now() + retry.interval;
        loop {
            match timeout_at(until, sock.recv(&mut buf)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(io_failure(addr, &e)),
                Ok(Ok(n)) => match accept(&buf[..n])? {
                    Answer::Take(t) => return Ok(t),
                    Answer::Ignore => {}
                    Answer::Junk(m) => junk = Some(m),
                },
            }
        }
    }
    if let Some(m) = junk {
        return Err(Failure {
            kind: ErrorKind::Protocol,
            message: format!("UDP {addr} answered {what} with bytes that are not RMCP+: {m}"),
            maybe_delivered: true,
            role_refused: false,
        });
    }
    Err(Failure {
        kind: ErrorKind::Unreachable,
        message: format!(
            "no answer from UDP {addr} to {what} after {} tries {} ms apart",
            retry.tries.max(1),
            retry.interval.as_millis()
        ),
        maybe_delivered: true,
        role_refused: false,
    })
}

fn protocol(addr: SocketAddr, e: wire::Malformed) -> Failure {
    Failure::new(ErrorKind::Protocol, format!("UDP {addr}: {e}"))
}

fn status_failure(step: &str, status: u8) -> Failure {
    let kind = match status {
        0x0D..=0x0F => ErrorKind::Auth,
        0x09 | 0x0A => ErrorKind::Auth,
        0x04..=0x07 | 0x10 | 0x11 => ErrorKind::Unsupported,
        0x01 | 0x0B => ErrorKind::Rejected,
        _ => ErrorKind::Protocol,
    };
    let mut f = Failure::new(
        kind,
        format!(
            "{step} refused: status 0x{status:02x} ({})",
            wire::rmcp_status_text(status)
        ),
    );
    f.role_refused = matches!(status, 0x09 | 0x0A);
    f
}

/// Takes the handshake answer of `want` type for our console session id.
fn handshake_payload(bytes: &[u8], want: u8) -> Answer<Packet<'_>> {
    // handshake packets carry no integrity code; the length only matters for junk
    let p = match wire::parse_packet(bytes, 12) {
        Ok(p) => p,
        Err(m) => return Answer::Junk(m),
    };
    if p.payload_type != want {
        return Answer::Ignore;
    }
    if p.encrypted || p.authenticated || p.session_id != 0 {
        return Answer::Junk(wire::Malformed(format!(
            "handshake message 0x{want:02x} is not a plain session-less packet"
        )));
    }
    Answer::Take(p)
}

/// Decodes a handshake message with `parse`, taking it if its tag is ours.
fn handshake<T>(
    bytes: &[u8],
    want: u8,
    tag: u8,
    parse: impl Fn(&[u8]) -> Result<T, wire::Malformed>,
    tag_of: impl Fn(&T) -> u8,
) -> Answer<T> {
    match handshake_payload(bytes, want) {
        Answer::Take(p) => match parse(p.payload) {
            Ok(r) if tag_of(&r) == tag => Answer::Take(r),
            Ok(_) => Answer::Ignore,
            Err(m) => Answer::Junk(m),
        },
        Answer::Ignore => Answer::Ignore,
        Answer::Junk(m) => Answer::Junk(m),
    }
}

/// Asks the BMC for Get Channel Authentication Capabilities (for the current channel, at
/// ADMINISTRATOR), outside any session.
pub async fn channel_auth(addr: SocketAddr, retry: Retry) -> Result<wire::ChannelAuth, Failure> {
    let sock = bound(addr).await?;
    let m = wire::ipmi_request(
        wire::netfn::APP,
        wire::cmd::GET_CHANNEL_AUTH_CAPS,
        1,
        &[0x8E, 0x04],
    );
    let packet = wire::build_sessionless(&m);
    let r = exchange(
        &sock,
        addr,
        retry,
        "Get Channel Authentication Capabilities",
        || Ok(packet.clone()),
        |bytes| {
            let r = match wire::parse_sessionless(bytes).and_then(wire::parse_ipmi_response) {
                Ok(r) => r,
                Err(m) => return Ok(Answer::Junk(m)),
            };
            if r.cmd != wire::cmd::GET_CHANNEL_AUTH_CAPS || r.rq_seq != 1 {
                return Ok(Answer::Ignore);
            }
            Ok(Answer::Take(r))
        },
    )
    .await?;
    if r.cc != 0 {
        return Err(Failure::new(
            ErrorKind::Rejected,
            format!(
                "Get Channel Authentication Capabilities answered 0x{:02x} ({})",
                r.cc,
                wire::completion_code_text(r.cc)
            ),
        ));
    }
    wire::parse_channel_auth(&r.data).map_err(|m| protocol(addr, m))
}

/// A UDP socket connected to the BMC.
async fn bound(addr: SocketAddr) -> Result<UdpSocket, Failure> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let sock = UdpSocket::bind(bind)
        .await
        .map_err(|e| io_failure(addr, &e))?;
    sock.connect(addr).await.map_err(|e| io_failure(addr, &e))?;
    Ok(sock)
}

/// Encrypts and signs one IPMI message with the next session sequence number (never 0: that
/// is for session-less messages).
fn seal(
    keys: &SessionKeys,
    seq: &mut u32,
    bmc_sid: u32,
    message: &[u8],
) -> Result<Vec<u8>, Failure> {
    let iv = random::<16>(&SystemRandom::new())?;
    let enc = keys.encrypt(message, iv);
    *seq = seq.wrapping_add(1).max(1);
    Ok(wire::build_packet(
        payload::IPMI,
        true,
        bmc_sid,
        *seq,
        &enc,
        Some(keys),
    ))
}

/// The user name and password (Kuid) as RMCP+ carries them, checked against the protocol's
/// limits before anything is sent: a too-long credential is a configuration error, not
/// something to learn from the BMC.
fn credentials(params: &Params<'_>) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), Failure> {
    let username = params.username.as_bytes();
    if username.len() > wire::MAX_USERNAME {
        return Err(Failure::new(
            ErrorKind::Auth,
            format!(
                "user name is {} bytes; RMCP+ allows at most {}",
                username.len(),
                wire::MAX_USERNAME
            ),
        ));
    }
    let kuid = Zeroizing::new(params.password.expose_secret().as_bytes().to_vec());
    if kuid.len() > 20 {
        return Err(Failure::new(
            ErrorKind::Auth,
            "the password is longer than the 20 bytes IPMI 2.0 allows",
        ));
    }
    Ok((username.to_vec(), kuid))
}

/// The session-less messages of one handshake attempt, one method per request/answer pair:
/// each checks its answer before the next message depends on it.
struct Handshake<'a> {
    sock: &'a UdpSocket,
    params: &'a Params<'a>,
    /// The message tag that pairs each answer with its request.
    tag: u8,
}

impl Handshake<'_> {
    /// Open Session: the BMC names its session id and must accept our cipher suite as is
    /// (a BMC that picks other algorithms would have us speak a suite we did not ask for).
    async fn open_session(&self, console_sid: u32) -> Result<wire::OpenSessionResponse, Failure> {
        let (addr, tag, suite) = (self.params.addr, self.tag, self.params.suite);
        let request = wire::open_session_request(tag, console_sid, suite);
        let resp = exchange(
            self.sock,
            addr,
            self.params.retry,
            "Open Session Request",
            || {
                Ok(wire::build_packet(
                    payload::OPEN_SESSION_REQUEST,
                    false,
                    0,
                    0,
                    &request,
                    None,
                ))
            },
            |bytes| {
                Ok(handshake(
                    bytes,
                    payload::OPEN_SESSION_RESPONSE,
                    tag,
                    wire::parse_open_session_response,
                    |r| r.tag,
                ))
            },
        )
        .await?;
        if resp.status != 0 {
            return Err(status_failure("Open Session", resp.status));
        }
        if resp.console_sid != console_sid {
            return Err(protocol(
                addr,
                wire::Malformed("Open Session Response names another session".into()),
            ));
        }
        if resp.algorithms != suite.algorithms() {
            return Err(Failure::new(
                ErrorKind::Unsupported,
                format!(
                    "the BMC chose algorithms {:02x?}, not cipher suite {} ({})",
                    resp.algorithms,
                    suite.number(),
                    suite.describe()
                ),
            ));
        }
        Ok(resp)
    }

    /// RAKP 1 / 2: the BMC proves it knows the user's password; a code keyed otherwise is a
    /// wrong password, said as such.
    async fn rakp_1_2(&self, rakp: &Rakp, kuid: &[u8]) -> Result<wire::Rakp2, Failure> {
        let (tag, suite) = (self.tag, self.params.suite);
        let m1 = rakp.message1(tag);
        let r2 = exchange(
            self.sock,
            self.params.addr,
            self.params.retry,
            "RAKP Message 1",
            || Ok(wire::build_packet(payload::RAKP1, false, 0, 0, &m1, None)),
            |bytes| {
                Ok(handshake(
                    bytes,
                    payload::RAKP2,
                    tag,
                    |m| wire::parse_rakp2(m, suite.auth_code_len()),
                    |r| r.tag,
                ))
            },
        )
        .await?;
        if r2.status != 0 {
            return Err(status_failure("RAKP Message 1", r2.status));
        }
        if r2.code[..] != rakp.expected_rakp2_code(kuid, &r2.rc, &r2.guid)[..] {
            // The BMC keyed its code with another password than ours.
            return Err(Failure::new(
                ErrorKind::Auth,
                format!(
                    "the BMC's RAKP 2 code does not match: wrong password for user {:?}",
                    self.params.username
                ),
            ));
        }
        Ok(r2)
    }

    /// RAKP 3 / 4: we prove we know the password; the BMC's integrity check value proves
    /// both sides derived the same session integrity key (SIK), which is returned.
    async fn rakp_3_4(
        &self,
        rakp: &Rakp,
        kuid: &[u8],
        r2: &wire::Rakp2,
    ) -> Result<Zeroizing<Vec<u8>>, Failure> {
        let (tag, suite) = (self.tag, self.params.suite);
        let m3 = rakp.message3(tag, kuid, &r2.rc);
        let sik = Zeroizing::new(rakp.sik(kuid, &r2.rc));
        let r4 = exchange(
            self.sock,
            self.params.addr,
            self.params.retry,
            "RAKP Message 3",
            || Ok(wire::build_packet(payload::RAKP3, false, 0, 0, &m3, None)),
            |bytes| {
                Ok(handshake(
                    bytes,
                    payload::RAKP4,
                    tag,
                    |m| wire::parse_rakp4(m, suite.icv_len()),
                    |r| r.tag,
                ))
            },
        )
        .await?;
        if r4.status != 0 {
            return Err(status_failure("RAKP Message 3", r4.status));
        }
        if r4.icv[..] != rakp.expected_rakp4_icv(&sik, &r2.guid)[..] {
            return Err(protocol(
                self.params.addr,
                wire::Malformed("RAKP 4 integrity check value does not match".into()),
            ));
        }
        Ok(sik)
    }
}

impl Session {
    /// Opens a session: cipher suite 3, the highest of `params.privileges` the BMC grants
    /// (a BMC refuses a level above the user's limit, in RAKP 2 or in Set Session Privilege
    /// Level; each level is a fresh handshake).
    pub async fn open(params: &Params<'_>) -> Result<Session, Failure> {
        let mut refused = Vec::new();
        for &level in params.privileges {
            match Self::open_at(params, level).await {
                Ok(s) => return Ok(s),
                Err(f) if f.role_refused => {
                    tracing::debug!(privilege = %level, reason = %f.message, "The BMC refused a privilege level; trying the next");
                    refused.push(format!("{level}: {}", f.message));
                }
                Err(f) => return Err(f),
            }
        }
        Err(Failure::new(
            ErrorKind::Auth,
            format!(
                "the BMC refused every privilege level asked for ({})",
                refused.join("; ")
            ),
        ))
    }

    async fn open_at(params: &Params<'_>, level: Privilege) -> Result<Session, Failure> {
        let (username, kuid) = credentials(params)?;
        let sock = bound(params.addr).await?;
        let rng = SystemRandom::new();
        let console_sid = u32::from_le_bytes(random::<4>(&rng)?) | 1;
        let tag = random::<1>(&rng)?[0];
        let hs = Handshake {
            sock: &sock,
            params,
            tag,
        };
        let resp = hs.open_session(console_sid).await?;
        // RAKP 1 / 2: name-only lookup (like ipmitool), at the highest privilege wanted
        let rakp = Rakp {
            console_sid,
            bmc_sid: resp.bmc_sid,
            rm: random::<16>(&rng)?,
            role: 0x10 | level as u8,
            username,
            suite: params.suite,
        };
        let r2 = hs.rakp_1_2(&rakp, &kuid).await?;
        let sik = hs.rakp_3_4(&rakp, &kuid, &r2).await?;
        let session = Session {
            sock,
            keys: SessionKeys::from_sik(params.suite, &sik),
            console_sid,
            bmc_sid: resp.bmc_sid,
            seq: 0,
            bmc_seq: 0,
            rq_seq: 0,
            open: true,
            retry: params.retry,
            privilege: level,
            rakp_guid: r2.guid,
        };
        session.raise_privilege(level).await
    }

    /// The last handshake step: the session starts below the requested maximum; raise it
    /// (0x80-0x82: the level is not available to this user or channel). A refusal closes the
    /// session and says whether a lower level may work.
    async fn raise_privilege(mut self, level: Privilege) -> Result<Session, Failure> {
        let r = self
            .request(
                wire::netfn::APP,
                wire::cmd::SET_SESSION_PRIVILEGE,
                &[level as u8],
            )
            .await?;
        if r.cc == 0 {
            self.privilege = r
                .data
                .first()
                .and_then(|b| Privilege::from_u8(b & 0x0F))
                .unwrap_or(level);
            return Ok(self);
        }
        self.close().await;
        let mut f = Failure::new(
            ErrorKind::Auth,
            format!(
                "Set Session Privilege Level {level} answered 0x{:02x} ({})",
                r.cc,
                wire::completion_code_text(r.cc)
            ),
        );
        f.role_refused = matches!(r.cc, 0x80..=0x82 | 0xD4);
        Err(f)
    }

    /// Sends one IPMI request in the session and returns the BMC's answer (any completion
    /// code). Retries on loss; a retry is a new packet with the same request sequence.
    pub async fn request(
        &mut self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<IpmiResponse, Failure> {
        self.rq_seq = (self.rq_seq + 1) & 0x3F;
        let rq_seq = self.rq_seq;
        let message = wire::ipmi_request(netfn, cmd, rq_seq, data);
        let addr = self.sock.peer_addr().map_err(|e| {
            Failure::new(ErrorKind::Unreachable, format!("socket has no peer: {e}"))
        })?;
        let console_sid = self.console_sid;
        let bmc_sid = self.bmc_sid;
        let what = format!("IPMI command netfn 0x{netfn:02x} cmd 0x{cmd:02x}");
        let retry = self.retry;
        let keys = &self.keys;
        let seq = &mut self.seq;
        let bmc_seq = &mut self.bmc_seq;
        exchange(
            &self.sock,
            addr,
            retry,
            &what,
            || seal(keys, seq, bmc_sid, &message),
            |bytes| {
                let p = match wire::parse_packet(bytes, keys.icv_len()) {
                    Ok(p) => p,
                    Err(m) => return Ok(Answer::Junk(m)),
                };
                if p.payload_type != payload::IPMI || p.session_id != console_sid {
                    return Ok(Answer::Ignore);
                }
                // A forged or corrupted answer is never taken, but it is not the answer we
                // wait for either: keep waiting, and report it if nothing better comes.
                if let Err(m) = wire::verify(&p, keys) {
                    return Ok(Answer::Junk(m));
                }
                let plain = if p.encrypted {
                    match keys.decrypt(p.payload) {
                        Ok(d) => d,
                        Err(m) => return Ok(Answer::Junk(m)),
                    }
                } else {
                    p.payload.to_vec()
                };
                let r = match wire::parse_ipmi_response(&plain) {
                    Ok(r) => r,
                    Err(m) => return Ok(Answer::Junk(m)),
                };
                // an answer to an earlier try or request: keep waiting
                if r.rq_seq != rq_seq || r.cmd != cmd || r.netfn != netfn + 1 {
                    return Ok(Answer::Ignore);
                }
                if p.sequence != 0 && p.sequence <= *bmc_seq {
                    // signed by this session, but seen before: a replay, never an answer
                    return Ok(Answer::Junk(wire::Malformed(format!(
                        "answer with session sequence {} repeats an earlier one",
                        p.sequence
                    ))));
                }
                *bmc_seq = (*bmc_seq).max(p.sequence);
                Ok(Answer::Take(r))
            },
        )
        .await
    }

    fn close_packet(&mut self) -> Option<Vec<u8>> {
        self.rq_seq = (self.rq_seq + 1) & 0x3F;
        let m = wire::ipmi_request(
            wire::netfn::APP,
            wire::cmd::CLOSE_SESSION,
            self.rq_seq,
            &self.bmc_sid.to_le_bytes(),
        );
        seal(&self.keys, &mut self.seq, self.bmc_sid, &m).ok()
    }

    /// Closes the session, waiting briefly for the BMC's answer (one try).
    pub async fn close(mut self) {
        if let Some(p) = self.close_packet() {
            self.open = false;
            if self.sock.send(&p).await.is_ok() {
                let mut buf = [0u8; 256];
                let _ = tokio::time::timeout(Duration::from_millis(200), self.sock.recv(&mut buf))
                    .await;
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.open {
            // The call was dropped mid-way: tell the BMC without waiting, so its session slot
            // is freed and no task outlives the call.
            if let Some(p) = self.close_packet() {
                let _ = self.sock.try_send(&p);
            }
        }
    }
}
