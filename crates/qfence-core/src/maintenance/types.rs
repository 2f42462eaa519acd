//! What a maintenance decision asks the runtime to do: a closed list of typed commands.
//! `docs/specs/maintenance.md` says what the runtime must do with each.

use std::fmt;

use qfence_model::config::HostName;
use qfence_model::{ControllerId, OrchestratorId, Term};
use serde::Serialize;

use super::snapshot::Job;
use super::spread::AgentAlgorithm;
use super::state::Step;
use crate::types::OpId;

/// What was still pending when a preparation was rolled back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Pending {
    pub jobs: Vec<Job>,
    /// The target still led.
    pub leadership: bool,
    pub agents: Vec<HostName>,
    pub sessions: Vec<ControllerId>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && !self.leadership
            && self.agents.is_empty()
            && self.sessions.is_empty()
    }
}

/// At most this many names of a kind in a sentence; the count says the rest.
const NAMED: usize = 5;

fn names<T: fmt::Display>(f: &mut fmt::Formatter<'_>, what: &str, v: &[T]) -> fmt::Result {
    let shown: Vec<String> = v.iter().take(NAMED).map(ToString::to_string).collect();
    let more = if v.len() > NAMED {
        format!(" and {} more", v.len() - NAMED)
    } else {
        String::new()
    };
    write!(f, "{} {what} ({}{more})", v.len(), shown.join(", "))
}

impl fmt::Display for Pending {
    /// `2 jobs (failover erp-db, fence compute-3), the leadership, 40 agents (h1, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing");
        }
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let r = if first { Ok(()) } else { f.write_str(", ") };
            first = false;
            r
        };
        if !self.jobs.is_empty() {
            sep(f)?;
            names(f, "jobs", &self.jobs)?;
        }
        if self.leadership {
            sep(f)?;
            f.write_str("the leadership")?;
        }
        if !self.agents.is_empty() {
            sep(f)?;
            names(f, "agents", &self.agents)?;
        }
        if !self.sessions.is_empty() {
            sep(f)?;
            names(f, "controller sessions", &self.sessions)?;
        }
        Ok(())
    }
}

/// What an event says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    PreparationStarted {
        orchestrator: OrchestratorId,
        algorithm: AgentAlgorithm,
    },
    /// A leader of a newer term took over a preparation half done.
    Resumed {
        orchestrator: OrchestratorId,
        step: Step,
        term: Term,
    },
    EnteredMaintenance {
        orchestrator: OrchestratorId,
    },
    /// An operator cancelled: back to `Up`.
    Cancelled {
        orchestrator: OrchestratorId,
        rebalance: bool,
        pending: Pending,
    },
    /// `maintenance_timeout` passed: cancelled and rolled back, with what was still pending.
    TimedOut {
        orchestrator: OrchestratorId,
        pending: Pending,
    },
    Rebalanced {
        orchestrator: OrchestratorId,
        agents: usize,
    },
    /// The rebalance's time ran out with agents not back.
    RebalanceIncomplete {
        orchestrator: OrchestratorId,
        agents: Vec<HostName>,
    },
}

/// What a command asks the runtime to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Take no new jobs: writes answer 503 `orchestrator_read_only`, `/health` answers 503 so
    /// load balancers drain it, new agent connections are refused. Idempotent.
    GoReadOnly { orchestrator: OrchestratorId },
    /// Take jobs and connections again. Idempotent.
    EndReadOnly { orchestrator: OrchestratorId },
    /// Transfer the cluster's leadership to `to`.
    HandOverLeadership {
        from: OrchestratorId,
        to: OrchestratorId,
    },
    /// Send the agent the migrate message: connect to the first of `to` (falling back down
    /// the list), never to one of `avoid`, as a transferred agent.
    MigrateAgent {
        agent: HostName,
        from: OrchestratorId,
        to: Vec<OrchestratorId>,
        avoid: Vec<OrchestratorId>,
        algorithm: AgentAlgorithm,
    },
    /// Move the controller's session and periodic checks from one orchestrator to another.
    MoveSession {
        controller: ControllerId,
        from: OrchestratorId,
        to: OrchestratorId,
    },
    /// Record an event.
    Event { event: Event },
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::GoReadOnly { .. } => "go-read-only",
            Action::EndReadOnly { .. } => "end-read-only",
            Action::HandOverLeadership { .. } => "hand-over-leadership",
            Action::MigrateAgent { .. } => "migrate-agent",
            Action::MoveSession { .. } => "move-session",
            Action::Event { .. } => "event",
        }
    }
}

/// One command, decided in which term: an executor refuses it when it knows a newer one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command {
    pub op: OpId,
    pub term: Term,
    pub action: Action,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.action.name())?;
        match &self.action {
            Action::GoReadOnly { orchestrator } | Action::EndReadOnly { orchestrator } => {
                write!(f, "{orchestrator}")?;
            }
            Action::HandOverLeadership { from, to } => write!(f, "{from} -> {to}")?,
            Action::MigrateAgent {
                agent,
                from,
                to,
                avoid,
                algorithm,
            } => {
                let to: Vec<&str> = to.iter().map(OrchestratorId::as_str).collect();
                let avoid: Vec<&str> = avoid.iter().map(OrchestratorId::as_str).collect();
                write!(
                    f,
                    "{agent} from {from} to [{}] avoiding [{}] ({algorithm})",
                    to.join(", "),
                    avoid.join(", ")
                )?;
            }
            Action::MoveSession {
                controller,
                from,
                to,
            } => write!(f, "{controller} {from} -> {to}")?,
            Action::Event { event } => write!(f, "{event:?}")?,
        }
        write!(f, " (t{})", self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maintenance::snapshot::JobKind;

    #[test]
    fn pending_items_are_named_up_to_five_of_each() {
        let p = Pending {
            jobs: vec![Job {
                kind: JobKind::Failover,
                subject: "erp-db".into(),
            }],
            leadership: true,
            agents: (0..7)
                .map(|i| HostName::new(format!("h{i}")).unwrap())
                .collect(),
            sessions: vec![],
        };
        assert_eq!(
            p.to_string(),
            "1 jobs (failover erp-db), the leadership, 7 agents (h0, h1, h2, h3, h4 and 2 more)"
        );
        assert_eq!(Pending::default().to_string(), "nothing");
    }
}
