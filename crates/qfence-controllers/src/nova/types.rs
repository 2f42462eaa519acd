//! What the driver reads from Nova, as plain types: compute services, servers, flavors,
//! images, aggregates and migration records. The wire shapes (`Wire*`) are parsed loosely,
//! as Nova's answers vary across microversions; the public types hold only what qfence uses.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;

/// Whether Nova hears a service's heartbeat (`state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceState {
    Up,
    /// No heartbeat within `service_down_time`, or forced down.
    Down,
}

/// Whether the scheduler may use a service's host (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceStatus {
    Enabled,
    Disabled,
}

/// A `nova-compute` service (`GET /os-services`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeService {
    /// Its id (a UUID from microversion 2.53).
    pub id: String,
    pub binary: String,
    /// The compute host's name, as servers' `OS-EXT-SRV-ATTR:host` name it.
    pub host: String,
    pub zone: Option<String>,
    pub state: ServiceState,
    pub status: ServiceStatus,
    pub forced_down: bool,
    pub disabled_reason: Option<String>,
    /// The last heartbeat Nova recorded, as Nova wrote it (UTC, no zone).
    pub updated_at: Option<String>,
}

impl ComputeService {
    /// `updated_at` as a time, when it parses.
    pub fn updated(&self) -> Option<SystemTime> {
        self.updated_at.as_deref().and_then(parse_time)
    }

    /// In words for evidence: `compute-3: state=down status=disabled ("qfence") forced_down=true
    /// updated_at=2026-12-01T14:02:07`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({}): state={} status={}",
            self.host,
            self.binary,
            match self.state {
                ServiceState::Up => "up",
                ServiceState::Down => "down",
            },
            match self.status {
                ServiceStatus::Enabled => "enabled",
                ServiceStatus::Disabled => "disabled",
            }
        );
        if let Some(r) = &self.disabled_reason {
            s.push_str(&format!(" ({r:?})"));
        }
        s.push_str(&format!(" forced_down={}", self.forced_down));
        if let Some(u) = &self.updated_at {
            s.push_str(&format!(" updated_at={u}"));
        }
        s
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireService {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    binary: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    forced_down: bool,
    #[serde(default)]
    disabled_reason: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
}

impl WireService {
    pub(crate) fn typed(self) -> Result<ComputeService, String> {
        let state = match self.state.as_str() {
            "up" => ServiceState::Up,
            "down" => ServiceState::Down,
            other => return Err(format!("service {}: state {other:?}", self.host)),
        };
        let status = match self.status.as_str() {
            "enabled" => ServiceStatus::Enabled,
            "disabled" => ServiceStatus::Disabled,
            other => return Err(format!("service {}: status {other:?}", self.host)),
        };
        let id = match self.id {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            other => return Err(format!("service {}: id {other}", self.host)),
        };
        Ok(ComputeService {
            id,
            binary: self.binary,
            host: self.host,
            zone: self.zone,
            state,
            status,
            forced_down: self.forced_down,
            disabled_reason: self.disabled_reason.filter(|r| !r.is_empty()),
            updated_at: self.updated_at,
        })
    }
}

/// A server's `status`, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerStatus {
    Active,
    Shutoff,
    Error,
    Build,
    /// Being rebuilt: an evacuation shows this on the destination.
    Rebuild,
    Paused,
    Suspended,
    Shelved,
    ShelvedOffloaded,
    Migrating,
    Resize,
    VerifyResize,
    Deleted,
    SoftDeleted,
    /// `UNKNOWN`: its cell did not answer.
    Unknown,
    /// Any other status, as written.
    Other(String),
}

