//! The capability catalog: for each controller type, what it can do, in which roles, at which
//! fence level, and on what kind of resource. It is static: a driver cannot offer a capability
//! the catalog does not list, and configuration validation refuses any other.
//!
//! Each capability also declares the binding parameters it takes ([`Params`]): their names,
//! meaning, default and type. Configuration validation checks a binding's `params:` against
//! that declaration, and drivers read parameters only through it, so a parameter a driver
//! reads is always one that validation accepted.
//!
//! `docs/specs/capabilities.md` is the human copy of this table; a test keeps them in step.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::{FenceLevel, Role};

/// The kinds of controller qfence has drivers for. A closed set: the compiler finds every place
/// a new one must be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerType {
    Redfish,
    Ipmi,
    Proxmox,
    Fortigate,
    Docker,
    Postgres,
    FenceAgent,
    Nova,
    Agent,
}

impl ControllerType {
    /// Every controller type.
    pub const ALL: [ControllerType; 9] = [
        ControllerType::Redfish,
        ControllerType::Ipmi,
        ControllerType::Proxmox,
        ControllerType::Fortigate,
        ControllerType::Docker,
        ControllerType::Postgres,
        ControllerType::FenceAgent,
        ControllerType::Nova,
        ControllerType::Agent,
    ];

    /// The type's name as written in configuration (`type: redfish`).
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerType::Redfish => "redfish",
            ControllerType::Ipmi => "ipmi",
            ControllerType::Proxmox => "proxmox",
            ControllerType::Fortigate => "fortigate",
            ControllerType::Docker => "docker",
            ControllerType::Postgres => "postgres",
            ControllerType::FenceAgent => "fence-agent",
            ControllerType::Nova => "nova",
            ControllerType::Agent => "agent",
        }
    }

    /// The capabilities of this type.
    pub fn capabilities(self) -> &'static [CapabilitySpec] {
        match self {
            ControllerType::Redfish => REDFISH,
            ControllerType::Ipmi => IPMI,
            ControllerType::Proxmox => PROXMOX,
            ControllerType::Fortigate => FORTIGATE,
            ControllerType::Docker => DOCKER,
            ControllerType::Postgres => POSTGRES,
            ControllerType::FenceAgent => FENCE_AGENT,
            ControllerType::Nova => NOVA,
            ControllerType::Agent => AGENT,
        }
    }

    /// Whether a controller of this type authenticates with a secret: read by validation
    /// (`secret:` required or refused), by the driver build and by registration. Said here
    /// only.
    pub fn secret(self) -> SecretUse {
        match self {
            ControllerType::Redfish
            | ControllerType::Ipmi
            | ControllerType::Proxmox
            | ControllerType::Fortigate
            | ControllerType::Nova => SecretUse::Required,
            // A PostgreSQL role without a password logs in by what pg_hba.conf allows (peer,
            // trust); a fence agent gets `password=` only when one is named.
            ControllerType::Postgres | ControllerType::FenceAgent => SecretUse::Optional,
            // Docker authenticates by socket access or client certificate.
            ControllerType::Docker => SecretUse::Unused,
            // Each host agent authenticates with the certificate it enrolled with.
            ControllerType::Agent => SecretUse::Refused,
        }
    }

    /// The capability of this type with that name, if there is one.
    pub fn capability(self, name: &str) -> Option<&'static CapabilitySpec> {
        self.capabilities().iter().find(|c| c.name == name)
    }

    /// Names of this type's capabilities, comma-separated, for error messages.
    pub fn capability_names(self) -> String {
        let names: Vec<&str> = self.capabilities().iter().map(|c| c.name).collect();
        if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        }
    }
}

/// Whether a controller type authenticates with a secret ([`ControllerType::secret`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretUse {
    /// `secret:` is required: the driver cannot log in without it.
    Required,
    /// `secret:` may be named; without it the target's own rules let qfence in.
    Optional,
    /// A named secret is accepted and not used: the type authenticates otherwise.
    Unused,
    /// `secret:` is refused: the type authenticates otherwise and naming one is a mistake.
    Refused,
}

impl fmt::Display for ControllerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ControllerType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        ControllerType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or(())
    }
}

