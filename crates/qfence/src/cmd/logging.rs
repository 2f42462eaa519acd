//! The log of the long-running commands (`serve`, `lab`, `cluster`): one tracing subscriber
//! writing to stderr (the journal, under systemd), as text for people or as one JSON object a
//! line for a log shipper, filtered by `RUST_LOG`.
//!
//! The default filter shows qfence's own sentences from INFO up, its dependencies' from WARN
//! and the consensus library's errors only: an operator tailing the journal during a failover reads the decisions, commands,
//! results and leadership changes, not every heartbeat of the consensus library. `RUST_LOG`
//! replaces it whole (`RUST_LOG=debug`, `RUST_LOG=info,qfence_cluster=debug`). Records of the
//! `log` crate (rustls) come through the same filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per record, for people (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object per record: timestamp, level, target, message and its fields.
    Json,
}

/// What is shown when `RUST_LOG` is unset or empty. (A target matches by prefix: `qfence`
/// covers every `qfence_*` crate.) The consensus library's own warnings (a failed heartbeat
/// to an unreachable peer, ten a second) are left out: qfence says what they mean (a lease
/// lapsed, leadership lost or gained).
pub const DEFAULT_FILTER: &str = "warn,openraft=error,qfence=info";

/// The filter from `RUST_LOG`, or the default. A `RUST_LOG` that does not parse is said on
/// stderr with its error, and the default applies: a typo in a logging knob must not keep an
/// orchestrator from starting.
fn filter() -> EnvFilter {
    match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            eprintln!(
                "warning: RUST_LOG={v:?} is not a valid filter ({e}); using {DEFAULT_FILTER}"
            );
            EnvFilter::new(DEFAULT_FILTER)
        }),
        _ => EnvFilter::new(DEFAULT_FILTER),
    }
}

/// Installs the process's subscriber (once; a second call changes nothing).
pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        // The journal stamps each line itself.
        LogFormat::Text if std::env::var_os("JOURNAL_STREAM").is_some() => {
            builder.with_ansi(false).without_time().try_init()
        }
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: the log could not be set up: {e}");
    }
}
