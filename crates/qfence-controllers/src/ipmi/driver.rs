//! [`IpmiDriver`]: the [`Driver`] contract over RMCP+ sessions.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, Grade};
use secrecy::SecretString;

use super::session::{self, Failure, Params, Retry, Session};
use super::wire::{self, CipherSuite, Privilege, WatchdogAction, WatchdogTimer, cmd, netfn};
use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target, required_secret,
};

/// The UDP port of RMCP.
const DEFAULT_PORT: u16 = 623;
/// How often power is read back after a power command, at most; the first reads come sooner
/// (25 ms, doubling), since some BMCs switch within milliseconds.
const POWER_POLL: Duration = Duration::from_millis(200);
const FIRST_POWER_POLL: Duration = Duration::from_millis(25);
/// How long before the caller's deadline a power read-back gives up with what it last read.
const GIVE_UP_MARGIN: Duration = Duration::from_millis(20);
/// The watchdog countdown when a binding sets none (`timeout_seconds`).
const DEFAULT_WATCHDOG_SECONDS: u32 = 10;
/// The longest countdown IPMI can hold (65535 tenths of a second).
const MAX_WATCHDOG_SECONDS: u32 = 6553;
/// Set Watchdog Timer "timer use": SMS/OS, with "don't stop" so re-arming a running
/// dead-man never stops it, even for a moment.
const USE_SMS_DONT_STOP: u8 = 0x44;
/// Timer use SMS/OS without "don't stop": Set stops the timer.
const USE_SMS_STOP: u8 = 0x04;
/// Timer action: power down, no pre-timeout interrupt.
const ACTION_POWER_DOWN: u8 = 0x02;
/// Timer action: none.
const ACTION_NONE: u8 = 0x00;
/// Chassis Control values.
const CHASSIS_POWER_DOWN: u8 = 0x00;
const CHASSIS_POWER_UP: u8 = 0x01;

const POWER_OFF: &str = "power.off";
const WATCHDOG: &str = "watchdog";
const TIMEOUT_PARAM: &str = "timeout_seconds";

/// The privileges a session asks for, highest first (fence_ipmilan also asks for
/// ADMINISTRATOR); the BMC's answer decides.
const PRIVILEGES: [Privilege; 3] = [
    Privilege::Administrator,
    Privilege::Operator,
    Privilege::User,
];

/// An IPMI BMC reached over LAN with RMCP+ (cipher suite 3 or 17).
#[derive(Debug)]
pub struct IpmiDriver {
    id: ControllerId,
    host: String,
    port: u16,
    username: String,
    password: SecretString,
    suite: CipherSuite,
    retry: Retry,
}

fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let e = endpoint.trim();
    if e.is_empty() {
        return Err("endpoint is empty; expected host[:port]".into());
    }
    if e.contains("://") {
        return Err(format!(
            "endpoint {e:?} is a URL; IPMI expects host[:port] (UDP, default port 623)"
        ));
    }
    if let Ok(sa) = e.parse::<SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Ok(ip) = e.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok((ip.to_string(), DEFAULT_PORT));
    }
    match e.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("endpoint {e:?}: port {port:?} is not 1-65535"))?;
            Ok((host.to_owned(), port))
        }
        Some(_) => Err(format!(
            "endpoint {e:?} is neither host[:port] nor [ipv6]:port"
        )),
        None => Ok((e.to_owned(), DEFAULT_PORT)),
    }
}

/// The countdown a watchdog binding asks for, in seconds.
fn watchdog_seconds(target: &Target) -> Result<u32, String> {
    match target.param(ControllerType::Ipmi, TIMEOUT_PARAM) {
        None => Ok(DEFAULT_WATCHDOG_SECONDS),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|s| (1..=MAX_WATCHDOG_SECONDS).contains(s))
            .ok_or_else(|| {
                format!(
                    "params.{TIMEOUT_PARAM}: {v:?} is not a whole number of seconds from 1 to {MAX_WATCHDOG_SECONDS}"
                )
            }),
    }
}

/// The binding's countdown in tenths of a second, as Set Watchdog Timer carries it.
fn watchdog_tenths(target: &Target) -> Result<u16, String> {
    // At most 6553 s: 65530 tenths fit.
    watchdog_seconds(target).map(|s| (s * 10) as u16)
}

