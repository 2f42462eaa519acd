//! Decoding and validating `instance_ha:`, one cloud at a time, every problem with its path.
//!
//! A child of the loader so it shares the decoder's helpers; the rest of the loader only calls
//! [`Decoder::instance_ha`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use super::read::Fields;
use super::{Decoder, child, index, list_names, secs};
use crate::catalog::{CapabilitySpec, ControllerType};
use crate::config::instance_ha::{
    CloudConfig, HostEntry, HostName, HostRule, expand, glob_matches, is_template,
};
use crate::config::tree::{Node, Value};
use crate::config::{Binding, ControllerConfig};
use crate::domain::{FenceLevel, Role};
use crate::ids::{CloudId, ControllerId, SiteId};

const CLOUD_KEYS: &[&str] = &[
    "nova",
    "poll_seconds",
    "delta_seconds",
    "threshold_percent",
    "disabled",
    "reserved_hosts",
    "evacuate_to_reserved",
    "check_kdump",
    "kdump_timeout_seconds",
    "kdump_max_wait_seconds",
    "kdump_port",
    "leave_disabled",
    "smart_evacuation",
    "workers",
    "evacuation_retries",
    "evacuation_timeout_seconds",
    "evacuation_poll_seconds",
    "force_enable",
    "max_hosts_per_cycle",
    "aggregate_max_failures",
    "heartbeat_cliff_percent",
    "heartbeat_cliff_cycles",
    "fence_attempts",
    "evacuable_tag",
    "hosts",
    "host_rules",
];

/// A sample host a rule's resource template is expanded for, to check its shape.
const SAMPLE_HOST: &str = "compute-0.example";

