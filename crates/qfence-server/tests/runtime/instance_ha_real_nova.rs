//! Instance HA through the real runtime against the real Nova (`tools/emulators/nova`: Nova 34
//! with fake compute hosts, shared by the run, `nova_peer.rs`), the twin of `instance_ha.rs`.
//! Each compute host has a BMC of its own, a Redfish simulator whose power line is wired to
//! that host's `nova-compute` process: powered off, the process is killed; powered on, it is
//! started again (and, as on a rebooted host, cleans up what was evacuated away). The
//! configuration is an operator's: one rule maps every host to its BMC.
//!
//! It runs in the nextest test group `nova` with the controllers' real-Nova tests (one cloud,
//! one test at a time), and skips where they skip.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use qfence_controllers::SecretStore;
use qfence_controllers::secrets::{SecretSource, env_name};
use qfence_lab::TlsIdentity;
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use qfence_runtime::events::EventKind;
use qfence_runtime::{Backend, InstanceHa, RuntimeBackend};
use serde_json::Value;

use super::lab::{Orchestrator, eventually, phase};
use super::nova_cloud::{dump, iha_events};
use super::nova_peer::{Admin, Cloud, cloud};

/// The system id of a one-host BMC (an iDRAC's), the same on every host.
const SYSTEM: &str = "System.Embedded.1";
const BMC_USER: &str = "qfence";
const BMC_PASSWORD: &str = "bmc-secret";
const SERVERS_PER_HOST: usize = 2;
/// Nova's `service_down_time` is 10 s and nova-compute reports every 2 s: 8 s is four
/// missed reports.
const DELTA_SECONDS: u64 = 8;

/// One BMC per compute host, each host's power wired to its `nova-compute`.
struct Bmcs {
    bmcs: BTreeMap<String, BmcHandle>,
    wires: Vec<tokio::task::JoinHandle<()>>,
}

impl Bmcs {
    async fn start(cloud: &'static Cloud) -> Result<Self> {
        let mut bmcs = BTreeMap::new();
        let mut wires = Vec::new();
        for (n, host) in cloud.hosts().into_iter().enumerate() {
            let mut system =
                System::new(SYSTEM, &format!("4c4c4544-0000-4000-8000-00000000000{n}"));
            system.host_name = host.clone();
            let accounts = vec![Account::new(BMC_USER, BMC_PASSWORD, Role::Operator)];
            let bmc = redfish::start(
                "127.0.0.1:0".parse()?,
                TlsIdentity::loopback()?,
                BmcState::new(vec![system], accounts),
            )
            .await?;
            let line = bmc.power_line(SYSTEM).context("a power line")?;
            wires.push(wire(cloud, host.clone(), line));
            bmcs.insert(host, bmc);
        }
        Ok(Self { bmcs, wires })
    }

    fn power(&self, host: &str) -> Option<PowerState> {
        Some(self.bmcs.get(host)?.snapshot().system(SYSTEM)?.power)
    }

    async fn stop(self) {
        for w in self.wires {
            w.abort();
            let _ = w.await;
        }
        for (_, b) in self.bmcs {
            b.shutdown().await;
        }
    }
}

/// Follows `host`'s power line: off kills its nova-compute, on starts it again.
fn wire(
    cloud: &'static Cloud,
    host: String,
    mut line: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while line.changed().await.is_ok() {
            let powered = *line.borrow_and_update();
            let h = host.clone();
            let done = tokio::task::spawn_blocking(move || {
                if powered {
                    cloud.start_compute(&h);
                } else {
                    cloud.cut_compute(&h);
                }
            })
            .await;
            eprintln!(
                "--- {host} powered {}: {done:?}",
                if powered { "on" } else { "off" }
            );
        }
    })
}

