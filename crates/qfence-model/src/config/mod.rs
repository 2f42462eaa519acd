//! Configuration types, as the rest of qfence sees them.
//!
//! The file is YAML (ADR 0002). It is read in three phases with different powers, as Vector
//! does: *parse* (text only), *validate* (pure cross-checks: every problem reported at once,
//! each with its path), *build* (may read secrets and open clients; lives in the crates that
//! do I/O). Only validation makes a [`ValidatedConfig`], so a function that takes one knows
//! every name in it resolves.
//!
//! Durations are written in seconds and may be fractional (`interval_seconds: 0.5`).
//!
//! Loading: [`load_str`] parses the text into a generic tree that keeps every mapping entry
//! (duplicates included) and its line, then decodes it by hand into a [`Config`], collecting
//! every issue with its path (`plans.erp-db.instances.dc1[2].capability`) and the allowed
//! values, then cross-checks names, roles, resources, reach and timings. It returns a
//! [`ValidatedConfig`] with the warnings, or every issue sorted by path. `docs/configuration.md`
//! documents each key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::catalog::{CapabilitySpec, ControllerType};
use crate::domain::{AgentAlgorithm, FenceLevel, Role};
use crate::ids::{BindingId, CloudId, ControllerId, OrchestratorId, PlanId, SecretRef, SiteId};

pub mod instance_ha;
mod issue;
pub mod keys;
mod load;
pub mod plan_api;
mod tree;

pub use instance_ha::{CloudConfig, HostFence, HostName, NoFence};
pub use issue::{Issue, Severity};
pub use load::{LoadError, Loaded, load_file, load_str};

/// A plan's `interval_seconds` when left out. `freshness_seconds` left out is 3 intervals, or
/// the fence timeout plus an interval when that is longer;
/// the other timings left out are multiples of the longer of the interval and this default:
/// `recovery_after_seconds` 2 × (4 s), `failover_after_seconds` 4 × (8 s),
/// `fence_timeout_seconds` 3 × (6 s, over the default controller timeout). With these, a PostgreSQL primary killed on a
/// lost host is written to again at its replica about 9-10 s later (docs/postgres.md gives
/// the arithmetic; ADR 0021 the choice).
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// A controller's `timeout_seconds` when left out: under the default `fence_timeout_seconds`
/// (6 s), which must exceed it.
pub const DEFAULT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The shortest duration any `*_seconds` setting (or a seconds parameter) may take: 0.1 s.
/// Decisions count whole milliseconds, so anything under 1 ms would run as 0 s; a check, a
/// controller call or a cluster write takes milliseconds to tens of them and the engine
/// coalesces results for 10 ms, so an interval or timeout much under 0.1 s would only ever
/// expire before what it waits for can answer. The fast profile's 0.2 s interval is above it.
pub const MIN_DURATION: std::time::Duration = std::time::Duration::from_millis(100);

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The cluster of orchestrators.
    pub cluster: ClusterConfig,
    /// Sites by name.
    pub sites: BTreeMap<SiteId, SiteConfig>,
    /// Orchestrators (qfence daemons) by name.
    pub orchestrators: BTreeMap<OrchestratorId, OrchestratorConfig>,
    /// Controllers by name.
    pub controllers: BTreeMap<ControllerId, ControllerConfig>,
    /// Availability plans by name.
    pub plans: BTreeMap<PlanId, PlanConfig>,
    /// Clouds watched by Instance HA, by name (`instance_ha:`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_ha: BTreeMap<CloudId, CloudConfig>,
}

/// `cluster:`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterConfig {
    /// The cluster's name, shown in the console and carried in certificates.
    pub name: String,
    /// How long a leader's lease lasts without a successful heartbeat round
    /// (`lease_seconds`, default 2).
    pub lease: Duration,
    /// How an orchestrator is taken out for maintenance.
    pub maintenance: MaintenanceConfig,
}

