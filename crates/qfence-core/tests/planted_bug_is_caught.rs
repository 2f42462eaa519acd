//! The invariants can fail: a copy of the rules with a deliberate bug (an UNKNOWN reading
//! counted as FENCED) is run through the same simulation, and the checker must catch it.

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
