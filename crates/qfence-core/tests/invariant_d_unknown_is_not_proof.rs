//! Safety invariant (d): UNKNOWN is never used as proof: no commit and no recorded evidence without
//! a fresh FENCED read-back, a real operator confirmation or a switch that really fired.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after every
//! step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::UnknownIsNotProof, sim::DEFAULT_SCHEDULES);
}
