//! `qfence instance-ha status|hosts|evacuations`: Instance HA against the API (ADR 0025).

use clap::Subcommand;
use qfence_runtime::dto::{CloudStatus, EvacuationStatus, HostStatus, InstanceHaStatus};

use super::http::Api;
use super::{ApiArgs, Outcome, print_json, table};
use crate::cmd::Format;

#[derive(Debug, Subcommand)]
pub enum InstanceHaCmd {
    /// Every cloud: the last decision's sentence, hosts by state, evacuations, gates closed.
    Status {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Every compute host with its state (up, failed, disabled, or its incident's phase).
    Hosts {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Every server being (or last) evacuated, with its state, attempts and lock.
    Evacuations {
        #[command(flatten)]
        api: ApiArgs,
    },
}

pub fn run(cmd: InstanceHaCmd, format: Format) -> std::process::ExitCode {
    match cmd {
        InstanceHaCmd::Status { api } => {
            super::run(format, "instance-ha status", status(api, format))
        }
        InstanceHaCmd::Hosts { api } => super::run(format, "instance-ha hosts", hosts(api, format)),
        InstanceHaCmd::Evacuations { api } => {
            super::run(format, "instance-ha evacuations", evacuations(api, format))
        }
    }
}

async fn status(api: ApiArgs, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let s: InstanceHaStatus = api.get("/api/v1/instance-ha").await?;
    if format == Format::Json {
        print_json(&s);
        return Ok(());
    }
    if s.clouds.is_empty() {
        println!("no Instance HA clouds configured");
    }
    for c in &s.clouds {
        print_cloud(c);
    }
    Ok(())
}

fn print_cloud(c: &CloudStatus) {
    let by_state = {
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for h in &c.hosts {
            *counts.entry(h.state.as_str()).or_default() += 1;
        }
        counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let done = c.evacuations.iter().filter(|e| e.state == "done").count();
    println!("cloud {} (nova: {})", c.cloud, c.nova);
    if c.leading {
        println!(
            "  last decision ({}): {}",
            table::maybe(c.decided_at_ms),
            c.last_decision.as_deref().unwrap_or("-")
        );
        if !c.nova_reachable {
            println!("  Nova did not answer the last poll");
        }
    } else {
        println!("  this orchestrator does not lead: ask the leader for the last decision");
    }
    println!(
        "  hosts: {}",
        if by_state.is_empty() {
            "-".to_owned()
        } else {
            by_state
        }
    );
    println!("  evacuations: {} of {} done", done, c.evacuations.len());
    if !c.gates_closed.is_empty() {
        println!("  gates closed: {}", c.gates_closed.join(", "));
    }
}

async fn hosts(api: ApiArgs, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let hs: Vec<HostStatus> = api.get("/api/v1/instance-ha/hosts").await?;
    if format == Format::Json {
        print_json(&hs);
        return Ok(());
    }
    if hs.is_empty() {
        println!("no compute hosts");
        return Ok(());
    }
    let mut t = table::new(&[
        "CLOUD",
        "HOST",
        "STATE",
        "INCIDENT",
        "SERVICE",
        "FORCED DOWN",
        "FENCED",
    ]);
    for h in &hs {
        t.add_row(vec![
            h.cloud.clone(),
            h.host.clone(),
            match &h.why {
                Some(why) => format!("{} ({why})", h.state),
                None => h.state.clone(),
            },
            h.incident.map_or_else(|| "-".to_owned(), |i| i.to_string()),
            h.service.clone().unwrap_or_else(|| "-".to_owned()),
            h.forced_down.map_or_else(
                || "-".to_owned(),
                |f| if f { "yes" } else { "no" }.to_owned(),
            ),
            table::maybe(h.fenced_at_ms),
        ]);
    }
    table::print(&t);
    Ok(())
}

async fn evacuations(api: ApiArgs, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let es: Vec<EvacuationStatus> = api.get("/api/v1/instance-ha/evacuations").await?;
    if format == Format::Json {
        print_json(&es);
        return Ok(());
    }
    if es.is_empty() {
        println!("no evacuations");
        return Ok(());
    }
    let mut t = table::new(&[
        "CLOUD", "HOST", "INCIDENT", "SERVER", "STATE", "REQUESTS", "FAILURES", "LOCK",
    ]);
    for e in &es {
        t.add_row(vec![
            e.cloud.clone(),
            e.host.clone(),
            e.incident.to_string(),
            e.server.clone(),
            e.state.clone(),
            e.requests.to_string(),
            e.failures.to_string(),
            e.lock.clone(),
        ]);
    }
    table::print(&t);
    Ok(())
}
