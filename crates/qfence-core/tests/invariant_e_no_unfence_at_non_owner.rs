//! Safety invariant (e): No unfence except at the site being promoted, once every other site is
//! proven fenced; a returning site is never unfenced.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after every
//! step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::NoUnfenceAtNonOwner, sim::DEFAULT_SCHEDULES);
}
