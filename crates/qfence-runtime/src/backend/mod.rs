//! What the API needs from the running orchestrator: the [`Backend`] trait, and
//! [`RuntimeBackend`], the runtime's answer to it (the server's `testing` feature has an
//! in-memory double).
//!
//! The API authenticates, parses and validates; the backend decides and records. Every write
//! that changes a plan's ownership or content compares the caller's `expected_generation`
//! with the current one and refuses a stale one ([`BackendError::StaleGeneration`]), and every
//! accepted operator action goes to the event log with the caller as actor. A follower
//! forwards each write to the leader and answers what the leader answered (ADR 0024); one
//! that knows no leader answers [`BackendError::NotLeader`].

use async_trait::async_trait;
use qfence_model::config::{ControllerConfig, Issue, PlanConfig};
use qfence_model::{ControllerId, PlanId, SiteId};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::dto::{
    ConfirmFencedRequest, ControllerTest, ControllerView, DiscoveredResource, DryRun, DryRunResult,
    FailoverRequest, LeaderInfo, MaintenanceRequest, OperationAccepted, OrchestratorView,
    PauseRequest, PlanView, RejoinRequest, SecretRefView, StatusResponse, SwitchoverRequest,
};
use crate::events::{EventPage, EventQuery};

mod runtime;

pub use runtime::RuntimeBackend;

/// The kind of thing a `NotFound` names. An alias, so serde does not borrow it from the input.
type What = &'static str;

/// The kind of thing a `NotFound` names, read back from the wire.
fn what_of<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let what = String::deserialize(d)?;
    Ok(["plan", "controller", "site", "orchestrator"]
        .into_iter()
        .find(|w| *w == what)
        .unwrap_or("object"))
}

/// A plan the API validated with the configuration file's validation.
#[derive(Debug, Clone)]
pub struct CheckedPlan {
    pub name: PlanId,
    /// As sent: the structure of `plans.NAME` in the file.
    pub spec: serde_json::Value,
    /// As validated.
    pub config: PlanConfig,
    pub warnings: Vec<Issue>,
}

/// A controller the API validated with the configuration file's validation.
#[derive(Debug, Clone)]
pub struct CheckedController {
    pub name: ControllerId,
    pub spec: serde_json::Value,
    pub config: ControllerConfig,
    pub warnings: Vec<Issue>,
}

/// Why the backend refused or failed. The API maps each to one status and code. A follower
/// receives it from the leader as it is (ADR 0024), hence serde.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", content = "detail", rename_all = "snake_case")]
pub enum BackendError {
    /// 404 `not_found`.
    #[error("{what} {name:?} does not exist")]
    NotFound {
        #[serde(deserialize_with = "what_of")]
        what: What,
        name: String,
    },
    /// 409 `stale_generation`, with the current generation.
    #[error("plan {plan:?} is at generation {current}, not {expected}: reload it and decide again")]
    StaleGeneration {
        plan: String,
        expected: u64,
        current: u64,
    },
    /// 409 `conflict`: the request clashes with the state (a name taken, nothing staged).
    #[error("{0}")]
    Conflict(String),
    /// 409 `refused`: safety says no (the owner is not proven fenced, the site is the owner).
    #[error("{0}")]
    Refused(String),
    /// 422 `validation_failed`: the request is well formed but names what does not fit.
    #[error("{message}")]
    Invalid { message: String, issues: Vec<Issue> },
    /// 409 `capability_failed`: the plan binds a capability its controller's latest test
    /// graded failed (it cannot work); each issue names the binding's field and the grade's
    /// reason.
    #[error("{message}")]
    CapabilityFailed { message: String, issues: Vec<Issue> },
    /// 409 `binding_check_failed`: a controller says a binding cannot be acted on (the VM is
    /// not on the node the binding names, the job does not exist); each issue names the
    /// binding and the problem.
    #[error("{message}")]
    BindingCheckFailed { message: String, issues: Vec<Issue> },
    /// 503 `not_leader`.
    #[error("this orchestrator is not the leader and knows no leader to forward the call to")]
    NotLeader { leader: Option<LeaderInfo> },
    /// 503 `unavailable`: storage or the cluster cannot take the call now.
    #[error("{0}")]
    Unavailable(String),
}

