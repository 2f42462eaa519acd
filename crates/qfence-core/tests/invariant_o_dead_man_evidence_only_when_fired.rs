//! World invariant (o): no evidence that a dead-man switch fired unless the world's watchdog
//! really fired (or was disarmed or re-set by a change no read-back could show yet).
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks the simulated world
//! after every step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED`
//! replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(sim::Invariant::DeadManFired, sim::DEFAULT_SCHEDULES);
}
