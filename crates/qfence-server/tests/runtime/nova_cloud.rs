//! A small OpenStack cloud for Instance HA's runtime tests: the lab's cloud
//! (`qfence_lab::lab::Cloud`: the Nova simulator, a Redfish simulator as every compute host's
//! BMC, each host's power line wired to its `nova-compute`) and one orchestrator running the
//! Instance HA loop. Shared by `instance_ha.rs`, `instance_ha_cases.rs`,
//! `instance_ha_console.rs` and the browser tests (by `#[path]`).

#![allow(dead_code)]

use std::time::Duration;

use anyhow::Result;
pub(crate) use qfence_lab::lab::Cloud;
use qfence_lab::lab::{CloudShape, CloudYaml, host_name};
use qfence_runtime::{InstanceHa, RuntimeBackend};

use super::lab::{Orchestrator, secrets};

pub(crate) const HOSTS: usize = 4;
pub(crate) const SERVERS_PER_HOST: usize = 2;

/// `compute-N`, the lab cloud's host names.
pub(crate) fn host(n: usize) -> String {
    host_name(n)
}

/// The cloud: `HOSTS` hosts of `SERVERS_PER_HOST` servers, Nova reading a silent host down
/// after 2 s, evacuations of 0.3 s.
pub(crate) async fn start_cloud() -> Result<Cloud> {
    Ok(Cloud::start(&CloudShape {
        hosts: HOSTS,
        servers_per_host: SERVERS_PER_HOST,
        service_down_time: Duration::from_secs(2),
        evacuation_time: Duration::from_millis(300),
    })
    .await?)
}

/// The configuration: one orchestrator, the Nova controller, the BMC, and the cloud
/// `overcloud` with `extra` parameters. Each host but those in `unfenced` is fenced through
/// the BMC's system of its name.
pub(crate) fn config(cloud: &Cloud, extra: &str, unfenced: &[&str]) -> String {
    let parameters = format!("    poll_seconds: 1\n    delta_seconds: 20\n{extra}");
    let c = CloudYaml {
        nova: "nova",
        bmc: "bmc",
        site: "dc1",
        reach: &[],
        timeout_seconds: 5,
        host_sites: &[],
        unfenced,
        parameters: &parameters,
    };
    cloud.add_to(
        "cluster:\n  name: iha\nsites:\n  dc1: {}\norchestrators:\n  dc1-a: {site: dc1, \
         address: \"127.0.0.1:7401\"}\n",
        &c,
    )
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
