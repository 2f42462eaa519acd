//! Safety invariant (c): No command carries a term other than the current leader's, and nothing is
//! decided without a valid lease.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after every
//! step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::CurrentTermOnly, sim::DEFAULT_SCHEDULES);
}