/// `cluster.maintenance_timeout_seconds`, `cluster.agent_algorithm`,
/// `cluster.agent_migrations_per_second`: orchestrator maintenance (`docs/specs/maintenance.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MaintenanceConfig {
    /// A preparation not finished by then is cancelled and rolled back
    /// (`maintenance_timeout_seconds`, default 3600, as CloudStack's).
    pub timeout: Duration,
    /// How agents are spread when they move, unless a request names another
    /// (`agent_algorithm`, default `static`).
    pub agent_algorithm: AgentAlgorithm,
    /// Migrate messages sent at most per second (`agent_migrations_per_second`, default 20).
    pub agent_migrations_per_second: u32,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3600),
            agent_algorithm: AgentAlgorithm::Static,
            agent_migrations_per_second: 20,
        }
    }
}

/// `sites.NAME:`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SiteConfig {
    /// A witness site votes in the cluster but owns no plans and runs no controllers.
    pub witness: bool,
}

/// `orchestrators.NAME:`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrchestratorConfig {
    /// The site the orchestrator runs at; it makes that site's controller calls.
    pub site: SiteId,
    /// `host:port` where the other orchestrators reach it.
    pub address: String,
}

/// How a controller's TLS server is trusted. Exactly one of the three, or the system roots
/// when none is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsTrust {
    /// The system's root certificates.
    #[default]
    SystemRoots,
    /// `tls: {ca_file: PATH}`: certificates signed by this CA.
    CaFile(String),
    /// `tls: {pin: "sha256:HEX"}`: exactly the certificate with this SHA-256 fingerprint
    /// (lower-case hex, 64 digits, no colons).
    Pin(String),
    /// `tls: {insecure: true}`: anything. For labs only; warned about wherever it is used.
    Insecure,
}

/// `controllers.NAME:`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControllerConfig {
    /// The site where the controller lives; that site's orchestrators may call it.
    pub site: SiteId,
    /// Further sites whose orchestrators may call it (a BMC on a management network both sites
    /// route to).
    pub reach: Vec<SiteId>,
    /// The credential, by reference. Never the credential itself.
    pub secret: Option<SecretRef>,
    /// How its TLS certificate is trusted (HTTPS types only).
    pub tls: TlsTrust,
    /// The deadline for one call, unless an operation sets a shorter one (`timeout_seconds`,
    /// default 5).
    pub timeout: Duration,
    /// What kind of controller it is, with the settings of that kind.
    pub kind: ControllerKind,
}

impl ControllerConfig {
    /// The controller's type.
    pub fn controller_type(&self) -> ControllerType {
        self.kind.controller_type()
    }

    /// The sites whose orchestrators may call this controller: its own site first, then its
    /// reach in the order written.
    pub fn allowed_sites(&self) -> impl Iterator<Item = &SiteId> {
        std::iter::once(&self.site).chain(self.reach.iter().filter(move |s| **s != self.site))
    }

    /// Whether an orchestrator at `site` may call this controller.
    pub fn callable_from(&self, site: &SiteId) -> bool {
        self.allowed_sites().any(|s| s == site)
    }

    /// The fence level of one of its capabilities, honouring a fence agent's `level` setting.
    pub fn fence_level(&self, capability: &CapabilitySpec) -> Option<FenceLevel> {
        match &self.kind {
            ControllerKind::FenceAgent { level, .. } if capability.level.is_some() => Some(*level),
            _ => capability.level,
        }
    }
}

/// Redfish authentication.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedfishAuth {
    /// A session from `SessionService` (X-Auth-Token): one per driver, shared by its calls,
    /// made again when the BMC forgets it, deleted at shutdown.
    #[default]
    Session,
    /// HTTP basic authentication on every request.
    Basic,
}

/// Proxmox VE authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxmoxAuth {
    /// `PVEAPIToken=USER@REALM!TOKENID=SECRET`; the secret holds the token's UUID.
    Token { token_id: String },
    /// A ticket from `/access/ticket`; the secret holds the password.
    Ticket { username: String },
}

/// How a Nova controller logs in to Keystone v3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NovaAuth {
    /// A user's password (the secret), scoped to a project.
    Password {
        /// The Keystone user (`username`).
        username: String,
        /// The user's domain, by name (`user_domain`, default `Default`).
        user_domain: String,
        /// The project the token is scoped to, by name (`project`).
        project: String,
        /// The project's domain, by name (`project_domain`, default `Default`).
        project_domain: String,
    },
    /// An application credential (`application_credential_id`); the secret is its secret.
    /// What operators are told to give services: it is bound to one project and its roles,
    /// and can be revoked without touching the user's password.
    ApplicationCredential { id: String },
}

