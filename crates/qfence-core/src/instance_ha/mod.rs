//! Instance HA: detect failed compute hosts of an OpenStack cloud, fence them, evacuate their
//! servers, bring them back, as a pure decision (`docs/specs/instance-ha.md`, ADR 0018).
//!
//! # The model
//!
//! Each cycle, the runtime takes a [`Snapshot`]: the cloud's configuration, what the last poll
//! of Nova read ([`NovaView`]: compute services, schedulers, servers, flavors, images,
//! aggregates, evacuation migrations), each host's latest fence reading, the fence_kdump
//! messages received, the replicated [`CloudState`] (one [`HostRecord`] per host being
//! processed, at its [`HostPhase`]), results of finished commands, what is in flight, the
//! leadership, the observer's own health and `now`. [`decide`] turns it into a [`Decision`]:
//! typed [`Command`]s, each one Nova call or one call of a host's fence binding; a
//! compare-and-set [`CloudStateChange`]; and one [`Sentence`] ("fencing decision: ...").
//!
//! A host is evacuated only once its fence reads back off (FENCED by read-back, as everywhere
//! in qfence); a kdump message or an accepted power-off proves nothing. Between a failed host
//! and its fence stand the gates ([`gates::GateKind`]), each fail-open or fail-closed.
//!
//! Nothing here does I/O, reads a clock or draws a random number.

mod admit;
mod evacuate;
mod fence;
pub mod gates;
mod host;
mod isolate;
mod reason;
mod recover;
pub mod snapshot;
pub mod state;
pub mod types;

use std::collections::{BTreeMap, BTreeSet};

use qfence_model::config::{CloudConfig, HostName};
use qfence_model::{Generation, SiteId};
use serde::{Deserialize, Serialize};

pub use gates::{FailMode, GateKind, Trip};
pub use reason::{Note, Sentence};
pub use snapshot::{
    Aggregate, ComputeService, Migration, MigrationStatus, NovaView, ObserverHealth,
    SchedulerService, Server, ServerId, ServerStatus, ServiceState, ServiceStatus, Snapshot,
};
pub use state::{
    CloudState, CloudStateChange, EvacState, Evacuation, FenceTrack, Halt, HostPhase, HostRecord,
    LeftWhy, LockState, Step, StoredCloudState,
};
pub use types::{
    Action, Command, DisableReason, Event, EventKind, LOCK_REASON, Severity, Target, operator_steps,
};

use crate::types::{Millis, OpId, Outcome};
use gates::{Closed, Gates};

/// A deliberate bug, for the simulation's own test. Shipped code never sets one.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mutation {
    /// The real rules.
    #[default]
    None,
    /// Evacuate from a host whose fence reads UNKNOWN, as if it read off.
    UnknownFenceIsProof,
    /// A new leader takes a host past its fence back to fencing it.
    RefenceOnResume,
    /// Count the per-cycle cap per decision, not per poll.
    CapPerDecision,
    /// The threshold counts only hosts failing now, forgetting those forced down or being
    /// processed from earlier cycles.
    ThresholdForgetsEarlierFailures,
    /// `force_enable` re-enables a host smart evacuation gave up on.
    ForceEnableAfterSmartFailure,
    /// Decide with a lease that ran out.
    LeaseIgnored,
}

/// The rules `decide` applies. [`Rules::default`] is the only one production uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    #[doc(hidden)]
    pub mutation: Mutation,
}

/// What to do: commands in order, the state to write first, and the cycle's sentence.
///
/// The runtime writes `state_change` (a compare-and-set) before it runs any command; when the
/// write is refused, it drops the commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub commands: Vec<Command>,
    pub state_change: Option<CloudStateChange>,
    pub sentence: Sentence,
}

/// Decides with the real rules.
pub fn decide(s: &Snapshot<'_>) -> Decision {
    decide_with(s, Rules::default())
}

