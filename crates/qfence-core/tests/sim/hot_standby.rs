//! (q) A hot standby's reading is never a fence: in a plan whose standbys are hot, a failover
//! commits only with every site it gives up proven stopped as a site (its required fences'
//! raw readings, or legitimate evidence: [`Sim::site_proven`]). The site's standby readings
//! (in recovery, not writable) may hold at that moment; they say the copy is not a primary
//! now, not that anything stops it becoming one.

use qfence_core::{Observed, PlanState, Snapshot, TransitionKind};
use qfence_model::Role;
use qfence_model::config::StandbyPosture;

use super::{Invariant, Sim, Violation};

impl Sim<'_> {
    /// (q) at the commit of a failover in a hot plan.
    pub(super) fn hot_standby_not_a_fence(
        &self,
        step: usize,
        snap: &Snapshot<'_>,
        n: &PlanState,
    ) -> Result<(), Violation> {
        if self.plan.standby != StandbyPosture::Hot || n.generation == snap.state.generation {
            return Ok(());
        }
        let Some(t) = snap.state.transition() else {
            return Ok(());
        };
        // A failover, the operator's included; a planned switchover has (p).
        if matches!(t.kind, TransitionKind::Switchover { .. }) {
            return Ok(());
        }
        for s in self.sites().iter().filter(|s| **s != n.owner) {
            if let Err(why) = self.site_proven(snap, n, s, n.generation) {
                let standby: Vec<String> = qfence_core::rules::keys(self.plan, s, Role::Standby)
                    .iter()
                    .map(|k| {
                        let o = snap.observations.get(k);
                        let holds = o.is_some_and(|o| o.value == Observed::Holds);
                        format!("{k} holds={holds}")
                    })
                    .collect();
                return Err(self.violation(
                    step,
                    Invariant::HotStandbyIsNotAFence,
                    format!(
                        "failover committed {} at generation {}: {why}; standby readings: {}",
                        n.owner,
                        n.generation,
                        standby.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}
