//! What the simulated cloud knows: Keystone's users and application credentials, and Nova's
//! compute hosts, servers, flavors, images, aggregates and migration records, with the
//! protocol faults (heartbeats that stop, evacuations that are slow or fail) as fields.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::LabError;

/// A Keystone user with a password and one project role assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub password: String,
    /// The project the user has roles in (by name; domain `Default`).
    pub project: String,
    pub roles: Vec<String>,
}

/// An application credential: an id and secret bound to a user's project and roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppCredential {
    pub id: String,
    pub secret: String,
    pub user: String,
    pub project: String,
    pub roles: Vec<String>,
}

/// A compute host and its `nova-compute` service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// The service's UUID (microversion 2.53 and later).
    pub service_id: String,
    /// The legacy integer id (below 2.53).
    pub legacy_id: u64,
    pub zone: String,
    /// Whether its `nova-compute` sends heartbeats. Fault "heartbeat stops": `false`, then
    /// the service reads `down` once `service_down_time` has passed since `last_heartbeat`.
    pub alive: bool,
    /// When the last heartbeat was recorded while it was alive (kept when it stops).
    pub last_heartbeat: SystemTime,
    pub forced_down: bool,
    pub disabled: bool,
    pub disabled_reason: Option<String>,
}

impl Host {
    pub fn new(name: &str, n: u64) -> Self {
        Self {
            name: name.to_owned(),
            service_id: uuid_from(0x5e_0000 + n),
            legacy_id: n,
            zone: "nova".to_owned(),
            alive: true,
            last_heartbeat: SystemTime::now(),
            forced_down: false,
            disabled: false,
            disabled_reason: None,
        }
    }
}

/// A server's `vm_state`, from which the API's `status` is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmState {
    Active,
    Stopped,
    Paused,
    Error,
}

impl VmState {
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Active => "active",
            VmState::Stopped => "stopped",
            VmState::Paused => "paused",
            VmState::Error => "error",
        }
    }
}

/// A server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: String,
    pub name: String,
    /// The owning project's id.
    pub project_id: String,
    pub host: String,
    pub vm_state: VmState,
    /// An operation under way (`rebuilding` while evacuated).
    pub task_state: Option<String>,
    pub flavor: String,
    pub image: String,
    pub locked: bool,
    pub locked_reason: Option<String>,
    pub fault: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

/// A flavor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u64,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub extra_specs: BTreeMap<String, String>,
}

/// An image (served in Glance v2's shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub properties: BTreeMap<String, String>,
}

/// A host aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    pub id: u64,
    pub uuid: String,
    pub name: String,
    pub hosts: Vec<String>,
    pub metadata: BTreeMap<String, String>,
}

/// A migration record's status, as Nova writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationStatus {
    Accepted,
    PreMigrating,
    Done,
    Completed,
    Error,
    Failed,
}

impl MigrationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::PreMigrating => "pre-migrating",
            Self::Done => "done",
            Self::Completed => "completed",
            Self::Error => "error",
            Self::Failed => "failed",
        }
    }
}

/// An evacuation's migration record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub id: u64,
    pub uuid: String,
    pub server: String,
    pub project_id: String,
    pub source: String,
    pub dest: Option<String>,
    pub status: MigrationStatus,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

/// How evacuations behave (protocol faults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvacuationBehaviour {
    /// From `accepted` to the end; fault "slow evacuation": seconds.
    pub duration: Duration,
    /// The next this many evacuations fail on the destination: the record ends `failed`,
    /// the server is in ERROR on the destination (where the rebuild failed, as in Nova).
    pub fail_next: u32,
    /// Evacuations of these servers always fail before they start (fault "fails
    /// repeatedly"): the record ends `error`, the server is in ERROR on its old host, and
    /// every retry fails the same way.
    pub always_fail: BTreeSet<String>,
}

