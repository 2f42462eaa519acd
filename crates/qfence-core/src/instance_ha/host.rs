//! One host's incident, step by step: taken on (`admit.rs`), fenced and read back
//! (`fence.rs`), isolated in Nova (`isolate.rs`), evacuated (`evacuate.rs`), powered on and
//! enabled or left for an operator (`recover.rs`). Here: the record's helpers, the dispatch by
//! phase, a new leader's resumption, and the generic host-level step.
//!
//! A cycle drives every host with a record first, in name order, then takes on new failed
//! hosts, oldest failure first, so retries use the per-cycle cap before newcomers do.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::config::HostName;

use super::reason::Note;
use super::state::{EvacState, HostPhase, HostRecord, LockState, Step};
use super::types::{Action, EventKind};
use super::{Cx, Mutation, Settled};
use crate::types::Outcome;

/// A failed fence, a refused Nova call: tried again after this.
pub(super) const RETRY: Duration = Duration::from_secs(10);

/// How a host-level step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepState {
    Done,
    Running,
    /// Failed, to be retried at `retry_at`.
    Waiting,
}

/// The metadata value that tags a flavor, image or aggregate evacuable.
pub(super) fn tagged(meta: Option<&BTreeMap<String, String>>, key: &str) -> bool {
    meta.and_then(|m| m.get(key))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

impl Cx<'_, '_> {
    pub(super) fn record(&self, host: &HostName) -> &HostRecord {
        &self.state.hosts[host]
    }

    pub(super) fn rec(&mut self, host: &HostName) -> &mut HostRecord {
        self.change()
            .hosts
            .get_mut(host)
            .expect("a host with a record")
    }

    pub(super) fn set_phase(&mut self, host: &HostName, phase: HostPhase) {
        let now = self.now();
        let r = self.rec(host);
        r.phase = phase;
        r.phase_since = now;
        r.pending.clear();
        r.done.clear();
        r.retry_at = None;
    }

    /// Ends the host's incident.
    pub(super) fn close(&mut self, host: &HostName) {
        self.change().hosts.remove(host);
        self.state.failed.remove(host);
    }

    pub(super) fn drive(&mut self, host: &HostName) {
        if self.record(host).term != self.s.leadership.term {
            self.resume(host);
        }
        self.drive_phase(host);
    }

    pub(super) fn drive_phase(&mut self, host: &HostName) {
        match self.record(host).phase {
            HostPhase::KdumpWait => self.kdump_wait(host),
            HostPhase::Fencing => self.fencing(host),
            HostPhase::Verifying => self.verifying(host),
            HostPhase::Isolating => self.isolating(host),
            HostPhase::Evacuating => self.evacuating(host),
            HostPhase::PoweringOn => self.powering_on(host),
            HostPhase::Enabling => self.enabling(host),
            HostPhase::LeftDisabled { .. } | HostPhase::Halted { .. } => self.held(host),
        }
    }

    /// A new leader takes the host over: operations of the old term are not waited for; each
    /// step is entered again, and a host past its fence is never fenced again.
    pub(super) fn resume(&mut self, host: &HostName) {
        let term = self.s.leadership.term;
        let now = self.now();
        let smart = self.cloud.smart_evacuation;
        let nova = self.s.nova;
        let refence = self.mutation() == Mutation::RefenceOnResume;
        let r = self.rec(host);
        let phase = r.phase.clone();
        r.term = term;
        r.pending.clear();
        r.phase_since = now;
        for (id, ev) in r.servers.iter_mut() {
            if let EvacState::Requested { at, after, .. } = ev.state {
                ev.state = if smart {
                    EvacState::Following { since: at, after }
                } else {
                    EvacState::Pending
                };
            }
            let locked = nova.server(id).is_some_and(|s| s.locked);
            match ev.lock {
                LockState::Locking { .. } | LockState::Unlocking { .. } => {
                    ev.lock = if locked {
                        LockState::Locked
                    } else {
                        LockState::Unlocked
                    };
                }
                _ => {}
            }
        }
        let phase = match phase {
            // Its fence's answer is lost with the old leader: read it back before anything.
            HostPhase::Fencing => HostPhase::Verifying,
            // The planted bug: forget the fence was proven.
            HostPhase::Isolating | HostPhase::Evacuating if refence => {
                r.fence.proven = None;
                HostPhase::Fencing
            }
            p => p,
        };
        r.phase = phase.clone();
        self.notes.push(Note::Resumed {
            host: host.clone(),
            phase: phase.as_str().to_owned(),
            term,
        });
        self.event(
            Some(host),
            EventKind::Resumed {
                phase: phase.as_str().to_owned(),
            },
        );
    }

    /// Whether the view was read since the host's phase began: an older one says nothing of
    /// what the phase did.
    pub(super) fn view_current(&self, host: &HostName) -> bool {
        self.s.nova.read_at > self.record(host).phase_since
    }

    /// A host-level step: done when `shown` in a view read since the phase began, or when its
    /// operation ended done; otherwise its operation is issued, waited for, or retried after a
    /// failure.
    pub(super) fn step(
        &mut self,
        host: &HostName,
        step: Step,
        shown: bool,
        action: impl FnOnce() -> Action,
    ) -> StepState {
        let confirmed = shown && self.view_current(host);
        if confirmed || self.record(host).done.contains(&step) {
            return StepState::Done;
        }
        if let Some(op) = self.record(host).pending.get(&step).cloned() {
            match self.settled(&op) {
                Settled::Running => return StepState::Running,
                Settled::Ended(Outcome::Done) => {
                    let r = self.rec(host);
                    r.pending.remove(&step);
                    r.done.insert(step);
                    return StepState::Done;
                }
                Settled::Ended(_) => {
                    let at = self.now().plus(RETRY);
                    let r = self.rec(host);
                    r.pending.remove(&step);
                    r.retry_at = Some(at);
                    return StepState::Waiting;
                }
            }
        }
        if self.record(host).retry_at.is_some_and(|t| t > self.now()) {
            return StepState::Waiting;
        }
        let action = action();
        let target = action.target().expect("a step acts on a target");
        if self.busy(&target) {
            return StepState::Running;
        }
        let incident = Some(self.record(host).incident);
        let op = self.issue(action, incident);
        self.rec(host).pending.insert(step, op);
        StepState::Running
    }
}
