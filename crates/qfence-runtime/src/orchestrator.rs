//! One orchestrator's runtime, started in one call: cluster node (a one-voter cluster created
//! in the data directory on first start), drivers, engine and event log. The server's daemon
//! puts the HTTPS API in front of its [`Orchestrator::backend`]; tests start either in
//! process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
use qfence_cluster::tls::{CertificateAuthority, JoinToken, NodeTls};
use qfence_controllers::SecretStore;
use qfence_model::OrchestratorId;
use qfence_model::config::{OrchestratorConfig, ValidatedConfig};
use tokio_util::sync::CancellationToken;

use crate::drivers::{DriverExecutor, LocalDrivers};
use crate::effective::ConfigCell;
use crate::engine::{Engine, EngineOptions};
use crate::events::{EventLog, JsonlStore, repair_torn_tail};
use crate::instance_ha::InstanceHa;
use crate::systemd::{Beat, Heartbeat, Notifier};
use crate::{Metrics, RuntimeBackend, RuntimeError};

/// How to start an orchestrator.
#[derive(Debug)]
pub struct OrchestratorOptions {
    pub config: ValidatedConfig,
    /// The configuration file's text: the base of the effective configuration, which the API
    /// validates new plans and controllers against.
    pub config_text: String,
    pub name: OrchestratorId,
    pub data_dir: PathBuf,
    /// Where the cluster endpoint listens; defaults to the orchestrator's configured address.
    pub cluster_listen: Option<SocketAddr>,
    pub secrets: SecretStore,
    pub timing: Timing,
    /// First start only: join the cluster through a member instead of creating one. Nothing to
    /// do once this node is a member (a restart with the same flags is harmless).
    pub join: Option<JoinOptions>,
    /// Write a join token for every other orchestrator of the configuration into
    /// `DATA/join-tokens/NAME.token` (those missing), from the cluster CA in `DATA/ca`.
    pub write_join_tokens: bool,
    /// The service manager's notification socket (`Type=notify`, `WatchdogSec=`): the
    /// decision loop feeds its watchdog. `None` outside systemd.
    pub notifier: Option<Notifier>,
}

/// How to join an existing cluster.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// `host:port` of any member's cluster endpoint.
    pub seed: String,
    /// Issued for this orchestrator by the node holding the cluster CA.
    pub token: JoinToken,
}

/// How long a first start keeps trying to join (the seed may be starting too).
const JOIN_PATIENCE: Duration = Duration::from_secs(60);

/// Where `write_join_tokens` puts them, inside the data directory.
pub const JOIN_TOKENS_DIR: &str = "join-tokens";

/// How this start found the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// It created a one-voter cluster.
    Created,
    /// It joined a cluster through `--join`.
    Joined,
    /// It was a member already.
    Member,
}

/// A running orchestrator.
#[derive(Debug)]
pub struct Orchestrator {
    pub membership: Membership,
    pub engine: Engine,
    /// The Instance HA loops (one per cloud; only the leader's act).
    pub instance_ha: InstanceHa,
    pub node: ClusterNode,
    /// What the API asks of this orchestrator.
    pub backend: RuntimeBackend,
    pub metrics: Metrics,
    /// The node's certificate and key (from the cluster CA), which the API serves too.
    pub tls: NodeTls,
    /// Controllers whose driver could not be built here, and why.
    pub unavailable: Vec<(qfence_model::ControllerId, String)>,
    /// Turns true once the engine's first tick has run.
    first_tick: tokio::sync::watch::Receiver<bool>,
    engine_stop: CancellationToken,
    engine_task: tokio::task::JoinHandle<()>,
    instance_ha_task: tokio::task::JoinHandle<()>,
    /// Closed last, so BMCs get their sessions back.
    drivers: Arc<LocalDrivers>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |e| RuntimeError::Setup(format!("{}: {e}", path.display()))
}

fn setup(reason: impl Into<String>) -> RuntimeError {
    RuntimeError::Setup(reason.into())
}

