//! An operator's abort, the same at every stage (see the decision-core spec's table).
//!
//! Before anything irreversible (up to and including the unfence step) an abort returns the
//! plan to the old owner: steady again, renewals of its dead-man switch resume, and the fences
//! this transition took at the old owner are undone, since the target was never promoted and
//! only the old owner can run the resource. Fences that read holding before the transition
//! came to them, fences still under way, and fences at other sites stay as they are. From the switchover
//! on (the target may run the promoted copy; after the commit it owns the plan) an abort is
//! refused: the move can only roll forward.

use qfence_model::SiteId;

use super::Cx;
use crate::reason::Note;
use crate::rules::{self, Mutation};
use crate::state::{HealthTrack, IntentKind, Phase, Stage};
use crate::types::Action;

impl Cx<'_, '_> {
    pub(super) fn abort(&mut self, intent: IntentKind, by: String) {
        let Some(t) = self.state.transition().cloned() else {
            self.notes.push(Note::IntentRefused {
                intent,
                by,
                why: "no transition is under way".to_owned(),
            });
            return;
        };
        // A stage at or after the switchover sent back to re-verify its proof still counts
        // as from the switchover on: the target may run a promoted copy by then.
        let rolled = t.stage >= Stage::Switchover || t.after_verify >= Stage::Switchover;
        if rolled && self.rules.mutation != Mutation::AbortAfterSwitchover {
            let why = if self.state.owner == t.from {
                format!(
                    "{} may already run the promoted copy ({} step)",
                    t.target,
                    t.stage.as_str()
                )
            } else {
                format!(
                    "{} owns it at generation {} ({} step)",
                    t.target,
                    self.state.generation,
                    t.stage.as_str()
                )
            };
            self.notes.push(Note::IntentRefused {
                intent,
                by,
                why: format!(
                    "{why}: the move can only roll forward; pause it, or fail over again once \
                     it is done"
                ),
            });
            return;
        }
        let owner: SiteId = self.state.owner.clone();
        let st = self.change();
        st.phase = Phase::Steady;
        st.renewals_stopped.remove(&owner);
        st.health = HealthTrack::default();
        let mut undone = Vec::new();
        let mut left = Vec::new();
        for k in t.fenced.iter().filter(|k| k.site.as_ref() == Some(&owner)) {
            if rules::unfence_capability(self.s.config, self.plan, k).is_none() {
                continue;
            }
            let what = format!("{} {}", owner, self.capability(k));
            if self.busy(k) {
                left.push(format!("{what} still under way"));
            } else {
                self.issue(Action::Unfence { binding: k.clone() });
                undone.push(what);
            }
        }
        self.notes.push(Note::Aborted {
            by,
            target: t.target,
            stage: t.stage,
            owner,
            undone: undone.join(", "),
            left: left.join(", "),
        });
    }
}
