//! The owner's dead-man switches: armed when a site becomes the owner, renewed every interval,
//! every answer read back, and a chain of proof kept for the day renewals stop.
//!
//! Each arm (the driver's `perform`) and renewal (`renew`) is read back by the runtime and
//! reported as the binding's observation: `Holds` = the timer runs with the countdown qfence
//! set. Its outcome is Done only when the call succeeded and the read-back holds.
//!
//! - `dead_man_armed` holds while the latest answer of every switch is such a Done. Anything
//!   else takes it away at once, with an alarm.
//! - `dead_man_verified` is the chain of proof: when a verified answer last showed every switch
//!   running with qfence's countdown, while nothing since showed one stopped, refused or set to
//!   another countdown. An UNKNOWN renewal leaves the chain standing (a renewal cannot stop a
//!   running switch; at worst it did not take, and the switch fires sooner), so a site whose
//!   BMC nobody can reach any more can still be proven stopped by its switch. A FAILED answer
//!   or a not-running reading breaks it, and only an arm starts a new one.
//! - Arm while there is no chain; renew while there is (an arm sets the countdown and may stop
//!   the timer before it starts it again, so an arm whose answer is lost is no link).

use std::time::Duration;

use qfence_model::{Role, SiteId};

use super::Cx;
use super::judge::outcome_word;
use crate::reason::Note;
use crate::rules::{self, Mutation};
use crate::types::{Action, BindingKey, Millis, Observed, OpResult, Outcome, ms};

/// What the latest answer for one dead-man binding shows.
enum Switch {
    /// No arm or renewal answered since the site became the owner.
    Never,
    /// Done, with a read-back showing it running with qfence's countdown, at this time.
    Verified(Millis),
    /// Not known: unreachable, timed out, not started before its deadline.
    Unsure(String),
    /// Refused, or read back stopped or set to another countdown.
    Broken(String),
}

impl Cx<'_, '_> {
    /// The latest result for `key` since the owner changed.
    fn latest_result(&self, key: &BindingKey) -> Option<&OpResult> {
        let since = self.state.owner_since;
        self.s
            .results
            .values()
            .filter(|r| r.binding.as_ref() == Some(key) && r.at >= since)
            .max_by_key(|r| r.at)
    }

    fn switch(&self, key: &BindingKey) -> Switch {
        let since = self.state.owner_since;
        let cap = self.capability(key);
        let latest = self.latest_result(key);
        let obs = self.obs(key).filter(|o| o.at >= since);
        let obs_newer = obs.filter(|o| latest.is_none_or(|r| o.at >= r.at));
        if let Some(r) = latest
            && r.outcome == Outcome::Failed
        {
            return Switch::Broken(format!("{cap} FAILED at {}", r.at));
        }
        if let Some(o) = obs_newer
            && o.value == Observed::NotHeld
        {
            return Switch::Broken(format!(
                "{cap} reads not running ({}) at {}",
                o.detail, o.at
            ));
        }
        match (latest, obs) {
            (Some(r), Some(o)) if r.outcome == Outcome::Done && o.value == Observed::Holds => {
                Switch::Verified(r.at)
            }
            (None, Some(o)) if o.value == Observed::Holds => Switch::Verified(o.at),
            (None, None) => Switch::Never,
            (Some(r), _) => {
                Switch::Unsure(format!("{cap} {} at {}", outcome_word(r.outcome), r.at))
            }
            (None, Some(o)) => Switch::Unsure(format!("{cap} unreadable at {}", o.at)),
        }
    }

    /// The latest verified answer of every switch of `keys` still in the results (the
    /// earliest of them), if each has one.
    fn latest_verified(&self, keys: &[BindingKey]) -> Option<Millis> {
        let since = self.state.owner_since;
        keys.iter()
            .map(|k| {
                self.s
                    .results
                    .values()
                    .filter(|r| {
                        r.binding.as_ref() == Some(k) && r.at >= since && r.outcome == Outcome::Done
                    })
                    .map(|r| r.at)
                    .max()
            })
            .collect::<Option<Vec<Millis>>>()?
            .into_iter()
            .min()
    }

