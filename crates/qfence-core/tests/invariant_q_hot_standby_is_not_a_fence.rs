//! Safety invariant (q): In a plan whose standbys are hot, a failover commits only with every
//! site it gives up proven stopped by its required fences or evidence; a standby reading (in
//! recovery, not writable, following the owner) never counts.
//!
//! See `docs/specs/invariants.md`. Runs the seeded simulation and checks this invariant after
//! every step. `QFENCE_SIM_SCHEDULES` sets the number of schedules, `QFENCE_SIM_SEED` replays
//! one.

mod sim;

#[test]
fn holds_over_random_schedules() {
    sim::run_invariant(
        sim::Invariant::HotStandbyIsNotAFence,
        sim::DEFAULT_SCHEDULES,
    );
}
