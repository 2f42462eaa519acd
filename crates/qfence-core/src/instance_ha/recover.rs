//! After the evacuation (steps 9, 10 and 12): powered on through its binding, enabled, its
//! forced-down flag cleared once it reports again; or left disabled, or halted, for an operator.

use qfence_model::config::HostName;

use super::gates;
use super::host::{RETRY, StepState};
use super::reason::Note;
use super::snapshot::ServiceStatus;
use super::state::{Halt, HostPhase, LeftWhy, Step};
use super::types::{Action, DisableReason, EventKind, Target};
use super::{Cx, Settled};
use crate::types::{Millis, Outcome};

impl Cx<'_, '_> {
    /// Step 9: powered back on through its fence binding's undo.
    pub(super) fn powering_on(&mut self, host: &HostName) {
        if let Some(op) = self.record(host).pending.get(&Step::PowerOn).cloned() {
            match self.settled(&op) {
                Settled::Running => {
                    let attempt = self.record(host).power_attempts;
                    self.notes.push(Note::PoweringOn {
                        host: host.clone(),
                        attempt,
                    });
                    return;
                }
                Settled::Ended(Outcome::Done) => {
                    self.event(Some(host), EventKind::PoweredOn);
                    self.set_phase(host, HostPhase::Enabling);
                    return self.enabling(host);
                }
                Settled::Ended(_) => {
                    let at = self.now().plus(RETRY);
                    let r = self.rec(host);
                    r.pending.remove(&Step::PowerOn);
                    r.retry_at = Some(at);
                    if r.power_attempts >= self.cloud.fence_attempts {
                        return self.leave_disabled(host, LeftWhy::PowerOnFailed);
                    }
                }
            }
        }
        if self.record(host).retry_at.is_some_and(|t| t > self.now()) {
            self.notes.push(Note::Waiting {
                host: host.clone(),
                what: "powering on is tried again soon".into(),
            });
            return;
        }
        let Ok(fence) = self.s.config.host_fence(self.cloud, host) else {
            return self.leave_disabled(host, LeftWhy::PowerOnFailed);
        };
        if self.busy(&Target::Fence(host.clone())) {
            return;
        }
        let incident = Some(self.record(host).incident);
        let op = self.issue(
            Action::PowerOn {
                host: host.clone(),
                binding: fence.binding,
            },
            incident,
        );
        let r = self.rec(host);
        r.pending.insert(Step::PowerOn, op);
        r.power_attempts += 1;
        let attempt = r.power_attempts;
        self.notes.push(Note::PoweringOn {
            host: host.clone(),
            attempt,
        });
    }

    /// Step 10: enabled; its forced-down flag cleared once it reports again; back in service
    /// once Nova shows all three.
    pub(super) fn enabling(&mut self, host: &HostName) {
        let nova = self.s.nova;
        let cloud = self.cloud;
        let Some(svc) = nova.compute(host) else {
            return;
        };
        let h = host.clone();
        let enabled = svc.status == ServiceStatus::Enabled;
        if self.step(host, Step::Enable, enabled, || Action::Enable { host: h }) != StepState::Done
        {
            self.notes.push(Note::Enabling {
                host: host.clone(),
                what: "enabling it".into(),
            });
            return;
        }
        // Forced down, Nova says `down` whatever its reports: its updated_at tells.
        let proven = self.record(host).fence.proven.unwrap_or(Millis(0));
        let reports = svc
            .updated_at
            .is_some_and(|u| u > proven && nova.read_at.since(u) <= cloud.delta);
        if !reports {
            self.notes.push(Note::Enabling {
                host: host.clone(),
                what: "waiting for it to report again (it stays forced down until then)".into(),
            });
            return;
        }
        let h = host.clone();
        if self.step(host, Step::ClearForcedDown, !svc.forced_down, || {
            Action::ClearForcedDown { host: h }
        }) != StepState::Done
        {
            self.notes.push(Note::Enabling {
                host: host.clone(),
                what: "clearing its forced-down flag".into(),
            });
            return;
        }
        if enabled && !svc.forced_down && self.view_current(host) {
            self.notes.push(Note::Recovered { host: host.clone() });
            self.event(Some(host), EventKind::Recovered);
            self.close(host);
        } else {
            self.notes.push(Note::Enabling {
                host: host.clone(),
                what: "waiting for Nova to show it enabled and not forced down".into(),
            });
        }
    }

    pub(super) fn leave_disabled(&mut self, host: &HostName, why: LeftWhy) {
        self.notes.push(Note::LeftDisabled {
            host: host.clone(),
            why: why.clone(),
        });
        let what = match why {
            LeftWhy::Asked => "leave_disabled is set",
            LeftWhy::Unsuccessful => "some evacuations were unsuccessful and force_enable is off",
            LeftWhy::PowerOnFailed => "it could not be powered back on",
        };
        self.event(Some(host), EventKind::LeftDisabled { why: what.into() });
        self.set_phase(host, HostPhase::LeftDisabled { why });
    }

    /// Left disabled or halted: leftover locks released, the reason in Nova updated, and the
    /// incident ends when an operator brings the host back (enabled, not forced down,
    /// reporting), or, for a host never fenced, when it reports again on its own.
    pub(super) fn held(&mut self, host: &HostName) {
        self.unlock_all(host);
        let r = self.record(host);
        let (incident, since) = (r.incident, r.phase_since);
        let reason = match &r.phase {
            HostPhase::Halted {
                why: Halt::FenceNotProven,
            } => None,
            HostPhase::Halted { .. } => Some(DisableReason::Failed {
                at: since,
                incident,
            }),
            _ => Some(DisableReason::Evacuated {
                at: since,
                incident,
            }),
        };
        let nova = self.s.nova;
        let svc = nova.compute(host);
        let back = self.view_current(host)
            && svc.is_some_and(|c| {
                c.status == ServiceStatus::Enabled
                    && !c.forced_down
                    && gates::reporting(c, nova.read_at, self.cloud)
            });
        if back {
            if r.fenced() {
                self.notes
                    .push(Note::ReturnedByOperator { host: host.clone() });
                self.event(Some(host), EventKind::ReturnedByOperator);
            } else {
                self.notes.push(Note::CameBack { host: host.clone() });
            }
            self.close(host);
            return;
        }
        if let Some(reason) = reason {
            let shown = svc.is_some_and(|c| {
                c.disabled_reason.as_deref() == Some(reason.to_string().as_str())
                    || c.status == ServiceStatus::Enabled
            });
            let h = host.clone();
            let rs = reason.clone();
            if self.step(host, Step::Disable, shown, || Action::Disable {
                host: h,
                reason: rs,
            }) == StepState::Done
            {
                self.rec(host).disable_reason = Some(reason);
            }
        }
        let what = match &self.record(host).phase {
            HostPhase::Halted { why } => format!("stopped for an operator ({why:?})"),
            _ => "left disabled for an operator".to_owned(),
        };
        self.notes.push(Note::Waiting {
            host: host.clone(),
            what,
        });
    }
}
