//! After a planned switchover: the old owner's copy, stopped on a running host, is made a
//! replica of the new owner by its `rejoin` bindings (`db.rejoin`, ADR 0023).
//!
//! Only in steady state, so only after the commit, which follows the new owner's promotion
//! read back; only at a site in `PlanState::rejoin` (a switchover that stopped the resource,
//! never a failover); never at the owner; once per switchover (a failed rejoin is the
//! operator's: its check shows why). While paused it waits.

use qfence_model::{Role, SiteId};

use super::Cx;
use crate::reason::Note;
use crate::rules;
use crate::types::Action;

impl Cx<'_, '_> {
    pub(super) fn rejoin(&mut self, owner: &SiteId) {
        if self.state.paused {
            return;
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
}
