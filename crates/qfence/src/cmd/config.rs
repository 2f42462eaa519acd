//! `qfence config ...`: configuration files, offline.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::Format;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Parse and validate a configuration file, offline: every problem at once, with its path.
    /// Exit code 1 on errors; 0 when valid, warnings printed.
    Check {
        /// The configuration file (YAML).
        file: PathBuf,
    },
}

pub fn run(command: ConfigCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { file } => check(&file, format),
    }
}

fn check(file: &std::path::Path, format: Format) -> anyhow::Result<ExitCode> {
    if let Some(code) = super::only(format, &[Format::Human, Format::Json], "config check") {
        return Ok(code);
    }
    let loaded = match super::load(file, format) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let name = file.display().to_string();
    super::print_issues(&name, &loaded.warnings, format);
    if format == Format::Human {
        let c = loaded.config.config();
        println!(
            "{name}: valid: {} sites, {} orchestrators, {} controllers, {} plans; {} warning(s)",
            c.sites.len(),
            c.orchestrators.len(),
            c.controllers.len(),
            c.plans.len(),
            loaded.warnings.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
