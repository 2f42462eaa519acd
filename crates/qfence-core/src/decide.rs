//! `decide`: one snapshot in, one decision out.
//!
//! A decision runs in this order: a leader check (no valid lease, no decision); the operators'
//! intents, oldest first (an abort: `decide/abort.rs`); then either the steady state (the
//! owner's health and its triggers, the owner's dead-man switches: `decide/dead_man.rs`, the
//! fence watch of every other site, the owner's shield, the readiness watch, the service
//! binding kept: `decide/service.rs`) or the transition under way, step by step, as far as it
//! can go without waiting. Every change
//! to the plan state is collected into one compare-and-set; every clause of the sentence into
//! one sentence (see `reason.rs`). The rules themselves are in `docs/specs/decision-core.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::config::{PlanConfig, ValidatedConfig};
use qfence_model::{FenceLevel, PlanId, Role, SiteId, Verdict};
use serde::{Deserialize, Serialize};

mod abort;
mod dead_man;
mod service;

use crate::definitive;
use crate::reason::{Note, sentence};
use crate::rules::{self, Rules, SiteVerdict};
use crate::schedule;
use crate::state::{
    Evidence, EvidenceKind, HealthTrack, IntentKind, Phase, PlanState, PlanStateChange, Stage,
    Transition, TransitionKind,
};
use crate::types::{
    Action, BindingKey, Command, Leadership, Millis, Observation, Observed, OpId, OpResult, Outcome,
};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub commands: Vec<Command>,
    pub reason: String,
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
        reason: sentence(plan, &[note], false),
        state_change: None,
        sites: Vec::new(),
    }
}

/// Health of the owner, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Health {
    Good,
    /// A check reads unhealthy; since when (the reading's start).
    Bad(String, Millis),
    /// Nothing fresh could be read: the owner site may be lost; since when.
    Lost(String, Millis),
    /// A first reading is still to come.
    Pending,
}

/// What judging a step's operations found.
enum Judged {
    Waiting(usize, usize),
    Finished(Vec<(BindingKey, Outcome)>),
}

/// After judging a step.
enum Next {
    Wait,
    Advance(Stage),
    Retry(Stage, String),
    Halt(String),
    Steady,
}