/// What a watchdog read says about "armed", given whether a Reset was just accepted.
/// `Err` means the state cannot be told from what the BMC sent.
fn watchdog_armed(w: &WatchdogTimer, reset_accepted: bool) -> Result<(bool, String), String> {
    let countdown = w
        .initial_countdown
        .map(|c| format!("{}.{} s", c / 10, c % 10))
        .unwrap_or_else(|| "unread".into());
    let described = format!(
        "Get Watchdog Timer: action {}, initial countdown {countdown}, {} of {} answer bytes",
        w.action.as_str(),
        w.len,
        wire::WATCHDOG_ANSWER_LEN
    );
    if w.action != WatchdogAction::PowerDown {
        // Whatever the timer does, its expiry powers nothing off.
        return Ok((false, format!("{described}: not armed")));
    }
    match w.running() {
        Some(running) => {
            let present = w
                .present_countdown
                .map(|c| format!(", present countdown {}.{} s", c / 10, c % 10))
                .unwrap_or_default();
            let state = if running { "running" } else { "stopped" };
            Ok((running, format!("{described}, timer {state}{present}")))
        }
        None if reset_accepted => Ok((
            true,
            format!(
                "{described}; running because Reset Watchdog Timer was just accepted (the answer is too short to show the running bit)"
            ),
        )),
        None => Err(format!(
            "{described}: too short to show whether the timer runs, so whether the dead-man is armed is unknown"
        )),
    }
}

/// Makes the driver from its configuration and password. No I/O.
impl Build for IpmiDriver {
    const TYPE: ControllerType = ControllerType::Ipmi;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        password: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Ipmi {
            endpoint,
            username,
            cipher_suite,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let Some(suite) = CipherSuite::from_number(*cipher_suite) else {
            return Err(DriverError::new(
                ErrorKind::Unsupported,
                &id,
                "build",
                format!(
                    "cipher suite {cipher_suite} is not supported; qfence's IPMI driver speaks cipher suites 3 ({}) and 17 ({})",
                    CipherSuite::Three.describe(),
                    CipherSuite::Seventeen.describe()
                ),
                false,
            ));
        };
        if username.len() > wire::MAX_USERNAME {
            return Err(DriverError::new(
                ErrorKind::Auth,
                &id,
                "build",
                format!(
                    "user name {username:?} is longer than the {} bytes IPMI allows",
                    wire::MAX_USERNAME
                ),
                false,
            ));
        }
        let password = required_secret(&id, Self::TYPE, password)?;
        let (host, port) = parse_endpoint(endpoint)
            .map_err(|m| DriverError::new(ErrorKind::Unsupported, &id, "build", m, false))?;
        Ok(IpmiDriver {
            id,
            host,
            port,
            username: username.clone(),
            password,
            suite,
            retry: Retry::default(),
        })
    }
}

impl IpmiDriver {
    /// Sets how long to wait for an answer before resending, and how many times to send.
    pub fn with_retry(mut self, interval: Duration, tries: u32) -> Self {
        self.retry = Retry {
            interval,
            tries: tries.max(1),
        };
        self
    }

    fn err(&self, call: &str, f: Failure, state_unknown: bool) -> DriverError {
        DriverError::new(f.kind, &self.id, call, f.message, state_unknown)
    }

