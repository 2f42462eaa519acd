//! `qfence serve`: run this orchestrator — cluster node, drivers, decision loop and HTTPS API —
//! until stopped.
//!
//! The data directory holds the cluster node (`tls/`, `node-key.pk8`, `raft.redb`, `node.json`),
//! the event log (`events.jsonl`) and, when this process created the cluster, its CA (`ca/`).
//! A data directory without a cluster becomes a one-voter cluster: nothing else to set up for
//! a single orchestrator. A cluster of several is one `serve` each: the first with `--init`
//! (it also writes a join token for every other orchestrator of the configuration into
//! `join-tokens/`), the others with `--join ADDR` and their token on their first start; both
//! flags are harmless once the node is a member. Whether a node is a witness comes from the
//! configuration (its site's `witness: true`). The first SIGINT or SIGTERM drains (no new
//! operation starts; those running get `--drain-seconds`), a second one exits at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use qfence_cluster::node::Timing;
use qfence_cluster::tls::JoinToken;
use qfence_controllers::SecretStore;
use qfence_model::OrchestratorId;
use qfence_model::config::OrchestratorConfig;
use qfence_model::ids::SecretRef;
use qfence_runtime::orchestrator::JOIN_TOKENS_DIR;
use qfence_runtime::systemd::Notifier;
use qfence_runtime::{JoinOptions, Membership, OrchestratorOptions, TokenStore};
use qfence_server::{Daemon, DaemonOptions};

use super::Format;

/// The secret (a systemd credential, under the packaged unit) holding a joining
/// orchestrator's join token when no flag gives it.
pub const JOIN_TOKEN_SECRET: &str = "join-token";

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
    /// The first orchestrator of a cluster: create it (when the data directory holds none)
    /// and write a join token for every other orchestrator of the configuration into
    /// `DATA/join-tokens/NAME.token` (mode 0600). Hand each to its orchestrator securely.
    #[arg(long, conflicts_with = "join")]
    pub init: bool,
    /// First start only: join the cluster through this member's cluster address
    /// (`host:port`), with --join-token, --join-token-file or the secret `join-token` (a
    /// systemd credential under the packaged unit). Nothing to do once a member.
    #[arg(long, value_name = "ADDR")]
    pub join: Option<String>,
    /// This orchestrator's join token (from the first node's `join-tokens/`). It holds a
    /// private key: prefer --join-token-file or the environment to the command line.
    #[arg(
        long,
        env = "QFENCE_JOIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        conflicts_with = "join_token_file"
    )]
    pub join_token: Option<String>,
    /// A file holding this orchestrator's join token.
    #[arg(long, value_name = "FILE")]
    pub join_token_file: Option<PathBuf>,
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
            tracing::warn!("No --tokens file: every API call will be refused");
            TokenStore::default()
        }
    };
    let join = match join_options(&a)? {
        Ok(join) => join,
        Err(code) => return Ok(code),
    };
    let name = OrchestratorId::new(&a.name).context("--name")?;
    let me = loaded.config.config().orchestrators.get(&name).cloned();
    let witness = me.as_ref().is_some_and(|m| {
        loaded
            .config
            .config()
            .sites
            .get(&m.site)
            .is_some_and(|s| s.witness)
    });
    let notifier = Notifier::from_env();
    let daemon = Daemon::start(DaemonOptions {
        orchestrator: OrchestratorOptions {
            config: loaded.config,
            config_text,
            name: name.clone(),
            data_dir: a.data.clone(),
            cluster_listen: a.cluster_listen,
            secrets: SecretStore::from_process(a.secrets_dir.clone()),
            timing: if a.fast_timers {
                Timing::fast()
            } else {
                Timing::standard()
            },
            join,
            write_join_tokens: a.init,
            notifier: notifier.clone(),
        },
        tokens,
        api_listen: a.listen,
    })
    .await?;
    if let Some(me) = &me {
        save_identity(&a, &name, me, witness);
    }
    announce(&a, &daemon, witness);
    Ok(serve_until_stopped(&a, daemon, notifier.as_ref()).await)
}

