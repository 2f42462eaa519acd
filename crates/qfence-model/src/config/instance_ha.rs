//! `instance_ha:` — one section per OpenStack cloud whose compute hosts qfence watches, fences
//! and evacuates (Instance HA, `docs/specs/instance-ha.md`).
//!
//! A cloud names its Nova controller, the parameters (with RHOSO InstanceHA's names in snake
//! case: `POLL` is `poll_seconds`), and how each compute host is fenced: an entry per host, or
//! rules that map host names to a binding (`compute-*` → controller `bmc-{short}`, resource
//! `1`). Hosts are discovered from Nova at run time, so a rule is resolved for each host the
//! cloud reports; [`super::ValidatedConfig::host_fence`] does it, and says why a host has no
//! fence when it has none.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use super::{Binding, ValidatedConfig};
use crate::domain::{FenceLevel, Role};
use crate::ids::{ControllerId, SiteId};

/// A compute host as Nova names it (`compute-0.localdomain`): letters, digits, `-`, `_` and
/// `.`, a letter or digit first, at most 255 characters (a fully qualified name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostName(String);

impl HostName {
    /// Makes the name, checking it.
    pub fn new(s: impl Into<String>) -> Result<Self, String> {
        let s = s.into();
        let ok = s.len() <= 255
            && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if ok {
            Ok(Self(s))
        } else {
            Err(format!(
                "{s:?} is not a host name: use letters, digits, '-', '_' or '.', starting with a \
                 letter or digit, at most 255 characters"
            ))
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name up to its first dot (`compute-0` of `compute-0.localdomain`).
    pub fn short(&self) -> &str {
        self.0.split('.').next().unwrap_or(&self.0)
    }
}

impl TryFrom<String> for HostName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::new(s)
    }
}

impl From<HostName> for String {
    fn from(h: HostName) -> String {
        h.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for HostName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// `instance_ha.NAME:` — one cloud.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CloudConfig {
    /// The Nova controller (`type: nova`) the cloud is read and acted on through.
    pub nova: ControllerId,
    /// How often Nova is polled (`poll_seconds`, InstanceHA's `POLL`, default 45).
    pub poll: Duration,
    /// An enabled host whose service state was not updated for this long has failed
    /// (`delta_seconds`, `DELTA`, default 30).
    pub delta: Duration,
    /// Above this percentage of failed hosts nothing is fenced or evacuated
    /// (`threshold_percent`, `THRESHOLD`, default 50). Applied to each site too when the hosts
    /// span sites.
    pub threshold_percent: u32,
    /// Failures are recorded, nothing else is done (`disabled`, `DISABLED`, default false).
    pub disabled: bool,
    /// For each failed host, enable one reserved host (disabled with a reason containing
    /// "reserved", sharing an aggregate or the availability zone) (`reserved_hosts`,
    /// `RESERVED_HOSTS`, default false).
    pub reserved_hosts: bool,
    /// Evacuate a failed host's servers to the reserved host enabled for it, rather than
    /// letting the scheduler choose (`evacuate_to_reserved`, InstanceHA's
    /// `FORCE_RESERVED_HOST_EVACUATION`, default false). Needs `reserved_hosts`.
    pub evacuate_to_reserved: bool,
    /// Wait for fence_kdump messages before fencing (`check_kdump`, `CHECK_KDUMP`, default
    /// false).
    pub check_kdump: bool,
    /// How long to wait for a first kdump message, and how long after the last one the dump
    /// counts as finished (`kdump_timeout_seconds`, `KDUMP_TIMEOUT`, default 30).
    pub kdump_timeout: Duration,
    /// The longest a host that keeps sending kdump messages delays its fence
    /// (`kdump_max_wait_seconds`, default 600).
    pub kdump_max_wait: Duration,
    /// The UDP port fence_kdump messages are listened for on, on every orchestrator
    /// (`kdump_port`, fence_kdump's default 7410). Clouds may share one.
    pub kdump_port: u16,
    /// Leave a host disabled after its evacuation instead of powering it on and enabling it
    /// (`leave_disabled`, `LEAVE_DISABLED`, default false).
    pub leave_disabled: bool,
    /// Follow every evacuation to its end and retry failed ones (`smart_evacuation`,
    /// `SMART_EVACUATION`, default false).
    pub smart_evacuation: bool,
    /// Evacuations at once, across the cloud (`workers`, `WORKERS`, default 4).
    pub workers: u32,
    /// Failures of one server's evacuation before the host is given up (smart evacuation) or
    /// the server counts as not evacuated (`evacuation_retries`, default 5).
    pub evacuation_retries: u32,
    /// A followed evacuation not finished after this long has failed
    /// (`evacuation_timeout_seconds`, default 300).
    pub evacuation_timeout: Duration,
    /// How often a followed evacuation's migration is read (`evacuation_poll_seconds`,
    /// default 5).
    pub evacuation_poll: Duration,
    /// Re-enable a host even when evacuations were unsuccessful, except after a smart
    /// evacuation failure (`force_enable`, `FORCE_ENABLE`, default false).
    pub force_enable: bool,
    /// Hosts whose fence starts in one poll cycle, at most (`max_hosts_per_cycle`,
    /// `MAX_HOSTS_PER_CYCLE`, default 10).
    pub max_hosts_per_cycle: u32,
    /// Failed hosts allowed in one aggregate before its hosts are left alone, unless the
    /// aggregate's own `qfence:max_failures` metadata says otherwise
    /// (`aggregate_max_failures`, default: no limit).
    pub aggregate_max_failures: Option<u32>,
    /// More than this percentage of the hosts up at the previous poll lost at once is the
    /// network, not the hosts (`heartbeat_cliff_percent`, default 50).
    pub heartbeat_cliff_percent: u32,
    /// Poll cycles a heartbeat cliff holds fencing back before it expires
    /// (`heartbeat_cliff_cycles`, default 3).
    pub heartbeat_cliff_cycles: u32,
    /// Fence attempts (perform and read back) before a host is given up (`fence_attempts`,
    /// default 3).
    pub fence_attempts: u32,
    /// The metadata key that tags flavors, images and aggregates evacuable, with the value
    /// `true` (`evacuable_tag`, default `evacuable`).
    pub evacuable_tag: String,
    /// Hosts by name: their fence, their site, or both.
    pub hosts: BTreeMap<HostName, HostEntry>,
    /// Rules mapping host names to fences, tried in order for hosts without their own fence.
    pub host_rules: Vec<HostRule>,
}

/// `instance_ha.NAME.hosts.HOST:` — one host's fence and site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostEntry {
    /// Its fence binding (role fence, required); `None` when a rule gives it.
    pub fence: Option<Binding>,
    /// Its site; by default the rule's, else the Nova controller's.
    pub site: Option<SiteId>,
    /// The address its fence_kdump messages come from (`address`); without one, a message
    /// is matched to the host by resolving its name.
    pub address: Option<IpAddr>,
}

