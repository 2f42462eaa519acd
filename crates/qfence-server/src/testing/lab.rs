//! The demo lab in one process: the Redfish, Proxmox VE and FortiOS simulators on loopback
//! with pinned certificates, examples/lab.yaml rewritten to point at them, and orchestrators
//! (by default `dc1-a`, a one-voter cluster in a temporary directory) running the engine.
//! The runtime tests start it piece by piece; [`super::LabRuntime`] starts it whole for the
//! API, console and CLI tests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
use qfence_cluster::tls::CertificateAuthority;
use qfence_controllers::SecretStore;
use qfence_controllers::secrets::{ENV_PREFIX, SecretSource, env_name};
use qfence_lab::lab::{self, LabConfig, Scenario};
use qfence_model::{OrchestratorId, PlanId, SiteId};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use qfence_core::BindingKey;
pub use qfence_lab::lab::{BMC_PASSWORD, PVE_TOKEN, VIP};
use qfence_runtime::Metrics;
use qfence_runtime::events::{EventLog, JsonlStore};
use qfence_runtime::{ConfigCell, DriverExecutor, Engine, EngineOptions, LocalDrivers};

/// Logs a phase of a story test.
pub fn phase(what: &str) {
    eprintln!("--- {what}");
}

fn loopback() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

/// The lab's simulators ([`lab::Sims`]) on the runtime tests' clock: VM 101 replicated every
/// 200 ms, a lost site failed over after 4 s.
#[derive(Debug)]
pub struct Sims(lab::Sims);

impl std::ops::Deref for Sims {
    type Target = lab::Sims;
    fn deref(&self) -> &lab::Sims {
        &self.0
    }
}

const SYNC_EVERY: Duration = Duration::from_millis(200);
const TIMINGS: &str = "    interval_seconds: 1\n    recovery_after_seconds: 2\n    \
                       failover_after_seconds: 4\n    fence_timeout_seconds: 3\n";

impl Sims {
    /// dc1 runs VM 101 on a powered host; dc2 is the fenced standby (its host powered off at
    /// the BMC, its copy of VM 101 stopped). dc2's Proxmox API stays up while its host is off
    /// (the API is served by the cluster, not by the fenced host); dc1's host power is wired
    /// to dc1's Proxmox node, so powering it off darkens dc1's API as in the lab.
    pub async fn start() -> Result<Self> {
        Self::start_powered_by(None).await
    }

    /// As [`Sims::start`], but dc1's host power is `dc1_power` (another BMC's, such as the
    /// dead-man tests' IPMI BMC) instead of the Redfish BMC's.
    pub async fn start_powered_by(dc1_power: Option<watch::Receiver<bool>>) -> Result<Self> {
        let scenario = Scenario {
            sync_every: SYNC_EVERY,
            dc1_power,
            ..Scenario::lab()
        };
        Ok(Self(lab::Sims::start_with(&scenario).await?))
    }

    /// The simulators of `scenario` (such as [`Scenario::scaled`]: the lab's plan many times
    /// over), on their own clock.
    pub async fn start_scenario(scenario: &Scenario) -> Result<Self> {
        Ok(Self(lab::Sims::start_with(scenario).await?))
    }

    /// examples/lab.yaml, pointed at these simulators with pinned certificates, on a fast
    /// clock, and with pve-dc2 reachable from dc1 (one orchestrator runs everything).
    pub fn config_text(&self) -> String {
        self.config_text_for(true)
    }

    /// The lab configuration; `one_orchestrator` lets dc1 call pve-dc2 itself (otherwise only
    /// an orchestrator at dc2 may, as in examples/lab.yaml).
    pub fn config_text_for(&self, one_orchestrator: bool) -> String {
        self.0.config_text_with(&LabConfig {
            timings: TIMINGS,
            one_orchestrator,
            ..LabConfig::default()
        })
    }

    /// Stops every simulator.
    pub async fn stop(self) {
        self.0.stop().await;
    }
}

