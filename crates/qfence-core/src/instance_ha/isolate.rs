//! A fenced host isolated in Nova (steps 6 and 8): forced down, disabled with a timestamped
//! reason, and a reserved host enabled for it.

use qfence_model::config::HostName;

use super::Cx;
use super::gates;
use super::host::StepState;
use super::reason::Note;
use super::snapshot::ServiceStatus;
use super::state::{HostPhase, Step};
use super::types::{Action, EventKind};

impl Cx<'_, '_> {
    /// Step 8 (and 6): forced down, disabled with a timestamped reason, a reserved host
    /// enabled for it; then its servers are evacuated.
    pub(super) fn isolating(&mut self, host: &HostName) {
        let nova = self.s.nova;
        let svc = nova.compute(host);
        let Some(reason) = self.record(host).disable_reason.clone() else {
            return;
        };
        // Forced down first: Nova then reads the service down, so the disable does not call
        // the dead host's nova-compute to update its placement trait (an RPC call Nova waits
        // on, a minute by default, when it still reads the host up).
        let forced = svc.is_some_and(|c| c.forced_down);
        let h = host.clone();
        if self.step(host, Step::ForceDown, forced, || Action::ForceDown {
            host: h,
        }) != StepState::Done
        {
            self.notes.push(Note::Isolating {
                host: host.clone(),
                what: "forcing it down".into(),
            });
            return;
        }
        let disabled = svc.is_some_and(|c| {
            c.status == ServiceStatus::Disabled
                && c.disabled_reason.as_deref() == Some(reason.to_string().as_str())
        });
        let h = host.clone();
        let d = self.step(host, Step::Disable, disabled, || Action::Disable {
            host: h,
            reason: reason.clone(),
        });
        if d != StepState::Done {
            self.notes.push(Note::Isolating {
                host: host.clone(),
                what: format!("disabling it ({reason})"),
            });
            return;
        }
        if !self.reserve(host) {
            return;
        }
        self.set_phase(host, HostPhase::Evacuating);
        self.evacuating(host);
    }

    /// Step 6: one reserved host enabled for this one. Whether to go on to the evacuation.
    pub(super) fn reserve(&mut self, host: &HostName) -> bool {
        if !self.cloud.reserved_hosts {
            return true;
        }
        if !self.record(host).reserve_tried {
            self.rec(host).reserve_tried = true;
            match self.choose_spare(host) {
                Some(spare) => {
                    self.rec(host).reserved = Some(spare.clone());
                    self.notes.push(Note::Reserved {
                        host: host.clone(),
                        spare: spare.clone(),
                    });
                    self.event(Some(host), EventKind::ReservedHostEnabled { spare });
                }
                None => {
                    self.notes.push(Note::NoReserved { host: host.clone() });
                    self.event(Some(host), EventKind::NoReservedHost);
                    return true;
                }
            }
        }
        let Some(spare) = self.record(host).reserved.clone() else {
            return true;
        };
        let nova = self.s.nova;
        let enabled = nova
            .compute(&spare)
            .is_some_and(|c| c.status == ServiceStatus::Enabled);
        let (h, sp) = (host.clone(), spare.clone());
        match self.step(host, Step::Reserve, enabled, || Action::EnableReserved {
            host: sp,
            for_host: h,
        }) {
            StepState::Done => true,
            StepState::Running => {
                self.notes.push(Note::Isolating {
                    host: host.clone(),
                    what: format!("waiting for reserved host {spare} to be enabled"),
                });
                false
            }
            // Refused: evacuate without it rather than wait on a spare.
            StepState::Waiting => {
                self.rec(host).done.insert(Step::Reserve);
                true
            }
        }
    }

    /// A reserved host for `host`: up, not taken by another incident, sharing an aggregate
    /// with it, else in its availability zone.
    pub(super) fn choose_spare(&self, host: &HostName) -> Option<HostName> {
        let nova = self.s.nova;
        let taken: Vec<&HostName> = self
            .state
            .hosts
            .values()
            .filter_map(|r| r.reserved.as_ref())
            .collect();
        let spares: Vec<&super::ComputeService> = nova
            .computes
            .iter()
            .filter(|c| {
                gates::reserved_spare(c)
                    && c.state == super::ServiceState::Up
                    && !taken.contains(&&c.host)
            })
            .collect();
        let shares_aggregate = |spare: &HostName| {
            nova.aggregates
                .iter()
                .any(|a| a.hosts.contains(host) && a.hosts.contains(spare))
        };
        let zone = nova.compute(host).and_then(|c| c.zone.as_ref());
        spares
            .iter()
            .find(|c| shares_aggregate(&c.host))
            .or_else(|| {
                spares
                    .iter()
                    .find(|c| zone.is_some() && c.zone.as_ref() == zone)
            })
            .map(|c| c.host.clone())
    }
}