/// What a capability acts on, which says what a binding's `resource` must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResourceKind {
    /// A BMC's computer system: its Redfish id, UUID or name.
    System,
    /// A host behind a BMC, by name.
    Host,
    /// A Proxmox VE guest as `node/vmid` (`pve-dc1-01/101`).
    NodeVmid,
    /// A Proxmox VE replication job id (`101-1`).
    ReplicationJob,
    /// A FortiGate firewall policy id (a number).
    PolicyId,
    /// A FortiGate virtual IP object name.
    VipName,
    /// A container name.
    Container,
    /// The database server the controller points at (`self` or its name).
    Server,
    /// A fence agent's plug.
    Plug,
    /// An OpenStack Nova server, by its UUID.
    Instance,
    /// A systemd unit on a host that runs `qfence agent`, as `host/unit`
    /// (`db-1/postgresql.service`).
    Unit,
}

impl ResourceKind {
    /// The kind's name, as in `docs/specs/capabilities.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::System => "system",
            ResourceKind::Host => "host",
            ResourceKind::NodeVmid => "node-vmid",
            ResourceKind::ReplicationJob => "replication-job",
            ResourceKind::PolicyId => "policy-id",
            ResourceKind::VipName => "vip-name",
            ResourceKind::Container => "container",
            ResourceKind::Server => "server",
            ResourceKind::Plug => "plug",
            ResourceKind::Instance => "instance",
            ResourceKind::Unit => "unit",
        }
    }

    /// How the resource is written, for messages and the plan editor.
    pub fn describe(self) -> &'static str {
        match self {
            ResourceKind::System => "system id, UUID or host name",
            ResourceKind::Host => "host name",
            ResourceKind::NodeVmid => "node/vmid, e.g. pve-dc1-01/101",
            ResourceKind::ReplicationJob => "replication job id, e.g. 101-1",
            ResourceKind::PolicyId => "firewall policy id (a number)",
            ResourceKind::VipName => "virtual IP name",
            ResourceKind::Container => "container name",
            ResourceKind::Server => "server name",
            ResourceKind::Plug => "plug",
            ResourceKind::Instance => "server UUID, e.g. 9f3c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b",
            ResourceKind::Unit => "host/unit, e.g. db-1/postgresql.service",
        }
    }

    /// Whether `resource` is well-formed for this kind (not whether it exists: discovery and
    /// the binding-time checks answer that).
    pub fn accepts(self, resource: &str) -> bool {
        if resource.is_empty() || resource.chars().any(char::is_control) {
            return false;
        }
        match self {
            ResourceKind::NodeVmid => match resource.split_once('/') {
                Some((node, vmid)) => {
                    !node.is_empty()
                        && !node.contains('/')
                        && vmid.parse::<u32>().is_ok_and(|id| id >= 100)
                }
                None => false,
            },
            ResourceKind::ReplicationJob => match resource.split_once('-') {
                Some((vmid, job)) => vmid.parse::<u32>().is_ok() && job.parse::<u32>().is_ok(),
                None => false,
            },
            ResourceKind::PolicyId => resource.parse::<u32>().is_ok(),
            ResourceKind::Instance => is_uuid(resource),
            ResourceKind::Unit => is_host_unit(resource),
            _ => true,
        }
    }
}

/// The type of a capability parameter's value (values are written as strings in YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum ParamType {
    /// A whole number of bytes.
    Bytes,
    /// A number of seconds, at least [`crate::config::MIN_DURATION`]; fractions allowed.
    Seconds,
    /// A whole number of seconds from `min` to `max`.
    WholeSeconds { min: u32, max: u32 },
    /// A whole number (a count).
    Count,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// Text of one line, not empty, at most `max` characters.
    Text { max: u16 },
    /// A TCP port, 1 to 65535.
    Port,
    /// An `http://` or `https://` URL.
    HttpUrl,
}

impl ParamType {
    /// What a value must look like, for messages and the docs ("a whole number of bytes").
    pub fn describe(self) -> String {
        match self {
            ParamType::Bytes => "a whole number of bytes".to_owned(),
            ParamType::Seconds => "a number of seconds, at least 0.1".to_owned(),
            ParamType::WholeSeconds { min, max } => {
                format!("a whole number of seconds from {min} to {max}")
            }
            ParamType::Count => "a whole number".to_owned(),
            ParamType::OneOf(words) => format!("one of: {}", words.join(", ")),
            ParamType::IpAddress => "an IP address".to_owned(),
            ParamType::Text { max } => format!("one line of text, at most {max} characters"),
            ParamType::Port => "a TCP port, 1 to 65535".to_owned(),
            ParamType::HttpUrl => "an http:// or https:// URL".to_owned(),
        }
    }

