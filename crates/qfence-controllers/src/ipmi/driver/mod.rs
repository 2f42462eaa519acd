//! [`IpmiDriver`]: the [`Driver`] contract over RMCP+ sessions.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, Grade};
use secrecy::SecretString;

use super::session::{self, Failure, Params, Retry, Session};
use super::wire::{self, CipherSuite, Privilege, WatchdogAction, WatchdogTimer, cmd, netfn};
use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, required_secret,
};

mod client;
mod power;
mod probe;
mod watchdog;
#[cfg(test)]
use probe::*;
use watchdog::*;

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

    /// The error of `call` for a failed exchange with the BMC.
    fn failed(&self, call: &str, f: Failure, state_unknown: bool) -> DriverError {
        self.err(f.kind, call, f.message, state_unknown)
    }

    fn power_reading(&self, ctx: &CallContext, st: wire::ChassisStatus) -> Reading {
        let word = if st.power_on { "on" } else { "off" };
        ctx.reading(
            !st.power_on,
            format!(
                "Chassis power {word} (Get Chassis Status power state 0x{:02x})",
                st.power_state
            ),
        )
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
}

impl Driver for IpmiDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
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
