//! A transition under way, step by step as far as it can go without waiting: each step is
//! entered (its guard checked, its commands issued) and later judged (`judge.rs`), then
//! advanced, retried, halted or finished.

use qfence_model::{FenceLevel, Role, Verdict};

use super::Cx;
use super::judge::Next;
use crate::reason::Note;
use crate::rules;
use crate::state::{HealthTrack, Phase, Stage, Transition, TransitionKind};
use crate::types::{Action, Observed};

const MAX_STEPS_PER_DECISION: usize = 24;

impl Cx<'_, '_> {
    pub(super) fn t(&self) -> Transition {
        self.state
            .transition()
            .cloned()
            .expect("called only during a transition")
    }

    pub(super) fn set_t(&mut self, t: Transition) {
        self.change().phase = Phase::Transition(t);
    }

    pub(super) fn transition(&mut self) {
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
            // A switchover that stops only the resource leaves the owner's host running: its
            // switch is renewed up to the commit, which disarms it (escalating stops renewals).
            // The commit step renews nothing, so no renewal can land after the disarm.
            Stage::Commit if self.keeps_host_running(&t0) => {}
            _ if self.keeps_host_running(&t0) => self.renew_dead_man(&t0.from),
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
            let next = self.judge(&t);
            if !self.follow(t, next) {
                return;
            }
        }
        self.notes.push(Note::StepLimit);
    }

    /// Follows what judging the step found; whether the transition may go on at once.
    fn follow(&mut self, mut t: Transition, next: Next) -> bool {
        match next {
            Next::Wait => false,
            Next::Advance(stage) => {
                if !(t.stage == Stage::Fences && stage == Stage::Verify) {
                    t.attempt = 0;
                }
                t.stage = stage;
                t.entered = false;
                t.pending.clear();
                self.set_t(t);
                true
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
                false
            }
            Next::Escalate(why) => {
                // The resource-level proof did not come: fence and verify the required
                // fences from here on, with the retries of a failover. The owner's dead-man
                // switch, renewed so far, is left to fire from now on.
                self.stop_renewals(&t.from);
                self.notes.push(Note::Escalating {
                    target: t.target.clone(),
                    why,
                });
                t.escalated = true;
                t.attempt = 0;
                t.retry_at = None;
                t.stage = Stage::Fences;
                t.entered = false;
                t.pending.clear();
                self.set_t(t);
                true
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
                false
            }
            Next::Steady => {
                self.change().phase = Phase::Steady;
                self.notes.push(Note::Done {
                    owner: self.state.owner.clone(),
                    generation: self.state.generation,
                });
                false
            }
        }
    }

    /// Whether every site but the target reads FENCED (or has evidence) now; in a planned
    /// switchover, a site whose resource it stops may instead have its resource proven
    /// stopped in this transition (`resource.rs`).
    pub(super) fn guard(&mut self, t: &Transition) -> Result<(), String> {
        let mut bad = Vec::new();
        for s in self.other_sites(&t.target) {
            let v = self.judge_site(&s, None);
            if v.verdict == Verdict::Fenced {
                continue;
            }
            if self.stops_resource(t, &s) {
                if let Err(why) = self.resource_proof(t, &s, None) {
                    bad.push(why);
                }
                continue;
            }
            bad.push(crate::reason::not_fenced(&v));
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join(", "))
        }
    }

    /// The commands a step issues.
    pub(super) fn stage_actions(&self, t: &Transition) -> Vec<Action> {
        let others = self.other_sites(&t.target);
        let mut out = Vec::new();
        match t.stage {
            Stage::Preflight => {
                for k in rules::keys(self.plan, &t.target, Role::Readiness) {
                    out.push(Action::check(k));
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
                        out.push(Action::check(k));
                    }
                }
            }
            Stage::AppFences | Stage::Fences => {
                let app = t.stage == Stage::AppFences;
                for s in &others {
                    // A planned switchover stops the resource, not the site: only the
                    // resource-level fences, unless it escalated.
                    let keys = if self.stops_resource(t, s) {
                        rules::resource_fences(self.s.config, self.plan, s)
                    } else {
                        rules::keys(self.plan, s, Role::Fence)
                    };
                    for k in keys {
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
                        out.push(Action::check(k));
                    }
                    // The planted bug's other half: read the hot standby with the fences.
                    if self.rules.mutation == crate::rules::Mutation::HotStandbyIsAFence {
                        for k in rules::keys(self.plan, s, Role::Standby) {
                            out.push(Action::check(k));
                        }
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
                for k in rules::service_keys(self.plan) {
                    out.push(Action::Service {
                        binding: k,
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
    pub(super) fn enter(&mut self, t: &mut Transition) -> Option<bool> {
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
            let disarm = self.disarm_keys(t);
            if let Some(k) = disarm.iter().find(|k| self.busy(k)) {
                // A renewal still under way could land after the disarm and start the
                // countdown again: commit once it has answered.
                self.notes.push(Note::WaitingBusy {
                    binding: k.clone(),
                    stage: t.stage,
                });
                return None;
            }
            self.commit(t);
            for binding in disarm {
                self.issue(Action::DisarmDeadMan { binding });
            }
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

    /// Whether `t` is a planned switchover that proves the owner's resource stopped and leaves
    /// its host running (not escalated to the required fences).
    pub(super) fn keeps_host_running(&self, t: &Transition) -> bool {
        self.stops_resource(t, &t.from)
    }

    /// The former owner's dead-man switches the commit of `t` disarms: those of a host a
    /// switchover leaves running.
    fn disarm_keys(&self, t: &Transition) -> Vec<crate::types::BindingKey> {
        if self.keeps_host_running(t) {
            rules::keys(self.plan, &t.from, Role::DeadMan)
        } else {
            Vec::new()
        }
    }

    pub(super) fn describe(&self, t: &Transition) -> String {
        let mut keys: Vec<_> = t.pending.keys().collect();
        keys.sort_by_key(|k| k.place());
        let mut v: Vec<String> = keys
            .into_iter()
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

    pub(super) fn commit(&mut self, t: &Transition) {
        let old = self.state.generation;
        let now = self.now();
        let generation = old.next();
        let target = t.target.clone();
        let mut nt = t.clone();
        nt.stage = Stage::Service;
        nt.entered = false;
        nt.attempt = 0;
        nt.pending.clear();
        let stopped: Vec<String> = self
            .other_sites(&target)
            .iter()
            .filter_map(|s| self.judged.get(s))
            .filter(|v| v.basis == rules::Basis::ResourceStopped)
            .flat_map(|v| {
                v.readings
                    .iter()
                    .map(|r| format!("{} {} {}", v.site, r.capability, r.verdict))
            })
            .collect();
        // Only a switchover that stopped the resource leaves copies to rejoin: it ran no
        // power fence (it did not escalate) at a site with resource-level fences. After a
        // failover or an escalation the site was not trusted, and waits for an operator.
        let rejoin: std::collections::BTreeSet<qfence_model::SiteId> =
            if matches!(t.kind, TransitionKind::Switchover { .. }) && !t.escalated {
                self.other_sites(&target)
                    .into_iter()
                    .filter(|s| !rules::resource_fences(self.s.config, self.plan, s).is_empty())
                    .collect()
            } else {
                Default::default()
            };
        // Every site given up that can rejoin waits to be proven a replica of the new owner.
        let awaiting: Vec<qfence_model::SiteId> = self
            .other_sites(&target)
            .into_iter()
            .filter(|s| !rules::keys(self.plan, s, Role::Rejoin).is_empty())
            .collect();
        let st = self.change();
        for s in awaiting {
            st.awaiting_rejoin.insert(
                s,
                crate::state::AwaitingRejoin {
                    since: now,
                    attempts: 0,
                },
            );
        }
        st.awaiting_rejoin.remove(&target);
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
        st.rejoin = rejoin;
        st.phase = Phase::Transition(nt);
        self.notes.push(Note::Committed {
            owner: target,
            generation,
        });
        if !stopped.is_empty() {
            self.notes.push(Note::ResourceStopped {
                what: stopped.join(", "),
            });
        }
    }
}
