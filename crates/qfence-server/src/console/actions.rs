//! The operator actions on a plan, as one closed list with their words: what the actions form
//! posts (`op`), what a refused role is told, what the confirmation step asks and warns of,
//! which fields each needs, its dry run, and the backend call that performs it.

use qfence_model::{PlanId, SiteId};

use qfence_runtime::auth::Caller;
use qfence_runtime::backend::{Backend, BackendError};
use qfence_runtime::dto::{
    ConfirmFencedRequest, DryRun, FailoverRequest, MaintenanceRequest, OperationAccepted,
    PauseRequest, SwitchoverRequest,
};

/// An operator action on a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlanAction {
    Switchover,
    Failover,
    ConfirmFenced,
    Pause,
    Resume,
    Maintenance,
}

/// What the confirmation step says about an action: the question, the button, the warning.
pub(super) struct Wording {
    /// What is asked, in words: "Switch erp-db over to dc2".
    pub question: String,
    /// The confirm button's text.
    pub button: String,
    /// What the operator takes on by confirming, when it is more than the dry run shows.
    pub warning: Option<String>,
}

impl PlanAction {
    pub const ALL: [PlanAction; 6] = [
        PlanAction::Switchover,
        PlanAction::Failover,
        PlanAction::ConfirmFenced,
        PlanAction::Pause,
        PlanAction::Resume,
        PlanAction::Maintenance,
    ];

    /// The form's `op` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanAction::Switchover => "switchover",
            PlanAction::Failover => "failover",
            PlanAction::ConfirmFenced => "confirm_fenced",
            PlanAction::Pause => "pause",
            PlanAction::Resume => "resume",
            PlanAction::Maintenance => "maintenance",
        }
    }

    /// The action a form's `op` names, or the sentence that refuses it.
    pub fn parse(op: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == op)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|a| a.as_str()).collect();
                format!("{op:?} is not an action: {}", names.join(", "))
            })
    }

    /// What a role that may not do it is told it may not do: "switch over".
    pub fn label(self) -> &'static str {
        match self {
            PlanAction::Switchover => "switch over",
            PlanAction::Failover => "fail over",
            PlanAction::ConfirmFenced => "confirm a site fenced",
            PlanAction::Pause => "pause automatic actions",
            PlanAction::Resume => "resume automatic actions",
            PlanAction::Maintenance => "take a site in or out of maintenance",
        }
    }

    /// Whether the confirmation shows the site (pause and resume are for the whole plan).
    pub fn takes_site(self) -> bool {
        !matches!(self, PlanAction::Pause | PlanAction::Resume)
    }

    /// Whether an empty site is allowed (a failover picks one by priority).
    pub fn site_optional(self) -> bool {
        matches!(
            self,
            PlanAction::Failover | PlanAction::Pause | PlanAction::Resume
        )
    }

    /// Whether it takes `enabled` (on or off).
    pub fn takes_enabled(self) -> bool {
        self == PlanAction::Maintenance
    }

    /// Whether its confirm button is drawn as dangerous.
    pub fn danger(self) -> bool {
        !matches!(self, PlanAction::Switchover | PlanAction::Resume)
    }

    /// The confirmation step's words, for `plan`, the `site` typed and `enabled` (`on`/`off`).
    pub fn wording(self, plan: &str, site: &str, enabled: &str) -> Wording {
        let (question, button, warning) = match self {
            PlanAction::Switchover => (
                format!("Switch {plan} over to {site}"),
                format!("Switch over to {site}"),
                None,
            ),
            PlanAction::Failover => (
                if site.is_empty() {
                    format!("Fail {plan} over (to the site its priority picks)")
                } else {
                    format!("Fail {plan} over to {site}")
                },
                "Fail over".to_owned(),
                Some(format!(
                    "A failover fences {plan}'s copy first, whatever its health: use it when the \
                     owner is lost or must go now; a switchover is the planned move."
                )),
            ),
            PlanAction::Pause => (
                format!("Pause automatic actions on {plan}"),
                "Pause".to_owned(),
                Some(format!(
                    "While {plan} is paused, qfence keeps checking and reporting but starts no \
                     failover, recovery or fence on its own; operators still can."
                )),
            ),
            PlanAction::Resume => (
                format!("Resume automatic actions on {plan}"),
                "Resume".to_owned(),
                Some(format!(
                    "qfence acts on {plan} on its own again, from the next cycle: a failover \
                     that is due starts."
                )),
            ),
            PlanAction::Maintenance if enabled == "off" => (
                format!("Take {site} of {plan} out of maintenance"),
                "Leave maintenance".to_owned(),
                Some(format!(
                    "qfence may fail {plan} over to {site} again, and alarms about its health."
                )),
            ),
            PlanAction::Maintenance => (
                format!("Take {site} of {plan} into maintenance"),
                "Enter maintenance".to_owned(),
                Some(format!(
                    "While {site} is in maintenance, qfence neither fails {plan} over to it nor \
                     alarms about its health; its fences are still checked."
                )),
            ),
            PlanAction::ConfirmFenced => (
                format!("Confirm that {site} of {plan} is stopped (no fence can show it)"),
                format!("Confirm {site} stopped"),
                Some(format!(
                    "qfence will count {site} as FENCED on your word, with your reason in the \
                     event log. If its copy of {plan} still runs, two sites may serve it."
                )),
            ),
        };
        Wording {
            question,
            button,
            warning,
        }
    }

    /// What the confirmation step's dry run asks, if the action has one.
    pub fn dry_run(self, site: &str, target: Option<&SiteId>) -> Option<DryRun> {
        match self {
            PlanAction::Switchover => Some(DryRun::Switchover {
                target: site.to_owned(),
            }),
            PlanAction::Failover => Some(DryRun::Failover {
                target: target.map(|s| s.as_str().to_owned()),
            }),
            _ => None,
        }
    }
}