impl Default for EvacuationBehaviour {
    fn default() -> Self {
        Self {
            duration: Duration::from_millis(300),
            fail_next: 0,
            always_fail: BTreeSet::new(),
        }
    }
}

/// Everything the simulated cloud knows. Read it with `NovaHandle::snapshot`, change it with
/// `NovaHandle::update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NovaState {
    pub region: String,
    /// The microversions offered (default 2.1 to 2.104, Nova 34's).
    pub min_microversion: (u16, u16),
    pub max_microversion: (u16, u16),
    pub users: Vec<User>,
    pub app_credentials: Vec<AppCredential>,
    /// Project name → id.
    pub projects: BTreeMap<String, String>,
    /// How long a token lives (Keystone's default is an hour).
    pub token_lifetime: Duration,
    /// A host whose heartbeat is older than this reads `down`.
    pub service_down_time: Duration,
    pub hosts: Vec<Host>,
    pub servers: Vec<Server>,
    pub flavors: Vec<Flavor>,
    pub images: Vec<Image>,
    pub aggregates: Vec<Aggregate>,
    pub migrations: Vec<Migration>,
    pub evacuation: EvacuationBehaviour,
    /// Whether the one `nova-scheduler` (on `controller-0`) reads up. Fault "scheduler down":
    /// `false`.
    pub scheduler_up: bool,
}

