//! qfence-server: the runtime's outward face. For now: the HTTP API, its metrics and the
//! event log; the daemon loop that drives them comes next.
//!
//! The model: the API is a thin, strict shell around a [`backend::Backend`], the running
//! orchestrator. A call is authenticated by bearer token and role ([`auth`]) before its body
//! is read, its body is parsed strictly (unknown fields are errors) and, for plans and
//! controllers, validated with the configuration file's own validation; only then does the
//! backend decide. Writes that change a plan compare-and-set on its generation, and a stale
//! one is answered 409 with the current generation. Every failure is one [`error::ApiError`]
//! with a stable code. Everything the orchestrator does or is told to do is appended to the
//! hash-chained [`events`] log, which `qfence events verify` checks offline.
//!
//! - [`api`]: the router, its middleware and the OpenAPI document (`/openapi.json`).
//! - [`dto`]: the wire types.  [`backend`]: the trait the runtime implements.
//! - [`auth`]: the token file and roles.  [`error`]: error to status and code, in one place.
//! - [`metrics`]: the Prometheus handle the runtime calls.  [`events`]: the event log.
//! - [`tls`]: serving over HTTPS with rustls (ring).
//! - `testing` (feature `testing`): an in-memory backend double, for tests of the API and
//!   of its clients.

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
