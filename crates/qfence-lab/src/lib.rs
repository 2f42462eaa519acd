//! qfence-lab: simulators that speak the real protocols, for the demo lab and for fault tests.
//!
//! Each simulator is an HTTPS server modelled on the public API documents of the system it
//! stands for, so that qfence's real drivers work against it unchanged. Every simulator has
//! the same shape: `start(bind address, TLS identity, initial state) -> Handle`, and the
//! handle exposes the bound address, the certificate's SHA-256 fingerprint (for pinning),
//! the live state (snapshot and update, for tests and for `qfence lab fail|heal`), the
//! fault switches, and a graceful shutdown.
//!
//! - [`redfish`]: a BMC (Redfish): systems, power with a realistic delay, sessions, roles.
//! - [`proxmox`]: a Proxmox VE cluster API: nodes, VMs, UPID tasks, replication, ACLs.
//! - [`faults`]: the protocol-independent faults (unreachable, wrong certificate, latency,
//!   5xx storms) every simulator shares.
//! - [`tls`]: self-signed identities and the server loop.
//!
//! A BMC's host power is wired to a Proxmox node with [`redfish::BmcHandle::power_line`]
//! and [`proxmox::PveHandle::attach_power`]: powering the host off takes the node offline.
//! Endpoints, state and faults are documented in `docs/specs/lab-simulators.md`.

pub mod faults;
pub mod proxmox;
pub mod redfish;
pub mod tls;

pub use tls::{LabError, TlsIdentity};