/// Which endpoint of the service catalog a Nova controller uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NovaInterface {
    #[default]
    Public,
    Internal,
    Admin,
}

impl NovaInterface {
    /// The interface's name in the Keystone catalog.
    pub fn as_str(self) -> &'static str {
        match self {
            NovaInterface::Public => "public",
            NovaInterface::Internal => "internal",
            NovaInterface::Admin => "admin",
        }
    }
}

/// The settings of each controller type. A closed, tagged enum (`type:` is the tag).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ControllerKind {
    /// A Redfish BMC. `endpoint` is `https://host[:port]`.
    Redfish {
        endpoint: url::Url,
        /// The account; its password is the controller's secret.
        username: String,
        /// Session (default) or basic authentication.
        auth: RedfishAuth,
    },
    /// An IPMI BMC over LAN (RMCP+). `endpoint` is `host[:port]` (UDP, default port 623).
    Ipmi {
        endpoint: String,
        /// The account; its password is the controller's secret.
        username: String,
        /// The RMCP+ cipher suite: 3, 8, 12 or 17 (default 17).
        cipher_suite: u8,
    },
    /// A Proxmox VE cluster's API. `endpoint` is `https://host:8006`.
    Proxmox {
        endpoint: url::Url,
        auth: ProxmoxAuth,
    },
    /// A FortiGate's REST API, with an API key (Bearer) from the secret.
    Fortigate {
        endpoint: url::Url,
        /// The VDOM to act in; the API key's default when absent.
        vdom: Option<String>,
    },
    /// A Docker Engine: `unix:///var/run/docker.sock` or `https://host:2376`.
    Docker { endpoint: url::Url },
    /// A PostgreSQL server: `postgresql://host:port/dbname`.
    Postgres {
        endpoint: url::Url,
        /// The role; its password is the controller's secret.
        username: String,
    },
    /// Any installed Pacemaker fence agent (`fence_*`), run with options on stdin.
    FenceAgent {
        /// The agent's program name, such as `fence_ipmilan`.
        agent: String,
        /// Options passed to it as `key=value` lines (never secrets: the secret is added as
        /// `password=` at call time).
        options: BTreeMap<String, String>,
        /// What its fence stops (default compute).
        level: FenceLevel,
    },
    /// OpenStack Nova, through Keystone v3: the compute API of one cloud region, for
    /// Instance HA and for the host and server capabilities of the catalog.
    Nova {
        /// Keystone v3, `https://keystone.example:5000/v3`; Nova's endpoint is read from the
        /// token's service catalog.
        endpoint: url::Url,
        /// How qfence logs in to Keystone.
        auth: NovaAuth,
        /// Which of the catalog's endpoints to use (`interface`, default `public`).
        interface: NovaInterface,
        /// The catalog region (`region`); without it the compute service must have endpoints
        /// in one region only.
        region: Option<String>,
    },
    /// The host agents (`qfence agent`) of the controller's site and reach: each connects to
    /// an orchestrator allowed to call this controller, enrolled with a join token, and runs
    /// the `unit.*` capabilities on its own host. No endpoint and no secret: the agents come
    /// to the orchestrators, over mutual TLS.
    Agent,
}

impl ControllerKind {
    /// The controller's type.
    pub fn controller_type(&self) -> ControllerType {
        match self {
            ControllerKind::Redfish { .. } => ControllerType::Redfish,
            ControllerKind::Ipmi { .. } => ControllerType::Ipmi,
            ControllerKind::Proxmox { .. } => ControllerType::Proxmox,
            ControllerKind::Fortigate { .. } => ControllerType::Fortigate,
            ControllerKind::Docker { .. } => ControllerType::Docker,
            ControllerKind::Postgres { .. } => ControllerType::Postgres,
            ControllerKind::FenceAgent { .. } => ControllerType::FenceAgent,
            ControllerKind::Nova { .. } => ControllerType::Nova,
            ControllerKind::Agent => ControllerType::Agent,
        }
    }
}

