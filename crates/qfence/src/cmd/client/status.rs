//! `qfence status [--watch]`: every plan, who owns it, what it is doing and why.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Args;
use qfence_runtime::dto::{PlanStatus, SiteRole, StatusResponse, VerdictDto};

use super::http::Api;
use super::{ApiArgs, Outcome, print_json, seconds, table};
use crate::cmd::Format;

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// Keep watching: print each change (owner, phase, generation, verdicts, the last
    /// reason) with its time, until Ctrl-C. With --format json, one JSON line per change.
    #[arg(long)]
    pub watch: bool,
    /// How often --watch asks.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval_seconds: f64,
}

pub async fn run(args: StatusArgs, format: Format) -> Outcome {
    let api = Api::new(&args.api)?;
    if args.watch {
        let every = seconds(args.interval_seconds, "--interval-seconds")?;
        return watch(&api, every, format).await;
    }
    let status: StatusResponse = api.get("/api/v1/status").await?;
    if format == Format::Json {
        print_json(&status);
    } else {
        print_status(&status);
    }
    Ok(())
}

/// The leader line and one row per plan.
pub fn print_status(s: &StatusResponse) {
    let l = &s.leader;
    let leader = match (&l.leader, l.is_self) {
        (Some(name), true) => format!("{name} (this orchestrator)"),
        (Some(name), false) => name.clone(),
        (None, _) => "none known".to_owned(),
    };
    println!(
        "orchestrator {}, term {}, leader {leader}",
        l.orchestrator, l.term
    );
    if s.plans.is_empty() {
        println!("no plans");
        return;
    }
    let mut t = table::new(&[
        "PLAN",
        "OWNER",
        "PHASE",
        "GEN",
        "PAUSED",
        "SITES",
        "LAST REASON",
    ]);
    for p in &s.plans {
        t.add_row(vec![
            p.plan.clone(),
            p.owner.clone(),
            p.phase.clone(),
            p.generation.to_string(),
            if p.paused { "yes" } else { "no" }.to_owned(),
            sites(p),
            p.last_reason.clone(),
        ]);
    }
    table::print(&t);
    // Said before it is needed: a fence or a move through such a binding would fail.
    for p in &s.plans {
        for u in &p.unworkable {
            println!("warning: plan {}: {u}", p.plan);
        }
    }
}

