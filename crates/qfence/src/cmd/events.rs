//! `qfence events ...`: the hash-chained event log, offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use qfence_runtime::events::{BrokenLink, Verified, VerifyOptions, read_jsonl, verify};
use serde::Serialize;

use super::{EXIT_INVALID, Format};

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Check an event log's hash chain, offline: an on-disk log or an export (JSON lines).
    /// Reports the first broken link with its seq and why. Exit code 1 when broken.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The event log file (one JSON record per line).
    pub file: PathBuf,
    /// The hash the last record must have, kept elsewhere (from `/api/v1/events`'s
    /// `head_hash`): detects records cut off the end, which the chain alone cannot.
    #[arg(long, value_name = "HASH")]
    pub expect_head: Option<String>,
    /// Accept a log that starts after seq 1 (an exported page); its first link is then
    /// taken on trust.
    #[arg(long)]
    pub partial: bool,
}

/// The outcome, as printed with `--format json`.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Report {
    Intact(Verified),
    Broken(BrokenLink),
}

pub fn run(command: EventsCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        EventsCommand::Verify(args) => verify_command(&args, format),
    }
}

/// Verifies the file `args` names.
pub fn verify_file(args: &VerifyArgs) -> anyhow::Result<Report> {
    let records = read_jsonl(&args.file)?;
    let opts = VerifyOptions {
        allow_partial: args.partial,
        expect_head: args.expect_head.clone(),
    };
    Ok(match verify(&records, &opts) {
        Ok(v) => Report::Intact(v),
        Err(b) => Report::Broken(b),
    })
}

fn verify_command(args: &VerifyArgs, format: Format) -> anyhow::Result<ExitCode> {
    if let Some(code) = super::only(format, &[Format::Human, Format::Json], "events verify") {
        return Ok(code);
    }
    let report = verify_file(args)?;
    let name = args.file.display().to_string();
    if format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&name, &args.file, &report);
    }
    Ok(match report {
        Report::Intact(_) => ExitCode::SUCCESS,
        Report::Broken(_) => ExitCode::from(EXIT_INVALID),
    })
}

fn print_human(name: &str, _file: &Path, report: &Report) {
    match report {
        Report::Intact(v) if v.count == 0 => println!("{name}: intact: empty log"),
        Report::Intact(v) => println!(
            "{name}: intact: {} record(s), seq {} to {}, head {}",
            v.count, v.first_seq, v.last_seq, v.head
        ),
        Report::Broken(b) => eprintln!("{name}: broken {b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qfence_runtime::events::{EventKind, EventLog, JsonlStore, NewEvent};

    fn log(dir: &Path, n: u64) -> PathBuf {
        let path = dir.join("events.jsonl");
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        for i in 0..n {
            log.append(
                NewEvent::new(EventKind::Decision, "dc1-a", format!("decision {i}")).plan("erp-db"),
                1_700_000_000_000 + i,
            )
            .unwrap();
        }
        path
    }

    fn args(file: PathBuf) -> VerifyArgs {
        VerifyArgs {
            file,
            expect_head: None,
            partial: false,
        }
    }

    #[test]
    fn an_intact_file_verifies_and_a_deleted_line_is_reported_with_its_seq() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), 4);
        let Report::Intact(v) = verify_file(&args(path.clone())).unwrap() else {
            panic!("intact")
        };
        assert_eq!((v.count, v.last_seq), (4, 4));

        let text = std::fs::read_to_string(&path).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(&path, kept.join("\n")).unwrap();
        let Report::Broken(b) = verify_file(&args(path)).unwrap() else {
            panic!("broken")
        };
        assert_eq!(b.seq, Some(3));
        assert!(b.to_string().contains("seq gap"), "{b}");
    }

    #[test]
    fn an_edited_field_and_a_cut_end_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), 3);
        let Report::Intact(full) = verify_file(&args(path.clone())).unwrap() else {
            panic!()
        };
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("decision 1", "decision 9", 1)).unwrap();
        let Report::Broken(b) = verify_file(&args(path.clone())).unwrap() else {
            panic!()
        };
        assert_eq!(b.seq, Some(2));
        assert!(b.to_string().contains("hash mismatch"), "{b}");

        let first_two: Vec<&str> = text.lines().take(2).collect();
        std::fs::write(&path, first_two.join("\n")).unwrap();
        let mut a = args(path);
        a.expect_head = Some(full.head);
        let Report::Broken(b) = verify_file(&a).unwrap() else {
            panic!()
        };
        assert!(b.to_string().contains("head mismatch"), "{b}");
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_verdict() {
        assert!(verify_file(&args("/nonexistent/events.jsonl".into())).is_err());
    }
}
