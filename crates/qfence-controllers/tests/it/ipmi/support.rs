//! Shared by the IPMI tests and the IPMI benchmark: an `ipmi_sim` instance per test, and
//! driver set-up.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::emulators::{Emulator, Starter};

use qfence_controllers::driver::Build as _;
use qfence_controllers::ipmi::IpmiDriver;
use qfence_controllers::{CallContext, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use secrecy::SecretString;

/// One `ipmi_sim` with its fake host, on a UDP port of its own, stopped on drop.
#[derive(Debug)]
pub struct Sim {
    pub n: u32,
    pub port: u16,
    emu: Emulator,
    pub host_log: PathBuf,
}

impl Sim {
    /// Starts instance `n` (its name, `ipmi-sim-N`) with the host powered on. `None` only
    /// when the operator chose `QFENCE_SKIP_EMULATORS=1`; a missing emulator otherwise fails
    /// the test.
    pub fn start(n: u32) -> Option<Sim> {
        let emu = Starter::new("start-ipmi-sim.sh")
            .prefix("qipmi")
            .arg(n.to_string())
            .env("IPMI_START_ON", "1")
            .udp_port("IPMI_PORT")
            .private_tcp_port("IPMI_VM_PORT")
            .start()?;
        Some(Sim {
            n,
            port: emu.port("IPMI_PORT"),
            host_log: PathBuf::from(emu.var("HOST_EVENTS")),
            emu,
        })
    }

    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The GUID `start-ipmi-sim.sh` writes in lan.conf, as ipmitool prints it.
    pub fn expected_guid(&self) -> String {
        let raw = format!("a123456789abcdefa1234567{:08x}", self.port);
        let bytes: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(&raw[2 * i..2 * i + 2], 16).unwrap())
            .rev()
            .collect();
        let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// What the fake host logged (power-on, bmc-command POWEROFF, power-off…).
    pub fn host_events(&self) -> String {
        std::fs::read_to_string(&self.host_log).unwrap_or_default()
    }

    /// `ipmitool chassis power status`, an independent reader of the power state.
    pub fn ipmitool_power(&self) -> String {
        let out = Command::new("ipmitool")
            .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(["-U", "admin", "-E", "chassis", "power", "status"])
            .env("IPMITOOL_PASSWORD", "password")
            .output()
            .expect("run ipmitool");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

pub fn config(endpoint: &str, username: &str) -> ControllerConfig {
    ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::default(),
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Ipmi {
            endpoint: endpoint.into(),
            username: username.into(),
            cipher_suite: 3,
        },
    }
}

pub fn driver(endpoint: &str, password: &str) -> IpmiDriver {
    IpmiDriver::build(
        ControllerId::new("bmc-dc1").unwrap(),
        &config(endpoint, "admin"),
        Some(SecretString::from(password.to_owned())),
    )
    .expect("valid IPMI config")
}

pub fn ctx(seconds: u64) -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("orch-1").unwrap(),
        Duration::from_secs(seconds),
    )
}

pub fn target(capability: &str, params: &[(&str, &str)]) -> Target {
    Target {
        capability: capability.into(),
        resource: "node1".into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        site: SiteId::new("dc1").unwrap(),
    }
}
