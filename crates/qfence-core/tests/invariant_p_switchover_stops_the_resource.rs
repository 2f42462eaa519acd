//! Safety invariant (p): A planned switchover commits only with the resource proven stopped
//! at the old owner (its required fences, evidence, or its resource-level fences read back
//! holding since the switchover started), and a commit that stands on the resource-level
//! proof finds the world's copy there really stopped.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after
//! every step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays
//! one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(
        sim::Invariant::SwitchoverStopsResource,
        sim::DEFAULT_SCHEDULES,
    );
}