/// `dc1 owner, dc2 standby FENCED (maintenance)`; a standby whose verdict stands on more
/// than its fences says on what: `dc2 standby: standby, replicating from ..., lag 0 bytes`. The owner's fences are not watched (it is
/// meant to run), so its verdict is shown only when it reads FENCED: the owner is down.
pub fn sites(p: &PlanStatus) -> String {
    p.sites
        .iter()
        .map(|s| {
            let role = match s.role {
                SiteRole::Owner => "owner",
                SiteRole::Standby => "standby",
            };
            let verdict = match s.verdict {
                VerdictDto::Fenced => "FENCED",
                VerdictDto::Failed => "FAILED",
                VerdictDto::Unknown => "UNKNOWN",
            };
            let maint = if s.maintenance { " (maintenance)" } else { "" };
            match (s.role, s.verdict, &s.posture) {
                (SiteRole::Standby, _, Some(p)) => format!("{} {role}: {p}{maint}", s.site),
                (SiteRole::Owner, VerdictDto::Fenced, _) | (SiteRole::Standby, _, None) => {
                    format!("{} {role} {verdict}{maint}", s.site)
                }
                (SiteRole::Owner, _, _) => format!("{} {role}{maint}", s.site),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a watcher compares: everything but the time a verdict was checked (which moves every
/// cycle and would make every poll a change).
fn fingerprint(p: &PlanStatus) -> String {
    format!(
        "{}|{}|{}|{}|{}|{}",
        p.owner,
        p.phase,
        p.generation,
        p.paused,
        sites(p),
        p.last_reason
    ) + &p
        .unworkable
        .iter()
        .map(|u| format!("|{u}"))
        .collect::<String>()
}

/// Watches until Ctrl-C. One signal listener for the whole watch: a listener made afresh per
/// tick misses a Ctrl-C that arrives while a request is out (seen: a watch that never ended).
async fn watch(api: &Api, every: Duration, format: Format) -> Outcome {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        r = watch_changes(api, every, format) => r,
    }
}

async fn watch_changes(api: &Api, every: Duration, format: Format) -> Outcome {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut first = true;
    let mut down = false;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let status: StatusResponse = match api.get("/api/v1/status").await {
            Ok(s) => s,
            // Keep watching through an outage (a failover may be moving the API): say so
            // once, and again when it is back.
            Err(e) => {
                let Some(why) = e.transient() else {
                    return Err(e);
                };
                if !down {
                    eprintln!("{} {why}", table::clock(table::now_ms()));
                    down = true;
                }
                continue;
            }
        };
        if down {
            eprintln!("{} the API answers again", table::clock(table::now_ms()));
            down = false;
        }
        let now = table::clock(table::now_ms());
        if first {
            first = false;
            if format == Format::Json {
                println!("{}", serde_json::to_string(&status).expect("serialises"));
            } else {
                println!("{now}");
                print_status(&status);
            }
            seen = status
                .plans
                .iter()
                .map(|p| (p.plan.clone(), fingerprint(p)))
                .collect();
            continue;
        }
        for p in &status.plans {
            let f = fingerprint(p);
            if seen.get(&p.plan) == Some(&f) {
                continue;
            }
            seen.insert(p.plan.clone(), f);
            if format == Format::Json {
                println!("{}", serde_json::to_string(p).expect("serialises"));
            } else {
                println!(
                    "{now} {}: {} owner {}, generation {}: {} [{}]",
                    p.plan,
                    p.phase,
                    p.owner,
                    p.generation,
                    p.last_reason,
                    sites(p)
                );
                for u in &p.unworkable {
                    println!("{now} {}: warning: {u}", p.plan);
                }
            }
        }
        let names: Vec<String> = seen.keys().cloned().collect();
        for gone in names
            .iter()
            .filter(|n| !status.plans.iter().any(|p| &p.plan == *n))
        {
            seen.remove(gone);
            if format == Format::Human {
                println!("{now} {gone}: deleted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use qfence_runtime::dto::{PlanStatus, SiteRole, SiteStatus, VerdictDto};

    use super::sites;

    fn site(name: &str, role: SiteRole, verdict: VerdictDto) -> SiteStatus {
        SiteStatus {
            site: name.into(),
            role,
            verdict,
            checked_at_ms: None,
            posture: None,
            maintenance: false,
        }
    }

    fn plan(sites: Vec<SiteStatus>) -> PlanStatus {
        PlanStatus {
            plan: "erp-db".into(),
            owner: "dc1".into(),
            generation: 1,
            paused: false,
            phase: "steady".into(),
            halted: None,
            last_reason: String::new(),
            sites,
            unworkable: Vec::new(),
        }
    }

    #[test]
    fn the_owner_shows_a_verdict_only_when_it_reads_fenced() {
        let steady = plan(vec![
            site("dc1", SiteRole::Owner, VerdictDto::Unknown),
            site("dc2", SiteRole::Standby, VerdictDto::Fenced),
        ]);
        assert_eq!(sites(&steady), "dc1 owner, dc2 standby FENCED");
        let owner_down = plan(vec![
            site("dc1", SiteRole::Owner, VerdictDto::Fenced),
            site("dc2", SiteRole::Standby, VerdictDto::Unknown),
        ]);
        assert_eq!(sites(&owner_down), "dc1 owner FENCED, dc2 standby UNKNOWN");
    }

    #[test]
    fn a_hot_standby_shows_what_it_replicates_not_a_fence_verdict() {
        let mut hot = site("dc2", SiteRole::Standby, VerdictDto::Fenced);
        hot.posture = Some("standby, replicating from 10.0.1.5:5432, lag 0 bytes".into());
        let p = plan(vec![site("dc1", SiteRole::Owner, VerdictDto::Unknown), hot]);
        assert_eq!(
            sites(&p),
            "dc1 owner, dc2 standby: standby, replicating from 10.0.1.5:5432, lag 0 bytes"
        );
        let mut writable = site("dc2", SiteRole::Standby, VerdictDto::Failed);
        writable.posture = Some("not a standby: 10.0.2.5:5432 is writable".into());
        let p = plan(vec![
            site("dc1", SiteRole::Owner, VerdictDto::Unknown),
            writable,
        ]);
        assert_eq!(
            sites(&p),
            "dc1 owner, dc2 standby: not a standby: 10.0.2.5:5432 is writable"
        );
    }
}