    async fn addr(&self, call: &str) -> Result<SocketAddr, DriverError> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        let found = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                DriverError::new(
                    ErrorKind::Unreachable,
                    &self.id,
                    call,
                    format!("cannot resolve {}: {e}", self.host),
                    false,
                )
            })?
            .next();
        found.ok_or_else(|| {
            DriverError::new(
                ErrorKind::Unreachable,
                &self.id,
                call,
                format!("{} resolves to no address", self.host),
                false,
            )
        })
    }

    async fn open(&self, call: &str) -> Result<Session, DriverError> {
        let addr = self.addr(call).await?;
        let params = Params {
            addr,
            username: &self.username,
            password: &self.password,
            privileges: &PRIVILEGES,
            suite: self.suite,
            retry: self.retry,
        };
        let s = Session::open(&params)
            .await
            .map_err(|f| self.err(call, f, false))?;
        tracing::debug!(controller = %self.id, call, privilege = %s.privilege, "Opened an IPMI session");
        Ok(s)
    }

    /// Sends a command and returns its data; a completion code other than 0 is an error.
    /// `changes_state`: whether a lost answer leaves the target's state unknown.
    async fn command(
        &self,
        s: &mut Session,
        call: &str,
        name: &str,
        (nf, c): (u8, u8),
        data: &[u8],
        changes_state: bool,
    ) -> Result<Vec<u8>, DriverError> {
        let r = s.request(nf, c, data).await.map_err(|f| {
            let unknown = changes_state && f.maybe_delivered;
            let mut e = self.err(call, f, unknown);
            e.message = format!("{name}: {}", e.message);
            e
        })?;
        if r.cc != 0 {
            return Err(self.cc_error(call, name, r.cc));
        }
        Ok(r.data)
    }

    fn cc_error(&self, call: &str, name: &str, cc: u8) -> DriverError {
        let kind = match cc {
            0xC1 => ErrorKind::Unsupported,
            0xD4 => ErrorKind::Auth,
            _ => ErrorKind::Rejected,
        };
        DriverError::new(
            kind,
            &self.id,
            call,
            format!(
                "{name} answered 0x{cc:02x} ({})",
                wire::completion_code_text(cc)
            ),
            false,
        )
    }

    async fn chassis_status(
        &self,
        s: &mut Session,
        call: &str,
    ) -> Result<wire::ChassisStatus, DriverError> {
        let d = self
            .command(
                s,
                call,
                "Get Chassis Status",
                (netfn::CHASSIS, cmd::GET_CHASSIS_STATUS),
                &[],
                false,
            )
            .await?;
        wire::parse_chassis_status(&d)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false))
    }

    async fn watchdog(&self, s: &mut Session, call: &str) -> Result<WatchdogTimer, DriverError> {
        let d = self
            .command(
                s,
                call,
                "Get Watchdog Timer",
                (netfn::APP, cmd::GET_WATCHDOG),
                &[],
                false,
            )
            .await?;
        wire::parse_watchdog(&d)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, true))
    }

    fn reading(&self, ctx: &CallContext, holds: bool, detail: String) -> Reading {
        Reading {
            holds,
            detail,
            at: SystemTime::now(),
            by: ctx.orchestrator.clone(),
            definitive: false,
        }
    }

    fn power_reading(&self, ctx: &CallContext, st: wire::ChassisStatus) -> Reading {
        let word = if st.power_on { "on" } else { "off" };
        self.reading(
            ctx,
            !st.power_on,
            format!(
                "Chassis power {word} (Get Chassis Status power state 0x{:02x})",
                st.power_state
            ),
        )
    }

    /// Reads power until it is `want_on`, re-opening the session whenever a read fails.
    /// Just before the caller's deadline it gives up with what it last read, so the error
    /// says more than "deadline passed".
    async fn wait_power(
        &self,
        ctx: &CallContext,
        call: &str,
        mut session: Option<Session>,
        want_on: bool,
    ) -> Result<Reading, DriverError> {
        let mut delay = FIRST_POWER_POLL;
        let started = tokio::time::Instant::now();
        let mut last = String::from("no read succeeded");
        let give_up = |last: &str| {
            let word = if want_on { "on" } else { "off" };
            DriverError::new(
                ErrorKind::Timeout,
                &self.id,
                call,
                format!(
                    "power did not read {word} within {} ms of the command; last: {last}",
                    started.elapsed().as_millis()
                ),
                true,
            )
        };
        // A read still running at the deadline gives up a little before it, so this error
        // (with the last read) wins the race with the caller's plain "deadline passed".
        let stop_at = ctx
            .deadline
            .checked_sub(GIVE_UP_MARGIN)
            .unwrap_or(ctx.deadline);
        loop {
            if tokio::time::Instant::now() + delay >= stop_at {
                return Err(give_up(&last));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(POWER_POLL);
            let mut s = match session.take() {
                Some(s) => s,
                None => match tokio::time::timeout_at(stop_at, self.open(call)).await {
                    Err(_) => return Err(give_up(&last)),
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) if e.kind == ErrorKind::Auth => {
                        return Err(DriverError {
                            state_unknown: true,
                            ..e
                        });
                    }
                    Ok(Err(e)) => {
                        last = e.message.clone();
                        tracing::debug!(controller = %self.id, call, error = %e, "Could not re-open the IPMI session to read power");
                        continue;
                    }
                },
            };
            let Ok(read) =
                tokio::time::timeout_at(stop_at, self.chassis_status(&mut s, call)).await
            else {
                // Dropping the session closes it without waiting.
                return Err(give_up(&last));
            };
            match read {
                Ok(st) if st.power_on == want_on => {
                    s.close().await;
                    return Ok(self.power_reading(ctx, st));
                }
                Ok(st) => {
                    last = self.power_reading(ctx, st).detail;
                    session = Some(s);
                }
                Err(e) if e.kind == ErrorKind::Unreachable || e.kind == ErrorKind::Protocol => {
                    last = e.message.clone();
                    tracing::debug!(controller = %self.id, call, error = %e, "Reading power failed; re-opening the IPMI session");
                }
                Err(e) => {
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
            }
        }
    }

    fn unsupported(&self, call: &str, target: &Target) -> DriverError {
        DriverError::new(
            ErrorKind::Unsupported,
            &self.id,
            call,
            format!(
                "IPMI has no capability {:?} here (it offers {POWER_OFF}, {WATCHDOG})",
                target.capability
            ),
            false,
        )
    }

    fn bad_params(&self, call: &str, message: String) -> DriverError {
        DriverError::new(ErrorKind::Rejected, &self.id, call, message, false)
    }

    /// The GUID that identifies the host: System GUID, else Device GUID, else RAKP 2's.
    async fn guid(
        &self,
        s: &mut Session,
        call: &str,
    ) -> Result<(String, &'static str), DriverError> {
        for (c, name) in [
            (cmd::GET_SYSTEM_GUID, "Get System GUID"),
            (cmd::GET_DEVICE_GUID, "Get Device GUID"),
        ] {
            match self
                .command(s, call, name, (netfn::APP, c), &[], false)
                .await
            {
                Ok(d) => {
                    let g = wire::format_guid(&d).map_err(|m| {
                        DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false)
                    })?;
                    return Ok((g, name));
                }
                Err(e) if e.kind == ErrorKind::Unsupported || e.kind == ErrorKind::Rejected => {}
                Err(e) => return Err(e),
            }
        }
        let g = wire::format_guid(&s.rakp_guid)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false))?;
        Ok((g, "RAKP 2"))
    }

    async fn probe_inner(&self, _ctx: &CallContext) -> Result<Probe, DriverError> {
        const CALL: &str = "probe";
        let mut facts = BTreeMap::new();
        let mut warnings = Vec::new();
        // Every IPMI 2.0 BMC answers this outside a session; it says how logins are guarded.
        let addr = self.addr(CALL).await?;
        match session::channel_auth(addr, self.retry).await {
            Ok(a) => {
                facts.insert("kg".into(), if a.kg_set { "set" } else { "not set" }.into());
                if a.anonymous_login {
                    warnings.push(
                        "the BMC allows anonymous login (null user name and password)".into(),
                    );
                }
                if a.null_usernames {
                    warnings.push(
                        "the BMC has a user with a null name enabled: anyone with its password can log in without a user name".into(),
                    );
                }
                if !a.ipmi20 {
                    warnings.push("the BMC does not announce IPMI 2.0 (RMCP+) support".into());
                }
            }
            Err(f) if f.kind == ErrorKind::Unreachable => return Err(self.err(CALL, f, false)),
            Err(f) => warnings.push(format!(
                "Get Channel Authentication Capabilities failed: {}",
                f.message
            )),
        }
        let mut s = self.open(CALL).await?;

        let (guid, source) = self.guid(&mut s, CALL).await?;
        facts.insert("guid_source".into(), source.into());
        match self
            .command(
                &mut s,
                CALL,
                "Get Device ID",
                (netfn::APP, cmd::GET_DEVICE_ID),
                &[],
                false,
            )
            .await
            .and_then(|d| {
                wire::parse_device_id(&d)
                    .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, CALL, m.0, false))
            }) {
            Ok(d) => {
                facts.insert("manufacturer_id".into(), d.manufacturer_id.to_string());
                facts.insert("product_id".into(), format!("0x{:04x}", d.product_id));
                facts.insert("firmware".into(), d.firmware);
                facts.insert("ipmi_version".into(), d.ipmi_version);
            }
            Err(e) => warnings.push(format!("Get Device ID failed: {}", e.message)),
        }

        // The privilege the BMC gave this session: Get Session Info is its own word on it.
        let (privilege, privilege_source) = match self
            .command(
                &mut s,
                CALL,
                "Get Session Info",
                (netfn::APP, cmd::GET_SESSION_INFO),
                &[0x00],
                false,
            )
            .await
            .ok()
            .and_then(|d| wire::parse_session_info(&d).ok())
            .and_then(|i| {
                facts.insert("user_id".into(), i.user_id.to_string());
                facts.insert("channel".into(), i.channel.to_string());
                i.privilege
            }) {
            Some(p) => (p, "Get Session Info"),
            None => (s.privilege, "Set Session Privilege Level"),
        };
        facts.insert("privilege".into(), privilege.to_string());
        facts.insert("cipher_suite".into(), self.suite.number().to_string());

        let chassis = self.chassis_status(&mut s, CALL).await;
        if let Ok(st) = &chassis {
            facts.insert(
                "power".into(),
                if st.power_on { "on" } else { "off" }.into(),
            );
        }
        // Get NetFn Support exists only where the IPMI 2.0 firmware firewall does.
        let firewall = match s.request(netfn::APP, cmd::GET_NETFN_SUPPORT, &[0x0E]).await {
            Ok(r) => r.cc != 0xC1,
            Err(_) => true,
        };
        let watchdog = self.watchdog(&mut s, CALL).await;
        s.close().await;

        let power_grade = grade_power(
            chassis.as_ref().map(|_| ()).map_err(|e| e.message.as_str()),
            privilege,
            privilege_source,
            firewall,
        );
        let (watchdog_grade, warning) = grade_watchdog(
            watchdog.as_ref().map_err(|e| (e.kind, e.message.as_str())),
            privilege,
        );
        warnings.extend(warning);
        if privilege == Privilege::Administrator {
            warnings.push(
                "the session runs at ADMINISTRATOR; an account limited to OPERATOR is enough for power control and the watchdog"
                    .into(),
            );
        }
        Ok(Probe {
            identity: Identity {
                id: guid,
                facts,
                tls_fingerprint: None,
            },
            grades: vec![
                grade(POWER_OFF, power_grade),
                grade(WATCHDOG, watchdog_grade),
            ],
            warnings,
        })
    }

    /// Makes power read `want_on`: reads it, sends Chassis Control if needed, then polls.
    /// A command whose answer was lost is not an error yet: the next round re-opens the
    /// session, reads power again and, if still needed, sends the command again (power down
    /// and power up are idempotent).
    async fn set_power(&self, ctx: &CallContext, want_on: bool) -> Result<Reading, DriverError> {
        let (call, name, control, word) = if want_on {
            (
                "power.on",
                "Chassis Control power up",
                CHASSIS_POWER_UP,
                "on",
            )
        } else {
            (
                "power.off",
                "Chassis Control power down",
                CHASSIS_POWER_DOWN,
                "off",
            )
        };
        let mut sent = false;
        let mut last = None;
        for _ in 0..3 {
            let opened = self.open(call).await;
            let mut s = match opened {
                Ok(s) => s,
                Err(e) if sent => {
                    last = Some(DriverError {
                        state_unknown: true,
                        ..e
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            let st = self
                .chassis_status(&mut s, call)
                .await
                .map_err(|e| DriverError {
                    state_unknown: sent || e.state_unknown,
                    ..e
                })?;
            if st.power_on == want_on {
                s.close().await;
                let mut r = self.power_reading(ctx, st);
                if !sent {
                    r.detail = format!("already {word}: {}", r.detail);
                }
                return Ok(r);
            }
            match self
                .command(
                    &mut s,
                    call,
                    name,
                    (netfn::CHASSIS, cmd::CHASSIS_CONTROL),
                    &[control],
                    true,
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(controller = %self.id, call, "Sent {name}; reading power back");
                    return self.wait_power(ctx, call, Some(s), want_on).await;
                }
                Err(e) if e.state_unknown => {
                    tracing::warn!(controller = %self.id, call, error = %e, "The answer to {name} was lost; reading power again");
                    sent = true;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            DriverError::new(
                ErrorKind::Unreachable,
                &self.id,
                call,
                "no round completed",
                true,
            )
        }))
    }

    async fn check_power(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        const CALL: &str = "power.off check";
        let mut s = self.open(CALL).await?;
        let st = self.chassis_status(&mut s, CALL).await?;
        s.close().await;
        Ok(self.power_reading(ctx, st))
    }

    /// Reads the watchdog back (Get Watchdog Timer): it holds when the timer runs, with
    /// action power-down and the countdown the binding sets (`want_tenths`). A countdown set
    /// by someone else is NOT HELD, never armed: a longer one would make "it has fired by
    /// now" premature. `reset_accepted`: a Reset Watchdog Timer was just accepted in this
    /// session (what a short answer's running state is taken from).
    async fn watchdog_read_back(
        &self,
        ctx: &CallContext,
        s: &mut Session,
        call: &str,
        reset_accepted: bool,
        want_tenths: u16,
    ) -> Result<Reading, DriverError> {
        let w = self.watchdog(s, call).await?;
        let (holds, detail) = watchdog_armed(&w, reset_accepted)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m, true))?;
        if w.action != WatchdogAction::PowerDown {
            return Ok(self.reading(ctx, holds, detail));
        }
        match w.initial_countdown {
            Some(got) if got == want_tenths => Ok(self.reading(ctx, holds, detail)),
            Some(got) => Ok(self.reading(
                ctx,
                false,
                format!(
                    "{detail}: the countdown is {}.{} s, not the {}.{} s qfence sets (set by someone else), so it is not qfence's dead-man",
                    got / 10,
                    got % 10,
                    want_tenths / 10,
                    want_tenths % 10
                ),
            )),
            None => Err(DriverError::new(
                ErrorKind::Protocol,
                &self.id,
                call,
                format!("{detail}: the countdown is not in the answer, so whether it is qfence's cannot be told"),
                true,
            )),
        }
    }

    async fn arm(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog arm";
        let seconds = watchdog_seconds(target).map_err(|m| self.bad_params(CALL, m))?;
        let tenths = watchdog_tenths(target).map_err(|m| self.bad_params(CALL, m))?;
        let mut s = self.open(CALL).await?;
        self.command(
            &mut s,
            CALL,
            "Set Watchdog Timer",
            (netfn::APP, cmd::SET_WATCHDOG),
            &wire::set_watchdog_request(USE_SMS_DONT_STOP, ACTION_POWER_DOWN, tenths),
            true,
        )
        .await?;
        self.command(
            &mut s,
            CALL,
            "Reset Watchdog Timer",
            (netfn::APP, cmd::RESET_WATCHDOG),
            &[],
            true,
        )
        .await?;
        let r = self
            .watchdog_read_back(ctx, &mut s, CALL, true, tenths)
            .await;
        s.close().await;
        let r = r?;
        tracing::info!(controller = %self.id, seconds, armed = r.holds, "Armed the BMC watchdog");
        Ok(r)
    }

    async fn renew_watchdog(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog renew";
        let tenths = watchdog_tenths(target).map_err(|m| self.bad_params(CALL, m))?;
        let mut s = self.open(CALL).await?;
        let reset = s.request(netfn::APP, cmd::RESET_WATCHDOG, &[]).await;
        match reset {
            Ok(r) if r.cc == 0 => {}
            Ok(r) if r.cc == 0x80 => {
                s.close().await;
                return Err(DriverError::new(
                    ErrorKind::Rejected,
                    &self.id,
                    CALL,
                    "Reset Watchdog Timer answered 0x80: the watchdog was never set since the BMC started (a BMC reset or firmware update clears it), so there is nothing to renew: arm it (perform) first",
                    false,
                ));
            }
            Ok(r) => {
                s.close().await;
                return Err(self.cc_error(CALL, "Reset Watchdog Timer", r.cc));
            }
            Err(f) => {
                let unknown = f.maybe_delivered;
                return Err(self.err(CALL, f, unknown));
            }
        }
        let r = self
            .watchdog_read_back(ctx, &mut s, CALL, true, tenths)
            .await;
        s.close().await;
        r
    }

    async fn disarm(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog disarm";
        let seconds = watchdog_seconds(target).unwrap_or(DEFAULT_WATCHDOG_SECONDS);
        let mut s = self.open(CALL).await?;
        self.command(
            &mut s,
            CALL,
            "Set Watchdog Timer",
            (netfn::APP, cmd::SET_WATCHDOG),
            &wire::set_watchdog_request(USE_SMS_STOP, ACTION_NONE, (seconds * 10) as u16),
            true,
        )
        .await?;
        let r = self
            .watchdog_read_back(ctx, &mut s, CALL, false, (seconds * 10) as u16)
            .await;
        s.close().await;
        let r = r?;
        if r.holds {
            return Err(DriverError::new(
                ErrorKind::Rejected,
                &self.id,
                CALL,
                format!(
                    "the watchdog still reads armed after disarming: {}",
                    r.detail
                ),
                true,
            ));
        }
        tracing::info!(controller = %self.id, "Disarmed the BMC watchdog");
        Ok(r)
    }

    async fn check_watchdog(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog check";
        let tenths = watchdog_tenths(target).map_err(|m| self.bad_params(CALL, m))?;
        let mut s = self.open(CALL).await?;
        let r = self
            .watchdog_read_back(ctx, &mut s, CALL, false, tenths)
            .await;
        s.close().await;
        r
    }
}

