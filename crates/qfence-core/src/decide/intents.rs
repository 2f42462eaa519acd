//! The operators' intents, oldest first: each is taken or refused in the sentence, and a
//! failover or switchover starts its transition here (an abort: `abort.rs`).

use super::Cx;
use crate::reason::Note;
use crate::rules::Mutation;
use crate::state::{Evidence, EvidenceKind, IntentKind, Phase, TransitionKind};

impl Cx<'_, '_> {
    pub(super) fn intents(&mut self) {
        if self.state.intents.is_empty() {
            return;
        }
        let intents = std::mem::take(&mut self.change().intents);
        for i in intents {
            if i.generation != self.state.generation {
                self.notes.push(Note::IntentStale {
                    intent: i.kind,
                    by: i.by,
                    seen: i.generation,
                    now: self.state.generation,
                });
                continue;
            }
            let by = i.by.clone();
            match i.kind.clone() {
                IntentKind::Pause => {
                    self.state.paused = true;
                    self.notes.push(Note::Paused { by });
                }
                IntentKind::Resume => {
                    self.state.paused = false;
                    self.notes.push(Note::Resumed { by });
                }
                IntentKind::ConfirmFenced { site } => {
                    let protected = match self.state.transition() {
                        Some(t) => t.target.clone(),
                        None => self.state.owner.clone(),
                    };
                    if !self.plan.instances.contains_key(&site) || site == protected {
                        self.notes.push(Note::IntentRefused {
                            intent: i.kind,
                            by,
                            why: format!("{site} is not a site this plan gives up"),
                        });
                        continue;
                    }
                    let generation = self.state.generation;
                    self.state.evidence.push(Evidence {
                        site: site.clone(),
                        generation,
                        kind: EvidenceKind::OperatorConfirmed {
                            by: by.clone(),
                            why: i.why.clone(),
                        },
                        at: self.now(),
                        carried: false,
                    });
                    self.notes.push(Note::Confirmed {
                        site,
                        by,
                        why: i.why,
                    });
                }
                IntentKind::Failover { to } | IntentKind::Switchover { to } => {
                    let refusal = if let Some(t) = self.state.transition() {
                        Some(format!("already moving to {}", t.target))
                    } else if self.state.paused {
                        Some("the plan is paused: resume it first".to_owned())
                    } else if to == self.state.owner {
                        Some(format!("{to} already owns it"))
                    } else if !self.plan.instances.contains_key(&to) {
                        Some(format!("{to} is not a site of this plan"))
                    } else if self.state.in_maintenance(&to) {
                        Some(format!(
                            "{to} is in maintenance: take it out of maintenance first"
                        ))
                    } else if matches!(i.kind, IntentKind::Switchover { .. })
                        && self.state.awaiting_rejoin.contains_key(&to)
                        && self.rules.mutation != Mutation::RejoinIgnored
                    {
                        // Its copy may have diverged: a planned move there would drop what
                        // the owner accepted since. A failover there stays the last resort.
                        Some(format!(
                            "{to}'s copy is still to rejoin as a replica of {}: rejoin it first",
                            self.state.owner
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = refusal {
                        self.notes.push(Note::IntentRefused {
                            intent: i.kind,
                            by,
                            why,
                        });
                        continue;
                    }
                    let kind = if matches!(i.kind, IntentKind::Switchover { .. }) {
                        TransitionKind::Switchover { by, why: i.why }
                    } else {
                        TransitionKind::OperatorFailover { by, why: i.why }
                    };
                    self.start_transition(kind, to);
                }
                IntentKind::Retry => match &mut self.state.phase {
                    Phase::Transition(t) if t.halted.is_some() => {
                        t.halted = None;
                        t.attempt = 0;
                        t.retry_at = None;
                        t.entered = false;
                        self.notes.push(Note::Retrying { by, stage: t.stage });
                    }
                    _ => self.notes.push(Note::IntentRefused {
                        intent: i.kind,
                        by,
                        why: "nothing is halted".to_owned(),
                    }),
                },
                IntentKind::Abort => self.abort(i.kind, by),
                IntentKind::Rejoin { site } => self.rejoin_intent(site, by),
            }
        }
    }
}
