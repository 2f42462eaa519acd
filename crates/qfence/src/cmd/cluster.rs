//! `qfence cluster init|issue|join|run|status` and `qfence bench cluster`.
//!
//! A node keeps everything in its data directory: `node.json` (who it is and where it listens),
//! `tls/` (the cluster CA certificate, its certificate and key), `node-key.pk8` (its Ed25519 key
//! for signing forwarded calls) and `raft.redb` (the Raft log and replicated state). `init`
//! also writes the cluster CA to `ca/` in the first node's data directory; move `ca/ca.key`
//! somewhere safe after issuing the other nodes' certificates.
//!
//! Wiring (in main.rs): add `Cluster(cmd::cluster::ClusterArgs)` to the top-level subcommands and
//! call `cmd::cluster::run(args)` inside a Tokio runtime; `qfence bench cluster` calls
//! `cmd::cluster::bench(args)`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use qfence_cluster::forward::{CallExecutor, NoDriversExecutor, NoopExecutor};
use qfence_cluster::node::{AdminClient, ClusterNode, NodeOptions, Timing};
use qfence_cluster::tls::{CertificateAuthority, NodeTls};
use qfence_model::ids::{OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};

/// `qfence cluster ...`
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// The cluster subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create a cluster: its CA, this node's certificate and keys, and a one-voter Raft cluster.
    Init(InitArgs),
    /// Issue a certificate for another orchestrator from the cluster CA.
    Issue(IssueArgs),
    /// Add this orchestrator to an existing cluster through any member.
    Join(JoinArgs),
    /// Run this node's cluster endpoint in the foreground until interrupted.
    Run(RunArgs),
    /// Show this node's view of the cluster.
    Status(StatusArgs),
}

/// Who a node is and where it listens; shared by `init` and `join`.
#[derive(Debug, Args, Clone)]
pub struct NodeArgs {
    /// The orchestrator's name (as in the configuration's `orchestrators:`).
    #[arg(long)]
    pub name: String,
    /// Its site.
    #[arg(long)]
    pub site: String,
    /// It runs at a witness site: it votes, owns no plans, makes no controller calls.
    #[arg(long)]
    pub witness: bool,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7400")]
    pub listen: SocketAddr,
    /// `host:port` the other orchestrators use to reach this one.
    #[arg(long)]
    pub advertise: String,
    /// Data directory.
    #[arg(long, default_value = "/var/lib/qfence")]
    pub data_dir: PathBuf,
}

/// `qfence cluster init`
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The cluster's name (carried in its CA's subject).
    #[arg(long)]
    pub cluster_name: String,
    /// Extra host names or IP addresses for this node's certificate.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `qfence cluster issue`
#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The directory `init` wrote the CA to (`DATA_DIR/ca`).
    #[arg(long)]
    pub ca_dir: PathBuf,
    /// The orchestrator the certificate is for.
    #[arg(long)]
    pub name: String,
    /// Host names or IP addresses it is reached at.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Where to write `ca.pem`, `node.pem` and `node.key` (copy it to the node's `DATA_DIR/tls`).
    #[arg(long)]
    pub out_dir: PathBuf,
}

/// `qfence cluster join`
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// `host:port` of any member.
    #[arg(long)]
    pub seed: String,
    /// Keep serving after joining (until interrupted) instead of exiting. Without it, start the
    /// node (`qfence cluster run`) promptly: until then the cluster counts a voter that is down.
    #[arg(long)]
    pub then_run: bool,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// Which executor a cluster-only node uses for controller calls.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum ExecutorKind {
    /// No drivers: every call fails and the leader reports UNKNOWN. Safe.
    #[default]
    None,
    /// Answer every call without doing anything. Labs and tests only.
    Noop,
}

/// `qfence cluster run`
#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long, default_value = "/var/lib/qfence")]
    pub data_dir: PathBuf,
    /// How controller calls are executed in this cluster-only process.
    #[arg(long, value_enum, default_value_t = ExecutorKind::None)]
    pub executor: ExecutorKind,
    /// Use the quick loopback timers (tests).
    #[arg(long)]
    pub fast_timers: bool,
    /// Serve the admin endpoints (any cluster-certificate holder may then propose commands and
    /// controller calls). Tooling and tests only.
    #[arg(long)]
    pub admin_api: bool,
}