/// The node's TLS material from `DATA/tls`, or a new cluster CA and certificate when the data
/// directory holds none (the embedded one-voter default). The CA goes to `DATA/ca`.
fn node_tls(
    dir: &Path,
    cluster: &str,
    name: &OrchestratorId,
    advertise: &str,
) -> Result<NodeTls, RuntimeError> {
    let tls_dir = dir.join("tls");
    if tls_dir.join(qfence_cluster::tls::CERT_FILE).exists() {
        return Ok(NodeTls::load(&tls_dir)?);
    }
    let ca = CertificateAuthority::generate(cluster)?;
    let ca_dir = dir.join("ca");
    std::fs::create_dir_all(&ca_dir).map_err(io(&ca_dir))?;
    std::fs::write(ca_dir.join("ca.pem"), ca.cert_pem()).map_err(io(&ca_dir))?;
    std::fs::write(ca_dir.join("cluster-name"), cluster).map_err(io(&ca_dir))?;
    let key_path = ca_dir.join("ca.key");
    std::fs::write(&key_path, ca.key_pem()).map_err(io(&key_path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(&key_path))?;
    }
    let host = advertise
        .rsplit_once(':')
        .map_or(advertise, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tls = ca.issue(
        name.as_str(),
        &[host, "127.0.0.1".into(), "localhost".into()],
    )?;
    tls.save(&tls_dir)?;
    Ok(tls)
}

/// Joins through `seed`, retrying for [`JOIN_PATIENCE`]: on a first start the seed may not be
/// serving yet.
async fn join_patiently(node: &ClusterNode, seed: &str) -> Result<(), RuntimeError> {
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    loop {
        match node.join(seed).await {
            Ok(()) => {
                tracing::info!(seed, "Joined the cluster");
                return Ok(());
            }
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::info!(seed, error = %e, "Could not join yet; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                return Err(setup(format!(
                    "could not join the cluster through {seed} within {JOIN_PATIENCE:?}: {e}"
                )));
            }
        }
    }
}

/// Writes `DATA/join-tokens/NAME.token` (mode 0600) for every other orchestrator of the
/// configuration that has none, each certificate naming the host of its configured address.
/// Returns the names written.
pub fn write_join_tokens(
    data_dir: &Path,
    config: &ValidatedConfig,
    me: &OrchestratorId,
) -> Result<Vec<OrchestratorId>, RuntimeError> {
    let ca_dir = data_dir.join("ca");
    let read = |f: &str| {
        let p = ca_dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| {
            setup(format!(
                "{}: {e} (join tokens are issued by the orchestrator that created the cluster \
                 and holds its CA)",
                p.display()
            ))
        })
    };
    let ca = CertificateAuthority::from_pem(
        read("cluster-name")?.trim(),
        &read("ca.pem")?,
        &read("ca.key")?,
    )?;
    let dir = data_dir.join(JOIN_TOKENS_DIR);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let mut written = Vec::new();
    for (name, orch) in &config.config().orchestrators {
        let path = dir.join(format!("{name}.token"));
        if name == me || path.exists() {
            continue;
        }
        let token = JoinToken::issue(&ca, name.as_str(), &[host_of(&orch.address)])?;
        std::fs::write(&path, token.encode() + "\n").map_err(io(&path))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(&path))?;
        }
        tracing::info!(orchestrator = %name, path = %path.display(), "Wrote a join token");
        written.push(name.clone());
    }
    Ok(written)
}