/// `instance_ha.NAME.host_rules[N]:` — hosts whose name matches `pattern` are fenced through
/// `controller`'s `capability` on `resource`, with `{host}` and `{short}` replaced in both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRule {
    /// A glob over the whole host name: `*` any run of characters, `?` one.
    pub pattern: String,
    /// The controller's name, or a template of it (`bmc-{short}`).
    pub controller: String,
    /// The fence capability (`power.off`).
    pub capability: String,
    /// The resource, or a template of it (`{short}`).
    pub resource: String,
    /// The site of the hosts it matches; by default the Nova controller's.
    pub site: Option<SiteId>,
}

/// A host's fence as resolved for it: the binding and the host's site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostFence {
    pub binding: Binding,
    pub site: SiteId,
}

/// Why a host has no fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NoFence {
    /// No host entry with a fence and no rule matches it.
    NotConfigured,
    /// A rule matched, but the controller its template names is not in the configuration.
    UnknownController { rule: usize, controller: String },
    /// A rule matched, but the controller it names cannot fence with that capability.
    NotAFence {
        rule: usize,
        controller: String,
        capability: String,
    },
}

impl fmt::Display for NoFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoFence::NotConfigured => f.write_str("no fence is configured for it"),
            NoFence::UnknownController { rule, controller } => write!(
                f,
                "host_rules[{rule}] names controller {controller:?}, which is not configured"
            ),
            NoFence::NotAFence {
                rule,
                controller,
                capability,
            } => write!(
                f,
                "host_rules[{rule}] names {capability} on controller {controller:?}, which it \
                 does not offer as a compute fence"
            ),
        }
    }
}

/// Whether `name` matches the glob `pattern` (`*` any run, `?` one character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with backtracking to the last star.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The placeholders a template may hold.
pub const PLACEHOLDERS: [&str; 2] = ["{host}", "{short}"];

/// A template with `{host}` and `{short}` replaced for `host`.
pub fn expand(template: &str, host: &HostName) -> String {
    template
        .replace("{host}", host.as_str())
        .replace("{short}", host.short())
}

