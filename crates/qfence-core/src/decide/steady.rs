//! The steady state: the owner's health and triggers (`health.rs`), its dead-man switches
//! (`dead_man.rs`), the fence watch of every other site, the owner's shield, the readiness
//! watch and the service binding kept (`service.rs`).

use qfence_model::config::StandbyPosture;
use qfence_model::{Role, SiteId, Verdict};

use super::Cx;
use super::judge::not_ready;
use crate::reason::Note;
use crate::rules::{self, SiteVerdict};
use crate::types::{Action, BindingKey, Observed};

impl Cx<'_, '_> {
    pub(super) fn steady(&mut self) {
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
        self.rejoin(&owner);
        self.notes.push(Note::Steady {
            owner,
            generation: self.state.generation,
            paused: self.state.paused,
            sites: verdicts,
            ready,
            maintenance: self.state.maintenance.clone(),
        });
        self.awaiting_rejoin_note();
    }

    /// Re-checks every fence of every site that does not own the plan (and, in a hot plan,
    /// its `standby` bindings); raises an alarm for a site that is no longer fenced, nor its
    /// resource proven stopped, nor safe as a hot standby (`Rules::safe_standby`), and drops
    /// evidence a fresh FAILED reading contradicts.
    pub(super) fn fence_watch(&mut self, owner: &SiteId) -> Vec<SiteVerdict> {
        let mut out = Vec::new();
        for site in self.other_sites(owner) {
            let all = rules::keys(self.plan, &site, Role::Fence);
            let issued_before = self.commands.len();
            self.check_due(&all);
            let mut proving = rules::proving_fences(self.s.config, self.plan, &site);
            if self.plan.standby == StandbyPosture::Hot {
                // A hot standby is judged by its standby readings too: none alarms before
                // they are in.
                let standby = rules::keys(self.plan, &site, Role::Standby);
                self.check_standby_due(&standby, owner);
                proving.extend(standby);
            }
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
            // A standby whose resource is proven stopped (a planned switchover leaves the old
            // owner so, its host on), or a hot standby that reads safe as one, is shown so and
            // raises no alarm. A failover still needs its required fences (judged by
            // `Rules::site_verdict` alone).
            let v = self.rules.safe_standby(
                self.s.config,
                self.plan,
                &self.state,
                self.s.observations,
                &site,
                self.now(),
                v,
            );
            self.judged.insert(site.clone(), v.clone());
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

    /// Issues the due checks of a hot standby's `standby` bindings, each asking whether the
    /// site follows `owner` (the driver reads the owner's address from the binding).
    fn check_standby_due(&mut self, keys: &[BindingKey], owner: &SiteId) {
        for k in keys {
            if self.due(k) {
                self.issue(Action::Check {
                    binding: k.clone(),
                    points_at: Some(owner.clone()),
                });
            }
        }
    }

    /// Checks the readiness of every site but the owner each interval, so operators see a
    /// failover target's state at all times and drivers that answer from a cache once their
    /// source is lost have a warm one. Read-only: it runs while paused, and a reading starts
    /// nothing by itself. Returns one summary per site that has readiness bindings.
    pub(super) fn readiness_watch(&mut self, owner: &SiteId) -> Vec<(SiteId, String)> {
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
    pub(super) fn readiness_summary(&self, keys: &[BindingKey]) -> String {
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
    pub(super) fn shield(&mut self, owner: &SiteId, verdicts: &[SiteVerdict]) {
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
                self.issue(Action::check(k));
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
}