/// Grades `power.off` from what a probe read (protocols.md §2.6): Chassis Control needs
/// OPERATOR, and the BMC's word on the session's privilege is proof unless a firmware
/// firewall may disable single commands.
fn grade_power(
    chassis: Result<(), &str>,
    privilege: Privilege,
    privilege_source: &str,
    firewall: bool,
) -> (Grade, String) {
    let operator = privilege >= Privilege::Operator && privilege != Privilege::Oem;
    match (chassis, operator) {
        (Err(m), _) => (
            Grade::Failed,
            format!("Get Chassis Status failed, so power cannot be read back: {m}"),
        ),
        (Ok(()), false) => (
            Grade::Unverifiable,
            format!(
                "the session runs at {privilege} ({privilege_source}); Chassis Control needs OPERATOR, and only sending it would tell"
            ),
        ),
        (Ok(()), true) if firewall => (
            Grade::Inferred,
            format!(
                "the session runs at {privilege} ({privilege_source}) and reads chassis power; the BMC has the firmware firewall, which may disable Chassis Control, and its command enables were not read"
            ),
        ),
        (Ok(()), true) => (
            Grade::Proven,
            format!(
                "the BMC granted the session {privilege} ({privilege_source}), enough for Chassis Control, and answered Get Chassis Status"
            ),
        ),
    }
}

