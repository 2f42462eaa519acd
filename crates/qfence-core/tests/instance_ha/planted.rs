//! The invariants can fail: for each one, a copy of the core with a deliberate bug (a hidden
//! `Mutation`) runs through the same simulation, and the checker must catch it within a
//! bounded number of schedules; the same schedules pass with the real rules.

use qfence_core::instance_ha::{Mutation, Rules};

use crate::check::Invariant;
use crate::sim::{STEPS, catch, report, run_schedule};

/// Each planted bug, the invariant that must catch it, and within how many schedules.
const PLANTED: [(Mutation, Invariant, u64); 6] = [
    (
        Mutation::UnknownFenceIsProof,
        Invariant::EvacuateOnlyFenced,
        200,
    ),
    (Mutation::RefenceOnResume, Invariant::FencedOnce, 300),
    (Mutation::CapPerDecision, Invariant::CapPerCycle, 200),
    (
        Mutation::ThresholdForgetsEarlierFailures,
        Invariant::GatesHold,
        300,
    ),
    (
        Mutation::ForceEnableAfterSmartFailure,
        Invariant::EnableAfterEvacuation,
        300,
    ),
    (Mutation::LeaseIgnored, Invariant::CurrentTermOnly, 100),
];

const BASE: u64 = 0x9A47_0000;

fn caught(mutation: Mutation) {
    let (m, invariant, within) = PLANTED.iter().find(|p| p.0 == mutation).copied().unwrap();
    let Some((n, v)) = catch(m, invariant, BASE, within) else {
        panic!("{m:?}: {within} schedules broke no {}", invariant.name());
    };
    eprintln!(
        "{m:?} caught by {} in schedule {n} of {within}: {}",
        invariant.name(),
        report(&v).lines().next().unwrap_or_default()
    );
    // What caught it was the bug, not the schedule.
    if let Err(v) = run_schedule(v.seed, Rules::default(), &Invariant::ALL, STEPS, false) {
        panic!("the real rules fail the same schedule: {}", report(&v));
    }
}

#[test]
fn planted_unknown_fence_reading_taken_for_proof_is_caught() {
    caught(Mutation::UnknownFenceIsProof);
}

#[test]
fn planted_refence_on_resume_is_caught() {
    caught(Mutation::RefenceOnResume);
}

#[test]
fn planted_cap_counted_per_decision_is_caught() {
    caught(Mutation::CapPerDecision);
}

#[test]
fn planted_threshold_forgetting_earlier_failures_is_caught() {
    caught(Mutation::ThresholdForgetsEarlierFailures);
}

#[test]
fn planted_force_enable_after_a_smart_failure_is_caught() {
    caught(Mutation::ForceEnableAfterSmartFailure);
}

#[test]
fn planted_lease_ignored_is_caught() {
    caught(Mutation::LeaseIgnored);
}
