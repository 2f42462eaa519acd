//! Live progress of a long operation (a switchover, a failover): after the API accepted it,
//! print each new step the orchestrator records for the plan, with its time, until the plan
//! is steady at the new owner (done), the operation stops (failed), or the time runs out.
//!
//! Steps are the plan's event-log records after the one that was last before the request;
//! the end is read from `/api/v1/status`: phase `steady` with the new owner is done; phase
//! `failed`, a halted step (`halted` set: it waits for an operator), or `steady` with another owner at a newer generation than the accepted one
//! (something else moved the plan), is failure.

use std::time::Duration;

use qfence_model::time::monotonic_now;
use qfence_runtime::dto::{OperationAccepted, PlanStatus, StatusResponse};
use qfence_runtime::events::{Event, EventPage};
use serde_json::json;

use super::http::{Api, seg};
use super::{Failure, Outcome, table};
use crate::cmd::Format;

/// The event log's last seq now: steps are what comes after it.
pub async fn head(api: &Api) -> Result<u64, Failure> {
    let page: EventPage = api.get("/api/v1/events?limit=1").await?;
    Ok(page.head_seq)
}

/// A plan's status now.
pub async fn plan_status(api: &Api, plan: &str) -> Result<PlanStatus, Failure> {
    let s: StatusResponse = api.get("/api/v1/status").await?;
    s.plans
        .into_iter()
        .find(|p| p.plan == plan)
        .ok_or_else(|| Failure::Failed(format!("plan {plan:?} is not in the status any more")))
}

/// What to follow.
#[derive(Debug)]
pub struct Operation {
    pub plan: String,
    /// The site asked for; `None` for a failover by priority (any other site then counts).
    pub target: Option<String>,
    /// The owner before the request.
    pub from: String,
    /// The log's head before the request.
    pub after_seq: u64,
    pub timeout: Duration,
    pub poll: Duration,
}

/// Prints the acceptance, then the steps, and decides the outcome.
pub async fn follow(
    api: &Api,
    op: Operation,
    accepted: &OperationAccepted,
    format: Format,
) -> Outcome {
    let json_mode = format == Format::Json;
    if json_mode {
        println!("{}", json!({"accepted": accepted}));
    } else {
        println!(
            "{} {} of {} accepted at generation {}: {}",
            table::clock(table::now_ms()),
            accepted.operation,
            accepted.plan,
            accepted.generation,
            accepted.reason
        );
    }
    let deadline = monotonic_now() + op.timeout;
    let mut after = op.after_seq;
    let mut last_phase: Option<String> = None;
    let mut last_step = String::new();
    let mut down = false;
    loop {
        // The status first, then the steps: every step up to that status is then printed
        // before its phase (a step is recorded with the phase it moves to).
        let polled = async {
            let p = plan_status(api, &op.plan).await?;
            let (seq, step) = print_steps(api, &op.plan, after, json_mode).await?;
            after = seq;
            if let Some(step) = step {
                last_step = step;
            }
            Ok::<_, Failure>(p)
        }
        .await;
        let p = match polled {
            Ok(p) => p,
            // The API may move or restart during the operation: keep asking until the
            // deadline.
            Err(e) => {
                let Some(why) = e.transient() else {
                    return Err(e);
                };
                if !down {
                    eprintln!("{} {why}", table::clock(table::now_ms()));
                    down = true;
                }
                if monotonic_now() >= deadline {
                    return Err(timed_out(&op));
                }
                tokio::time::sleep(op.poll).await;
                continue;
            }
        };
        down = false;
        if !json_mode && last_phase.as_deref() != Some(p.phase.as_str()) {
            // The reason, unless the step just printed said it already.
            let reason = if p.last_reason == last_step {
                String::new()
            } else {
                format!(": {}", p.last_reason)
            };
            println!(
                "{} phase {}{reason}",
                table::clock(table::now_ms()),
                p.phase
            );
        }
        last_phase = Some(p.phase.clone());
        match judge(&op, accepted.generation, &p) {
            Stage::Done => {
                if json_mode {
                    println!("{}", json!({"outcome": "done", "plan": p}));
                } else {
                    println!(
                        "done: {} owns {} (generation {})",
                        p.owner, p.plan, p.generation
                    );
                }
                return Ok(());
            }
            Stage::Failed => {
                if json_mode {
                    println!("{}", json!({"outcome": "failed", "plan": p}));
                }
                return Err(Failure::Failed(format!(
                    "{} of {} failed: {} (phase {}, owner {}, generation {})",
                    accepted.operation, p.plan, p.last_reason, p.phase, p.owner, p.generation
                )));
            }
            Stage::Running => {}
        }
        if monotonic_now() >= deadline {
            if json_mode {
                println!("{}", json!({"outcome": "timeout", "plan": p}));
            }
            return Err(timed_out(&op));
        }
        tokio::time::sleep(op.poll).await;
    }
}

