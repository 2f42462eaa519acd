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
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

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
            Command::OrchestratorState { .. }
            | Command::AppendEvent { .. }
            | Command::SetNodeKey { .. } => {}
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
        Ok(serde_json::from_value(self.body.clone())?)
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
        }
    }
}

impl ClusterState {
    /// The generation of a plan, if it is registered.
    pub fn plan_generation(&self, plan: &PlanId) -> Option<Generation> {
        self.plans.get(plan).map(|p| p.state.generation)
    }

    fn publish(&mut self, status: &StatusDraft, term: Term) {
        self.statuses.insert(
            status.plan.clone(),
            PublishedStatus {
                term,
                status: status.clone(),
            },
        );
    }

    /// Applies one committed request, written by the leader of `term`.
    pub fn apply_request(&mut self, request: &Request, term: Term) -> Response {
        if request.format != COMMAND_FORMAT {
            return Response::Rejected {
                reason: format!(
                    "command format {} is not known to this build (it reads format {COMMAND_FORMAT})",
                    request.format
                ),
            };
        }
        self.apply(&request.command, term)
    }

    /// Applies one committed command, written by the leader of `term`.
    pub fn apply(&mut self, command: &Command, term: Term) -> Response {
        match command {
            Command::RegisterController { controller } => {
                self.controllers
                    .insert(controller.id.clone(), controller.clone());
                Response::Applied
            }
            Command::RemoveController { controller } => {
                self.controllers.remove(controller);
                self.controller_tests.remove(controller);
                Response::Applied
            }
            Command::RegisterPlan {
                plan,
                config,
                initial_state,
            } => {
                match self.plans.get_mut(plan) {
                    Some(record) => record.config = config.clone(),
                    None => {
                        self.plans.insert(
                            plan.clone(),
                            PlanRecord {
                                config: config.clone(),
                                state: initial_state.clone(),
                                changed_in_term: term,
                            },
                        );
                    }
                }
                Response::Applied
            }
            Command::CreatePlan {
                plan,
                config,
                initial_state,
            } => {
                if self.plans.contains_key(plan) {
                    return Response::Rejected {
                        reason: format!("plan {plan:?} already exists"),
                    };
                }
                self.plans.insert(
                    plan.clone(),
                    PlanRecord {
                        config: config.clone(),
                        state: initial_state.clone(),
                        changed_in_term: term,
                    },
                );
                Response::Applied
            }
            Command::ApplyPlanConfig {
                plan,
                expected_generation,
                config,
                new_state,
            } => {
                let Some(record) = self.plans.get_mut(plan) else {
                    return Response::Rejected {
                        reason: format!("plan {plan:?} is not registered"),
                    };
                };
                let current = record.state.generation;
                if current != *expected_generation {
                    return Response::Conflict {
                        plan: plan.clone(),
                        expected: *expected_generation,
                        current,
                    };
                }
                if let Some(next) = new_state {
                    if next.generation != current.next() {
                        return Response::Rejected {
                            reason: format!(
                                "plan {plan:?}: applying a change must move generation {current} to {}, not {}",
                                current.next(),
                                next.generation
                            ),
                        };
                    }
                    record.state = next.clone();
                    record.changed_in_term = term;
                }
                record.config = config.clone();
                Response::Applied
            }
            Command::RemovePlan {
                plan,
                expected_generation,
            } => {
                let Some(record) = self.plans.get(plan) else {
                    return Response::Rejected {
                        reason: format!("plan {plan:?} is not registered"),
                    };
                };
                let current = record.state.generation;
                if current != *expected_generation {
                    return Response::Conflict {
                        plan: plan.clone(),
                        expected: *expected_generation,
                        current,
                    };
                }
                self.plans.remove(plan);
                self.statuses.remove(plan);
                Response::Applied
            }
            Command::PlanStateCas {
                plan,
                expected_generation,
                new_state,
            } => {
                let Some(record) = self.plans.get_mut(plan) else {
                    return Response::Rejected {
                        reason: format!("plan {plan:?} is not registered"),
                    };
                };
                let current = record.state.generation;
                if current != *expected_generation {
                    return Response::Conflict {
                        plan: plan.clone(),
                        expected: *expected_generation,
                        current,
                    };
                }
                if new_state.generation != current && new_state.generation != current.next() {
                    return Response::Rejected {
                        reason: format!(
                            "plan {plan:?}: new generation {} must be {current} or {}",
                            new_state.generation,
                            current.next()
                        ),
                    };
                }
                record.state = new_state.clone();
                record.changed_in_term = term;
                Response::Applied
            }
            Command::OrchestratorState {
                orchestrator,
                state,
            } => {
                self.orchestrators
                    .insert(orchestrator.clone(), state.clone());
                Response::Applied
            }
            Command::AppendEvent { event } => {
                let seq = self.next_event_seq;
                self.next_event_seq += 1;
                self.events.push_back(Event {
                    seq,
                    term,
                    draft: event.clone(),
                });
                while self.events.len() > EVENT_LOG_CAPACITY {
                    self.events.pop_front();
                }
                Response::Applied
            }
            Command::PublishStatus { status } => {
                if let Some(refused) = unknown_status_format(status) {
                    return refused;
                }
                self.publish(status, term);
                Response::Applied
            }
            Command::PublishStatuses { statuses } => {
                if let Some(refused) = statuses.iter().find_map(unknown_status_format) {
                    return refused;
                }
                for status in statuses {
                    self.publish(status, term);
                }
                Response::Applied
            }
            Command::RecordControllerTest { controller, test } => {
                if !self.controllers.contains_key(controller) {
                    return Response::Rejected {
                        reason: format!("controller {controller:?} is not registered"),
                    };
                }
                self.controller_tests
                    .insert(controller.clone(), test.clone());
                Response::Applied
            }
            Command::SetNodeKey {
                orchestrator,
                public_key_hex,
            } => match hex::decode(public_key_hex) {
                Ok(bytes) if bytes.len() == 32 => {
                    self.node_keys
                        .insert(orchestrator.clone(), public_key_hex.to_ascii_lowercase());
                    Response::Applied
                }
                _ => Response::Rejected {
                    reason: format!(
                        "public key of {orchestrator} must be 32 bytes of hex, got {public_key_hex:?}"
                    ),
                },
            },
        }
    }
}

