//! `cancel-maintenance [--rebalance]`: back to `Up`; with `--rebalance`, agents come back onto
//! it until it holds its share of those allowed on it (CloudStack's `rebalance`, PR #10995),
//! at the same bounded rate. Without it, agents stay where they went (CloudStack's default:
//! they never return to a preferred orchestrator by themselves).

use std::collections::BTreeMap;

use qfence_model::OrchestratorId;
use qfence_model::config::HostName;

use super::prepare::recent;
use super::refusal::Refusal;
use super::state::{Operation, OrchestratorStatus, Rebalance, Sent};
use super::types::{Action, Event, Pending};
use super::{Cx, Note};

impl Cx<'_, '_> {
    /// Whether `o` takes agents, by the state this decision writes (a cancel just made it
    /// `Up`).
    fn serves(&self, o: &OrchestratorId) -> bool {
        self.s
            .orchestrators
            .get(o)
            .is_some_and(|v| v.alive && !v.witness)
            && self.state.status_of(o) == OrchestratorStatus::Up
    }

    pub(super) fn cancel(
        &mut self,
        target: &OrchestratorId,
        rebalance: bool,
    ) -> Result<(), Refusal> {
        let s = self.s;
        if !s.orchestrators.contains_key(target) {
            return Err(Refusal::UnknownOrchestrator {
                orchestrator: target.clone(),
            });
        }
        if self.state.status_of(target) == OrchestratorStatus::Up {
            return Err(Refusal::NotInMaintenance {
                orchestrator: target.clone(),
            });
        }
        let preparing =
            matches!(&self.state.operation, Some(Operation::Prepare(p)) if &p.target == target);
        let pending = if preparing {
            Pending {
                jobs: s.jobs_of(target).to_vec(),
                leadership: &s.me == target,
                agents: s.agents_on(target),
                sessions: s.sessions_on(target),
            }
        } else {
            Pending::default()
        };
        let st = self.change();
        st.set_status(target, OrchestratorStatus::Up);
        if preparing {
            st.operation = None;
        }
        self.issue(Action::EndReadOnly {
            orchestrator: target.clone(),
        });
        self.event(Event::Cancelled {
            orchestrator: target.clone(),
            rebalance,
            pending: pending.clone(),
        });
        self.notes.push(Note::Cancelled {
            target: target.clone(),
            rebalance,
            pending,
        });
        if !rebalance {
            return Ok(());
        }
        if let Some(Operation::Prepare(p)) = &self.state.operation {
            let preparing = p.target.clone();
            self.notes.push(Note::RebalanceSkipped {
                target: target.clone(),
                preparing,
            });
            return Ok(());
        }
        let r = Rebalance {
            onto: target.clone(),
            algorithm: s.settings.algorithm,
            started: s.now,
            deadline: s.now.plus(s.settings.timeout),
            agents: self.chosen(target),
            migrations: BTreeMap::new(),
        };
        self.drive_rebalance(r);
        Ok(())
    }

    /// The agents that come back: `onto` gets its share (agents allowed on it over the
    /// orchestrators they may use), taken one by one from the most loaded, by name.
    fn chosen(&self, onto: &OrchestratorId) -> BTreeMap<HostName, OrchestratorId> {
        let s = self.s;
        let allowed: Vec<(&HostName, &super::Agent)> = s
            .agents
            .iter()
            .filter(|(_, a)| a.allowed.contains(onto) && a.connected.is_some())
            .collect();
        let mut serving: Vec<&OrchestratorId> = allowed
            .iter()
            .flat_map(|(_, a)| a.allowed.iter())
            .filter(|o| *o == onto || self.serves(o))
            .collect();
        serving.sort();
        serving.dedup();
        let share = allowed.len() / serving.len().max(1);
        let mut by: BTreeMap<OrchestratorId, Vec<HostName>> = BTreeMap::new();
        let mut have = 0;
        for (h, a) in &allowed {
            match &a.connected {
                Some(o) if o == onto => have += 1,
                Some(o) => by.entry(o.clone()).or_default().push((*h).clone()),
                None => {}
            }
        }
        let mut out = BTreeMap::new();
        while have + out.len() < share {
            let Some((from, _)) = by
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .max_by_key(|(o, v)| (v.len(), std::cmp::Reverse((*o).clone())))
            else {
                break;
            };
            let from = from.clone();
            let h = by.get_mut(&from).map(|v| v.remove(0));
            if let Some(h) = h {
                out.insert(h, from);
            }
        }
        out
    }

    pub(super) fn drive_rebalance(&mut self, mut r: Rebalance) {
        let s = self.s;
        let onto = r.onto.clone();
        let left: Vec<HostName> = r
            .agents
            .keys()
            .filter(|h| {
                s.agents
                    .get(*h)
                    .and_then(|a| a.connected.as_ref())
                    .is_some_and(|o| o != &onto)
            })
            .cloned()
            .collect();
        if left.is_empty() || !self.serves(&onto) {
            self.change().operation = None;
            let agents = r.agents.len() - left.len();
            self.event(Event::Rebalanced {
                orchestrator: onto.clone(),
                agents,
            });
            self.notes.push(Note::Rebalanced { onto, agents });
            return;
        }
        if s.now >= r.deadline {
            self.change().operation = None;
            self.event(Event::RebalanceIncomplete {
                orchestrator: onto.clone(),
                agents: left.clone(),
            });
            self.notes.push(Note::RebalanceIncomplete {
                onto,
                left: left.len(),
            });
            return;
        }
        let budget = (s.settings.migrate_per_second as usize)
            .saturating_sub(recent(r.migrations.values(), s.now));
        let due = left.iter().filter(|h| {
            r.migrations
                .get(*h)
                .is_none_or(|m| s.now >= m.at.plus(s.settings.retry))
        });
        let avoid: Vec<OrchestratorId> = s
            .orchestrators
            .keys()
            .filter(|o| !self.serves(o))
            .cloned()
            .collect();
        let mut sent = 0;
        for h in due.take(budget).cloned().collect::<Vec<_>>() {
            let a = &s.agents[&h];
            let from = a.connected.clone().unwrap_or_else(|| r.agents[&h].clone());
            let to: Vec<OrchestratorId> = std::iter::once(onto.clone())
                .chain(
                    a.allowed
                        .iter()
                        .filter(|o| **o != onto && self.serves(o))
                        .cloned(),
                )
                .collect();
            let attempts = r.migrations.get(&h).map_or(0, |m| m.attempts) + 1;
            r.migrations.insert(
                h.clone(),
                Sent {
                    to: onto.clone(),
                    at: s.now,
                    attempts,
                },
            );
            self.issue(Action::MigrateAgent {
                agent: h,
                from,
                to,
                avoid: avoid.clone(),
                algorithm: r.algorithm,
            });
            sent += 1;
        }
        let left = left.len();
        if self.state.operation.as_ref() != Some(&Operation::Rebalance(r.clone())) {
            self.change().operation = Some(Operation::Rebalance(r));
        }
        self.notes.push(Note::Rebalancing { onto, sent, left });
    }
}
