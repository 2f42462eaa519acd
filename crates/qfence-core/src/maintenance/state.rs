//! The replicated maintenance state: each orchestrator's status, and the one operation under
//! way (a preparation, or the rebalance a cancel asked for) with how far it got.
//!
//! It is written only through [`MaintenanceStateChange`], a compare-and-set on the revision, so
//! a deposed leader's late write is refused, and a new leader (or the preparing orchestrator
//! restarted) continues the operation where the record says, or rolls it back once its
//! deadline has passed.

use std::collections::BTreeMap;
use std::fmt;

use qfence_model::config::HostName;
use qfence_model::{ControllerId, OrchestratorId, Term};
use serde::{Deserialize, Serialize};

use super::spread::AgentAlgorithm;
use crate::error::CoreError;
use crate::types::Millis;

/// The stored form: versioned, so a newer qfence can read an older leader's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "v")]
pub enum StoredMaintenanceState {
    #[serde(rename = "1")]
    V1(MaintenanceState),
}

impl StoredMaintenanceState {
    /// The state, whatever version it was stored as.
    pub fn into_current(self) -> MaintenanceState {
        match self {
            StoredMaintenanceState::V1(s) => s,
        }
    }
}

impl From<MaintenanceState> for StoredMaintenanceState {
    fn from(s: MaintenanceState) -> Self {
        StoredMaintenanceState::V1(s)
    }
}

/// An orchestrator's maintenance status (CloudStack's management-server states).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrchestratorStatus {
    /// Serving: it takes jobs, agents and controller sessions.
    #[default]
    Up,
    /// Read-only, draining its jobs, handing over what it holds.
    PreparingForMaintenance,
    /// Holds nothing: an operator may upgrade or restart it.
    Maintenance,
}

impl OrchestratorStatus {
    /// The status's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            OrchestratorStatus::Up => "Up",
            OrchestratorStatus::PreparingForMaintenance => "PreparingForMaintenance",
            OrchestratorStatus::Maintenance => "Maintenance",
        }
    }
}

impl fmt::Display for OrchestratorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The orchestrators' replicated maintenance state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceState {
    /// Grows by one with every write: the compare-and-set's revision.
    pub revision: u64,
    /// Each orchestrator's status; one not listed is `Up`.
    pub status: BTreeMap<OrchestratorId, OrchestratorStatus>,
    /// The operation under way, if any: at most one at a time.
    pub operation: Option<Operation>,
}

impl MaintenanceState {
    /// An orchestrator's status (`Up` when not listed).
    pub fn status_of(&self, o: &OrchestratorId) -> OrchestratorStatus {
        self.status.get(o).copied().unwrap_or_default()
    }

    /// Sets a status, keeping `Up` implicit so equal states compare equal.
    pub(crate) fn set_status(&mut self, o: &OrchestratorId, st: OrchestratorStatus) {
        if st == OrchestratorStatus::Up {
            self.status.remove(o);
        } else {
            self.status.insert(o.clone(), st);
        }
    }

    /// The orchestrators with a status, in name order.
    pub fn with_status(&self, st: OrchestratorStatus) -> Vec<OrchestratorId> {
        self.status
            .iter()
            .filter(|(_, s)| **s == st)
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// Applies a change if it was decided on this very state. This is the compare-and-set the
    /// cluster runs; a deposed leader's change is refused.
    pub fn apply(&self, change: &MaintenanceStateChange) -> Result<MaintenanceState, CoreError> {
        if change.expect_revision != self.revision {
            return Err(CoreError::StaleMaintenance {
                expected: change.expect_revision,
                revision: self.revision,
            });
        }
        Ok(change.next.clone())
    }
}

/// A compare-and-set of the maintenance state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceStateChange {
    pub expect_revision: u64,
    /// The whole next state (its revision is `expect_revision + 1`).
    pub next: MaintenanceState,
}

/// The one operation under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "kebab-case")]
pub enum Operation {
    Prepare(Preparation),
    Rebalance(Rebalance),
}

/// Where a preparation is: each step waits for the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Read-only, waiting for its pending jobs to finish.
    DrainingJobs,
    /// It leads: handing the leadership over.
    HandingOver,
    /// Sending its agents the migrate message, a bounded number a second.
    MigratingAgents,
    /// Moving its controller sessions.
    MovingSessions,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::DrainingJobs => "draining jobs",
            Step::HandingOver => "handing over the leadership",
            Step::MigratingAgents => "migrating agents",
            Step::MovingSessions => "moving controller sessions",
        }
    }
}

/// A message sent (a migrate message, a session move, a handover), to whom and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub to: OrchestratorId,
    pub at: Millis,
    /// How many times it was sent (resent after `Settings::retry` without effect).
    pub attempts: u32,
}

/// `prepare-maintenance`: one orchestrator on its way to `Maintenance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preparation {
    pub target: OrchestratorId,
    /// The agents' spreading algorithm for this operation.
    pub algorithm: AgentAlgorithm,
    pub started: Millis,
    /// Not in `Maintenance` by then: cancelled and rolled back (`maintenance_timeout`).
    pub deadline: Millis,
    /// The term of the leader that last drove it: a new one announces it resumes.
    pub term: Term,
    pub step: Step,
    /// The leadership handover asked for, if the target led.
    pub handover: Option<Sent>,
    /// Migrate messages sent, by agent. Receivers accept these agents as transferred (no
    /// fresh enrolment or inventory): the seed's transfer flag.
    pub migrations: BTreeMap<HostName, Sent>,
    /// Controller sessions asked to move, by controller.
    pub sessions: BTreeMap<ControllerId, Sent>,
}

/// `cancel-maintenance --rebalance`: agents moved back onto an orchestrator returned to `Up`
/// until it holds its share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebalance {
    pub onto: OrchestratorId,
    pub algorithm: AgentAlgorithm,
    pub started: Millis,
    pub deadline: Millis,
    /// The agents chosen to come back, and where each was.
    pub agents: BTreeMap<HostName, OrchestratorId>,
    pub migrations: BTreeMap<HostName, Sent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_decided_on_an_older_revision_is_refused() {
        let s = MaintenanceState {
            revision: 4,
            ..MaintenanceState::default()
        };
        let stale = MaintenanceStateChange {
            expect_revision: 3,
            next: MaintenanceState::default(),
        };
        assert_eq!(
            s.apply(&stale),
            Err(CoreError::StaleMaintenance {
                expected: 3,
                revision: 4
            })
        );
    }

    #[test]
    fn up_is_implicit_so_a_cancelled_state_equals_the_first() {
        let o = OrchestratorId::new("o1").unwrap();
        let mut s = MaintenanceState::default();
        s.set_status(&o, OrchestratorStatus::PreparingForMaintenance);
        assert_eq!(s.status_of(&o), OrchestratorStatus::PreparingForMaintenance);
        s.set_status(&o, OrchestratorStatus::Up);
        assert_eq!(s, MaintenanceState::default());
    }
}
