//! qfence's controllers: the drivers that act on real systems, and what they need to do it
//! safely (secrets, TLS trust, deadlines).
//!
//! The model, before the API: a *controller* is one system qfence acts through (a BMC, a
//! Proxmox VE cluster, a FortiGate). Its *driver* offers the capabilities the static catalog
//! (`qfence_model::catalog`) lists for its type. A capability has a *condition* that can be
//! read back (the host is off, the VM runs, the VIP points at dc2), and qfence only ever
//! believes the read-back: [`Driver::perform`] returns once a read shows the condition holds,
//! and [`Driver::check`] reads it again whenever asked. A fence check maps onto a verdict:
//! the condition holds → FENCED, it does not → FAILED, the read failed → UNKNOWN.
//!
//! A driver is built without I/O from a controller's configuration and its secret, resolved
//! by this orchestrator from its own stores ([`secrets`]); HTTPS drivers share one client
//! setup ([`http`]) with per-controller TLS trust ([`tls`]). [`AnyDriver`] builds the right
//! driver for a configuration, and [`registration`] runs the four registration steps.
//!
//! The contract every driver keeps is written in `docs/specs/controller.md` and enforced by
//! one compliance suite (`tests/it/compliance.rs`).

pub mod any;
pub mod docker;
pub mod driver;
pub mod error;
pub mod fence_agent;
pub mod fortigate;
pub mod http;
pub mod ipmi;
pub mod nova;
pub mod postgres;
pub mod proxmox;
pub mod redfish;
pub mod registration;
pub mod secrets;
pub mod tls;

pub use any::AnyDriver;
pub use driver::{
    CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity, Probe,
    Reading, Target,
};
pub use error::Error;
pub use secrets::{Secret, SecretSource, SecretStore};
