//! `qfence plan ...`: online against the API, and the offline forms that read a file.
//!
//! The rule: `plan show` and `plan dry-run` are offline when given two names, a
//! configuration file then a plan (`plan show FILE PLAN`), and online when given only the
//! plan (`plan show PLAN --api URL`). Every other `plan` command is online.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use qfence_runtime::dto::{
    ConfirmFencedRequest, DryRun, DryRunResult, FailoverRequest, MaintenanceRequest,
    OperationAccepted, PauseRequest, PlanSource, PlanView, RejoinRequest, StatusResponse,
    SwitchoverRequest,
};
use serde_json::json;

use super::http::{Api, seg};
use super::progress::{self, Operation};
use super::status::sites;
use super::{ApiArgs, Failure, Outcome, print_json, seconds, table};
use crate::cmd::Format;
use crate::cmd::plan::PlanCommand as OfflinePlan;

const OFFLINE_RULE: &str = "Offline form: FILE PLAN (a configuration file, then the plan), read \
from the file with no API. Online form: PLAN alone, against --api.";

#[derive(Debug, Subcommand)]
pub enum PlanCmd {
    /// Every plan: owner, phase, generation, paused, a staged change. Online.
    List {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show a plan. `plan show PLAN` asks the API (its document, generation and sites);
    /// `plan show FILE PLAN` reads the configuration file, offline (--format mermaid too).
    #[command(after_help = OFFLINE_RULE)]
    Show {
        /// PLAN (online), or FILE PLAN (offline).
        #[arg(num_args = 1..=2, required = true, value_names = ["FILE_OR_PLAN", "PLAN"])]
        names: Vec<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// What an action would do, changing nothing. `plan dry-run FILE PLAN --to SITE` works
    /// out a failover offline from the file; `plan dry-run PLAN` asks the API: a failover
    /// with --to (by priority with --failover alone), a switchover with --switchover --to,
    /// applying the staged change with --staged, else the next cycle.
    #[command(after_help = OFFLINE_RULE)]
    DryRun(DryRunArgs),
    /// Move ownership to SITE in order, and follow it step by step until done or failed.
    Switchover {
        plan: String,
        /// The new owner.
        #[arg(long = "to", value_name = "SITE")]
        to: String,
        #[command(flatten)]
        op: OpArgs,
    },
    /// Fence the owner, then promote SITE (or the next site by priority), and follow it step
    /// by step until done or failed. Refused while the owner is not proven FENCED.
    Failover {
        plan: String,
        /// The new owner; by the plan's priority when absent.
        #[arg(long = "to", value_name = "SITE")]
        to: Option<String>,
        #[command(flatten)]
        op: OpArgs,
    },
    /// Vouch that SITE is stopped, checked by hand, when no fence can show it. Recorded with
    /// the reason.
    ConfirmFenced {
        plan: String,
        site: String,
        /// The plan's generation as you saw it (qfence status).
        #[arg(long, value_name = "N")]
        generation: u64,
        /// How you know. Required.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Let SITE, an old owner a failover gave up (fenced since), rejoin as a replica of the
    /// owner: its rejoin bindings run (db.rejoin: pg_rewind, or a re-clone when that fails)
    /// and start it as a replica. Bring its host up first, with the database not started at
    /// boot. Refused unless SITE waits to rejoin and the plan is steady and not paused.
    Rejoin {
        plan: String,
        site: String,
        /// The plan's generation as you saw it (qfence status): refused if it changed since.
        #[arg(long, value_name = "N")]
        generation: u64,
        /// Why, for the event log.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Take SITE in (on) or out (off) of maintenance: while in, the plan is never failed or
    /// switched over to it, and its checks run and are shown but raise no alarm. Refused for
    /// the owner (switch over first) and the target of a move under way.
    Maintenance {
        plan: String,
        site: String,
        /// `on` to go into maintenance, `off` to come out.
        #[arg(value_enum)]
        state: OnOff,
        /// The plan's generation as you saw it (qfence status): refused if it changed since.
        #[arg(long, value_name = "N")]
        generation: u64,
        /// Why, for the event log.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Stop automatic actions on a plan.
    Pause(PauseArgs),
    /// Let automatic actions run again.
    Resume(PauseArgs),
}

/// What an ownership change takes.
#[derive(Debug, Args)]
pub struct OpArgs {
    /// The plan's generation as you saw it (qfence status): the change is refused if the
    /// plan changed since.
    #[arg(long, value_name = "N")]
    pub generation: u64,
    /// Why, for the event log.
    #[arg(long)]
    pub reason: Option<String>,
    /// Return once accepted, without following the steps.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to follow before giving up (the operation itself goes on).
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub timeout: f64,
    /// How often to ask for progress.
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS")]
    pub poll_seconds: f64,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// In or out of maintenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

// `qfence plan dry-run`'s flags, apart so that the command reads in one function (a plain
// comment: the variant's doc is the help text).
#[derive(Debug, Args)]
pub struct DryRunArgs {
    /// PLAN (online), or FILE PLAN (offline).
    #[arg(num_args = 1..=2, required = true, value_names = ["FILE_OR_PLAN", "PLAN"])]
    pub names: Vec<String>,
    /// The site to move to.
    #[arg(long = "to", value_name = "SITE")]
    pub to: Option<String>,
    /// Offline only: a reading to assume instead of success, as SITE[INDEX]=READING,
    /// e.g. `dc1[0]=unknown`. Repeatable.
    #[arg(long = "assume", value_name = "BINDING=READING")]
    pub assume: Vec<String>,
    /// A switchover to --to instead of a failover.
    #[arg(long, conflicts_with_all = ["staged", "failover"])]
    pub switchover: bool,
    /// Online: a failover (to --to, or by priority).
    #[arg(long, conflicts_with = "staged")]
    pub failover: bool,
    /// Online: applying the staged change.
    #[arg(long)]
    pub staged: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    pub plan: String,
    /// Why, for the event log.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Runs a `qfence plan` command; the offline forms go to [`crate::cmd::plan`].
pub fn run(cmd: PlanCmd, format: Format) -> anyhow::Result<ExitCode> {
    match cmd {
        PlanCmd::Show { mut names, api } => {
            if names.len() == 2 {
                let plan = names.pop().expect("two names");
                let file = PathBuf::from(names.pop().expect("two names"));
                return crate::cmd::plan::run(OfflinePlan::Show { file, plan }, format);
            }
            let plan = names.pop().expect("one name");
            Ok(super::run(format, "plan show", show(api, plan, format)))
        }
        PlanCmd::DryRun(a) => dry_run_command(a, format),
        PlanCmd::List { api } => Ok(super::run(format, "plan list", list(api, format))),
        PlanCmd::Switchover { plan, to, op } => Ok(super::run(
            format,
            "plan switchover",
            operate(plan, Some(to), op, false, format),
        )),
        PlanCmd::Failover { plan, to, op } => Ok(super::run(
            format,
            "plan failover",
            operate(plan, to, op, true, format),
        )),
        PlanCmd::ConfirmFenced {
            plan,
            site,
            generation,
            reason,
            api,
        } => {
            let req = ConfirmFencedRequest {
                expected_generation: generation,
                reason,
            };
            let path = format!(
                "/api/v1/plans/{}/sites/{}/confirm-fenced",
                seg(&plan),
                seg(&site)
            );
            Ok(super::run(
                format,
                "plan confirm-fenced",
                site_operation(api, path, req, false, format),
            ))
        }
        PlanCmd::Rejoin {
            plan,
            site,
            generation,
            reason,
            api,
        } => {
            let req = RejoinRequest {
                expected_generation: generation,
                reason,
            };
            let path = format!("/api/v1/plans/{}/sites/{}/rejoin", seg(&plan), seg(&site));
            Ok(super::run(
                format,
                "plan rejoin",
                site_operation(api, path, req, false, format),
            ))
        }
        PlanCmd::Maintenance {
            plan,
            site,
            state,
            generation,
            reason,
            api,
        } => {
            let req = MaintenanceRequest {
                enabled: state == OnOff::On,
                expected_generation: generation,
                reason,
            };
            let path = format!(
                "/api/v1/plans/{}/sites/{}/maintenance",
                seg(&plan),
                seg(&site)
            );
            Ok(super::run(
                format,
                "plan maintenance",
                site_operation(api, path, req, true, format),
            ))
        }
        PlanCmd::Pause(a) => Ok(super::run(format, "plan pause", pause(a, "pause", format))),
        PlanCmd::Resume(a) => Ok(super::run(
            format,
            "plan resume",
            pause(a, "resume", format),
        )),
    }
}

/// `plan dry-run`: offline with FILE PLAN (a failover, or a switchover with --switchover),
/// online with PLAN alone; the flags of one form are refused in the other.
fn dry_run_command(a: DryRunArgs, format: Format) -> anyhow::Result<ExitCode> {
    let DryRunArgs {
        mut names,
        to,
        assume,
        switchover,
        failover,
        staged,
        api,
    } = a;
    if names.len() == 2 {
        if failover || staged {
            eprintln!(
                "error: --failover and --staged are for the online form (plan dry-run \
                 PLAN); offline dry-runs work out a failover, or a switchover with \
                 --switchover"
            );
            return Ok(ExitCode::from(crate::cmd::EXIT_USAGE));
        }
        let Some(to) = to else {
            eprintln!("error: the offline form (plan dry-run FILE PLAN) needs --to SITE");
            return Ok(ExitCode::from(crate::cmd::EXIT_USAGE));
        };
        let plan = names.pop().expect("two names");
        let file = PathBuf::from(names.pop().expect("two names"));
        return crate::cmd::plan::run(
            OfflinePlan::DryRun {
                file,
                plan,
                to,
                assume,
                switchover,
            },
            format,
        );
    }
    let plan = names.pop().expect("one name");
    let what = if !assume.is_empty() {
        eprintln!("error: --assume is for the offline form (plan dry-run FILE PLAN)");
        return Ok(ExitCode::from(crate::cmd::EXIT_USAGE));
    } else if staged {
        DryRun::ApplyStaged
    } else if switchover {
        let Some(target) = to else {
            eprintln!("error: --switchover needs --to SITE");
            return Ok(ExitCode::from(crate::cmd::EXIT_USAGE));
        };
        DryRun::Switchover { target }
    } else if failover || to.is_some() {
        DryRun::Failover { target: to }
    } else {
        DryRun::Cycle
    };
    Ok(super::run(
        format,
        "plan dry-run",
        dry_run(api, plan, what, format),
    ))
}

/// An operation on one site of a plan (confirm fenced: POST; maintenance: PUT, it sets a
/// state), printed as accepted.
async fn site_operation(
    api: ApiArgs,
    path: String,
    req: impl serde::Serialize,
    put: bool,
    format: Format,
) -> Outcome {
    let api = Api::new(&api)?;
    let r: OperationAccepted = if put {
        api.put(&path, &req).await?
    } else {
        api.post(&path, &req).await?
    };
    accepted(&r, format);
    Ok(())
}

fn accepted(r: &OperationAccepted, format: Format) {
    if format == Format::Json {
        print_json(r);
    } else {
        println!(
            "{} {}: generation {}: {}",
            r.operation, r.plan, r.generation, r.reason
        );
    }
}

async fn pause(a: PauseArgs, what: &str, format: Format) -> Outcome {
    let api = Api::new(&a.api)?;
    let r: OperationAccepted = api
        .post(
            &format!("/api/v1/plans/{}/{what}", seg(&a.plan)),
            &PauseRequest { reason: a.reason },
        )
        .await?;
    accepted(&r, format);
    Ok(())
}

async fn list(api: ApiArgs, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let plans: Vec<PlanView> = api.get("/api/v1/plans").await?;
    let status: StatusResponse = api.get("/api/v1/status").await?;
    if format == Format::Json {
        print_json(&json!({"plans": plans, "status": status.plans}));
        return Ok(());
    }
    if plans.is_empty() {
        println!("no plans");
        return Ok(());
    }
    let mut t = table::new(&["PLAN", "OWNER", "PHASE", "GEN", "PAUSED", "STAGED"]);
    for p in &plans {
        let s = status.plans.iter().find(|s| s.plan == p.name);
        t.add_row(vec![
            p.name.clone(),
            s.map_or("-".into(), |s| s.owner.clone()),
            s.map_or("-".into(), |s| s.phase.clone()),
            p.generation.to_string(),
            if p.paused { "yes" } else { "no" }.to_owned(),
            p.staged.as_ref().map_or("-".into(), |st| {
                format!("by {} on generation {}", st.staged_by, st.base_generation)
            }),
        ]);
    }
    table::print(&t);
    Ok(())
}

async fn show(api: ApiArgs, plan: String, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let view: PlanView = api.get(&format!("/api/v1/plans/{}", seg(&plan))).await?;
    let status: StatusResponse = api.get("/api/v1/status").await?;
    let st = status.plans.into_iter().find(|s| s.plan == view.name);
    if format == Format::Json {
        print_json(&json!({"plan": view, "status": st}));
        return Ok(());
    }
    println!(
        "plan {}, generation {}{}, {}",
        view.name,
        view.generation,
        if view.paused { ", paused" } else { "" },
        match view.source {
            PlanSource::Api => "managed through the API",
            PlanSource::File => "from the configuration file (change it there)",
        }
    );
    if let Some(s) = &st {
        println!("owner {}, phase {}: {}", s.owner, s.phase, s.last_reason);
        let mut t = table::new(&["SITE", "ROLE", "VERDICT", "CHECKED", "MAINTENANCE"]);
        for site in &s.sites {
            t.add_row(vec![
                site.site.clone(),
                format!("{:?}", site.role).to_lowercase(),
                format!("{:?}", site.verdict).to_uppercase(),
                table::maybe(site.checked_at_ms),
                if site.maintenance { "yes" } else { "no" }.to_owned(),
            ]);
        }
        table::print(&t);
    }
    // As the configuration file writes it under `plans.NAME`.
    println!("spec:");
    let yaml = serde_saphyr::to_string(&view.spec)
        .unwrap_or_else(|_| serde_json::to_string_pretty(&view.spec).expect("serialises"));
    for line in yaml.lines() {
        println!("  {line}");
    }
    if let Some(staged) = &view.staged {
        println!(
            "staged by {} on generation {} ({} warning(s)); apply it with the console or the API",
            staged.staged_by,
            staged.base_generation,
            staged.warnings.len()
        );
    }
    Ok(())
}

async fn dry_run(api: ApiArgs, plan: String, what: DryRun, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let r: DryRunResult = api
        .post(&format!("/api/v1/plans/{}/dry-run", seg(&plan)), &what)
        .await?;
    if format == Format::Json {
        print_json(&r);
    } else {
        println!("plan {}, generation {}: {}", r.plan, r.generation, r.reason);
        if r.commands.is_empty() {
            println!("no commands");
        }
        for (i, c) in r.commands.iter().enumerate() {
            println!("{:>3}. {c}", i + 1);
        }
        if r.refused {
            println!("REFUSED: nothing would be done");
        }
    }
    if r.refused {
        return Err(Failure::Failed(format!(
            "it would be refused: {}",
            r.reason
        )));
    }
    Ok(())
}

async fn operate(
    plan: String,
    to: Option<String>,
    op: OpArgs,
    failover: bool,
    format: Format,
) -> Outcome {
    let api = Api::new(&op.api)?;
    let timeout = seconds(op.timeout, "--timeout")?;
    let poll = seconds(op.poll_seconds, "--poll-seconds")?;
    let before = progress::plan_status(&api, &plan).await?;
    let after_seq = progress::head(&api).await?;
    let path = format!(
        "/api/v1/plans/{}/{}",
        seg(&plan),
        if failover { "failover" } else { "switchover" }
    );
    let r: OperationAccepted = if failover {
        let req = FailoverRequest {
            target: to.clone(),
            expected_generation: op.generation,
            reason: op.reason,
        };
        api.post(&path, &req).await?
    } else {
        let req = SwitchoverRequest {
            target: to.clone().expect("a switchover names its target"),
            expected_generation: op.generation,
            reason: op.reason,
        };
        api.post(&path, &req).await?
    };
    if op.no_wait {
        accepted(&r, format);
        return Ok(());
    }
    if format == Format::Human {
        println!(
            "{}: owner {} [{}]",
            before.plan,
            before.owner,
            sites(&before)
        );
    }
    progress::follow(
        &api,
        Operation {
            plan,
            target: to,
            from: before.owner,
            after_seq,
            timeout,
            poll: poll.min(Duration::from_secs(10)),
        },
        &r,
        format,
    )
    .await
}
