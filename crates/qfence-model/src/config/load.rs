//! Phase two, *validate*: the generic tree decoded by hand into a [`Config`], collecting every
//! issue with its path instead of stopping at the first, then cross-checked as a whole.
//!
//! The decoder never panics on any tree: each helper reports what it expected and what it
//! found, and returns `None` so the caller simply leaves that value out. A [`ValidatedConfig`]
//! is made only when no error was found.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::issue::{self, Issue, Severity};
use super::tree::{self, Node, Value};
use super::{
    Binding, ClusterConfig, Config, ControllerConfig, ControllerKind, NovaInterface,
    OrchestratorConfig, PlanConfig, ProxmoxAuth, RedfishAuth, SiteConfig, TlsTrust,
    ValidatedConfig,
};
use crate::catalog::{CapabilitySpec, ControllerType, Params};
use crate::domain::{FenceLevel, Role};
use crate::ids::{ControllerId, NameError, OrchestratorId, PlanId, SecretRef, SiteId, check_name};

mod instance_ha;
mod nova;
use nova::nova_auth;

/// A configuration that passed validation, and the warnings it passed with.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The configuration.
    pub config: ValidatedConfig,
    /// Problems that do not stop it from being used, sorted by path.
    pub warnings: Vec<Issue>,
}

/// Parses and validates a configuration. On failure, every issue found (errors and warnings),
/// sorted by path. `source` names the text in the one issue a YAML syntax error gives.
pub fn load_str(text: &str, source: &str) -> Result<Loaded, Vec<Issue>> {
    let root = match tree::parse(text) {
        Ok(root) => root,
        Err(e) => {
            return Err(vec![Issue {
                path: String::new(),
                message: format!("{source} is not valid YAML: {}", e.message),
                severity: Severity::Error,
                line: (e.line > 0).then_some(e.line),
            }]);
        }
    };
    let mut d = Decoder::default();
    let config = d.config(&root);
    let mut issues = d.issues;
    issue::sort(&mut issues);
    match config {
        Some(config) if !issues.iter().any(Issue::is_error) => Ok(Loaded {
            config: ValidatedConfig::new_unchecked(config),
            warnings: issues,
        }),
        _ => Err(issues),
    }
}

/// Why a configuration file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration.
    #[error("{file}: {} error(s) in the configuration", issues.iter().filter(|i| i.is_error()).count())]
    Invalid {
        file: String,
        /// Every issue found, errors and warnings, sorted by path.
        issues: Vec<Issue>,
    },
}

/// Reads a file and loads it with [`load_str`]. The only I/O in this crate: reading the text.
pub fn load_file(path: impl AsRef<std::path::Path>) -> Result<Loaded, LoadError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        file: file.clone(),
        source,
    })?;
    load_str(&text, &file).map_err(|issues| LoadError::Invalid { file, issues })
}

/// Keys that hold a credential. Refused anywhere in the file: credentials are named by
/// `secret:` and resolved by each orchestrator from its own store.
const CREDENTIAL_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "api_key",
    "apikey",
    "api_token",
    "access_token",
    "auth_token",
    "bearer",
    "secret_value",
    "secret_key",
    "client_secret",
    "private_key",
    "access_key",
    "credential",
    "credentials",
    "community",
];

fn is_credential_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace('-', "_");
    CREDENTIAL_KEYS.contains(&k.as_str())
}

const INLINE_CREDENTIAL: &str = "inline credentials are refused: name a secret with \
    `secret: NAME` on the controller and store the credential under NAME in each \
    orchestrator's secret store";

/// Whether the mapping at `path` is keyed by names (a site may be called `pass`).
fn holds_names(path: &str) -> bool {
    matches!(path, "sites" | "orchestrators" | "controllers" | "plans")
        || (path.starts_with("plans.") && path.ends_with(".instances") && !path.contains('['))
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn list_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.into_iter().collect();
    if v.is_empty() {
        "(none)".to_owned()
    } else {
        v.join(", ")
    }
}

/// Seconds as written: `30`, `0.5`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// A mapping's entries by key, after duplicate and unknown keys were reported.
struct Fields<'a> {
    path: String,
    entries: Vec<(&'static str, &'a Node)>,
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Node> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| *n)
    }

    fn path(&self, key: &str) -> String {
        child(&self.path, key)
    }
}

#[derive(Default)]
struct Decoder {
    issues: Vec<Issue>,
    /// The line of every path the decoder visited, for issues found after decoding.
    lines: HashMap<String, u32>,
    /// Names declared, even when what they name failed to decode: a reference to a broken
    /// controller should not also be reported as unknown.
    declared_sites: BTreeMap<String, bool>,
    declared_controllers: BTreeSet<String>,
    /// What is known of each controller even when the rest of it failed to decode, so its
    /// bindings and its callers are still checked: every problem at once.
    controller_types: BTreeMap<String, ControllerType>,
    controller_sites: BTreeMap<String, (SiteId, Vec<SiteId>)>,
}

