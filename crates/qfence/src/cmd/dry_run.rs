//! `qfence plan dry-run FILE PLAN --to SITE [--json]`: the whole ordered action list of a
//! failover of PLAN to SITE, offline, assuming every command is done and every check passes.
//! Nothing is called: no controller, no orchestrator.
//!
//! Exit codes: 0 the move would complete; 1 it would stop (the last line says where and why);
//! 2 the file, plan or site is wrong.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use qfence_core::dry_run::{MoveKind, dry_run};
use qfence_model::config::{LoadError, ValidatedConfig, load_file};

/// Loads FILE (parse and validate) and prints the dry run to standard output.
pub fn run(file: &Path, plan: &str, to: &str, json: bool) -> anyhow::Result<i32> {
    let loaded = match load_file(file) {
        Ok(l) => l,
        Err(LoadError::Invalid { file, issues }) => {
            eprintln!("{file}: the configuration is not valid:");
            for i in &issues {
                eprintln!("  {i}");
            }
            return Ok(2);
        }
        Err(e) => return Err(e.into()),
    };
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    run_with(&loaded.config, plan, to, json, &mut std::io::stdout().lock())
}

/// Prints the dry run of a failover of `plan` to `to` for an already validated configuration.
pub fn run_with(
    config: &ValidatedConfig,
    plan: &str,
    to: &str,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let r = match dry_run(config, plan, &BTreeMap::new(), to, MoveKind::Failover) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(2);
        }
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, &r)?;
        writeln!(out)?;
    } else {
        for line in r.lines() {
            writeln!(out, "{line}")?;
        }
    }
    Ok(if r.completes { 0 } else { 1 })
}