    /// Whether `value` is of this type.
    pub fn accepts(self, value: &str) -> bool {
        let v = value.trim();
        match self {
            ParamType::Bytes => v.parse::<u64>().is_ok(),
            ParamType::Seconds => v.parse::<f64>().is_ok_and(|s| {
                s.is_finite() && s >= crate::config::MIN_DURATION.as_secs_f64() && s <= 1e9
            }),
            ParamType::WholeSeconds { min, max } => {
                v.parse::<u32>().is_ok_and(|s| (min..=max).contains(&s))
            }
            ParamType::Count => v.parse::<u32>().is_ok(),
            ParamType::OneOf(words) => words.contains(&v),
            ParamType::IpAddress => v.parse::<std::net::IpAddr>().is_ok(),
            ParamType::Text { max } => {
                !v.is_empty()
                    && v.chars().count() <= usize::from(max)
                    && !v.chars().any(char::is_control)
            }
            ParamType::Port => v.parse::<u16>().is_ok_and(|p| p > 0),
            ParamType::HttpUrl => url::Url::parse(v)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()),
        }
    }
}

/// One named parameter of a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParamSpec {
    /// Its key in a binding's `params:`.
    pub name: &'static str,
    /// What it means, in a sentence fragment.
    pub meaning: &'static str,
    /// The value used when the binding does not set it; `None` when absent means "no limit".
    pub default: Option<&'static str>,
    /// What its value must be.
    pub ty: ParamType,
}

/// The parameters a capability takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Params {
    /// These named parameters, each optional.
    Named(&'static [ParamSpec]),
    /// One parameter per plan site, named after the site, every one required (`vip.own`: the
    /// address the VIP points at when that site owns the plan). `name` is `SITE`.
    PerSite(&'static ParamSpec),
}

impl Params {
    /// The named parameter `name`, if the capability declares it (for [`Params::PerSite`],
    /// any name: it is a site's, checked against the plan's sites by validation).
    pub fn get(self, name: &str) -> Option<&'static ParamSpec> {
        match self {
            Params::Named(list) => list.iter().find(|p| p.name == name),
            Params::PerSite(spec) => Some(spec),
        }
    }

    /// The named parameters' names, comma-separated, or "(none)".
    pub fn names(self) -> String {
        match self {
            Params::Named([]) => "(none)".to_owned(),
            Params::Named(list) => list.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
            Params::PerSite(_) => "one per plan site, named after it".to_owned(),
        }
    }
}

/// `db.standby`: where each site's server is reached by its standbys' WAL receivers.
static PG_SITE_SENDER: ParamSpec = ParamSpec {
    name: "SITE",
    meaning: "the host:port a standby's WAL receiver streams from when that site owns the \
              plan (pg_stat_wal_receiver's sender_host and sender_port)",
    default: None,
    ty: ParamType::Text { max: 255 },
};

static VIP_SITE_ADDRESS: ParamSpec = ParamSpec {
    name: "SITE",
    meaning: "the IP address the VIP maps to when that site owns the plan",
    default: None,
    ty: ParamType::IpAddress,
};

/// One capability of a controller type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CapabilitySpec {
    /// Its name in bindings (`power.off`).
    pub name: &'static str,
    /// The roles a binding of it may take.
    pub roles: &'static [Role],
    /// For fence capabilities: what the fence stops. `None` for the rest.
    pub level: Option<FenceLevel>,
    /// For fence capabilities: the action that undoes the fence (`power.on`).
    pub unfence: Option<&'static str>,
    /// What the binding's `resource` names.
    pub resource: ResourceKind,
    /// The binding parameters it takes.
    pub params: Params,
}

