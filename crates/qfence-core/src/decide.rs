//! `decide`: one snapshot in, one decision out.
//!
//! A decision runs in this order: a leader check (no valid lease, no decision); the operators'
//! intents, oldest first (`decide/intents.rs`, an abort: `decide/abort.rs`); then either the
//! steady state (`decide/steady.rs`: the owner's health and its triggers, `decide/health.rs`;
//! the owner's dead-man switches, `decide/dead_man.rs`; the fence watch of every other site,
//! the owner's shield, the readiness watch; the service binding kept, `decide/service.rs`) or
//! the transition under way (`decide/transition.rs`), step by step, as far as it can go without
//! waiting, each step judged in `decide/judge.rs`, a planned switchover's resource-level proof
//! in `decide/resource.rs`; a failover's target is chosen in `decide/target.rs`. Every change
//! to the plan state is collected into one compare-and-set; every clause of the sentence into
//! one sentence (see `reason.rs`). The rules themselves are in `docs/specs/decision-core.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::config::{PlanConfig, ValidatedConfig};
use qfence_model::{FenceLevel, PlanId, SiteId};
use serde::Serialize;

mod abort;
mod dead_man;
mod health;
mod intents;
mod judge;
mod rejoin;
mod resource;
mod service;
mod steady;
mod target;
mod transition;

pub use target::{FailoverOrder, failover_order};

use crate::reason::{Note, Reason};
use crate::rules::{self, Rules, SiteVerdict};
use crate::schedule;
use crate::state::{Phase, PlanState, PlanStateChange};
use crate::types::{Action, BindingKey, Command, Leadership, Millis, Observation, OpId, OpResult};

/// Everything `decide` may look at, taken at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// The validated configuration; the plan is looked up in it.
    pub config: &'a ValidatedConfig,
    pub plan: PlanId,
    /// The replicated plan state.
    pub state: &'a PlanState,
    /// The latest check of each binding.
    pub observations: &'a BTreeMap<BindingKey, Observation>,
    /// Results of finished commands, by operation id. The runtime keeps them at least as long
    /// as the state refers to them and for one `freshness` window.
    pub results: &'a BTreeMap<OpId, OpResult>,
    /// Commands still executing, with the binding each acts on.
    pub in_flight: &'a BTreeMap<OpId, BindingKey>,
    pub leadership: Leadership,
    pub now: Millis,
}

/// What to do: commands in order, the one sentence saying why, and the state to write first.
///
/// The runtime writes `state_change` (a compare-and-set) before it runs any command; when the
/// write is refused, it drops the commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub commands: Vec<Command>,
    /// Why: the decision's notes, which read (and serialise) as its one sentence.
    pub reason: Reason,
    pub state_change: Option<PlanStateChange>,
    /// Each site's verdict as this decision judged it (same readings, same `now`, the state
    /// it leaves): the sentence's verdict for every site the sentence names, and
    /// [`Rules::shown_verdict`] for the others. A status shows these, so it never contradicts
    /// the sentence beside it. Empty when the decision judged nothing (not the leader).
    #[serde(default)]
    pub sites: Vec<SiteVerdict>,
}

/// Decides with the real rules.
pub fn decide(s: &Snapshot<'_>) -> Decision {
    decide_with(s, &Rules::default())
}

/// Decides with the given rules (tests plant bugs through this).
pub fn decide_with(s: &Snapshot<'_>, rules: &Rules) -> Decision {
    let Some(plan) = s.config.plan(s.plan.as_str()) else {
        return idle(&s.plan, Note::UnknownPlan);
    };
    if !s.leadership.leader {
        return idle(
            &s.plan,
            Note::NotLeader {
                term: s.leadership.term,
            },
        );
    }
    if !s.leadership.valid_at(s.now) {
        return idle(
            &s.plan,
            Note::LeaseExpired {
                term: s.leadership.term,
                at: s.leadership.lease_until,
            },
        );
    }
    let mut cx = Cx {
        s,
        plan,
        rules,
        state: s.state.clone(),
        changed: false,
        commands: Vec::new(),
        notes: Vec::new(),
        judged: BTreeMap::new(),
    };
    cx.intents();
    match cx.state.phase {
        Phase::Steady => cx.steady(),
        Phase::Transition(_) => cx.transition(),
    }
    cx.finish()
}

fn idle(plan: &PlanId, note: Note) -> Decision {
    Decision {
        commands: Vec::new(),
        reason: Reason::new(plan, vec![note], false),
        state_change: None,
        sites: Vec::new(),
    }
}

