//! What `qfence orchestrator list` and the console's orchestrators page show, computed from
//! the same snapshot the decisions read: each orchestrator's status, pending jobs, connected
//! agents and sessions, and a preparation's live progress.

use qfence_model::OrchestratorId;
use serde::Serialize;

use super::snapshot::Snapshot;
use super::state::{Operation, OrchestratorStatus, Step};
use crate::types::Millis;

/// One orchestrator's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub orchestrator: OrchestratorId,
    pub status: OrchestratorStatus,
    /// It answers the leader.
    pub alive: bool,
    pub leader: bool,
    pub read_only: bool,
    pub jobs: usize,
    pub agents: usize,
    pub sessions: usize,
}

/// A preparation under way, for a progress bar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Progress {
    pub orchestrator: OrchestratorId,
    pub step: Step,
    pub jobs: usize,
    /// Agents moved off it since it started, of those it had then or since.
    pub agents_moved: usize,
    pub agents_left: usize,
    pub sessions_left: usize,
    pub deadline: Millis,
}

/// Every orchestrator's line, in name order.
pub fn rows(s: &Snapshot<'_>) -> Vec<Row> {
    s.orchestrators
        .iter()
        .map(|(o, v)| Row {
            orchestrator: o.clone(),
            status: s.state.status_of(o),
            alive: v.alive,
            leader: &s.me == o,
            read_only: s.read_only.contains(o),
            jobs: s.jobs_of(o).len(),
            agents: s.agents_on(o).len(),
            sessions: s.sessions_on(o).len(),
        })
        .collect()
}

/// The preparation under way, if any.
pub fn progress(s: &Snapshot<'_>) -> Option<Progress> {
    let Some(Operation::Prepare(p)) = &s.state.operation else {
        return None;
    };
    let left = s.agents_on(&p.target);
    let moved = p.migrations.keys().filter(|h| !left.contains(h)).count();
    Some(Progress {
        orchestrator: p.target.clone(),
        step: p.step,
        jobs: s.jobs_of(&p.target).len(),
        agents_moved: moved,
        agents_left: left.len(),
        sessions_left: s.sessions_on(&p.target).len(),
        deadline: p.deadline,
    })
}
