//! The invariants over the simulated world itself, not over the decisions: a decision that is
//! "proven" by a wrong rule is still caught by what it did to the world.
//!
//! - (m) Never two sites running a primary copy (not stopped) while clients can reach either:
//!   through the VIP when the plan has a service binding, directly when it has none; unless
//!   an operator confirmed one of them fenced while it ran (their mistake, not qfence's).
//! - (n) In steady state the VIP points at the owner, or is pointed back within two intervals
//!   (plus the simulated latency of one check and one re-apply) of the last thing that could
//!   have kept it away: a service call unanswered, refused or lost, a reading unknown, a move
//!   by hand, no valid leader, a pause, a move under way.
//! - (o) No dead-man evidence unless the world's watchdog really fired (or was disarmed or
//!   re-set by a change no read-back has shown yet: what qfence cannot know, ADR 0014).

use std::time::Duration;

use qfence_core::{EvidenceKind, Millis, PlanState};
use qfence_model::SiteId;

use super::{Invariant, Sim, Violation, is_new};

/// The longest a simulated command waits before it runs (a delayed forward aside), and the
/// longest step between two decisions.
pub const MAX_DELAY: Duration = Duration::from_secs(6);
pub const MAX_STEP: Duration = Duration::from_secs(5);

/// What (n) keeps between steps.
pub(super) struct WorldWatch {
    /// The last time something could have kept the VIP away from the owner.
    calm_since: Millis,
    /// Since when the VIP has pointed away from the owner.
    away_since: Option<Millis>,
    owner: Option<SiteId>,
}

impl WorldWatch {
    pub fn new(now: Millis) -> Self {
        Self {
            calm_since: now,
            away_since: None,
            owner: None,
        }
    }

    pub fn disturb(&mut self, at: Millis) {
        self.calm_since = self.calm_since.max(at);
    }
}

impl Sim<'_> {
    /// (m) and (n), after every step.
    pub(super) fn check_world(&mut self, step: usize) -> Result<(), Violation> {
        if self.on(Invariant::OneCopyReachable) {
            let running: Vec<SiteId> = self
                .world
                .primary
                .iter()
                .filter(|s| !self.site_down(s))
                .cloned()
                .collect();
            let reachable = |s: &SiteId| self.world.vip.as_ref().is_none_or(|v| v == s);
            self.world.confirmed_running.retain(|s| running.contains(s));
            let mistaken = running
                .iter()
                .any(|s| self.world.confirmed_running.contains(s));
            if running.len() >= 2 && running.iter().any(reachable) && !mistaken {
                return Err(self.violation(
                    step,
                    Invariant::OneCopyReachable,
                    format!(
                        "{running:?} all run a primary copy, clients reach it through the VIP \
                         at {:?}; owner {} at generation {}",
                        self.world.vip, self.state.owner, self.state.generation
                    ),
                ));
            }
        }
        if self.plan.service.is_empty() {
            return Ok(());
        }
        let now = self.now;
        let owner = self.state.owner.clone();
        let quiet = self.state.transition().is_none()
            && !self.state.paused
            && self.leader
            && now < self.lease_until
            && self.watch.owner.as_ref() == Some(&owner);
        self.watch.owner = Some(owner.clone());
        if !quiet {
            self.watch.disturb(now);
        }
        if self.world.vip.as_ref() == Some(&owner) {
            self.watch.away_since = None;
            return Ok(());
        }
        let away = *self.watch.away_since.get_or_insert(now);
        let from = away.max(self.watch.calm_since);
        let bound = self.plan.interval * 2 + (MAX_DELAY + MAX_STEP) * 2;
        if self.on(Invariant::VipAtOwner) && now.since(from) > bound {
            return Err(self.violation(
                step,
                Invariant::VipAtOwner,
                format!(
                    "the VIP has pointed at {:?}, not the owner {owner}, since {} (calm since \
                     {}), longer than {bound:?}",
                    self.world.vip, away.0, self.watch.calm_since.0
                ),
            ));
        }
        Ok(())
    }

    /// (o), for the evidence a decision recorded.
    pub(super) fn check_dead_man_evidence(
        &self,
        step: usize,
        before: &PlanState,
        next: &PlanState,
    ) -> Result<(), Violation> {
        if !self.on(Invariant::DeadManFired) {
            return Ok(());
        }
        for e in &next.evidence {
            if matches!(e.kind, EvidenceKind::DeadManExpired { .. })
                && is_new(&before.evidence, e)
                && !self.dog_fired_or_unseen(&e.site)
            {
                return Err(self.violation(
                    step,
                    Invariant::DeadManFired,
                    format!(
                        "{e:?} recorded, but {}'s watchdog is {:?}",
                        e.site,
                        self.world.dog.get(&e.site)
                    ),
                ));
            }
        }
        Ok(())
    }
}
