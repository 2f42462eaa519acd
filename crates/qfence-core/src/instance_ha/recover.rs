//! After the evacuation (steps 9, 10 and 12): powered on through its binding, its forced-down
//! flag cleared once it reports again and Nova cleaned up its evacuations, then enabled; or
//! left disabled, or halted, for an operator.

use qfence_model::config::HostName;

use super::gates;
use super::host::{RETRY, StepState};
use super::reason::Note;
use super::snapshot::{MigrationStatus, ServiceStatus};
use super::state::{Halt, HostPhase, LeftWhy, Step};
use super::types::{Action, DisableReason, EventKind, Target};
use super::{Cx, Settled};
use crate::types::Outcome;

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

    /// Step 10: once the powered-on host reports again and Nova has cleaned up its
    /// evacuations, its forced-down flag is cleared, then it is enabled; back in service once
    /// Nova shows both.
    pub(super) fn enabling(&mut self, host: &HostName) {
        let nova = self.s.nova;
        let cloud = self.cloud;
        let Some(svc) = nova.compute(host) else {
            return;
        };
        let cleared = self.record(host).done.contains(&Step::ClearForcedDown)
            || (self.view_current(host) && !svc.forced_down);
        if !cleared {
            // Forced down, Nova says `down` whatever its reports, and every write to the
            // service (qfence's own disable and force-down too) moves its updated_at: only an
            // update since the power-on, in a view read since, tells that its nova-compute
            // runs again.
            let since = self.record(host).phase_since;
            let reports = self.view_current(host)
                && svc
                    .updated_at
                    .is_some_and(|u| u > since && nova.read_at.since(u) <= cloud.delta);
            if !reports {
                self.notes.push(Note::Enabling {
                    host: host.clone(),
                    what: "waiting for it to report again (it stays forced down until then)".into(),
                });
                return;
            }
            // Nova refuses to clear forced-down while evacuation records from the host read
            // `done`: its nova-compute, started again, destroys what was evacuated away and
            // marks them `completed`.
            let uncleaned = nova
                .migrations
                .iter()
                .filter(|m| m.source == *host && m.status == MigrationStatus::Done)
                .count();
            if uncleaned > 0 {
                self.notes.push(Note::Enabling {
                    host: host.clone(),
                    what: format!(
                        "waiting for its nova-compute to clean up {uncleaned} evacuation(s) (Nova \
                         refuses to clear forced-down before)"
                    ),
                });
                return;
            }
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
        // Enabled only once it is up: Nova updates the host's placement trait
        // (COMPUTE_STATUS_DISABLED) at the enable only for a service it reads up; enabled
        // while forced down, it would take no new server until its next resource update.
        let enabled = svc.status == ServiceStatus::Enabled;
        let h = host.clone();
        if self.step(host, Step::Enable, enabled, || Action::Enable { host: h }) != StepState::Done
        {
            self.notes.push(Note::Enabling {
                host: host.clone(),
                what: "enabling it".into(),
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