impl Decoder {
    fn line_of(&self, path: &str) -> Option<u32> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p).filter(|l| **l > 0) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '[']);
            match cut {
                Some(i) => p = &p[..i],
                None if !p.is_empty() => p = "",
                None => return None,
            }
        }
    }

    fn push(&mut self, path: &str, severity: Severity, message: String) {
        let line = self.line_of(path);
        self.issues.push(Issue {
            path: path.to_owned(),
            message,
            severity,
            line,
        });
    }

    fn error(&mut self, path: &str, message: impl Into<String>) {
        self.push(path, Severity::Error, message.into());
    }

    fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.push(path, Severity::Warning, message.into());
    }

    fn visit(&mut self, path: &str, node: &Node) {
        self.lines.entry(path.to_owned()).or_insert(node.line);
    }

    /// Reports every credential-looking key anywhere under `node`.
    fn scan_credentials(&mut self, node: &Node, path: &str) {
        match &node.value {
            Value::Map(entries) => {
                for (k, v) in entries {
                    let Some(key) = k.value.as_text() else {
                        continue;
                    };
                    let p = child(path, &key);
                    self.visit(&p, k);
                    if is_credential_key(&key) && !holds_names(path) {
                        self.error(&p, INLINE_CREDENTIAL);
                    } else {
                        self.scan_credentials(v, &p);
                    }
                }
            }
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.scan_credentials(item, &index(path, i));
                }
            }
            _ => {}
        }
    }

    /// The keys of a mapping that has a fixed set of them. `null` reads as an empty mapping.
    fn fields<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        allowed: &[&'static str],
    ) -> Option<Fields<'a>> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => &[][..],
            Value::Map(entries) => entries.as_slice(),
            other => {
                self.error(
                    path,
                    format!(
                        "expected a mapping with keys {}, found {}",
                        allowed.join(", "),
                        other.kind()
                    ),
                );
                return None;
            }
        };
        let mut out = Fields {
            path: path.to_owned(),
            entries: Vec::new(),
        };
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!(
                        "keys must be strings, found {} on line {}",
                        k.value.kind(),
                        k.line
                    ),
                );
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(&p, format!("duplicate key {key:?} (first on line {first})"));
                continue;
            }
            seen.insert(key.clone(), k.line);
            if is_credential_key(&key) {
                // Reported by the credential scan, with its own message.
                continue;
            }
            match allowed.iter().find(|a| **a == key) {
                Some(a) => out.entries.push((a, v)),
                None => self.error(
                    &p,
                    format!("unknown key {key:?}; allowed: {}", allowed.join(", ")),
                ),
            }
        }
        Some(out)
    }

    /// A required key: reported as missing when absent.
    fn require<'a>(&mut self, f: &Fields<'a>, key: &str, what: &str) -> Option<&'a Node> {
        let n = f.get(key);
        if n.is_none() {
            self.error(&f.path(key), format!("missing: {what} is required"));
        }
        n
    }

    /// A mapping from names to values, in file order, each name checked and duplicates
    /// reported (the first one wins).
    fn named<'a>(&mut self, node: &'a Node, path: &str, what: &str) -> Vec<(String, &'a Node)> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => return Vec::new(),
            Value::Map(entries) => entries,
            other => {
                self.error(
                    path,
                    format!(
                        "expected a mapping of {what} by name, found {}",
                        other.kind()
                    ),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!(
                        "expected {what} names as keys, found {} on line {}",
                        k.value.kind(),
                        k.line
                    ),
                );
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(
                    &p,
                    format!("duplicate name {key:?}: already defined on line {first}"),
                );
                continue;
            }
            seen.insert(key.clone(), k.line);
            if let Err(e) = check_name(&key) {
                self.error(&p, e.to_string());
                continue;
            }
            out.push((key, v));
        }
        out
    }

    fn list<'a>(&mut self, node: &'a Node, path: &str, what: &str) -> &'a [Node] {
        self.visit(path, node);
        match &node.value {
            Value::Null => &[],
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.visit(&index(path, i), item);
                }
                items
            }
            other => {
                self.error(
                    path,
                    format!("expected a list of {what}, found {}", other.kind()),
                );
                &[]
            }
        }
    }

    fn text(&mut self, node: &Node, path: &str, what: &str) -> Option<String> {
        self.visit(path, node);
        match node.value.as_text() {
            Some(s) if s.trim().is_empty() => {
                self.error(path, format!("expected {what}, found an empty string"));
                None
            }
            Some(s) => Some(s),
            None => {
                self.error(
                    path,
                    format!("expected {what}, found {}", node.value.kind()),
                );
                None
            }
        }
    }

    fn name<T: TryFrom<String, Error = NameError>>(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
    ) -> Option<T> {
        let s = self.text(node, path, what)?;
        match T::try_from(s) {
            Ok(n) => Some(n),
            Err(e) => {
                self.error(path, e.to_string());
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        self.visit(path, node);
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.error(
                    path,
                    format!("expected true or false, found {}", node.value.kind()),
                );
                None
            }
        }
    }

    fn seconds(&mut self, node: &Node, path: &str) -> Option<Duration> {
        self.visit(path, node);
        let v = match node.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => f64::NAN,
        };
        if v.is_finite() && v > 0.0 && v <= 1e9 {
            Duration::try_from_secs_f64(v).ok()
        } else {
            self.error(
                path,
                format!(
                    "expected a positive number of seconds (fractions allowed), found {}",
                    node.value.kind()
                ),
            );
            None
        }
    }

    fn count(&mut self, node: &Node, path: &str) -> Option<u32> {
        self.visit(path, node);
        match node.value {
            Value::Int(i) if (0..=i128::from(u32::MAX)).contains(&i) => Some(i as u32),
            _ => {
                self.error(
                    path,
                    format!(
                        "expected a whole number, 0 or more, found {}",
                        node.value.kind()
                    ),
                );
                None
            }
        }
    }

    /// One of a fixed set of words.
    fn word<T: Copy>(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.text(node, path, what)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, v)) => Some(*v),
            None => {
                self.error(
                    path,
                    format!(
                        "unknown {what} {s:?}; allowed: {}",
                        list_names(choices.iter().map(|(n, _)| *n))
                    ),
                );
                None
            }
        }
    }

    /// A reference to a declared site. Witness sites are refused when `allow_witness` is false.
    fn site_ref(
        &mut self,
        node: &Node,
        path: &str,
        allow_witness: bool,
        why: &str,
    ) -> Option<SiteId> {
        let site: SiteId = self.name(node, path, "a site name")?;
        match self.declared_sites.get(site.as_str()) {
            None => {
                let names = list_names(self.declared_sites.keys().map(String::as_str));
                self.error(path, format!("unknown site \"{site}\"; sites: {names}"));
                None
            }
            Some(true) if !allow_witness => {
                self.error(path, format!("\"{site}\" is a witness site, which {why}"));
                None
            }
            Some(_) => Some(site),
        }
    }

    fn opt<T>(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        default: T,
        read: impl FnOnce(&mut Self, &Node, &str) -> Option<T>,
    ) -> Option<T> {
        match f.get(key) {
            None => Some(default),
            Some(n) => read(self, n, &f.path(key)),
        }
    }

    // ---- the document -------------------------------------------------------------------

    fn config(&mut self, root: &Node) -> Option<Config> {
        const KEYS: &[&str] = &[
            "cluster",
            "sites",
            "orchestrators",
            "controllers",
            "plans",
            "instance_ha",
        ];
        self.scan_credentials(root, "");
        if root.value == Value::Null {
            self.error(
                "",
                format!(
                    "the configuration is empty; expected keys {}",
                    KEYS.join(", ")
                ),
            );
            return None;
        }
        let f = self.fields(root, "", KEYS)?;
        let cluster = self
            .require(&f, "cluster", "the cluster's settings")
            .and_then(|n| self.cluster(n, "cluster"));
        let sites = match self.require(&f, "sites", "at least one site") {
            Some(n) => self.sites(n, "sites"),
            None => Some(BTreeMap::new()),
        };
        let orchestrators = match self.require(&f, "orchestrators", "at least one orchestrator") {
            Some(n) => self.orchestrators(n, "orchestrators"),
            None => Some(BTreeMap::new()),
        };
        // Controllers that decoded are kept even when others did not, so the plans are still
        // checked against them.
        let (controllers, controllers_ok) = match f.get("controllers") {
            Some(n) => self.controllers(n, "controllers", orchestrators.as_ref()),
            None => (BTreeMap::new(), true),
        };
        let plans = match f.get("plans") {
            Some(n) => self.plans(n, "plans", &controllers),
            None => Some(BTreeMap::new()),
        };
        let instance_ha = match f.get("instance_ha") {
            Some(n) => self.instance_ha(n, "instance_ha", &controllers),
            None => Some(BTreeMap::new()),
        };
        let controllers = controllers_ok.then_some(controllers);
        Some(Config {
            cluster: cluster?,
            sites: sites?,
            orchestrators: orchestrators?,
            controllers: controllers?,
            plans: plans?,
            instance_ha: instance_ha?,
        })
    }

    fn cluster(&mut self, node: &Node, path: &str) -> Option<ClusterConfig> {
        let f = self.fields(node, path, &["name", "lease_seconds"])?;
        let name = self
            .require(&f, "name", "the cluster's name")
            .and_then(|n| {
                let p = f.path("name");
                let s = self.text(n, &p, "a name")?;
                match check_name(&s) {
                    Ok(()) => Some(s),
                    Err(e) => {
                        self.error(&p, e.to_string());
                        None
                    }
                }
            });
        let lease = self.opt(&f, "lease_seconds", Duration::from_secs(2), Self::seconds);
        Some(ClusterConfig {
            name: name?,
            lease: lease?,
        })
    }

    fn sites(&mut self, node: &Node, path: &str) -> Option<BTreeMap<SiteId, SiteConfig>> {
        let entries = self.named(node, path, "sites");
        if entries.is_empty() {
            if matches!(&node.value, Value::Null)
                || matches!(&node.value, Value::Map(m) if m.is_empty())
            {
                self.error(path, "expected at least one site");
            }
            return None;
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            let site = self.fields(n, &p, &["witness"]).and_then(|f| {
                let witness = self.opt(&f, "witness", false, Self::boolean)?;
                Some(SiteConfig { witness })
            });
            self.declared_sites
                .insert(name.clone(), site.as_ref().is_some_and(|s| s.witness));
            match (SiteId::new(name.clone()), site) {
                (Ok(id), Some(site)) => {
                    out.insert(id, site);
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn orchestrators(
        &mut self,
        node: &Node,
        path: &str,
    ) -> Option<BTreeMap<OrchestratorId, OrchestratorConfig>> {
        let entries = self.named(node, path, "orchestrators");
        if entries.is_empty() {
            self.error(path, "expected at least one orchestrator");
            return None;
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        let mut addresses: HashMap<String, String> = HashMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            let Some(f) = self.fields(n, &p, &["site", "address"]) else {
                ok = false;
                continue;
            };
            let site = self
                .require(&f, "site", "the orchestrator's site")
                .and_then(|n| self.site_ref(n, &f.path("site"), true, ""));
            let address = self
                .require(&f, "address", "the orchestrator's host:port")
                .and_then(|n| {
                    let ap = f.path("address");
                    let a = self.text(n, &ap, "host:port")?;
                    if let Err(why) = check_host_port(&a, false) {
                        self.error(&ap, format!("{a:?} is not host:port: {why}"));
                        return None;
                    }
                    if let Some(other) = addresses.get(&a) {
                        self.error(
                            &ap,
                            format!("{a:?} is already the address of orchestrator {other:?}"),
                        );
                        return None;
                    }
                    addresses.insert(a.clone(), name.clone());
                    Some(a)
                });
            match (OrchestratorId::new(name.clone()), site, address) {
                (Ok(id), Some(site), Some(address)) => {
                    out.insert(id, OrchestratorConfig { site, address });
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn controllers(
        &mut self,
        node: &Node,
        path: &str,
        orchestrators: Option<&BTreeMap<OrchestratorId, OrchestratorConfig>>,
    ) -> (BTreeMap<ControllerId, ControllerConfig>, bool) {
        let entries = self.named(node, path, "controllers");
        for (name, _) in &entries {
            self.declared_controllers.insert(name.clone());
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            match (
                ControllerId::new(name.clone()),
                self.controller(n, &p, name),
            ) {
                (Ok(id), Some(c)) => {
                    out.insert(id, c);
                }
                _ => ok = false,
            }
            if let (Some(orch), Some((site, reach))) =
                (orchestrators, self.controller_sites.get(name).cloned())
            {
                self.check_callable(&p, &site, &reach, orch);
            }
        }
        (out, ok)
    }

    fn check_callable(
        &mut self,
        path: &str,
        site: &SiteId,
        reach: &[SiteId],
        orchestrators: &BTreeMap<OrchestratorId, OrchestratorConfig>,
    ) {
        let allowed_sites: Vec<&SiteId> = std::iter::once(site).chain(reach).collect();
        if orchestrators
            .values()
            .any(|o| allowed_sites.contains(&&o.site))
        {
            return;
        }
        let allowed = list_names(allowed_sites.iter().map(|s| s.as_str()));
        let at: BTreeSet<&str> = orchestrators.values().map(|o| o.site.as_str()).collect();
        self.error(
            &child(path, "site"),
            format!(
                "no orchestrator may call this controller: none runs at its site or reach \
                 ({allowed}); orchestrators run at: {}",
                list_names(at)
            ),
        );
    }

    fn controller(&mut self, node: &Node, path: &str, name: &str) -> Option<ControllerConfig> {
        const COMMON: &[&str] = &["type", "site", "reach", "secret", "timeout_seconds"];
        // The type decides which other keys are allowed, so it is read first.
        let ty = match &node.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.value.as_text().as_deref() == Some("type"))
                .map(|(_, v)| v),
            _ => None,
        };
        let type_names: Vec<(&str, ControllerType)> = ControllerType::ALL
            .iter()
            .map(|t| (t.as_str(), *t))
            .collect();
        let ty = match ty {
            Some(t) => self.word(t, &child(path, "type"), "controller type", &type_names),
            None => {
                if matches!(node.value, Value::Map(_)) {
                    self.error(
                        &child(path, "type"),
                        format!(
                            "missing: the controller's type is required; types: {}",
                            list_names(type_names.iter().map(|(n, _)| *n))
                        ),
                    );
                } else {
                    self.fields(node, path, COMMON);
                }
                None
            }
        }?;
        self.controller_types.insert(name.to_owned(), ty);
        let specific: &[&'static str] = match ty {
            ControllerType::Redfish => &["endpoint", "tls", "username", "auth"],
            ControllerType::Ipmi => &["endpoint", "username", "cipher_suite"],
            ControllerType::Proxmox => &["endpoint", "tls", "token_id", "username"],
            ControllerType::Fortigate => &["endpoint", "tls", "vdom"],
            ControllerType::Docker => &["endpoint", "tls"],
            ControllerType::Postgres => &["endpoint", "tls", "username"],
            ControllerType::FenceAgent => &["agent", "options", "level"],
            ControllerType::Nova => &[
                "endpoint",
                "tls",
                "username",
                "user_domain",
                "project",
                "project_domain",
                "application_credential_id",
                "interface",
                "region",
            ],
        };
        let allowed: Vec<&'static str> = COMMON.iter().chain(specific).copied().collect();
        let f = self.fields(node, path, &allowed)?;

        let site = self
            .require(&f, "site", "the site where the controller lives")
            .and_then(|n| self.site_ref(n, &f.path("site"), false, "runs no controllers"));
        let reach = self.reach(&f, site.as_ref());
        if let (Some(site), Some(reach)) = (&site, &reach) {
            self.controller_sites
                .insert(name.to_owned(), (site.clone(), reach.clone()));
        }
        let needs_secret = !matches!(ty, ControllerType::Docker | ControllerType::FenceAgent);
        let secret = match f.get("secret") {
            Some(n) => {
                let p = f.path("secret");
                match &n.value {
                    Value::Map(_) | Value::Seq(_) => {
                        self.error(
                            &p,
                            "expected the name of a secret reference, found a structure: \
                             `secret:` names a secret in each orchestrator's store, never the \
                             credential itself",
                        );
                        None
                    }
                    _ => self.name::<SecretRef>(n, &p, "a secret name").map(Some),
                }
            }
            None if needs_secret => {
                self.error(
                    &f.path("secret"),
                    format!(
                        "missing: a {ty} controller needs `secret: NAME`, a reference to its \
                         credential in each orchestrator's secret store"
                    ),
                );
                None
            }
            None => Some(None),
        };
        let timeout = self.opt(
            &f,
            "timeout_seconds",
            Duration::from_secs(10),
            Self::seconds,
        );
        let (kind, https) = self.kind(ty, &f)?;
        let tls = match f.get("tls") {
            None => Some(TlsTrust::SystemRoots),
            Some(n) => {
                let p = f.path("tls");
                let t = self.tls(n, &p);
                if !https && t.is_some() {
                    self.error(&p, "tls applies only to an https endpoint");
                    None
                } else {
                    t
                }
            }
        };
        Some(ControllerConfig {
            site: site?,
            reach: reach?,
            secret: secret?,
            tls: tls?,
            timeout: timeout?,
            kind,
        })
    }

    fn reach(&mut self, f: &Fields<'_>, site: Option<&SiteId>) -> Option<Vec<SiteId>> {
        let Some(n) = f.get("reach") else {
            return Some(Vec::new());
        };
        let p = f.path("reach");
        let items = self.list(n, &p, "site names");
        let mut out: Vec<SiteId> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ip = index(&p, i);
            match self.site_ref(item, &ip, false, "makes no controller calls") {
                Some(s) if out.contains(&s) => {
                    self.error(&ip, format!("\"{s}\" is listed twice"));
                }
                Some(s) if Some(&s) == site => {
                    self.warn(&ip, format!("\"{s}\" is the controller's own site already"));
                }
                Some(s) => out.push(s),
                None => {}
            }
        }
        // Entries already reported are left out; the rest still serve the checks that follow.
        Some(out)
    }

    /// The type's own settings, and whether its endpoint is https (so `tls` applies).
    fn kind(&mut self, ty: ControllerType, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let username = |d: &mut Self| {
            d.require(f, "username", "the account's user name")
                .and_then(|n| d.text(n, &f.path("username"), "a user name"))
        };
        match ty {
            ControllerType::Redfish => {
                let endpoint = self.url(f, &["https"]);
                let username = username(self);
                let auth = self.opt(f, "auth", RedfishAuth::Session, |d, n, p| {
                    d.word(
                        n,
                        p,
                        "Redfish authentication",
                        &[
                            ("session", RedfishAuth::Session),
                            ("basic", RedfishAuth::Basic),
                        ],
                    )
                });
                Some((
                    ControllerKind::Redfish {
                        endpoint: endpoint?,
                        username: username?,
                        auth: auth?,
                    },
                    true,
                ))
            }
            ControllerType::Ipmi => {
                let endpoint = self
                    .require(f, "endpoint", "the BMC's host[:port]")
                    .and_then(|n| {
                        let p = f.path("endpoint");
                        let e = self.text(n, &p, "host[:port]")?;
                        match check_host_port(&e, true) {
                            Ok(()) => Some(e),
                            Err(why) => {
                                self.error(&p, format!("{e:?} is not host[:port]: {why}"));
                                None
                            }
                        }
                    });
                let username = username(self);
                let cipher_suite = self.opt(f, "cipher_suite", 17, |d, n, p| {
                    let c = d.count(n, p)?;
                    const SUITES: [u32; 4] = [3, 8, 12, 17];
                    if SUITES.contains(&c) {
                        Some(c as u8)
                    } else {
                        d.error(
                            p,
                            format!(
                                "cipher suite {c} is not allowed; allowed: 3, 8, 12, 17 (the \
                                 suites with authentication and integrity)"
                            ),
                        );
                        None
                    }
                });
                Some((
                    ControllerKind::Ipmi {
                        endpoint: endpoint?,
                        username: username?,
                        cipher_suite: cipher_suite?,
                    },
                    false,
                ))
            }
            ControllerType::Proxmox => {
                let endpoint = self.url(f, &["https"]);
                let auth = match (f.get("token_id"), f.get("username")) {
                    (Some(t), None) => {
                        let p = f.path("token_id");
                        self.text(t, &p, "an API token id").and_then(|id| {
                            let ok = id
                                .split_once('@')
                                .and_then(|(user, rest)| {
                                    let (realm, name) = rest.split_once('!')?;
                                    Some(!user.is_empty() && !realm.is_empty() && !name.is_empty())
                                })
                                .unwrap_or(false);
                            if ok {
                                Some(ProxmoxAuth::Token { token_id: id })
                            } else {
                                self.error(
                                    &p,
                                    format!(
                                        "{id:?} is not an API token id: expected \
                                         USER@REALM!TOKENID, e.g. qfence@pve!fence"
                                    ),
                                );
                                None
                            }
                        })
                    }
                    (None, Some(u)) => {
                        let p = f.path("username");
                        self.text(u, &p, "a user name").and_then(|u| {
                            if u.contains('@') {
                                Some(ProxmoxAuth::Ticket { username: u })
                            } else {
                                self.error(
                                    &p,
                                    format!(
                                        "{u:?} has no realm: expected USER@REALM, e.g. root@pam"
                                    ),
                                );
                                None
                            }
                        })
                    }
                    (Some(_), Some(_)) => {
                        self.error(
                            &f.path("username"),
                            "give token_id (an API token) or username (a ticket), not both",
                        );
                        None
                    }
                    (None, None) => {
                        self.error(
                            &f.path("token_id"),
                            "missing: a proxmox controller needs token_id (an API token, \
                             recommended) or username (a ticket)",
                        );
                        None
                    }
                };
                Some((
                    ControllerKind::Proxmox {
                        endpoint: endpoint?,
                        auth: auth?,
                    },
                    true,
                ))
            }
            ControllerType::Fortigate => {
                let endpoint = self.url(f, &["https"]);
                let vdom = match f.get("vdom") {
                    None => Some(None),
                    Some(n) => self.text(n, &f.path("vdom"), "a VDOM name").map(Some),
                };
                Some((
                    ControllerKind::Fortigate {
                        endpoint: endpoint?,
                        vdom: vdom?,
                    },
                    true,
                ))
            }
            ControllerType::Docker => {
                let endpoint = self.url(f, &["unix", "https"])?;
                let https = endpoint.scheme() == "https";
                Some((ControllerKind::Docker { endpoint }, https))
            }
            ControllerType::Postgres => {
                let endpoint = self.url(f, &["postgresql", "postgres"]);
                let username = username(self);
                Some((
                    ControllerKind::Postgres {
                        endpoint: endpoint?,
                        username: username?,
                    },
                    true,
                ))
            }
            ControllerType::FenceAgent => {
                let agent = self
                    .require(f, "agent", "the fence agent's program name")
                    .and_then(|n| {
                        let p = f.path("agent");
                        let a = self.text(n, &p, "a program name")?;
                        let ok = a.strip_prefix("fence_").is_some_and(|rest| {
                            !rest.is_empty()
                                && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        });
                        if ok {
                            Some(a)
                        } else {
                            self.error(
                                &p,
                                format!(
                                    "{a:?} is not a fence agent name: expected fence_NAME, \
                                     e.g. fence_ipmilan (a program name, not a path)"
                                ),
                            );
                            None
                        }
                    });
                let options = match f.get("options") {
                    None => Some(BTreeMap::new()),
                    Some(n) => self.string_map(n, &f.path("options"), "agent options"),
                };
                let levels: Vec<(&str, FenceLevel)> =
                    FenceLevel::ALL.iter().map(|l| (l.as_str(), *l)).collect();
                let level = self.opt(f, "level", FenceLevel::Compute, |d, n, p| {
                    d.word(n, p, "fence level", &levels)
                });
                Some((
                    ControllerKind::FenceAgent {
                        agent: agent?,
                        options: options?,
                        level: level?,
                    },
                    false,
                ))
            }
            ControllerType::Nova => {
                let endpoint = self.url(f, &["https"]);
                let auth = nova_auth(self, f);
                let interface = self.opt(f, "interface", NovaInterface::Public, |d, n, p| {
                    d.word(
                        n,
                        p,
                        "catalog interface",
                        &[
                            ("public", NovaInterface::Public),
                            ("internal", NovaInterface::Internal),
                            ("admin", NovaInterface::Admin),
                        ],
                    )
                });
                let region = match f.get("region") {
                    None => Some(None),
                    Some(n) => self.text(n, &f.path("region"), "a region name").map(Some),
                };
                Some((
                    ControllerKind::Nova {
                        endpoint: endpoint?,
                        auth: auth?,
                        interface: interface?,
                        region: region?,
                    },
                    true,
                ))
            }
        }
    }

    fn url(&mut self, f: &Fields<'_>, schemes: &[&str]) -> Option<url::Url> {
        let n = self.require(f, "endpoint", "the controller's endpoint")?;
        let p = f.path("endpoint");
        let s = self.text(n, &p, "a URL")?;
        let example = format!("{}://...", schemes[0]);
        let u = match url::Url::parse(&s) {
            Ok(u) => u,
            Err(e) => {
                self.error(&p, format!("{s:?} is not a URL ({e}); expected {example}"));
                return None;
            }
        };
        if !schemes.contains(&u.scheme()) {
            self.error(
                &p,
                format!(
                    "scheme {:?} is not allowed here; allowed: {}",
                    u.scheme(),
                    schemes.join(", ")
                ),
            );
            return None;
        }
        if u.password().is_some() {
            self.error(&p, INLINE_CREDENTIAL);
            return None;
        }
        if u.scheme() != "unix" && u.host_str().is_none_or(str::is_empty) {
            self.error(&p, format!("{s:?} has no host; expected {example}"));
            return None;
        }
        Some(u)
    }

    fn tls(&mut self, node: &Node, path: &str) -> Option<TlsTrust> {
        let f = self.fields(node, path, &["pin", "ca_file", "insecure"])?;
        let mut chosen = Vec::new();
        let mut out = Some(TlsTrust::SystemRoots);
        if let Some(n) = f.get("pin") {
            chosen.push("pin");
            let p = f.path("pin");
            out = self.text(n, &p, "a certificate fingerprint").and_then(|s| {
                match normalise_pin(&s) {
                    Some(hex) => Some(TlsTrust::Pin(hex)),
                    None => {
                        self.error(
                            &p,
                            format!(
                                "{s:?} is not a pin: expected \"sha256:\" and 64 hex digits \
                                 (colons between bytes allowed)"
                            ),
                        );
                        None
                    }
                }
            });
        }
        if let Some(n) = f.get("ca_file") {
            chosen.push("ca_file");
            out = self
                .text(n, &f.path("ca_file"), "a file path")
                .map(TlsTrust::CaFile);
        }
        if let Some(n) = f.get("insecure") {
            let p = f.path("insecure");
            match self.boolean(n, &p) {
                Some(true) => {
                    chosen.push("insecure");
                    self.warn(
                        &p,
                        "insecure: true accepts any certificate, so anyone on the path can \
                         impersonate the controller; use pin or ca_file outside a lab",
                    );
                    out = Some(TlsTrust::Insecure);
                }
                Some(false) => {}
                None => out = None,
            }
        }
        if chosen.len() > 1 {
            self.error(
                path,
                format!(
                    "give only one of pin, ca_file, insecure; found {}",
                    chosen.join(", ")
                ),
            );
            return None;
        }
        out
    }

    /// A free-form mapping of names to scalar values (agent options, binding params).
    fn string_map(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
    ) -> Option<BTreeMap<String, String>> {
        self.visit(path, node);
        let entries = match &node.value {
            Value::Null => return Some(BTreeMap::new()),
            Value::Map(e) => e,
            other => {
                self.error(
                    path,
                    format!("expected a mapping of {what}, found {}", other.kind()),
                );
                return None;
            }
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        let mut seen: HashMap<String, u32> = HashMap::new();
        for (k, v) in entries {
            let Some(key) = k.value.as_text() else {
                self.error(
                    path,
                    format!("keys must be strings, found {}", k.value.kind()),
                );
                ok = false;
                continue;
            };
            let p = child(path, &key);
            self.visit(&p, k);
            if let Some(first) = seen.get(&key) {
                self.error(&p, format!("duplicate key {key:?} (first on line {first})"));
                ok = false;
                continue;
            }
            seen.insert(key.clone(), k.line);
            if is_credential_key(&key) {
                ok = false;
                continue;
            }
            let value = match &v.value {
                Value::Bool(b) => Some(b.to_string()),
                _ => self.text(v, &p, "a value"),
            };
            match value {
                Some(value) => {
                    out.insert(key, value);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    // ---- plans ----------------------------------------------------------------------------

    fn plans(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<BTreeMap<PlanId, PlanConfig>> {
        let entries = self.named(node, path, "plans");
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            match (PlanId::new(name.clone()), self.plan(n, &p, controllers)) {
                (Ok(id), Some(plan)) => {
                    out.insert(id, plan);
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn plan(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<PlanConfig> {
        let f = self.fields(
            node,
            path,
            &[
                "owner",
                "priority",
                "interval_seconds",
                "freshness_seconds",
                "recovery_after_seconds",
                "max_recoveries",
                "failover_after_seconds",
                "fence_timeout_seconds",
                "max_retries",
                "unfence_on_promote",
                "auto_failover",
                "instances",
                "service",
            ],
        )?;
        // The plan's sites come first: owner, priority and vip.own params are checked
        // against them.
        let inst_path = f.path("instances");
        let site_entries = match self.require(&f, "instances", "each site's instance") {
            Some(n) => self.named(n, &inst_path, "instances"),
            None => Vec::new(),
        };
        let mut sites: Vec<SiteId> = Vec::new();
        let mut sites_ok = true;
        for (name, n) in &site_entries {
            let sp = child(&inst_path, name);
            let key = Node {
                value: Value::Str(name.clone()),
                line: n.line,
            };
            match self.site_ref(&key, &sp, false, "holds no plan instances") {
                Some(s) => sites.push(s),
                None => sites_ok = false,
            }
        }
        if f.get("instances").is_some() && sites_ok && sites.len() < 2 {
            self.error(
                &inst_path,
                format!(
                    "a plan needs instances at two sites or more to fail over between; found {}: {}",
                    sites.len(),
                    list_names(sites.iter().map(SiteId::as_str))
                ),
            );
        }
        let site_names = list_names(sites.iter().map(SiteId::as_str));

        let owner = self
            .require(&f, "owner", "the site that owns the plan at first")
            .and_then(|n| {
                let p = f.path("owner");
                let s: SiteId = self.name(n, &p, "a site name")?;
                if sites.contains(&s) || !sites_ok {
                    Some(s)
                } else {
                    self.error(
                        &p,
                        format!("\"{s}\" is not one of the plan's sites: {site_names}"),
                    );
                    None
                }
            });
        let priority = self.opt(&f, "priority", Vec::new(), |d, n, p| {
            let items = d.list(n, p, "site names");
            let mut out: Vec<SiteId> = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let ip = index(p, i);
                let Some(s) = d.name::<SiteId>(item, &ip, "a site name") else {
                    ok = false;
                    continue;
                };
                if !sites.contains(&s) {
                    d.error(
                        &ip,
                        format!("\"{s}\" is not one of the plan's sites: {site_names}"),
                    );
                    ok = false;
                } else if out.contains(&s) {
                    d.error(&ip, format!("\"{s}\" is listed twice"));
                    ok = false;
                } else {
                    out.push(s);
                }
            }
            ok.then_some(out)
        });
        let interval = self.opt(
            &f,
            "interval_seconds",
            Duration::from_secs(10),
            Self::seconds,
        );
        let freshness = match f.get("freshness_seconds") {
            Some(n) => self.seconds(n, &f.path("freshness_seconds")),
            None => interval.map(|i| i * 3),
        };
        let recovery_after = self.opt(
            &f,
            "recovery_after_seconds",
            Duration::from_secs(30),
            Self::seconds,
        );
        let max_recoveries = self.opt(&f, "max_recoveries", 1, Self::count);
        let failover_after = self.opt(
            &f,
            "failover_after_seconds",
            Duration::from_secs(60),
            Self::seconds,
        );
        let fence_timeout = self.opt(
            &f,
            "fence_timeout_seconds",
            Duration::from_secs(30),
            Self::seconds,
        );
        let max_retries = self.opt(&f, "max_retries", 2, Self::count);
        let unfence_on_promote = self.opt(&f, "unfence_on_promote", false, Self::boolean);
        let auto_failover = self.opt(&f, "auto_failover", true, Self::boolean);

        let mut instances = BTreeMap::new();
        let mut bindings_ok = true;
        for (name, n) in &site_entries {
            let sp = child(&inst_path, name);
            let Ok(site) = SiteId::new(name.clone()) else {
                continue;
            };
            match self.bindings(n, &sp, Some(&site), &sites, controllers) {
                Some(b) => {
                    instances.insert(site, b);
                }
                None => bindings_ok = false,
            }
        }
        let service = match f.get("service") {
            None => Some(Vec::new()),
            Some(n) => self.bindings(n, &f.path("service"), None, &sites, controllers),
        };

        if let (Some(interval), Some(freshness), Some(recovery_after), Some(max_recoveries)) =
            (interval, freshness, recovery_after, max_recoveries)
            && let (Some(failover_after), Some(fence_timeout)) = (failover_after, fence_timeout)
        {
            self.check_timing(
                path,
                Timing {
                    interval,
                    freshness,
                    freshness_given: f.get("freshness_seconds").is_some(),
                    recovery_after,
                    max_recoveries,
                    failover_after,
                    fence_timeout,
                },
            );
        }
        let plan = PlanConfig {
            owner: owner?,
            priority: priority?,
            interval: interval?,
            freshness: freshness?,
            recovery_after: recovery_after?,
            max_recoveries: max_recoveries?,
            failover_after: failover_after?,
            fence_timeout: fence_timeout?,
            max_retries: max_retries?,
            unfence_on_promote: unfence_on_promote?,
            auto_failover: auto_failover?,
            instances,
            service: service?,
        };
        if !(bindings_ok && sites_ok) {
            return None;
        }
        self.check_plan(path, &plan, controllers);
        Some(plan)
    }

    fn check_timing(&mut self, path: &str, p: Timing) {
        if p.freshness_given && p.freshness < p.interval {
            self.error(
                &child(path, "freshness_seconds"),
                format!(
                    "freshness_seconds ({}) must be at least interval_seconds ({}): every \
                     observation would be stale before the next one is made",
                    secs(p.freshness),
                    secs(p.interval)
                ),
            );
        }
        if p.interval >= p.failover_after {
            self.error(
                &child(path, "interval_seconds"),
                format!(
                    "interval_seconds ({}) must be less than failover_after_seconds ({})",
                    secs(p.interval),
                    secs(p.failover_after)
                ),
            );
        }
        if p.fence_timeout >= p.failover_after {
            self.error(
                &child(path, "fence_timeout_seconds"),
                format!(
                    "fence_timeout_seconds ({}) must be less than failover_after_seconds ({})",
                    secs(p.fence_timeout),
                    secs(p.failover_after)
                ),
            );
        }
        if p.max_recoveries > 0 && p.recovery_after >= p.failover_after {
            self.error(
                &child(path, "recovery_after_seconds"),
                format!(
                    "recovery_after_seconds ({}) must be less than failover_after_seconds ({}), \
                     or a restart in place never runs before a failover (set max_recoveries: 0 \
                     to go straight to failover)",
                    secs(p.recovery_after),
                    secs(p.failover_after)
                ),
            );
        }
    }

    /// Checks that need the whole plan with its bindings decoded.
    fn check_plan(
        &mut self,
        path: &str,
        plan: &PlanConfig,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) {
        for (site, bindings) in &plan.instances {
            let sp = child(&child(path, "instances"), site.as_str());
            let required: Vec<&Binding> = bindings
                .iter()
                .filter(|b| b.role == Role::Fence && b.required)
                .collect();
            if required.is_empty() {
                self.warn(
                    &sp,
                    format!(
                        "no required fence: qfence can never prove {site} stopped, so it never \
                         fails the plan over away from {site} on its own"
                    ),
                );
            } else if required.iter().all(|b| {
                controllers
                    .get(&b.controller)
                    .is_some_and(|c| c.allowed_sites().all(|s| s == site))
            }) {
                let names = list_names(required.iter().map(|b| b.controller.as_str()));
                self.warn(
                    &sp,
                    format!(
                        "every required fence of {site} is called only from {site} ({names}): if \
                         {site} is lost, nothing can prove it fenced; give one of them a reach"
                    ),
                );
            }
            if !bindings.iter().any(|b| b.role == Role::Switchover) {
                self.warn(
                    &sp,
                    format!(
                        "no switchover binding: a failover to {site} cannot promote anything there"
                    ),
                );
            }
        }
        // A controller's own call deadline must fit inside the plan's fence deadline.
        let mut reported = BTreeSet::new();
        for b in plan.instances.values().flatten() {
            if b.role != Role::Fence || !reported.insert(b.controller.clone()) {
                continue;
            }
            if let Some(c) = controllers.get(&b.controller)
                && c.timeout >= plan.fence_timeout
            {
                self.error(
                    &child(path, "fence_timeout_seconds"),
                    format!(
                        "fence_timeout_seconds ({}) must be more than the timeout_seconds ({}) \
                         of controller {:?}, which fences for this plan",
                        secs(plan.fence_timeout),
                        secs(c.timeout),
                        b.controller.as_str()
                    ),
                );
            }
        }
    }

    fn bindings(
        &mut self,
        node: &Node,
        path: &str,
        site: Option<&SiteId>,
        plan_sites: &[SiteId],
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<Vec<Binding>> {
        let items = self.list(node, path, "bindings");
        let mut out: Vec<Binding> = Vec::new();
        let mut ok = true;
        let mut firsts: Vec<(usize, &Binding)> = Vec::new();
        let decoded: Vec<Option<Binding>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| self.binding(item, &index(path, i), site, plan_sites, controllers))
            .collect();
        for (i, b) in decoded.iter().enumerate() {
            let Some(b) = b else {
                ok = false;
                continue;
            };
            let same = firsts.iter().find(|(_, f)| {
                f.controller == b.controller
                    && f.capability == b.capability
                    && f.resource == b.resource
                    && f.role == b.role
            });
            if let Some((j, _)) = same {
                self.error(
                    &index(path, i),
                    format!("duplicate binding: the same as [{j}]"),
                );
                ok = false;
                continue;
            }
            firsts.push((i, b));
        }
        for b in decoded.into_iter().flatten() {
            out.push(b);
        }
        ok.then_some(out)
    }

    fn binding(
        &mut self,
        node: &Node,
        path: &str,
        site: Option<&SiteId>,
        plan_sites: &[SiteId],
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<Binding> {
        let f = self.fields(
            node,
            path,
            &[
                "controller",
                "capability",
                "resource",
                "role",
                "required",
                "params",
            ],
        )?;
        let controller = self
            .require(&f, "controller", "the controller to act through")
            .and_then(|n| {
                let p = f.path("controller");
                let id: ControllerId = self.name(n, &p, "a controller name")?;
                if !self.declared_controllers.contains(id.as_str()) {
                    let names = list_names(self.declared_controllers.iter().map(String::as_str));
                    self.error(
                        &p,
                        format!("unknown controller \"{id}\"; controllers: {names}"),
                    );
                    return None;
                }
                Some(id)
            });
        let roles: Vec<(&str, Role)> = Role::ALL.iter().map(|r| (r.as_str(), *r)).collect();
        let role = self
            .require(&f, "role", "the binding's role")
            .and_then(|n| self.word(n, &f.path("role"), "role", &roles));
        let capability_name = self
            .require(&f, "capability", "the capability to use")
            .and_then(|n| self.text(n, &f.path("capability"), "a capability name"));
        let resource = self
            .require(&f, "resource", "the resource the capability acts on")
            .and_then(|n| self.text(n, &f.path("resource"), "a resource name"));
        let required = self.opt(&f, "required", false, Self::boolean);
        let params = match f.get("params") {
            None => Some(BTreeMap::new()),
            Some(n) => self.string_map(n, &f.path("params"), "capability parameters"),
        };

        // Where the binding sits must fit its role.
        if let Some(role) = role {
            let rp = f.path("role");
            match site {
                Some(site) if role == Role::Service => self.error(
                    &rp,
                    format!(
                        "a service binding follows whichever site owns the plan: move it from \
                         the instance at {site} to the plan's service list"
                    ),
                ),
                None if role != Role::Service => self.error(
                    &rp,
                    format!(
                        "only service bindings belong in the plan's service list; a {role} \
                         binding belongs in a site's instance"
                    ),
                ),
                _ => {}
            }
            if required == Some(true) && role != Role::Fence {
                self.error(
                    &f.path("required"),
                    format!("only fence bindings can be required; this one is {role}"),
                );
            }
        }

        // The capability, from the controller's type, decides the rest.
        // A controller that failed to decode still has its type checked against, so the
        // binding's own mistakes are reported in the same run.
        let controller_config = controller.as_ref().and_then(|c| controllers.get(c));
        let controller_type = controller
            .as_ref()
            .and_then(|c| self.controller_types.get(c.as_str()).copied());
        let spec: Option<&'static CapabilitySpec> =
            match (&controller, controller_type, &capability_name) {
                (Some(cid), Some(ty), Some(name)) => match ty.capability(name) {
                    Some(spec) => Some(spec),
                    None => {
                        self.error(
                            &f.path("capability"),
                            format!(
                                "{name:?} is not a capability of controller {:?} ({ty}): {}",
                                cid.as_str(),
                                ty.capability_names()
                            ),
                        );
                        None
                    }
                },
                _ => None,
            };
        if let (Some(spec), Some(ty)) = (spec, controller_type) {
            let level = controller_config.map_or(spec.level, |c| c.fence_level(spec));
            if let Some(role) = role
                && !spec.allows(role)
            {
                self.error(
                    &f.path("role"),
                    format!(
                        "{} may not take the role {role}; it takes: {}",
                        spec.name,
                        spec.role_names()
                    ),
                );
            }
            if required == Some(true)
                && role == Some(Role::Fence)
                && level == Some(FenceLevel::Application)
            {
                self.error(
                    &f.path("required"),
                    format!(
                        "{} is an application fence, which never proves a site stopped: it can \
                         only be a secondary fence (remove required, and require a compute or \
                         network fence)",
                        spec.name
                    ),
                );
            }
            if let Some(r) = &resource
                && !spec.resource.accepts(r)
            {
                self.error(
                    &f.path("resource"),
                    format!(
                        "{r:?} is not a valid resource for {}: expected a {}",
                        spec.name,
                        spec.resource.describe()
                    ),
                );
            }
            if let Some(params) = &params {
                self.check_params(&f.path("params"), ty, spec, params, plan_sites);
            }
        }

        Some(Binding {
            controller: controller?,
            capability: capability_name?,
            resource: resource?,
            role: role?,
            required: required?,
            params: params?,
        })
    }

    /// Checks a binding's `params:` against what the catalog declares for its capability.
    fn check_params(
        &mut self,
        path: &str,
        ty: ControllerType,
        spec: &CapabilitySpec,
        params: &BTreeMap<String, String>,
        plan_sites: &[SiteId],
    ) {
        match spec.params {
            Params::PerSite(site_param) => {
                for (k, v) in params {
                    let p = child(path, k);
                    if !plan_sites.iter().any(|s| s.as_str() == k) {
                        self.error(
                            &p,
                            format!(
                                "{} takes one address per plan site; {k:?} is not one of \
                                 them: {}",
                                spec.name,
                                list_names(plan_sites.iter().map(SiteId::as_str))
                            ),
                        );
                    } else if !site_param.ty.accepts(v) {
                        self.error(&p, format!("{v:?} is not {}", site_param.ty.describe()));
                    }
                }
                let missing: Vec<&str> = plan_sites
                    .iter()
                    .map(SiteId::as_str)
                    .filter(|s| !params.contains_key(*s))
                    .collect();
                if !missing.is_empty() {
                    self.error(
                        path,
                        format!(
                            "{} needs the address the VIP points at for every plan site; \
                             missing: {}",
                            spec.name,
                            missing.join(", ")
                        ),
                    );
                }
            }
            Params::Named(known) => {
                for (k, v) in params {
                    let p = child(path, k);
                    match known.iter().find(|d| d.name == k) {
                        None if known.is_empty() => {
                            self.error(
                                &p,
                                format!("unknown param {k:?}; {} takes no params", spec.name),
                            );
                        }
                        None => self.error(
                            &p,
                            format!(
                                "unknown param {k:?}; {} ({ty}) takes: {}",
                                spec.name,
                                spec.params.names()
                            ),
                        ),
                        Some(d) if !d.ty.accepts(v) => {
                            self.error(&p, format!("expected {}, found {v:?}", d.ty.describe()));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

/// A plan's timings, for the checks of how they relate.
struct Timing {
    interval: Duration,
    freshness: Duration,
    freshness_given: bool,
    recovery_after: Duration,
    max_recoveries: u32,
    failover_after: Duration,
    fence_timeout: Duration,
}

/// `host:port`, `[v6]:port`; with `port_optional`, also `host` and `[v6]`.
fn check_host_port(s: &str, port_optional: bool) -> Result<(), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((h, after)) = rest.split_once(']') else {
            return Err("an IPv6 address needs its closing ']'".to_owned());
        };
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{h:?} is not an IPv6 address"));
        }
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err("expected ':' and a port after ']'".to_owned()),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => {
                if h.contains(':') {
                    return Err("write an IPv6 address in brackets: [::1]:7401".to_owned());
                }
                (h, Some(p))
            }
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_'))
    {
        return Err(format!("{host:?} is not a host name or address"));
    }
    match port {
        None if port_optional => Ok(()),
        None => Err("the port is missing".to_owned()),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{p:?} is not a port (1-65535)")),
        },
    }
}

/// `sha256:AB:CD:...` or `sha256:abcd...` to 64 lower-case hex digits.
fn normalise_pin(s: &str) -> Option<String> {
    let (algo, rest) = s.split_once(':')?;
    if !algo.eq_ignore_ascii_case("sha256") {
        return None;
    }
    let hex: String = rest.chars().filter(|c| *c != ':').collect();
    (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalised_to_lower_case_hex_without_colons() {
        let hex = "AB".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(
            normalise_pin(&format!("sha256:{hex}")),
            Some("ab".repeat(32))
        );
        assert_eq!(
            normalise_pin(&format!("SHA256:{colons}")),
            Some("ab".repeat(32))
        );
        assert_eq!(normalise_pin(&format!("sha1:{hex}")), None);
        assert_eq!(normalise_pin("sha256:abcd"), None);
        assert_eq!(normalise_pin(&"ab".repeat(32)), None);
    }

    #[test]
    fn host_port_accepts_names_v4_and_bracketed_v6() {
        assert!(check_host_port("127.0.0.1:7401", false).is_ok());
        assert!(check_host_port("orch-a.example:7401", false).is_ok());
        assert!(check_host_port("[::1]:7401", false).is_ok());
        assert!(check_host_port("10.0.0.5", true).is_ok());
        assert!(check_host_port("10.0.0.5", false).is_err());
        assert!(check_host_port("::1:7401", false).is_err());
        assert!(check_host_port("host:0", false).is_err());
        assert!(check_host_port("host:99999", false).is_err());
        assert!(check_host_port(":7401", false).is_err());
    }

    #[test]
    fn seconds_print_as_written() {
        assert_eq!(secs(Duration::from_secs(45)), "45");
        assert_eq!(secs(Duration::from_millis(500)), "0.5");
    }
}