impl ServerStatus {
    pub fn parse(s: &str) -> Self {
        match s {
            "ACTIVE" => Self::Active,
            "SHUTOFF" => Self::Shutoff,
            "ERROR" => Self::Error,
            "BUILD" => Self::Build,
            "REBUILD" => Self::Rebuild,
            "PAUSED" => Self::Paused,
            "SUSPENDED" => Self::Suspended,
            "SHELVED" => Self::Shelved,
            "SHELVED_OFFLOADED" => Self::ShelvedOffloaded,
            "MIGRATING" => Self::Migrating,
            "RESIZE" => Self::Resize,
            "VERIFY_RESIZE" => Self::VerifyResize,
            "DELETED" => Self::Deleted,
            "SOFT_DELETED" => Self::SoftDeleted,
            "UNKNOWN" => Self::Unknown,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Active => "ACTIVE",
            Self::Shutoff => "SHUTOFF",
            Self::Error => "ERROR",
            Self::Build => "BUILD",
            Self::Rebuild => "REBUILD",
            Self::Paused => "PAUSED",
            Self::Suspended => "SUSPENDED",
            Self::Shelved => "SHELVED",
            Self::ShelvedOffloaded => "SHELVED_OFFLOADED",
            Self::Migrating => "MIGRATING",
            Self::Resize => "RESIZE",
            Self::VerifyResize => "VERIFY_RESIZE",
            Self::Deleted => "DELETED",
            Self::SoftDeleted => "SOFT_DELETED",
            Self::Unknown => "UNKNOWN",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The flavor a server was built with, as embedded in it (microversion 2.47 and later).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerFlavor {
    /// The flavor's name when the server was built (`original_name`).
    pub name: String,
    pub vcpus: u64,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub extra_specs: BTreeMap<String, String>,
}

/// A server (`GET /servers/{id}`, `/servers/detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub status: ServerStatus,
    /// `OS-EXT-STS:task_state`: an operation under way (`rebuilding`, `rebuild_spawning`...).
    pub task_state: Option<String>,
    /// `OS-EXT-STS:vm_state`.
    pub vm_state: Option<String>,
    /// `OS-EXT-SRV-ATTR:host`: the compute host it is on. `None` when the credential may not
    /// see hosts (Nova shows it to admins only) or the server has none yet.
    pub host: Option<String>,
    pub flavor: ServerFlavor,
    /// The image's id; `None` for a server booted from a volume.
    pub image: Option<String>,
    pub locked: bool,
    pub locked_reason: Option<String>,
    pub project_id: String,
    pub metadata: BTreeMap<String, String>,
    /// The last fault Nova recorded (`fault.message`), shown while the server is in ERROR.
    pub fault: Option<String>,
}

impl Server {
    /// In words for evidence: `server 9f3c… "web-1": ACTIVE on compute-2`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "server {} {:?}: {} on {}",
            self.id,
            self.name,
            self.status,
            self.host.as_deref().unwrap_or("(no host shown)")
        );
        if let Some(t) = &self.task_state {
            s.push_str(&format!(", task {t}"));
        }
        if self.locked {
            match &self.locked_reason {
                Some(r) => s.push_str(&format!(", locked ({r:?})")),
                None => s.push_str(", locked"),
            }
        }
        if let Some(f) = &self.fault {
            s.push_str(&format!(", fault {f:?}"));
        }
        s
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireServer {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
    #[serde(default, rename = "OS-EXT-STS:task_state")]
    task_state: Option<String>,
    #[serde(default, rename = "OS-EXT-STS:vm_state")]
    vm_state: Option<String>,
    #[serde(default, rename = "OS-EXT-SRV-ATTR:host")]
    host: Option<String>,
    #[serde(default)]
    flavor: Value,
    #[serde(default)]
    image: Value,
    #[serde(default)]
    locked: Option<bool>,
    #[serde(default)]
    locked_reason: Option<String>,
    #[serde(default)]
    tenant_id: String,
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
    #[serde(default)]
    fault: Option<Value>,
}

impl WireServer {
    pub(crate) fn typed(self) -> Server {
        let f = &self.flavor;
        let num = |k: &str| f.get(k).and_then(Value::as_u64).unwrap_or(0);
        let flavor = ServerFlavor {
            name: f
                .get("original_name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            vcpus: num("vcpus"),
            ram_mb: num("ram"),
            disk_gb: num("disk"),
            extra_specs: strings(f.get("extra_specs")),
        };
        Server {
            id: self.id,
            name: self.name,
            status: ServerStatus::parse(&self.status),
            task_state: self.task_state,
            vm_state: self.vm_state,
            host: self.host.filter(|h| !h.is_empty()),
            flavor,
            // Booted from a volume: `"image": ""`.
            image: self
                .image
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            locked: self.locked.unwrap_or(false),
            locked_reason: self.locked_reason,
            project_id: self.tenant_id,
            metadata: strings(Some(&Value::Object(self.metadata.into_iter().collect()))),
            fault: self
                .fault
                .as_ref()
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// A flavor (`GET /flavors/detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u64,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub is_public: bool,
    pub extra_specs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFlavor {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    vcpus: u64,
    #[serde(default)]
    ram: u64,
    #[serde(default)]
    disk: u64,
    #[serde(default, rename = "os-flavor-access:is_public")]
    is_public: Option<bool>,
    #[serde(default)]
    extra_specs: Option<Value>,
}

impl WireFlavor {
    pub(crate) fn typed(self) -> Flavor {
        Flavor {
            id: self.id,
            name: self.name,
            vcpus: self.vcpus,
            ram_mb: self.ram,
            disk_gb: self.disk,
            is_public: self.is_public.unwrap_or(true),
            extra_specs: strings(self.extra_specs.as_ref()),
        }
    }
}

/// An image (Glance v2 `GET /v2/images/{id}`): custom properties are top-level fields there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub status: String,
    /// Every field but Glance's own (the operator's properties, such as `evacuable`).
    pub properties: BTreeMap<String, String>,
}

/// Glance's own image fields: everything else is a property.
const GLANCE_FIELDS: &[&str] = &[
    "id",
    "name",
    "status",
    "visibility",
    "protected",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "owner",
    "size",
    "virtual_size",
    "min_ram",
    "min_disk",
    "disk_format",
    "container_format",
    "created_at",
    "updated_at",
    "tags",
    "self",
    "file",
    "schema",
    "direct_url",
    "locations",
    "stores",
    "os_hidden",
];

impl Image {
    pub(crate) fn from_glance(v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let properties = o
            .iter()
            .filter(|(k, _)| !GLANCE_FIELDS.contains(&k.as_str()))
            .filter_map(|(k, v)| Some((k.clone(), scalar(v)?)))
            .collect();
        Some(Self {
            id: s("id"),
            name: s("name"),
            status: s("status"),
            properties,
        })
    }
}

/// A host aggregate (`GET /os-aggregates`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    pub id: u64,
    pub uuid: Option<String>,
    pub name: String,
    pub availability_zone: Option<String>,
    pub hosts: Vec<String>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireAggregate {
    #[serde(default)]
    id: u64,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    availability_zone: Option<String>,
    #[serde(default)]
    hosts: Option<Vec<String>>,
    #[serde(default)]
    metadata: Option<Value>,
}

impl WireAggregate {
    pub(crate) fn typed(self) -> Aggregate {
        Aggregate {
            id: self.id,
            uuid: self.uuid,
            name: self.name,
            availability_zone: self.availability_zone,
            hosts: self.hosts.unwrap_or_default(),
            metadata: strings(self.metadata.as_ref()),
        }
    }
}

/// What a migration record is for (`migration_type`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MigrationType {
    Evacuation,
    LiveMigration,
    Migration,
    Resize,
    Other(String),
}

impl MigrationType {
    pub fn parse(s: &str) -> Self {
        match s {
            "evacuation" => Self::Evacuation,
            "live-migration" => Self::LiveMigration,
            "migration" => Self::Migration,
            "resize" => Self::Resize,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A migration record's `status`. For an evacuation: `accepted` (the API made the record),
/// `pre-migrating`, `migrating`? (not always), `done` (rebuilt on the destination),
/// `completed` (the source host came back and cleaned up); `error` (it never started: no
/// valid host) or `failed` (the rebuild failed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MigrationStatus {
    Accepted,
    PreMigrating,
    Migrating,
    Done,
    Completed,
    Error,
    Failed,
    Other(String),
}

impl MigrationStatus {
    pub fn parse(s: &str) -> Self {
        match s {
            "accepted" => Self::Accepted,
            "pre-migrating" => Self::PreMigrating,
            "migrating" => Self::Migrating,
            "done" => Self::Done,
            "completed" => Self::Completed,
            "error" => Self::Error,
            "failed" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Accepted => "accepted",
            Self::PreMigrating => "pre-migrating",
            Self::Migrating => "migrating",
            Self::Done => "done",
            Self::Completed => "completed",
            Self::Error => "error",
            Self::Failed => "failed",
            Self::Other(s) => s,
        }
    }

    /// Whether the record says the evacuation succeeded (`done`, `completed`).
    pub fn succeeded(&self) -> bool {
        matches!(self, Self::Done | Self::Completed)
    }

    /// Whether it says the evacuation failed (`error`, `failed`).
    pub fn failed(&self) -> bool {
        matches!(self, Self::Error | Self::Failed)
    }
}

impl fmt::Display for MigrationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A migration record (`GET /os-migrations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub id: u64,
    /// From microversion 2.59.
    pub uuid: Option<String>,
    /// The server's id (`instance_uuid`).
    pub server: String,
    pub kind: MigrationType,
    pub status: MigrationStatus,
    pub source_compute: Option<String>,
    pub dest_compute: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMigration {
    #[serde(default)]
    id: u64,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    instance_uuid: String,
    #[serde(default)]
    migration_type: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    source_compute: Option<String>,
    #[serde(default)]
    dest_compute: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
}

impl WireMigration {
    pub(crate) fn typed(self) -> Migration {
        Migration {
            id: self.id,
            uuid: self.uuid,
            server: self.instance_uuid,
            kind: MigrationType::parse(&self.migration_type),
            status: MigrationStatus::parse(&self.status),
            source_compute: self.source_compute,
            dest_compute: self.dest_compute,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// What an evacuation asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvacuateRequest {
    /// The host to rebuild on; `None` lets the scheduler choose. From microversion 2.29 a
    /// named host is checked by the scheduler too.
    pub target_host: Option<String>,
    /// Whether the server's disk is on storage the target host shares. Sent only below
    /// microversion 2.14, where Nova requires it (default there: `false`); from 2.14 on Nova
    /// finds out itself and this is ignored.
    pub on_shared_storage: Option<bool>,
}

/// An evacuation that Nova accepted, to follow to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evacuation {
    pub server: String,
    /// The host it was evacuated from.
    pub source: String,
    /// Evacuation records the server already had (earlier attempts), not this one's.
    pub(crate) earlier: Vec<u64>,
    /// The microversion the evacuation was sent with.
    pub microversion: super::Microversion,
}

/// Where an accepted evacuation stands, by its migration record and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvacuationProgress {
    /// Not finished: the record's status (`None`: no record yet).
    Running(Option<MigrationStatus>),
    /// The record says `done` (or `completed`) and the server is on another host.
    Done {
        migration: Migration,
        server: Server,
    },
    /// The record says `error` or `failed`; the server's fault says why, when it has one.
    Failed {
        migration: Migration,
        server: Server,
    },
}

/// Values of a JSON object that are scalars, as strings (metadata, extra specs).
fn strings(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), scalar(v)?)))
        .collect()
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses the times OpenStack writes: `2026-12-01T14:02:07.000000` (Nova, UTC without a zone),
/// `2026-12-01T14:02:07Z` and `...+00:00` (Keystone). `None` for anything else.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, rest) = s.split_once('T').or_else(|| s.split_once(' '))?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (time, offset) = match rest.find(['Z', '+']).or_else(|| rest.rfind('-')) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let offset_secs: i64 = match offset {
        "" | "Z" => 0,
        o => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (h, mi) = o[1..].split_once(':')?;
            sign * (h.parse::<i64>().ok()? * 3600 + mi.parse::<i64>().ok()? * 60)
        }
    };
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec = t.next().unwrap_or("0");
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let ss = whole.parse::<i64>().ok()?;
    let nanos = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().take(9).collect();
        digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32)
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let secs = qfence_model::time::days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60 + ss
        - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openstack_times_parse() {
        let t = |s| {
            parse_time(s)
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        assert_eq!(t("1970-01-01T00:00:00Z"), 0);
        assert_eq!(t("2000-02-29T00:00:00.000000"), 951_782_400);
        assert_eq!(t("2026-11-30T12:34:56.123456Z"), 1_796_042_096);
        assert_eq!(t("2026-11-30T13:34:56+01:00"), 1_796_042_096);
        assert!(parse_time("yesterday").is_none());
    }

    #[test]
    fn a_service_reads_as_nova_writes_it() {
        let w: WireService = serde_json::from_value(json!({
            "id": "4c8c0e5e-8b4a-4e54-9b4a-63ad6c0e3a1f", "binary": "nova-compute",
            "disabled_reason": null, "host": "compute-1", "state": "down",
            "status": "enabled", "updated_at": "2026-12-01T14:02:07.000000",
            "forced_down": true, "zone": "nova"}))
        .unwrap();
        let s = w.typed().unwrap();
        assert_eq!(
            (s.state, s.status, s.forced_down),
            (ServiceState::Down, ServiceStatus::Enabled, true)
        );
        assert!(s.updated().is_some());
        assert!(
            s.describe().contains("forced_down=true"),
            "{}",
            s.describe()
        );
        let bad: WireService =
            serde_json::from_value(json!({"host": "x", "state": "maybe"})).unwrap();
        assert!(bad.typed().is_err());
    }

    #[test]
    fn a_server_reads_its_host_flavor_and_lock() {
        let w: WireServer = serde_json::from_value(json!({
            "id": "9f3c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b", "name": "web-1", "status": "ACTIVE",
            "OS-EXT-STS:task_state": null, "OS-EXT-STS:vm_state": "active",
            "OS-EXT-SRV-ATTR:host": "compute-2", "tenant_id": "p1",
            "flavor": {"original_name": "m1.tiny", "vcpus": 1, "ram": 128, "disk": 1,
                       "extra_specs": {"evacuable": "true", "hw:cpu_policy": "shared"}},
            "image": {"id": "img-1"}, "locked": true, "locked_reason": "qfence",
            "metadata": {"ha": "true"}}))
        .unwrap();
        let s = w.typed();
        assert_eq!(s.host.as_deref(), Some("compute-2"));
        assert_eq!(s.flavor.extra_specs["evacuable"], "true");
        assert_eq!(s.image.as_deref(), Some("img-1"));
        assert!(s.locked && s.locked_reason.as_deref() == Some("qfence"));
        let volume: WireServer =
            serde_json::from_value(json!({"id": "x", "status": "ERROR", "image": "",
                "fault": {"code": 500, "message": "No valid host was found."}}))
            .unwrap();
        let v = volume.typed();
        assert_eq!((v.image, v.status), (None, ServerStatus::Error));
        assert_eq!(v.fault.as_deref(), Some("No valid host was found."));
    }

    #[test]
    fn migration_states_say_done_or_failed() {
        for (s, ok, bad) in [
            ("accepted", false, false),
            ("done", true, false),
            ("completed", true, false),
            ("error", false, true),
            ("failed", false, true),
        ] {
            let st = MigrationStatus::parse(s);
            assert_eq!((st.succeeded(), st.failed()), (ok, bad), "{s}");
            assert_eq!(st.as_str(), s);
        }
    }

    #[test]
    fn image_properties_are_the_fields_glance_does_not_own() {
        let i = Image::from_glance(&json!({"id": "i", "name": "cirros", "status": "active",
            "visibility": "public", "evacuable": "true", "tags": [], "hw_qemu_guest_agent": "yes"}))
        .unwrap();
        assert_eq!(i.properties.len(), 2);
        assert_eq!(i.properties["evacuable"], "true");
    }
}
