//! The invariants can fail: for each one, a copy of the core with a deliberate bug (a hidden
//! `Mutation`) runs through the same simulation, and the checker must catch it within a
//! bounded number of schedules; the same schedules pass with the real rules.

use qfence_core::maintenance::{Mutation, Rules};

use crate::check::Invariant;
use crate::sim::{STEPS, catch, report, run_schedule};

/// Each planted bug, the invariant that must catch it, and within how many schedules.
const PLANTED: [(Mutation, Invariant, u64); 6] = [
    (
        Mutation::OrphanCheckSkipped,
        Invariant::ControllerHasUpCaller,
        300,
    ),
    (Mutation::AvoidListIgnored, Invariant::AgentHasTarget, 300),
    (Mutation::SecondPreparation, Invariant::OnePreparing, 100),
    (
        Mutation::MaintenanceBeforeHandover,
        Invariant::HandoverBeforeMaintenance,
        300,
    ),
    (Mutation::JobsIgnored, Invariant::NoJobCut, 300),
    (
        Mutation::ReadOnlyAfterDrain,
        Invariant::ReadOnlyThroughout,
        100,
    ),
];

const BASE: u64 = 0x9B17_0000;

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
fn planted_skipped_controller_check_is_caught() {
    caught(Mutation::OrphanCheckSkipped);
}

#[test]
fn planted_ignored_avoid_list_is_caught() {
    caught(Mutation::AvoidListIgnored);
}

#[test]
fn planted_second_preparation_is_caught() {
    caught(Mutation::SecondPreparation);
}

#[test]
fn planted_maintenance_before_handover_is_caught() {
    caught(Mutation::MaintenanceBeforeHandover);
}

#[test]
fn planted_jobs_ignored_is_caught() {
    caught(Mutation::JobsIgnored);
}

#[test]
fn planted_late_read_only_is_caught() {
    caught(Mutation::ReadOnlyAfterDrain);
}
