//! The subcommands, one module per group.

pub mod client;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod controller_call;
pub mod dry_run;
pub mod events;
pub mod generate;
pub mod lab;
pub mod logging;
pub mod plan;
pub mod serve;

use std::path::Path;
use std::process::ExitCode;

use qfence_model::config::{Issue, LoadError, Loaded, Severity};

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text for people; problems go to stderr.
    Human,
    /// JSON on stdout, for scripts; problems as a list of {path, message, severity, line}.
    Json,
    /// A mermaid flowchart (plan show).
    Mermaid,
}

/// Exit code for a configuration with errors, or a file that cannot be read.
pub const EXIT_INVALID: u8 = 1;
/// Exit code for a command used the wrong way (as clap's own usage errors).
pub const EXIT_USAGE: u8 = 2;

/// Refuses a format a command does not offer, the way clap refuses a bad argument.
pub fn only(format: Format, allowed: &[Format], command: &str) -> Option<ExitCode> {
    if allowed.contains(&format) {
        return None;
    }
    let names: Vec<String> = allowed
        .iter()
        .map(|f| format!("{f:?}").to_lowercase())
        .collect();
    eprintln!(
        "error: {command} prints --format {}, not {}",
        names.join(" or "),
        format!("{format:?}").to_lowercase()
    );
    Some(ExitCode::from(EXIT_USAGE))
}

/// Loads a configuration file; when that fails, prints why in `format` and gives the exit code.
pub fn load(file: &Path, format: Format) -> Result<Loaded, ExitCode> {
    match qfence_model::config::load_file(file) {
        Ok(loaded) => Ok(loaded),
        Err(LoadError::Invalid { file, issues }) => {
            print_issues(&file, &issues, format);
            Err(ExitCode::from(EXIT_INVALID))
        }
        Err(e @ LoadError::Read { .. }) => {
            let issue = Issue {
                path: String::new(),
                message: e.to_string(),
                severity: Severity::Error,
                line: None,
            };
            print_issues(&file.display().to_string(), &[issue], format);
            Err(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// Prints issues: for people, one per line on stderr with file and line, and a count; for
/// scripts, the JSON list on stdout.
pub fn print_issues(file: &str, issues: &[Issue], format: Format) {
    if format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(issues).expect("issues serialise")
        );
        return;
    }
    for i in issues {
        let at = match i.line {
            Some(line) => format!("{file}:{line}"),
            None => file.to_owned(),
        };
        eprintln!("{}: {at}: {i}", i.severity);
    }
    let errors = issues.iter().filter(|i| i.is_error()).count();
    let warnings = issues.len() - errors;
    if errors > 0 {
        eprintln!("{file}: {errors} error(s), {warnings} warning(s)");
    }
}