/// One binding: a controller's capability, acting on a resource, in a role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// The controller it acts through.
    pub controller: ControllerId,
    /// One of the controller type's capabilities (`power.off`).
    pub capability: String,
    /// What the capability acts on, in the shape of its `ResourceKind`.
    pub resource: String,
    /// What the binding does, and so when it runs.
    pub role: Role,
    /// For fences: whether it counts toward its site's verdict. A fence that is not required
    /// is secondary.
    pub required: bool,
    /// Capability parameters, checked per capability (`params: {max_lag_bytes: "1048576"}`;
    /// for `vip.own`, the address the VIP points at for each site: `params: {dc1: 10.1.1.5}`).
    pub params: BTreeMap<String, String>,
    /// The binding's id as configured (`id`, default: none, and then one is derived from its
    /// content: see [`Binding::stable_id`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<BindingId>,
}

impl Binding {
    /// The binding's stable id: its configured `id`, or else a short hash of what it is
    /// (controller, capability, resource, role and params), which no edit of another binding
    /// changes. Unique within its list: the loader refuses two bindings with the same one.
    pub fn stable_id(&self) -> BindingId {
        if let Some(id) = &self.id {
            return id.clone();
        }
        // FNV-1a, 64 bits, folded to 32: stable across builds and platforms, unlike std's
        // hasher. Fields are separated by a byte no name or value holds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |s: &str| {
            for b in s.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        eat(self.controller.as_str());
        eat(&self.capability);
        eat(&self.resource);
        eat(self.role.as_str());
        for (k, v) in &self.params {
            eat(k);
            eat(v);
        }
        let folded = (h >> 32) ^ (h & 0xffff_ffff);
        BindingId::new(format!("{folded:08x}")).expect("hex digits are a name")
    }
}

/// `plans.NAME.standby`: what a site that does not own the plan is meant to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StandbyPosture {
    /// Stopped: its fences hold (today's rule, and the default).
    #[default]
    Cold,
    /// Running as a replica of the owner: safe while its `standby` bindings hold.
    Hot,
}

impl StandbyPosture {
    /// The posture as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            StandbyPosture::Cold => "cold",
            StandbyPosture::Hot => "hot",
        }
    }
}

/// `plans.NAME.rejoin`: how a failover's old owner comes back as a replica (ADR 0023).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejoinPolicy {
    /// Only when an operator asks (`qfence plan rejoin PLAN SITE`): the default, since the
    /// copy may have diverged and its site was not trusted.
    #[default]
    Manual,
    /// Once, on its own, when the old owner's host reads up again (its required fences read
    /// not holding); a failed attempt waits for an operator.
    Auto,
}

impl RejoinPolicy {
    /// The policy as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            RejoinPolicy::Manual => "manual",
            RejoinPolicy::Auto => "auto",
        }
    }
}

/// `plans.NAME:`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanConfig {
    /// The site that owns the plan when the cluster first sees it.
    pub owner: SiteId,
    /// Target preference when a failover names none: first listed first. Sites not listed
    /// follow in name order. (`priority`, default: none.)
    pub priority: Vec<SiteId>,
    /// How often health runs at the owner and fences are re-checked elsewhere
    /// (`interval_seconds`, default 2).
    pub interval: Duration,
    /// How old an observation may be and still count (`freshness_seconds`, default three
    /// intervals or the fence timeout plus one interval, whichever is longer).
    pub freshness: Duration,
    /// Health bad this long restarts the copy in place (`recovery_after_seconds`,
    /// default 4, or two intervals when the interval is longer than 2 s).
    pub recovery_after: Duration,
    /// Restarts in place before giving up on the site (`max_recoveries`, default 1).
    pub max_recoveries: u32,
    /// Health bad this long fails the plan over (`failover_after_seconds`,
    /// default 8, or four intervals when the interval is longer than 2 s).
    pub failover_after: Duration,
    /// This many consecutive *definitive* unhealthy readings of the owner fail the plan over
    /// without waiting out `failover_after` (`failover_after_definitive`, default: off). A
    /// definitive reading is the target's own word (a refused connection while its host
    /// answers); a timeout or a lost reading never is. A restart in place still comes first.
    pub failover_after_definitive: Option<u32>,
    /// The deadline for one fence to be verified (`fence_timeout_seconds`,
    /// default 6, or three intervals when the interval is longer than 2 s).
    pub fence_timeout: Duration,
    /// How many times a failed step is retried before the operation stops (`max_retries`,
    /// default 2).
    pub max_retries: u32,
    /// Whether the target's own fences are undone when it is promoted (`unfence_on_promote`,
    /// default false).
    pub unfence_on_promote: bool,
    /// Whether qfence fails over on its own, or only says it would (`auto_failover`,
    /// default true).
    pub auto_failover: bool,
    /// Whether the plan's standbys run (`standby`, `cold` or `hot`, default `cold`). A cold
    /// standby is fenced while it does not own the plan; a hot one (a streaming replica) runs,
    /// and the fence watch judges it by its `standby` bindings instead (in recovery, not
    /// writable, following the owner). Its required fences still prove it stopped in a
    /// failover: a standby reading never does.
    pub standby: StandbyPosture,
    /// How a failover's old owner rejoins as a replica of the new owner (`rejoin`, `manual`
    /// or `auto`, default `manual`). Either way its `rejoin` bindings run only in steady
    /// state, never at the owner, and never promote.
    pub rejoin: RejoinPolicy,
    /// Each site's instance: its bindings, in order.
    pub instances: BTreeMap<SiteId, Vec<Binding>>,
    /// Bindings that follow the owner (a VIP).
    pub service: Vec<Binding>,
}