/// What an operator writes: the Nova controller with an application credential and the
/// cloud's CA, a BMC per host, and a rule mapping each host to its BMC.
fn config(cloud: &Cloud, bmcs: &Bmcs) -> String {
    let mut controllers = format!(
        "  nova:\n    type: nova\n    endpoint: {keystone}\n    site: dc1\n    secret: nova-qfence\n    \
         application_credential_id: {appcred}\n    region: {region}\n    timeout_seconds: 10\n    \
         tls: {{ca_file: {ca}}}\n",
        keystone = cloud.var("KEYSTONE_URL"),
        appcred = cloud.var("APPCRED_ID"),
        region = cloud.var("NOVA_REGION"),
        ca = cloud.var("NOVA_CACERT"),
    );
    for (host, bmc) in &bmcs.bmcs {
        controllers.push_str(&format!(
            "  bmc-{host}:\n    type: redfish\n    endpoint: {url}\n    site: dc1\n    secret: \
             bmc-{host}\n    username: {BMC_USER}\n    timeout_seconds: 5\n    tls: {{pin: \
             \"sha256:{fp}\"}}\n",
            url = bmc.base_url(),
            fp = bmc.fingerprint(),
        ));
    }
    format!(
        "cluster:\n  name: iha-real-nova\nsites:\n  dc1: {{}}\norchestrators:\n  dc1-a: {{site: dc1, \
         address: \"127.0.0.1:7401\"}}\ncontrollers:\n{controllers}instance_ha:\n  overcloud:\n    \
         nova: nova\n    poll_seconds: 2\n    delta_seconds: {DELTA_SECONDS}\n    host_rules:\n      \
         - {{match: \"compute-*\", controller: \"bmc-{{host}}\", capability: power.off, resource: \
         {SYSTEM}}}\n"
    )
}

