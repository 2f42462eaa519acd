//! A host's fence: the kdump wait (step 7), the fence through its binding, and its read-back.
//! Proven only by a reading that holds, taken after the fence; never fenced again once proven
//! in the incident.

use qfence_model::config::HostName;

use super::gates;
use super::host::RETRY;
use super::reason::Note;
use super::state::{Halt, HostPhase, Step};
use super::types::{Action, DisableReason, EventKind, Target};
use super::{Cx, Mutation, Settled};
use crate::types::{Millis, Observed};

impl Cx<'_, '_> {
    pub(super) fn kdump_wait(&mut self, host: &HostName) {
        let nova = self.s.nova;
        if nova
            .compute(host)
            .is_some_and(|c| gates::reporting(c, nova.read_at, self.cloud))
        {
            self.notes.push(Note::CameBack { host: host.clone() });
            self.close(host);
            return;
        }
        let r = self.record(host);
        let timeout = self.cloud.kdump_timeout;
        let from = Millis(r.detected.0.saturating_sub(crate::types::ms(timeout)));
        let last = self
            .s
            .kdump
            .get(host)
            .and_then(|v| v.iter().filter(|t| **t >= from).max().copied());
        let cap = r.phase_since.plus(self.cloud.kdump_max_wait);
        let until = match last {
            None => r.phase_since.plus(timeout),
            Some(t) => t.plus(timeout).min(cap),
        };
        if last.is_some() && !r.kdump {
            self.rec(host).kdump = true;
            self.event(Some(host), EventKind::Kdump);
        }
        if self.now() < until {
            self.notes.push(Note::KdumpWaiting {
                host: host.clone(),
                until,
                seen: last.is_some(),
            });
            return;
        }
        self.set_phase(host, HostPhase::Fencing);
        self.fencing(host);
    }

    /// Issues the host's fence, if the gates and the per-cycle cap allow. Never for a host
    /// whose fence was proven in this incident.
    pub(super) fn start_fence(&mut self, host: &HostName) {
        if self.record(host).fenced() {
            return;
        }
        let site = self.site_of.get(host).cloned();
        if let Some(c) = self.gates.closed_for(host, site.as_ref()) {
            self.notes.push(Note::blocked(vec![host.clone()], &c));
            return;
        }
        if self.cap_left() == 0 {
            self.notes.push(Note::Deferred {
                hosts: vec![host.clone()],
                cap: self.cloud.max_hosts_per_cycle,
            });
            return;
        }
        let fence = match self.s.config.host_fence(self.cloud, host) {
            Ok(f) => f,
            Err(why) => {
                self.notes.push(Note::no_fence(host.clone(), &why));
                return;
            }
        };
        if self.busy(&Target::Fence(host.clone())) {
            self.notes.push(Note::Waiting {
                host: host.clone(),
                what: "waiting for the operation on its fence".into(),
            });
            return;
        }
        let (now, poll) = (self.now(), self.s.nova.read_at);
        let attempts = self.cloud.fence_attempts;
        let incident = Some(self.record(host).incident);
        let op = self.issue(
            Action::Fence {
                host: host.clone(),
                binding: fence.binding.clone(),
            },
            incident,
        );
        let r = self.rec(host);
        r.pending.insert(Step::Fence, op);
        r.fence.started.get_or_insert(now);
        r.fence.last_at = Some(now);
        r.fence.last_poll = Some(poll);
        r.fence.attempts += 1;
        r.phase_since = now;
        let attempt = r.fence.attempts;
        self.fenced_now.insert(host.clone());
        self.notes.push(Note::FenceStarted {
            host: host.clone(),
            capability: fence.binding.capability.clone(),
            controller: fence.binding.controller.to_string(),
            attempt,
            of: attempts,
        });
        self.event(Some(host), EventKind::FencingStarted { attempt });
    }