/// Grades `watchdog` from a probe's Get Watchdog Timer, with a warning when the timer's
/// running state cannot be read back.
fn grade_watchdog(
    watchdog: Result<&WatchdogTimer, (ErrorKind, &str)>,
    privilege: Privilege,
) -> ((Grade, String), Option<String>) {
    let operator = privilege >= Privilege::Operator && privilege != Privilege::Oem;
    match (watchdog, operator) {
        (Err((ErrorKind::Unsupported, m)), _) => (
            (Grade::Failed, format!("the BMC has no watchdog: {m}")),
            None,
        ),
        (Err((_, m)), _) => (
            (
                Grade::Unverifiable,
                format!("Get Watchdog Timer failed: {m}"),
            ),
            None,
        ),
        (Ok(_), false) => (
            (
                Grade::Unverifiable,
                format!(
                    "the session runs at {privilege}; Set Watchdog Timer needs OPERATOR, and only sending it would tell"
                ),
            ),
            None,
        ),
        (Ok(w), true) if w.running().is_none() => (
            (
                Grade::Unverifiable,
                format!(
                    "the session runs at {privilege}, enough for Set Watchdog Timer, but Get Watchdog Timer answers {} of {} bytes, so an armed timer cannot be read back",
                    w.len,
                    wire::WATCHDOG_ANSWER_LEN
                ),
            ),
            Some(format!(
                "Get Watchdog Timer answers {} of {} bytes: the watchdog's running state cannot be read, so its checks will say UNKNOWN; arming and renewing are reported from Reset Watchdog Timer's acceptance",
                w.len,
                wire::WATCHDOG_ANSWER_LEN
            )),
        ),
        (Ok(_), true) => (
            (
                Grade::Inferred,
                format!(
                    "the session runs at {privilege}, enough for Set Watchdog Timer, and the timer reads back; that its expiry powers the host off is not tested (that would fence it)"
                ),
            ),
            None,
        ),
    }
}