/// How to join, from the flags or (under systemd) the `join-token` secret; `Err` is the exit
/// code of a `--join` without a token, said on stderr.
fn join_options(a: &ServeArgs) -> anyhow::Result<Result<Option<JoinOptions>, ExitCode>> {
    let join = match (&a.join, &a.join_token, &a.join_token_file) {
        (None, _, _) => None,
        (Some(seed), Some(t), _) => Some(JoinOptions {
            seed: seed.clone(),
            token: JoinToken::decode(t).context("--join-token")?,
        }),
        (Some(seed), None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading the join token {}", f.display()))?;
            Some(JoinOptions {
                seed: seed.clone(),
                token: JoinToken::decode(&text)
                    .with_context(|| format!("the join token in {}", f.display()))?,
            })
        }
        (Some(seed), None, None) => {
            // Under systemd: the credential `join-token` (LoadCredential=), or the secret
            // stores' entry of that name.
            let secrets = SecretStore::from_process(a.secrets_dir.clone());
            let Ok(token) = SecretRef::new(JOIN_TOKEN_SECRET)
                .map_err(|e| e.to_string())
                .and_then(|r| secrets.resolve(&r).map_err(|e| e.to_string()))
            else {
                eprintln!(
                    "error: --join needs this orchestrator's join token: --join-token-file FILE, \
                     --join-token TOKEN, QFENCE_JOIN_TOKEN or the secret {JOIN_TOKEN_SECRET:?} \
                     (a systemd credential; the first node wrote the token into its \
                     join-tokens/ directory)"
                );
                return Ok(Err(ExitCode::from(super::EXIT_USAGE)));
            };
            Some(JoinOptions {
                seed: seed.clone(),
                token: JoinToken::decode(token.expose().trim()).with_context(|| {
                    format!("the join token in the secret {JOIN_TOKEN_SECRET:?}")
                })?,
            })
        }
    };
    Ok(Ok(join))
}

/// Writes what `qfence cluster status --data-dir` reads to find this node (a failure is
/// only warned of: the node serves without it).
fn save_identity(a: &ServeArgs, name: &OrchestratorId, me: &OrchestratorConfig, witness: bool) {
    let Some(listen) = a.cluster_listen.or_else(|| me.address.parse().ok()) else {
        return;
    };
    let identity = super::cluster::NodeIdentity {
        name: name.clone(),
        site: me.site.clone(),
        witness,
        listen,
        advertise: me.address.clone(),
    };
    if let Err(e) = identity.save(&a.data) {
        tracing::warn!(
            error = format!("{e:#}"),
            "Could not save this node's identity"
        );
    }
}

/// Tells the operator what start-up did: the membership, where the join tokens are, the
/// witness role, the controllers without a driver here, and where the API serves.
fn announce(a: &ServeArgs, daemon: &Daemon, witness: bool) {
    match (daemon.orchestrator.membership, &a.join) {
        (Membership::Joined, Some(seed)) => println!("Joined the cluster through {seed}"),
        (Membership::Member, Some(_)) => {
            println!("Already a member of the cluster: nothing to join")
        }
        (Membership::Created, _) => println!("Created a one-voter cluster"),
        _ => {}
    }
    if a.init {
        let dir = a.data.join(JOIN_TOKENS_DIR);
        println!(
            "Join tokens for the other orchestrators are in {} (secrets: each holds a private key)",
            dir.display()
        );
    }
    if witness {
        println!(
            "{} is a witness: it votes, owns no plan, calls no controller",
            a.name
        );
    }
    for (c, why) in &daemon.orchestrator.unavailable {
        tracing::warn!(controller = %c, "No driver here; its calls read UNKNOWN: {why}");
    }
    println!("qfence {} serving https://{}", a.name, daemon.api_addr);
    println!("API certificate sha256:{}", daemon.api_fingerprint);
}

/// Serves until the first signal, then drains; a second signal exits at once (130).
async fn serve_until_stopped(
    a: &ServeArgs,
    daemon: Daemon,
    notifier: Option<&Notifier>,
) -> ExitCode {
    // Ready for systemd once joined, serving and past the first tick of the engine (a
    // signal before that still drains).
    let signalled = tokio::select! {
        () = daemon.first_tick() => false,
        () = signal() => true,
    };
    if !signalled {
        tracing::info!(orchestrator = %a.name, api = %daemon.api_addr, "Ready: the first tick has run");
        if let Some(n) = notifier {
            n.ready(&format!("serving https://{}", daemon.api_addr));
        }
        signal().await;
    }
    if let Some(n) = notifier {
        n.stopping("draining");
    }
    println!("Draining: no new operation starts; a second signal exits at once.");
    let left = tokio::select! {
        n = daemon.drain(Duration::from_secs(a.drain_seconds)) => n,
        () = signal() => {
            eprintln!("Second signal: exiting now.");
            return ExitCode::from(130);
        }
    };
    if left > 0 {
        eprintln!("{left} operation(s) still running after the drain; they are cancelled");
    }
    daemon.shutdown().await;
    println!("Stopped.");
    ExitCode::SUCCESS
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
