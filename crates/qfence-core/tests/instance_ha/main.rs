//! Instance HA's decision core: scenario tests for each of the twelve steps and each gate,
//! against an imagined cloud (`world.rs`), and the seeded simulation with its named safety
//! invariants (`sim.rs`, `docs/specs/instance-ha.md`). One test binary.

mod scenarios;

mod world;
