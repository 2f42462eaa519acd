//! qfence-server: the orchestrator daemon behind one binary's `qfence serve`: the HTTP API
//! and the web console over the runtime (qfence-runtime), which knows nothing of HTTP.
//!
//! - **The HTTP API** ([`api`]): a thin, strict shell around a [`qfence_runtime::Backend`],
//!   the running orchestrator. A call is authenticated by bearer token and role
//!   ([`qfence_runtime::auth`]) before its body is read, parsed strictly and, for plans and
//!   controllers, validated with the configuration file's own validation; only then does the
//!   backend decide. A stale generation is answered 409 with the current one; every failure is
//!   one [`error::ApiError`] with a stable code. The wire types are the runtime's
//!   ([`qfence_runtime::dto`]), with their OpenAPI schemas (its `openapi` feature); [`tls`]
//!   serves HTTPS with rustls (ring).
//! - **The console** ([`console`]): server-rendered pages (askama) over the same backend, with
//!   live regions fed by server-sent events and forms that validate as the file does.
//! - **The daemon** ([`daemon`]): the runtime started with the HTTPS API in front of it.
//!
//! `testing` (feature `testing`) starts the real runtime for tests of the API and of its
//! clients: the lab's simulators, a one-voter cluster in a temporary directory, the engine and
//! `RuntimeBackend` ([`testing::LabRuntime`]).

pub mod api;
pub mod console;
pub mod daemon;
pub mod error;
mod records;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use api::{ApiConfig, router};
pub use daemon::{Daemon, DaemonOptions};
pub use error::ApiError;
