//! The effective configuration: the configuration file's, plus the plans and controllers
//! registered through the API, which live in the cluster's replicated state.
//!
//! Every orchestrator rebuilds it from the same replicated records, with the file's own
//! validation ([`qfence_model::config::load_str`] over the file's text with the API's entries
//! added, as [`plan_api`] checks them), and swaps it in whole: readers take an
//! `Arc<EffectiveConfig>` once (per tick, per API call, per driver call) and see one
//! consistent configuration for as long as they hold it. See ADR 0008.
//!
//! What the API wrote is kept in the records the cluster already has: a plan's
//! `ClusterState.plans[..].config` holds an [`ApiPlanRecord`] (its spec as sent, and a staged
//! change), a controller's `ClusterState.controllers[..].config` an [`ApiControllerRecord`].
//! Records the file registered carry no `source: api` and are left to the file.

use std::collections::BTreeSet;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use qfence_cluster::node::ClusterNode;
use qfence_cluster::state::ClusterState;
use qfence_model::config::{Issue, ValidatedConfig, load_str, plan_api};
use qfence_model::{ControllerId, PlanId};
use serde::{Deserialize, Serialize};

use crate::dto::IssueDto;

/// The `source` an API record carries.
pub const API_SOURCE: &str = "api";

/// A plan created through the API, as its cluster record's `config` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiPlanRecord {
    /// Always [`API_SOURCE`].
    pub source: String,
    /// The plan in force, as the file writes `plans.NAME` (JSON).
    pub spec: serde_json::Value,
    /// A change waiting to be applied. Nothing of it is in force.
    #[serde(default)]
    pub staged: Option<StagedRecord>,
    /// Who created it (the token's name).
    pub created_by: String,
}

/// A staged change of a plan created through the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedRecord {
    pub spec: serde_json::Value,
    /// The generation it was staged on: it applies only while that still holds.
    pub base_generation: u64,
    pub staged_by: String,
    /// When, wall-clock ms.
    pub staged_at_ms: u64,
    #[serde(default)]
    pub warnings: Vec<IssueDto>,
}

/// A controller registered through the API, as its cluster record's `config` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiControllerRecord {
    /// Always [`API_SOURCE`].
    pub source: String,
    /// The controller as the file writes `controllers.NAME` (JSON); secrets by reference.
    pub spec: serde_json::Value,
    pub registered_by: String,
}

fn is_api(config: &serde_json::Value) -> bool {
    config.get("source").and_then(serde_json::Value::as_str) == Some(API_SOURCE)
}

impl ApiPlanRecord {
    /// The record, when `config` is one the API wrote.
    pub fn read(config: &serde_json::Value) -> Option<Self> {
        is_api(config)
            .then(|| serde_json::from_value(config.clone()).ok())
            .flatten()
    }
}

impl ApiControllerRecord {
    /// The record, when `config` is one the API wrote.
    pub fn read(config: &serde_json::Value) -> Option<Self> {
        is_api(config)
            .then(|| serde_json::from_value(config.clone()).ok())
            .flatten()
    }
}

/// The API's entries in the replicated state, in name order: what the effective
/// configuration is built from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ApiEntries {
    pub controllers: Vec<(ControllerId, serde_json::Value)>,
    pub plans: Vec<(PlanId, serde_json::Value)>,
}

impl ApiEntries {
    /// Reads them from the replicated state (a staged change is not in force, so not here).
    pub fn from_state(state: &ClusterState) -> Self {
        Self {
            controllers: state
                .controllers
                .iter()
                .filter_map(|(id, r)| {
                    ApiControllerRecord::read(&r.config).map(|a| (id.clone(), a.spec))
                })
                .collect(),
            plans: state
                .plans
                .iter()
                .filter_map(|(id, r)| ApiPlanRecord::read(&r.config).map(|a| (id.clone(), a.spec)))
                .collect(),
        }
    }
}

