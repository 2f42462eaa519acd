//! Orchestrator maintenance's decision core: scenario tests for each step, refusal, cancel,
//! timeout and resumption (`scenarios.rs`, `refusals.rs`), against a fixture cluster
//! (`fixture.rs`); the 300-agent case run to the end (`acceptance.rs`); and the seeded simulation (`sim.rs`) with its named invariants
//! (`check.rs`) and a planted bug for each (`planted.rs`). One test binary; see
//! `docs/specs/maintenance.md`.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod acceptance;
mod check;
mod fixture;
mod planted;
mod refusals;
mod scenarios;
mod sim;
