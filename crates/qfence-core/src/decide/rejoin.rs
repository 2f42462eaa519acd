//! Old owners' copies made replicas of the new owner by their `rejoin` bindings (`db.rejoin`,
//! ADR 0023).
//!
//! After a planned switchover that stopped the resource, at once: the site is in
//! `PlanState::rejoin` from the commit. After a failover (or an escalated switchover) the
//! site's copy may have diverged and its site was not trusted: it waits in
//! `PlanState::awaiting_rejoin`, fenced, until an operator lets it rejoin
//! ([`IntentKind::Rejoin`]) or, with `rejoin: auto`, once it answers again (a fresh reading of
//! its resource-level fences since the commit: `db.demote` read the server stopped or
//! running). qfence never powers it on itself: a booted host may start its database as a
//! primary before anything reads it, so bringing it up (with the database not started at
//! boot) is the operator's, and the rejoin binding is what starts the database, as a replica.
//! Only in steady state, so only after a commit, which follows the new owner's promotion read
//! back; never at the owner; never while paused; one rejoin at a time per site. A site leaves
//! `awaiting_rejoin` once a rejoin of it is done (the driver read it back a replica of the
//! owner), or once the plan binds no rejoin for it.

use qfence_model::config::RejoinPolicy;
use qfence_model::{Role, SiteId};

use super::Cx;
use crate::reason::Note;
use crate::rules;
use crate::state::IntentKind;
use crate::types::{Action, BindingKey, Millis, Observed, Outcome};

impl Cx<'_, '_> {
    pub(super) fn rejoin(&mut self, owner: &SiteId) {
        if self.state.paused {
            return;
        }
        self.rejoined(owner);
        self.forget_unbound();
        if self.plan.rejoin == RejoinPolicy::Auto {
            self.auto_rejoin();
        }
        let sites: Vec<SiteId> = self.state.rejoin.iter().cloned().collect();
        for site in sites {
            let keys = rules::keys(self.plan, &site, Role::Rejoin);
            if &site != owner && keys.iter().any(|k| self.busy(k)) {
                continue;
            }
            self.change().rejoin.remove(&site);
            if &site == owner || keys.is_empty() {
                continue;
            }
            if let Some(a) = self.change().awaiting_rejoin.get_mut(&site) {
                a.attempts += 1;
            }
            let what = keys
                .iter()
                .map(|k| format!("{k} {}", self.capability(k)))
                .collect::<Vec<_>>()
                .join(", ");
            for k in keys {
                self.issue(Action::Rejoin { binding: k });
            }
            self.notes.push(Note::Rejoining {
                site,
                owner: owner.clone(),
                what,
            });
        }
    }

    /// Says which old owners still wait to rejoin, leaving out those a rejoin runs for now.
    pub(super) fn awaiting_rejoin_note(&mut self) {
        let sites: Vec<SiteId> = self
            .state
            .awaiting_rejoin
            .keys()
            .filter(|s| {
                !rules::keys(self.plan, s, Role::Rejoin)
                    .iter()
                    .any(|k| self.busy(k))
            })
            .cloned()
            .collect();
        if !sites.is_empty() {
            self.notes.push(Note::AwaitingRejoin {
                sites,
                owner: self.state.owner.clone(),
            });
        }
    }

    /// An operator's `rejoin` intent: the site queued for this decision's rejoin, or refused
    /// with why.
    pub(super) fn rejoin_intent(&mut self, site: SiteId, by: String) {
        if let Some(why) = self.rejoin_refusal(&site) {
            self.notes.push(Note::IntentRefused {
                intent: IntentKind::Rejoin { site },
                by,
                why,
            });
            return;
        }
        self.change().rejoin.insert(site.clone());
        self.notes.push(Note::RejoinLet { site, by: Some(by) });
    }

    /// Why `site` may not rejoin now, if it may not.
    fn rejoin_refusal(&self, site: &SiteId) -> Option<String> {
        let keys = rules::keys(self.plan, site, Role::Rejoin);
        let why = if !self.plan.instances.contains_key(site) {
            format!("{site} is not a site of this plan")
        } else if let Some(t) = self.state.transition() {
            format!(
                "a move to {} is under way: a rejoin waits for steady state",
                t.target
            )
        } else if self.state.paused {
            "the plan is paused: resume it first".to_owned()
        } else if *site == self.state.owner {
            format!("{site} owns the plan: only a site it gave up can rejoin")
        } else if keys.is_empty() {
            format!("{site} has no rejoin binding (db.rejoin with role rejoin)")
        } else if !self.state.awaiting_rejoin.contains_key(site) {
            format!(
                "{site} is not an old owner waiting to rejoin: its copy was not given up by a \
                 move, or it rejoined already"
            )
        } else if self.state.in_maintenance(site) {
            format!("{site} is in maintenance: take it out of maintenance first")
        } else if self.state.rejoin.contains(site) || keys.iter().any(|k| self.busy(k)) {
            format!("a rejoin of {site} is under way")
        } else if let Some(why) = self.not_answering(site) {
            format!(
                "{site} does not answer yet ({why}): bring its host up with the database not \
                 started at boot (the rejoin starts it, as a replica), then ask again"
            )
        } else {
            return None;
        };
        Some(why)
    }