/// A confirmed action, its fields checked.
pub(super) struct Confirmed<'a> {
    pub caller: &'a Caller,
    pub plan: &'a PlanId,
    /// The site; `None` only where [`PlanAction::site_optional`].
    pub site: Option<SiteId>,
    pub expected_generation: u64,
    pub reason: Option<String>,
    /// With maintenance: into it (`true`) or out of it.
    pub enabled: bool,
}

impl PlanAction {
    /// Asks the backend to do it.
    pub async fn perform(
        self,
        backend: &dyn Backend,
        c: Confirmed<'_>,
    ) -> Result<OperationAccepted, BackendError> {
        let (caller, id, generation, reason) = (c.caller, c.plan, c.expected_generation, c.reason);
        match (self, c.site) {
            (PlanAction::Switchover, Some(site)) => {
                let req = SwitchoverRequest {
                    target: site.as_str().to_owned(),
                    expected_generation: generation,
                    reason,
                };
                backend.switchover(caller, id, &req).await
            }
            (PlanAction::Failover, target) => {
                let req = FailoverRequest {
                    target: target.map(|t| t.as_str().to_owned()),
                    expected_generation: generation,
                    reason,
                };
                backend.failover(caller, id, &req).await
            }
            (PlanAction::ConfirmFenced, Some(site)) => {
                let req = ConfirmFencedRequest {
                    expected_generation: generation,
                    reason: reason.unwrap_or_default(),
                };
                backend.confirm_fenced(caller, id, &site, &req).await
            }
            (PlanAction::Maintenance, Some(site)) => {
                let req = MaintenanceRequest {
                    enabled: c.enabled,
                    expected_generation: generation,
                    reason,
                };
                backend.set_maintenance(caller, id, &site, &req).await
            }
            (PlanAction::Pause, _) => backend.pause(caller, id, &PauseRequest { reason }).await,
            (PlanAction::Resume, _) => backend.resume(caller, id, &PauseRequest { reason }).await,
            // The site was checked for every action that needs one.
            (
                PlanAction::Switchover | PlanAction::ConfirmFenced | PlanAction::Maintenance,
                None,
            ) => Err(BackendError::Invalid {
                message: "pick a site".into(),
                issues: vec![],
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_from_its_form_value() {
        for a in PlanAction::ALL {
            assert_eq!(PlanAction::parse(a.as_str()), Ok(a));
        }
        let e = PlanAction::parse("explode").unwrap_err();
        assert!(
            e.contains("switchover, failover, confirm_fenced, pause, resume, maintenance"),
            "{e}"
        );
    }
}
