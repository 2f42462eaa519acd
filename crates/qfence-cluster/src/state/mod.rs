//! The replicated state and the commands that change it.
//!
//! Everything here is pure: [`ClusterState::apply`] takes a command and the term of the log
//! entry that carried it and returns a [`Response`]. The Raft state machine (see `store`) calls
//! it for every committed entry, in log order, on every orchestrator, so every orchestrator ends
//! up with the same state.
//!
//! Formats are versioned from the first release: every command travels in a [`Request`] with a
//! `format` number, the whole state carries [`STATE_FORMAT`], and each plan's state carries the
//! schema number its owner (the decision core) gave it. A node refuses a command whose format it
//! does not know rather than guessing.
//!
//! A plan's state is *opaque but typed*: the decision core (`qfence-core`) defines `PlanState`;
//! this crate stores it as a [`PlanStateDoc`] (schema number, generation, JSON body) so the two
//! crates do not depend on each other. The generation is lifted out of the body because the
//! cluster enforces it: every change of a plan's state is a compare-and-set on it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use qfence_model::domain::Verdict;
use qfence_model::ids::{CloudId, ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

mod apply;
#[cfg(test)]
mod tests;

/// The command encoding this build writes and understands.
pub const COMMAND_FORMAT: u32 = 1;
/// The state (and snapshot) encoding this build writes and understands.
pub const STATE_FORMAT: u32 = 1;
/// The encoding of a published plan status ([`StatusDraft::format`]).
pub const STATUS_FORMAT: u32 = 1;
/// How many events the replicated event log keeps; older ones are dropped first.
pub const EVENT_LOG_CAPACITY: usize = 10_000;

/// One entry of the replicated log as the application sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The encoding of `command` ([`COMMAND_FORMAT`]).
    pub format: u32,
    /// What to change.
    pub command: Command,
}

impl Request {
    /// Wraps a command in the current format.
    pub fn new(command: Command) -> Self {
        Self {
            format: COMMAND_FORMAT,
            command,
        }
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(format {})", self.command.kind(), self.format)
    }
}

impl From<Command> for Request {
    fn from(command: Command) -> Self {
        Self::new(command)
    }
}

/// The keyed parts of [`ClusterState`] that commands changed, so that storage rewrites those
/// rows and not the whole state: with thousands of plans, a whole-state write per applied
/// batch is what limits a failover.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Dirty {
    pub plans: BTreeSet<PlanId>,
    pub statuses: BTreeSet<PlanId>,
    pub controllers: BTreeSet<ControllerId>,
    pub controller_tests: BTreeSet<ControllerId>,
}

impl Command {
    /// Marks in `dirty` every keyed row this command may change, whether or not applying it
    /// succeeds (a refused command changes nothing; rewriting its row is merely wasted).
    /// Orchestrators, node keys and the event counter are small and always written.
    pub fn touches(&self, dirty: &mut Dirty) {
        match self {
            Command::RegisterController { controller } => {
                dirty.controllers.insert(controller.id.clone());
            }
            Command::RemoveController { controller } => {
                dirty.controllers.insert(controller.clone());
                dirty.controller_tests.insert(controller.clone());
            }
            Command::RegisterPlan { plan, .. }
            | Command::CreatePlan { plan, .. }
            | Command::ApplyPlanConfig { plan, .. }
            | Command::PlanStateCas { plan, .. } => {
                dirty.plans.insert(plan.clone());
            }
            Command::RemovePlan { plan, .. } => {
                dirty.plans.insert(plan.clone());
                dirty.statuses.insert(plan.clone());
            }
            Command::PublishStatus { status } => {
                dirty.statuses.insert(status.plan.clone());
            }
            Command::PublishStatuses { statuses } => {
                dirty
                    .statuses
                    .extend(statuses.iter().map(|s| s.plan.clone()));
            }
            Command::RecordControllerTest { controller, .. } => {
                dirty.controller_tests.insert(controller.clone());
            }
            // A cloud's Instance HA state lives in the `applied` row (a few clouds, written
            // with every batch), not in a keyed table.
            Command::OrchestratorState { .. }
            | Command::AppendEvent { .. }
            | Command::SetNodeKey { .. }
            | Command::CloudStateCas { .. } => {}
        }
    }
}