/// `qfence cluster status`
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, default_value = "/var/lib/qfence")]
    pub data_dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `qfence bench cluster`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Sequential plan-state changes to time.
    #[arg(long, default_value_t = 500)]
    pub writes: usize,
    /// Seconds of forwarded calls.
    #[arg(long, default_value_t = 3.0)]
    pub forward_seconds: f64,
    /// Forwarded calls in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
}

/// `node.json` in the data directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeIdentity {
    pub name: OrchestratorId,
    pub site: SiteId,
    pub witness: bool,
    pub listen: SocketAddr,
    pub advertise: String,
}

const IDENTITY_FILE: &str = "node.json";

impl NodeIdentity {
    fn from_args(a: &NodeArgs) -> anyhow::Result<Self> {
        Ok(Self {
            name: OrchestratorId::new(&a.name).context("--name")?,
            site: SiteId::new(&a.site).context("--site")?,
            witness: a.witness,
            listen: a.listen,
            advertise: a.advertise.clone(),
        })
    }

    pub(crate) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(IDENTITY_FILE);
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    fn load(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(IDENTITY_FILE);
        let text = std::fs::read(&path).with_context(|| {
            format!(
                "reading {} (run `qfence cluster init` or `join` first)",
                path.display()
            )
        })?;
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
    }

    fn options(&self, dir: &Path, timing: Timing, admin_api: bool) -> anyhow::Result<NodeOptions> {
        Ok(NodeOptions {
            name: self.name.clone(),
            site: self.site.clone(),
            witness: self.witness,
            listen: self.listen,
            advertise: Some(self.advertise.clone()),
            data_dir: dir.to_path_buf(),
            tls: NodeTls::load(&dir.join("tls"))?,
            timing,
            admin_api,
        })
    }
}

fn advertised_host(advertise: &str) -> String {
    advertise
        .rsplit_once(':')
        .map_or(advertise, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// Runs one `qfence cluster` subcommand. Call inside a Tokio runtime.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Init(a) => init(a).await,
        ClusterCommand::Issue(a) => issue(&a),
        ClusterCommand::Join(a) => join(a).await,
        ClusterCommand::Run(a) => run_node(a).await,
        ClusterCommand::Status(a) => status(a).await,
    }
}

async fn init(a: InitArgs) -> anyhow::Result<()> {
    let dir = &a.node.data_dir;
    let identity = NodeIdentity::from_args(&a.node)?;
    if dir.join(IDENTITY_FILE).exists() {
        bail!(
            "{} already holds a node; refusing to create a second cluster over it",
            dir.display()
        );
    }
    let ca = CertificateAuthority::generate(&a.cluster_name)?;
    let ca_dir = dir.join("ca");
    std::fs::create_dir_all(&ca_dir).with_context(|| format!("creating {}", ca_dir.display()))?;
    std::fs::write(ca_dir.join("ca.pem"), ca.cert_pem())?;
    write_secret(&ca_dir.join("ca.key"), &ca.key_pem())?;
    std::fs::write(ca_dir.join("cluster-name"), &a.cluster_name)?;
    let mut hosts = a.hosts.clone();
    hosts.push(advertised_host(&identity.advertise));
    ca.issue(identity.name.as_str(), &hosts)?
        .save(&dir.join("tls"))?;
    identity.save(dir)?;

    let node = ClusterNode::start(
        identity.options(dir, Timing::standard(), false)?,
        Arc::new(NoDriversExecutor),
    )
    .await?;
    node.initialize().await?;
    node.shutdown().await;
    println!(
        "Created cluster {:?} with {} ({}) as its only voter. CA in {}; keep ca.key offline once the other nodes have certificates.",
        a.cluster_name,
        identity.name,
        identity.site,
        ca_dir.display()
    );
    Ok(())
}

fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn issue(a: &IssueArgs) -> anyhow::Result<()> {
    let read = |f: &str| {
        let p = a.ca_dir.join(f);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let ca = CertificateAuthority::from_pem(
        read("cluster-name")?.trim(),
        &read("ca.pem")?,
        &read("ca.key")?,
    )?;
    OrchestratorId::new(&a.name).context("--name")?;
    ca.issue(&a.name, &a.hosts)?.save(&a.out_dir)?;
    println!(
        "Issued a certificate for {} into {}; copy it to the node's DATA_DIR/tls.",
        a.name,
        a.out_dir.display()
    );
    Ok(())
}

async fn join(a: JoinArgs) -> anyhow::Result<()> {
    let dir = &a.node.data_dir;
    let identity = NodeIdentity::from_args(&a.node)?;
    identity.save(dir)?;
    let node = ClusterNode::start(
        identity.options(dir, Timing::standard(), false)?,
        Arc::new(NoDriversExecutor),
    )
    .await?;
    if let Err(e) = node.join(&a.seed).await {
        node.shutdown().await;
        return Err(e).with_context(|| format!("joining through {}", a.seed));
    }
    if a.then_run {
        println!(
            "{} ({}) joined through {}; serving.",
            identity.name, identity.site, a.seed
        );
        shutdown_signal().await;
        node.shutdown().await;
        return Ok(());
    }
    // Stay until this node has applied its own key, so a restart finds itself a member.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !node.state().node_keys.contains_key(&identity.name)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await;
    println!(
        "{} ({}) joined through {}; start it now with `qfence cluster run`.",
        identity.name, identity.site, a.seed
    );
    Ok(())
}

async fn run_node(a: RunArgs) -> anyhow::Result<()> {
    let identity = NodeIdentity::load(&a.data_dir)?;
    let timing = if a.fast_timers {
        Timing::fast()
    } else {
        Timing::standard()
    };
    let executor: Arc<dyn CallExecutor> = match a.executor {
        ExecutorKind::None => Arc::new(NoDriversExecutor),
        ExecutorKind::Noop => {
            eprintln!(
                "warning: --executor noop answers every controller call without doing anything; labs and tests only"
            );
            Arc::new(NoopExecutor)
        }
    };
    let node = ClusterNode::start(
        identity.options(&a.data_dir, timing, a.admin_api)?,
        executor,
    )
    .await?;
    println!(
        "Serving {} ({}) at {}.",
        identity.name, identity.site, identity.advertise
    );
    shutdown_signal().await;
    node.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let identity = NodeIdentity::load(&a.data_dir)?;
    let tls = NodeTls::load(&a.data_dir.join("tls"))?;
    let report = AdminClient::new(&tls, Duration::from_secs(5))?
        .status(&identity.advertise)
        .await
        .with_context(|| format!("asking {} at {}", identity.name, identity.advertise))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} ({}) is {} in term {}; leader: {}; applied up to {}; {} plans, {} controllers",
        report.name,
        report.site,
        report.role,
        report.term,
        report
            .leader
            .as_ref()
            .map_or("none known".to_owned(), ToString::to_string),
        report
            .last_applied
            .map_or("nothing".to_owned(), |i| format!("entry {i}")),
        report.plans,
        report.controllers
    );
    for m in &report.members {
        println!(
            "  {:<20} {:<10} {:<24} {}{}{}",
            m.name.as_str(),
            m.site.as_str(),
            m.address,
            if m.voter { "voter" } else { "learner" },
            if m.witness { ", witness" } else { "" },
            match m.live {
                Some(true) => ", live",
                Some(false) => ", NOT ANSWERING",
                None => "",
            }
        );
    }
    Ok(())
}

/// `qfence bench cluster`: prints commit latency and forwarded calls per second.
pub async fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let options = qfence_cluster::bench::BenchOptions {
        writes: a.writes,
        forward_duration: Duration::from_secs_f64(a.forward_seconds),
        concurrency: a.concurrency,
    };
    let report = qfence_cluster::bench::run(&options).await?;
    println!("{report}");
    Ok(())
}