/// Whether a template holds a placeholder.
pub fn is_template(s: &str) -> bool {
    PLACEHOLDERS.iter().any(|p| s.contains(p))
}

impl HostRule {
    /// The binding this rule gives `host`, with its templates expanded; the expanded
    /// controller name when it is not a valid name.
    pub fn binding_for(&self, host: &HostName) -> Result<Binding, String> {
        let controller = expand(&self.controller, host);
        Ok(Binding {
            controller: ControllerId::new(controller.clone()).map_err(|_| controller)?,
            capability: self.capability.clone(),
            resource: expand(&self.resource, host),
            role: Role::Fence,
            required: true,
            params: BTreeMap::new(),
            id: None,
        })
    }
}

impl CloudConfig {
    /// The first rule matching `host`, with its position.
    pub fn rule_for(&self, host: &HostName) -> Option<(usize, &HostRule)> {
        self.host_rules
            .iter()
            .enumerate()
            .find(|(_, r)| glob_matches(&r.pattern, host.as_str()))
    }
}

impl ValidatedConfig {
    /// A cloud by name.
    pub fn cloud(&self, id: &str) -> Option<&CloudConfig> {
        self.config().instance_ha.get(id)
    }

    /// The site of `host` of `cloud`: its entry's, else that of the first rule matching it,
    /// else the Nova controller's.
    pub fn host_site(&self, cloud: &CloudConfig, host: &HostName) -> Option<SiteId> {
        cloud
            .hosts
            .get(host.as_str())
            .and_then(|e| e.site.clone())
            .or_else(|| cloud.rule_for(host).and_then(|(_, r)| r.site.clone()))
            .or_else(|| self.controller(cloud.nova.as_str()).map(|c| c.site.clone()))
    }

    /// How `host` of `cloud` is fenced: its own entry's fence, else the first rule that
    /// matches it, resolved against the controllers; its site is the entry's, else the
    /// rule's, else the Nova controller's. A rule's templated controller may name one that
    /// does not exist, or cannot fence: that is said, never guessed around.
    pub fn host_fence(&self, cloud: &CloudConfig, host: &HostName) -> Result<HostFence, NoFence> {
        let entry = cloud.hosts.get(host.as_str());
        let rule = cloud.rule_for(host);
        let site = self.host_site(cloud, host);
        let binding = match (entry.and_then(|e| e.fence.clone()), rule) {
            (Some(b), _) => b,
            (None, Some((i, r))) => {
                let b = r
                    .binding_for(host)
                    .map_err(|controller| NoFence::UnknownController {
                        rule: i,
                        controller,
                    })?;
                let Some(c) = self.controller(b.controller.as_str()) else {
                    return Err(NoFence::UnknownController {
                        rule: i,
                        controller: b.controller.to_string(),
                    });
                };
                let compute = c
                    .controller_type()
                    .capability(&b.capability)
                    .filter(|spec| spec.allows(Role::Fence))
                    .and_then(|spec| c.fence_level(spec))
                    == Some(FenceLevel::Compute);
                if !compute {
                    return Err(NoFence::NotAFence {
                        rule: i,
                        controller: b.controller.to_string(),
                        capability: b.capability.clone(),
                    });
                }
                b
            }
            (None, None) => return Err(NoFence::NotConfigured),
        };
        let site = site.ok_or(NoFence::NotConfigured)?;
        Ok(HostFence { binding, site })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_matches("compute-*", "compute-0.localdomain"));
        assert!(glob_matches("*.dc1", "compute-3.dc1"));
        assert!(glob_matches("c?-*", "c1-x"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("compute-*", "controller-0"));
        assert!(!glob_matches("*.dc1", "compute-3.dc2"));
        assert!(!glob_matches("compute-?", "compute-10"));
        assert!(glob_matches("a*b*c", "axxbyyc"));
        assert!(!glob_matches("a*b*c", "axxbyy"));
    }

    #[test]
    fn templates_expand_the_host_and_its_short_name() {
        let h = HostName::new("compute-2.localdomain").unwrap();
        assert_eq!(expand("bmc-{short}", &h), "bmc-compute-2");
        assert_eq!(expand("{host}", &h), "compute-2.localdomain");
        assert!(is_template("bmc-{short}"));
        assert!(!is_template("bmc-1"));
    }

    #[test]
    fn host_names_allow_fully_qualified_names_only() {
        assert!(HostName::new("compute-0.localdomain").is_ok());
        assert!(HostName::new("-x").is_err());
        assert!(HostName::new("a b").is_err());
        assert!(HostName::new("").is_err());
        assert!(HostName::new("x".repeat(256)).is_err());
    }
}
