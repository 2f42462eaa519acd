//! A preparation, step by step: read-only, jobs drained, leadership handed over, agents
//! migrated at a bounded rate, controller sessions moved, preconditions checked again,
//! `Maintenance`. Each cycle takes the first step not done; a step waits for its effect to be
//! seen in a later snapshot, and resends what had no effect after `Settings::retry`.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::OrchestratorId;
use qfence_model::config::HostName;

use super::refusal::{Refusal, may_leave};
use super::spread::{AgentAlgorithm, spread};
use super::state::{Operation, OrchestratorStatus, Preparation, Sent, Step};
use super::types::{Action, Event, Pending};
use super::{Cx, Mutation, Note};
use crate::types::Millis;

const SECOND: Duration = Duration::from_secs(1);

impl Cx<'_, '_> {
    /// `prepare-maintenance`: checked, then started and driven as far as it goes now.
    pub(super) fn prepare(
        &mut self,
        target: &OrchestratorId,
        algorithm: Option<AgentAlgorithm>,
    ) -> Result<(), Refusal> {
        let s = self.s;
        if !s.orchestrators.contains_key(target) {
            return Err(Refusal::UnknownOrchestrator {
                orchestrator: target.clone(),
            });
        }
        let status = self.state.status_of(target);
        if status != OrchestratorStatus::Up {
            return Err(Refusal::NotUp {
                orchestrator: target.clone(),
                status,
            });
        }
        if !s.orchestrators[target].alive {
            return Err(Refusal::NotAnswering {
                orchestrator: target.clone(),
            });
        }
        if let Some(Operation::Prepare(p)) = &self.state.operation
            && self.mutation() != Mutation::SecondPreparation
        {
            return Err(Refusal::AnotherPreparing {
                preparing: p.target.clone(),
            });
        }
        may_leave(s, target, self.mutation())?;
        let algorithm = algorithm.unwrap_or(s.settings.algorithm);
        let p = Preparation {
            target: target.clone(),
            algorithm,
            started: s.now,
            deadline: s.now.plus(s.settings.timeout),
            term: s.leadership.term,
            step: Step::DrainingJobs,
            handover: None,
            migrations: BTreeMap::new(),
            sessions: BTreeMap::new(),
        };
        // A rebalance under way is best-effort: the preparation supersedes it.
        let st = self.change();
        st.set_status(target, OrchestratorStatus::PreparingForMaintenance);
        st.operation = Some(Operation::Prepare(p.clone()));
        if self.mutation() != Mutation::ReadOnlyAfterDrain {
            self.issue(Action::GoReadOnly {
                orchestrator: target.clone(),
            });
        }
        self.event(Event::PreparationStarted {
            orchestrator: target.clone(),
            algorithm,
        });
        self.notes.push(Note::Started {
            target: target.clone(),
            algorithm,
        });
        self.drive(p);
        Ok(())
    }

    /// What the target still holds.
    fn pending(&self, target: &OrchestratorId) -> Pending {
        let s = self.s;
        Pending {
            jobs: s.jobs_of(target).to_vec(),
            leadership: &s.me == target,
            agents: s.agents_on(target),
            sessions: s.sessions_on(target),
        }
    }

    /// Writes the preparation back (its step, what was sent).
    fn keep(&mut self, p: Preparation) {
        if self.state.operation.as_ref() != Some(&Operation::Prepare(p.clone())) {
            self.change().operation = Some(Operation::Prepare(p));
        }
    }

