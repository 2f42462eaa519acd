//! `qfence`: one binary, one subcommand per job. This file only wires: each group of
//! subcommands lives in its own module under `cmd/`, which returns the process's exit code.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cmd::Format;

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

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check configuration files, offline.
    #[command(subcommand)]
    Config(cmd::config::ConfigCommand),
    /// Show availability plans.
    #[command(subcommand)]
    Plan(cmd::plan::PlanCommand),
    /// Test and discover controllers, from this orchestrator.
    #[command(subcommand)]
    Controller(cmd::controller::ControllerCmd),
    /// Check the hash-chained event log, offline.
    #[command(subcommand)]
    Events(cmd::events::EventsCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Config(c) => cmd::config::run(c, cli.format),
        Command::Plan(c) => cmd::plan::run(c, cli.format),
        Command::Controller(c) => Ok(cmd::controller::run(c)),
        Command::Events(c) => cmd::events::run(c, cli.format),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