/// One consistent configuration: the file's plus the API's entries, validated as a whole.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    config: ValidatedConfig,
    /// The YAML text `config` was validated from: what new API entries are checked against.
    pub text: String,
    /// The plans and controllers that came from the API (the rest came from the file).
    pub api_plans: BTreeSet<PlanId>,
    pub api_controllers: BTreeSet<ControllerId>,
    /// API entries left out, each with why (they no longer validate, or the file took the
    /// name). Said at ERROR when the configuration is built.
    pub dropped: Vec<String>,
    /// What it was built from, to tell when a rebuild is due.
    key: String,
}

impl Deref for EffectiveConfig {
    type Target = ValidatedConfig;

    fn deref(&self) -> &ValidatedConfig {
        &self.config
    }
}

impl EffectiveConfig {
    /// The file's configuration alone.
    pub fn file_only(file: ValidatedConfig, text: String) -> Self {
        Self {
            config: file,
            text,
            api_plans: BTreeSet::new(),
            api_controllers: BTreeSet::new(),
            dropped: Vec::new(),
            key: String::new(),
        }
    }

    /// The validated configuration.
    pub fn validated(&self) -> &ValidatedConfig {
        &self.config
    }

    /// Whether plan `id` came from the API.
    pub fn plan_is_api(&self, id: &PlanId) -> bool {
        self.api_plans.contains(id)
    }

    /// Builds the effective configuration: the file's text with every API entry added, all
    /// validated at once by the file's loader. Pure. When the whole does not validate, the API
    /// entries the errors name are left out (with why, in `dropped`) and the rest is validated
    /// again, until it does: an entry that no longer validates (its controller left the file,
    /// say) never takes the file's plans, or the other entries, down with it. The file keeps
    /// any name it shares with an API entry. One validation when all is well, whatever the
    /// number of entries.
    pub fn build(file: &ValidatedConfig, file_text: &str, entries: &ApiEntries) -> Self {
        let key = serde_json::to_string(entries).unwrap_or_default();
        let mut dropped = Vec::new();
        let mut candidates = candidates(file, entries, &mut dropped);
        let file_only = |mut dropped: Vec<String>, why: String| {
            dropped.push(why);
            Self {
                dropped,
                key: key.clone(),
                ..Self::file_only(file.clone(), file_text.to_owned())
            }
        };
        // Each round leaves out at least one entry or ends.
        loop {
            let new: Vec<(&str, &str, &serde_json::Value)> = candidates
                .iter()
                .map(|(section, name, spec)| (*section, name.as_str(), *spec))
                .collect();
            let text = match plan_api::with_entries(file_text, &new, false) {
                Ok(t) => t,
                Err(i) => {
                    return file_only(
                        dropped,
                        format!(
                            "the API's plans and controllers could not be added to the \
                             configuration file's, so none is in force: {}",
                            describe(&i.iter().collect::<Vec<_>>())
                        ),
                    );
                }
            };
            let issues = match load_str(&text, "the effective configuration") {
                Ok(loaded) => {
                    let names = |section: &str| {
                        candidates
                            .iter()
                            .filter(|(s, _, _)| *s == section)
                            .map(|(_, n, _)| n.clone())
                            .collect::<Vec<_>>()
                    };
                    return Self {
                        config: loaded.config,
                        text,
                        api_plans: names("plans")
                            .into_iter()
                            .filter_map(|n| PlanId::new(n).ok())
                            .collect(),
                        api_controllers: names("controllers")
                            .into_iter()
                            .filter_map(|n| ControllerId::new(n).ok())
                            .collect(),
                        dropped,
                        key,
                    };
                }
                Err(issues) => issues,
            };
            let (mut blamed, unattributed) = blame(&candidates, &issues);
            if blamed.is_empty() {
                return file_only(
                    dropped,
                    format!(
                        "the API's plans and controllers together do not validate, so none is \
                         in force: {}",
                        describe(&unattributed)
                    ),
                );
            }
            blamed.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
            for (i, why) in blamed {
                let (section, name, _) = candidates.remove(i);
                let what = if section == "plans" {
                    format!("plan {name} created")
                } else {
                    format!("controller {name} registered")
                };
                dropped.push(format!(
                    "{what} through the API no longer validates: {}",
                    describe(&why)
                ));
            }
        }
    }
}

