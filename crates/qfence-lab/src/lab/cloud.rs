//! The lab's small cloud for Instance HA: the Nova simulator with compute hosts
//! `compute-1..N` and their servers, and one Redfish simulator serving every host's BMC as a
//! system of the host's name.
//!
//! Each host's power line is wired to its `nova-compute`, as on real hardware: powered off,
//! its heartbeats stop; powered on, it starts again (and cleans up what was evacuated away,
//! as Nova's does at start). [`Cloud::fail_host`] is a host dying while powered (a kernel
//! panic, a hang): its `nova-compute` stops reporting while its BMC still reads `On`, until
//! Instance HA powers it off, reads that back, evacuates it and powers it on again.
//!
//! One copy for the lab (`qfence lab fail-host`) and for the runtime's Instance HA tests.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::nova::{self, NovaHandle, NovaState, VmState};
use crate::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use crate::{LabError, TlsIdentity};

use super::BMC_PASSWORD;

/// The Nova simulator's application credential `qfence` and its secret, stored as `lab-nova`.
pub const NOVA_SECRET: &str = "qfence-secret";

/// The cloud's name in `instance_ha:`.
pub const CLOUD: &str = "overcloud";

/// How many hosts, servers, and how fast Nova notices and evacuates.
#[derive(Debug, Clone)]
pub struct CloudShape {
    /// Compute hosts `compute-1..N`.
    pub hosts: usize,
    /// ACTIVE servers on each host at start.
    pub servers_per_host: usize,
    /// Nova reads a host `down` this long after its last heartbeat.
    pub service_down_time: Duration,
    /// An evacuation's rebuild, from `accepted` to `done`.
    pub evacuation_time: Duration,
}

impl CloudShape {
    /// The lab's: four hosts of two servers, a host read down 2 s after its last heartbeat
    /// (Nova's default is 60 s), and evacuations of 3 s, long enough to be watched with
    /// `qfence instance-ha evacuations`.
    pub fn lab() -> Self {
        Self {
            hosts: 4,
            servers_per_host: 2,
            service_down_time: Duration::from_secs(2),
            evacuation_time: Duration::from_secs(3),
        }
    }
}

/// How the cloud appears in a configuration: its two controllers and its `instance_ha`
/// section.
#[derive(Debug, Clone, Copy)]
pub struct CloudYaml<'a> {
    /// The Nova controller's name.
    pub nova: &'a str,
    /// The BMCs' Redfish controller's name.
    pub bmc: &'a str,
    /// Both controllers' site.
    pub site: &'a str,
    /// Further sites that may call them.
    pub reach: &'a [&'a str],
    /// Each controller's `timeout_seconds`.
    pub timeout_seconds: u64,
    /// Hosts at another site than [`CloudYaml::site`], with theirs.
    pub host_sites: &'a [(&'a str, &'a str)],
    /// Hosts left without a fence binding.
    pub unfenced: &'a [&'a str],
    /// The cloud's parameter lines (`poll_seconds: 1`, ...), each indented four spaces.
    pub parameters: &'a str,
}

/// The lab's cloud in `lab.yaml`: controllers `nova` and `bmc-compute` at dc1, reachable from
/// dc2 too (the leader calls Nova itself, and the leader may be at either site); compute-1
/// and compute-2 at dc1, compute-3 and compute-4 at dc2. Nova is polled every second; a host
/// not updated for 20 s has failed even if Nova still reads it up (its service reads down
/// after 2 s first, [`CloudShape::lab`]). Smart evacuation follows each evacuation to its
/// end, read every second, so a host is re-enabled only once its servers run elsewhere.
pub const LAB_CLOUD: CloudYaml<'static> = CloudYaml {
    nova: "nova",
    bmc: "bmc-compute",
    site: "dc1",
    reach: &["dc2"],
    timeout_seconds: 5,
    host_sites: &[("compute-3", "dc2"), ("compute-4", "dc2")],
    unfenced: &[],
    parameters: "    poll_seconds: 1\n    delta_seconds: 20\n    smart_evacuation: true\n    \
                 evacuation_poll_seconds: 1\n",
};

/// One compute host as the lab shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CloudHostView {
    pub host: String,
    /// Its power at its BMC (`On`, `Off`, ...).
    pub power: String,
    /// Whether its `nova-compute` sends heartbeats.
    pub reporting: bool,
    /// `up` or `down`, as Nova reads its service now.
    pub service: String,
    pub disabled: bool,
    pub forced_down: bool,
    /// Servers on it.
    pub servers: usize,
    /// Of those, ACTIVE.
    pub active: usize,
}

