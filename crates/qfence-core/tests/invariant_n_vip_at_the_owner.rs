//! World invariant (n): after a completed move, and for as long as the plan stays steady, the
//! VIP points at the owner, or is pointed back within two intervals (plus one check's and one
//! re-apply's latency) of the last thing that could have kept it away.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks the simulated world
//! after every step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED`
//! replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::VipAtOwner, sim::DEFAULT_SCHEDULES);
}