/// The orchestrator's secrets: the application credential's and each BMC's.
fn secrets(cloud: &Cloud, bmcs: &Bmcs) -> SecretStore {
    const PREFIX: &str = "QFENCE_TEST_SECRET_";
    let mut values = BTreeMap::new();
    values.insert(
        env_name(PREFIX, "nova-qfence"),
        cloud.var("APPCRED_SECRET").to_owned(),
    );
    for host in bmcs.bmcs.keys() {
        values.insert(
            env_name(PREFIX, &format!("bmc-{host}")),
            BMC_PASSWORD.into(),
        );
    }
    SecretStore::new(vec![SecretSource::Env {
        prefix: PREFIX.into(),
        lookup: Arc::new(move |k| values.get(k).cloned()),
    }])
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When the first evacuation was asked of Nova (the event log's clock), if it was.
fn first_evacuation_ms(o: &Orchestrator) -> Option<u64> {
    o.engine
        .events()
        .into_iter()
        .find(|e| {
            e.kind == EventKind::Command
                && e.message.starts_with("instance-ha overcloud: evacuate ")
        })
        .map(|e| e.time_ms)
}

/// The servers `ids` as Nova shows them now: ACTIVE on a host other than `from`, each.
fn all_active_elsewhere(servers: &[Value], ids: &[String], from: &str) -> bool {
    ids.iter().all(|id| {
        servers.iter().any(|s| {
            s["id"] == id.as_str()
                && s["status"] == "ACTIVE"
                && s["OS-EXT-SRV-ATTR:host"]
                    .as_str()
                    .is_some_and(|h| h != from)
        })
    })
}

/// When the event log first holds a record containing `needle`, if it does.
fn event_ms(o: &Orchestrator, needle: &str) -> Option<u64> {
    o.engine
        .events()
        .into_iter()
        .find(|e| e.data.get("instance_ha").is_some() && e.message.contains(needle))
        .map(|e| e.time_ms)
}

/// Polls Nova every 250 ms from the kill until the victims are ACTIVE elsewhere and the loop
/// says the victim is back in service: when the victims were first seen ACTIVE elsewhere.
async fn wait_until_back(
    o: &Orchestrator,
    admin: &Admin,
    victim: &str,
    victims: &[String],
) -> Result<u64> {
    let until = Instant::now() + Duration::from_secs(240);
    let back = format!("{victim}: back in service");
    let mut active_ms = None;
    loop {
        if active_ms.is_none() && all_active_elsewhere(&admin.servers().await, victims, victim) {
            active_ms = Some(epoch_ms());
        }
        if let Some(at) = active_ms
            && iha_events(o).iter().any(|e| e.contains(&back))
        {
            return Ok(at);
        }
        if Instant::now() > until {
            dump(o);
            bail!("{victim} not evacuated and back in service within 240 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The event log tells each step in order, for the victim alone, and no Nova call was refused
/// or left unanswered.
fn assert_story(o: &Orchestrator, victim: &str, others: &[String]) {
    let events = iha_events(o);
    let mut at = 0;
    for step in [
        format!("{victim}: host down"),
        format!("command instance-ha overcloud: fence {victim}"),
        format!("{victim}: fenced, read back"),
        format!("command instance-ha overcloud: force-down {victim}"),
        format!(
            "command instance-ha overcloud: disable {victim}: qfence instance-ha: evacuating since"
        ),
        format!("{victim}: evacuating {SERVERS_PER_HOST} server(s)"),
        "command instance-ha overcloud: evacuate".to_owned(),
        format!("{victim}: evacuated: {SERVERS_PER_HOST} done, 0 unsuccessful"),
        format!("command instance-ha overcloud: power-on {victim}"),
        format!("command instance-ha overcloud: clear-forced-down {victim}"),
        format!("command instance-ha overcloud: enable {victim}"),
        format!("{victim}: back in service"),
    ] {
        at = events
            .iter()
            .enumerate()
            .skip(at)
            .find(|(_, e)| e.contains(&step))
            .map(|(i, _)| i)
            .unwrap_or_else(|| {
                dump(o);
                panic!("no {step:?} after record {at}")
            });
    }
    for h in others {
        assert!(
            !events.iter().any(|e| e.contains(&format!(": fence {h}"))),
            "only {victim} was fenced: {events:#?}"
        );
    }
    // Nova refuses to clear forced-down while the evacuations' records read `done`: the loop
    // waits for the restarted nova-compute to clean them up rather than be refused. And Nova
    // answers every call in time: the host is forced down before it is disabled, so the
    // disable does not wait on an RPC call to the dead nova-compute.
    assert!(
        !events
            .iter()
            .any(|e| e.contains("clear-forced-down failed") || e.contains(" UNKNOWN")),
        "no call refused or unanswered: {events:#?}"
    );
}

/// Nova after the incident: the victim enabled, up, not forced down, taking a new server at
/// once; the victims ACTIVE elsewhere and unlocked; their evacuation records completed.
async fn assert_nova_after(
    admin: &Admin,
    victim: &str,
    victims: &[String],
    servers_before: usize,
) -> Result<()> {
    admin
        .wait_state(victim, "up", Duration::from_secs(30))
        .await;
    let services = admin.services().await;
    let svc = services
        .iter()
        .find(|s| s["host"] == victim)
        .context("the victim's service")?;
    assert_eq!(svc["status"], "enabled", "{svc}");
    assert_eq!(svc["forced_down"], false, "{svc}");
    let servers = admin.servers().await;
    assert_eq!(servers.len(), servers_before);
    assert!(
        all_active_elsewhere(&servers, victims, victim),
        "{servers:#?}"
    );
    assert!(
        servers
            .iter()
            .all(|s| s["status"] == "ACTIVE" && s["locked"] == false),
        "every server ACTIVE and unlocked: {servers:#?}"
    );

    phase(
        "the victim takes a new server at once (enabled while up, Nova lifted its placement trait)",
    );
    let fresh = admin.boot_on("iha-after", victim, 1).await;
    let servers = admin.servers().await;
    assert!(
        servers
            .iter()
            .any(|s| s["id"] == fresh[0].as_str() && s["OS-EXT-SRV-ATTR:host"] == victim),
        "{servers:#?}"
    );

    phase("Nova's evacuation records: one per server, cleaned up by the restarted nova-compute");
    let (code, migrations) = admin
        .call(
            reqwest::Method::GET,
            "/os-migrations?migration_type=evacuation",
            None,
        )
        .await;
    assert_eq!(code, 200, "{migrations}");
    let records: Vec<&Value> = migrations["migrations"]
        .as_array()
        .context("migrations")?
        .iter()
        .filter(|m| victims.iter().any(|v| m["instance_uuid"] == v.as_str()))
        .collect();
    assert_eq!(records.len(), SERVERS_PER_HOST, "{migrations}");
    assert!(
        records
            .iter()
            .all(|m| m["status"] == "completed" && m["source_compute"] == victim),
        "{records:#?}"
    );
    Ok(())
}

/// The incident's records with their time since the kill, and the figures for
/// docs/benchmarks.md.
fn print_figures(o: &Orchestrator, victim: &str, killed_ms: u64, active_ms: u64) -> Result<()> {
    for e in o.engine.events() {
        if e.data.get("instance_ha").is_some() && e.time_ms >= killed_ms {
            let at = (e.time_ms - killed_ms) as f64 / 1000.0;
            eprintln!("{at:>6.1} s {} {}", e.kind.as_str(), e.message);
        }
    }
    let secs = |ms: u64| ms.saturating_sub(killed_ms) as f64 / 1000.0;
    let first = first_evacuation_ms(o).context("an evacuate command")?;
    let back = event_ms(o, &format!("{victim}: back in service")).context("back in service")?;
    eprintln!(
        "figures (real Nova): host death -> first evacuation {:.1} s, -> last instance ACTIVE \
         {:.1} s, -> back in service {:.1} s (poll 2 s, delta {DELTA_SECONDS} s, \
         {SERVERS_PER_HOST} servers)",
        secs(first),
        secs(active_ms),
        secs(back),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_ha_real_nova_a_killed_host_is_fenced_evacuated_powered_on_and_re_enabled()
-> Result<()> {
    let Some(c) = cloud() else { return Ok(()) };
    c.reset().await;
    let admin = c.admin().await;
    let hosts = c.hosts();
    let victim = hosts[0].clone();
    let mut on = BTreeMap::new();
    for (i, h) in hosts.iter().enumerate() {
        let ids = admin.boot_on(&format!("iha{i}"), h, SERVERS_PER_HOST).await;
        on.insert(h.clone(), ids);
    }
    let victims = on[&victim].clone();
    let bmcs = Bmcs::start(c).await?;
    let o = Orchestrator::start_with_secrets(&config(c, &bmcs), &secrets(c, &bmcs), true).await?;
    tokio::spawn(InstanceHa::new(&o.engine, o.drivers.clone()).run(o.stop.clone()));
    let backend = RuntimeBackend::new(&o.engine, secrets(c, &bmcs));

    phase("steady: every host reporting, the loop quiet");
    let quiet = format!("{} compute hosts, {0} reporting, none failed", hosts.len());
    eventually(
        Duration::from_secs(60),
        "a quiet first decision",
        || async {
            let s = backend.instance_ha().await.ok()?;
            let d = s.clouds.first()?.last_decision.clone()?;
            d.contains(&quiet).then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;

    phase("the victim's nova-compute dies (SIGKILL); its BMC still reads On");
    let killed_ms = epoch_ms();
    c.kill_compute(&victim);
    let active_ms = wait_until_back(&o, &admin, &victim, &victims).await?;

    phase("the log tells each step in order");
    assert_story(&o, &victim, &hosts[1..]);

    phase("Nova: the victim enabled, not forced down, up; its servers ACTIVE elsewhere, unlocked");
    assert_nova_after(&admin, &victim, &victims, hosts.len() * SERVERS_PER_HOST).await?;

    phase("the victim's BMC reads On again, and no other host was powered off");
    for h in &hosts {
        assert_eq!(bmcs.power(h), Some(PowerState::On), "{h}");
    }
    print_figures(&o, &victim, killed_ms, active_ms)?;

    o.shutdown().await;
    bmcs.stop().await;
    Ok(())
}