    /// Reads the answers for `site`'s switches into the state: armed or not, the chain kept
    /// or broken, an alarm once per trouble. Returns whether the chain broke in this decision
    /// (arm again at once).
    pub(super) fn track_dead_man(&mut self, site: &SiteId) -> bool {
        let keys = rules::keys(self.plan, site, Role::DeadMan);
        if keys.is_empty() {
            return false;
        }
        let mut verified: Option<Millis> = None;
        let (mut broken, mut unsure, mut never) = (Vec::new(), Vec::new(), false);
        for k in &keys {
            match self.switch(k) {
                Switch::Verified(at) => verified = Some(verified.map_or(at, |v| v.min(at))),
                Switch::Unsure(w) => unsure.push(w),
                Switch::Broken(w) => broken.push(w),
                Switch::Never => never = true,
            }
        }
        let armed = self.state.dead_man_armed.contains(site);
        let chain = self.state.dead_man_verified.contains_key(site);
        if broken.is_empty() && unsure.is_empty() {
            let Some(at) = verified.filter(|_| !never) else {
                return false;
            };
            if !armed {
                self.change().dead_man_armed.insert(site.clone());
            }
            if !armed || !chain {
                self.change().dead_man_verified.insert(site.clone(), at);
            }
            if self.state.dead_man_alarmed.contains(site) {
                self.change().dead_man_alarmed.remove(site);
            }
            return false;
        }
        if self.rules.mutation == Mutation::DeadManArmedSticky {
            return false;
        }
        let is_broken = !broken.is_empty();
        let why = broken
            .into_iter()
            .chain(unsure)
            .collect::<Vec<_>>()
            .join(", ");
        if armed {
            self.change().dead_man_armed.remove(site);
        }
        if is_broken {
            if chain {
                self.change().dead_man_verified.remove(site);
            }
        } else if armed
            && let Some(at) = self.latest_verified(&keys)
            && self
                .state
                .dead_man_verified
                .get(site)
                .is_none_or(|v| *v < at)
        {
            // The first doubt: keep the chain's latest link, which the results still hold.
            self.change().dead_man_verified.insert(site.clone(), at);
        }
        if !self.state.dead_man_alarmed.contains(site) {
            self.change().dead_man_alarmed.insert(site.clone());
            let next = if is_broken {
                "arming it again"
            } else {
                "renewing it again"
            };
            self.issue(Action::Alarm {
                site: Some(site.clone()),
                detail: format!(
                    "{site}'s dead-man switch is not confirmed armed ({why}): it proves nothing \
                     until it is; {next}"
                ),
            });
        }
        self.notes.push(Note::DeadManTrouble {
            site: site.clone(),
            why,
            broken: is_broken,
        });
        is_broken && chain
    }

    /// Tracks the owner's switches, then arms (no chain) or renews (a chain stands) each one
    /// that is due: never answered, answered an interval ago, or just found broken.
    pub(super) fn renew_dead_man(&mut self, owner: &SiteId) {
        let rearm_now = self.track_dead_man(owner);
        let interval = self.plan.interval;
        let not_after = std::cmp::min(self.now().plus(interval), self.s.leadership.lease_until);
        let arming = !self.state.dead_man_verified.contains_key(owner);
        let mut n = 0;
        for k in rules::keys(self.plan, owner, Role::DeadMan) {
            let due = rearm_now
                || self
                    .last_result(&k)
                    .is_none_or(|t| t.plus(interval) <= self.now());
            if due && !self.busy(&k) {
                self.issue(if arming {
                    Action::ArmDeadMan {
                        binding: k,
                        not_after,
                    }
                } else {
                    Action::RenewDeadMan {
                        binding: k,
                        not_after,
                    }
                });
                n += 1;
            }
        }
        if n > 0 {
            if self.state.renewals_stopped.contains_key(owner) {
                self.change().renewals_stopped.remove(owner);
            }
            self.notes.push(Note::RenewingDeadMan {
                until: not_after,
                arming,
            });
        }
    }

    /// From now on no leader renews `site`'s switches: the time is recorded, and so is the
    /// chain's latest link (its answers are in the results now, not for ever).
    pub(super) fn stop_renewals(&mut self, site: &SiteId) {
        let now = self.now();
        let keys = rules::keys(self.plan, site, Role::DeadMan);
        let latest = self.latest_verified(&keys);
        let st = self.change();
        st.renewals_stopped.insert(site.clone(), now);
        if let (Some(v), Some(at)) = (st.dead_man_verified.get_mut(site), latest)
            && *v < at
        {
            *v = at;
        }
    }

    /// When `site`'s dead-man switch has provably fired, and the chain's latest link: the
    /// chain stands (a verified answer showed every switch running with qfence's countdown,
    /// nothing since showed one stopped); renewals stopped when it lost the plan; the last
    /// call could act until an interval later (its `not_after`); the switch fires its
    /// countdown after that; a margin of one interval covers clock skew. `None` when the site
    /// has no dead-man binding with a `timeout_seconds`, has no chain, or is not the site this
    /// transition takes the plan from.
    pub(super) fn dead_man_fires_by(&self, site: &SiteId) -> Option<(Millis, Millis)> {
        let t = self.state.transition()?;
        if &t.from != site {
            return None;
        }
        let verified = *self.state.dead_man_verified.get(site)?;
        if verified < self.state.owner_since {
            return None;
        }
        let stopped = *self.state.renewals_stopped.get(site)?;
        let timeout = rules::keys(self.plan, site, Role::DeadMan)
            .iter()
            .filter_map(|k| rules::binding(self.plan, k))
            .filter_map(|b| b.params.get("timeout_seconds")?.parse::<f64>().ok())
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(Duration::from_secs_f64)
            .max()?;
        let margin = self.plan.interval;
        Some((
            Millis(stopped.0 + ms(self.plan.interval) + ms(timeout) + ms(margin)),
            verified,
        ))
    }
}
