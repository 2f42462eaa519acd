//! What one Instance HA cycle looks at: the cloud as the last poll of Nova read it, each
//! host's latest fence reading, the kdump messages received, the replicated state, the results
//! of finished commands, what is in flight, the leadership, the observer's own health and
//! `now`. The runtime fills it; nothing here reads anything.
//!
//! The Nova part follows the Compute API's own words (`os-services`, `servers/detail`,
//! `os-aggregates`, `os-migrations`), typed: a state is [`ServiceState`], never a string.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use qfence_model::config::{HostName, ValidatedConfig};
use qfence_model::{CloudId, SiteId};
use serde::{Deserialize, Serialize};

use super::state::CloudState;
use super::types::Target;
use crate::types::{Leadership, Millis, Observation, OpId, OpResult};

/// A Nova server's id (its UUID, as Nova writes it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ServerId(pub String);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A service's `state`: Nova's own judgement of its heartbeats (`down` also while forced down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    Up,
    Down,
}

/// A service's `status`: whether the scheduler may place servers on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceStatus {
    Enabled,
    Disabled,
}

/// One `nova-compute` service: a compute host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeService {
    pub host: HostName,
    /// Its availability zone (`zone`).
    pub zone: Option<String>,
    pub state: ServiceState,
    pub status: ServiceStatus,
    /// When its state was last updated (`updated_at`); `None` if never.
    pub updated_at: Option<Millis>,
    pub forced_down: bool,
    pub disabled_reason: Option<String>,
}

/// The other services an evacuation needs: one `nova-scheduler` up at least.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerService {
    pub host: String,
    pub state: ServiceState,
    pub status: ServiceStatus,
}

/// A server's `status`. Only `ACTIVE`, `ERROR` and `SHUTOFF` (a stopped server) are evacuated:
/// Nova refuses the others.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServerStatus {
    Active,
    Error,
    Shutoff,
    Build,
    Rebuild,
    Migrating,
    Resize,
    VerifyResize,
    Paused,
    Suspended,
    Shelved,
    ShelvedOffloaded,
    Rescue,
    Deleted,
    SoftDeleted,
    /// Nova's `UNKNOWN`, or a status this version of qfence does not know (said as read).
    Other(String),
}

impl ServerStatus {
    /// Whether Nova evacuates a server in this status.
    pub fn evacuable(&self) -> bool {
        matches!(
            self,
            ServerStatus::Active | ServerStatus::Error | ServerStatus::Shutoff
        )
    }
}

/// One server on a compute host (`servers/detail?host=...&all_tenants=1`, each checked by its
/// `OS-EXT-SRV-ATTR:host`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    pub id: ServerId,
    pub name: String,
    /// Where Nova says it is.
    pub host: HostName,
    pub status: ServerStatus,
    /// `OS-EXT-STS:task_state` (`rebuilding` during an evacuation), if any.
    pub task_state: Option<String>,
    /// The flavor, by the key [`NovaView::flavors`] is keyed by (its id, or from
    /// microversion 2.47 its original name).
    pub flavor: String,
    /// The image's id; `None` for a server booted from a volume.
    pub image: Option<String>,
    pub locked: bool,
    /// `locked_reason` (microversion 2.73).
    pub locked_reason: Option<String>,
}

/// A host aggregate with its metadata (the evacuable tag, `qfence:max_failures`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregate {
    pub name: String,
    pub hosts: BTreeSet<HostName>,
    pub metadata: BTreeMap<String, String>,
    /// Its availability zone, if it sets one.
    pub zone: Option<String>,
}

/// A migration record's `status`, for evacuations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationStatus {
    Accepted,
    PreMigrating,
    Migrating,
    Done,
    Completed,
    Error,
    Failed,
    Cancelled,
    /// Any other status, as read.
    Other(String),
}

impl MigrationStatus {
    /// Whether the evacuation succeeded (`done`; `completed` once the source host came back
    /// and cleaned up).
    pub fn succeeded(&self) -> bool {
        matches!(self, MigrationStatus::Done | MigrationStatus::Completed)
    }

    /// Whether it failed.
    pub fn failed(&self) -> bool {
        matches!(
            self,
            MigrationStatus::Error | MigrationStatus::Failed | MigrationStatus::Cancelled
        )
    }
}

/// One evacuation's migration record (`os-migrations?migration_type=evacuation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    pub id: u64,
    pub server: ServerId,
    pub source: HostName,
    pub dest: Option<HostName>,
    pub status: MigrationStatus,
    pub created_at: Millis,
}

/// The cloud as the last poll of Nova read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NovaView {
    /// When the services were read: the poll this view belongs to. A cycle is one poll.
    pub read_at: Millis,
    /// Every `nova-compute` service.
    pub computes: Vec<ComputeService>,
    /// Every `nova-scheduler` service.
    pub schedulers: Vec<SchedulerService>,
    /// The servers on the compute hosts.
    pub servers: Vec<Server>,
    /// Flavors' extra specs, by the key servers name them by.
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    /// Images' properties, by id; a Glance tag `T` is written as the property `T: "true"`
    /// (Red Hat's convention accepts the `evacuable` tag as well as the property).
    pub images: BTreeMap<String, BTreeMap<String, String>>,
    pub aggregates: Vec<Aggregate>,
    /// Evacuations' migration records.
    pub migrations: Vec<Migration>,
    /// When each followed server's migrations were last read (a `FollowMigration`'s read).
    pub migrations_read_at: BTreeMap<ServerId, Millis>,
}

impl NovaView {
    /// A compute service by host.
    pub fn compute(&self, host: &HostName) -> Option<&ComputeService> {
        self.computes.iter().find(|c| &c.host == host)
    }

    /// The servers Nova places on `host`.
    pub fn servers_on<'a>(&'a self, host: &'a HostName) -> impl Iterator<Item = &'a Server> {
        self.servers.iter().filter(move |s| &s.host == host)
    }

    /// A server by id.
    pub fn server(&self, id: &ServerId) -> Option<&Server> {
        self.servers.iter().find(|s| &s.id == id)
    }
}

/// Whether the observer can trust its own view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverHealth {
    /// The last poll of Nova answered (services, servers, metadata and migrations all read).
    pub nova_reachable: bool,
    /// The orchestrator cluster has its quorum.
    pub quorum: bool,
    /// Sites the orchestrator cluster has lost (no orchestrator there answers): a site lost as
    /// a whole is a site failover's job, not Instance HA's.
    pub lost_sites: BTreeSet<SiteId>,
}

/// Everything one cycle may look at, taken at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    pub config: &'a ValidatedConfig,
    pub cloud: CloudId,
    /// The replicated Instance HA state of the cloud.
    pub state: &'a CloudState,
    pub nova: &'a NovaView,
    /// Each host's latest fence reading (its binding's check), with when it was read. FENCED
    /// only when it holds, fresh, and was taken after the fence started.
    pub fences: &'a BTreeMap<HostName, Observation>,
    /// When fence_kdump messages arrived from each host, oldest first (the runtime keeps the
    /// last few minutes).
    pub kdump: &'a BTreeMap<HostName, Vec<Millis>>,
    /// Results of finished commands by operation id (`binding` is `None` for Instance HA).
    pub results: &'a BTreeMap<OpId, OpResult>,
    /// Commands still executing, with what each acts on.
    pub in_flight: &'a BTreeMap<OpId, Target>,
    pub leadership: Leadership,
    pub observer: &'a ObserverHealth,
    pub now: Millis,
}
