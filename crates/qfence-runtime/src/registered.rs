//! What the controllers' latest tests (the registration checks) established, read from the
//! replicated state: the identity each controller answered with, and the capabilities graded
//! `failed`.
//!
//! Registration's findings bind what happens next:
//! - a failed capability is not advertised: the API refuses a plan that binds it
//!   (`capability_failed`, the field named), the console's editor never offers it, and a plan
//!   of the file that binds it is shown by the status, the console and the `capability_failed`
//!   alarm metric as bound to a capability that cannot work, before it is needed;
//! - the identities are what a new test compares with (a second controller of the same
//!   system is warned of) and what every fence first checks the controller still answers with
//!   (the pre-fence check, see `drivers::LocalDrivers::run`).
//!
//! A test that could not read the target (no identity) keeps the identity pinned before it;
//! its grades (none) replace the old ones, as the controller list shows them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use qfence_cluster::state::ControllerTestRecord;
use qfence_model::config::{Issue, PlanConfig, Severity};
use qfence_model::{ControllerId, PlanId};

use crate::backend::BackendError;
use crate::dto::{CapabilityGrade, GradeDto, UnworkableBinding};

/// The registered controllers' findings, decoded once.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Registered {
    /// Controller → capability → the grade's reason.
    failed: BTreeMap<ControllerId, BTreeMap<String, String>>,
    identities: BTreeMap<ControllerId, String>,
}

impl Registered {
    /// Decodes the latest test of every controller. A record this build cannot read counts
    /// as untested (nothing failed, nothing pinned), as the controller list shows it.
    pub fn read(tests: &BTreeMap<ControllerId, ControllerTestRecord>) -> Self {
        let mut out = Self::default();
        for (id, t) in tests {
            let grades: Vec<CapabilityGrade> =
                serde_json::from_value(t.grades.clone()).unwrap_or_default();
            out.graded(id, &grades);
            if let Some(i) = &t.identity {
                out.identities.insert(id.clone(), i.clone());
            }
        }
        out
    }

    /// Takes `grades` as the latest test of `controller` (replacing what was failed).
    pub fn graded(&mut self, controller: &ControllerId, grades: &[CapabilityGrade]) {
        let failed: BTreeMap<String, String> = grades
            .iter()
            .filter(|g| g.grade == GradeDto::Failed)
            .map(|g| (g.capability.clone(), g.detail.clone()))
            .collect();
        if failed.is_empty() {
            self.failed.remove(controller);
        } else {
            self.failed.insert(controller.clone(), failed);
        }
    }

    /// Each tested controller's identity, as registration compares them.
    pub fn identities(&self) -> &BTreeMap<ControllerId, String> {
        &self.identities
    }

    /// The identity `controller` answered with at its latest test that read one.
    pub fn identity(&self, controller: &ControllerId) -> Option<&str> {
        self.identities.get(controller).map(String::as_str)
    }

    /// The capabilities of `controller` graded failed, each with its reason.
    pub fn failed(&self, controller: &str) -> impl Iterator<Item = (&str, &str)> {
        self.failed
            .iter()
            .filter(move |(id, _)| id.as_str() == controller)
            .flat_map(|(_, caps)| caps.iter().map(|(c, r)| (c.as_str(), r.as_str())))
    }

    /// Every binding of `plan` to a capability that cannot work, in the file's order.
    pub fn unworkable(&self, plan: &PlanId, cfg: &PlanConfig) -> Vec<UnworkableBinding> {
        if self.failed.is_empty() {
            return Vec::new();
        }
        let instances = cfg.instances.iter().flat_map(|(site, list)| {
            list.iter().enumerate().map(move |(i, b)| {
                (
                    format!("plans.{plan}.instances.{site}[{i}].capability"),
                    Some(site.to_string()),
                    b,
                )
            })
        });
        let service = cfg
            .service
            .iter()
            .enumerate()
            .map(|(i, b)| (format!("plans.{plan}.service[{i}].capability"), None, b));
        instances
            .chain(service)
            .filter_map(|(path, site, b)| {
                let reason = self.failed.get(&b.controller)?.get(&b.capability)?;
                Some(UnworkableBinding {
                    path,
                    site,
                    controller: b.controller.to_string(),
                    capability: b.capability.clone(),
                    reason: reason.clone(),
                })
            })
            .collect()
    }
}

