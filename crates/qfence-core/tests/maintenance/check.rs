//! The named invariants of maintenance, checked after every decision against what the leader
//! saw, what it decided, and the state it wrote.

use qfence_core::maintenance::{Action, Decision, MaintenanceState, OrchestratorStatus, Snapshot};
use qfence_model::OrchestratorId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// Every controller keeps an `Up` orchestrator allowed to call it.
    ControllerHasUpCaller,
    /// Every agent keeps an `Up` orchestrator it may connect to, and every migrate message
    /// points it at an `Up` one it does not avoid.
    AgentHasTarget,
    /// Never two orchestrators preparing.
    OnePreparing,
    /// The leadership is handed over before `Maintenance`.
    HandoverBeforeMaintenance,
    /// No job cut: nothing moves and no `Maintenance` while the target has jobs.
    NoJobCut,
    /// Read-only throughout: going to `PreparingForMaintenance` goes read-only, and nothing
    /// moves off a preparing orchestrator that does not report read-only.
    ReadOnlyThroughout,
}

impl Invariant {
    pub const ALL: [Invariant; 6] = [
        Invariant::ControllerHasUpCaller,
        Invariant::AgentHasTarget,
        Invariant::OnePreparing,
        Invariant::HandoverBeforeMaintenance,
        Invariant::NoJobCut,
        Invariant::ReadOnlyThroughout,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::ControllerHasUpCaller => "controller-has-up-caller",
            Invariant::AgentHasTarget => "agent-has-target",
            Invariant::OnePreparing => "one-preparing",
            Invariant::HandoverBeforeMaintenance => "handover-before-maintenance",
            Invariant::NoJobCut => "no-job-cut",
            Invariant::ReadOnlyThroughout => "read-only-throughout",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: Invariant,
    pub seed: u64,
    pub step: usize,
    pub detail: String,
    pub trace: Vec<String>,
}

/// Who moves something off an orchestrator, in a command.
fn moved_from(a: &Action) -> Option<&OrchestratorId> {
    match a {
        Action::HandOverLeadership { from, .. }
        | Action::MigrateAgent { from, .. }
        | Action::MoveSession { from, .. } => Some(from),
        _ => None,
    }
}

/// Checks one invariant of one decision: `s` is what the leader saw, `after` the state it
/// wrote (the state before when nothing was written).
pub fn check(
    inv: Invariant,
    s: &Snapshot<'_>,
    d: &Decision,
    after: &MaintenanceState,
) -> Result<(), String> {
    let before = s.state;
    let is_up = |o: &OrchestratorId| {
        after.status_of(o) == OrchestratorStatus::Up
            && s.orchestrators.get(o).is_some_and(|v| !v.witness)
    };
    let entered: Vec<&OrchestratorId> = s
        .orchestrators
        .keys()
        .filter(|o| {
            after.status_of(o) == OrchestratorStatus::Maintenance
                && before.status_of(o) != OrchestratorStatus::Maintenance
        })
        .collect();
    let preparing = |o: &OrchestratorId| {
        before.status_of(o) == OrchestratorStatus::PreparingForMaintenance
            || after.status_of(o) == OrchestratorStatus::PreparingForMaintenance
    };
    match inv {
        Invariant::ControllerHasUpCaller => {
            for (c, ctl) in s.controllers {
                let ok = s
                    .orchestrators
                    .iter()
                    .any(|(o, v)| ctl.sites.contains(&v.site) && is_up(o));
                if !ok {
                    return Err(format!("controller {c} has no Up orchestrator to call it"));
                }
            }
        }
        Invariant::AgentHasTarget => {
            for (h, a) in s.agents {
                if !a.allowed.iter().any(is_up) {
                    return Err(format!("agent {h} has no Up orchestrator allowed"));
                }
            }
            for cmd in &d.commands {
                if let Action::MigrateAgent {
                    agent, to, avoid, ..
                } = &cmd.action
                {
                    match to.first() {
                        None => return Err(format!("{agent} told to go nowhere")),
                        Some(t) if !is_up(t) || avoid.contains(t) => {
                            return Err(format!("{agent} told to go to {t}: {cmd}"));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Invariant::OnePreparing => {
            let n = after
                .with_status(OrchestratorStatus::PreparingForMaintenance)
                .len();
            if n > 1 {
                return Err(format!("{n} orchestrators preparing: {:?}", after.status));
            }
        }
        Invariant::HandoverBeforeMaintenance => {
            if let Some(o) = entered.iter().find(|o| ***o == s.me) {
                return Err(format!("{o} entered maintenance while it led"));
            }
        }
        Invariant::NoJobCut => {
            if let Some(o) = entered.iter().find(|o| !s.jobs_of(o).is_empty()) {
                return Err(format!(
                    "{o} entered maintenance with jobs {:?}",
                    s.jobs_of(o)
                ));
            }
            for cmd in &d.commands {
                if let Some(from) = moved_from(&cmd.action)
                    && preparing(from)
                    && !s.jobs_of(from).is_empty()
                {
                    return Err(format!("{cmd} while {from} has jobs {:?}", s.jobs_of(from)));
                }
            }
        }
        Invariant::ReadOnlyThroughout => {
            for o in s.orchestrators.keys() {
                let starts = before.status_of(o) == OrchestratorStatus::Up
                    && after.status_of(o) == OrchestratorStatus::PreparingForMaintenance;
                let asked = d.commands.iter().any(|c| {
                    matches!(&c.action, Action::GoReadOnly { orchestrator } if orchestrator == o)
                });
                if starts && !asked && !s.read_only.contains(o) {
                    return Err(format!("{o} started preparing without going read-only"));
                }
            }
            for o in &entered {
                if !s.read_only.contains(*o) {
                    return Err(format!("{o} entered maintenance not read-only"));
                }
            }
            for cmd in &d.commands {
                if let Some(from) = moved_from(&cmd.action)
                    && preparing(from)
                    && !s.read_only.contains(from)
                {
                    return Err(format!("{cmd} while {from} is not read-only"));
                }
            }
        }
    }
    Ok(())
}
