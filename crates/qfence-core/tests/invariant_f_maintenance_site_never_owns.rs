//! Safety invariant (f): A site in maintenance never becomes owner, nor the target of a move;
//! the owner is never in maintenance.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation, in which operators take sites in
//! and out of maintenance at random, and checks this invariant after every step.
//! `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::MaintenanceNeverOwns, sim::DEFAULT_SCHEDULES);
}
