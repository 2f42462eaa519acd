//! Instance HA's decision core: scenario tests for each of the twelve steps and each gate,
//! against an imagined cloud (`world.rs`), and the seeded simulation (`sim.rs`) with its named
//! safety invariants (`check.rs`, one test each in `invariants.rs`) and a planted bug for each
//! (`planted.rs`). One test binary; see `docs/specs/instance-ha.md`.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod check;
mod invariants;
mod planted;
mod recovery;
mod scenarios;
mod sim;
#[path = "../support/spread.rs"]
mod spread;
mod world;
