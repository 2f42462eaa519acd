//! Safety invariant (a): No switchover or service command at a site unless every other site is
//! FENCED, or operator-confirmed, at that generation; service only to the committed owner.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after every
//! step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::FencedBeforePromote, sim::DEFAULT_SCHEDULES);
}
