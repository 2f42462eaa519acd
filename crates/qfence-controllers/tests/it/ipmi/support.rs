//! Shared by the IPMI tests and the IPMI benchmark: an `ipmi_sim` instance per test, and
//! driver set-up.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use qfence_controllers::ipmi::IpmiDriver;
use qfence_controllers::{CallContext, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use secrecy::SecretString;

fn emulators_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators")
}

/// One `ipmi_sim` with its fake host, on UDP 127.0.0.1:(6229 + n), stopped on drop.
#[derive(Debug)]
pub struct Sim {
    pub n: u32,
    pub port: u16,
    run_dir: PathBuf,
    pub host_log: PathBuf,
}

impl Sim {
    /// Starts instance `n` with the host powered on. `None` only when the operator chose
    /// `QFENCE_SKIP_EMULATORS=1`; a missing emulator otherwise fails the test.
    pub fn start(n: u32) -> Option<Sim> {
        if std::env::var("QFENCE_SKIP_EMULATORS").as_deref() == Ok("1") {
            eprintln!("SKIPPED: QFENCE_SKIP_EMULATORS=1, this test needs ipmi_sim");
            return None;
        }
        let dir = emulators_dir();
        let script = dir.join("start-ipmi-sim.sh");
        assert!(
            script.exists(),
            "{} is missing: this test needs the project's emulator scripts (tools/emulators) and OpenIPMI's ipmi_sim; set QFENCE_SKIP_EMULATORS=1 to skip emulator tests",
            script.display()
        );
        let run_dir = std::env::temp_dir().join(format!("qfence-ipmi-test-{n}"));
        // A fresh run dir and no leftover from an earlier, killed run of this test.
        let _ = Command::new("bash")
            .arg(dir.join("stop.sh"))
            .arg(format!("ipmi-sim-{n}"))
            .env("QFENCE_EMU_RUN", &run_dir)
            .output();
        let _ = std::fs::remove_dir_all(&run_dir);
        let out = Command::new("bash")
            .arg(&script)
            .arg(n.to_string())
            .env("QFENCE_EMU_RUN", &run_dir)
            .env("IPMI_START_ON", "1")
            .output()
            .expect("run bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "could not start ipmi_sim instance {n} with {}: {}\n{}\n(install the emulators with tools/emulators/install.sh, or set QFENCE_SKIP_EMULATORS=1 to skip emulator tests)",
            script.display(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let var = |k: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")).map(str::to_owned))
                .unwrap_or_else(|| panic!("start-ipmi-sim.sh printed no {k}: {stdout}"))
        };
        Some(Sim {
            n,
            port: var("IPMI_PORT").parse().expect("IPMI_PORT is a port"),
            host_log: PathBuf::from(var("HOST_EVENTS")),
            run_dir,
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

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(emulators_dir().join("stop.sh"))
            .arg(format!("ipmi-sim-{}", self.n))
            .env("QFENCE_EMU_RUN", &self.run_dir)
            .output();
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
        SecretString::from(password.to_owned()),
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
