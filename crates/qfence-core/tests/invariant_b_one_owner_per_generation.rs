//! Safety invariant (b): At most one owner per generation, and generations only increase; a deposed
//! leader's write is refused.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after every
//! step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(
        sim::Invariant::OneOwnerPerGeneration,
        sim::DEFAULT_SCHEDULES,
    );
}
