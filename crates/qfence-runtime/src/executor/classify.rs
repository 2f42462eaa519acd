//! What a driver's answer comes to: an outcome, what it observed, and its words.

use qfence_call::{Observed, Reading, Verb};
use qfence_core::{Action, Outcome};

use crate::drivers::Read;

/// What one call came to: its outcome, what it observed, and its words.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finished {
    /// Done, failed (refused, or read back otherwise), or unknown.
    pub outcome: Outcome,
    /// What the call (or an undo's read-back) read.
    pub observed: Observed,
    /// The reading or the error, in words an operator can check.
    pub detail: String,
    /// A reading that does not hold, in the target's own word (see `Reading::definitive`).
    pub definitive: bool,
}

impl Finished {
    /// Nothing is known: the call did not run, or its answer was lost.
    pub fn unknown(detail: String) -> Self {
        Self {
            outcome: Outcome::Unknown,
            observed: Observed::Unknown,
            detail,
            definitive: false,
        }
    }

    /// A driver error: UNKNOWN when the target's state may have changed (or `unknown_anyway`,
    /// for a check, which changes nothing but read nothing either), FAILED when it refused.
    fn error(e: &qfence_call::DriverError, unknown_anyway: bool) -> Self {
        Self {
            outcome: if unknown_anyway || e.state_unknown {
                Outcome::Unknown
            } else {
                Outcome::Failed
            },
            observed: Observed::Unknown,
            detail: e.to_string(),
            definitive: false,
        }
    }

    /// A reading that was a read-back: done when it holds, and never definitive
    /// (definitive readings are a health check's, `failover_after_definitive`).
    fn read_back(r: &Reading) -> Self {
        Self {
            outcome: if r.holds {
                Outcome::Done
            } else {
                Outcome::Failed
            },
            observed: r.observed(),
            detail: format!("read back: {} (read by {})", r.detail, r.by),
            definitive: false,
        }
    }
}

/// What the answer to a call of `verb` comes to (`dead_man`: an arm or a renewal of a
/// dead-man switch, see [`dead_man_finished`]). An undo's answer is only its first half: see
/// [`undo_read_back`].
pub(super) fn classify(dead_man: bool, verb: Verb, answer: Read) -> Finished {
    if dead_man {
        return dead_man_finished(&answer);
    }
    let is_check = verb == Verb::Check;
    match answer {
        Ok(r) => Finished {
            outcome: if is_check || r.holds {
                Outcome::Done
            } else {
                Outcome::Failed
            },
            observed: r.observed(),
            detail: format!("{} (read by {})", r.detail, r.by),
            definitive: !r.holds && r.definitive,
        },
        Err(e) => Finished::error(&e, is_check),
    }
}

/// What an undo came to, from the independent read-back that followed it: the condition
/// must no longer hold (drivers differ in what their undo's own reading says).
pub(super) fn undo_read_back(check: Result<Read, String>) -> Finished {
    match check {
        Ok(Ok(r)) => Finished {
            outcome: if r.holds {
                Outcome::Failed
            } else {
                Outcome::Done
            },
            observed: r.observed(),
            detail: format!("read back: {} (read by {})", r.detail, r.by),
            definitive: false,
        },
        Ok(Err(e)) => Finished::unknown(format!("read back failed: {e}")),
        Err(why) => Finished::unknown(why),
    }
}

/// What an undo's own answer came to when it was an error (no read-back follows one).
pub(super) fn undo_failed(e: &qfence_call::DriverError) -> Finished {
    Finished::error(e, false)
}

/// What an arm or a renewal came to. The driver's dead-man perform and renew end by reading
/// the switch back in the same call, as its check does (docs/specs/controller.md): the timer
/// runs with the countdown the binding sets. That reading is the binding's observation, and
/// the call is done only when the driver accepted it AND the reading holds: a switch that
/// runs with someone else's countdown, or not at all, is NOT HELD, and a renewal that cannot
/// be read back proves nothing.
fn dead_man_finished(answer: &Read) -> Finished {
    match answer {
        Ok(r) => Finished::read_back(r),
        Err(e) => Finished::error(e, false),
    }
}

/// Whether `action` arms or renews a dead-man switch.
pub(super) fn is_dead_man(action: &Action) -> bool {
    matches!(
        action,
        Action::ArmDeadMan { .. } | Action::RenewDeadMan { .. }
    )
}

/// Whether `action` runs every interval (a check, a renewal): logged only when it says
/// something new.
pub(super) fn routine(action: &Action) -> bool {
    matches!(action, Action::Check { .. } | Action::RenewDeadMan { .. })
}