    /// One cycle of a preparation.
    pub(super) fn drive(&mut self, mut p: Preparation) {
        let s = self.s;
        let target = p.target.clone();
        if p.term != s.leadership.term {
            p.term = s.leadership.term;
            self.event(Event::Resumed {
                orchestrator: target.clone(),
                step: p.step,
                term: p.term,
            });
            self.notes.push(Note::Resumed {
                target: target.clone(),
                step: p.step,
                term: p.term,
            });
        }
        if s.now >= p.deadline {
            let pending = self.pending(&target);
            let st = self.change();
            st.set_status(&target, OrchestratorStatus::Up);
            st.operation = None;
            self.issue(Action::EndReadOnly {
                orchestrator: target.clone(),
            });
            self.event(Event::TimedOut {
                orchestrator: target.clone(),
                pending: pending.clone(),
            });
            self.notes.push(Note::TimedOut { target, pending });
            return;
        }
        let late_read_only = self.mutation() == Mutation::ReadOnlyAfterDrain;
        if !late_read_only && !s.read_only.contains(&target) {
            p.step = Step::DrainingJobs;
            self.keep(p);
            self.notes.push(Note::AwaitingReadOnly { target });
            return;
        }
        let jobs = s.jobs_of(&target);
        if !jobs.is_empty() && self.mutation() != Mutation::JobsIgnored {
            p.step = Step::DrainingJobs;
            self.keep(p);
            let jobs = jobs.to_vec();
            self.notes.push(Note::Draining { target, jobs });
            return;
        }
        if late_read_only && !s.read_only.contains(&target) {
            self.issue(Action::GoReadOnly {
                orchestrator: target.clone(),
            });
        }
        if s.me == target && self.mutation() != Mutation::MaintenanceBeforeHandover {
            p.step = Step::HandingOver;
            self.hand_over(&mut p);
            self.keep(p);
            return;
        }
        if !s.agents_on(&target).is_empty() {
            p.step = Step::MigratingAgents;
            self.migrate(&mut p);
            self.keep(p);
            return;
        }
        if !s.sessions_on(&target).is_empty() {
            p.step = Step::MovingSessions;
            self.move_sessions(&mut p);
            self.keep(p);
            return;
        }
        if let Err(why) = may_leave(s, &target, self.mutation()) {
            self.keep(p);
            self.notes.push(Note::Blocked { target, why });
            return;
        }
        let st = self.change();
        st.set_status(&target, OrchestratorStatus::Maintenance);
        st.operation = None;
        self.event(Event::EnteredMaintenance {
            orchestrator: target.clone(),
        });
        self.notes.push(Note::Entered { target });
    }

    /// The target leads: ask an `Up` voter that can renew the dead-man switches to take over
    /// (the first by name), once, and again after `retry`.
    fn hand_over(&mut self, p: &mut Preparation) {
        let s = self.s;
        let to = s
            .orchestrators
            .iter()
            .find(|(o, v)| **o != p.target && v.voter && v.renews && s.up(o))
            .map(|(o, _)| o.clone());
        let due = p
            .handover
            .as_ref()
            .is_none_or(|h| s.now >= h.at.plus(s.settings.retry) || Some(&h.to) != to.as_ref());
        let asked = to.is_some() && due;
        if let (Some(to), true) = (&to, asked) {
            let attempts = p.handover.as_ref().map_or(0, |h| h.attempts) + 1;
            p.handover = Some(Sent {
                to: to.clone(),
                at: s.now,
                attempts,
            });
            self.issue(Action::HandOverLeadership {
                from: p.target.clone(),
                to: to.clone(),
            });
        }
        self.notes.push(Note::HandingOver {
            target: p.target.clone(),
            to,
            asked,
        });
    }

