//! A small OpenStack cloud for Instance HA's runtime tests: the Nova simulator, a Redfish
//! simulator as every compute host's BMC, and one orchestrator running the Instance HA loop.
//! A host's power line is wired to its `nova-compute`: powered off, its heartbeats stop;
//! powered on, it starts again (and cleans up what was evacuated away, as Nova's does).
//! Shared by `instance_ha.rs`, `instance_ha_console.rs` and the browser tests (by `#[path]`).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use qfence_lab::TlsIdentity;
use qfence_lab::nova::{self as sim, NovaHandle, NovaState};
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, Role, System};
use qfence_runtime::{InstanceHa, RuntimeBackend};

use super::lab::{BMC_PASSWORD, Orchestrator, secrets};

pub(crate) const HOSTS: usize = 4;
pub(crate) const SERVERS_PER_HOST: usize = 2;

/// The cloud and its BMC, with each host's power wired to its nova-compute.
pub(crate) struct Cloud {
    pub(crate) nova: Arc<NovaHandle>,
    pub(crate) bmc: BmcHandle,
    wires: Vec<tokio::task::JoinHandle<()>>,
}

pub(crate) fn host(n: usize) -> String {
    format!("compute-{n}")
}

impl Cloud {
    pub(crate) async fn start() -> Result<Self> {
        let mut state = NovaState::new(HOSTS, SERVERS_PER_HOST);
        // Nova reads a host down this long after its last heartbeat.
        state.service_down_time = Duration::from_secs(2);
        let nova = sim::start("127.0.0.1:0".parse()?, TlsIdentity::loopback()?, state).await?;
        let systems = (1..=HOSTS)
            .map(|n| System::new(&host(n), &sim::state::uuid_from(0xb0 + n as u64)))
            .collect();
        let accounts = vec![Account::new("qfence", BMC_PASSWORD, Role::Operator)];
        let bmc = redfish::start(
            "127.0.0.1:0".parse()?,
            TlsIdentity::loopback()?,
            BmcState::new(systems, accounts),
        )
        .await?;
        let mut cloud = Self {
            nova: Arc::new(nova),
            bmc,
            wires: Vec::new(),
        };
        for n in 1..=HOSTS {
            cloud.wire(&host(n));
        }
        Ok(cloud)
    }

    /// Follows `name`'s power line: off stops its nova-compute, on starts it again.
    fn wire(&mut self, name: &str) {
        let mut line = self.bmc.power_line(name).expect("a system");
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
    }

    /// The configuration: one orchestrator, the Nova controller, the BMC, and the cloud
    /// `overcloud` with `extra` parameters. Each host but those in `unfenced` is fenced
    /// through the BMC's system of its name.
    pub(crate) fn config(&self, extra: &str, unfenced: &[&str]) -> String {
        let pin = |fp: &str| format!("{{pin: \"sha256:{fp}\"}}");
        let hosts: String = (1..=HOSTS)
            .map(host)
            .filter(|h| !unfenced.contains(&h.as_str()))
            .map(|h| {
                format!("      {h}: {{controller: bmc, capability: power.off, resource: {h}}}\n")
            })
            .collect();
        format!(
            "cluster:\n  name: iha\nsites:\n  dc1: {{}}\norchestrators:\n  dc1-a: {{site: dc1, \
             address: \"127.0.0.1:7401\"}}\ncontrollers:\n  nova:\n    type: nova\n    \
             endpoint: {keystone}\n    site: dc1\n    secret: lab-nova\n    \
             application_credential_id: qfence\n    timeout_seconds: 5\n    tls: {nova_pin}\n  \
             bmc:\n    type: redfish\n    endpoint: {bmc}\n    site: dc1\n    secret: \
             lab-redfish\n    username: qfence\n    timeout_seconds: 5\n    tls: {bmc_pin}\n\
             instance_ha:\n  overcloud:\n    nova: nova\n    poll_seconds: 1\n    \
             delta_seconds: 20\n{extra}    hosts:\n{hosts}",
            keystone = self.nova.keystone_url(),
            nova_pin = pin(self.nova.fingerprint()),
            bmc = self.bmc.base_url(),
            bmc_pin = pin(self.bmc.fingerprint()),
        )
    }

    pub(crate) fn servers_on(&self, name: &str) -> usize {
        self.nova
            .snapshot()
            .servers
            .iter()
            .filter(|s| s.host == name)
            .count()
    }

    pub(crate) async fn stop(self) {
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

/// The orchestrator with its Instance HA loop running.
pub(crate) async fn start(config: &str) -> Result<(Orchestrator, RuntimeBackend)> {
    let o = Orchestrator::start(config, true).await?;
    let ha = InstanceHa::new(&o.engine, o.drivers.clone());
    tokio::spawn(ha.run(o.stop.clone()));
    let backend = RuntimeBackend::new(&o.engine, secrets());
    Ok((o, backend))
}

/// The Instance HA records of the event log, as `KIND message` lines.
pub(crate) fn iha_events(o: &Orchestrator) -> Vec<String> {
    o.engine
        .events()
        .into_iter()
        .filter(|e| e.data.get("instance_ha").is_some())
        .map(|e| format!("{} {}", e.kind.as_str(), e.message))
        .collect()
}

pub(crate) fn dump(o: &Orchestrator) {
    for e in iha_events(o) {
        eprintln!("{e}");
    }
}