    pub(super) fn fencing(&mut self, host: &HostName) {
        match self.record(host).pending.get(&Step::Fence).cloned() {
            Some(op) => match self.settled(&op) {
                Settled::Running => self.notes.push(Note::Waiting {
                    host: host.clone(),
                    what: "its fence is running".into(),
                }),
                // Whatever the answer, only the read-back decides.
                Settled::Ended(_) => {
                    self.set_phase(host, HostPhase::Verifying);
                    self.verifying(host);
                }
            },
            None => {
                // Held back by a gate before its first fence, and back: nothing was done.
                let nova = self.s.nova;
                if self.record(host).fence.attempts == 0
                    && nova
                        .compute(host)
                        .is_some_and(|c| gates::reporting(c, nova.read_at, self.cloud))
                {
                    self.notes.push(Note::CameBack { host: host.clone() });
                    self.close(host);
                    return;
                }
                if let Some(t) = self.record(host).retry_at.filter(|t| *t > self.now()) {
                    self.notes.push(Note::Waiting {
                        host: host.clone(),
                        what: format!("its fence is tried again at {t}"),
                    });
                    return;
                }
                self.start_fence(host);
            }
        }
    }

    /// Reads the fence back; proven only by a reading that holds, taken since the latest fence
    /// command.
    pub(super) fn verifying(&mut self, host: &HostName) {
        let r = self.record(host);
        let pending = r.pending.get(&Step::Check).cloned();
        let reading = self.reading_since_fence(host);
        match pending {
            Some(op) if self.settled(&op) == Settled::Running => {
                self.notes.push(Note::Verifying { host: host.clone() });
                return;
            }
            Some(_) => {
                self.rec(host).pending.remove(&Step::Check);
            }
            None if reading.is_none() => {
                let Ok(fence) = self.s.config.host_fence(self.cloud, host) else {
                    return self.fence_failed(host, "its fence binding is gone".into());
                };
                if self.busy(&Target::Fence(host.clone())) {
                    self.notes.push(Note::Verifying { host: host.clone() });
                    return;
                }
                let incident = Some(r.incident);
                let op = self.issue(
                    Action::CheckFence {
                        host: host.clone(),
                        binding: fence.binding,
                    },
                    incident,
                );
                self.rec(host).pending.insert(Step::Check, op);
                self.notes.push(Note::Verifying { host: host.clone() });
                return;
            }
            None => {}
        }
        match reading {
            Some(_) if self.prove(host) => self.isolating(host),
            Some(o) => {
                let read = match o.value {
                    Observed::NotHeld => format!("reads on at {}", o.at),
                    _ => format!("unreadable at {}", o.at),
                };
                self.fence_failed(host, read);
            }
            None => self.fence_failed(host, "no reading came back".into()),
        }
    }

    /// The host's latest fence reading, if taken since its latest fence command.
    fn reading_since_fence(&self, host: &HostName) -> Option<crate::types::Observation> {
        let r = self.record(host);
        let since = r.fence.last_at.unwrap_or(r.phase_since);
        self.s.fences.get(host).filter(|o| o.at >= since).cloned()
    }

    /// Records the fence as proven, and the host as to be isolated, when its reading since
    /// its latest fence command holds. Runs even while Instance HA is disabled or blind: a
    /// proof is a fact, not an action, and a leader that lost it would fence the host again.
    pub(super) fn prove(&mut self, host: &HostName) -> bool {
        let Some(o) = self.reading_since_fence(host) else {
            return false;
        };
        let proven = o.value == Observed::Holds
            || (o.value == Observed::Unknown && self.mutation() == Mutation::UnknownFenceIsProof);
        if !proven || self.record(host).phase != HostPhase::Verifying {
            return false;
        }
        let (incident, kdump) = (self.record(host).incident, self.record(host).kdump);
        self.rec(host).fence.proven = Some(o.at);
        self.rec(host).disable_reason = Some(DisableReason::Evacuating {
            since: o.at,
            incident,
            kdump,
        });
        self.notes.push(Note::Fenced {
            host: host.clone(),
            at: o.at,
        });
        self.event(Some(host), EventKind::Fenced { detail: o.detail });
        self.set_phase(host, HostPhase::Isolating);
        true
    }

    pub(super) fn fence_failed(&mut self, host: &HostName, read: String) {
        let attempts = self.record(host).fence.attempts;
        if attempts < self.cloud.fence_attempts {
            let at = self.now().plus(RETRY);
            self.set_phase(host, HostPhase::Fencing);
            self.rec(host).retry_at = Some(at);
            self.notes.push(Note::FenceRetry {
                host: host.clone(),
                read,
                at,
            });
            return;
        }
        self.set_phase(
            host,
            HostPhase::Halted {
                why: Halt::FenceNotProven,
            },
        );
        self.notes.push(Note::FenceNotProven {
            host: host.clone(),
            attempts,
        });
        self.event(Some(host), EventKind::FenceNotProven { detail: read });
    }
}