/// The running cloud: Nova, the BMCs, and the wires from each power line to its host.
pub struct Cloud {
    pub nova: Arc<NovaHandle>,
    pub bmc: BmcHandle,
    wires: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloud")
            .field("nova", &self.nova.base_url())
            .field("bmc", &self.bmc.base_url())
            .finish_non_exhaustive()
    }
}

/// `compute-N`.
pub fn host_name(n: usize) -> String {
    format!("compute-{n}")
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

impl Cloud {
    /// Starts Nova and the BMCs on loopback and wires each host's power to its
    /// `nova-compute`.
    pub async fn start(shape: &CloudShape) -> Result<Self, LabError> {
        let mut state = NovaState::new(shape.hosts, shape.servers_per_host);
        state.service_down_time = shape.service_down_time;
        state.evacuation.duration = shape.evacuation_time;
        Self::start_with(state).await
    }

    /// Starts a cloud of the given Nova state (a benchmark's own layout of servers), with a
    /// BMC system for each of its compute hosts, wired as [`Cloud::start`]'s are.
    pub async fn start_with(state: NovaState) -> Result<Self, LabError> {
        let hosts: Vec<String> = state.hosts.iter().map(|h| h.name.clone()).collect();
        let nova = nova::start(loopback(), TlsIdentity::loopback()?, state).await?;
        let systems = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| System::new(h, &nova::state::uuid_from(0xb1 + i as u64)))
            .collect();
        let accounts = vec![Account::new("qfence", BMC_PASSWORD, Role::Operator)];
        let bmc = redfish::start(
            loopback(),
            TlsIdentity::loopback()?,
            BmcState::new(systems, accounts),
        )
        .await?;
        let mut cloud = Self {
            nova: Arc::new(nova),
            bmc,
            wires: Vec::new(),
        };
        for h in &hosts {
            cloud.wire(h)?;
        }
        Ok(cloud)
    }

    /// Follows `name`'s power line: off stops its nova-compute, on starts it again.
    fn wire(&mut self, name: &str) -> Result<(), LabError> {
        let mut line = self
            .bmc
            .power_line(name)
            .ok_or_else(|| LabError::InvalidState(format!("the BMC has no system {name}")))?;
        let nova = self.nova.clone();
        let name = name.to_owned();
        self.wires.push(tokio::spawn(async move {
            while line.changed().await.is_ok() {
                let powered = *line.borrow_and_update();
                nova.update(|s| {
                    if powered {
                        s.restart_host(&name)
                    } else {
                        s.stop_heartbeat(&name)
                    }
                });
            }
        }));
        Ok(())
    }

    /// The hosts' names, as Nova has them.
    pub fn hosts(&self) -> Vec<String> {
        self.nova
            .snapshot()
            .hosts
            .iter()
            .map(|h| h.name.clone())
            .collect()
    }

    fn known(&self, host: &str) -> Result<(), LabError> {
        let hosts = self.hosts();
        if hosts.iter().any(|h| h == host) {
            Ok(())
        } else {
            Err(LabError::Refused(format!(
                "unknown compute host {host:?}; the cloud has {}",
                hosts.join(", ")
            )))
        }
    }

    /// The host dies while powered: its `nova-compute` stops reporting (its BMC still reads
    /// `On`). A host already silent stays as it is, so its last heartbeat keeps its time.
    pub fn fail_host(&self, host: &str) -> Result<(), LabError> {
        self.known(host)?;
        self.nova.update(|s| {
            if s.host(host).is_some_and(|h| h.alive) {
                s.stop_heartbeat(host);
            }
        });
        Ok(())
    }

    /// The dead host's `nova-compute` starts again (someone rebooted it by hand). Refused
    /// while the host is off at its BMC: a host powered off does not report.
    pub fn heal_host(&self, host: &str) -> Result<(), LabError> {
        self.known(host)?;
        let power = self.bmc.snapshot().system(host).map(|s| s.power);
        if power != Some(PowerState::On) {
            return Err(LabError::Refused(format!(
                "{host} is not powered on at its BMC ({power:?}): Instance HA powers it on \
                 after its evacuation"
            )));
        }
        self.nova.update(|s| {
            if s.host(host).is_some_and(|h| !h.alive) {
                s.restart_host(host);
            }
        });
        Ok(())
    }

    /// Servers on `host` now.
    pub fn servers_on(&self, host: &str) -> usize {
        self.nova
            .snapshot()
            .servers
            .iter()
            .filter(|s| s.host == host)
            .count()
    }

    /// Every host: power, heartbeats, Nova's reading, servers.
    pub fn view(&self) -> Vec<CloudHostView> {
        let snap = self.nova.snapshot();
        let bmc = self.bmc.snapshot();
        let now = SystemTime::now();
        snap.hosts
            .iter()
            .map(|h| {
                let on = |s: &&nova::Server| s.host == h.name;
                CloudHostView {
                    host: h.name.clone(),
                    power: bmc
                        .system(&h.name)
                        .map_or_else(|| "absent".to_owned(), |s| format!("{:?}", s.power)),
                    reporting: h.alive,
                    service: if snap.host_up(h, now) { "up" } else { "down" }.to_owned(),
                    disabled: h.disabled,
                    forced_down: h.forced_down,
                    servers: snap.servers.iter().filter(on).count(),
                    active: snap
                        .servers
                        .iter()
                        .filter(on)
                        .filter(|s| s.vm_state == VmState::Active)
                        .count(),
                }
            })
            .collect()
    }

    /// The controllers' entries (under `controllers:`, indented two spaces), pinned.
    pub fn controllers_yaml(&self, c: &CloudYaml<'_>) -> String {
        let pin = |fp: &str| format!("{{pin: \"sha256:{fp}\"}}");
        let reach = if c.reach.is_empty() {
            String::new()
        } else {
            format!("    reach: [{}]\n", c.reach.join(", "))
        };
        format!(
            "  {nova}:\n    type: nova\n    endpoint: {keystone}\n    site: {site}\n{reach}    \
             secret: lab-nova\n    application_credential_id: qfence\n    \
             timeout_seconds: {t}\n    tls: {nova_pin}\n  \
             {bmc}:\n    type: redfish\n    endpoint: {bmc_url}\n    site: {site}\n{reach}    \
             secret: lab-redfish\n    username: qfence\n    timeout_seconds: {t}\n    \
             tls: {bmc_pin}\n",
            nova = c.nova,
            bmc = c.bmc,
            site = c.site,
            t = c.timeout_seconds,
            keystone = self.nova.keystone_url(),
            nova_pin = pin(self.nova.fingerprint()),
            bmc_url = self.bmc.base_url(),
            bmc_pin = pin(self.bmc.fingerprint()),
        )
    }

    /// The `instance_ha:` section: cloud [`CLOUD`], each host but the unfenced fenced through
    /// the BMC's system of its name.
    pub fn instance_ha_yaml(&self, c: &CloudYaml<'_>) -> String {
        let mut hosts = String::new();
        for h in self.hosts() {
            if c.unfenced.contains(&h.as_str()) {
                continue;
            }
            let site = c
                .host_sites
                .iter()
                .find(|(name, _)| *name == h)
                .map(|(_, s)| format!(", site: {s}"))
                .unwrap_or_default();
            let _ = writeln!(
                hosts,
                "      {h}: {{controller: {}, capability: power.off, resource: {h}{site}}}",
                c.bmc
            );
        }
        format!(
            "instance_ha:\n  {CLOUD}:\n    nova: {}\n{}    hosts:\n{hosts}",
            c.nova, c.parameters
        )
    }

    /// `config` with the cloud added: its controllers first under `controllers:` (the
    /// section is made if there is none), its `instance_ha:` section at the end.
    pub fn add_to(&self, config: &str, c: &CloudYaml<'_>) -> String {
        let controllers = self.controllers_yaml(c);
        let mut text = config.to_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        match text.find("\ncontrollers:\n") {
            Some(at) => text.insert_str(at + "\ncontrollers:\n".len(), &controllers),
            None => {
                text.push_str("controllers:\n");
                text.push_str(&controllers);
            }
        }
        text.push_str(&self.instance_ha_yaml(c));
        text
    }

    /// Stops the wires, Nova and the BMCs.
    pub async fn stop(self) {
        for w in self.wires {
            w.abort();
            let _ = w.await;
        }
        if let Ok(nova) = Arc::try_unwrap(self.nova) {
            nova.shutdown().await;
        }
        self.bmc.shutdown().await;
    }
}