impl CapabilitySpec {
    /// Whether a binding of this capability may take `role`.
    pub fn allows(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The roles, comma-separated, for error messages.
    pub fn role_names(&self) -> String {
        self.roles
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

const fn cap(
    name: &'static str,
    roles: &'static [Role],
    level: Option<FenceLevel>,
    unfence: Option<&'static str>,
    resource: ResourceKind,
) -> CapabilitySpec {
    CapabilitySpec {
        name,
        roles,
        level,
        unfence,
        resource,
        params: Params::Named(&[]),
    }
}

impl CapabilitySpec {
    const fn with_params(self, params: Params) -> CapabilitySpec {
        CapabilitySpec { params, ..self }
    }
}

use FenceLevel::{Application, Compute, Network};
use ResourceKind as R;
use Role::*;

static REDFISH: &[CapabilitySpec] = &[
    cap(
        "power.off",
        &[Fence],
        Some(Compute),
        Some("power.on"),
        R::System,
    ),
    cap("power.status", &[Health], None, None, R::System),
];

static IPMI: &[CapabilitySpec] = &[
    cap(
        "power.off",
        &[Fence],
        Some(Compute),
        Some("power.on"),
        R::Host,
    ),
    cap("watchdog", &[DeadMan], Some(Compute), None, R::Host).with_params(Params::Named(&[
        ParamSpec {
            name: "timeout_seconds",
            meaning: "the watchdog's countdown: the host is powered off this long after the \
                      last renewal",
            default: Some("10"),
            ty: ParamType::WholeSeconds { min: 1, max: 6553 },
        },
    ])),
];

static PROXMOX: &[CapabilitySpec] = &[
    cap(
        "vm.stop",
        &[Fence],
        Some(Compute),
        Some("vm.start"),
        R::NodeVmid,
    ),
    cap("vm.start", &[Switchover, Recovery], None, None, R::NodeVmid),
    cap("vm.status", &[Health], None, None, R::NodeVmid),
    cap(
        "replication.lag",
        &[Readiness],
        None,
        None,
        R::ReplicationJob,
    )
    .with_params(Params::Named(&[
        ParamSpec {
            name: "max_age_seconds",
            meaning: "seconds since the job's last successful sync",
            default: Some("1200"),
            ty: ParamType::WholeSeconds {
                min: 1,
                max: u32::MAX,
            },
        },
        ParamSpec {
            name: "max_fail_count",
            meaning: "consecutive failed syncs allowed",
            default: Some("0"),
            ty: ParamType::Count,
        },
    ])),
];

static FORTIGATE: &[CapabilitySpec] = &[
    cap(
        "policy.disable",
        &[Fence, Shield],
        Some(Network),
        Some("policy.enable"),
        R::PolicyId,
    ),
    cap("vip.own", &[Service], None, None, R::VipName)
        .with_params(Params::PerSite(&VIP_SITE_ADDRESS)),
];

static DOCKER: &[CapabilitySpec] = &[
    cap(
        "container.stop",
        &[Fence],
        Some(Compute),
        Some("container.start"),
        R::Container,
    ),
    cap(
        "container.start",
        &[Switchover, Recovery],
        None,
        None,
        R::Container,
    ),
    cap(
        "container.health",
        &[Health, Readiness],
        None,
        None,
        R::Container,
    ),
];

static POSTGRES: &[CapabilitySpec] = &[
    cap("db.demote", &[Fence], Some(Application), None, R::Server)
        .with_params(Params::Named(&PG_DEMOTE)),
    cap("db.promote", &[Switchover], None, None, R::Server),
    cap("db.standby", &[Standby], None, None, R::Server)
        .with_params(Params::PerSite(&PG_SITE_SENDER)),
    cap("db.rejoin", &[Rejoin], None, None, R::Server).with_params(Params::Named(&PG_REJOIN)),
    cap("replication.lag", &[Readiness], None, None, R::Server).with_params(Params::Named(&[
        ParamSpec {
            name: "max_lag_bytes",
            meaning: "bytes of WAL the replica may be behind the primary",
            default: Some("1048576"),
            ty: ParamType::Bytes,
        },
        ParamSpec {
            name: "max_lag_seconds",
            meaning: "seconds since the last replayed commit allowed",
            default: Some("30"),
            ty: ParamType::Seconds,
        },
    ])),
    cap("db.health", &[Health], None, None, R::Server).with_params(Params::Named(&[ParamSpec {
        name: "expect_role",
        meaning: "the role the server must have to count as healthy; the other counts as \
                      unhealthy",
        default: None,
        ty: ParamType::OneOf(&["primary", "replica"]),
    }])),
];

/// Where a PostgreSQL server's files are, when the orchestrator runs on its host: `db.demote`
/// then stops the server cleanly and `db.rejoin` runs pg_rewind (ADR 0023). The conninfos
/// carry no password: libpq reads it from the `passfile=` they name.
const PG_DATA_DIR: ParamSpec = ParamSpec {
    name: "data_dir",
    meaning: "the server's data directory, on the orchestrator's host: db.demote is then \
              a clean stop read back by pg_controldata, and db.rejoin rewinds it (or \
              re-clones it when pg_rewind fails)",
    default: None,
    ty: ParamType::Text { max: 1000 },
};
const PG_BIN_DIR: ParamSpec = ParamSpec {
    name: "bin_dir",
    meaning: "where pg_ctl, pg_controldata, pg_rewind and pg_basebackup are",
    default: Some("/usr/lib/postgresql/15/bin"),
    ty: ParamType::Text { max: 1000 },
};
const PG_PRIMARY_CONNINFO: ParamSpec = ParamSpec {
    name: "primary_conninfo",
    meaning: "the replication connection to the owner, without a password (e.g. \
                  host=10.0.2.5 port=5432 user=replicator passfile=/etc/qfence/pgpass)",
    default: None,
    ty: ParamType::Text { max: 1000 },
};
const PG_REWIND_CONNINFO: ParamSpec = ParamSpec {
    name: "rewind_conninfo",
    meaning: "the connection pg_rewind reads the owner by (a superuser or a role granted \
                  pg_rewind's functions), without a password",
    default: None,
    ty: ParamType::Text { max: 1000 },
};
static PG_DEMOTE: [ParamSpec; 2] = [PG_DATA_DIR, PG_BIN_DIR];
static PG_REJOIN: [ParamSpec; 4] = [
    PG_DATA_DIR,
    PG_BIN_DIR,
    PG_PRIMARY_CONNINFO,
    PG_REWIND_CONNINFO,
];

/// The reason Nova records for a disabled service or a locked server (both at most 255
/// characters in Nova's schema).
static NOVA_REASON: &[ParamSpec] = &[ParamSpec {
    name: "reason",
    meaning: "the reason Nova records, shown to its operators",
    default: Some("qfence"),
    ty: ParamType::Text { max: 255 },
}];

/// OpenStack Nova. `host.force_down` is an application-level fence: Nova stops scheduling to
/// the host and accepts evacuations from it, but nothing in Nova can stop a host, so it never
/// proves the host stopped; a compute host's real fence is a Redfish, IPMI or fence-agent
/// binding. Instance HA uses the driver's typed API for the rest (servers, migrations).
static NOVA: &[CapabilitySpec] = &[
    cap(
        "host.force_down",
        &[Fence],
        Some(Application),
        Some("host.force_up"),
        R::Host,
    ),
    cap("host.disable", &[Shield], None, None, R::Host).with_params(Params::Named(NOVA_REASON)),
    cap("host.status", &[Health], None, None, R::Host),
    cap("server.evacuate", &[Recovery], None, None, R::Instance),
    cap("server.lock", &[Shield], None, None, R::Instance).with_params(Params::Named(NOVA_REASON)),
];

/// `8-4-4-4-12` hexadecimal digits, as Nova writes server ids.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// `host/unit`: a host name (letters, digits, `-`, `_`, `.`) and a systemd unit name with its
/// suffix (`postgresql.service`, `app@1.service`), no spaces, no second `/`.
fn is_host_unit(s: &str) -> bool {
    let Some((host, unit)) = s.split_once('/') else {
        return false;
    };
    let host_ok = host
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let unit_ok = unit.rsplit_once('.').is_some_and(|(n, suffix)| {
        !n.is_empty() && !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_lowercase())
    }) && unit
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':' | '\\'));
    host_ok && unit_ok
}

