//! The one sentence of each maintenance decision: "maintenance: o1 preparing (migrating
//! agents): 20 migrate messages sent, 40 moving, 240 left".
//!
//! The clauses are [`Note`]s, data; the sentence is their `Display`.

use std::fmt;

use qfence_model::{OrchestratorId, Term};
use serde::Serialize;

use super::refusal::Refusal;
use super::snapshot::Job;
use super::spread::AgentAlgorithm;
use super::state::Step;
use super::types::Pending;
use crate::types::Millis;

/// One clause of a decision's sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "note", rename_all = "kebab-case")]
pub enum Note {
    NotLeader {
        term: Term,
    },
    LeaseExpired {
        term: Term,
        at: Millis,
    },
    /// Nothing under way; these are in maintenance.
    Quiet {
        in_maintenance: Vec<OrchestratorId>,
    },
    Started {
        target: OrchestratorId,
        algorithm: AgentAlgorithm,
    },
    Resumed {
        target: OrchestratorId,
        step: Step,
        term: Term,
    },
    /// Waiting for the target to report itself read-only.
    AwaitingReadOnly {
        target: OrchestratorId,
    },
    Draining {
        target: OrchestratorId,
        jobs: Vec<Job>,
    },
    HandingOver {
        target: OrchestratorId,
        to: Option<OrchestratorId>,
        asked: bool,
    },
    Migrating {
        target: OrchestratorId,
        sent: usize,
        moving: usize,
        left: usize,
    },
    MovingSessions {
        target: OrchestratorId,
        sent: usize,
        left: usize,
    },
    /// The last step waits: the cluster changed since the request.
    Blocked {
        target: OrchestratorId,
        why: Refusal,
    },
    Entered {
        target: OrchestratorId,
    },
    Cancelled {
        target: OrchestratorId,
        rebalance: bool,
        pending: Pending,
    },
    TimedOut {
        target: OrchestratorId,
        pending: Pending,
    },
    /// A rebalance could not be recorded: another operation runs.
    RebalanceSkipped {
        target: OrchestratorId,
        preparing: OrchestratorId,
    },
    Rebalancing {
        onto: OrchestratorId,
        sent: usize,
        left: usize,
    },
    Rebalanced {
        onto: OrchestratorId,
        agents: usize,
    },
    RebalanceIncomplete {
        onto: OrchestratorId,
        left: usize,
    },
}

impl Note {
    /// Whether the clause is part of a quiet cycle.
    pub fn is_routine(&self) -> bool {
        matches!(self, Note::Quiet { .. } | Note::NotLeader { .. })
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::NotLeader { term } => write!(f, "not the leader (term {term})"),
            Note::LeaseExpired { term, at } => {
                write!(f, "lease of term {term} ran out at {at}: nothing decided")
            }
            Note::Quiet { in_maintenance } if in_maintenance.is_empty() => {
                f.write_str("nothing under way, every orchestrator Up")
            }
            Note::Quiet { in_maintenance } => {
                let v: Vec<&str> = in_maintenance.iter().map(|o| o.as_str()).collect();
                write!(f, "nothing under way; in maintenance: {}", v.join(", "))
            }
            Note::Started { target, algorithm } => write!(
                f,
                "{target} prepares for maintenance ({algorithm}): it goes read-only"
            ),
            Note::Resumed { target, step, term } => write!(
                f,
                "term {term} resumes {target}'s preparation ({})",
                step.as_str()
            ),
            Note::AwaitingReadOnly { target } => {
                write!(f, "{target} preparing: waiting for it to report read-only")
            }
            Note::Draining { target, jobs } => {
                let v: Vec<String> = jobs.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "{target} preparing (draining jobs): waiting for {} ({})",
                    jobs.len(),
                    v.join(", ")
                )
            }
            Note::HandingOver { target, to, asked } => match (to, asked) {
                (Some(to), true) => write!(f, "{target} hands the leadership over to {to}"),
                (Some(to), false) => {
                    write!(
                        f,
                        "{target} preparing: waiting for {to} to take the leadership"
                    )
                }
                (None, _) => write!(
                    f,
                    "{target} preparing: no Up voter able to renew the dead-man switches can \
                     take the leadership"
                ),
            },
            Note::Migrating {
                target,
                sent,
                moving,
                left,
            } => write!(
                f,
                "{target} preparing (migrating agents): {sent} migrate messages sent, {moving} \
                 moving, {left} left"
            ),
            Note::MovingSessions { target, sent, left } => write!(
                f,
                "{target} preparing (moving controller sessions): {sent} moves asked, {left} \
                 sessions left"
            ),
            Note::Blocked { target, why } => {
                write!(f, "{target} stays preparing: {why}")
            }
            Note::Entered { target } => {
                write!(f, "{target} is in maintenance: it holds nothing")
            }
            Note::Cancelled {
                target,
                rebalance,
                pending,
            } => {
                write!(f, "{target} back Up (cancelled; pending: {pending})")?;
                if *rebalance {
                    f.write_str("; agents rebalanced onto it")?;
                }
                Ok(())
            }
            Note::TimedOut { target, pending } => write!(
                f,
                "{target}'s preparation timed out and was rolled back, still pending: {pending}"
            ),
            Note::RebalanceSkipped { target, preparing } => write!(
                f,
                "no rebalance onto {target}: {preparing} is preparing for maintenance"
            ),
            Note::Rebalancing { onto, sent, left } => write!(
                f,
                "rebalancing onto {onto}: {sent} migrate messages sent, {left} agents to come"
            ),
            Note::Rebalanced { onto, agents } => {
                write!(f, "rebalanced: {agents} agents back on {onto}")
            }
            Note::RebalanceIncomplete { onto, left } => write!(
                f,
                "rebalance onto {onto} stopped at its deadline, {left} agents not back"
            ),
        }
    }
}

/// A decision's sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sentence {
    pub notes: Vec<Note>,
    /// Whether the decision changes the state or issues a command.
    pub acted: bool,
}

impl Sentence {
    /// Whether the decision was a quiet one (nothing worth an event-log line).
    pub fn is_routine(&self) -> bool {
        !self.acted && self.notes.iter().all(Note::is_routine)
    }
}

impl fmt::Display for Sentence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("maintenance: ")?;
        for (i, n) in self.notes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}
