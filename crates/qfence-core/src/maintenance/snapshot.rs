//! What one maintenance decision looks at, taken at one instant. The runtime fills it from
//! the replicated state, the cluster's membership and its own connection tables; nothing here
//! reads anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use qfence_model::config::{HostName, MaintenanceConfig};
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};

use super::spread::AgentAlgorithm;
use super::state::MaintenanceState;
use crate::types::{Leadership, Millis};

/// One orchestrator as the leader sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orchestrator {
    pub site: SiteId,
    /// A witness votes but takes no agents and makes no controller calls.
    pub witness: bool,
    /// It answers the leader (its last heartbeat round came back).
    pub alive: bool,
    /// It is a voter of the cluster.
    pub voter: bool,
    /// As leader it could have every owner's dead-man switch renewed: it is alive, and every
    /// dead-man controller has a caller it can reach. The runtime works it out; the core only
    /// counts.
    pub renews: bool,
}

/// What a pending job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    Fence,
    Failover,
    Switchover,
    Evacuation,
    Recovery,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Fence => "fence",
            JobKind::Failover => "failover",
            JobKind::Switchover => "switchover",
            JobKind::Evacuation => "evacuation",
            JobKind::Recovery => "recovery",
        }
    }
}

/// A job an orchestrator is running: an operation that must not be cut in half.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Job {
    pub kind: JobKind,
    /// What it acts on, as the operator names it (`erp-db`, `compute-3`).
    pub subject: String,
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.subject)
    }
}

/// A host agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// The orchestrators it may connect to, in its configured order (those of its site).
    pub allowed: Vec<OrchestratorId>,
    /// Where its connection is now, if it has one.
    pub connected: Option<OrchestratorId>,
}

/// A controller whose sessions and periodic checks one orchestrator holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controller {
    /// Sites whose orchestrators may call it: its site, then its reach.
    pub sites: Vec<SiteId>,
    /// Who holds its session now.
    pub holder: Option<OrchestratorId>,
}

/// The operation's settings: the configuration's (`cluster.maintenance_timeout_seconds`,
/// `cluster.agent_algorithm`, `cluster.agent_migrations_per_second`) and the retry time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// A preparation not finished by then is cancelled and rolled back (CloudStack's
    /// `management.server.maintenance.timeout`, 60 min).
    pub timeout: Duration,
    /// The algorithm when a request names none (CloudStack's `indirect.agent.lb.algorithm`).
    pub algorithm: AgentAlgorithm,
    /// Migrate messages sent at most per second: receivers never see a reconnection storm.
    pub migrate_per_second: u32,
    /// A message without effect after this long is sent again.
    pub retry: Duration,
}

impl Settings {
    /// The configured settings, with a retry of 30 s.
    pub fn from_config(c: &MaintenanceConfig) -> Self {
        Self {
            timeout: c.timeout,
            algorithm: c.agent_algorithm,
            migrate_per_second: c.agent_migrations_per_second,
            retry: Duration::from_secs(30),
        }
    }
}

impl Default for Settings {
    /// The configuration's defaults: 60 min, static, 20 a second.
    fn default() -> Self {
        Self::from_config(&MaintenanceConfig::default())
    }
}

/// Everything one decision may look at.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// The orchestrator deciding (it decides only while it leads).
    pub me: OrchestratorId,
    pub leadership: Leadership,
    pub state: &'a MaintenanceState,
    pub orchestrators: &'a BTreeMap<OrchestratorId, Orchestrator>,
    /// Each orchestrator's pending jobs.
    pub jobs: &'a BTreeMap<OrchestratorId, Vec<Job>>,
    /// Orchestrators that report themselves read-only.
    pub read_only: &'a BTreeSet<OrchestratorId>,
    pub agents: &'a BTreeMap<HostName, Agent>,
    pub controllers: &'a BTreeMap<ControllerId, Controller>,
    pub settings: Settings,
    /// Drives `shuffle`: the runtime draws it, tests fix it.
    pub seed: u64,
    pub now: Millis,
}

impl Snapshot<'_> {
    /// Whether `o` serves: status `Up` and alive.
    pub fn up(&self, o: &OrchestratorId) -> bool {
        self.orchestrators.get(o).is_some_and(|v| v.alive)
            && self.state.status_of(o) == super::state::OrchestratorStatus::Up
    }

    /// Whether `o` may take agents and sessions: up and not a witness.
    pub fn takes_work(&self, o: &OrchestratorId) -> bool {
        self.up(o) && self.orchestrators.get(o).is_some_and(|v| !v.witness)
    }

    /// The orchestrators, other than `target`, that may take a controller's session.
    pub fn callers(&self, c: &Controller, target: &OrchestratorId) -> Vec<OrchestratorId> {
        self.orchestrators
            .iter()
            .filter(|(o, v)| *o != target && c.sites.contains(&v.site) && self.takes_work(o))
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// An agent's candidates other than `target`, in its configured order.
    pub fn candidates(&self, a: &Agent, target: &OrchestratorId) -> Vec<OrchestratorId> {
        a.allowed
            .iter()
            .filter(|o| *o != target && self.takes_work(o))
            .cloned()
            .collect()
    }

    /// The pending jobs of `o`.
    pub fn jobs_of(&self, o: &OrchestratorId) -> &[Job] {
        self.jobs.get(o).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The agents connected to `o`, in name order.
    pub fn agents_on(&self, o: &OrchestratorId) -> Vec<HostName> {
        self.agents
            .iter()
            .filter(|(_, a)| a.connected.as_ref() == Some(o))
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// The controllers whose session `o` holds.
    pub fn sessions_on(&self, o: &OrchestratorId) -> Vec<ControllerId> {
        self.controllers
            .iter()
            .filter(|(_, c)| c.holder.as_ref() == Some(o))
            .map(|(c, _)| c.clone())
            .collect()
    }
}