/// What a host agent's health check probes besides its unit being active; each is optional,
/// and every one given must pass.
static AGENT_HEALTH: &[ParamSpec] = &[
    ParamSpec {
        name: "tcp_port",
        meaning: "a TCP port on the host that must accept a connection",
        default: None,
        ty: ParamType::Port,
    },
    ParamSpec {
        name: "http_url",
        meaning: "a URL the agent fetches, which must answer 2xx",
        default: None,
        ty: ParamType::HttpUrl,
    },
    ParamSpec {
        name: "command",
        meaning: "a command the agent runs (no shell), which must exit 0",
        default: None,
        ty: ParamType::Text { max: 1024 },
    },
];

/// `qfence agent` on the protected hosts: checks and actions on a systemd unit, run by the
/// host's own agent. `unit.mask` (masked and stopped) is an application-level fence: the agent
/// runs on the host it fences, so a host that stopped answering cannot be masked, and a masked
/// unit proves nothing about the machine; it never proves a site stopped.
static AGENT: &[CapabilitySpec] = &[
    cap("unit.health", &[Health, Readiness], None, None, R::Unit)
        .with_params(Params::Named(AGENT_HEALTH)),
    cap("unit.restart", &[Recovery], None, None, R::Unit),
    cap(
        "unit.mask",
        &[Fence],
        Some(Application),
        Some("unit.unmask"),
        R::Unit,
    ),
];