const MAX_STEPS_PER_DECISION: usize = 24;

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
        let reason = sentence(&self.s.plan, &self.notes, acted);
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
                self.issue(Action::Check { binding: k.clone() });
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

    // ----- operators -----

    fn intents(&mut self) {
        if self.state.intents.is_empty() {
            return;
        }
        let intents = std::mem::take(&mut self.change().intents);
        for i in intents {
            if i.generation != self.state.generation {
                self.notes.push(Note::IntentStale {
                    intent: i.kind,
                    by: i.by,
                    seen: i.generation,
                    now: self.state.generation,
                });
                continue;
            }
            let by = i.by.clone();
            match i.kind.clone() {
                IntentKind::Pause => {
                    self.state.paused = true;
                    self.notes.push(Note::Paused { by });
                }
                IntentKind::Resume => {
                    self.state.paused = false;
                    self.notes.push(Note::Resumed { by });
                }
                IntentKind::ConfirmFenced { site } => {
                    let protected = match self.state.transition() {
                        Some(t) => t.target.clone(),
                        None => self.state.owner.clone(),
                    };
                    if !self.plan.instances.contains_key(&site) || site == protected {
                        self.notes.push(Note::IntentRefused {
                            intent: i.kind,
                            by,
                            why: format!("{site} is not a site this plan gives up"),
                        });
                        continue;
                    }
                    let generation = self.state.generation;
                    self.state.evidence.push(Evidence {
                        site: site.clone(),
                        generation,
                        kind: EvidenceKind::OperatorConfirmed {
                            by: by.clone(),
                            why: i.why.clone(),
                        },
                        at: self.now(),
                        carried: false,
                    });
                    self.notes.push(Note::Confirmed {
                        site,
                        by,
                        why: i.why,
                    });
                }
                IntentKind::Failover { to } | IntentKind::Switchover { to } => {
                    let refusal = if let Some(t) = self.state.transition() {
                        Some(format!("already moving to {}", t.target))
                    } else if self.state.paused {
                        Some("the plan is paused: resume it first".to_owned())
                    } else if to == self.state.owner {
                        Some(format!("{to} already owns it"))
                    } else if !self.plan.instances.contains_key(&to) {
                        Some(format!("{to} is not a site of this plan"))
                    } else if self.state.in_maintenance(&to) {
                        Some(format!(
                            "{to} is in maintenance: take it out of maintenance first"
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = refusal {
                        self.notes.push(Note::IntentRefused {
                            intent: i.kind,
                            by,
                            why,
                        });
                        continue;
                    }
                    let kind = if matches!(i.kind, IntentKind::Switchover { .. }) {
                        TransitionKind::Switchover { by, why: i.why }
                    } else {
                        TransitionKind::OperatorFailover { by, why: i.why }
                    };
                    self.start_transition(kind, to);
                }
                IntentKind::Retry => match &mut self.state.phase {
                    Phase::Transition(t) if t.halted.is_some() => {
                        t.halted = None;
                        t.attempt = 0;
                        t.retry_at = None;
                        t.entered = false;
                        self.notes.push(Note::Retrying { by, stage: t.stage });
                    }
                    _ => self.notes.push(Note::IntentRefused {
                        intent: i.kind,
                        by,
                        why: "nothing is halted".to_owned(),
                    }),
                },
                IntentKind::Abort => self.abort(i.kind, by),
            }
        }
    }

    // ----- steady -----

    fn steady(&mut self) {
        let owner = self.state.owner.clone();
        if self.health_and_triggers(&owner) {
            self.transition();
            return;
        }
        self.renew_dead_man(&owner);
        let verdicts = self.fence_watch(&owner);
        self.shield(&owner, &verdicts);
        let ready = self.readiness_watch(&owner);
        self.keep_service(&owner);
        self.notes.push(Note::Steady {
            owner,
            generation: self.state.generation,
            paused: self.state.paused,
            sites: verdicts,
            ready,
            maintenance: self.state.maintenance.clone(),
        });
    }

    fn health(&mut self, owner: &SiteId) -> Health {
        let keys = rules::keys(self.plan, owner, Role::Health);
        let issued = self.check_due(&keys);
        if issued > 0 {
            self.notes.push(Note::CheckingHealth { n: issued });
        }
        let mut bad = None;
        let mut lost = None;
        let mut pending = false;
        for k in &keys {
            let cap = self.capability(k);
            match self.obs(k) {
                Some(o) if self.fresh(o) => match o.value {
                    Observed::Holds => {}
                    Observed::NotHeld => bad = Some((format!("{cap} unhealthy at {}", o.at), o.at)),
                    Observed::Unknown => {
                        lost = Some((format!("{cap} unreadable at {}", o.at), o.at));
                    }
                },
                // A stale reading with a check on its way is waited for: the check's own
                // deadline turns a lost site into UNKNOWN soon enough, while an orchestrator
                // that is merely late (its checks queued behind others) must not read as a lost
                // owner and fail a healthy site over.
                Some(_) if self.busy(k) => pending = true,
                Some(o) => lost = Some((format!("{cap} last read at {}", o.at), self.now())),
                // A check that ended without a reading counts as unreadable.
                None if self.last_result(k).is_some() => {
                    lost = Some((format!("{cap} never read"), self.now()));
                }
                None => pending = true,
            }
        }
        match (bad, lost, pending) {
            (Some((b, at)), _, _) => Health::Bad(b, at),
            (None, Some((l, at)), _) => Health::Lost(l, at),
            (None, None, true) => Health::Pending,
            (None, None, false) => Health::Good,
        }
    }

    /// Tracks the owner's health; restarts it in place or starts a failover when due. Returns
    /// whether a transition started.
    fn health_and_triggers(&mut self, owner: &SiteId) -> bool {
        let health = self.health(owner);
        let now = self.now();
        let (detail, lost, reading_at) = match health {
            Health::Pending => return false,
            Health::Good => {
                if self.state.health != HealthTrack::default() {
                    self.change().health = HealthTrack::default();
                    self.notes.push(Note::HealthGood);
                }
                return false;
            }
            Health::Bad(d, at) => (d, false, at),
            Health::Lost(d, at) => (d, true, at),
        };
        // The bad period starts with the first bad reading's check, not with the decision
        // that saw it: a check's latency must not lengthen `failover_after`.
        let since = match self.state.health.bad_since {
            Some(t) => t,
            None => {
                let t = reading_at.min(now);
                self.change().health.bad_since = Some(t);
                t
            }
        };
        let recovery = rules::keys(self.plan, owner, Role::Recovery);
        let recovering = recovery.iter().any(|k| self.busy(k));
        let h = self.state.health.clone();
        let can_recover = !lost && !recovery.is_empty() && h.recoveries < self.plan.max_recoveries;
        if can_recover && !self.state.paused && !recovering {
            // The first restart once bad for `recovery_after`, the next `recovery_after` later.
            let last = h.last_recovery.unwrap_or(since);
            if self.elapsed(last, self.plan.recovery_after) {
                for k in &recovery {
                    self.issue(Action::Recover { binding: k.clone() });
                }
                let st = self.change();
                st.health.recoveries += 1;
                st.health.last_recovery = Some(now);
                self.notes.push(Note::Recovering {
                    detail,
                    n: h.recoveries + 1,
                    max: self.plan.max_recoveries,
                });
                return false;
            }
        }
        let (detail, definitive) = self.count_definitive(owner, detail);
        let due = (definitive || self.elapsed(since, self.plan.failover_after))
            && !recovering
            && !can_recover;
        if !due {
            self.notes.push(Note::HealthBad {
                detail,
                since,
                failover_at: since.plus(self.plan.failover_after),
            });
            return false;
        }
        if self.state.paused {
            self.notes.push(Note::WouldFailOver {
                detail,
                why: "the plan is paused".into(),
            });
            return false;
        }
        if !self.plan.auto_failover {
            if !self.state.health.alarmed {
                self.change().health.alarmed = true;
                self.issue(Action::Alarm {
                    site: Some(owner.clone()),
                    detail: format!("would fail over ({detail}) but auto_failover is off"),
                });
            }
            self.notes.push(Note::WouldFailOver {
                detail,
                why: "auto_failover is off".into(),
            });
            return false;
        }
        match self.choose_target(owner) {
            Ok(target) => {
                let cause = if lost {
                    format!("owner site {owner} lost ({detail})")
                } else {
                    detail
                };
                self.start_transition(TransitionKind::Failover { cause }, target);
                true
            }
            Err(why) => {
                self.notes.push(Note::WouldFailOver { detail, why });
                false
            }
        }
    }

    /// Counts the owner's new health readings toward `failover_after_definitive`; returns the
    /// detail (saying so once the count is reached) and whether it is.
    fn count_definitive(&mut self, owner: &SiteId, detail: String) -> (String, bool) {
        if self.plan.failover_after_definitive.is_none() {
            // Off: nothing to count, and no state to write for it.
            return (detail, false);
        }
        let keys = rules::keys(self.plan, owner, Role::Health);
        let mut track = self.state.health.clone();
        let fresh = keys
            .iter()
            .filter_map(|k| self.obs(k))
            .filter(|o| self.fresh(o));
        if definitive::count(&mut track, fresh) {
            self.change().health = track;
        }
        if !definitive::reached(&self.state.health, self.plan) {
            return (detail, false);
        }
        let n = self.state.health.definitive;
        (format!("{detail}, definitive {n} times in a row"), true)
    }

    /// The failover target when none is named: the first site, by plan priority, whose
    /// readiness passes. Issues readiness checks it still needs.
    fn choose_target(&mut self, owner: &SiteId) -> Result<SiteId, String> {
        let mut order: Vec<SiteId> = self
            .plan
            .priority
            .iter()
            .filter(|s| *s != owner && self.plan.instances.contains_key(*s))
            .cloned()
            .collect();
        for s in self.plan.sites() {
            if s != owner && !order.contains(s) {
                order.push(s.clone());
            }
        }
        // A site in maintenance is never a target; it is not even asked for its readiness.
        let (maintenance, order): (Vec<SiteId>, Vec<SiteId>) = order.into_iter().partition(|s| {
            self.state.in_maintenance(s)
                && self.rules.mutation != rules::Mutation::MaintenanceIgnored
        });
        let in_maintenance = || {
            let names: Vec<&str> = maintenance.iter().map(SiteId::as_str).collect();
            let verb = if names.len() == 1 { "is" } else { "are" };
            format!("{} {verb} in maintenance", names.join(", "))
        };
        if order.is_empty() {
            return Err(if maintenance.is_empty() {
                "no site to fail over to".to_owned()
            } else {
                format!("no site to fail over to: {}", in_maintenance())
            });
        }
        let mut why = Vec::new();
        for site in order {
            let keys = rules::keys(self.plan, &site, Role::Readiness);
            let mut ready = true;
            let mut pending = false;
            for k in &keys {
                match self.obs(k).filter(|o| self.fresh(o)) {
                    Some(o) if o.value == Observed::Holds => {}
                    Some(o) if !self.due(k) || self.busy(k) => {
                        ready = false;
                        why.push(format!(
                            "{site}: {} {}",
                            self.capability(k),
                            not_ready(o.value)
                        ));
                    }
                    _ => {
                        ready = false;
                        pending = true;
                        if !self.busy(k) {
                            self.issue(Action::Check { binding: k.clone() });
                        }
                    }
                }
            }
            if pending {
                return Err(format!("checking {site}'s readiness first"));
            }
            if ready {
                return Ok(site);
            }
        }
        let mut why = format!("no site is ready ({})", why.join(", "));
        if !maintenance.is_empty() {
            why.push_str(", and ");
            why.push_str(&in_maintenance());
        }
        Err(why)
    }

    fn start_transition(&mut self, kind: TransitionKind, target: SiteId) {
        let now = self.now();
        let term = self.s.leadership.term;
        let from = self.state.owner.clone();
        let stage = if matches!(kind, TransitionKind::Switchover { .. }) {
            Stage::Preflight
        } else {
            Stage::AppFences
        };
        self.notes.push(Note::Starting {
            kind: kind.clone(),
            from: from.clone(),
            target: target.clone(),
        });
        if stage != Stage::Preflight {
            // From now on no leader renews the old owner's dead-man switch.
            self.stop_renewals(&from);
        }
        let st = self.change();
        st.health = HealthTrack::default();
        st.phase = Phase::Transition(Transition {
            kind,
            from,
            target,
            started: now,
            stage,
            after_verify: Stage::Readiness,
            stage_started: now,
            attempt: 0,
            retry_at: None,
            term,
            pending: BTreeMap::new(),
            entered: false,
            halted: None,
            fenced: Vec::new(),
        });
    }

    /// Re-checks every fence of every site that does not own the plan; raises an alarm for a
    /// site that is no longer fenced, and drops evidence a fresh FAILED reading contradicts.
    fn fence_watch(&mut self, owner: &SiteId) -> Vec<SiteVerdict> {
        let mut out = Vec::new();
        for site in self.other_sites(owner) {
            let all = rules::keys(self.plan, &site, Role::Fence);
            let issued_before = self.commands.len();
            self.check_due(&all);
            let proving = rules::proving_fences(self.s.config, self.plan, &site);
            let checking = proving.iter().any(|k| {
                self.s.in_flight.values().any(|b| b == k)
                    || self.commands[issued_before..]
                        .iter()
                        .any(|c| c.action.binding() == Some(k))
            });
            let never_read = proving
                .iter()
                .any(|k| self.obs(k).is_none() && self.last_result(k).is_none());
            let v = self.judge_site(&site, None);
            if v.verdict == Verdict::Failed {
                let generation = self.state.generation;
                if self
                    .state
                    .evidence
                    .iter()
                    .any(|e| e.site == site && e.generation == generation)
                {
                    self.change().evidence.retain(|e| e.site != site);
                    self.notes
                        .push(Note::EvidenceContradicted { site: site.clone() });
                }
            }
            let judged = !checking && !never_read;
            // A site in maintenance is checked and shown, but an operator is at work there:
            // its state raises no alarm (it can never be promoted meanwhile, and the owner's
            // shield still goes up).
            let quiet = self.state.in_maintenance(&site);
            if v.verdict != Verdict::Fenced
                && judged
                && !quiet
                && !self.state.alarmed.contains(&site)
            {
                self.change().alarmed.insert(site.clone());
                self.issue(Action::Alarm {
                    site: Some(site.clone()),
                    detail: crate::reason::not_fenced(&v),
                });
            } else if v.verdict == Verdict::Fenced && self.state.alarmed.contains(&site) {
                self.change().alarmed.remove(&site);
            }
            out.push(v);
        }
        out
    }

    /// Checks the readiness of every site but the owner each interval, so operators see a
    /// failover target's state at all times and drivers that answer from a cache once their
    /// source is lost have a warm one. Read-only: it runs while paused, and a reading starts
    /// nothing by itself. Returns one summary per site that has readiness bindings.
    fn readiness_watch(&mut self, owner: &SiteId) -> Vec<(SiteId, String)> {
        let mut out = Vec::new();
        for site in self.other_sites(owner) {
            let keys = rules::keys(self.plan, &site, Role::Readiness);
            if keys.is_empty() {
                continue;
            }
            self.check_due(&keys);
            out.push((site, self.readiness_summary(&keys)));
        }
        out
    }

    /// "ready (replication.lag at 14:02:06)", "NOT READY (...)", "readiness UNKNOWN (...)":
    /// ready only when every binding reads ready, fresh.
    fn readiness_summary(&self, keys: &[BindingKey]) -> String {
        let mut ready = true;
        let mut worst = "ready";
        let mut parts = Vec::new();
        for k in keys {
            let cap = self.capability(k);
            match self.obs(k) {
                Some(o) if self.fresh(o) => {
                    if o.value != Observed::Holds {
                        ready = false;
                    }
                    if o.value == Observed::NotHeld {
                        worst = "NOT READY";
                    } else if o.value == Observed::Unknown && worst == "ready" {
                        worst = "readiness UNKNOWN";
                    }
                    parts.push(format!("{cap} {} at {}", not_ready(o.value), o.at));
                }
                Some(o) => {
                    ready = false;
                    if worst == "ready" {
                        worst = "readiness UNKNOWN";
                    }
                    parts.push(format!("{cap} stale, last read at {}", o.at));
                }
                None => {
                    ready = false;
                    if worst == "ready" {
                        worst = "readiness UNKNOWN";
                    }
                    parts.push(format!("{cap} not read yet"));
                }
            }
        }
        if ready {
            // Every part says "ready": keep the clause short.
            let short: Vec<String> = keys
                .iter()
                .filter_map(|k| {
                    self.obs(k)
                        .map(|o| format!("{} at {}", self.capability(k), o.at))
                })
                .collect();
            format!("ready ({})", short.join(", "))
        } else {
            format!("{worst} ({})", parts.join(", "))
        }
    }

    /// Raises the owner's shields while another site is not confirmed fenced; lowers them once
    /// every other site is.
    fn shield(&mut self, owner: &SiteId, verdicts: &[SiteVerdict]) {
        let want_up = verdicts.iter().any(|v| v.verdict != Verdict::Fenced);
        for k in rules::keys(self.plan, owner, Role::Shield) {
            if self.busy(&k) {
                continue;
            }
            let read_since_act = match (self.obs(&k), self.last_result(&k)) {
                (Some(o), Some(r)) => o.at >= r,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !read_since_act || self.due(&k) {
                self.issue(Action::Check { binding: k });
                continue;
            }
            let up = self.obs(&k).is_some_and(|o| o.value == Observed::Holds);
            if want_up && !up {
                self.issue(Action::RaiseShield { binding: k });
                self.notes.push(Note::Shield { up: true });
            } else if !want_up && up {
                self.issue(Action::LowerShield { binding: k });
                self.notes.push(Note::Shield { up: false });
            }
        }
    }

    // ----- transitions -----

    fn t(&self) -> Transition {
        self.state
            .transition()
            .cloned()
            .expect("called only during a transition")
    }

    fn set_t(&mut self, t: Transition) {
        self.change().phase = Phase::Transition(t);
    }

    fn transition(&mut self) {
        let t0 = self.t();
        match t0.stage {
            // Nothing is touched before the target proves ready: the owner keeps its
            // dead-man switch renewed meanwhile.
            Stage::Preflight => self.renew_dead_man(&t0.from),
            // Committed: the new owner's switches are armed while its service step runs.
            Stage::Service => {
                let owner = self.state.owner.clone();
                self.renew_dead_man(&owner);
            }
            // Renewals stopped: answers still arriving can only break the chain of proof.
            _ => {
                self.track_dead_man(&t0.from);
            }
        }
        for _ in 0..MAX_STEPS_PER_DECISION {
            let mut t = self.t();
            if let Some(h) = &t.halted {
                self.notes.push(Note::Halted {
                    target: t.target.clone(),
                    stage: t.stage,
                    why: h.clone(),
                });
                return;
            }
            if self.state.paused {
                self.notes.push(Note::Holding {
                    target: t.target.clone(),
                    stage: t.stage,
                });
                return;
            }
            if t.entered && t.term != self.s.leadership.term {
                // A new leader repeats the step it found under way: every step is idempotent.
                self.notes.push(Note::NewLeaderRepeats {
                    term: self.s.leadership.term,
                    stage: t.stage,
                });
                t.entered = false;
            }
            if !t.entered
                && let Some(at) = t.retry_at.filter(|at| *at > self.now())
            {
                self.notes.push(Note::RetryWaiting {
                    target: t.target.clone(),
                    stage: t.stage,
                    at,
                });
                return;
            }
            if !t.entered {
                match self.enter(&mut t) {
                    Some(true) => {
                        self.set_t(t);
                        return;
                    }
                    Some(false) => {
                        self.set_t(t);
                    }
                    None => return,
                }
                continue;
            }
            match self.judge(&t) {
                Next::Wait => return,
                Next::Advance(stage) => {
                    if !(t.stage == Stage::Fences && stage == Stage::Verify) {
                        t.attempt = 0;
                    }
                    t.stage = stage;
                    t.entered = false;
                    t.pending.clear();
                    self.set_t(t);
                }
                Next::Retry(stage, why) => {
                    t.attempt += 1;
                    let at = self.now().plus(self.plan.interval);
                    t.retry_at = Some(at);
                    if stage == Stage::Service {
                        self.notes.push(Note::ServiceRetry {
                            why,
                            target: t.target.clone(),
                            at,
                            attempt: t.attempt + 1,
                        });
                    } else {
                        self.notes.push(Note::Retry {
                            why,
                            stage,
                            at,
                            attempt: t.attempt + 1,
                            of: self.plan.max_retries + 1,
                        });
                    }
                    t.stage = stage;
                    t.entered = false;
                    t.pending.clear();
                    self.set_t(t);
                    return;
                }
                Next::Halt(why) => {
                    self.issue(Action::Alarm {
                        site: Some(t.target.clone()),
                        detail: format!(
                            "moving to {} halted at {}: {why}",
                            t.target,
                            t.stage.as_str()
                        ),
                    });
                    self.notes.push(Note::Halted {
                        target: t.target.clone(),
                        stage: t.stage,
                        why: why.clone(),
                    });
                    t.halted = Some(why);
                    self.set_t(t);
                    return;
                }
                Next::Steady => {
                    self.change().phase = Phase::Steady;
                    self.notes.push(Note::Done {
                        owner: self.state.owner.clone(),
                        generation: self.state.generation,
                    });
                    return;
                }
            }
        }
        self.notes.push(Note::StepLimit);
    }

    /// Whether every site but the target reads FENCED (or has evidence) now.
    fn guard(&mut self, t: &Transition) -> Result<(), String> {
        let bad: Vec<String> = self
            .other_sites(&t.target)
            .iter()
            .map(|s| self.judge_site(s, None))
            .filter(|v| v.verdict != Verdict::Fenced)
            .map(|v| crate::reason::not_fenced(&v))
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join(", "))
        }
    }

    /// The commands a step issues.
    fn stage_actions(&self, t: &Transition) -> Vec<Action> {
        let others = self.other_sites(&t.target);
        let mut out = Vec::new();
        match t.stage {
            Stage::Preflight => {
                for k in rules::keys(self.plan, &t.target, Role::Readiness) {
                    out.push(Action::Check { binding: k });
                }
            }
            Stage::Readiness => {
                // In a failover, a fresh ready reading from the readiness watch stands (the
                // source may be gone by now); everything else is read again in this step. A
                // planned switchover always reads again: it wants the state after the owner
                // stopped.
                let switchover = matches!(t.kind, TransitionKind::Switchover { .. });
                for k in rules::keys(self.plan, &t.target, Role::Readiness) {
                    if switchover || !self.ready_fresh(&k) {
                        out.push(Action::Check { binding: k });
                    }
                }
            }
            Stage::AppFences | Stage::Fences => {
                let app = t.stage == Stage::AppFences;
                for s in &others {
                    for k in rules::keys(self.plan, s, Role::Fence) {
                        if (self.level(&k) == Some(FenceLevel::Application)) == app {
                            out.push(Action::Fence { binding: k });
                        }
                    }
                }
            }
            Stage::Verify => {
                // Every fence is read back, so the operator sees each; only the required
                // ones decide (and only they are waited for).
                for s in &others {
                    for k in rules::keys(self.plan, s, Role::Fence) {
                        out.push(Action::Check { binding: k });
                    }
                }
            }
            Stage::Unfence => {
                if self.plan.unfence_on_promote {
                    for k in rules::keys(self.plan, &t.target, Role::Fence) {
                        if rules::unfence_capability(self.s.config, self.plan, &k).is_some() {
                            out.push(Action::Unfence { binding: k });
                        }
                    }
                }
            }
            Stage::Switchover => {
                for k in rules::keys(self.plan, &t.target, Role::Switchover) {
                    out.push(Action::Switchover { binding: k });
                }
            }
            Stage::Commit => {}
            Stage::Service => {
                for i in 0..self.plan.service.len() {
                    out.push(Action::Service {
                        binding: BindingKey::service(i),
                        site: t.target.clone(),
                    });
                }
            }
        }
        out
    }

    /// Enters `t.stage`: checks its guard and issues its commands. `Some(true)` when commands
    /// were issued (wait for them), `Some(false)` when the step has none (judge it at once),
    /// `None` when it must wait before it can start.
    fn enter(&mut self, t: &mut Transition) -> Option<bool> {
        let guarded = matches!(
            t.stage,
            Stage::Readiness | Stage::Unfence | Stage::Switchover | Stage::Commit | Stage::Service
        );
        if guarded && let Err(why) = self.guard(t) {
            // The proof went stale or was contradicted: read the fences back again.
            self.notes.push(Note::Reverify {
                stage: t.stage,
                why,
            });
            t.after_verify = t.stage;
            t.stage = Stage::Verify;
            t.entered = false;
            t.pending.clear();
            return Some(false);
        }
        if t.stage == Stage::Commit {
            self.commit(t);
            return None;
        }
        let actions = self.stage_actions(t);
        if let Some(k) = actions
            .iter()
            .filter_map(Action::binding)
            .find(|k| self.busy(k))
        {
            self.notes.push(Note::WaitingBusy {
                binding: k.clone(),
                stage: t.stage,
            });
            return None;
        }
        t.entered = true;
        t.retry_at = None;
        t.stage_started = self.now();
        t.term = self.s.leadership.term;
        t.pending.clear();
        let n = actions.len();
        for a in &actions {
            // A fence at the site given up that does not read holding, fresh: this
            // transition takes it, and an abort before the switchover may undo it. One that
            // already held stays as it was.
            if let Action::Fence { binding } = a
                && binding.site.as_ref() == Some(&t.from)
                && !self
                    .obs(binding)
                    .is_some_and(|o| o.value == Observed::Holds && self.fresh(o))
                && !t.fenced.contains(binding)
            {
                t.fenced.push(binding.clone());
            }
        }
        for a in actions {
            let key = a.binding().cloned().expect("stage actions have bindings");
            let op = self.issue(a);
            t.pending.insert(key, op);
        }
        if n > 0 {
            self.notes.push(Note::Step {
                stage: t.stage,
                target: t.target.clone(),
                what: self.describe(t),
            });
        }
        Some(n > 0)
    }

    fn describe(&self, t: &Transition) -> String {
        let mut v: Vec<String> = t
            .pending
            .keys()
            .map(|k| {
                format!(
                    "{} {}",
                    k.site.as_ref().map_or("service", |s| s.as_str()),
                    self.capability(k)
                )
            })
            .collect();
        v.dedup();
        v.join(", ")
    }

    fn commit(&mut self, t: &Transition) {
        let old = self.state.generation;
        let now = self.now();
        let generation = old.next();
        let target = t.target.clone();
        let mut nt = t.clone();
        nt.stage = Stage::Service;
        nt.entered = false;
        nt.attempt = 0;
        nt.pending.clear();
        let st = self.change();
        // Evidence that proved the other sites fenced carries into the new generation: it
        // is what the new owner stands on.
        for e in &mut st.evidence {
            if e.site != target && e.generation == old && (!e.carried || e.at >= t.started) {
                e.generation = generation;
                e.carried = true;
            }
        }
        st.evidence.retain(|e| e.generation == generation);
        st.owner = target.clone();
        st.generation = generation;
        st.owner_since = now;
        st.renewals_stopped.remove(&target);
        st.dead_man_armed.clear();
        st.dead_man_verified.clear();
        st.dead_man_alarmed.clear();
        st.alarmed.clear();
        st.health = HealthTrack::default();
        st.phase = Phase::Transition(nt);
        self.notes.push(Note::Committed {
            owner: target,
            generation,
        });
    }

    /// Judges the pending operations of the step.
    fn pending_status(&self, t: &Transition) -> Judged {
        let mut done = Vec::new();
        let mut waiting = 0;
        let timeout = t.stage_started.plus(self.plan.fence_timeout);
        let hard = t.stage_started.plus(self.plan.fence_timeout * 2);
        let proving: Vec<BindingKey> = match t.stage {
            Stage::Verify => self
                .other_sites(&t.target)
                .iter()
                .flat_map(|s| rules::proving_fences(self.s.config, self.plan, s))
                .collect(),
            _ => Vec::new(),
        };
        let pending = t
            .pending
            .iter()
            .filter(|(k, _)| t.stage != Stage::Verify || proving.contains(k));
        let n = pending.clone().count();
        for (k, op) in pending {
            match self.s.results.get(op) {
                Some(r) => done.push((k.clone(), r.outcome)),
                None if self.s.in_flight.contains_key(op) && self.now() < hard => waiting += 1,
                None if !self.s.in_flight.contains_key(op) && self.now() < timeout => waiting += 1,
                None => done.push((k.clone(), Outcome::Unknown)),
            }
        }
        if waiting > 0 {
            Judged::Waiting(waiting, n)
        } else {
            Judged::Finished(done)
        }
    }

    fn judge(&mut self, t: &Transition) -> Next {
        let finished = match self.pending_status(t) {
            Judged::Waiting(w, of) => {
                self.notes.push(Note::Waiting {
                    stage: t.stage,
                    target: t.target.clone(),
                    waiting: w,
                    of,
                });
                return Next::Wait;
            }
            Judged::Finished(f) => f,
        };
        let failed: Vec<String> = finished
            .iter()
            .filter(|(_, o)| *o != Outcome::Done)
            .map(|(k, o)| format!("{} {} {}", k, self.capability(k), outcome_word(*o)))
            .collect();
        let retries_left = t.attempt < self.plan.max_retries;
        let retry_or_halt = |stage: Stage, why: String| {
            if retries_left {
                Next::Retry(stage, why)
            } else {
                Next::Halt(format!("{why}; {} attempts made", t.attempt + 1))
            }
        };
        match t.stage {
            Stage::Preflight => match self.readiness(t) {
                Ok(()) => {
                    // The owner is about to be touched: renewals of its switch stop here.
                    self.stop_renewals(&t.from);
                    Next::Advance(Stage::AppFences)
                }
                Err(why) => {
                    self.change().renewals_stopped.remove(&t.from);
                    self.notes.push(Note::SwitchoverRefused {
                        target: t.target.clone(),
                        why,
                    });
                    Next::Steady
                }
            },
            Stage::AppFences => {
                if !failed.is_empty() {
                    self.notes.push(Note::SecondaryFailed {
                        what: failed.join(", "),
                    });
                }
                Next::Advance(Stage::Fences)
            }
            Stage::Fences => {
                if !failed.is_empty() {
                    self.notes.push(Note::SecondaryFailed {
                        what: failed.join(", "),
                    });
                }
                Next::Advance(Stage::Verify)
            }
            Stage::Verify => self.judge_verify(t, retries_left),
            Stage::Readiness => match self.readiness(t) {
                Ok(()) => Next::Advance(Stage::Unfence),
                Err(why) => retry_or_halt(Stage::Readiness, why),
            },
            // The owner is committed: the service step is retried, an interval apart, until
            // the service points at it. Halting would leave clients at a fenced site.
            Stage::Service if !failed.is_empty() => Next::Retry(Stage::Service, failed.join(", ")),
            Stage::Unfence | Stage::Switchover | Stage::Service => {
                if !failed.is_empty() {
                    return retry_or_halt(t.stage, failed.join(", "));
                }
                match t.stage {
                    Stage::Unfence => Next::Advance(Stage::Switchover),
                    Stage::Switchover => Next::Advance(Stage::Commit),
                    _ => Next::Steady,
                }
            }
            Stage::Commit => Next::Advance(Stage::Service),
        }
    }

    /// Whether `key` reads ready, fresh.
    fn ready_fresh(&self, key: &BindingKey) -> bool {
        self.obs(key)
            .is_some_and(|o| o.value == Observed::Holds && self.fresh(o))
    }

    fn readiness(&self, t: &Transition) -> Result<(), String> {
        let mut bad = Vec::new();
        for k in rules::keys(self.plan, &t.target, Role::Readiness) {
            let cap = self.capability(&k);
            // What this step checked must be read in this step; what it did not check (a
            // fresh ready reading of the watch) must still be fresh now.
            let from_watch = !t.pending.contains_key(&k);
            match self.obs(&k) {
                Some(o) if (from_watch || o.at >= t.stage_started) && self.fresh(o) => {
                    if o.value != Observed::Holds {
                        bad.push(format!("{cap} {}", not_ready(o.value)));
                    }
                }
                _ => bad.push(format!("{cap} not read")),
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("{} not ready: {}", t.target, bad.join(", ")))
        }
    }

    fn judge_verify(&mut self, t: &Transition, retries_left: bool) -> Next {
        let mut unproven = Vec::new();
        let mut waiting_dead_man = None;
        for site in self.other_sites(&t.target) {
            let v = self.judge_site(&site, Some(t.stage_started));
            if v.verdict == Verdict::Fenced {
                continue;
            }
            if v.verdict == Verdict::Unknown {
                match self.dead_man_fires_by(&site) {
                    Some((by, last_verified)) if by <= self.now() => {
                        let generation = self.state.generation;
                        let stopped = self.state.renewals_stopped[&site];
                        let now = self.now();
                        self.change().evidence.push(Evidence {
                            site: site.clone(),
                            generation,
                            kind: EvidenceKind::DeadManExpired {
                                renewals_stopped: stopped,
                                fired_by: by,
                                last_verified,
                            },
                            at: now,
                            carried: false,
                        });
                        self.notes.push(Note::DeadManEvidence {
                            site: site.clone(),
                            by,
                        });
                        // The evidence now stands: the site is judged by it.
                        self.judge_site(&site, Some(t.stage_started));
                        continue;
                    }
                    Some((by, _)) => waiting_dead_man = Some((site.clone(), by)),
                    None => {}
                }
            }
            unproven.push(crate::reason::not_fenced(&v));
        }
        if unproven.is_empty() {
            return Next::Advance(t.after_verify);
        }
        if let Some((site, by)) = waiting_dead_man {
            self.notes.push(Note::WaitingDeadMan {
                site,
                by,
                unproven: unproven.join(", "),
            });
            return Next::Wait;
        }
        let why = unproven.join(", ");
        if retries_left {
            Next::Retry(Stage::Fences, why)
        } else {
            Next::Halt(format!(
                "{why}; {} attempts made: confirm fenced, retry or abort",
                t.attempt + 1
            ))
        }
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Done => "done",
        Outcome::Failed => "FAILED",
        Outcome::Unknown => "UNKNOWN",
    }
}

fn not_ready(o: Observed) -> &'static str {
    match o {
        Observed::Holds => "ready",
        Observed::NotHeld => "NOT READY",
        Observed::Unknown => "UNKNOWN",
    }
}