fn grade(capability: &str, (grade, reason): (Grade, String)) -> CapabilityGrade {
    CapabilityGrade {
        capability: capability.into(),
        grade,
        reason,
    }
}

impl Driver for IpmiDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::Ipmi
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", self.probe_inner(ctx)).await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            const CALL: &str = "discover";
            let mut s = self.open(CALL).await?;
            let (guid, _) = self.guid(&mut s, CALL).await?;
            let st = self.chassis_status(&mut s, CALL).await;
            s.close().await;
            let power = match st {
                Ok(st) if st.power_on => "on",
                Ok(_) => "off",
                Err(_) => "unknown",
            };
            // IPMI names no hosts: the BMC has one, and the binding names it.
            Ok([POWER_OFF, WATCHDOG]
                .into_iter()
                .map(|c| Discovered {
                    capability: c.into(),
                    resource: guid.clone(),
                    description: format!(
                        "the one host behind this BMC (system GUID {guid}), power {power}"
                    ),
                })
                .collect())
        })
        .await
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        let mut problems = Vec::new();
        match target.capability.as_str() {
            POWER_OFF => {
                for k in target.params.keys() {
                    problems.push(format!("params.{k}: {POWER_OFF} takes no parameters"));
                }
            }
            WATCHDOG => {
                for k in target.params.keys().filter(|k| *k != TIMEOUT_PARAM) {
                    problems.push(format!("params.{k}: {WATCHDOG} takes only {TIMEOUT_PARAM}"));
                }
                if let Err(m) = watchdog_seconds(target) {
                    problems.push(m);
                }
                let found = ctx
                    .run(&self.id, "check_binding", async {
                        let mut s = self.open("check_binding").await?;
                        let w = self.watchdog(&mut s, "check_binding").await;
                        s.close().await;
                        w
                    })
                    .await;
                match found {
                    Ok(_) => {}
                    Err(e) if e.kind == ErrorKind::Unsupported => {
                        problems.push(format!("the BMC has no watchdog: {}", e.message));
                    }
                    Err(e) => return Err(e),
                }
            }
            other => problems.push(format!(
                "capability {other:?} is not an IPMI capability ({POWER_OFF}, {WATCHDOG})"
            )),
        }
        Ok(problems)
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        match target.capability.as_str() {
            POWER_OFF => {
                ctx.run(&self.id, "power.off check", self.check_power(ctx))
                    .await
            }
            WATCHDOG => {
                ctx.run(&self.id, "watchdog check", self.check_watchdog(ctx, target))
                    .await
            }
            _ => Err(self.unsupported("check", target)),
        }
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        match target.capability.as_str() {
            POWER_OFF => {
                ctx.run(&self.id, "power.off", self.set_power(ctx, false))
                    .await
            }
            WATCHDOG => {
                ctx.run(&self.id, "watchdog arm", self.arm(ctx, target))
                    .await
            }
            _ => Err(self.unsupported("perform", target)),
        }
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        match target.capability.as_str() {
            POWER_OFF => {
                // The reading describes the capability's condition (host off): false now.
                ctx.run(&self.id, "power.on", self.set_power(ctx, true))
                    .await
            }
            WATCHDOG => {
                ctx.run(&self.id, "watchdog disarm", self.disarm(ctx, target))
                    .await
            }
            _ => Err(self.unsupported("undo", target)),
        }
    }

    async fn renew(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        match target.capability.as_str() {
            WATCHDOG => {
                ctx.run(&self.id, "watchdog renew", self.renew_watchdog(ctx, target))
                    .await
            }
            _ => Err(crate::driver::unsupported(self, "renew", target)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qfence_model::SiteId;

    #[test]
    fn endpoints_parse_as_host_and_port() {
        assert_eq!(
            parse_endpoint("127.0.0.1:6230").unwrap(),
            ("127.0.0.1".into(), 6230)
        );
        assert_eq!(parse_endpoint("bmc1").unwrap(), ("bmc1".into(), 623));
        assert_eq!(
            parse_endpoint("bmc1.example:624").unwrap(),
            ("bmc1.example".into(), 624)
        );
        assert_eq!(parse_endpoint("[::1]:700").unwrap(), ("::1".into(), 700));
        assert_eq!(parse_endpoint("::1").unwrap(), ("::1".into(), 623));
        assert!(parse_endpoint("https://bmc1").is_err());
        assert!(parse_endpoint("bmc1:0").is_err());
        assert!(parse_endpoint("bmc1:x").is_err());
        assert!(parse_endpoint("").is_err());
    }

    fn target(params: &[(&str, &str)]) -> Target {
        Target {
            capability: WATCHDOG.into(),
            resource: "node1".into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            site: SiteId::new("dc1").unwrap(),
        }
    }

    #[test]
    fn watchdog_timeout_defaults_to_ten_seconds_and_is_bounded() {
        assert_eq!(watchdog_seconds(&target(&[])), Ok(10));
        assert_eq!(
            watchdog_seconds(&target(&[("timeout_seconds", "5")])),
            Ok(5)
        );
        assert_eq!(
            watchdog_seconds(&target(&[("timeout_seconds", "6553")])),
            Ok(6553)
        );
        for bad in ["0", "6554", "-1", "2.5", "ten"] {
            let e = watchdog_seconds(&target(&[("timeout_seconds", bad)])).unwrap_err();
            assert!(e.contains("timeout_seconds"), "{e}");
        }
    }

    fn timer(bytes: &[u8]) -> WatchdogTimer {
        wire::parse_watchdog(bytes).unwrap()
    }

    #[test]
    fn a_short_watchdog_answer_is_unknown_unless_a_reset_was_just_accepted() {
        // ipmi_sim's 6-byte answer after arming
        let short = timer(&[0x44, 0x02, 0, 0x00, 0x32, 0x00]);
        let e = watchdog_armed(&short, false).unwrap_err();
        assert!(e.contains("too short"), "{e}");
        let (holds, detail) = watchdog_armed(&short, true).unwrap();
        assert!(holds);
        assert!(
            detail.contains("Reset Watchdog Timer was just accepted"),
            "{detail}"
        );
    }

    #[test]
    fn action_none_reads_disarmed_even_from_a_short_answer() {
        let (holds, detail) = watchdog_armed(&timer(&[0x04, 0x00, 0, 0, 0x64, 0]), false).unwrap();
        assert!(!holds);
        assert!(detail.contains("action none"), "{detail}");
    }

    #[test]
    fn power_control_grades_follow_the_sessions_privilege() {
        let g = |p, fw| grade_power(Ok(()), p, "Get Session Info", fw).0;
        assert_eq!(g(Privilege::Administrator, false), Grade::Proven);
        assert_eq!(g(Privilege::Operator, false), Grade::Proven);
        assert_eq!(g(Privilege::Operator, true), Grade::Inferred);
        assert_eq!(g(Privilege::User, false), Grade::Unverifiable);
        assert_eq!(g(Privilege::Callback, false), Grade::Unverifiable);
        assert_eq!(g(Privilege::Oem, false), Grade::Unverifiable);
        let (grade, reason) = grade_power(Err("timeout"), Privilege::Administrator, "x", false);
        assert_eq!(grade, Grade::Failed);
        assert!(reason.contains("timeout"));
    }

    #[test]
    fn watchdog_grades_say_why() {
        let full = timer(&[0x04, 0x02, 0, 0, 0x64, 0, 0x64, 0]);
        let short = timer(&[0x04, 0x02, 0, 0, 0x64, 0]);
        let ((g, _), w) = grade_watchdog(Ok(&full), Privilege::Operator);
        assert_eq!((g, w), (Grade::Inferred, None));
        let ((g, _), w) = grade_watchdog(Ok(&short), Privilege::Operator);
        assert_eq!(g, Grade::Unverifiable);
        assert!(w.unwrap().contains("6 of 8 bytes"));
        let ((g, _), _) = grade_watchdog(Ok(&full), Privilege::User);
        assert_eq!(g, Grade::Unverifiable);
        let ((g, _), _) = grade_watchdog(
            Err((ErrorKind::Unsupported, "0xc1")),
            Privilege::Administrator,
        );
        assert_eq!(g, Grade::Failed);
    }

    #[test]
    fn a_complete_answer_gives_the_running_bit() {
        let running = timer(&[0x44, 0x02, 0, 0, 0x64, 0, 0x50, 0]);
        assert!(watchdog_armed(&running, false).unwrap().0);
        let stopped = timer(&[0x04, 0x02, 0, 0, 0x64, 0, 0x64, 0]);
        // a complete answer overrides a just-accepted reset: the BMC says it is stopped
        assert!(!watchdog_armed(&stopped, true).unwrap().0);
    }
}