/// Decides with the given rules (tests plant bugs through this).
pub fn decide_with(s: &Snapshot<'_>, rules: Rules) -> Decision {
    let idle = |note: Note| Decision {
        commands: Vec::new(),
        state_change: None,
        sentence: Sentence {
            cloud: s.cloud.clone(),
            notes: vec![note],
            acted: false,
        },
    };
    let Some(cloud) = s.config.cloud(s.cloud.as_str()) else {
        return idle(Note::UnknownCloud);
    };
    if !s.leadership.leader {
        return idle(Note::NotLeader {
            term: s.leadership.term,
        });
    }
    if !s.leadership.valid_at(s.now) && rules.mutation != Mutation::LeaseIgnored {
        return idle(Note::LeaseExpired {
            term: s.leadership.term,
            at: s.leadership.lease_until,
        });
    }
    let site_of = s
        .nova
        .computes
        .iter()
        .filter_map(|c| Some((c.host.clone(), s.config.host_site(cloud, &c.host)?)))
        .collect();
    let mut cx = Cx {
        s,
        cloud,
        rules,
        state: s.state.clone(),
        changed: false,
        commands: Vec::new(),
        notes: Vec::new(),
        gates: Gates::compute(s, cloud, s.state, &site_of, rules.mutation),
        site_of,
        fenced_now: BTreeSet::new(),
    };
    cx.cycle();
    cx.finish()
}

/// One decision under way.
pub(crate) struct Cx<'s, 'a> {
    s: &'s Snapshot<'a>,
    cloud: &'a CloudConfig,
    rules: Rules,
    state: CloudState,
    changed: bool,
    commands: Vec<Command>,
    notes: Vec<Note>,
    gates: Gates,
    site_of: BTreeMap<HostName, SiteId>,
    /// Hosts fenced by this decision.
    fenced_now: BTreeSet<HostName>,
}

/// How an operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Running,
    Ended(Outcome),
}

impl Cx<'_, '_> {
    fn now(&self) -> Millis {
        self.s.now
    }

    fn mutation(&self) -> Mutation {
        self.rules.mutation
    }

    fn change(&mut self) -> &mut CloudState {
        self.changed = true;
        &mut self.state
    }

    /// The cycle, in order: see the module documentation of `host.rs`.
    fn cycle(&mut self) {
        if let Some(b) = self.gates.blind.clone() {
            let closed = Closed::Blind(b);
            self.announce(std::slice::from_ref(&closed));
            self.notes.push(Note::Blind {
                why: closed.to_string(),
            });
            self.record_proofs();
            return;
        }
        self.observe();
        self.gates = Gates::compute(
            self.s,
            self.cloud,
            &self.state,
            &self.site_of,
            self.rules.mutation,
        );
        let closed = self.gates.all_closed();
        self.announce(&closed);
        self.summary();
        if self.cloud.disabled {
            let failed: Vec<HostName> = self.state.failed.keys().cloned().collect();
            self.notes.push(Note::Disabled { failed });
            self.record_proofs();
            return;
        }
        let hosts: Vec<HostName> = self.state.hosts.keys().cloned().collect();
        for h in &hosts {
            self.drive(h);
        }
        self.release_leftover_locks();
        self.adopt_orphans();
        self.admit();
    }

    /// While nothing else may be done: fences read back off are recorded as proven.
    fn record_proofs(&mut self) {
        let hosts: Vec<HostName> = self.state.hosts.keys().cloned().collect();
        for h in &hosts {
            self.prove(h);
        }
    }

    fn finish(self) -> Decision {
        let acted = self.changed || !self.commands.is_empty();
        let state_change = self.changed.then(|| {
            let mut next = self.state;
            next.revision = self.s.state.revision + 1;
            CloudStateChange {
                expect_generation: self.s.state.generation,
                expect_revision: self.s.state.revision,
                next,
            }
        });
        Decision {
            commands: self.commands,
            state_change,
            sentence: Sentence {
                cloud: self.s.cloud.clone(),
                notes: self.notes,
                acted,
            },
        }
    }

    fn issue(&mut self, action: Action, incident: Option<Generation>) -> OpId {
        let op = OpId(format!(
            "iha/{}/t{}/r{}/{}/{}",
            self.s.cloud,
            self.s.leadership.term,
            self.s.state.revision,
            self.s.now.0,
            self.commands.len()
        ));
        self.commands.push(Command {
            op: op.clone(),
            cloud: self.s.cloud.clone(),
            incident,
            term: self.s.leadership.term,
            action,
        });
        op
    }

    fn event(&mut self, host: Option<&HostName>, kind: EventKind) {
        let incident = host
            .and_then(|h| self.state.hosts.get(h))
            .map(|r| r.incident);
        self.issue(
            Action::Event {
                event: Event {
                    host: host.cloned(),
                    kind,
                },
            },
            incident,
        );
    }

