//! `qfence`: one binary, one subcommand per job. This file only wires: each group of
//! subcommands lives in its own module under `cmd/`, which returns the process's exit code.

mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use cmd::Format;
use cmd::logging::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "qfence",
    version,
    about = "Site-aware fencing and failover orchestrator"
)]
struct Cli {
    /// Output format: human text, JSON for scripts, or a mermaid diagram (plan show only).
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    format: Format,

    /// How the long-running commands (serve, lab, cluster) write their log to stderr: text
    /// or one JSON object a line. `RUST_LOG` filters it (default: qfence at info, the rest
    /// at warn, the consensus library at error).
    #[arg(long, global = true, value_enum, env = "QFENCE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check configuration files, offline.
    #[command(subcommand)]
    Config(cmd::config::ConfigCommand),
    /// Availability plans: list, show, dry-run, switchover, failover... against the API;
    /// `plan show FILE PLAN` and `plan dry-run FILE PLAN` read a configuration file, offline.
    #[command(subcommand)]
    Plan(cmd::client::plan::PlanCmd),
    /// Controllers: list, test, register against the API; `controller test|discover CONFIG
    /// NAME` and `controller call CONFIG NAME CAPABILITY RESOURCE` (a fence by hand) run from
    /// this orchestrator, offline.
    #[command(subcommand)]
    Controller(cmd::client::controller::ControllerCmd),
    /// The event log from the API (filter, --follow); `events verify FILE` checks a log's
    /// hash chain, offline.
    Events(cmd::client::events::EventsArgs),
    /// Every plan: owner, phase, generation, verdicts, the last reason; --watch follows
    /// changes.
    Status(cmd::client::status::StatusArgs),
    /// Instance HA against the API: status (each cloud's last decision), hosts, evacuations.
    #[command(subcommand, name = "instance-ha")]
    InstanceHa(cmd::client::instance_ha::InstanceHaCmd),
    /// Create, join and run the orchestrator cluster.
    Cluster(cmd::cluster::ClusterArgs),
    /// Run this orchestrator: cluster node, drivers, decision loop and HTTPS API.
    Serve(cmd::serve::ServeArgs),
    /// The demo lab on loopback: simulators, three orchestrators, erp-db; `lab fail|heal SITE`
    /// act on the running lab.
    Lab(cmd::lab::LabArgs),
    /// Measure qfence: figures, not pass/fail.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions(cmd::generate::CompletionsArgs),
    /// Write the man pages and every shell's completion script into a directory (packaging).
    #[command(hide = true)]
    GenerateAssets(cmd::generate::AssetsArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Commit latency of plan-state changes on a three-node loopback cluster, and verified
    /// forwarded calls per second against a no-op controller.
    Cluster(cmd::cluster::BenchArgs),
}

/// Runs an async command on a runtime made for it; the offline commands need none.
fn block_on(
    fut: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(fut)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Serve(_) | Command::Lab(_) | Command::Cluster(_) | Command::Bench(_)
    ) {
        cmd::logging::init(cli.log_format);
    }
    let result = match cli.command {
        Command::Config(c) => cmd::config::run(c, cli.format),
        Command::Plan(c) => cmd::client::plan::run(c, cli.format),
        Command::Controller(c) => Ok(cmd::client::controller::run(c, cli.format)),
        Command::Events(a) => cmd::client::events::run(a, cli.format),
        Command::Status(a) => Ok(cmd::client::run(
            cli.format,
            "status",
            cmd::client::status::run(a, cli.format),
        )),
        Command::InstanceHa(c) => Ok(cmd::client::instance_ha::run(c, cli.format)),
        Command::Cluster(a) => block_on(cmd::cluster::run(a)),
        Command::Lab(a) => cmd::lab::run(a, cli.format),
        Command::Bench(BenchCommand::Cluster(a)) => block_on(cmd::cluster::bench(a)),
        Command::Completions(a) => cmd::generate::completions(a, Cli::command()),
        Command::GenerateAssets(a) => cmd::generate::assets(a, Cli::command()),
        Command::Serve(a) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(cmd::serve::run(a))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
