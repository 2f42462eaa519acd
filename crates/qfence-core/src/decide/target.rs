//! Where a failover goes when no site is named, and the start of a transition.

use std::collections::BTreeMap;

use qfence_model::config::PlanConfig;
use qfence_model::{Role, SiteId};

use super::Cx;
use super::judge::not_ready;
use crate::reason::Note;
use crate::rules::{self, Mutation, Rules};
use crate::state::{HealthTrack, Phase, PlanState, Stage, Transition, TransitionKind};
use crate::types::{Action, Observed};

/// The sites a failover may go to, in the order the core tries them: the plan's priority list
/// first, then the other sites by name; never the owner, never a site in maintenance (it
/// is not even asked for its readiness), and never an old owner still waiting to rejoin (its
/// copy may have diverged: promoting it would drop what the owner accepted since). The core takes the first that reads ready; the API
/// names the first when an operator asks for a failover without a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverOrder {
    /// The sites that may be the target, in order.
    pub candidates: Vec<SiteId>,
    /// The sites left out because they are in maintenance, in the same order.
    pub in_maintenance: Vec<SiteId>,
    /// The sites left out because they wait to rejoin (`PlanState::awaiting_rejoin`), in the
    /// same order. An operator may still name one in a failover, as a last resort.
    pub awaiting_rejoin: Vec<SiteId>,
}

/// Where a failover of `plan`, in `state`, may go, in order (see [`FailoverOrder`]).
pub fn failover_order(plan: &PlanConfig, state: &PlanState) -> FailoverOrder {
    order(plan, state, &Rules::default())
}

fn order(plan: &PlanConfig, state: &PlanState, rules: &Rules) -> FailoverOrder {
    let owner = &state.owner;
    let mut order: Vec<SiteId> = plan
        .priority
        .iter()
        .filter(|s| *s != owner && plan.instances.contains_key(*s))
        .cloned()
        .collect();
    for s in plan.sites() {
        if s != owner && !order.contains(s) {
            order.push(s.clone());
        }
    }
    let (in_maintenance, order): (Vec<SiteId>, Vec<SiteId>) = order
        .into_iter()
        .partition(|s| state.in_maintenance(s) && rules.mutation != Mutation::MaintenanceIgnored);
    let (awaiting_rejoin, candidates) = order.into_iter().partition(|s| {
        state.awaiting_rejoin.contains_key(s) && rules.mutation != Mutation::RejoinIgnored
    });
    FailoverOrder {
        candidates,
        in_maintenance,
        awaiting_rejoin,
    }
}

impl Cx<'_, '_> {
    /// The failover target when none is named: the first site of the [`FailoverOrder`] whose
    /// readiness passes. Issues readiness checks it still needs.
    pub(super) fn choose_target(&mut self) -> Result<SiteId, String> {
        let FailoverOrder {
            candidates: order,
            in_maintenance: maintenance,
            awaiting_rejoin,
        } = order(self.plan, &self.state, self.rules);
        let left_out = || {
            let names = |v: &[SiteId]| {
                let n: Vec<&str> = v.iter().map(SiteId::as_str).collect();
                let verb = if n.len() == 1 { "is" } else { "are" };
                (n.join(", "), verb)
            };
            let mut out = Vec::new();
            if !maintenance.is_empty() {
                let (n, verb) = names(&maintenance);
                out.push(format!("{n} {verb} in maintenance"));
            }
            if !awaiting_rejoin.is_empty() {
                let (n, verb) = names(&awaiting_rejoin);
                out.push(format!("{n} {verb} still to rejoin"));
            }
            out.join(" and ")
        };
        if order.is_empty() {
            return Err(if maintenance.is_empty() && awaiting_rejoin.is_empty() {
                "no site to fail over to".to_owned()
            } else {
                format!("no site to fail over to: {}", left_out())
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
                            self.issue(Action::check(k.clone()));
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
        if !maintenance.is_empty() || !awaiting_rejoin.is_empty() {
            why.push_str(", and ");
            why.push_str(&left_out());
        }
        Err(why)
    }

    pub(super) fn start_transition(&mut self, kind: TransitionKind, target: SiteId) {
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
            escalated: false,
        });
    }
}
