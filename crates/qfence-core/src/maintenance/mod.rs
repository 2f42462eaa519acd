//! Orchestrator maintenance mode: take one orchestrator out for an upgrade or a reboot with
//! nothing missed, as a pure decision (`docs/specs/maintenance.md`, ADR 0019). CloudStack's
//! management-server maintenance (`Up → PreparingForMaintenance → Maintenance`, back to `Up`
//! on cancel) is the model.
//!
//! # The model
//!
//! The replicated [`MaintenanceState`] holds each orchestrator's [`OrchestratorStatus`] and
//! the one [`Operation`] under way. [`request`] takes an operator's [`Request`]
//! (`prepare-maintenance`, `cancel-maintenance`) and either refuses it with a typed
//! [`Refusal`] or starts it; [`decide`] drives the operation one cycle further. Both take a
//! [`Snapshot`] (the orchestrators with their liveness and votes, their pending jobs, who
//! reports read-only, the agents and where they are connected, the controllers and who holds
//! their sessions, the settings, a seed, `now`) and return a [`Decision`]: typed
//! [`Command`]s, a compare-and-set [`MaintenanceStateChange`], and one [`Sentence`].
//!
//! A preparation goes read-only first, and nothing further happens until the target reports
//! it is read-only, so no job can start after the jobs are counted. Then, each step waiting
//! for the one before: its jobs drain; it hands the leadership over if it leads; its agents
//! get migrate messages, a bounded number a second, spread by the [`AgentAlgorithm`]; its
//! controller sessions move; the preconditions are checked again; it enters `Maintenance`.
//! Not done by the deadline (`maintenance_timeout`): rolled back, the pending items named.
//!
//! [`rows`] and [`progress`] give what `qfence orchestrator list` and the console show, from
//! the same snapshot.
//!
//! Nothing here does I/O, reads a clock or draws a random number.

mod prepare;
mod reason;
mod rebalance;
pub mod refusal;
pub mod snapshot;
pub mod spread;
pub mod state;
pub mod types;
pub mod view;

use std::collections::BTreeSet;

use qfence_model::OrchestratorId;
use serde::{Deserialize, Serialize};

pub use reason::{Note, Sentence};
pub use refusal::Refusal;
pub use snapshot::{Agent, Controller, Job, JobKind, Orchestrator, Settings, Snapshot};
pub use spread::{AgentAlgorithm, spread};
pub use state::{
    MaintenanceState, MaintenanceStateChange, Operation, OrchestratorStatus, Preparation,
    Rebalance, Sent, Step, StoredMaintenanceState,
};
pub use types::{Action, Command, Event, Pending};
pub use view::{Progress, Row, progress, rows};

use crate::types::OpId;

/// A deliberate bug, for the simulation's own test. Shipped code never sets one.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mutation {
    /// The real rules.
    #[default]
    None,
    /// Prepare without checking that every controller keeps an `Up` caller.
    OrphanCheckSkipped,
    /// Migrate messages list the agent's orchestrators as configured, avoiding none.
    AvoidListIgnored,
    /// A second preparation may start while one is under way.
    SecondPreparation,
    /// Enter maintenance without handing the leadership over.
    MaintenanceBeforeHandover,
    /// Move on without waiting for the target's jobs.
    JobsIgnored,
    /// Go read-only only once the jobs are counted, and do not wait for it.
    ReadOnlyAfterDrain,
}

/// The rules the decisions apply. [`Rules::default`] is the only one production uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    #[doc(hidden)]
    pub mutation: Mutation,
}

/// An operator's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case")]
pub enum Request {
    /// `qfence orchestrator prepare-maintenance NAME [--algorithm ...]`; the algorithm
    /// overrides the configured one for this operation only.
    Prepare {
        orchestrator: OrchestratorId,
        algorithm: Option<AgentAlgorithm>,
    },
    /// `qfence orchestrator cancel-maintenance NAME [--rebalance]`.
    Cancel {
        orchestrator: OrchestratorId,
        rebalance: bool,
    },
}

/// What to do: commands in order, the state to write first, and the decision's sentence.
///
/// The runtime writes `state_change` (a compare-and-set) before it runs any command; when the
/// write is refused, it drops the commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub commands: Vec<Command>,
    pub state_change: Option<MaintenanceStateChange>,
    pub sentence: Sentence,
}

/// One cycle with the real rules.
pub fn decide(s: &Snapshot<'_>) -> Decision {
    decide_with(s, Rules::default())
}