/// The Nova simulator's application credential secret (`qfence`), stored as `lab-nova`.
pub const LAB_NOVA_SECRET: &str = lab::NOVA_SECRET;

/// The orchestrator's own secret store: environment-style names, looked up in a map (the test
/// does not touch the process environment).
pub fn secrets() -> SecretStore {
    let values: BTreeMap<String, String> = lab::SECRETS
        .into_iter()
        .chain([("lab-ipmi", "password")])
        .map(|(k, v)| (env_name(ENV_PREFIX, k), v.to_owned()))
        .collect();
    SecretStore::new(vec![SecretSource::Env {
        prefix: ENV_PREFIX.into(),
        lookup: Arc::new(move |k| values.get(k).cloned()),
    }])
}

/// One orchestrator, its cluster node, its engine, running.
#[allow(missing_debug_implementations)]
pub struct Orchestrator {
    pub engine: Engine,
    pub node: ClusterNode,
    pub metrics: Metrics,
    pub events_path: std::path::PathBuf,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
    pub drivers: Arc<LocalDrivers>,
    _dir: tempfile::TempDir,
}

/// The lab's plan, erp-db.
pub fn plan() -> PlanId {
    PlanId::new("erp-db").expect("a plan name")
}

/// A site by name.
pub fn site(s: &str) -> SiteId {
    SiteId::new(s).expect("a site name")
}

impl Orchestrator {
    /// The key of `site_name`'s binding `index` of plan `name` in the configuration in force
    /// now (keys name bindings by id; tests name them by place).
    pub fn key(&self, name: &str, site_name: &str, index: usize) -> BindingKey {
        let config = self.engine.config();
        let p = config
            .plan(name)
            .unwrap_or_else(|| panic!("plan {name} is not in force"));
        BindingKey::site_at(p, &site(site_name), index)
    }

    /// `dc1-a` alone: it creates a one-voter cluster, with its loop running if `run_loop`.
    pub async fn start(config_text: &str, run_loop: bool) -> Result<Self> {
        Self::start_with_secrets(config_text, &secrets(), run_loop).await
    }

    /// `dc1-a` alone, as [`Self::start`], its drivers' secrets from `secrets` instead of the
    /// lab's (a peer outside the lab, with credentials of its own).
    pub async fn start_with_secrets(
        config_text: &str,
        secrets: &SecretStore,
        run_loop: bool,
    ) -> Result<Self> {
        let ca = CertificateAuthority::generate("lab")?;
        let dir = tempfile::tempdir()?;
        let o = Self::start_at(
            dir.path(),
            config_text,
            ("dc1-a", "dc1"),
            &ca,
            Boot::Create,
            secrets,
        )
        .await?;
        Ok(o.with_dir(dir, run_loop))
    }

    /// Starts orchestrator `name` at `site` with a certificate from `ca`; it creates the
    /// cluster, or joins it through `seed`.
    pub async fn start_as(
        config_text: &str,
        name: &str,
        at: &str,
        ca: &CertificateAuthority,
        seed: Option<&str>,
        run_loop: bool,
    ) -> Result<Self> {
        let boot = match seed {
            None => Boot::Create,
            Some(seed) => Boot::Join(seed),
        };
        let dir = tempfile::tempdir()?;
        let o = Self::start_at(dir.path(), config_text, (name, at), ca, boot, &secrets()).await?;
        Ok(o.with_dir(dir, run_loop))
    }

