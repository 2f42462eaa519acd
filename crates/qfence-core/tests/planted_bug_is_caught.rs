//! The invariants can fail: a copy of the rules with a deliberate bug (an UNKNOWN reading
//! counted as FENCED, a target in maintenance, and one per defect of issue 12: a dead-man
//! switch kept armed, an arm or renewal acted on after its deadline, an abort after the
//! switchover, a service never kept; and a switchover that trusts its resource fences without
//! their read-back) is run through the same simulation, and the checker must catch it within
//! a bounded number of schedules.

mod sim;

use qfence_core::Rules;
use qfence_core::rules::Mutation;

#[test]
fn unknown_counted_as_fenced_is_caught_by_the_simulation() {
    let planted = Rules {
        mutation: Mutation::UnknownIsFenced,
    };
    let caught = (0..500u64).find_map(|i| {
        sim::run_schedule(
            0xF000_0000 + i,
            planted,
            &sim::Invariant::ALL,
            sim::STEPS,
            false,
        )
        .err()
    });
    let v = caught.expect("500 schedules with UNKNOWN counted as FENCED broke no invariant");
    eprintln!(
        "caught: {}",
        sim::report(&v).lines().next().unwrap_or_default()
    );
    assert!(
        matches!(
            v.invariant,
            sim::Invariant::FencedBeforePromote
                | sim::Invariant::UnknownIsNotProof
                | sim::Invariant::NoUnfenceAtNonOwner
        ),
        "caught by an unexpected invariant: {}",
        v.invariant.name()
    );
}

#[test]
fn the_real_rules_pass_the_same_schedules() {
    // The same seeds with the real rules: what caught the bug was the bug, not the schedules.
    for i in 0..100u64 {
        if let Err(v) = sim::run_schedule(
            0xF000_0000 + i,
            Rules::default(),
            &sim::Invariant::ALL,
            sim::STEPS,
            false,
        ) {
            panic!("{}", sim::report(&v));
        }
    }
}

#[test]
fn a_failover_target_chosen_without_regard_to_maintenance_is_caught_by_the_simulation() {
    let planted = Rules {
        mutation: Mutation::MaintenanceIgnored,
    };
    let caught = (0..2000u64).find_map(|i| {
        sim::run_schedule(
            0x1F00_0000 + i,
            planted,
            &[sim::Invariant::MaintenanceNeverOwns],
            sim::STEPS,
            false,
        )
        .err()
    });
    let v = caught.expect("2000 schedules choosing sites in maintenance broke no invariant");
    eprintln!(
        "caught: {}",
        sim::report(&v).lines().next().unwrap_or_default()
    );
    assert_eq!(v.invariant, sim::Invariant::MaintenanceNeverOwns);
}

/// The first of `n` schedules from `base` in which `mutation` breaks `invariant`, with how
/// many schedules it took.
fn first_caught(
    mutation: Mutation,
    invariant: sim::Invariant,
    base: u64,
    n: u64,
) -> (u64, sim::Violation) {
    let planted = Rules { mutation };
    let (i, v) = (0..n)
        .find_map(|i| {
            sim::run_schedule(base + i, planted, &[invariant], sim::STEPS, false)
                .err()
                .map(|v| (i, v))
        })
        .unwrap_or_else(|| {
            panic!(
                "{n} schedules with {mutation:?} broke no {}",
                invariant.name()
            )
        });
    eprintln!(
        "{mutation:?} caught by {} after {} schedules: {}",
        invariant.name(),
        i + 1,
        sim::report(&v).lines().next().unwrap_or_default()
    );
    assert_eq!(v.invariant, invariant);
    (i + 1, v)
}

#[test]
fn a_dead_man_switch_kept_armed_after_a_failed_renewal_is_caught_by_the_world() {
    first_caught(
        Mutation::DeadManArmedSticky,
        sim::Invariant::DeadManFired,
        0x3A00_0000,
        3000,
    );
}

#[test]
fn an_arm_or_renewal_acted_on_after_its_deadline_is_caught_by_the_world() {
    first_caught(
        Mutation::ActsAfterNotAfter,
        sim::Invariant::DeadManFired,
        0x3B00_0000,
        12000,
    );
}

#[test]
fn an_abort_accepted_after_the_switchover_is_caught_by_the_world() {
    first_caught(
        Mutation::AbortAfterSwitchover,
        sim::Invariant::OneCopyReachable,
        0x3C00_0000,
        3000,
    );
}

#[test]
fn a_service_applied_once_and_never_kept_is_caught_by_the_world() {
    first_caught(
        Mutation::ServiceNotKept,
        sim::Invariant::VipAtOwner,
        0x3D00_0000,
        3000,
    );
}

#[test]
fn a_switchover_that_trusts_the_stop_without_its_read_back_is_caught() {
    first_caught(
        Mutation::SwitchoverTrustsTheStop,
        sim::Invariant::SwitchoverStopsResource,
        0x3E00_0000,
        3000,
    );
}

#[test]
fn a_failover_that_counts_a_hot_standby_reading_as_a_fence_is_caught() {
    first_caught(
        Mutation::HotStandbyIsAFence,
        sim::Invariant::HotStandbyIsNotAFence,
        0x3F00_0000,
        3000,
    );
}
