//! The qfence domain model: what a plan, a site, a controller and a binding are, which
//! capabilities each controller type offers, and the configuration file that names them.
//!
//! Nothing here does I/O (but for [`config::load_file`] reading the configuration's text, and
//! [`time::now_unix_ms`] reading the wall clock). The crate is shared by the pure decision core,
//! the drivers, the cluster, the server and the lab, so every one of them speaks about the same
//! things in the same words.
//!
//! - [`ids`]: validated names (`SiteId`, `PlanId`, ...) and the counters `Generation` and `Term`.
//! - [`domain`]: roles, fence levels, verdicts and grades.
//! - [`catalog`]: the static capability catalog, per controller type.
//! - [`time`]: Unix milliseconds and UTC dates, the one place qfence converts wall-clock time.
//! - [`config`]: the configuration types, as the rest of qfence sees them once validated, and
//!   their loading: parse, validate, every issue at once with its path; [`config::keys`] lists
//!   every key the file may have, for the loader, the console's forms and the fuzzer.

pub mod catalog;
pub mod config;
pub mod domain;
pub mod ids;
pub mod time;

pub use catalog::{CapabilitySpec, ControllerType, ResourceKind};
pub use domain::{AgentAlgorithm, FenceLevel, Grade, Role, Verdict};
pub use ids::{BindingId, CloudId, ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