    /// Whether `target` has an operation in flight or issued by this decision.
    fn busy(&self, target: &Target) -> bool {
        self.s.in_flight.values().any(|t| t == target)
            || self
                .commands
                .iter()
                .any(|c| c.action.target().as_ref() == Some(target))
    }

    /// How an operation this term issued stands: running while in flight, else its result;
    /// one with neither (the runtime lost it) ended UNKNOWN.
    fn settled(&self, op: &OpId) -> Settled {
        if let Some(r) = self.s.results.get(op) {
            return Settled::Ended(r.outcome);
        }
        if self.s.in_flight.contains_key(op) {
            Settled::Running
        } else {
            Settled::Ended(Outcome::Unknown)
        }
    }

    /// Hosts' failures seen, the heartbeat history and the cliff.
    fn observe(&mut self) {
        let view = self.s.nova;
        let mut failing = BTreeMap::new();
        for c in &view.computes {
            if let Some(why) = gates::failure(c, view.read_at, self.cloud) {
                failing.insert(c.host.clone(), why);
            }
        }
        let seen: Vec<HostName> = self.state.failed.keys().cloned().collect();
        for h in seen {
            if !failing.contains_key(&h) {
                self.change().failed.remove(&h);
            }
        }
        for (h, why) in &failing {
            if !self.state.failed.contains_key(h) {
                let now = self.now();
                self.change().failed.insert(h.clone(), now);
                if !self.state.hosts.contains_key(h) {
                    self.notes.push(Note::failed(h.clone(), why));
                    self.event(Some(h), EventKind::HostDown);
                }
            }
        }
        self.cliff();
    }

    fn cliff(&mut self) {
        let view = self.s.nova;
        let cloud = self.cloud;
        if let Some(c) = &self.state.cliff
            && self.now() >= c.since.plus(cloud.poll * cloud.heartbeat_cliff_cycles)
        {
            self.change().cliff = None;
        }
        let up: BTreeSet<HostName> = view
            .computes
            .iter()
            .filter(|c| gates::reporting(c, view.read_at, cloud))
            .map(|c| c.host.clone())
            .collect();
        let before = &self.state.last_up;
        if self.state.cliff.is_none() && before.len() >= 2 {
            let lost = before
                .iter()
                .filter(|h| {
                    view.compute(h)
                        .is_some_and(|c| gates::failure(c, view.read_at, cloud).is_some())
                })
                .count();
            if lost * 100 > before.len() * cloud.heartbeat_cliff_percent as usize {
                let cliff = state::Cliff {
                    since: self.now(),
                    lost,
                    of: before.len(),
                };
                self.change().cliff = Some(cliff);
            }
        }
        if up != self.state.last_up {
            self.change().last_up = up;
        }
    }

    /// Raises an event for each gate that closed and each that opened since the last cycle.
    fn announce(&mut self, closed: &[Closed]) {
        let now: BTreeMap<Trip, &Closed> = closed.iter().map(|c| (c.trip(), c)).collect();
        let before = self.state.tripped.clone();
        for (trip, c) in &now {
            if !before.contains(trip) {
                let host = None;
                self.event(
                    host,
                    EventKind::GateClosed {
                        gate: trip.gate,
                        detail: c.to_string(),
                    },
                );
            }
        }
        // While blind, the other gates cannot be judged: they keep their announcement.
        let blind = closed.iter().any(|c| matches!(c, Closed::Blind(_)));
        for trip in &before {
            let still = now.contains_key(trip) || (blind && trip.gate != GateKind::Observer);
            if !still {
                self.event(None, EventKind::GateOpened { gate: trip.gate });
            }
        }
        let mut next: BTreeSet<Trip> = now.keys().cloned().collect();
        if blind {
            next.extend(
                before
                    .iter()
                    .filter(|t| t.gate != GateKind::Observer)
                    .cloned(),
            );
        }
        if next != self.state.tripped {
            self.change().tripped = next;
        }
    }

    fn summary(&mut self) {
        let view = self.s.nova;
        let reporting = view
            .computes
            .iter()
            .filter(|c| gates::reporting(c, view.read_at, self.cloud))
            .count();
        // The cloud at a glance comes first, before the failures observe() noted.
        self.notes.insert(
            0,
            Note::Summary {
                hosts: view.computes.len(),
                reporting,
                failed: self.gates.census.failed.len(),
                incidents: self.state.hosts.len(),
            },
        );
    }
}
