//! World invariant (m): never two sites running a primary copy of the resource (not stopped)
//! while clients can reach either: through the VIP, or directly when the plan has none.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks the simulated world
//! after every step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED`
//! replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::OneCopyReachable, sim::DEFAULT_SCHEDULES);
}
