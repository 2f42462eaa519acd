//! qfence-server: the orchestrator daemon behind one binary's `qfence serve`, in three rooms
//! that change for different reasons.
//!
//! - **The runtime** ([`runtime`]): the engine that snapshots each plan, calls the pure
//!   decision core and writes the decision's state change first (a compare-and-set on the
//!   generation); the executor that runs the commands through the drivers, locally or
//!   forwarded through the cluster, and turns results into the next snapshot's observations;
//!   the effective configuration (file plus records registered at run time); the daemon that
//!   wires it all. [`events`] is its hash-chained event log, which `qfence events verify`
//!   checks offline, and [`metrics`] its Prometheus handle.
//! - **The HTTP API** ([`api`]): a thin, strict shell around a [`backend::Backend`], the
//!   running orchestrator. A call is authenticated by bearer token and role ([`auth`]) before
//!   its body is read, parsed strictly and, for plans and controllers, validated with the
//!   configuration file's own validation; only then does the backend decide. A stale
//!   generation is answered 409 with the current one; every failure is one
//!   [`error::ApiError`] with a stable code. [`dto`] holds the wire types, [`tls`] serves HTTPS
//!   with rustls (ring).
//! - **The console** ([`console`]): server-rendered pages (askama) over the same backend, with
//!   live regions fed by server-sent events and forms that validate as the file does.
//!
//! `testing` (feature `testing`) is an in-memory backend double for tests of the API and of
//! its clients.

pub mod api;
pub mod auth;
pub mod backend;
pub mod console;
pub mod dto;
pub mod error;
pub mod events;
pub mod metrics;
pub mod runtime;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use api::{ApiConfig, router};
pub use auth::{Access, Caller, TokenStore};
pub use backend::{Backend, BackendError, CheckedController, CheckedPlan};
pub use error::ApiError;
pub use metrics::Metrics;