/// An API entry to add: its section (`plans`, `controllers`), its name and its spec.
type Candidate<'a> = (&'static str, String, &'a serde_json::Value);

/// The API's entries whose names the file does not hold; the others go to `dropped`, with why.
fn candidates<'a>(
    file: &ValidatedConfig,
    entries: &'a ApiEntries,
    dropped: &mut Vec<String>,
) -> Vec<Candidate<'a>> {
    let mut candidates: Vec<Candidate<'a>> = Vec::new();
    for (id, spec) in &entries.controllers {
        if file.controller(id.as_str()).is_some() {
            dropped.push(format!(
                "controller {id} registered through the API is shadowed by the configuration file's"
            ));
        } else {
            candidates.push(("controllers", id.to_string(), spec));
        }
    }
    for (id, spec) in &entries.plans {
        if file.plan(id.as_str()).is_some() {
            dropped.push(format!(
                "plan {id} created through the API is shadowed by the configuration file's"
            ));
        } else {
            candidates.push(("plans", id.to_string(), spec));
        }
    }
    candidates
}

/// Errors by the index of the entry they are about.
type Blamed<'i> = Vec<(usize, Vec<&'i Issue>)>;

/// Which entry each error is about: the longest name whose path it is under (names may hold
/// dots: `plans.a.b.x` is about plan `a.b`, not `a`). Returns the errors by entry index, in the
/// order first blamed, and those about no entry.
fn blame<'i>(candidates: &[Candidate<'_>], issues: &'i [Issue]) -> (Blamed<'i>, Vec<&'i Issue>) {
    let mut blamed: Blamed<'i> = Vec::new();
    let mut unattributed = Vec::new();
    for issue in issues.iter().filter(|i| i.is_error()) {
        let owner = candidates
            .iter()
            .enumerate()
            .filter(|(_, (section, name, _))| {
                let prefix = format!("{section}.{name}");
                issue.path == prefix
                    || issue.path.starts_with(&format!("{prefix}."))
                    || issue.path.starts_with(&format!("{prefix}["))
            })
            .max_by_key(|(_, (_, name, _))| name.len())
            .map(|(i, _)| i);
        match owner {
            Some(i) => match blamed.iter_mut().find(|(j, _)| *j == i) {
                Some((_, list)) => list.push(issue),
                None => blamed.push((i, vec![issue])),
            },
            None => unattributed.push(issue),
        }
    }
    (blamed, unattributed)
}

