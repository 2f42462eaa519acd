//! The lab simulators, driven over HTTPS by a plain reqwest client, as a driver would.
//!
//! One integration-test binary; each module tells one simulator's story. `fidelity` compares
//! the simulators with the independent emulators (sushy-tools, fakepve) when they run.

mod common;
mod faults;
mod fidelity;
mod power;
mod proxmox;
mod redfish;