impl NovaState {
    /// A cloud of `hosts` compute hosts `compute-1..N` with `servers_per_host` ACTIVE servers
    /// each, flavor `m1.tiny` and image `cirros` (both `evacuable=true`), aggregate
    /// `ha-hosts` of every host; users `admin`/`secret` (role admin in project admin) and
    /// `demo`/`demo-secret` (role member in project demo), and an application credential
    /// `qfence`/`qfence-secret` of admin's. `NovaState::new(20, 50)` is the 1,000-instance
    /// cloud a real fake cloud cannot run cheaply.
    pub fn new(hosts: usize, servers_per_host: usize) -> Self {
        let projects = BTreeMap::from([
            (
                "admin".to_owned(),
                "a0000000000000000000000000000001".to_owned(),
            ),
            (
                "demo".to_owned(),
                "d0000000000000000000000000000002".to_owned(),
            ),
        ]);
        let admin_project = projects["admin"].clone();
        let host_list: Vec<Host> = (1..=hosts as u64)
            .map(|n| Host::new(&format!("compute-{n}"), n))
            .collect();
        let mut servers = Vec::new();
        for (h, host) in host_list.iter().enumerate() {
            for i in 0..servers_per_host {
                let n = (h * servers_per_host + i) as u64;
                servers.push(Server {
                    id: uuid_from(0x5_0000_0000 + n),
                    name: format!("vm-{:04}", n + 1),
                    project_id: admin_project.clone(),
                    host: host.name.clone(),
                    vm_state: VmState::Active,
                    task_state: None,
                    flavor: "1".to_owned(),
                    image: IMAGE_ID.to_owned(),
                    locked: false,
                    locked_reason: None,
                    fault: None,
                    metadata: BTreeMap::new(),
                });
            }
        }
        let evacuable = BTreeMap::from([("evacuable".to_owned(), "true".to_owned())]);
        Self {
            region: "RegionOne".to_owned(),
            min_microversion: (2, 1),
            max_microversion: (2, 104),
            users: vec![
                User {
                    name: "admin".into(),
                    password: "secret".into(),
                    project: "admin".into(),
                    roles: vec!["admin".into(), "member".into(), "reader".into()],
                },
                User {
                    name: "demo".into(),
                    password: "demo-secret".into(),
                    project: "demo".into(),
                    roles: vec!["member".into(), "reader".into()],
                },
            ],
            app_credentials: vec![AppCredential {
                id: "qfence".into(),
                secret: "qfence-secret".into(),
                user: "admin".into(),
                project: "admin".into(),
                roles: vec!["admin".into()],
            }],
            projects,
            token_lifetime: Duration::from_secs(3600),
            service_down_time: Duration::from_secs(10),
            aggregates: vec![Aggregate {
                id: 1,
                uuid: uuid_from(0xa66),
                name: "ha-hosts".into(),
                hosts: host_list.iter().map(|h| h.name.clone()).collect(),
                metadata: evacuable.clone(),
            }],
            hosts: host_list,
            servers,
            flavors: vec![Flavor {
                id: "1".into(),
                name: "m1.tiny".into(),
                vcpus: 1,
                ram_mb: 128,
                disk_gb: 1,
                extra_specs: evacuable.clone(),
            }],
            images: vec![Image {
                id: IMAGE_ID.into(),
                name: "cirros".into(),
                properties: evacuable,
            }],
            migrations: Vec::new(),
            evacuation: EvacuationBehaviour::default(),
            scheduler_up: true,
        }
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    pub fn host_mut(&mut self, name: &str) -> Option<&mut Host> {
        self.hosts.iter_mut().find(|h| h.name == name)
    }

    pub fn server(&self, id: &str) -> Option<&Server> {
        self.servers.iter().find(|s| s.id == id)
    }

    pub fn server_mut(&mut self, id: &str) -> Option<&mut Server> {
        self.servers.iter_mut().find(|s| s.id == id)
    }

    /// Whether the host's service reads `up` at `now`.
    pub fn host_up(&self, host: &Host, now: SystemTime) -> bool {
        if host.forced_down {
            return false;
        }
        let last = if host.alive { now } else { host.last_heartbeat };
        now.duration_since(last).unwrap_or_default() <= self.service_down_time
    }

    /// Fault "heartbeat stops": the host's `nova-compute` dies now (it reads down
    /// `service_down_time` later). `false` for an unknown host.
    pub fn stop_heartbeat(&mut self, host: &str) -> bool {
        let Some(h) = self.host_mut(host) else {
            return false;
        };
        h.alive = false;
        h.last_heartbeat = SystemTime::now();
        true
    }

    /// The host's `nova-compute` starts again: heartbeats resume and, as Nova's does at
    /// start, it cleans up what was evacuated away from it (`done` records → `completed`).
    pub fn restart_host(&mut self, host: &str) -> bool {
        let Some(h) = self.host_mut(host) else {
            return false;
        };
        h.alive = true;
        h.last_heartbeat = SystemTime::now();
        for m in &mut self.migrations {
            if m.source == host && m.status == MigrationStatus::Done {
                m.status = MigrationStatus::Completed;
                m.updated_at = SystemTime::now();
            }
        }
        true
    }

    pub(crate) fn validate(&self) -> Result<(), LabError> {
        let mut names = BTreeSet::new();
        for h in &self.hosts {
            if !names.insert(h.name.as_str()) {
                return Err(LabError::InvalidState(format!(
                    "host {:?} appears twice",
                    h.name
                )));
            }
        }
        let mut ids = BTreeSet::new();
        for s in &self.servers {
            if !ids.insert(s.id.as_str()) {
                return Err(LabError::InvalidState(format!(
                    "server {} appears twice",
                    s.id
                )));
            }
            if self.host(&s.host).is_none() {
                return Err(LabError::InvalidState(format!(
                    "server {} is on unknown host {:?}",
                    s.id, s.host
                )));
            }
        }
        for u in &self.users {
            if !self.projects.contains_key(&u.project) {
                return Err(LabError::InvalidState(format!(
                    "user {} has roles in unknown project {:?}",
                    u.name, u.project
                )));
            }
        }
        if self.min_microversion > self.max_microversion {
            return Err(LabError::InvalidState("min microversion above max".into()));
        }
        Ok(())
    }
}

/// The image every example server is built from.
pub const IMAGE_ID: &str = "1ae1e1e1-0000-4000-8000-000000000001";

/// A UUID-shaped id made from a number (stable across runs, so tests can name them).
pub fn uuid_from(n: u64) -> String {
    let h = format!("{n:032x}");
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..]
    )
}
