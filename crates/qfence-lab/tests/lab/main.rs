//! The lab simulators, driven over HTTPS by a plain reqwest client, as a driver would.
//!
//! One integration-test binary; each module tells one simulator's story. `fidelity` compares
//! the simulators with the independent emulators (sushy-tools, fakepve, fence-agents) and drives
//! the FortiOS simulator with fortiosapi.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod common;
// The controller tests' emulator starter, shared rather than copied.
#[path = "../../../qfence-controllers/tests/it/emulators.rs"]
mod emulators;
mod faults;
mod fidelity;
mod power;
mod proxmox;
mod proxmox_reads;
mod redfish;
