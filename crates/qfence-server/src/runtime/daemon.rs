//! The whole orchestrator process, started in one call: cluster node (a one-voter cluster
//! created in the data directory on first start), drivers, engine, event log and the HTTPS
//! API. `qfence serve` is a thin shell around [`Daemon`]; tests start it in process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
use qfence_cluster::tls::{CertificateAuthority, NodeTls};
use qfence_controllers::SecretStore;
use qfence_model::OrchestratorId;
use qfence_model::config::ValidatedConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use super::drivers::{DriverExecutor, LocalDrivers};
use super::effective::ConfigCell;
use super::engine::{Engine, EngineOptions};
use super::{RuntimeBackend, RuntimeError};
use crate::events::{EventLog, JsonlStore, repair_torn_tail};
use crate::{ApiConfig, Metrics, TokenStore};

/// How to start an orchestrator.
#[derive(Debug)]
pub struct DaemonOptions {
    pub config: ValidatedConfig,
    /// The configuration file's text: the base of the effective configuration, which the API
    /// validates new plans and controllers against.
    pub config_text: String,
    pub name: OrchestratorId,
    pub data_dir: PathBuf,
    pub tokens: TokenStore,
    /// Where the HTTPS API listens.
    pub api_listen: SocketAddr,
    /// Where the cluster endpoint listens; defaults to the orchestrator's configured address.
    pub cluster_listen: Option<SocketAddr>,
    pub secrets: SecretStore,
    pub timing: Timing,
}

/// A running orchestrator.
#[derive(Debug)]
pub struct Daemon {
    pub engine: Engine,
    pub node: ClusterNode,
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// SHA-256 of the API's certificate (lower-case hex), for clients to pin.
    pub api_fingerprint: String,
    /// Controllers whose driver could not be built here, and why.
    pub unavailable: Vec<(qfence_model::ControllerId, String)>,
    engine_stop: CancellationToken,
    api_stop: CancellationToken,
    engine_task: tokio::task::JoinHandle<()>,
    api_task: tokio::task::JoinHandle<std::io::Result<()>>,
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

/// A server configuration for the API: the node's certificate (from the cluster CA), no
/// client certificate (callers authenticate with bearer tokens). Returns it with the
/// certificate's SHA-256 fingerprint.
pub fn api_tls(tls: &NodeTls) -> Result<(rustls::ServerConfig, String), RuntimeError> {
    let certs = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| setup(format!("node certificate: {e}")))?;
    let first = certs
        .first()
        .ok_or_else(|| setup("the node certificate file is empty"))?;
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, first)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes())
        .map_err(|e| setup(format!("node key: {e}")))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| setup(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| setup(e.to_string()))?;
    Ok((config, fingerprint))
}

impl Daemon {
    /// Starts everything. Spawns tasks; call inside a Tokio runtime.
    pub async fn start(o: DaemonOptions) -> Result<Self, RuntimeError> {
        qfence_cluster::tls::install_crypto_provider();
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
        std::fs::create_dir_all(&o.data_dir).map_err(io(&o.data_dir))?;
        let tls = node_tls(
            &o.data_dir,
            &o.config.config().cluster.name,
            &o.name,
            &me.address,
        )?;
        // The file's configuration until the node is up; then the file's plus the API's.
        let cell = ConfigCell::new(o.config.clone(), o.config_text.clone());
        let drivers = LocalDrivers::build(o.name.clone(), &cell, &o.secrets);
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
                tls: tls.clone(),
                timing: o.timing,
                admin_api: false,
            },
            Arc::new(DriverExecutor(Arc::new(drivers))),
        )
        .await?;
        node.initialize().await?;

        let events_path = o.data_dir.join("events.jsonl");
        if events_path.exists()
            && let Some(torn) = repair_torn_tail(&events_path)?
        {
            tracing::warn!(
                bytes = torn.bytes,
                "Cut a torn last record off the event log"
            );
        }
        let log = EventLog::open(JsonlStore::open(&events_path)?)?;
        let metrics = Metrics::new();
        let engine = Engine::new(
            cell,
            node.clone(),
            log,
            metrics.clone(),
            EngineOptions::for_config(&o.config),
        );
        engine.register().await?;
        let engine_stop = CancellationToken::new();
        let engine_task = tokio::spawn(engine.clone().run(engine_stop.clone()));

        let backend = RuntimeBackend::new(&engine, o.secrets);
        let app = crate::router(Arc::new(backend), o.tokens, metrics, &ApiConfig::default());
        let (server_config, api_fingerprint) = api_tls(&tls)?;
        let tcp = tokio::net::TcpListener::bind(o.api_listen)
            .await
            .map_err(|e| setup(format!("API listen address {}: {e}", o.api_listen)))?;
        let api_addr = tcp
            .local_addr()
            .map_err(|e| setup(format!("API listen address: {e}")))?;
        let api_stop = CancellationToken::new();
        let api_task = tokio::spawn(crate::tls::serve_tls(
            tcp,
            server_config,
            app,
            api_stop.clone(),
        ));
        Ok(Self {
            engine,
            node,
            api_addr,
            api_fingerprint,
            unavailable,
            engine_stop,
            api_stop,
            engine_task,
            api_task,
        })
    }

    /// The first signal: start no new operation, wait up to `timeout` for those in flight.
    /// Returns how many were still running.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.engine.drain(timeout).await
    }

    /// Stops the engine, the API and the cluster node (cancelling whatever still runs).
    pub async fn shutdown(self) {
        self.engine_stop.cancel();
        let _ = self.engine_task.await;
        self.api_stop.cancel();
        let _ = self.api_task.await;
        self.node.shutdown().await;
        // Operations still running were cancelled with the leadership; let them record that.
        let left = self.engine.drain(Duration::from_secs(5)).await;
        if left > 0 {
            tracing::warn!(left, "Operations still running at exit");
        }
    }
}