/// The closed list of changes to the replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Adds or replaces a controller registered at run time.
    RegisterController { controller: ControllerRecord },
    /// Removes a controller. Removing an unknown one is a no-op.
    RemoveController { controller: ControllerId },
    /// Adds a plan with its initial state, or replaces the configuration of a known plan while
    /// keeping its state (the state only changes through [`Command::PlanStateCas`]).
    RegisterPlan {
        plan: PlanId,
        /// The plan's configuration, as the configuration layer serialises it.
        config: serde_json::Value,
        /// The state a new plan starts in; ignored for a known plan.
        initial_state: PlanStateDoc,
    },
    /// Adds a plan created through the API with its initial state. Unlike
    /// [`Command::RegisterPlan`] it never touches a known plan: a taken name is rejected.
    CreatePlan {
        plan: PlanId,
        config: serde_json::Value,
        initial_state: PlanStateDoc,
    },
    /// Replaces a plan's configuration record if, and only if, its generation is still
    /// `expected_generation`; with `new_state`, replaces its state in the same step, and that
    /// state must be at the next generation (applying a changed plan moves the generation on,
    /// so calls decided on the old plan are refused). Without it, the state is kept (staging
    /// or discarding a change puts nothing in force).
    ApplyPlanConfig {
        plan: PlanId,
        expected_generation: Generation,
        config: serde_json::Value,
        new_state: Option<PlanStateDoc>,
    },
    /// Removes a plan (its state and published status) if, and only if, its generation is
    /// still `expected_generation`.
    RemovePlan {
        plan: PlanId,
        expected_generation: Generation,
    },
    /// Replaces a plan's state if, and only if, its generation is still `expected_generation`.
    /// The new state's generation must be the same (no change of owner) or the next one (a
    /// change of owner).
    PlanStateCas {
        plan: PlanId,
        expected_generation: Generation,
        new_state: PlanStateDoc,
    },
    /// Records an orchestrator's site, address and status.
    OrchestratorState {
        orchestrator: OrchestratorId,
        state: OrchestratorRecord,
    },
    /// Appends one event to the replicated event log.
    AppendEvent { event: EventDraft },
    /// Replaces a plan's published status: the leader's view (verdicts, last sentence), so
    /// that every orchestrator can answer a status request. One record per plan, overwritten.
    PublishStatus { status: StatusDraft },
    /// Replaces the published status of many plans at once, as [`Command::PublishStatus`]
    /// does for each: one consensus write per tick instead of one per plan. All or nothing: a
    /// draft of an unknown format refuses the whole batch. Each draft carries its own format.
    PublishStatuses { statuses: Vec<StatusDraft> },
    /// Replaces the record of a controller's last test (its grades), so every orchestrator
    /// lists them.
    RecordControllerTest {
        controller: ControllerId,
        test: ControllerTestRecord,
    },
    /// Replaces a cloud's Instance HA state if, and only if, its stored revision is still
    /// `expected_revision` (0: the cloud has none yet); the new state's revision must be the
    /// next one. A deposed leader's late write is refused, as a plan's is.
    CloudStateCas {
        cloud: CloudId,
        expected_revision: u64,
        new_state: CloudStateDoc,
    },
    /// Publishes an orchestrator's Ed25519 public key (forwarded calls are signed with it).
    SetNodeKey {
        orchestrator: OrchestratorId,
        /// The raw 32-byte public key, lower-case hex.
        public_key_hex: String,
    },
}

