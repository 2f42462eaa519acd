//! A planned switchover stops the resource, not the site: the sites it gives up are proven
//! stopped by their resource-level fences (`vm.stop`, `container.stop`, `db.demote`), read back
//! in this transition, and their hosts stay on. When that proof does not come, the switchover
//! escalates to the required fences, verified as a failover does. A failover never uses it:
//! a site that may be lost or partitioned must be proven stopped by its required fences.

use qfence_model::{Role, SiteId, Verdict};

use super::Cx;
use crate::rules;
use crate::state::{Transition, TransitionKind};
use crate::types::Millis;

impl Cx<'_, '_> {
    /// Whether `t` stops `site`'s resource instead of fencing the site: a planned switchover
    /// not escalated, at a site but the target that has resource-level fences. A site with
    /// none is fenced as in a failover.
    pub(super) fn stops_resource(&self, t: &Transition, site: &SiteId) -> bool {
        matches!(t.kind, TransitionKind::Switchover { .. })
            && !t.escalated
            && *site != t.target
            && !rules::resource_fences(self.s.config, self.plan, site).is_empty()
    }

    /// Whether `site`'s resource is proven stopped for `t`: every resource-level fence reads
    /// holding, fresh, no earlier than `since` (at the latest the transition's start), and
    /// nothing that could start the resource again at the site (a restart in place, a
    /// promotion) is under way or ended after those readings were taken. Kept as what this
    /// decision says of the site when it is; otherwise why not.
    pub(super) fn resource_proof(
        &mut self,
        t: &Transition,
        site: &SiteId,
        since: Option<Millis>,
    ) -> Result<(), String> {
        let since = since.map_or(t.started, |s| s.max(t.started));
        let v = self.rules.resource_verdict(
            self.s.config,
            self.plan,
            self.s.observations,
            site,
            self.now(),
            Some(since),
        );
        if v.verdict != Verdict::Fenced {
            return Err(crate::reason::not_stopped(&v));
        }
        let read_at = v
            .readings
            .iter()
            .filter_map(|r| r.at)
            .min()
            .unwrap_or(since);
        if let Some(why) = self.starting(site, read_at) {
            return Err(format!("{site}'s resource may be starting again ({why})"));
        }
        self.judged.insert(site.clone(), v);
        Ok(())
    }

    /// What could start the resource at `site` again after `since`: a restart in place or a
    /// promotion there still under way, or one that ended since (its effect may postdate the
    /// read-back). A power fence holding stops everything on the host; a resource fence's
    /// read-back holds only until the resource is started again.
    fn starting(&self, site: &SiteId, since: Millis) -> Option<String> {
        let keys: Vec<_> = [Role::Recovery, Role::Switchover]
            .into_iter()
            .flat_map(|r| rules::keys(self.plan, site, r))
            .collect();
        keys.iter().find_map(|k| {
            let cap = self.capability(k);
            if self.s.in_flight.values().any(|b| b == k) {
                Some(format!("{site} {cap} is under way"))
            } else {
                self.last_result(k)
                    .filter(|at| *at >= since)
                    .map(|at| format!("{site} {cap} ended at {at}"))
            }
        })
    }
}