/// Where an accepted operation stands, from the plan's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Steady at the new owner.
    Done,
    /// Stopped: phase `failed`, a halted step, or steady at another owner with a newer
    /// generation than the accepted one (something else moved the plan).
    Failed,
    /// Not there yet, or not begun (a steady plan at the accepted generation or an older one,
    /// as a lagging follower may still show, is waiting to be picked up).
    Running,
}

/// Decides the stage; pure, so the rules are tested without an API.
pub fn judge(op: &Operation, accepted_generation: u64, p: &PlanStatus) -> Stage {
    let at_target = match &op.target {
        Some(t) => &p.owner == t,
        None => p.owner != op.from,
    };
    if p.phase == "steady" && at_target {
        Stage::Done
    } else if p.phase == "failed"
        || p.halted.is_some()
        || (p.phase == "steady" && p.generation > accepted_generation)
    {
        Stage::Failed
    } else {
        Stage::Running
    }
}

fn timed_out(op: &Operation) -> Failure {
    Failure::Failed(format!(
        "no end after {:.0?}: the operation may still be running; watch it with `qfence status \
         --watch` or `qfence events --plan {} --follow`",
        op.timeout, op.plan
    ))
}

/// Prints the plan's records after `after`, page by page; returns the last seq printed and
/// the last message.
pub async fn print_steps(
    api: &Api,
    plan: &str,
    mut after: u64,
    json_mode: bool,
) -> Result<(u64, Option<String>), Failure> {
    let mut last = None;
    loop {
        let page: EventPage = api
            .get(&format!(
                "/api/v1/events?plan={}&after={after}&limit=1000",
                seg(plan)
            ))
            .await?;
        for e in &page.events {
            print_step(e, json_mode);
            after = after.max(e.seq);
            last = Some(e.message.clone());
        }
        match page.next_after {
            Some(n) if !page.events.is_empty() => after = after.max(n),
            _ => return Ok((after, last)),
        }
    }
}

fn print_step(e: &Event, json_mode: bool) {
    if json_mode {
        println!("{}", json!({"step": e}));
    } else {
        let site = e
            .site
            .as_deref()
            .map(|s| format!(" [{s}]"))
            .unwrap_or_default();
        println!(
            "{} {}{site}: {}",
            table::clock(e.time_ms),
            e.kind.as_str(),
            e.message
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(target: Option<&str>) -> Operation {
        Operation {
            plan: "erp-db".into(),
            target: target.map(str::to_owned),
            from: "dc1".into(),
            after_seq: 0,
            timeout: Duration::from_secs(1),
            poll: Duration::from_millis(100),
        }
    }

    fn plan(owner: &str, phase: &str, generation: u64) -> PlanStatus {
        PlanStatus {
            plan: "erp-db".into(),
            owner: owner.into(),
            generation,
            paused: false,
            phase: phase.into(),
            halted: None,
            last_reason: String::new(),
            sites: Vec::new(),
            unworkable: Vec::new(),
        }
    }

    #[test]
    fn done_only_when_steady_at_the_target() {
        let to_dc2 = op(Some("dc2"));
        assert_eq!(judge(&to_dc2, 2, &plan("dc2", "steady", 2)), Stage::Done);
        assert_eq!(judge(&to_dc2, 2, &plan("dc2", "steady", 3)), Stage::Done);
        // Owner moved but the last step is still running.
        assert_eq!(
            judge(&to_dc2, 2, &plan("dc2", "moving_service", 2)),
            Stage::Running
        );
        // A failover by priority: any site but the old owner.
        assert_eq!(judge(&op(None), 2, &plan("dc3", "steady", 2)), Stage::Done);
        assert_eq!(
            judge(&op(None), 2, &plan("dc1", "fencing", 2)),
            Stage::Running
        );
    }

    #[test]
    fn not_yet_picked_up_is_running_even_on_a_lagging_follower() {
        let to_dc2 = op(Some("dc2"));
        assert_eq!(judge(&to_dc2, 2, &plan("dc1", "steady", 2)), Stage::Running);
        assert_eq!(judge(&to_dc2, 2, &plan("dc1", "steady", 1)), Stage::Running);
    }

    #[test]
    fn failed_phase_or_moved_elsewhere_is_failure() {
        let to_dc2 = op(Some("dc2"));
        assert_eq!(judge(&to_dc2, 2, &plan("dc1", "failed", 2)), Stage::Failed);
        // The runtime halts a step once its retries are spent; it waits for an operator.
        let mut halted = plan("dc1", "verify to dc2 halted: dc1 not fenced", 1);
        assert_eq!(
            judge(&to_dc2, 1, &halted),
            Stage::Running,
            "the phase text is not read"
        );
        halted.halted = Some("dc1 not fenced; 3 attempts made".into());
        assert_eq!(judge(&to_dc2, 1, &halted), Stage::Failed);
        assert_eq!(judge(&to_dc2, 2, &plan("dc1", "steady", 3)), Stage::Failed);
        assert_eq!(judge(&to_dc2, 2, &plan("dc3", "steady", 3)), Stage::Failed);
    }
}