impl Command {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::RegisterController { .. } => "register_controller",
            Command::RemoveController { .. } => "remove_controller",
            Command::RegisterPlan { .. } => "register_plan",
            Command::CreatePlan { .. } => "create_plan",
            Command::ApplyPlanConfig { .. } => "apply_plan_config",
            Command::RemovePlan { .. } => "remove_plan",
            Command::PlanStateCas { .. } => "plan_state_cas",
            Command::OrchestratorState { .. } => "orchestrator_state",
            Command::AppendEvent { .. } => "append_event",
            Command::PublishStatus { .. } => "publish_status",
            Command::PublishStatuses { .. } => "publish_statuses",
            Command::RecordControllerTest { .. } => "record_controller_test",
            Command::SetNodeKey { .. } => "set_node_key",
            Command::CloudStateCas { .. } => "cloud_state_cas",
        }
    }
}

/// What applying a command did. Every node computes the same response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Response {
    /// The state changed (or the command was an accepted no-op).
    Applied,
    /// A compare-and-set lost: the plan's generation is no longer the expected one.
    Conflict {
        plan: PlanId,
        expected: Generation,
        /// The generation now stored.
        current: Generation,
    },
    /// The command was well-formed but not allowed; nothing changed.
    Rejected { reason: String },
    /// Blank and membership entries carry no command.
    NoCommand,
}

/// A controller registered at run time. Its driver settings are kept as the configuration layer
/// wrote them; secrets appear only by reference there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerRecord {
    pub id: ControllerId,
    /// Where it lives.
    pub site: SiteId,
    /// Further sites whose orchestrators may call it.
    #[serde(default)]
    pub reach: Vec<SiteId>,
    /// Driver settings (type and options), opaque to the cluster.
    #[serde(default)]
    pub config: serde_json::Value,
}

/// A plan's state as the cluster stores it: typed by its owner, opaque to the cluster except
/// for the generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStateDoc {
    /// The schema number of `body`, chosen by the crate that defines it.
    pub schema: u32,
    /// The plan's generation; it grows by one with every change of owner.
    pub generation: Generation,
    /// Owner, phase, fence evidence, intents... as the decision core encodes them.
    pub body: serde_json::Value,
}

/// A cloud's Instance HA state as the cluster stores it: typed by the decision core
/// (`qfence_core::instance_ha::StoredCloudState`), opaque here except for the revision the
/// compare-and-set is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudStateDoc {
    /// The schema number of `body`, chosen by the crate that defines it.
    pub schema: u32,
    /// Grows by one with every write.
    pub revision: u64,
    pub body: serde_json::Value,
    /// The term of the leader that wrote it (from the log entry, not the proposer's word).
    #[serde(default)]
    pub changed_in_term: Term,
}

/// Why a [`PlanStateDoc`] could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    #[error("plan state has schema {found}, this build reads schema {expected}")]
    Schema { expected: u32, found: u32 },
    #[error("plan state does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

impl PlanStateDoc {
    /// Encodes a typed plan state.
    pub fn encode<T: Serialize>(
        schema: u32,
        generation: Generation,
        value: &T,
    ) -> Result<Self, DocError> {
        Ok(Self {
            schema,
            generation,
            body: serde_json::to_value(value)?,
        })
    }

    /// Decodes the body, refusing a schema this build does not know.
    pub fn decode<T: DeserializeOwned>(&self, schema: u32) -> Result<T, DocError> {
        if self.schema != schema {
            return Err(DocError::Schema {
                expected: schema,
                found: self.schema,
            });
        }
        // Read in place: a decision decodes every plan's state, and a copy of each JSON tree
        // first was a tenth of a 1,000-plan failover's CPU.
        Ok(T::deserialize(&self.body)?)
    }
}

/// A registered plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub config: serde_json::Value,
    pub state: PlanStateDoc,
    /// The term of the leader that last changed the state.
    pub changed_in_term: Term,
}

/// What an orchestrator is doing, as the cluster sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrchestratorStatus {
    /// Serving: it may be asked to make controller calls.
    Active,
    /// Taken out of service by an operator: no calls are routed to it.
    Maintenance,
}