/// Errors, one `path: message` each.
fn describe(issues: &[&Issue]) -> String {
    issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| format!("{}: {}", i.path, i.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The effective configuration in force, swapped whole when the replicated API entries change.
/// Shared by the engine, the executor, the local drivers and the API backend.
#[derive(Debug)]
pub struct ConfigCell {
    file: ValidatedConfig,
    file_text: String,
    current: RwLock<Arc<EffectiveConfig>>,
    node: OnceLock<ClusterNode>,
    /// One rebuild at a time, so an older build never replaces a newer one.
    rebuild: Mutex<()>,
}

impl ConfigCell {
    /// A cell holding the file's configuration (validated from `file_text`) until it is
    /// attached to a cluster node.
    pub fn new(file: ValidatedConfig, file_text: impl Into<String>) -> Arc<Self> {
        let file_text = file_text.into();
        Arc::new(Self {
            current: RwLock::new(Arc::new(EffectiveConfig::file_only(
                file.clone(),
                file_text.clone(),
            ))),
            file,
            file_text,
            node: OnceLock::new(),
            rebuild: Mutex::new(()),
        })
    }

    /// The configuration file's configuration.
    pub fn file(&self) -> &ValidatedConfig {
        &self.file
    }

    /// Reads the API's entries from `node`'s replicated state from now on.
    pub fn attach(&self, node: ClusterNode) {
        let _ = self.node.set(node);
    }

    /// The configuration in force, as last built.
    pub fn get(&self) -> Arc<EffectiveConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The configuration in force, rebuilt first if the replicated API entries changed since
    /// it was built. Cheap when nothing changed (the API entries are compared, not validated).
    pub fn refresh(&self) -> Arc<EffectiveConfig> {
        let Some(node) = self.node.get() else {
            return self.get();
        };
        let _one = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
        let entries = node.read(ApiEntries::from_state);
        let key = serde_json::to_string(&entries).unwrap_or_default();
        let current = self.get();
        if current.key == key {
            return current;
        }
        let built = Arc::new(EffectiveConfig::build(
            &self.file,
            &self.file_text,
            &entries,
        ));
        for why in &built.dropped {
            tracing::error!(orchestrator = %node.name(), "Left out of the effective configuration: {why}");
        }
        tracing::info!(
            orchestrator = %node.name(),
            plans = built.plans().count(),
            api_plans = built.api_plans.len(),
            api_controllers = built.api_controllers.len(),
            "Rebuilt the effective configuration"
        );
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = built.clone();
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASE: &str = include_str!("../../../examples/lab.yaml");

    fn file() -> ValidatedConfig {
        load_str(BASE, "lab").expect("the lab loads").config
    }

    fn plan_spec(controller: &str) -> serde_json::Value {
        let inst = |dc: &str| {
            json!([
                {"controller": format!("bmc-{dc}"), "capability": "power.off", "resource": format!("pve-{dc}-01"), "role": "fence", "required": true},
                {"controller": format!("pve-{dc}"), "capability": "vm.status", "resource": format!("pve-{dc}-01/101"), "role": "health"},
                {"controller": format!("pve-{dc}"), "capability": "vm.start", "resource": format!("pve-{dc}-01/101"), "role": "switchover"}
            ])
        };
        let mut spec = json!({"owner": "dc1", "interval_seconds": 10,
            "instances": {"dc1": inst("dc1"), "dc2": inst("dc2")}});
        spec["instances"]["dc1"][0]["controller"] = json!(controller);
        spec
    }

    fn bmc_spec() -> serde_json::Value {
        json!({"type": "redfish", "endpoint": "https://127.0.0.1:8446", "site": "dc1",
            "reach": ["dc2"], "secret": "lab-redfish", "username": "qfence", "tls": {"insecure": true}})
    }

    #[test]
    fn api_controllers_and_plans_join_the_files_and_say_where_they_came_from() {
        let entries = ApiEntries {
            controllers: vec![(ControllerId::new("bmc-x").unwrap(), bmc_spec())],
            plans: vec![(PlanId::new("web").unwrap(), plan_spec("bmc-x"))],
        };
        let e = EffectiveConfig::build(&file(), BASE, &entries);
        assert!(e.dropped.is_empty(), "{:?}", e.dropped);
        assert!(e.plan("erp-db").is_some(), "the file's plan stays");
        let web = e.plan("web").expect("the API's plan is in force");
        assert_eq!(
            web.instances[&qfence_model::SiteId::new("dc1").unwrap()][0]
                .controller
                .as_str(),
            "bmc-x"
        );
        assert!(e.plan_is_api(&PlanId::new("web").unwrap()));
        assert!(!e.plan_is_api(&PlanId::new("erp-db").unwrap()));
        assert!(e.controller("bmc-x").is_some());
        // New entries are checked against the effective text: a plan may bind bmc-x.
        assert!(plan_api::check_plan(&e.text, "web2", &plan_spec("bmc-x")).is_ok());
        assert!(plan_api::check_plan(BASE, "web2", &plan_spec("bmc-x")).is_err());
    }

    #[test]
    fn an_entry_that_no_longer_validates_is_left_out_and_the_rest_stays() {
        let entries = ApiEntries {
            controllers: vec![],
            plans: vec![
                (PlanId::new("bad").unwrap(), plan_spec("gone")),
                (PlanId::new("good").unwrap(), plan_spec("bmc-dc1")),
            ],
        };
        let e = EffectiveConfig::build(&file(), BASE, &entries);
        assert!(e.plan("bad").is_none());
        assert!(e.plan("good").is_some());
        assert!(e.plan("erp-db").is_some());
        assert_eq!(e.dropped.len(), 1, "{:?}", e.dropped);
        assert!(e.dropped[0].contains("plan bad"), "{:?}", e.dropped);
        assert!(e.dropped[0].contains("gone"), "{:?}", e.dropped);
    }

    #[test]
    fn a_bad_controller_takes_out_the_plans_binding_it_and_nothing_else() {
        let mut bad = bmc_spec();
        bad["password"] = json!("inline");
        let entries = ApiEntries {
            controllers: vec![
                (ControllerId::new("bmc-bad").unwrap(), bad),
                (ControllerId::new("bmc-x").unwrap(), bmc_spec()),
            ],
            plans: vec![
                (PlanId::new("a").unwrap(), plan_spec("bmc-x")),
                (PlanId::new("a.b").unwrap(), plan_spec("bmc-bad")),
                (PlanId::new("c").unwrap(), plan_spec("bmc-dc1")),
            ],
        };
        let e = EffectiveConfig::build(&file(), BASE, &entries);
        assert!(e.controller("bmc-bad").is_none());
        assert!(e.controller("bmc-x").is_some());
        assert!(e.plan("a.b").is_none(), "it binds the bad controller");
        assert!(
            e.plan("a").is_some(),
            "a dotted name is not blamed on its prefix"
        );
        assert!(e.plan("c").is_some() && e.plan("erp-db").is_some());
        assert_eq!(e.dropped.len(), 2, "{:?}", e.dropped);
        assert!(
            e.dropped
                .iter()
                .any(|d| d.starts_with("controller bmc-bad"))
        );
        assert!(e.dropped.iter().any(|d| d.starts_with("plan a.b")));
        let again = EffectiveConfig::build(&file(), BASE, &entries);
        assert_eq!(again.dropped, e.dropped, "the same records build the same");
    }

    #[test]
    fn the_file_keeps_a_name_it_shares_with_an_api_entry() {
        let mut spec = plan_spec("bmc-dc1");
        spec["owner"] = json!("dc2");
        let entries = ApiEntries {
            controllers: vec![(ControllerId::new("bmc-dc1").unwrap(), bmc_spec())],
            plans: vec![(PlanId::new("erp-db").unwrap(), spec)],
        };
        let e = EffectiveConfig::build(&file(), BASE, &entries);
        assert_eq!(e.plan("erp-db").unwrap().owner.as_str(), "dc1");
        assert!(!e.plan_is_api(&PlanId::new("erp-db").unwrap()));
        assert_eq!(e.dropped.len(), 2, "{:?}", e.dropped);
    }

    /// How long a rebuild takes with N plans from the API (docs/benchmarks.md). Reports,
    /// asserts only that every plan made it:
    /// `cargo test -p qfence-server --lib effective::tests::rebuild_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement, not a check"]
    fn rebuild_cost() {
        for n in [1, 10, 50, 200] {
            let entries = ApiEntries {
                controllers: vec![(ControllerId::new("bmc-x").unwrap(), bmc_spec())],
                plans: (0..n)
                    .map(|i| (PlanId::new(format!("p{i}")).unwrap(), plan_spec("bmc-x")))
                    .collect(),
            };
            let t = qfence_model::time::monotonic_now();
            let e = EffectiveConfig::build(&file(), BASE, &entries);
            let took = t.elapsed();
            assert_eq!(e.api_plans.len(), n, "{:?}", e.dropped);
            eprintln!("{n} API plans: rebuilt in {took:?}");
        }
    }

    #[test]
    fn api_records_are_told_from_the_files() {
        assert!(ApiPlanRecord::read(&json!({"owner": "dc1"})).is_none());
        let r = ApiPlanRecord {
            source: API_SOURCE.into(),
            spec: json!({"owner": "dc1"}),
            staged: None,
            created_by: "alice".into(),
        };
        assert_eq!(
            ApiPlanRecord::read(&serde_json::to_value(&r).unwrap()),
            Some(r)
        );
    }
}