impl Decoder {
    /// `instance_ha:`: the clouds by name. `None` when any cloud failed to decode.
    pub(super) fn instance_ha(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<BTreeMap<CloudId, CloudConfig>> {
        let entries = self.named(node, path, "clouds");
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            match (CloudId::new(name.clone()), self.cloud(n, &p, controllers)) {
                (Ok(id), Some(c)) => {
                    out.insert(id, c);
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn cloud(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<CloudConfig> {
        let f = self.fields(node, path, CLOUD_KEYS)?;
        let nova = self
            .require(&f, "nova", "the cloud's Nova controller")
            .and_then(|n| self.nova_ref(n, &f.path("nova")));
        let secs_or = |d: &mut Self, key: &str, default: u64| {
            d.opt(&f, key, Duration::from_secs(default), Self::seconds)
        };
        let poll = secs_or(self, "poll_seconds", 45);
        let delta = secs_or(self, "delta_seconds", 30);
        let kdump_timeout = secs_or(self, "kdump_timeout_seconds", 30);
        let kdump_max_wait = secs_or(self, "kdump_max_wait_seconds", 600);
        let evacuation_timeout = secs_or(self, "evacuation_timeout_seconds", 300);
        let evacuation_poll = secs_or(self, "evacuation_poll_seconds", 5);
        let flag = |d: &mut Self, key: &str| d.opt(&f, key, false, Self::boolean);
        let disabled = flag(self, "disabled");
        let reserved_hosts = flag(self, "reserved_hosts");
        let evacuate_to_reserved = flag(self, "evacuate_to_reserved");
        let check_kdump = flag(self, "check_kdump");
        let leave_disabled = flag(self, "leave_disabled");
        let smart_evacuation = flag(self, "smart_evacuation");
        let force_enable = flag(self, "force_enable");
        let at_least_one = |d: &mut Self, key: &str, default: u32| {
            d.opt(&f, key, default, |d, n, p| d.bounded(n, p, 1, u32::MAX))
        };
        let percent = |d: &mut Self, key: &str, default: u32| {
            d.opt(&f, key, default, |d, n, p| d.bounded(n, p, 1, 100))
        };
        let threshold_percent = percent(self, "threshold_percent", 50);
        let heartbeat_cliff_percent = percent(self, "heartbeat_cliff_percent", 50);
        let workers = at_least_one(self, "workers", 4);
        let evacuation_retries = at_least_one(self, "evacuation_retries", 5);
        let max_hosts_per_cycle = at_least_one(self, "max_hosts_per_cycle", 10);
        let heartbeat_cliff_cycles = at_least_one(self, "heartbeat_cliff_cycles", 3);
        let fence_attempts = at_least_one(self, "fence_attempts", 3);
        let aggregate_max_failures = match f.get("aggregate_max_failures") {
            None => Some(None),
            Some(n) => self
                .bounded(n, &f.path("aggregate_max_failures"), 1, u32::MAX)
                .map(Some),
        };
        let kdump_port = self.opt(&f, "kdump_port", 7410, |d, n, p| {
            d.bounded(n, p, 1, u32::from(u16::MAX))
                .and_then(|v| u16::try_from(v).ok())
        });
        let evacuable_tag = self.opt(&f, "evacuable_tag", "evacuable".to_owned(), |d, n, p| {
            d.text(n, p, "a metadata key")
        });
        let hosts = match f.get("hosts") {
            None => Some(BTreeMap::new()),
            Some(n) => self.cloud_hosts(n, &f.path("hosts"), controllers),
        };
        let host_rules = match f.get("host_rules") {
            None => Some(Vec::new()),
            Some(n) => self.host_rules(n, &f.path("host_rules"), controllers),
        };
        if evacuate_to_reserved == Some(true) && reserved_hosts == Some(false) {
            self.error(
                &f.path("evacuate_to_reserved"),
                "evacuate_to_reserved needs reserved_hosts: true (there is no reserved host to \
                 evacuate to otherwise)",
            );
        }
        self.cloud_timings(
            &f,
            [kdump_timeout, kdump_max_wait],
            [evacuation_poll, evacuation_timeout],
            delta,
        );
        if let (Some(h), Some(r)) = (&hosts, &host_rules)
            && h.values().all(|e| e.fence.is_none())
            && r.is_empty()
        {
            self.warn(
                path,
                "no host has a fence (no hosts with a controller, no host_rules): every failed \
                 host is left alone, never evacuated",
            );
        }
        Some(CloudConfig {
            nova: nova?,
            poll: poll?,
            delta: delta?,
            threshold_percent: threshold_percent?,
            disabled: disabled?,
            reserved_hosts: reserved_hosts?,
            evacuate_to_reserved: evacuate_to_reserved?,
            check_kdump: check_kdump?,
            kdump_timeout: kdump_timeout?,
            kdump_max_wait: kdump_max_wait?,
            kdump_port: kdump_port?,
            leave_disabled: leave_disabled?,
            smart_evacuation: smart_evacuation?,
            workers: workers?,
            evacuation_retries: evacuation_retries?,
            evacuation_timeout: evacuation_timeout?,
            evacuation_poll: evacuation_poll?,
            force_enable: force_enable?,
            max_hosts_per_cycle: max_hosts_per_cycle?,
            aggregate_max_failures: aggregate_max_failures?,
            heartbeat_cliff_percent: heartbeat_cliff_percent?,
            heartbeat_cliff_cycles: heartbeat_cliff_cycles?,
            fence_attempts: fence_attempts?,
            evacuable_tag: evacuable_tag?,
            hosts: hosts?,
            host_rules: host_rules?,
        })
    }

    /// The cloud's durations agree with one another: each wait shorter than the limit that
    /// bounds it, and `delta_seconds` long enough for nova-compute's reports.
    fn cloud_timings(
        &mut self,
        f: &Fields<'_>,
        [kdump_timeout, kdump_max_wait]: [Option<Duration>; 2],
        [evacuation_poll, evacuation_timeout]: [Option<Duration>; 2],
        delta: Option<Duration>,
    ) {
        self.cloud_timing(
            f,
            kdump_timeout,
            kdump_max_wait,
            "kdump_timeout_seconds",
            "kdump_max_wait_seconds",
        );
        self.cloud_timing(
            f,
            evacuation_poll,
            evacuation_timeout,
            "evacuation_poll_seconds",
            "evacuation_timeout_seconds",
        );
        self.check_delta(f, delta);
    }

    /// A `delta_seconds` under two nova-compute reports is allowed but warned of: one late
    /// report would fail a healthy host.
    fn check_delta(&mut self, f: &Fields<'_>, delta: Option<Duration>) {
        if let Some(d) = delta
            && d < Duration::from_secs(20)
        {
            self.warn(
                &f.path("delta_seconds"),
                format!(
                    "delta_seconds ({}) is less than two of nova-compute's reports at its default \
                     report_interval (10 s): one late report would count a healthy host as failed",
                    secs(d)
                ),
            );
        }
    }

    /// `short` must be less than `long`, both as read.
    fn cloud_timing(
        &mut self,
        f: &Fields<'_>,
        short: Option<Duration>,
        long: Option<Duration>,
        short_key: &str,
        long_key: &str,
    ) {
        if let (Some(s), Some(l)) = (short, long)
            && s >= l
        {
            self.error(
                &f.path(short_key),
                format!(
                    "{short_key} ({}) must be less than {long_key} ({})",
                    secs(s),
                    secs(l)
                ),
            );
        }
    }

    /// A whole number from `min` to `max`.
    fn bounded(&mut self, node: &Node, path: &str, min: u32, max: u32) -> Option<u32> {
        let n = self.count(node, path)?;
        if (min..=max).contains(&n) {
            Some(n)
        } else {
            let range = if max == u32::MAX {
                format!("at least {min}")
            } else {
                format!("from {min} to {max}")
            };
            self.error(path, format!("{n} is out of range: expected {range}"));
            None
        }
    }

    /// The cloud's `nova:` controller: declared, and of type nova.
    fn nova_ref(&mut self, node: &Node, path: &str) -> Option<ControllerId> {
        let id: ControllerId = self.name(node, path, "a controller name")?;
        match self.controller_types.get(id.as_str()) {
            Some(ControllerType::Nova) => Some(id),
            Some(ty) => {
                self.error(
                    path,
                    format!("controller \"{id}\" is a {ty} controller; nova: needs a nova one"),
                );
                None
            }
            None if self.declared_controllers.contains(id.as_str()) => Some(id),
            None => {
                let novas = self
                    .controller_types
                    .iter()
                    .filter(|(_, t)| **t == ControllerType::Nova)
                    .map(|(n, _)| n.as_str());
                let names = list_names(novas);
                self.error(
                    path,
                    format!("unknown controller \"{id}\"; nova controllers: {names}"),
                );
                None
            }
        }
    }

    fn cloud_hosts(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<BTreeMap<HostName, HostEntry>> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => return Some(BTreeMap::new()),
            Value::Map(e) => e,
            other => {
                self.error(
                    path,
                    format!(
                        "expected a mapping of hosts by name, found {}",
                        other.kind()
                    ),
                );
                return None;
            }
        };
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!("expected host names as keys, found {}", k.value.kind()),
                );
                ok = false;
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            let host = match HostName::new(key.clone()) {
                Ok(h) => h,
                Err(e) => {
                    self.error(&p, e);
                    ok = false;
                    continue;
                }
            };
            if out.contains_key(&host) {
                self.error(&p, format!("duplicate host {key:?}"));
                ok = false;
                continue;
            }
            match self.host_entry(v, &p, controllers) {
                Some(e) => {
                    // One address, one host: a kdump message must name a single host.
                    if let Some(a) = e.address
                        && let Some((other, _)) = out
                            .iter()
                            .find(|(_, o): &(&HostName, &HostEntry)| o.address == Some(a))
                    {
                        self.error(
                            &child(&p, "address"),
                            format!("address {a} is also host \"{other}\"'s"),
                        );
                        ok = false;
                    }
                    out.insert(host, e);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn host_entry(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<HostEntry> {
        let f = self.fields(
            node,
            path,
            &["controller", "capability", "resource", "site", "address"],
        )?;
        let site = self.host_site(&f);
        let address = match f.get("address") {
            None => Some(None),
            Some(n) => {
                let p = f.path("address");
                self.text(n, &p, "an IP address")
                    .and_then(|a| match a.parse::<IpAddr>() {
                        Ok(ip) => Some(Some(ip)),
                        Err(_) => {
                            self.error(
                                &p,
                                format!(
                                    "{a:?} is not an IP address (the one the host's fence_kdump \
                                 messages come from: 192.0.2.12, 2001:db8::12)"
                                ),
                            );
                            None
                        }
                    })
            }
        };
        let given: Vec<&str> = ["controller", "capability", "resource"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        let fence = match given.len() {
            0 => Some(None),
            3 => self.fence_binding(&f, false, controllers).map(Some),
            _ => {
                let missing: Vec<&str> = ["controller", "capability", "resource"]
                    .into_iter()
                    .filter(|k| !given.contains(k))
                    .collect();
                self.error(
                    &f.path(missing[0]),
                    format!(
                        "missing: a host's fence needs controller, capability and resource \
                         together; found {}, missing {}",
                        given.join(", "),
                        missing.join(", ")
                    ),
                );
                None
            }
        };
        Some(HostEntry {
            fence: fence?,
            site: site?,
            address: address?,
        })
    }

    fn host_site(&mut self, f: &Fields<'_>) -> Option<Option<SiteId>> {
        match f.get("site") {
            None => Some(None),
            Some(n) => self
                .site_ref(n, &f.path("site"), false, "has no compute hosts")
                .map(Some),
        }
    }

    fn host_rules(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<Vec<HostRule>> {
        let items = self.list(node, path, "host rules");
        let mut ok = true;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.host_rule(item, &index(path, i), controllers) {
                Some(r) => out.push(r),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn host_rule(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<HostRule> {
        let f = self.fields(
            node,
            path,
            &["match", "controller", "capability", "resource", "site"],
        )?;
        let pattern = self
            .require(&f, "match", "the host name pattern (a glob: compute-*)")
            .and_then(|n| {
                let p = f.path("match");
                let s = self.text(n, &p, "a glob")?;
                let ok = s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*' | '?'));
                if ok {
                    Some(s)
                } else {
                    self.error(
                        &p,
                        format!(
                            "{s:?} is not a host name pattern: host name characters, with * for \
                             any run of them and ? for one"
                        ),
                    );
                    None
                }
            });
        let site = self.host_site(&f);
        let binding = self.fence_binding(&f, true, controllers);
        if let (Some(pattern), Some((controller, resource))) = (
            &pattern,
            binding.as_ref().map(|(c, _, r)| (c.as_str(), r.as_str())),
        ) && pattern.contains(['*', '?'])
            && !is_template(controller)
            && !is_template(resource)
        {
            self.error(
                &f.path("resource"),
                format!(
                    "every host matching {pattern:?} would be fenced through the same resource \
                     {resource:?} of {controller:?}: put {{host}} or {{short}} in the resource \
                     or the controller"
                ),
            );
            return None;
        }
        let (controller, capability, resource) = binding?;
        Some(HostRule {
            pattern: pattern?,
            controller,
            capability,
            resource,
            site: site?,
        })
    }

    /// A host's (or a rule's) controller, capability and resource, checked as a compute fence.
    /// With `templates`, the controller and resource may hold `{host}` and `{short}`, and a
    /// templated controller is checked against every declared controller it could name.
    fn fence_binding<T: FromFence>(
        &mut self,
        f: &Fields<'_>,
        templates: bool,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<T> {
        let cp = f.path("controller");
        let controller = self
            .require(f, "controller", "the controller that fences the host")
            .and_then(|n| self.text(n, &cp, "a controller name"));
        let capability = self
            .require(f, "capability", "the fence capability (power.off)")
            .and_then(|n| self.text(n, &f.path("capability"), "a capability name"));
        let resource = self
            .require(f, "resource", "the resource the fence acts on")
            .and_then(|n| self.text(n, &f.path("resource"), "a resource name"));
        let (controller, capability, resource) = (controller?, capability?, resource?);
        let sample = HostName::new(SAMPLE_HOST).expect("a valid host name");
        let named: Vec<String> = if templates && is_template(&controller) {
            let glob = controller.replace("{host}", "*").replace("{short}", "*");
            let v: Vec<String> = self
                .declared_controllers
                .iter()
                .filter(|c| glob_matches(&glob, c))
                .cloned()
                .collect();
            if v.is_empty() {
                self.error(
                    &cp,
                    format!(
                        "no controller's name fits the template {controller:?}; controllers: {}",
                        list_names(self.declared_controllers.iter().map(String::as_str))
                    ),
                );
                return None;
            }
            v
        } else {
            if !templates && is_template(&controller) {
                self.error(
                    &cp,
                    "a host's own fence names its controller, without {host} or {short}",
                );
                return None;
            }
            if let Err(e) = ControllerId::new(controller.clone()) {
                self.error(&cp, e.to_string());
                return None;
            }
            if !self.declared_controllers.contains(&controller) {
                self.error(
                    &cp,
                    format!(
                        "unknown controller \"{controller}\"; controllers: {}",
                        list_names(self.declared_controllers.iter().map(String::as_str))
                    ),
                );
                return None;
            }
            vec![controller.clone()]
        };
        if !templates && is_template(&resource) {
            self.error(
                &f.path("resource"),
                "a host's own fence names its resource, without {host} or {short}",
            );
            return None;
        }
        let mut ok = true;
        for name in &named {
            let Some(ty) = self.controller_types.get(name).copied() else {
                continue;
            };
            let config = ControllerId::new(name.clone())
                .ok()
                .and_then(|id| controllers.get(&id));
            if let Err(why) = compute_fence(ty, config, &capability) {
                self.error(
                    &f.path("capability"),
                    format!("controller {name:?} ({ty}): {why}"),
                );
                ok = false;
                continue;
            }
            let spec = ty.capability(&capability).expect("checked above");
            let r = expand(&resource, &sample);
            if !spec.resource.accepts(&r) {
                self.error(
                    &f.path("resource"),
                    format!(
                        "{r:?} is not a valid resource for {}: expected a {}",
                        spec.name,
                        spec.resource.describe()
                    ),
                );
                ok = false;
            }
        }
        ok.then(|| T::from_fence(controller, capability, resource))?
    }
}

/// Whether `capability` of a controller of type `ty` is a compute fence that can be undone.
fn compute_fence(
    ty: ControllerType,
    config: Option<&ControllerConfig>,
    capability: &str,
) -> Result<&'static CapabilitySpec, String> {
    if ty == ControllerType::Nova {
        return Err(
            "Nova cannot power a host off; a compute host's fence is its BMC (redfish, \
                    ipmi) or a fence agent"
                .to_owned(),
        );
    }
    let Some(spec) = ty.capability(capability) else {
        return Err(format!(
            "{capability:?} is not one of its capabilities: {}",
            ty.capability_names()
        ));
    };
    if !spec.allows(Role::Fence) {
        return Err(format!(
            "{capability} is not a fence; it takes: {}",
            spec.role_names()
        ));
    }
    let level = config.map_or(spec.level, |c| c.fence_level(spec));
    if level != Some(FenceLevel::Compute) {
        let level = match level {
            Some(FenceLevel::Application) => "an application",
            Some(l) => &format!("a {}", l.as_str()),
            None => "no",
        };
        return Err(format!(
            "{capability} is {level} fence here, which cannot prove a compute host stopped: \
             Instance HA needs a compute fence"
        ));
    }
    if spec.unfence.is_none() {
        return Err(format!(
            "{capability} cannot be undone, so the host could never be powered back on"
        ));
    }
    Ok(spec)
}

/// What [`Decoder::fence_binding`] makes: a host's binding, or a rule's three templates.
trait FromFence: Sized {
    fn from_fence(controller: String, capability: String, resource: String) -> Option<Self>;
}

impl FromFence for Binding {
    fn from_fence(controller: String, capability: String, resource: String) -> Option<Self> {
        Some(Binding {
            controller: ControllerId::new(controller).ok()?,
            capability,
            resource,
            role: Role::Fence,
            required: true,
            params: BTreeMap::new(),
            id: None,
        })
    }
}

impl FromFence for (String, String, String) {
    fn from_fence(controller: String, capability: String, resource: String) -> Option<Self> {
        Some((controller, capability, resource))
    }
}
