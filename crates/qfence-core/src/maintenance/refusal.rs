//! Why a request is refused, typed, each with its sentence and a stable code for the API.
//! The preconditions of `prepare-maintenance` are checked here, and checked again before the
//! last step, since the cluster may have changed while the target drained.

use std::fmt;

use qfence_model::config::HostName;
use qfence_model::{ControllerId, OrchestratorId, Term};
use serde::Serialize;

use super::Mutation;
use super::snapshot::Snapshot;
use super::state::OrchestratorStatus;
use crate::types::Millis;

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "refusal", rename_all = "kebab-case")]
pub enum Refusal {
    /// Only the leader decides (the runtime forwards requests to it).
    NotLeader {
        term: Term,
    },
    LeaseExpired {
        term: Term,
        at: Millis,
    },
    UnknownOrchestrator {
        orchestrator: OrchestratorId,
    },
    /// Preparing needs the target `Up`.
    NotUp {
        orchestrator: OrchestratorId,
        status: OrchestratorStatus,
    },
    /// The target does not answer: it could never report itself read-only.
    NotAnswering {
        orchestrator: OrchestratorId,
    },
    /// Cancel needs the target preparing or in maintenance.
    NotInMaintenance {
        orchestrator: OrchestratorId,
    },
    /// No other orchestrator is `Up` to take its agents and sessions.
    NoOtherUp {
        orchestrator: OrchestratorId,
    },
    /// One preparation at a time.
    AnotherPreparing {
        preparing: OrchestratorId,
    },
    /// These controllers would have no `Up` orchestrator allowed to call them.
    ControllersWithoutCaller {
        orchestrator: OrchestratorId,
        controllers: Vec<ControllerId>,
    },
    /// These agents would have no `Up` orchestrator they may connect to.
    AgentsWithoutTarget {
        orchestrator: OrchestratorId,
        agents: Vec<HostName>,
    },
    /// Without it, too few voters able to renew the owners' dead-man switches are left for a
    /// quorum: a leader could not keep them alive, and they would fire.
    NoDeadManQuorum {
        orchestrator: OrchestratorId,
        able: Vec<OrchestratorId>,
        needed: usize,
        voters: usize,
    },
}

impl Refusal {
    /// The stable, machine-readable code (the API's `code`).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotLeader { .. } => "not_leader",
            Refusal::LeaseExpired { .. } => "lease_expired",
            Refusal::UnknownOrchestrator { .. } => "unknown_orchestrator",
            Refusal::NotUp { .. } => "orchestrator_not_up",
            Refusal::NotAnswering { .. } => "orchestrator_not_answering",
            Refusal::NotInMaintenance { .. } => "orchestrator_not_in_maintenance",
            Refusal::NoOtherUp { .. } => "no_other_orchestrator_up",
            Refusal::AnotherPreparing { .. } => "another_orchestrator_preparing",
            Refusal::ControllersWithoutCaller { .. } => "controllers_without_caller",
            Refusal::AgentsWithoutTarget { .. } => "agents_without_target",
            Refusal::NoDeadManQuorum { .. } => "dead_man_quorum_lost",
        }
    }
}

fn list<T: fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotLeader { term } => {
                write!(f, "refused: this orchestrator does not lead (term {term})")
            }
            Refusal::LeaseExpired { term, at } => write!(
                f,
                "refused: the leader's lease of term {term} ran out at {at}"
            ),
            Refusal::UnknownOrchestrator { orchestrator } => {
                write!(
                    f,
                    "refused: {orchestrator} is not an orchestrator of this cluster"
                )
            }
            Refusal::NotUp {
                orchestrator,
                status,
            } => write!(
                f,
                "refused: {orchestrator} is {status}, and only an Up orchestrator can prepare \
                 for maintenance"
            ),
            Refusal::NotAnswering { orchestrator } => write!(
                f,
                "refused: {orchestrator} does not answer, so it could never report itself \
                 read-only; it needs no maintenance mode to be restarted"
            ),
            Refusal::NotInMaintenance { orchestrator } => write!(
                f,
                "refused: {orchestrator} is Up, neither preparing for maintenance nor in it"
            ),
            Refusal::NoOtherUp { orchestrator } => write!(
                f,
                "refused: no orchestrator but {orchestrator} is Up to take its agents and \
                 controller sessions"
            ),
            Refusal::AnotherPreparing { preparing } => write!(
                f,
                "refused: {preparing} is already preparing for maintenance; one at a time"
            ),
            Refusal::ControllersWithoutCaller {
                orchestrator,
                controllers,
            } => write!(
                f,
                "refused: without {orchestrator}, no Up orchestrator would be allowed to call \
                 {} (its site and reach)",
                list(controllers)
            ),
            Refusal::AgentsWithoutTarget {
                orchestrator,
                agents,
            } => write!(
                f,
                "refused: without {orchestrator}, no Up orchestrator would be allowed for agents \
                 {}",
                list(agents)
            ),
            Refusal::NoDeadManQuorum {
                orchestrator,
                able,
                needed,
                voters,
            } => write!(
                f,
                "refused: without {orchestrator}, {} of {voters} voters could renew the \
                 dead-man switches ({}), and a quorum needs {needed}",
                able.len(),
                if able.is_empty() {
                    "none".to_owned()
                } else {
                    list(able)
                }
            ),
        }
    }
}

/// Whether `target` may leave now: every other orchestrator, agent and controller can do
/// without it. The first failed condition, in the order the issue lists them.
pub(crate) fn may_leave(
    s: &Snapshot<'_>,
    target: &OrchestratorId,
    mutation: Mutation,
) -> Result<(), Refusal> {
    let orchestrator = target.clone();
    if !s
        .orchestrators
        .keys()
        .any(|o| o != target && s.takes_work(o))
    {
        return Err(Refusal::NoOtherUp { orchestrator });
    }
    let controllers: Vec<ControllerId> = s
        .controllers
        .iter()
        .filter(|(_, c)| s.callers(c, target).is_empty())
        .map(|(id, _)| id.clone())
        .collect();
    if !controllers.is_empty() && mutation != Mutation::OrphanCheckSkipped {
        return Err(Refusal::ControllersWithoutCaller {
            orchestrator,
            controllers,
        });
    }
    let agents: Vec<HostName> = s
        .agents
        .iter()
        .filter(|(_, a)| {
            (a.allowed.contains(target) || a.connected.as_ref() == Some(target))
                && s.candidates(a, target).is_empty()
        })
        .map(|(h, _)| h.clone())
        .collect();
    if !agents.is_empty() {
        return Err(Refusal::AgentsWithoutTarget {
            orchestrator,
            agents,
        });
    }
    let voters = s.orchestrators.values().filter(|v| v.voter).count();
    let needed = voters / 2 + 1;
    let able: Vec<OrchestratorId> = s
        .orchestrators
        .iter()
        .filter(|(o, v)| *o != target && v.voter && v.renews && s.up(o))
        .map(|(o, _)| o.clone())
        .collect();
    if able.len() < needed {
        return Err(Refusal::NoDeadManQuorum {
            orchestrator,
            able,
            needed,
            voters,
        });
    }
    Ok(())
}