/// One cycle with the given rules (tests plant bugs through this).
pub fn decide_with(s: &Snapshot<'_>, rules: Rules) -> Decision {
    if let Err(r) = leads(s) {
        let note = match r {
            Refusal::LeaseExpired { term, at } => Note::LeaseExpired { term, at },
            _ => Note::NotLeader {
                term: s.leadership.term,
            },
        };
        return Decision {
            commands: Vec::new(),
            state_change: None,
            sentence: Sentence {
                notes: vec![note],
                acted: false,
            },
        };
    }
    let mut cx = Cx::new(s, rules);
    cx.cycle();
    cx.finish()
}

/// An operator's request with the real rules.
pub fn request(s: &Snapshot<'_>, r: &Request) -> Result<Decision, Refusal> {
    request_with(s, r, Rules::default())
}

/// An operator's request with the given rules.
pub fn request_with(s: &Snapshot<'_>, r: &Request, rules: Rules) -> Result<Decision, Refusal> {
    leads(s)?;
    let mut cx = Cx::new(s, rules);
    match r {
        Request::Prepare {
            orchestrator,
            algorithm,
        } => cx.prepare(orchestrator, *algorithm)?,
        Request::Cancel {
            orchestrator,
            rebalance,
        } => cx.cancel(orchestrator, *rebalance)?,
    }
    Ok(cx.finish())
}

fn leads(s: &Snapshot<'_>) -> Result<(), Refusal> {
    let l = s.leadership;
    if !l.leader {
        return Err(Refusal::NotLeader { term: l.term });
    }
    if !l.valid_at(s.now) {
        return Err(Refusal::LeaseExpired {
            term: l.term,
            at: l.lease_until,
        });
    }
    Ok(())
}

/// One decision under way.
pub(crate) struct Cx<'s, 'a> {
    s: &'s Snapshot<'a>,
    rules: Rules,
    state: MaintenanceState,
    changed: bool,
    commands: Vec<Command>,
    notes: Vec<Note>,
}

impl<'s, 'a> Cx<'s, 'a> {
    fn new(s: &'s Snapshot<'a>, rules: Rules) -> Self {
        Self {
            s,
            rules,
            state: s.state.clone(),
            changed: false,
            commands: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn mutation(&self) -> Mutation {
        self.rules.mutation
    }

    fn change(&mut self) -> &mut MaintenanceState {
        self.changed = true;
        &mut self.state
    }

    fn issue(&mut self, action: Action) {
        let op = OpId(format!(
            "maint/t{}/r{}/{}/{}",
            self.s.leadership.term,
            self.s.state.revision,
            self.s.now.0,
            self.commands.len()
        ));
        self.commands.push(Command {
            op,
            term: self.s.leadership.term,
            action,
        });
    }

    fn event(&mut self, event: Event) {
        self.issue(Action::Event { event });
    }

    fn cycle(&mut self) {
        match self.state.operation.clone() {
            None => {
                let in_maintenance = self.state.with_status(OrchestratorStatus::Maintenance);
                self.notes.push(Note::Quiet { in_maintenance });
            }
            Some(Operation::Prepare(p)) => self.drive(p),
            Some(Operation::Rebalance(r)) => self.drive_rebalance(r),
        }
        self.reconcile_read_only();
    }

    /// Every orchestrator not `Up` is read-only, every `Up` one is not: a command lost, or an
    /// orchestrator restarted, is put right by the next cycle.
    fn reconcile_read_only(&mut self) {
        let issued: BTreeSet<OrchestratorId> = self
            .commands
            .iter()
            .filter_map(|c| match &c.action {
                Action::GoReadOnly { orchestrator } | Action::EndReadOnly { orchestrator } => {
                    Some(orchestrator.clone())
                }
                _ => None,
            })
            .collect();
        let ids: Vec<OrchestratorId> = self.s.orchestrators.keys().cloned().collect();
        for o in ids {
            if issued.contains(&o) || !self.s.orchestrators[&o].alive {
                continue;
            }
            let status = self.state.status_of(&o);
            let ro = self.s.read_only.contains(&o);
            if status != OrchestratorStatus::Up && !ro {
                if self.mutation() == Mutation::ReadOnlyAfterDrain
                    && status == OrchestratorStatus::PreparingForMaintenance
                {
                    continue;
                }
                self.issue(Action::GoReadOnly { orchestrator: o });
            } else if status == OrchestratorStatus::Up && ro {
                self.issue(Action::EndReadOnly { orchestrator: o });
            }
        }
    }

    fn finish(self) -> Decision {
        let acted = self.changed || !self.commands.is_empty();
        let state_change = self.changed.then(|| {
            let mut next = self.state;
            next.revision = self.s.state.revision + 1;
            MaintenanceStateChange {
                expect_revision: self.s.state.revision,
                next,
            }
        });
        Decision {
            commands: self.commands,
            state_change,
            sentence: Sentence {
                notes: self.notes,
                acted,
            },
        }
    }
}