    /// Migrate messages to the agents still on the target: those never sent one, or sent
    /// one `retry` ago without effect, in name order, no more than the rate allows in any
    /// second.
    fn migrate(&mut self, p: &mut Preparation) {
        let s = self.s;
        let target = p.target.clone();
        let on = s.agents_on(&target);
        let recent = recent(p.migrations.values(), s.now);
        let budget = (s.settings.migrate_per_second as usize).saturating_sub(recent);
        let due: Vec<HostName> = on
            .iter()
            .filter(|h| {
                p.migrations
                    .get(*h)
                    .is_none_or(|m| s.now >= m.at.plus(s.settings.retry))
            })
            .cloned()
            .collect();
        let ignore_avoid = self.mutation() == Mutation::AvoidListIgnored;
        let mut batch = BTreeMap::new();
        for h in due.iter().take(budget) {
            let a = &s.agents[h];
            let list = if ignore_avoid {
                a.allowed.clone()
            } else {
                s.candidates(a, &target)
            };
            // No one to go to: it stays, and the preparation waits (the timeout rolls it
            // back); the refusal at the start makes this a cluster that changed since.
            if !list.is_empty() {
                batch.insert(h.clone(), list);
            }
        }
        let mut received: BTreeMap<OrchestratorId, usize> = BTreeMap::new();
        for (h, m) in &p.migrations {
            if !batch.contains_key(h) {
                *received.entry(m.to.clone()).or_default() += 1;
            }
        }
        let lists = spread(p.algorithm, &batch, &mut received, s.seed);
        let avoid = if ignore_avoid {
            Vec::new()
        } else {
            self.avoid(&target)
        };
        for (agent, to) in lists {
            let attempts = p.migrations.get(&agent).map_or(0, |m| m.attempts) + 1;
            p.migrations.insert(
                agent.clone(),
                Sent {
                    to: to[0].clone(),
                    at: s.now,
                    attempts,
                },
            );
            self.issue(Action::MigrateAgent {
                agent,
                from: target.clone(),
                to,
                avoid: avoid.clone(),
                algorithm: p.algorithm,
            });
        }
        let sent = self.commands_of("migrate-agent");
        let moving = on.iter().filter(|h| p.migrations.contains_key(*h)).count();
        self.notes.push(Note::Migrating {
            target,
            sent,
            moving: moving - sent.min(moving),
            left: on.len() - moving,
        });
    }

    /// The orchestrators no agent may go to: the target first, then every other not `Up`.
    pub(super) fn avoid(&self, target: &OrchestratorId) -> Vec<OrchestratorId> {
        let s = self.s;
        std::iter::once(target.clone())
            .chain(
                s.orchestrators
                    .keys()
                    .filter(|o| *o != target && !s.takes_work(o))
                    .cloned(),
            )
            .collect()
    }

    pub(super) fn commands_of(&self, name: &str) -> usize {
        self.commands
            .iter()
            .filter(|c| c.action.name() == name)
            .count()
    }

    /// Each session the target holds goes to its least-loaded allowed `Up` caller.
    fn move_sessions(&mut self, p: &mut Preparation) {
        let s = self.s;
        let target = p.target.clone();
        let mut load: BTreeMap<OrchestratorId, usize> = BTreeMap::new();
        for c in s.controllers.values() {
            if let Some(h) = &c.holder {
                *load.entry(h.clone()).or_default() += 1;
            }
        }
        let held = s.sessions_on(&target);
        for c in &held {
            let due = p
                .sessions
                .get(c)
                .is_none_or(|m| s.now >= m.at.plus(s.settings.retry));
            if !due {
                continue;
            }
            let callers = s.callers(&s.controllers[c], &target);
            let Some(to) = callers
                .iter()
                .min_by_key(|o| (load.get(*o).copied().unwrap_or(0), (*o).clone()))
                .cloned()
            else {
                continue;
            };
            *load.entry(to.clone()).or_default() += 1;
            let attempts = p.sessions.get(c).map_or(0, |m| m.attempts) + 1;
            p.sessions.insert(
                c.clone(),
                Sent {
                    to: to.clone(),
                    at: s.now,
                    attempts,
                },
            );
            self.issue(Action::MoveSession {
                controller: c.clone(),
                from: target.clone(),
                to,
            });
        }
        let sent = self.commands_of("move-session");
        self.notes.push(Note::MovingSessions {
            target,
            sent,
            left: held.len(),
        });
    }
}

/// How many messages went out in the last second.
pub(super) fn recent<'a>(sent: impl Iterator<Item = &'a Sent>, now: Millis) -> usize {
    sent.filter(|m| now.since(m.at) < SECOND).count()
}