    /// Stops this orchestrator (as `shutdown`) and starts it again from its own data, on the
    /// same cluster address: a restart in a rolling upgrade.
    pub async fn restart(self, config_text: &str, ca: &CertificateAuthority) -> Result<Self> {
        let member = self.node.member().clone();
        let listen = member.address.parse()?;
        let Self {
            engine,
            node,
            stop,
            task,
            drivers,
            _dir: dir,
            ..
        } = self;
        stop.cancel();
        let _ = task.await;
        node.shutdown().await;
        drivers.close().await;
        drop((engine, node, drivers));
        // Cancelled operations let go of the store a moment later.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let secrets = secrets();
        loop {
            let boot = Boot::Restart(listen);
            let name = member.name.as_str();
            let started = Self::start_at(
                dir.path(),
                config_text,
                (name, member.site.as_str()),
                ca,
                boot,
                &secrets,
            );
            match started.await {
                Ok(o) => return Ok(o.with_dir(dir, true)),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    eprintln!("restart of {name} waits: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts it with its data in `dir`, its loop running (until `stop`).
    async fn start_at(
        dir: &std::path::Path,
        config_text: &str,
        (name, at): (&str, &str),
        ca: &CertificateAuthority,
        boot: Boot<'_>,
        secrets: &SecretStore,
    ) -> Result<Started> {
        let loaded = match qfence_model::config::load_str(config_text, "lab.yaml") {
            Ok(l) => l,
            Err(issues) => bail!("the lab configuration does not validate: {issues:#?}"),
        };
        let config = loaded.config;
        let me = OrchestratorId::new(name)?;
        let tls = ca.issue(name, &["127.0.0.1".into()])?;
        let cell = ConfigCell::new(config.clone(), config_text);
        let drivers = Arc::new(LocalDrivers::build(me.clone(), &cell, secrets));
        assert!(
            drivers.unavailable().is_empty(),
            "every driver builds: {:?}",
            drivers.unavailable()
        );
        let listen = match boot {
            Boot::Restart(addr) => addr,
            _ => loopback(),
        };
        let node = ClusterNode::start(
            NodeOptions {
                name: me,
                site: site(at),
                // The lab's witness site makes no controller calls.
                witness: at == "witness",
                listen,
                advertise: None,
                data_dir: dir.join("data"),
                tls,
                timing: Timing::fast(),
                admin_api: false,
            },
            Arc::new(DriverExecutor(drivers.clone())),
        )
        .await?;
        match boot {
            Boot::Create => node.initialize().await?,
            Boot::Join(seed) => node.join(seed).await?,
            Boot::Restart(_) => {}
        }
        let events_path = dir.join("events.jsonl");
        let log = EventLog::open(JsonlStore::open(&events_path)?)?;
        let options = EngineOptions::for_config(&config);
        let metrics = Metrics::new();
        let engine = Engine::new(cell, node.clone(), log, metrics.clone(), options);
        let stop = CancellationToken::new();
        Ok(Started {
            engine,
            node,
            metrics,
            events_path,
            stop,
            drivers,
        })
    }

    /// Stops its loop, its node and its drivers.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.node.shutdown().await;
        self.drivers.close().await;
    }
}

/// An orchestrator started, before its loop runs.
struct Started {
    engine: Engine,
    node: ClusterNode,
    metrics: Metrics,
    events_path: std::path::PathBuf,
    stop: CancellationToken,
    drivers: Arc<LocalDrivers>,
}

impl Started {
    /// Runs its loop (if `run_loop`) and keeps `dir` for its life.
    fn with_dir(self, dir: tempfile::TempDir, run_loop: bool) -> Orchestrator {
        let task = if run_loop {
            tokio::spawn(self.engine.clone().run(self.stop.clone()))
        } else {
            tokio::spawn(async {})
        };
        Orchestrator {
            engine: self.engine,
            node: self.node,
            metrics: self.metrics,
            events_path: self.events_path,
            stop: self.stop,
            task,
            drivers: self.drivers,
            _dir: dir,
        }
    }
}

/// How an orchestrator comes up.
enum Boot<'a> {
    /// It creates the cluster.
    Create,
    /// It joins the cluster through this seed.
    Join(&'a str),
    /// It restarts from its own data, listening where it did.
    Restart(std::net::SocketAddr),
}

/// Polls `f` every 100 ms until it gives a value or `limit` passes.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
