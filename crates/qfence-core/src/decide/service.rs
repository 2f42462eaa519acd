//! The service binding is kept, not only set once: in steady state each of the owner's
//! service bindings is checked every interval, and re-applied when it points elsewhere.
//!
//! A service binding's check reads `Holds` when it points at the plan's current owner and
//! `NotHeld` when it points elsewhere (see the decision-core spec). Only a reading taken
//! since the owner was committed and since the last command on the binding counts: an older
//! one described the previous owner, or the state before the last re-apply.

use qfence_model::SiteId;

use super::Cx;
use crate::reason::Note;
use crate::rules::{self, Mutation};
use crate::types::{Action, Observed};

impl Cx<'_, '_> {
    pub(super) fn keep_service(&mut self, owner: &SiteId) {
        if self.rules.mutation == Mutation::ServiceNotKept {
            return;
        }
        for k in rules::service_keys(self.plan) {
            if self.busy(&k) {
                continue;
            }
            let last = self.last_result(&k);
            let current = self.obs(&k).filter(|o| {
                o.at >= self.state.owner_since && self.fresh(o) && last.is_none_or(|r| o.at >= r)
            });
            match current {
                Some(o) if o.value == Observed::NotHeld => {
                    let what = format!("{k} {}", self.capability(&k));
                    let detail = o.detail.clone();
                    let at = o.at;
                    if self.state.paused {
                        self.notes.push(Note::ServiceElsewhere {
                            what,
                            detail,
                            at,
                            owner: owner.clone(),
                            paused: true,
                        });
                        continue;
                    }
                    self.issue(Action::Service {
                        binding: k.clone(),
                        site: owner.clone(),
                    });
                    self.issue(Action::Alarm {
                        site: Some(owner.clone()),
                        detail: format!(
                            "{what} pointed away from the owner {owner} ({detail} at {at}): \
                             pointing it at {owner} again"
                        ),
                    });
                    self.notes.push(Note::ServiceElsewhere {
                        what,
                        detail,
                        at,
                        owner: owner.clone(),
                        paused: false,
                    });
                }
                _ => {
                    if self.due(&k) {
                        self.issue(Action::Check {
                            binding: k,
                            points_at: Some(owner.clone()),
                        });
                    }
                }
            }
        }
    }
}