/// An orchestrator as recorded in the replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchestratorRecord {
    pub site: SiteId,
    /// `host:port` of its cluster endpoint.
    pub address: String,
    /// A witness site's orchestrator votes but owns no plans and makes no controller calls.
    pub witness: bool,
    pub status: OrchestratorStatus,
}

/// An event as a leader proposes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    /// Wall-clock time at the proposer, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    pub plan: Option<PlanId>,
    /// One sentence.
    pub message: String,
    /// Structured fields.
    #[serde(default)]
    pub fields: serde_json::Value,
}

/// An event in the replicated log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the event log, from 1, never reused.
    pub seq: u64,
    /// The term of the leader that wrote it.
    pub term: Term,
    #[serde(flatten)]
    pub draft: EventDraft,
}

/// A plan's status as the leader saw it, as it proposes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusDraft {
    /// The encoding of this record ([`STATUS_FORMAT`]); a node refuses one it does not know.
    pub format: u32,
    pub plan: PlanId,
    /// Each site's verdict.
    pub sites: Vec<SiteVerdict>,
    /// The plan's last one-sentence reason.
    pub reason: String,
    /// Wall-clock time at the leader when it saw this, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The orchestrator that saw it (the leader that proposed it).
    pub by: OrchestratorId,
}

/// One site's verdict in a published status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteVerdict {
    pub site: SiteId,
    pub verdict: Verdict,
    /// When the newest check of a fence that proves this site was read, Unix ms.
    pub checked_at_ms: Option<u64>,
    /// What the verdict stands on when it is not a fence's reading: "resource stopped", a hot
    /// standby's "standby, replicating from ..., lag N bytes", "not a standby: ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posture: Option<String>,
}

/// A published status in the replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedStatus {
    /// The term of the leader that wrote it (from the log entry, not the proposer's word).
    pub term: Term,
    #[serde(flatten)]
    pub status: StatusDraft,
}

/// The whole replicated state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    /// The encoding ([`STATE_FORMAT`]).
    pub format: u32,
    pub controllers: BTreeMap<ControllerId, ControllerRecord>,
    pub plans: BTreeMap<PlanId, PlanRecord>,
    pub orchestrators: BTreeMap<OrchestratorId, OrchestratorRecord>,
    /// Ed25519 public keys, raw 32 bytes in hex.
    pub node_keys: BTreeMap<OrchestratorId, String>,
    /// The most recent events, oldest first, at most [`EVENT_LOG_CAPACITY`].
    pub events: VecDeque<Event>,
    /// The sequence number the next event gets.
    pub next_event_seq: u64,
    /// Each plan's status as its last leader published it. Absent from snapshots written before
    /// it existed, hence the default.
    #[serde(default)]
    pub statuses: BTreeMap<PlanId, PublishedStatus>,
    /// Each controller's last test. Absent from snapshots written before it existed.
    #[serde(default)]
    pub controller_tests: BTreeMap<ControllerId, ControllerTestRecord>,
    /// Each Instance HA cloud's state. Absent from snapshots written before it existed.
    #[serde(default)]
    pub clouds: BTreeMap<CloudId, CloudStateDoc>,
}

/// A controller's last test, as the orchestrator that ran it recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControllerTestRecord {
    /// Wall-clock time of the test, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The orchestrator that ran it.
    pub by: OrchestratorId,
    /// The grades, as the API encodes them (opaque here).
    pub grades: serde_json::Value,
    /// The identity the test read (`Identity.id`): what registration pins. A second
    /// controller of the same system is warned of, and every fence first checks that the
    /// controller still answers with it. Absent from a record of an older build, or when
    /// the test could not read one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            format: STATE_FORMAT,
            controllers: BTreeMap::new(),
            plans: BTreeMap::new(),
            orchestrators: BTreeMap::new(),
            node_keys: BTreeMap::new(),
            events: VecDeque::new(),
            next_event_seq: 1,
            statuses: BTreeMap::new(),
            controller_tests: BTreeMap::new(),
            clouds: BTreeMap::new(),
        }
    }
}