impl Registered {
    /// `Err` (`capability_failed`, an issue on each binding's capability field with the
    /// grade's reason) when `plan` binds a capability that cannot work.
    pub fn refuse_unworkable(&self, name: &PlanId, plan: &PlanConfig) -> Result<(), BackendError> {
        let bad = self.unworkable(name, plan);
        if bad.is_empty() {
            return Ok(());
        }
        let issues: Vec<Issue> = bad
            .iter()
            .map(|u| Issue {
                path: u.path.clone(),
                message: format!(
                    "{} of controller {} was graded failed by its latest test: {} (fix the \
                     controller and test it again, or bind another capability)",
                    u.capability, u.controller, u.reason
                ),
                severity: Severity::Error,
                line: None,
            })
            .collect();
        Err(BackendError::CapabilityFailed {
            message: format!(
                "plan {name} binds {} capabilit{} that cannot work; nothing was changed",
                issues.len(),
                if issues.len() == 1 { "y" } else { "ies" }
            ),
            issues,
        })
    }
}

/// [`Registered`], decoded again only when a controller's test record changed: the engine
/// asks for it for every plan it decides.
#[derive(Debug, Default)]
pub struct RegisteredCache(Mutex<Option<(Stamp, Arc<Registered>)>>);

/// Which test records a decoding was made from.
type Stamp = Vec<(ControllerId, u64)>;

impl RegisteredCache {
    /// The findings of `tests`, decoded again if they changed since the last call.
    pub fn get(&self, tests: &BTreeMap<ControllerId, ControllerTestRecord>) -> Arc<Registered> {
        let stamp: Stamp = tests
            .iter()
            .map(|(id, t)| (id.clone(), t.at_unix_ms))
            .collect();
        let mut cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, r)) = cached.as_ref()
            && *s == stamp
        {
            return r.clone();
        }
        let fresh = Arc::new(Registered::read(tests));
        *cached = Some((stamp, fresh.clone()));
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qfence_model::OrchestratorId;
    use serde_json::json;

    fn record(at: u64, grades: serde_json::Value, identity: Option<&str>) -> ControllerTestRecord {
        ControllerTestRecord {
            at_unix_ms: at,
            by: OrchestratorId::new("dc1-a").unwrap(),
            grades,
            identity: identity.map(str::to_owned),
        }
    }

    #[test]
    fn a_failed_grade_makes_every_binding_to_it_unworkable_and_nothing_else() {
        let cfg =
            qfence_model::config::load_str(include_str!("../../../examples/lab.yaml"), "lab.yaml")
                .expect("the lab validates")
                .config;
        let plan = PlanId::new("erp-db").unwrap();
        let tests: BTreeMap<ControllerId, ControllerTestRecord> = [
            (
                ControllerId::new("bmc-dc2").unwrap(),
                record(
                    1,
                    json!([
                        {"capability": "power.off", "grade": "failed", "detail": "role ReadOnly"},
                        {"capability": "power.status", "grade": "proven", "detail": "read"}
                    ]),
                    Some("redfish-service:x"),
                ),
            ),
            (
                ControllerId::new("pve-dc1").unwrap(),
                record(2, json!("not grades"), None),
            ),
        ]
        .into();
        let r = Registered::read(&tests);
        let bad = r.unworkable(&plan, cfg.plan("erp-db").unwrap());
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].path, "plans.erp-db.instances.dc2[0].capability");
        assert_eq!(bad[0].site.as_deref(), Some("dc2"));
        assert_eq!(bad[0].reason, "role ReadOnly");
        assert!(
            bad[0]
                .to_string()
                .contains("bound to a capability that cannot work"),
            "{}",
            bad[0]
        );
        assert_eq!(
            r.identity(&ControllerId::new("bmc-dc2").unwrap()),
            Some("redfish-service:x")
        );
        // An unreadable record is untested: nothing failed, nothing pinned.
        assert_eq!(r.failed("pve-dc1").count(), 0);
        assert_eq!(r.identities().len(), 1);
    }

    #[test]
    fn the_cache_decodes_again_only_when_a_record_changed() {
        let cache = RegisteredCache::default();
        let id = ControllerId::new("bmc-dc1").unwrap();
        let failed = json!([{"capability": "power.off", "grade": "failed", "detail": "no"}]);
        let mut tests: BTreeMap<ControllerId, ControllerTestRecord> =
            [(id.clone(), record(1, failed, None))].into();
        let first = cache.get(&tests);
        assert!(Arc::ptr_eq(&first, &cache.get(&tests)));
        tests.insert(id, record(2, json!([]), None));
        let second = cache.get(&tests);
        assert_eq!(second.failed("bmc-dc1").count(), 0);
        assert_eq!(first.failed("bmc-dc1").count(), 1);
    }
}