impl PlanConfig {
    /// The plan's sites, in name order.
    pub fn sites(&self) -> impl Iterator<Item = &SiteId> {
        self.instances.keys()
    }

    /// The instance at `site`: its bindings in order, if the plan runs there.
    pub fn instance(&self, site: &SiteId) -> Option<&[Binding]> {
        self.instances.get(site).map(Vec::as_slice)
    }

    /// The fences of `site` that count toward its verdict, with their index in the instance.
    pub fn required_fences<'a>(
        &'a self,
        site: &SiteId,
    ) -> impl Iterator<Item = (usize, &'a Binding)> + 'a {
        self.bindings(site, Role::Fence).filter(|(_, b)| b.required)
    }

    /// The bindings of `site` in `role`.
    pub fn bindings<'a>(
        &'a self,
        site: &SiteId,
        role: Role,
    ) -> impl Iterator<Item = (usize, &'a Binding)> + 'a {
        self.instances
            .get(site)
            .map(|b| b.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(move |(_, b)| b.role == role)
    }
}

/// A configuration that passed validation. Only [`crate::config`]'s validation makes one, so
/// holders know every name in it resolves and every binding fits its capability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidatedConfig {
    config: Config,
}

impl ValidatedConfig {
    /// Wraps a configuration that validation accepted. Crate-private on purpose.
    pub(crate) fn new_unchecked(config: Config) -> Self {
        Self { config }
    }

    /// Wraps a configuration without validating it, for other crates' tests that build their
    /// fixtures in code. Only with the `testing` feature, which no shipped crate enables.
    #[cfg(feature = "testing")]
    pub fn assume_valid(config: Config) -> Self {
        Self { config }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A plan by name.
    pub fn plan(&self, id: &str) -> Option<&PlanConfig> {
        self.config.plans.get(id)
    }

    /// Every plan, in name order.
    pub fn plans(&self) -> impl Iterator<Item = (&PlanId, &PlanConfig)> {
        self.config.plans.iter()
    }

    /// A controller by name.
    pub fn controller(&self, id: &str) -> Option<&ControllerConfig> {
        self.config.controllers.get(id)
    }

    /// The capability a binding names. Validation guarantees it exists.
    pub fn capability(&self, binding: &Binding) -> &'static CapabilitySpec {
        let controller = &self.config.controllers[&binding.controller];
        controller
            .controller_type()
            .capability(&binding.capability)
            .expect("validation checked every binding's capability")
    }

    /// The orchestrators at `site`.
    pub fn orchestrators_at<'a>(
        &'a self,
        site: &'a SiteId,
    ) -> impl Iterator<Item = &'a OrchestratorId> + 'a {
        self.config
            .orchestrators
            .iter()
            .filter(move |(_, o)| &o.site == site)
            .map(|(id, _)| id)
    }
}
