//! qfence-runtime: what turns decisions into actions and actions into the next snapshot, on
//! one orchestrator. It knows nothing of HTTP: the API and the console (qfence-server) stand
//! on its [`Backend`], and `qfence events verify` reads its event log offline.
//!
//! - [`engine`] decides each plan on every tick through the pure core and writes the state
//!   change first; [`executor`] runs the commands through [`drivers`], here or forwarded
//!   through the cluster; [`shared`] holds what the two (and the backend) share, so neither
//!   reaches into the other.
//! - [`effective`] is the effective configuration (the file plus records registered at run
//!   time); [`registered`] the controllers' latest tests.
//! - [`events`] is the hash-chained event log ([`timeline`] reads a plan's moves from it), [`metrics`] the Prometheus handle ([`gauges`]
//!   feeds it after each decision), [`systemd`] the service manager's readiness and watchdog.
//! - [`backend`] is what the API asks of the running orchestrator ([`Backend`], its errors
//!   and wire types in [`dto`], callers and roles in [`auth`]) and [`RuntimeBackend`], the
//!   runtime's answer.
//! - [`instance_ha`] runs a loop per Instance HA cloud on the leader: Nova polled through
//!   its driver, the core's decisions committed to the cluster, fences and Nova calls run.
//! - [`orchestrator`] starts it all in one call: cluster node, drivers, engine, Instance HA,
//!   event log.
//!
//! Feature `openapi` derives the wire types' OpenAPI schemas (`utoipa`) for the server's
//! document; the runtime itself never needs them (ADR 0022).
//!
//! # The model
//!
//! Each orchestrator runs one [`Engine`]. On every tick (the plans' interval, and at once when
//! a result arrives or an operator's intent is written) it asks the cluster whether it leads
//! with a valid lease. If it does, for each plan it builds a [`qfence_core::Snapshot`] from the
//! replicated plan state, the latest observation of every binding (with when it was read),
//! the results of finished commands, what is still in flight and `now`, and calls
//! [`qfence_core::decide`]. The decision's sentence goes to the hash-chained event log (once
//! per change: an unchanged sentence is not written again); its state change is written first,
//! as a compare-and-set on the generation (and, serialised here, on the revision); only then
//! are its commands handed to the [`Executor`].
//!
//! The executor runs each command under a deadline and a child of the leadership's
//! cancellation token (losing leadership cancels what it started), one operation per binding
//! at a time, and routes each controller call through the cluster: here, through this
//! orchestrator's own drivers ([`drivers::LocalDrivers`]), or signed and forwarded to an
//! orchestrator at a site allowed to call the controller. Whatever cannot be read is UNKNOWN.
//! A result comes back as an observation (for checks, and for dead-man arms and renewals,
//! whose driver call ends by reading the switch back) and an [`qfence_core::OpResult`], and
//! wakes the engine. Long operations are tracked, never awaited inside the loop. A dead-man
//! call carries its `not_after` as an absolute deadline that the orchestrator running it
//! enforces; a drain keeps renewing the owner's switch and then hands the leadership over
//! (ADR 0013).
//!
//! [`RuntimeBackend`] is the API's [`Backend`] over the same parts: status, plans, dry
//! runs, controllers, and the operators' intents, which go into the replicated plan state for
//! the core to act on.

pub mod auth;
pub mod backend;
pub mod drivers;
pub mod dto;
pub mod effective;
pub mod engine;
pub mod events;
pub mod executor;
pub mod gauges;
pub mod instance_ha;
pub mod metrics;
pub mod orchestrator;
pub mod registered;
pub mod shared;
pub mod systemd;
pub mod timeline;

use std::time::Duration;

pub use auth::{Access, Caller, TokenStore};
pub use backend::{Backend, BackendError, CheckedController, CheckedPlan, RuntimeBackend};
pub use drivers::{DriverExecutor, LocalDrivers};
pub use effective::{ConfigCell, EffectiveConfig};
pub use engine::{Engine, EngineOptions};
pub use executor::Executor;
pub use instance_ha::InstanceHa;
pub use metrics::Metrics;
pub use orchestrator::{JoinOptions, Membership, Orchestrator, OrchestratorOptions};
pub use shared::{PLAN_STATE_SCHEMA, PlanRuntime};

use qfence_core::Millis;

/// What can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cluster: {0}")]
    Cluster(#[from] qfence_cluster::ClusterError),
    #[error("plan {plan}: {reason}")]
    Plan { plan: String, reason: String },
    #[error("plan {plan}: {source}")]
    Stale {
        plan: String,
        #[source]
        source: qfence_core::CoreError,
    },
    #[error("plan {plan} is at generation {current}, not {expected}")]
    Generation {
        plan: String,
        expected: u64,
        current: u64,
    },
    #[error("event log: {0}")]
    Events(#[from] crate::events::EventLogError),
    #[error("driver: {0}")]
    Driver(String),
    #[error("this orchestrator is not the leader")]
    NotLeader,
    #[error("{0}")]
    Setup(String),
}

/// A sentence with its first letter in upper case, how a log line starts, unless its first
/// word is a name (`erp-db to dc2, ...`, `power.off ...`): a name keeps its spelling.
pub(crate) fn capitalised(s: &str) -> String {
    let first = s.split([' ', ',', ':', ';']).next().unwrap_or_default();
    if first.contains(|c: char| c == '-' || c == '.' || c == '_' || c.is_ascii_digit()) {
        return s.to_owned();
    }
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_log_line_starts_capitalised_but_a_name_keeps_its_spelling() {
        assert_eq!(
            super::capitalised("failing erp-db over"),
            "Failing erp-db over"
        );
        assert_eq!(
            super::capitalised("erp-db to dc2, fences step"),
            "erp-db to dc2, fences step"
        );
        assert_eq!(super::capitalised("fence done: off"), "Fence done: off");
        assert_eq!(super::capitalised(""), "");
    }
}

/// The runtime's clock: wall-clock time at start plus `tokio::time` elapsed since, so tests
/// with paused time move it, and `now` never goes backwards.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Millis,
    start: tokio::time::Instant,
}

impl Clock {
    /// A clock reading the system time now.
    pub fn system() -> Self {
        Self::starting_at(Millis(qfence_model::time::now_unix_ms()))
    }

    /// A clock reading `base` now.
    pub fn starting_at(base: Millis) -> Self {
        Self {
            base,
            start: tokio::time::Instant::now(),
        }
    }

    /// Now.
    pub fn now(&self) -> Millis {
        self.base.plus(self.start.elapsed())
    }

    /// Now plus `d`.
    pub fn after(&self, d: Duration) -> Millis {
        self.now().plus(d)
    }
}
