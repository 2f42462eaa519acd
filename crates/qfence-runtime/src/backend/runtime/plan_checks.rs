//! What a plan created or changed through the API (or the console, which calls the same
//! backend) must pass beyond validation: registration's findings hold.
//!
//! - No binding to a capability its controller's latest test graded failed: 409
//!   `capability_failed`, an issue on each such binding's `capability` field with the grade's
//!   reason. Checked at create, stage and apply (a test may have failed it since staging).
//! - Every binding passes its driver's read-only `check_binding` (is VM 101 on the node the
//!   binding names, does the replication job exist), asked of an orchestrator allowed to call
//!   the controller, all bindings at once: a problem is 409 `binding_check_failed` with an
//!   issue on the binding; a check that could not be made (the controller did not answer) is
//!   a warning on the binding, kept with the plan, and does not block: the pre-fence check
//!   makes the same check again before every fence.

use qfence_call::Answer;
use qfence_model::config::{Binding, Issue, PlanConfig, Severity};
use qfence_model::{PlanId, SiteId};

use super::{REGISTRATION_TIMEOUT, RuntimeBackend};
use crate::backend::{BackendError, CheckedPlan};

fn issue(path: String, message: String, severity: Severity) -> Issue {
    Issue {
        path,
        message,
        severity,
        line: None,
    }
}

impl RuntimeBackend {
    /// `plan` as the API takes it: no failed capability bound, every binding checked, the
    /// checks that could not be made added to its warnings.
    pub(super) async fn checked_against_registration(
        &self,
        mut plan: CheckedPlan,
    ) -> Result<CheckedPlan, BackendError> {
        self.refuse_failed_capabilities(&plan.name, &plan.config)?;
        let unchecked = self.check_bindings(&plan.name, &plan.config).await?;
        plan.warnings.extend(unchecked);
        Ok(plan)
    }

    /// Refuses `plan` when a binding of it names a capability graded failed.
    pub(super) fn refuse_failed_capabilities(
        &self,
        name: &PlanId,
        plan: &PlanConfig,
    ) -> Result<(), BackendError> {
        self.inner.registered().refuse_unworkable(name, plan)
    }

    /// Runs every binding's `check_binding`; refuses the plan on a problem, and returns a
    /// warning for each check that could not be made.
    pub(super) async fn check_bindings(
        &self,
        name: &PlanId,
        plan: &PlanConfig,
    ) -> Result<Vec<Issue>, BackendError> {
        let mut all: Vec<(String, SiteId, &Binding)> = Vec::new();
        for (site, list) in &plan.instances {
            for (i, b) in list.iter().enumerate() {
                all.push((
                    format!("plans.{name}.instances.{site}[{i}]"),
                    site.clone(),
                    b,
                ));
            }
        }
        for (i, b) in plan.service.iter().enumerate() {
            all.push((format!("plans.{name}.service[{i}]"), plan.owner.clone(), b));
        }
        let cfg = self.cfg();
        let checks = all.into_iter().map(|(path, site, b)| {
            let cfg = cfg.clone();
            async move {
                let Some(controller) = cfg.controller(b.controller.as_str()) else {
                    // Validation names the controller; nothing to ask here.
                    return (path, b, Ok(Vec::new()));
                };
                let call = qfence_call::Call::check_binding(b, site, REGISTRATION_TIMEOUT);
                // Plans are written on the leader only, so the check goes through the
                // cluster; a leader deposed meanwhile does not ask its own drivers.
                let answer = self
                    .route_call(&b.controller, controller, call, "binding check", || async {
                        Err::<Answer, _>(
                            "this orchestrator no longer leads; binding checks go through the leader"
                                .to_owned(),
                        )
                    })
                    .await
                    .and_then(|(answer, _)| match answer {
                        Answer::Problems(problems) => Ok(problems),
                        other => Err(BackendError::Unavailable(format!(
                            "the answer was {}, not the binding's problems",
                            other.kind()
                        ))),
                    });
                (path, b, answer)
            }
        });
        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        for (path, b, answer) in futures_util::future::join_all(checks).await {
            let what = format!("{} {} {}", b.controller, b.capability, b.resource);
            match answer {
                Ok(found) => problems.extend(found.into_iter().map(|p| {
                    issue(
                        format!("{path}.resource"),
                        format!("{what}: {p}"),
                        Severity::Error,
                    )
                })),
                Err(e) => warnings.push(issue(
                    path,
                    format!(
                        "{what}: not checked, the controller could not be asked ({e}); every \
                         fence checks it again first"
                    ),
                    Severity::Warning,
                )),
            }
        }
        if problems.is_empty() {
            return Ok(warnings);
        }
        Err(BackendError::BindingCheckFailed {
            message: format!(
                "plan {name}: {} binding check{} failed; nothing was changed",
                problems.len(),
                if problems.len() == 1 { "" } else { "s" }
            ),
            issues: problems,
        })
    }
}