struct Cx<'s, 'a> {
    s: &'s Snapshot<'a>,
    plan: &'a PlanConfig,
    rules: &'s Rules,
    state: PlanState,
    changed: bool,
    commands: Vec<Command>,
    notes: Vec<Note>,
    /// The verdicts the sentence's clauses were made from, the latest per site.
    judged: BTreeMap<SiteId, SiteVerdict>,
}

impl Cx<'_, '_> {
    fn now(&self) -> Millis {
        self.s.now
    }

    fn finish(self) -> Decision {
        let acted = self.changed || !self.commands.is_empty();
        let sites = self
            .plan
            .sites()
            .map(|site| match self.judged.get(site) {
                Some(v) => v.clone(),
                None => self.rules.shown_verdict(
                    self.s.config,
                    self.plan,
                    &self.state,
                    self.s.observations,
                    site,
                    self.now(),
                ),
            })
            .collect();
        let reason = Reason::new(&self.s.plan, self.notes, acted);
        let state_change = self.changed.then(|| {
            let mut next = self.state;
            next.revision = self.s.state.revision + 1;
            PlanStateChange {
                expect_generation: self.s.state.generation,
                expect_revision: self.s.state.revision,
                next,
            }
        });
        Decision {
            commands: self.commands,
            reason,
            state_change,
            sites,
        }
    }

    fn issue(&mut self, action: Action) -> OpId {
        let op = OpId::new(
            &self.s.plan,
            self.state.generation,
            self.s.leadership.term,
            self.s.state.revision,
            self.s.now,
            self.commands.len(),
        );
        self.commands.push(Command {
            op: op.clone(),
            plan: self.s.plan.clone(),
            generation: self.state.generation,
            term: self.s.leadership.term,
            action,
        });
        op
    }

    fn busy(&self, key: &BindingKey) -> bool {
        self.s.in_flight.values().any(|k| k == key)
            || self
                .commands
                .iter()
                .any(|c| c.action.binding() == Some(key))
    }

    fn capability(&self, key: &BindingKey) -> String {
        rules::binding(self.plan, key)
            .map(|b| b.capability.clone())
            .unwrap_or_else(|| key.to_string())
    }

    fn level(&self, key: &BindingKey) -> Option<FenceLevel> {
        rules::fence_level(self.s.config, self.plan, key)
    }

    fn obs(&self, key: &BindingKey) -> Option<&Observation> {
        self.s.observations.get(key)
    }

    fn fresh(&self, o: &Observation) -> bool {
        self.now().since(o.at) <= self.plan.freshness
    }

    /// The latest time a command on `key` finished.
    fn last_result(&self, key: &BindingKey) -> Option<Millis> {
        self.s
            .results
            .values()
            .filter(|r| r.binding.as_ref() == Some(key))
            .map(|r| r.at)
            .max()
    }

    /// Whether `key` is due a check: not busy, and never read or read an interval ago (give
    /// or take the tick's jitter: see `schedule`).
    fn due(&self, key: &BindingKey) -> bool {
        !self.busy(key)
            && self
                .obs(key)
                .is_none_or(|o| self.elapsed(o.at, self.plan.interval))
    }

    /// Whether `span` has passed since `since`, give or take the tick's jitter.
    fn elapsed(&self, since: Millis, span: Duration) -> bool {
        schedule::elapsed(self.now(), since, span, self.plan.interval)
    }

    fn check_due(&mut self, keys: &[BindingKey]) -> usize {
        let mut n = 0;
        for k in keys {
            if self.due(k) {
                self.issue(Action::check(k.clone()));
                n += 1;
            }
        }
        n
    }

    fn verdict(&self, site: &SiteId, since: Option<Millis>) -> SiteVerdict {
        self.rules.site_verdict(
            self.s.config,
            self.plan,
            &self.state,
            self.s.observations,
            site,
            self.now(),
            since,
            self.state.transition().map(|t| t.started),
        )
    }

    /// [`Cx::verdict`], kept as what this decision says of the site.
    fn judge_site(&mut self, site: &SiteId, since: Option<Millis>) -> SiteVerdict {
        let v = self.verdict(site, since);
        self.judged.insert(site.clone(), v.clone());
        v
    }

    fn other_sites(&self, but: &SiteId) -> Vec<SiteId> {
        self.plan.sites().filter(|s| *s != but).cloned().collect()
    }

    fn change(&mut self) -> &mut PlanState {
        self.changed = true;
        &mut self.state
    }
}