/// Everything the API asks of the running orchestrator. Object-safe, so the server holds an
/// `Arc<dyn Backend>`.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Leadership as this node sees it. Never fails: it answers `/leader`.
    async fn leader(&self) -> LeaderInfo;

    /// Every plan and site: verdicts, owner, generation, last reason.
    async fn status(&self) -> Result<StatusResponse, BackendError>;

    /// The configuration text (YAML) new plans and controllers are validated against: the
    /// cluster, sites, orchestrators and controllers in force.
    async fn config_source(&self) -> Result<String, BackendError>;

    async fn plans(&self) -> Result<Vec<PlanView>, BackendError>;
    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError>;
    /// Creates a plan at generation 1. `Conflict` if the name is taken.
    async fn create_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError>;
    /// Stages a change (replacing any staged one). Nothing is in force until applied.
    async fn stage_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError>;
    /// Drops the staged change. `Conflict` if none.
    async fn discard_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
    ) -> Result<PlanView, BackendError>;
    /// Applies the staged change if the plan is still at `expected` (compare-and-set); the
    /// generation then moves on by one.
    async fn apply_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<PlanView, BackendError>;
    /// Deletes a plan if it is still at `expected`.
    async fn delete_plan(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<(), BackendError>;
    /// What would happen. Changes nothing.
    async fn dry_run(&self, name: &PlanId, what: &DryRun) -> Result<DryRunResult, BackendError>;

    async fn controllers(&self) -> Result<Vec<ControllerView>, BackendError>;
    /// Registers a new controller. `Conflict` if the name is taken.
    async fn register_controller(
        &self,
        caller: &Caller,
        controller: CheckedController,
    ) -> Result<ControllerView, BackendError>;
    /// Probes a controller (no side effects on its targets) and grades its capabilities.
    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError>;

    /// Runs the registration steps on a controller that is not registered (connectivity from
    /// an allowed site, identity and TLS fingerprint, each capability graded), changing
    /// nothing: no state, no target. `Conflict` if the name is already registered (test that
    /// one instead).
    async fn probe_controller(
        &self,
        caller: &Caller,
        controller: CheckedController,
    ) -> Result<ControllerTest, BackendError>;
    /// What the controller's capabilities can act on, as its driver discovers them, asked
    /// from a site allowed to call it. Read-only.
    async fn discover(
        &self,
        controller: &ControllerId,
    ) -> Result<Vec<DiscoveredResource>, BackendError>;

    async fn switchover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &SwitchoverRequest,
    ) -> Result<OperationAccepted, BackendError>;
    async fn failover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &FailoverRequest,
    ) -> Result<OperationAccepted, BackendError>;
    async fn confirm_fenced(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &ConfirmFencedRequest,
    ) -> Result<OperationAccepted, BackendError>;
    /// Lets `site`, an old owner waiting to rejoin, run its `rejoin` bindings, if the plan
    /// is still at `req.expected_generation`.
    async fn rejoin(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &RejoinRequest,
    ) -> Result<OperationAccepted, BackendError>;
    async fn pause(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError>;
    async fn resume(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError>;

    /// Takes a site of a plan in or out of maintenance, if the plan is still at
    /// `req.expected_generation`. Refused for the owner: switch over first.
    async fn set_maintenance(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &MaintenanceRequest,
    ) -> Result<OperationAccepted, BackendError>;

    /// The secret references the controllers name, and who names them.
    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError>;

    /// One page of the event log.
    async fn events(&self, query: &EventQuery) -> Result<EventPage, BackendError>;
    async fn orchestrators(&self) -> Result<Vec<OrchestratorView>, BackendError>;

    /// Every Instance HA cloud: its hosts, evacuations and last decision.
    async fn instance_ha(&self) -> Result<crate::dto::InstanceHaStatus, BackendError> {
        Ok(crate::dto::InstanceHaStatus { clouds: Vec::new() })
    }
}
