//! The owner's health: its readings, the in-place recovery, and the failover triggers
//! (`failover_after`, `failover_after_definitive`, `auto_failover`).

use qfence_model::{Role, SiteId};

use super::Cx;
use crate::definitive;
use crate::reason::Note;
use crate::rules;
use crate::state::{HealthTrack, TransitionKind};
use crate::types::{Action, Millis, Observed};

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

impl Cx<'_, '_> {
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
    pub(super) fn health_and_triggers(&mut self, owner: &SiteId) -> bool {
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
        match self.choose_target() {
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
    pub(super) fn count_definitive(&mut self, owner: &SiteId, detail: String) -> (String, bool) {
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
}
