//! The operator actions on a plan, as one closed list with their words: what the actions form
//! posts (`op`), what a refused role is told, what the confirmation step asks and warns of,
//! which fields each needs, its dry run, which ones the plan's state offers now, and the
//! backend call that performs it.

use qfence_model::{PlanId, SiteId};

use qfence_runtime::auth::Caller;
use qfence_runtime::backend::{Backend, BackendError};
use qfence_runtime::dto::{
    ConfirmFencedRequest, DryRun, FailoverRequest, MaintenanceRequest, OperationAccepted,
    PauseRequest, PlanStatus, SwitchoverRequest,
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

/// Whether the plan's state offers an action now, and with which sites: what the page's
/// action area draws, at its first render and each time the live stream renders it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Offer {
    pub action: PlanAction,
    /// The sites its form lists (empty for pause and resume).
    pub sites: Vec<String>,
    /// Why it is not offered now, when it is not: its form is left out and this is shown.
    pub why_not: Option<String>,
}

impl Offer {
    pub fn offered(&self) -> bool {
        self.why_not.is_none()
    }

    /// Why it is not offered ("" when it is).
    pub fn unavailable(&self) -> &str {
        self.why_not.as_deref().unwrap_or_default()
    }
}

impl PlanAction {
    /// What the plan's status offers of this action, by the rules the core applies to the
    /// intent (`qfence-core/src/decide/intents.rs`), so a form is drawn only where the intent
    /// would be taken; the core still decides, and refuses what moved on meanwhile. `None`:
    /// not drawn at all (pause while paused, resume while not).
    pub fn offer(self, st: &PlanStatus) -> Option<Offer> {
        let steady = st.phase == "steady";
        let standbys = || st.sites.iter().filter(|s| s.site != st.owner);
        let offer = |sites: Vec<String>, why_not: Option<String>| {
            Some(Offer {
                action: self,
                sites,
                why_not,
            })
        };
        match self {
            PlanAction::Switchover | PlanAction::Failover => {
                // The core refuses a move while one is under way, while paused, and to a
                // site in maintenance.
                let targets: Vec<String> = standbys()
                    .filter(|s| !s.maintenance)
                    .map(|s| s.site.clone())
                    .collect();
                let why_not = if !steady {
                    Some(format!("a move is under way ({})", st.phase))
                } else if st.paused {
                    Some("the plan is paused: resume it first".to_owned())
                } else if targets.is_empty() {
                    Some("every other site is in maintenance".to_owned())
                } else {
                    None
                };
                offer(targets, why_not)
            }
            PlanAction::ConfirmFenced => {
                // The core takes any site but the one the plan keeps: the owner when steady,
                // the target during a move. The owner is the site a move gives up (it changes
                // only at the commit), so it is the one to vouch for then.
                let sites = if steady {
                    standbys().map(|s| s.site.clone()).collect()
                } else {
                    vec![st.owner.clone()]
                };
                offer(sites, None)
            }
            // The owner is refused (switch over first); a standby may go in or out.
            PlanAction::Maintenance => offer(standbys().map(|s| s.site.clone()).collect(), None),
            PlanAction::Pause if st.paused => None,
            PlanAction::Resume if !st.paused => None,
            PlanAction::Pause | PlanAction::Resume => offer(vec![], None),
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
    use qfence_runtime::dto::{SiteRole, SiteStatus, VerdictDto};

    fn status(owner: &str, phase: &str, paused: bool) -> PlanStatus {
        let site = |name: &str| SiteStatus {
            site: name.into(),
            role: if name == owner {
                SiteRole::Owner
            } else {
                SiteRole::Standby
            },
            verdict: VerdictDto::Fenced,
            checked_at_ms: None,
            posture: None,
            maintenance: false,
        };
        PlanStatus {
            plan: "erp-db".into(),
            owner: owner.into(),
            generation: 1,
            paused,
            phase: phase.into(),
            halted: None,
            last_reason: String::new(),
            sites: vec![site("dc1"), site("dc2"), site("dc3")],
            unworkable: vec![],
        }
    }

    fn offer(a: PlanAction, st: &PlanStatus) -> Offer {
        a.offer(st).expect("drawn")
    }

    #[test]
    fn a_steady_plan_offers_moves_to_its_standbys_out_of_maintenance() {
        let mut st = status("dc1", "steady", false);
        st.sites[2].maintenance = true;
        let sw = offer(PlanAction::Switchover, &st);
        assert!(sw.offered());
        assert_eq!(
            sw.sites,
            ["dc2"],
            "not the owner, not a site in maintenance"
        );
        assert_eq!(offer(PlanAction::Failover, &st).sites, ["dc2"]);
        assert_eq!(offer(PlanAction::ConfirmFenced, &st).sites, ["dc2", "dc3"]);
        assert_eq!(offer(PlanAction::Maintenance, &st).sites, ["dc2", "dc3"]);
        assert!(PlanAction::Pause.offer(&st).is_some());
        assert!(PlanAction::Resume.offer(&st).is_none());
    }

    #[test]
    fn a_move_under_way_offers_no_other_move_and_the_owner_to_confirm_fenced() {
        let st = status("dc1", "fences to dc2 halted: dc1 not proven fenced", false);
        for a in [PlanAction::Switchover, PlanAction::Failover] {
            let o = offer(a, &st);
            assert!(!o.offered());
            assert!(
                o.why_not
                    .unwrap()
                    .contains("a move is under way (fences to dc2")
            );
        }
        // The halted failover waits for dc1, the site it gives up, to be vouched for.
        assert_eq!(offer(PlanAction::ConfirmFenced, &st).sites, ["dc1"]);
    }

    #[test]
    fn a_paused_plan_offers_resume_and_no_move() {
        let st = status("dc1", "steady", true);
        let why = offer(PlanAction::Switchover, &st).why_not;
        assert_eq!(why.as_deref(), Some("the plan is paused: resume it first"));
        assert!(PlanAction::Resume.offer(&st).is_some());
        assert!(PlanAction::Pause.offer(&st).is_none());
    }

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
