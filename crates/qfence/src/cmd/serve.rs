//! `qfence serve`: run this orchestrator — cluster node, drivers, decision loop and HTTPS API —
//! until stopped.
//!
//! The data directory holds the cluster node (`tls/`, `node-key.pk8`, `raft.redb`), the event
//! log (`events.jsonl`) and, when this process created the cluster, its CA (`ca/`). A data
//! directory without a cluster becomes a one-voter cluster: nothing else to set up for a
//! single orchestrator. The first SIGINT or SIGTERM drains (no new operation starts; those
//! running get `--drain-seconds`), a second one exits at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use qfence_cluster::node::Timing;
use qfence_controllers::SecretStore;
use qfence_model::OrchestratorId;
use qfence_server::TokenStore;
use qfence_server::runtime::{Daemon, DaemonOptions};

use super::Format;

/// `qfence serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file.
    #[arg(long)]
    pub config: PathBuf,
    /// This orchestrator's name (one of the configuration's `orchestrators:`).
    #[arg(long)]
    pub name: String,
    /// The data directory (created, with a one-voter cluster, when empty).
    #[arg(long, default_value = "/var/lib/qfence")]
    pub data: PathBuf,
    /// The API token file (`ROLE NAME sha256:HEX` lines). Without one, every API call is
    /// refused (401).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Where the HTTPS API listens.
    #[arg(long, default_value = "127.0.0.1:7480")]
    pub listen: SocketAddr,
    /// Where the cluster endpoint listens (default: this orchestrator's configured address).
    #[arg(long)]
    pub cluster_listen: Option<SocketAddr>,
    /// A directory of secret files (mode 0600), tried after `$CREDENTIALS_DIRECTORY` and
    /// `QFENCE_SECRET_*` variables.
    #[arg(long)]
    pub secrets_dir: Option<PathBuf>,
    /// How long the first signal waits for running operations.
    #[arg(long, default_value_t = 30)]
    pub drain_seconds: u64,
    /// Quick loopback cluster timers (tests and labs).
    #[arg(long)]
    pub fast_timers: bool,
}

/// Runs the orchestrator until signalled. Call inside a Tokio runtime.
pub async fn run(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let loaded = match super::load(&a.config, Format::Human) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let config_text = std::fs::read_to_string(&a.config)
        .with_context(|| format!("reading {}", a.config.display()))?;
    let tokens = match &a.tokens {
        Some(p) => TokenStore::from_file(p)?,
        None => {
            eprintln!("warning: no --tokens file: every API call will be refused");
            TokenStore::default()
        }
    };
    let daemon = Daemon::start(DaemonOptions {
        config: loaded.config,
        config_text,
        name: OrchestratorId::new(&a.name).context("--name")?,
        data_dir: a.data.clone(),
        tokens,
        api_listen: a.listen,
        cluster_listen: a.cluster_listen,
        secrets: SecretStore::from_process(a.secrets_dir.clone()),
        timing: if a.fast_timers {
            Timing::fast()
        } else {
            Timing::standard()
        },
    })
    .await?;
    for (c, why) in &daemon.unavailable {
        eprintln!("warning: controller {c} has no driver here (its calls read UNKNOWN): {why}");
    }
    println!("qfence {} serving https://{}", a.name, daemon.api_addr);
    println!("API certificate sha256:{}", daemon.api_fingerprint);

    signal().await;
    println!("Draining: no new operation starts; a second signal exits at once.");
    let left = tokio::select! {
        n = daemon.drain(Duration::from_secs(a.drain_seconds)) => n,
        () = signal() => {
            eprintln!("Second signal: exiting now.");
            return Ok(ExitCode::from(130));
        }
    };
    if left > 0 {
        eprintln!("{left} operation(s) still running after the drain; they are cancelled");
    }
    daemon.shutdown().await;
    println!("Stopped.");
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
