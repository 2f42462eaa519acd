//! `qfence controller test CONFIG NAME` and `qfence controller discover CONFIG NAME`.
//!
//! Both run from *this* orchestrator (`--orchestrator`, `$QFENCE_ORCHESTRATOR`, else the host
//! name when it names one, else the only one in the file): its site must be allowed to reach
//! the controller, and the secret is resolved from this machine's stores (systemd
//! credentials, `QFENCE_SECRET_*`, `--secrets-dir`). Nothing is fenced: `test` runs the four
//! registration steps (read-only by the driver contract), `discover` lists what the
//! controller's capabilities can act on. The exit status is 0 when everything passed, 1 when
//! a step failed, 2 when the command could not run.
//!
//! Wiring (in `main.rs`): add `Controller { #[command(subcommand)] cmd: cmd::controller::ControllerCmd }`
//! to the top-level subcommands and call `cmd::controller::run(cmd)`, which returns the
//! process exit code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use qfence_controllers::SecretStore;
use qfence_controllers::registration::{self, Registration};
use qfence_model::config::ValidatedConfig;
use qfence_model::{ControllerId, OrchestratorId};

/// `qfence controller ...`
#[derive(Debug, Subcommand)]
pub enum ControllerCmd {
    /// Run the four registration steps for one controller, from this orchestrator: the
    /// configuration, the secret, a connectivity test that reads the target's identity, and a
    /// graded check of each capability and binding. Never fences.
    Test(ControllerArgs),
    /// List the resources the controller's capabilities can act on (a BMC's systems, a fence
    /// agent's plugs, Proxmox VMs, FortiGate policies and VIPs, containers, the database
    /// server), from this orchestrator.
    Discover(ControllerArgs),
}

/// What both subcommands take.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The configuration file.
    pub config: PathBuf,
    /// The controller's name.
    pub name: String,
    /// The orchestrator this runs as (its site decides what it may reach).
    #[arg(long, env = "QFENCE_ORCHESTRATOR")]
    pub orchestrator: Option<String>,
    /// A directory of secret files (one per secret, mode 0600), after systemd credentials
    /// and QFENCE_SECRET_* variables.
    #[arg(long, env = "QFENCE_SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// The deadline of each call to the controller.
    #[arg(long, default_value_t = 30.0)]
    pub timeout_seconds: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `qfence controller` subcommand; returns the process exit code.
pub fn run(cmd: ControllerCmd) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run_async(cmd)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs a subcommand; `Ok(false)` when a step failed.
pub async fn run_async(cmd: ControllerCmd) -> anyhow::Result<bool> {
    let (discover, args) = match cmd {
        ControllerCmd::Test(a) => (false, a),
        ControllerCmd::Discover(a) => (true, a),
    };
    let config = load(&args.config)?;
    let orchestrator = pick_orchestrator(&config, args.orchestrator.as_deref())?;
    let controller = ControllerId::new(args.name.clone())
        .with_context(|| format!("{:?} is not a controller name", args.name))?;
    if !args.timeout_seconds.is_finite() || args.timeout_seconds <= 0.0 {
        bail!("--timeout-seconds must be a positive number of seconds");
    }
    let secrets = SecretStore::from_process(args.secrets_dir.clone());
    // The cluster's registered identities are not available from a file; the endpoint
    // comparison in step 3 covers duplicates within the configuration.
    let known = BTreeMap::new();
    let reg = Registration {
        config: &config,
        controller: &controller,
        orchestrator: &orchestrator,
        secrets: &secrets,
        known: &known,
        timeout: Duration::from_secs_f64(args.timeout_seconds),
    };
    if discover {
        let found = registration::discover(reg)
            .await
            .map_err(anyhow::Error::msg)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&found)?);
        } else if found.is_empty() {
            println!(
                "controller {controller}: nothing to list (the controller has no listing; name the resource by hand)"
            );
        } else {
            for d in &found {
                println!("{:<14} {:<40} {}", d.capability, d.resource, d.description);
            }
        }
        return Ok(true);
    }
    let report = registration::register(reg).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(report.passed())
}

pub(super) fn load(path: &Path) -> anyhow::Result<ValidatedConfig> {
    use qfence_model::config::LoadError;
    match qfence_model::config::load_file(path) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            Ok(loaded.config)
        }
        Err(LoadError::Invalid { issues, .. }) => {
            for i in &issues {
                eprintln!("{i}");
            }
            bail!(
                "{}: the configuration has problems (listed above)",
                path.display()
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// This orchestrator: the one named, else the host name if it names one, else the only one.
pub(super) fn pick_orchestrator(
    config: &ValidatedConfig,
    named: Option<&str>,
) -> anyhow::Result<OrchestratorId> {
    let all = &config.config().orchestrators;
    let names = || {
        all.keys()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(n) = named {
        return all
            .keys()
            .find(|k| k.as_str() == n)
            .cloned()
            .with_context(|| format!("there is no orchestrator {n:?} (there are: {})", names()));
    }
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let host = host.trim();
    let short = host.split('.').next().unwrap_or(host);
    if let Some(o) = all
        .keys()
        .find(|k| k.as_str() == host || k.as_str() == short)
    {
        return Ok(o.clone());
    }
    match all.keys().collect::<Vec<_>>().as_slice() {
        [only] => Ok((*only).clone()),
        _ => bail!(
            "which orchestrator is this? pass --orchestrator NAME or set QFENCE_ORCHESTRATOR (one of: {})",
            names()
        ),
    }
}
