//! A plan's state and verdicts as the metrics' [`PlanGauges`]: what the leader exports
//! after each decision (see [`crate::metrics::live`]).

use qfence_cluster::state::SiteVerdict;
use qfence_core::{Phase, PlanState};
use qfence_model::Verdict;

use crate::dto::UnworkableBinding;
use crate::metrics::{AlarmKind, PlanGauges, SiteGauge, SiteRole};

/// The gauges of a plan at `state`, its sites judged as `sites` (the verdicts the status
/// publishes beside the same decision's sentence), with an alarm for each site that has a
/// binding in `unworkable` (bound to a capability that cannot work).
pub fn plan(
    state: &PlanState,
    sites: &[SiteVerdict],
    unworkable: &[UnworkableBinding],
) -> PlanGauges {
    let (phase, halted) = match &state.phase {
        Phase::Steady => ("steady".to_owned(), None),
        Phase::Transition(t) => (
            t.stage.as_str().replace(' ', "-"),
            t.halted.as_ref().map(|_| t.target.to_string()),
        ),
    };
    let mut alarms: Vec<(AlarmKind, String)> = state
        .alarmed
        .iter()
        .map(|s| (AlarmKind::NotFenced, s.to_string()))
        .collect();
    if state.health.alarmed {
        alarms.push((AlarmKind::FailoverHeld, state.owner.to_string()));
    }
    if let Some(target) = halted {
        alarms.push((AlarmKind::Halted, target));
    }
    // One series per site however many of its bindings cannot work.
    let mut failed: Vec<String> = unworkable
        .iter()
        .map(|u| u.site.clone().unwrap_or_else(|| "service".to_owned()))
        .collect();
    failed.sort();
    failed.dedup();
    alarms.extend(failed.into_iter().map(|s| (AlarmKind::CapabilityFailed, s)));
    PlanGauges {
        owner: state.owner.to_string(),
        generation: state.generation.0,
        phase,
        sites: sites
            .iter()
            .map(|s| SiteGauge {
                site: s.site.to_string(),
                role: if s.site == state.owner {
                    SiteRole::Owner
                } else if state.in_maintenance(&s.site) {
                    SiteRole::Maintenance
                } else {
                    SiteRole::Standby
                },
                verdict: s.verdict,
                fenced_at_ms: (s.verdict == Verdict::Fenced && s.site != state.owner)
                    .then_some(s.checked_at_ms)
                    .flatten(),
            })
            .collect(),
        alarms,
    }
}
