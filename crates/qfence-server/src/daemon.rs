//! The whole orchestrator process, started in one call: the runtime
//! ([`qfence_runtime::Orchestrator`]: cluster node, drivers, engine, event log) and the HTTPS
//! API in front of its backend. `qfence serve` is a thin shell around [`Daemon`]; tests start
//! it in process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use qfence_cluster::tls::NodeTls;
use qfence_runtime::{Orchestrator, OrchestratorOptions, RuntimeError, TokenStore};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::ApiConfig;

/// How to start an orchestrator and its API.
#[derive(Debug)]
pub struct DaemonOptions {
    pub orchestrator: OrchestratorOptions,
    pub tokens: TokenStore,
    /// Where the HTTPS API listens.
    pub api_listen: SocketAddr,
}

/// A running orchestrator with its API.
#[derive(Debug)]
pub struct Daemon {
    pub orchestrator: Orchestrator,
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// SHA-256 of the API's certificate (lower-case hex), for clients to pin.
    pub api_fingerprint: String,
    api_stop: CancellationToken,
    api_task: tokio::task::JoinHandle<std::io::Result<()>>,
}

fn setup(reason: impl Into<String>) -> RuntimeError {
    RuntimeError::Setup(reason.into())
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
    /// Starts the runtime, then the API. Spawns tasks; call inside a Tokio runtime.
    pub async fn start(o: DaemonOptions) -> Result<Self, RuntimeError> {
        let orchestrator = Orchestrator::start(o.orchestrator).await?;
        let api_stop = CancellationToken::new();
        let app = crate::router(
            Arc::new(orchestrator.backend.clone()),
            o.tokens,
            orchestrator.metrics.clone(),
            &ApiConfig {
                shutdown: api_stop.clone(),
                ..ApiConfig::default()
            },
        );
        let (server_config, api_fingerprint) = api_tls(&orchestrator.tls)?;
        let tcp = tokio::net::TcpListener::bind(o.api_listen)
            .await
            .map_err(|e| setup(format!("API listen address {}: {e}", o.api_listen)))?;
        let api_addr = tcp
            .local_addr()
            .map_err(|e| setup(format!("API listen address: {e}")))?;
        let api_task = tokio::spawn(crate::tls::serve_tls(
            tcp,
            server_config,
            app,
            api_stop.clone(),
        ));
        Ok(Self {
            orchestrator,
            api_addr,
            api_fingerprint,
            api_stop,
            api_task,
        })
    }

    /// Waits until the engine's first tick has run (`qfence serve` is ready then).
    pub async fn first_tick(&self) {
        self.orchestrator.first_tick().await;
    }

    /// The first signal: start no new operation, wait up to `timeout` for those in flight.
    /// Returns how many were still running.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.orchestrator.drain(timeout).await
    }

    /// Stops the API (its calls in flight finish while the engine still runs), then the
    /// runtime.
    pub async fn shutdown(self) {
        self.api_stop.cancel();
        let _ = self.api_task.await;
        self.orchestrator.shutdown().await;
    }
}