fn host_of(address: &str) -> String {
    address
        .rsplit_once(':')
        .map_or(address, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// The engine's heartbeat: the first tick is announced to [`Orchestrator::first_tick`], every turn
/// feeds the service manager's watchdog (the loop turning at half its timeout).
fn heartbeat(
    notifier: Option<Notifier>,
    first_tick: tokio::sync::watch::Sender<bool>,
) -> Heartbeat {
    Heartbeat {
        every: notifier.as_ref().and_then(Notifier::keepalive_every),
        beat: Arc::new(move |beat| match beat {
            Beat::FirstTick => {
                first_tick.send_replace(true);
            }
            Beat::Alive => {
                if let Some(n) = notifier.as_ref().filter(|n| n.watchdog().is_some()) {
                    n.keepalive();
                }
            }
        }),
    }
}

/// Reads this node's leadership, term and lease for the metrics. The leader lease is
/// openraft's (`election_max_ms`): a leader that heard nothing from a quorum for that long
/// loses it, and whatever it started is cancelled.
fn orchestrator_gauges(node: &ClusterNode, timing: &Timing) -> crate::metrics::OrchestratorSource {
    let node = node.clone();
    let lease = Duration::from_millis(timing.election_max_ms);
    Arc::new(move || {
        let m = node.metrics();
        let leader = node.leader().as_ref() == Some(node.name());
        let since_ack = node.since_quorum_ack();
        crate::metrics::OrchestratorGauges {
            name: node.name().to_string(),
            leader,
            term: m.current_term,
            lease_remaining: match since_ack {
                Some(since) if leader => lease.saturating_sub(since),
                _ => Duration::ZERO,
            },
            lease,
        }
    })
}

/// This orchestrator's entry in the configuration, and where its cluster endpoint listens.
fn this_orchestrator(
    o: &OrchestratorOptions,
) -> Result<(OrchestratorConfig, SocketAddr), RuntimeError> {
    let me = o
        .config
        .config()
        .orchestrators
        .get(&o.name)
        .cloned()
        .ok_or_else(|| {
            setup(format!(
                "orchestrator {:?} is not in the configuration's orchestrators: {}",
                o.name.as_str(),
                o.config
                    .config()
                    .orchestrators
                    .keys()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let cluster_listen = match o.cluster_listen {
        Some(a) => a,
        None => me.address.parse().map_err(|_| {
            setup(format!(
                "orchestrator {}'s address {:?} is not IP:PORT; give the cluster listen address",
                o.name, me.address
            ))
        })?,
    };
    Ok((me, cluster_listen))
}

/// The node's TLS material as found or made before the node starts.
struct TlsReady {
    tls: NodeTls,
    /// `DATA/tls`, named in the error when a joining node finds no cluster.
    tls_dir: PathBuf,
    /// Whether this data directory may start a cluster of its own.
    may_create: bool,
}

/// Saves a join token's certificate on a first join, loads or makes the node's TLS material and
/// writes the join tokens asked for.
fn prepare_tls(o: &OrchestratorOptions, me: &OrchestratorConfig) -> Result<TlsReady, RuntimeError> {
    let cluster_name = &o.config.config().cluster.name;
    let tls_dir = o.data_dir.join("tls");
    let has_tls = tls_dir.join(qfence_cluster::tls::CERT_FILE).exists();
    if let Some(j) = &o.join
        && !has_tls
    {
        if j.token.name != o.name.as_str() {
            return Err(setup(format!(
                "the join token is for orchestrator {}, not {}: use the one issued for {}",
                j.token.name, o.name, o.name
            )));
        }
        if j.token.cluster != *cluster_name {
            return Err(setup(format!(
                "the join token is for cluster {:?}, but the configuration's cluster is {:?}",
                j.token.cluster, cluster_name
            )));
        }
        j.token.tls().save(&tls_dir)?;
    }
    // A data directory with a certificate but no CA was set up to join a cluster: it must
    // never start a cluster of its own (that would be a second cluster, split from the
    // first).
    let may_create = !has_tls || o.data_dir.join("ca").join("ca.pem").exists();
    let tls = node_tls(&o.data_dir, cluster_name, &o.name, &me.address)?;
    // Before the node starts: an orchestrator without the CA fails here, changing nothing.
    if o.write_join_tokens {
        write_join_tokens(&o.data_dir, &o.config, &o.name)?;
    }
    Ok(TlsReady {
        tls,
        tls_dir,
        may_create,
    })
}

/// Joins through the seed, creates a one-voter cluster or finds this node a member already; a
/// node that may not create one and was not told to join stops here.
async fn join_or_create(
    node: &ClusterNode,
    o: &OrchestratorOptions,
    ready: &TlsReady,
) -> Result<Membership, RuntimeError> {
    let member = node.is_initialized().await?;
    Ok(match &o.join {
        Some(_) if member => {
            tracing::info!("Already a member of the cluster: nothing to join");
            node.initialize().await?;
            Membership::Member
        }
        Some(j) => {
            if let Err(e) = join_patiently(node, &j.seed).await {
                node.shutdown().await;
                return Err(e);
            }
            node.wait_for_leader(Duration::from_secs(30)).await?;
            Membership::Joined
        }
        None if !member && !ready.may_create => {
            node.shutdown().await;
            return Err(setup(format!(
                "{} holds this orchestrator's certificate but no cluster: it was set up to \
                 join one; start it with --join ADDR (and its join token), or remove {} to \
                 create a new cluster",
                o.data_dir.display(),
                ready.tls_dir.display()
            )));
        }
        None => {
            node.initialize().await?;
            if member {
                Membership::Member
            } else {
                Membership::Created
            }
        }
    })
}

/// Opens `DATA/events.jsonl`, cutting off a last record a crash tore.
fn open_event_log(data_dir: &Path) -> Result<EventLog<JsonlStore>, RuntimeError> {
    let events_path = data_dir.join("events.jsonl");
    if events_path.exists()
        && let Some(torn) = repair_torn_tail(&events_path)?
    {
        tracing::warn!(
            bytes = torn.bytes,
            "Cut a torn last record off the event log"
        );
    }
    Ok(EventLog::open(JsonlStore::open(&events_path)?)?)
}

impl Orchestrator {
    /// Starts everything. Spawns tasks; call inside a Tokio runtime.
    pub async fn start(o: OrchestratorOptions) -> Result<Self, RuntimeError> {
        qfence_cluster::tls::install_crypto_provider();
        let (me, cluster_listen) = this_orchestrator(&o)?;
        std::fs::create_dir_all(&o.data_dir).map_err(io(&o.data_dir))?;
        let ready = prepare_tls(&o, &me)?;
        // The file's configuration until the node is up; then the file's plus the API's.
        let cell = ConfigCell::new(o.config.clone(), o.config_text.clone());
        let drivers = Arc::new(LocalDrivers::build(o.name.clone(), &cell, &o.secrets));
        let unavailable = drivers.unavailable();
        for (c, why) in &unavailable {
            tracing::warn!(controller = %c, "No driver here: {why}");
        }
        let node = ClusterNode::start(
            NodeOptions {
                name: o.name.clone(),
                site: me.site.clone(),
                witness: o
                    .config
                    .config()
                    .sites
                    .get(&me.site)
                    .is_some_and(|s| s.witness),
                listen: cluster_listen,
                advertise: Some(me.address.clone()),
                data_dir: o.data_dir.clone(),
                tls: ready.tls.clone(),
                timing: o.timing.clone(),
                admin_api: false,
            },
            Arc::new(DriverExecutor(drivers.clone())),
        )
        .await?;
        let membership = join_or_create(&node, &o, &ready).await?;

        let log = open_event_log(&o.data_dir)?;
        let metrics = Metrics::new();
        drivers.attach_metrics(metrics.clone());
        metrics.observe_orchestrator(orchestrator_gauges(&node, &o.timing));
        let (first_tick_tx, first_tick) = tokio::sync::watch::channel(false);
        let mut options = EngineOptions::for_config(&o.config);
        options.heartbeat = Some(heartbeat(o.notifier, first_tick_tx));
        let engine = Engine::new(cell, node.clone(), log, metrics.clone(), options);
        match engine.register().await {
            // A follower has nothing to register: the leader does it on every tick.
            Err(RuntimeError::Cluster(qfence_cluster::ClusterError::NotLeader { .. })) | Ok(()) => {
            }
            Err(e) => return Err(e),
        }
        let engine_stop = CancellationToken::new();
        let engine_task = tokio::spawn(engine.clone().run(engine_stop.clone()));
        let instance_ha = InstanceHa::new(&engine, drivers.clone());
        let instance_ha_task = tokio::spawn(instance_ha.clone().run(engine_stop.clone()));

        let backend = RuntimeBackend::new(&engine, o.secrets);
        Ok(Self {
            membership,
            engine,
            instance_ha,
            node,
            backend,
            metrics,
            tls: ready.tls,
            unavailable,
            first_tick,
            engine_stop,
            engine_task,
            instance_ha_task,
            drivers,
        })
    }

    /// Waits until the engine's first tick has run (`qfence serve` is ready then).
    pub async fn first_tick(&self) {
        let mut rx = self.first_tick.clone();
        let _ = rx.wait_for(|t| *t).await;
    }

    /// The first signal: start no new operation, wait up to `timeout` for those in flight.
    /// Returns how many were still running.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.engine.drain(timeout).await
    }

    /// Stops the engine and the cluster node (cancelling whatever still runs).
    pub async fn shutdown(self) {
        self.engine_stop.cancel();
        let _ = self.engine_task.await;
        let _ = self.instance_ha_task.await;
        self.node.shutdown().await;
        // Operations still running were cancelled with the leadership; let them record that.
        let left = self.engine.drain(Duration::from_secs(5)).await;
        if left > 0 {
            tracing::warn!(left, "Operations still running at exit");
        }
        self.drivers.close().await;
    }
}