/// The refusal of a status draft whose format this build does not read.
fn unknown_status_format(status: &StatusDraft) -> Option<Response> {
    (status.format != STATUS_FORMAT).then(|| Response::Rejected {
        reason: format!(
            "status format {} of plan {} is not known to this build (it reads format {STATUS_FORMAT})",
            status.format, status.plan
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan() -> PlanId {
        PlanId::new("erp-db").unwrap()
    }

    fn doc(generation: u64, owner: &str) -> PlanStateDoc {
        PlanStateDoc {
            schema: 1,
            generation: Generation(generation),
            body: json!({"owner": owner, "phase": "steady"}),
        }
    }

    fn registered() -> ClusterState {
        let mut state = ClusterState::default();
        let r = state.apply(
            &Command::RegisterPlan {
                plan: plan(),
                config: json!({"sites": ["dc1", "dc2"]}),
                initial_state: doc(0, "dc1"),
            },
            Term(1),
        );
        assert_eq!(r, Response::Applied);
        state
    }

    #[test]
    fn cas_with_the_current_generation_changes_owner() {
        let mut state = registered();
        let r = state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1, "dc2"),
            },
            Term(3),
        );
        assert_eq!(r, Response::Applied);
        let record = &state.plans[&plan()];
        assert_eq!(record.state, doc(1, "dc2"));
        assert_eq!(record.changed_in_term, Term(3));
    }

    #[test]
    fn cas_with_a_stale_generation_is_a_conflict_and_changes_nothing() {
        let mut state = registered();
        state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1, "dc2"),
            },
            Term(2),
        );
        let before = state.clone();
        let r = state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1, "dc1"),
            },
            Term(2),
        );
        assert_eq!(
            r,
            Response::Conflict {
                plan: plan(),
                expected: Generation(0),
                current: Generation(1)
            }
        );
        assert_eq!(state, before);
    }

    #[test]
    fn cas_may_keep_the_generation_but_not_skip_one() {
        let mut state = registered();
        let same = state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: PlanStateDoc {
                    body: json!({"owner": "dc1", "phase": "fencing"}),
                    ..doc(0, "dc1")
                },
            },
            Term(2),
        );
        assert_eq!(same, Response::Applied);
        let before = state.clone();
        let skip = state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(2, "dc2"),
            },
            Term(2),
        );
        assert!(matches!(skip, Response::Rejected { .. }), "{skip:?}");
        assert_eq!(state, before);
    }

    #[test]
    fn cas_on_an_unknown_plan_is_rejected() {
        let mut state = ClusterState::default();
        let r = state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(0, "dc1"),
            },
            Term(1),
        );
        assert!(matches!(r, Response::Rejected { .. }));
        assert!(state.plans.is_empty());
    }

    #[test]
    fn registering_a_known_plan_keeps_its_state() {
        let mut state = registered();
        state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1, "dc2"),
            },
            Term(2),
        );
        state.apply(
            &Command::RegisterPlan {
                plan: plan(),
                config: json!({"sites": ["dc1", "dc2", "dc3"]}),
                initial_state: doc(0, "dc1"),
            },
            Term(2),
        );
        let record = &state.plans[&plan()];
        assert_eq!(record.state.generation, Generation(1));
        assert_eq!(record.config, json!({"sites": ["dc1", "dc2", "dc3"]}));
    }

    #[test]
    fn an_unknown_command_format_is_refused() {
        let mut state = ClusterState::default();
        let r = state.apply_request(
            &Request {
                format: 99,
                command: Command::RemoveController {
                    controller: ControllerId::new("x").unwrap(),
                },
            },
            Term(1),
        );
        assert!(matches!(r, Response::Rejected { .. }));
    }

    #[test]
    fn events_are_numbered_with_their_term_and_bounded() {
        let mut state = ClusterState::default();
        for i in 0..(EVENT_LOG_CAPACITY + 5) {
            state.apply(
                &Command::AppendEvent {
                    event: EventDraft {
                        at_unix_ms: i as u64,
                        plan: None,
                        message: format!("event {i}"),
                        fields: json!({}),
                    },
                },
                Term(4),
            );
        }
        assert_eq!(state.events.len(), EVENT_LOG_CAPACITY);
        assert_eq!(state.events.front().unwrap().seq, 6);
        assert_eq!(state.events.back().unwrap().term, Term(4));
        assert_eq!(state.next_event_seq, EVENT_LOG_CAPACITY as u64 + 6);
    }

    #[test]
    fn node_keys_must_be_32_bytes() {
        let mut state = ClusterState::default();
        let o = OrchestratorId::new("o1").unwrap();
        let bad = state.apply(
            &Command::SetNodeKey {
                orchestrator: o.clone(),
                public_key_hex: "abcd".into(),
            },
            Term(1),
        );
        assert!(matches!(bad, Response::Rejected { .. }));
        let good = state.apply(
            &Command::SetNodeKey {
                orchestrator: o.clone(),
                public_key_hex: "AB".repeat(32),
            },
            Term(1),
        );
        assert_eq!(good, Response::Applied);
        assert_eq!(state.node_keys[&o], "ab".repeat(32));
    }

    #[test]
    fn commands_have_a_stable_tagged_encoding() {
        let request = Request::new(Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(4),
            new_state: doc(5, "dc2"),
        });
        let text = serde_json::to_value(&request).unwrap();
        assert_eq!(
            text,
            json!({"format": 1, "command": {"type": "plan_state_cas", "plan": "erp-db",
                "expected_generation": 4,
                "new_state": {"schema": 1, "generation": 5,
                    "body": {"owner": "dc2", "phase": "steady"}}}})
        );
        let back: Request = serde_json::from_value(text).unwrap();
        assert_eq!(back, request);
    }

    fn status(verdict: Verdict, reason: &str) -> StatusDraft {
        StatusDraft {
            format: STATUS_FORMAT,
            plan: plan(),
            sites: vec![SiteVerdict {
                site: SiteId::new("dc2").unwrap(),
                verdict,
                checked_at_ms: Some(7),
            }],
            reason: reason.into(),
            at_unix_ms: 9,
            by: OrchestratorId::new("dc1-a").unwrap(),
        }
    }

    #[test]
    fn a_published_status_is_stored_with_its_term_and_overwritten() {
        let mut state = ClusterState::default();
        let first = status(Verdict::Unknown, "checking");
        let r = state.apply(
            &Command::PublishStatus {
                status: first.clone(),
            },
            Term(2),
        );
        assert_eq!(r, Response::Applied);
        assert_eq!(
            state.statuses[&plan()],
            PublishedStatus {
                term: Term(2),
                status: first
            }
        );
        let second = status(Verdict::Fenced, "no action: dc2 fenced");
        state.apply(
            &Command::PublishStatus {
                status: second.clone(),
            },
            Term(3),
        );
        assert_eq!(state.statuses.len(), 1, "one record per plan");
        assert_eq!(state.statuses[&plan()].term, Term(3));
        assert_eq!(state.statuses[&plan()].status, second);
    }

    #[test]
    fn a_status_of_an_unknown_format_is_refused_and_changes_nothing() {
        let mut state = ClusterState::default();
        let r = state.apply(
            &Command::PublishStatus {
                status: StatusDraft {
                    format: STATUS_FORMAT + 1,
                    ..status(Verdict::Fenced, "x")
                },
            },
            Term(1),
        );
        assert!(matches!(r, Response::Rejected { .. }), "{r:?}");
        assert!(state.statuses.is_empty());
    }

    #[test]
    fn publish_status_has_a_stable_encoding_and_old_snapshots_still_read() {
        let request = Request::new(Command::PublishStatus {
            status: status(Verdict::Fenced, "no action"),
        });
        let text = serde_json::to_value(&request).unwrap();
        assert_eq!(
            text,
            json!({"format": 1, "command": {"type": "publish_status", "status": {
                "format": 1, "plan": "erp-db",
                "sites": [{"site": "dc2", "verdict": "FENCED", "checked_at_ms": 7}],
                "reason": "no action", "at_unix_ms": 9, "by": "dc1-a"}}})
        );
        let back: Request = serde_json::from_value(text).unwrap();
        assert_eq!(back, request);
        let mut old = serde_json::to_value(ClusterState::default()).unwrap();
        old.as_object_mut().unwrap().remove("statuses");
        let read: ClusterState = serde_json::from_value(old).unwrap();
        assert!(read.statuses.is_empty());
    }

    #[test]
    fn create_plan_adds_a_new_plan_and_never_touches_a_known_one() {
        let mut state = ClusterState::default();
        let r = state.apply(
            &Command::CreatePlan {
                plan: plan(),
                config: json!({"source": "api"}),
                initial_state: doc(1, "dc1"),
            },
            Term(2),
        );
        assert_eq!(r, Response::Applied);
        assert_eq!(state.plans[&plan()].state, doc(1, "dc1"));
        assert_eq!(state.plans[&plan()].changed_in_term, Term(2));
        let before = state.clone();
        let again = state.apply(
            &Command::CreatePlan {
                plan: plan(),
                config: json!({"source": "api", "other": true}),
                initial_state: doc(1, "dc2"),
            },
            Term(3),
        );
        assert!(matches!(again, Response::Rejected { .. }), "{again:?}");
        assert_eq!(state, before);
    }

    #[test]
    fn apply_plan_config_replaces_config_and_state_in_one_step_at_the_next_generation() {
        let mut state = registered();
        let r = state.apply(
            &Command::ApplyPlanConfig {
                plan: plan(),
                expected_generation: Generation(0),
                config: json!({"sites": ["dc1", "dc2", "dc3"]}),
                new_state: Some(doc(1, "dc1")),
            },
            Term(5),
        );
        assert_eq!(r, Response::Applied);
        let record = &state.plans[&plan()];
        assert_eq!(record.config, json!({"sites": ["dc1", "dc2", "dc3"]}));
        assert_eq!(record.state, doc(1, "dc1"));
        assert_eq!(record.changed_in_term, Term(5));
    }

    #[test]
    fn apply_plan_config_with_a_stale_generation_changes_nothing() {
        let mut state = registered();
        state.apply(
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1, "dc2"),
            },
            Term(2),
        );
        let before = state.clone();
        let r = state.apply(
            &Command::ApplyPlanConfig {
                plan: plan(),
                expected_generation: Generation(0),
                config: json!({"sites": ["dc1"]}),
                new_state: Some(doc(1, "dc1")),
            },
            Term(2),
        );
        assert_eq!(
            r,
            Response::Conflict {
                plan: plan(),
                expected: Generation(0),
                current: Generation(1)
            }
        );
        assert_eq!(state, before, "neither the config nor the state moved");
    }

    #[test]
    fn apply_plan_config_must_move_the_generation_on_by_exactly_one() {
        let mut state = registered();
        let before = state.clone();
        for g in [0, 2] {
            let r = state.apply(
                &Command::ApplyPlanConfig {
                    plan: plan(),
                    expected_generation: Generation(0),
                    config: json!({"x": g}),
                    new_state: Some(doc(g, "dc1")),
                },
                Term(2),
            );
            assert!(matches!(r, Response::Rejected { .. }), "{g}: {r:?}");
            assert_eq!(state, before, "a rejected apply changes nothing");
        }
    }

    #[test]
    fn apply_plan_config_without_a_state_keeps_the_state_and_its_generation() {
        let mut state = registered();
        let r = state.apply(
            &Command::ApplyPlanConfig {
                plan: plan(),
                expected_generation: Generation(0),
                config: json!({"staged": {"spec": {}}}),
                new_state: None,
            },
            Term(4),
        );
        assert_eq!(r, Response::Applied);
        let record = &state.plans[&plan()];
        assert_eq!(record.config, json!({"staged": {"spec": {}}}));
        assert_eq!(record.state, doc(0, "dc1"));
        assert_eq!(record.changed_in_term, Term(1), "the state was not changed");
        let unknown = ClusterState::default().apply(
            &Command::ApplyPlanConfig {
                plan: plan(),
                expected_generation: Generation(0),
                config: json!({}),
                new_state: None,
            },
            Term(4),
        );
        assert!(matches!(unknown, Response::Rejected { .. }));
    }

    #[test]
    fn remove_plan_compares_the_generation_and_drops_the_published_status() {
        let mut state = registered();
        state.apply(
            &Command::PublishStatus {
                status: status(Verdict::Fenced, "no action"),
            },
            Term(1),
        );
        let before = state.clone();
        let stale = state.apply(
            &Command::RemovePlan {
                plan: plan(),
                expected_generation: Generation(7),
            },
            Term(1),
        );
        assert_eq!(
            stale,
            Response::Conflict {
                plan: plan(),
                expected: Generation(7),
                current: Generation(0)
            }
        );
        assert_eq!(state, before);
        let r = state.apply(
            &Command::RemovePlan {
                plan: plan(),
                expected_generation: Generation(0),
            },
            Term(1),
        );
        assert_eq!(r, Response::Applied);
        assert!(state.plans.is_empty());
        assert!(state.statuses.is_empty());
        let again = state.apply(
            &Command::RemovePlan {
                plan: plan(),
                expected_generation: Generation(0),
            },
            Term(1),
        );
        assert!(matches!(again, Response::Rejected { .. }));
    }

    #[test]
    fn plan_config_commands_have_a_stable_tagged_encoding() {
        let request = Request::new(Command::ApplyPlanConfig {
            plan: plan(),
            expected_generation: Generation(4),
            config: json!({"source": "api"}),
            new_state: Some(doc(5, "dc2")),
        });
        let text = serde_json::to_value(&request).unwrap();
        assert_eq!(
            text,
            json!({"format": 1, "command": {"type": "apply_plan_config", "plan": "erp-db",
                "expected_generation": 4, "config": {"source": "api"},
                "new_state": {"schema": 1, "generation": 5,
                    "body": {"owner": "dc2", "phase": "steady"}}}})
        );
        assert_eq!(serde_json::from_value::<Request>(text).unwrap(), request);
        let remove = Request::new(Command::RemovePlan {
            plan: plan(),
            expected_generation: Generation(2),
        });
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({"format": 1, "command": {"type": "remove_plan", "plan": "erp-db",
                "expected_generation": 2}})
        );
    }

    #[test]
    fn a_batch_of_statuses_publishes_each_plan_with_the_entry_term() {
        let mut state = ClusterState::default();
        let other = PlanId::new("crm").unwrap();
        state.apply(
            &Command::PublishStatus {
                status: status(Verdict::Unknown, "checking"),
            },
            Term(2),
        );
        let a = status(Verdict::Fenced, "no action");
        let b = StatusDraft {
            plan: other.clone(),
            ..status(Verdict::Failed, "fencing")
        };
        let r = state.apply(
            &Command::PublishStatuses {
                statuses: vec![a.clone(), b.clone()],
            },
            Term(4),
        );
        assert_eq!(r, Response::Applied);
        assert_eq!(state.statuses.len(), 2);
        assert_eq!(
            state.statuses[&plan()],
            PublishedStatus {
                term: Term(4),
                status: a
            }
        );
        assert_eq!(state.statuses[&other].status, b);
        assert_eq!(state.statuses[&other].term, Term(4));
    }

    #[test]
    fn a_batch_with_one_status_of_an_unknown_format_changes_nothing() {
        let mut state = ClusterState::default();
        let r = state.apply(
            &Command::PublishStatuses {
                statuses: vec![
                    status(Verdict::Fenced, "no action"),
                    StatusDraft {
                        format: STATUS_FORMAT + 1,
                        plan: PlanId::new("crm").unwrap(),
                        ..status(Verdict::Fenced, "x")
                    },
                ],
            },
            Term(1),
        );
        let Response::Rejected { reason } = r else {
            panic!("{r:?}");
        };
        assert!(reason.contains("plan crm"), "{reason}");
        assert!(state.statuses.is_empty(), "all or nothing");
    }

    #[test]
    fn publish_statuses_has_a_stable_encoding() {
        let request = Request::new(Command::PublishStatuses {
            statuses: vec![status(Verdict::Fenced, "no action")],
        });
        let text = serde_json::to_value(&request).unwrap();
        assert_eq!(
            text,
            json!({"format": 1, "command": {"type": "publish_statuses", "statuses": [{
                "format": 1, "plan": "erp-db",
                "sites": [{"site": "dc2", "verdict": "FENCED", "checked_at_ms": 7}],
                "reason": "no action", "at_unix_ms": 9, "by": "dc1-a"}]}})
        );
        let back: Request = serde_json::from_value(text).unwrap();
        assert_eq!(back, request);
    }

    #[test]
    fn a_controller_test_is_kept_per_registered_controller_and_goes_with_it() {
        let mut state = ClusterState::default();
        let c = ControllerId::new("bmc-dc1").unwrap();
        let test = |at: u64| ControllerTestRecord {
            at_unix_ms: at,
            by: OrchestratorId::new("dc1-a").unwrap(),
            grades: json!([{"capability": "power.off", "grade": "proven"}]),
        };
        let unknown = state.apply(
            &Command::RecordControllerTest {
                controller: c.clone(),
                test: test(1),
            },
            Term(1),
        );
        assert!(matches!(unknown, Response::Rejected { .. }));
        assert!(state.controller_tests.is_empty());
        state.apply(
            &Command::RegisterController {
                controller: ControllerRecord {
                    id: c.clone(),
                    site: SiteId::new("dc1").unwrap(),
                    reach: vec![],
                    config: json!({}),
                },
            },
            Term(1),
        );
        for at in [1, 2] {
            let r = state.apply(
                &Command::RecordControllerTest {
                    controller: c.clone(),
                    test: test(at),
                },
                Term(1),
            );
            assert_eq!(r, Response::Applied);
        }
        assert_eq!(state.controller_tests[&c], test(2), "the last one is kept");
        state.apply(
            &Command::RemoveController {
                controller: c.clone(),
            },
            Term(1),
        );
        assert!(state.controller_tests.is_empty());
        let mut old = serde_json::to_value(ClusterState::default()).unwrap();
        old.as_object_mut().unwrap().remove("controller_tests");
        let read: ClusterState = serde_json::from_value(old).unwrap();
        assert!(read.controller_tests.is_empty());
    }

    #[test]
    fn plan_state_docs_refuse_an_unknown_schema() {
        let d = doc(0, "dc1");
        let ok: serde_json::Value = d.decode(1).unwrap();
        assert_eq!(ok["owner"], "dc1");
        assert!(matches!(
            d.decode::<serde_json::Value>(2),
            Err(DocError::Schema {
                expected: 2,
                found: 1
            })
        ));
    }
}