    /// Why `site` is not known to answer since it was given up, if it is not: a fresh
    /// reading of one of its resource-level fences taken since then, holding or not (the
    /// controller on its host answered: `db.demote` reads a stopped or a running server),
    /// or, with none, every required fence read fresh not holding (its host is on).
    fn not_answering(&self, site: &SiteId) -> Option<String> {
        let since = self
            .state
            .awaiting_rejoin
            .get(site)
            .map_or(Millis(0), |a| a.since);
        let read = |k: &BindingKey| {
            self.obs(k)
                .filter(|o| self.fresh(o) && o.at >= since)
                .map(|o| o.value)
        };
        let resource = rules::resource_fences(self.s.config, self.plan, site);
        let (keys, answers): (Vec<BindingKey>, bool) = if resource.is_empty() {
            let proving = rules::proving_fences(self.s.config, self.plan, site);
            let on =
                !proving.is_empty() && proving.iter().all(|k| read(k) == Some(Observed::NotHeld));
            (proving, on)
        } else {
            let any = resource
                .iter()
                .any(|k| read(k).is_some_and(|v| v != Observed::Unknown));
            (resource, any)
        };
        if answers {
            return None;
        }
        let said: Vec<String> = keys
            .iter()
            .map(|k| match self.obs(k) {
                Some(o) if o.at >= since => {
                    let v = match o.value {
                        Observed::Holds => "holds",
                        Observed::NotHeld => "does not hold",
                        Observed::Unknown => "UNKNOWN",
                    };
                    format!("{} {v} at {}", self.capability(k), o.at)
                }
                _ => format!("{} not read since {since}", self.capability(k)),
            })
            .collect();
        Some(if said.is_empty() {
            "no fence reads it".to_owned()
        } else {
            said.join(", ")
        })
    }

    /// `rejoin: auto`: each old owner never tried that answers again (see
    /// [`Cx::not_answering`]) and may rejoin is let rejoin, once.
    fn auto_rejoin(&mut self) {
        let sites: Vec<SiteId> = self
            .state
            .awaiting_rejoin
            .iter()
            .filter(|(_, a)| a.attempts == 0)
            .map(|(s, _)| s.clone())
            .collect();
        for site in sites {
            if self.rejoin_refusal(&site).is_none() {
                self.change().rejoin.insert(site.clone());
                self.notes.push(Note::RejoinLet { site, by: None });
            }
        }
    }

    /// Takes out of `awaiting_rejoin` each site a rejoin of which is done since it was given
    /// up: the driver read it back a replica of the owner.
    fn rejoined(&mut self, owner: &SiteId) {
        let done: Vec<SiteId> = self
            .state
            .awaiting_rejoin
            .iter()
            .filter(|(site, a)| {
                let keys = rules::keys(self.plan, site, Role::Rejoin);
                !keys.is_empty()
                    && !self.state.rejoin.contains(*site)
                    && keys
                        .iter()
                        .all(|k| !self.busy(k) && self.rejoin_done(k, a.since))
            })
            .map(|(s, _)| s.clone())
            .collect();
        for site in done {
            self.change().awaiting_rejoin.remove(&site);
            self.notes.push(Note::Rejoined {
                site,
                owner: owner.clone(),
            });
        }
    }

    /// Drops the waiting sites the plan no longer binds a rejoin for (or no longer has): an
    /// operator who takes the binding away takes the rejoin in hand, and the site may be a
    /// failover target again (its readiness still decides).
    fn forget_unbound(&mut self) {
        let gone: Vec<SiteId> = self
            .state
            .awaiting_rejoin
            .keys()
            .filter(|s| rules::keys(self.plan, s, Role::Rejoin).is_empty())
            .cloned()
            .collect();
        for site in gone {
            self.change().awaiting_rejoin.remove(&site);
        }
    }

    /// Whether a rejoin on `key` finished Done (its read-back held) at or after `since`.
    fn rejoin_done(&self, key: &BindingKey, since: Millis) -> bool {
        self.s.results.iter().any(|(op, r)| {
            r.binding.as_ref() == Some(key)
                && r.outcome == Outcome::Done
                && r.at >= since
                && !self.s.in_flight.contains_key(op)
        })
    }
}
