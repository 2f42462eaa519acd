//! A cluster to decide on: the three orchestrators (o1 and o2 at dc1, o3 at dc2),
//! agents of both sites, controllers, and the leader's view of them. Tests change what they
//! need and take a snapshot.

use std::collections::{BTreeMap, BTreeSet};

use qfence_core::maintenance::{
    Action, Agent, Controller, Decision, Job, JobKind, MaintenanceState, Orchestrator, Settings,
    Snapshot,
};
use qfence_core::{Leadership, Millis};
use qfence_model::config::HostName;
use qfence_model::{ControllerId, OrchestratorId, SiteId, Term};

pub fn o(s: &str) -> OrchestratorId {
    OrchestratorId::new(s).unwrap()
}

pub fn h(s: &str) -> HostName {
    HostName::new(s).unwrap()
}

pub fn c(s: &str) -> ControllerId {
    ControllerId::new(s).unwrap()
}

pub fn site(s: &str) -> SiteId {
    SiteId::new(s).unwrap()
}

pub fn job(kind: JobKind, subject: &str) -> Job {
    Job {
        kind,
        subject: subject.to_owned(),
    }
}

/// The moment the tests start at: 2023-11-14 14:02:07 UTC.
pub const T0: Millis = Millis(1_699_970_527_000);

pub fn at(secs: u64) -> Millis {
    Millis(T0.0 + secs * 1000)
}

#[derive(Debug, Clone)]
pub struct Fx {
    pub me: OrchestratorId,
    pub term: u64,
    pub leader: bool,
    pub state: MaintenanceState,
    pub orchestrators: BTreeMap<OrchestratorId, Orchestrator>,
    pub jobs: BTreeMap<OrchestratorId, Vec<Job>>,
    pub read_only: BTreeSet<OrchestratorId>,
    pub agents: BTreeMap<HostName, Agent>,
    pub controllers: BTreeMap<ControllerId, Controller>,
    pub settings: Settings,
    pub seed: u64,
    pub now: Millis,
}

pub fn orch(s: &str) -> Orchestrator {
    Orchestrator {
        site: site(s),
        witness: false,
        alive: true,
        voter: true,
        renews: true,
    }
}

impl Fx {
    /// o1, o2 at dc1 and o3 at dc2, o3 leading; no agents, no controllers.
    pub fn three() -> Self {
        Self {
            me: o("o3"),
            term: 5,
            leader: true,
            state: MaintenanceState::default(),
            orchestrators: [("o1", "dc1"), ("o2", "dc1"), ("o3", "dc2")]
                .into_iter()
                .map(|(n, s)| (o(n), orch(s)))
                .collect(),
            jobs: BTreeMap::new(),
            read_only: BTreeSet::new(),
            agents: BTreeMap::new(),
            controllers: BTreeMap::new(),
            settings: Settings::default(),
            seed: 7,
            now: T0,
        }
    }

    /// An agent connected to `on`, allowed on `allowed` in that order.
    pub fn agent(&mut self, name: &str, allowed: &[&str], on: Option<&str>) -> &mut Self {
        self.agents.insert(
            h(name),
            Agent {
                allowed: allowed.iter().map(|a| o(a)).collect(),
                connected: on.map(o),
            },
        );
        self
    }

    pub fn controller(&mut self, name: &str, sites: &[&str], holder: Option<&str>) -> &mut Self {
        self.controllers.insert(
            c(name),
            Controller {
                sites: sites.iter().map(|s| site(s)).collect(),
                holder: holder.map(o),
            },
        );
        self
    }

    pub fn snap(&self) -> Snapshot<'_> {
        Snapshot {
            me: self.me.clone(),
            leadership: Leadership {
                leader: self.leader,
                term: Term(self.term),
                lease_until: self.now.plus(std::time::Duration::from_secs(2)),
            },
            state: &self.state,
            orchestrators: &self.orchestrators,
            jobs: &self.jobs,
            read_only: &self.read_only,
            agents: &self.agents,
            controllers: &self.controllers,
            settings: self.settings,
            seed: self.seed,
            now: self.now,
        }
    }

    /// Writes the decision's state change, as the cluster would (a compare-and-set).
    pub fn write(&mut self, d: &Decision) {
        if let Some(ch) = &d.state_change {
            self.state = self.state.apply(ch).expect("decided on this state");
        }
    }
}

/// The actions of a decision, for exact comparison.
pub fn actions(d: &Decision) -> Vec<Action> {
    d.commands.iter().map(|c| c.action.clone()).collect()
}
