//! Judging a step once its operations are done (or timed out): advance, retry, halt or
//! go back to steady; the verify step's proof, the dead-man evidence included.

use qfence_model::{Role, Verdict};

use super::Cx;
use crate::reason::Note;
use crate::rules;
use crate::state::{Evidence, EvidenceKind, Stage, Transition};
use crate::types::{BindingKey, Observed, Outcome};

/// What judging a step's operations found.
pub(super) enum Judged {
    Waiting(usize, usize),
    Finished(Vec<(BindingKey, Outcome)>),
}

/// After judging a step.
pub(super) enum Next {
    Wait,
    Advance(Stage),
    Retry(Stage, String),
    Halt(String),
    /// A planned switchover's resource-level proof did not come: fence the required fences.
    Escalate(String),
    Steady,
}

impl Cx<'_, '_> {
    /// Judges the pending operations of the step.
    pub(super) fn pending_status(&self, t: &Transition) -> Judged {
        let mut done = Vec::new();
        let mut waiting = 0;
        let timeout = t.stage_started.plus(self.plan.fence_timeout);
        let hard = t.stage_started.plus(self.plan.fence_timeout * 2);
        // Verify waits for the read-backs that decide: a site's resource-level fences where
        // a planned switchover stops its resource, its required ones otherwise.
        let proving: Vec<BindingKey> = match t.stage {
            Stage::Verify => self
                .other_sites(&t.target)
                .iter()
                .flat_map(|s| {
                    if self.stops_resource(t, s) {
                        rules::resource_fences(self.s.config, self.plan, s)
                    } else {
                        rules::proving_fences(self.s.config, self.plan, s)
                    }
                })
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
        // Named in the configuration's order, as before keys had ids.
        done.sort_by(|(a, _), (b, _)| a.place().cmp(&b.place()));
        if waiting > 0 {
            Judged::Waiting(waiting, n)
        } else {
            Judged::Finished(done)
        }
    }

    pub(super) fn judge(&mut self, t: &Transition) -> Next {
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
                    // The owner is about to be touched: renewals of its switch stop here,
                    // unless only its resource is to be stopped (then at an escalation).
                    if !self.keeps_host_running(t) {
                        self.stop_renewals(&t.from);
                    }
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
    pub(super) fn ready_fresh(&self, key: &BindingKey) -> bool {
        self.obs(key)
            .is_some_and(|o| o.value == Observed::Holds && self.fresh(o))
    }

    pub(super) fn readiness(&self, t: &Transition) -> Result<(), String> {
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

    pub(super) fn judge_verify(&mut self, t: &Transition, retries_left: bool) -> Next {
        let mut unproven = Vec::new();
        let mut not_stopped = Vec::new();
        let mut waiting_dead_man = None;
        for site in self.other_sites(&t.target) {
            let v = self.judge_site(&site, Some(t.stage_started));
            if v.verdict == Verdict::Fenced {
                continue;
            }
            if self.stops_resource(t, &site) {
                if let Err(why) = self.resource_proof(t, &site, Some(t.stage_started)) {
                    not_stopped.push(why);
                }
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
        if !not_stopped.is_empty() {
            // No retry of the resource fences: the proof had its fence timeout, and the
            // required fences are what a site that does not stop its resource gets.
            return Next::Escalate(not_stopped.join(", "));
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

pub(super) fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Done => "done",
        Outcome::Failed => "FAILED",
        Outcome::Unknown => "UNKNOWN",
    }
}

pub(super) fn not_ready(o: Observed) -> &'static str {
    match o {
        Observed::Holds => "ready",
        Observed::NotHeld => "NOT READY",
        Observed::Unknown => "UNKNOWN",
    }
}