/// A fence agent's level defaults to compute; the controller's `level` setting overrides it.
static FENCE_AGENT: &[CapabilitySpec] = &[cap(
    "power.off",
    &[Fence],
    Some(Compute),
    Some("power.on"),
    R::Plug,
)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fence_capability_has_a_level_and_nothing_else_claims_one() {
        for t in ControllerType::ALL {
            for c in t.capabilities() {
                let fences = c.allows(Fence) || c.allows(DeadMan);
                assert_eq!(fences, c.level.is_some(), "{t} {}", c.name);
            }
        }
    }

    #[test]
    fn capability_names_are_unique_per_type() {
        for t in ControllerType::ALL {
            let mut names: Vec<_> = t.capabilities().iter().map(|c| c.name).collect();
            names.sort_unstable();
            let n = names.len();
            names.dedup();
            assert_eq!(n, names.len(), "{t}");
        }
    }

    #[test]
    fn lookup_finds_what_the_table_lists() {
        let c = ControllerType::Proxmox.capability("vm.stop").unwrap();
        assert_eq!(c.unfence, Some("vm.start"));
        assert!(c.allows(Fence) && !c.allows(Service));
        assert!(ControllerType::Redfish.capability("vm.stop").is_none());
        assert_eq!(
            ControllerType::Redfish.capability_names(),
            "power.off, power.status"
        );
    }

    #[test]
    fn resource_shapes_are_checked_per_kind() {
        assert!(ResourceKind::NodeVmid.accepts("pve-dc1-01/101"));
        assert!(!ResourceKind::NodeVmid.accepts("101"));
        assert!(!ResourceKind::NodeVmid.accepts("pve/abc"));
        assert!(ResourceKind::ReplicationJob.accepts("101-1"));
        assert!(!ResourceKind::ReplicationJob.accepts("101"));
        assert!(ResourceKind::PolicyId.accepts("42"));
        assert!(!ResourceKind::PolicyId.accepts("allow-all"));
        assert!(!ResourceKind::Host.accepts(""));
        assert!(ResourceKind::Instance.accepts("9f3c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"));
        assert!(!ResourceKind::Instance.accepts("erp-db-1"));
        assert!(!ResourceKind::Instance.accepts("9f3c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5"));
    }

    #[test]
    fn agent_mask_is_an_application_fence_and_units_are_written_host_slash_unit() {
        let c = ControllerType::Agent.capability("unit.mask").unwrap();
        assert_eq!(c.level, Some(Application), "a masked unit proves no stop");
        assert_eq!(c.unfence, Some("unit.unmask"));
        assert_eq!(
            ControllerType::Agent.capability_names(),
            "unit.health, unit.restart, unit.mask"
        );
        for ok in [
            "db-1/postgresql.service",
            "db-1.example.org/app@blue.service",
            "h/x.socket",
        ] {
            assert!(ResourceKind::Unit.accepts(ok), "{ok}");
        }
        for bad in [
            "postgresql.service",
            "db-1/",
            "/postgresql.service",
            "db-1/postgresql",
            "db-1/a/b.service",
            "db 1/x.service",
            "db-1/x y.service",
        ] {
            assert!(!ResourceKind::Unit.accepts(bad), "{bad}");
        }
        let health = ControllerType::Agent.capability("unit.health").unwrap();
        let port = health.params.get("tcp_port").unwrap().ty;
        assert!(port.accepts("5432") && !port.accepts("0") && !port.accepts("65536"));
        let url = health.params.get("http_url").unwrap().ty;
        assert!(url.accepts("http://127.0.0.1:8080/ready"));
        assert!(!url.accepts("ftp://h/x") && !url.accepts("/ready"));
    }

    #[test]
    fn nova_force_down_is_an_application_fence_that_proves_no_stop() {
        let c = ControllerType::Nova.capability("host.force_down").unwrap();
        assert_eq!(c.level, Some(Application), "Nova cannot stop a host");
        assert_eq!(c.unfence, Some("host.force_up"));
        let reason = ControllerType::Nova
            .capability("host.disable")
            .and_then(|c| c.params.get("reason"))
            .unwrap();
        assert!(reason.ty.accepts("qfence: host compute-3 fenced"));
        assert!(!reason.ty.accepts(&"x".repeat(256)));
        assert!(!reason.ty.accepts("two\nlines"));
    }
}
