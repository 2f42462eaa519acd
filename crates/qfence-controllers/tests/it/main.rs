//! The controllers' integration tests: one binary, a module per subject. Drivers run against
//! independent emulators and real programs (see `emulators.rs`), and every driver runs the
//! compliance suite (`compliance.rs`).

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod compliance;
mod docker;
mod emulators;
mod faults;
mod fence_agent;
mod fortigate;
mod ipmi;
mod nova_fidelity;
mod nova_peer;
mod nova_real;
mod nova_sim;
mod postgres;
mod postgres_rejoin;
mod postgres_rejoin_failover;
mod postgres_switchover_gap;
mod proxmox;
mod proxmox_listing;
mod proxmox_replication;
mod redfish;
mod redfish_sessions;
mod registration;
mod secret_logs;
