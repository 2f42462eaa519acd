//! Applying a committed command: one method per command, each pure and deterministic, so
//! every orchestrator that applies the same log ends with the same state.

use qfence_model::ids::{CloudId, ControllerId, Generation, OrchestratorId, PlanId, Term};

use super::{
    COMMAND_FORMAT, CloudStateDoc, ClusterState, Command, ControllerRecord, ControllerTestRecord,
    EVENT_LOG_CAPACITY, Event, EventDraft, OrchestratorRecord, PlanRecord, PlanStateDoc,
    PublishedStatus, Request, Response, STATUS_FORMAT, StatusDraft,
};

impl ClusterState {
    /// The generation of a plan, if it is registered.
    pub fn plan_generation(&self, plan: &PlanId) -> Option<Generation> {
        self.plans.get(plan).map(|p| p.state.generation)
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
            Command::RegisterController { controller } => self.register_controller(controller),
            Command::RemoveController { controller } => self.remove_controller(controller),
            Command::RegisterPlan {
                plan,
                config,
                initial_state,
            } => self.register_plan(plan, config, initial_state, term),
            Command::CreatePlan {
                plan,
                config,
                initial_state,
            } => self.create_plan(plan, config, initial_state, term),
            Command::ApplyPlanConfig {
                plan,
                expected_generation,
                config,
                new_state,
            } => {
                self.apply_plan_config(plan, *expected_generation, config, new_state.as_ref(), term)
            }
            Command::RemovePlan {
                plan,
                expected_generation,
            } => self.remove_plan(plan, *expected_generation),
            Command::PlanStateCas {
                plan,
                expected_generation,
                new_state,
            } => self.plan_state_cas(plan, *expected_generation, new_state, term),
            Command::OrchestratorState {
                orchestrator,
                state,
            } => self.orchestrator_state(orchestrator, state),
            Command::AppendEvent { event } => self.append_event(event, term),
            Command::PublishStatus { status } => {
                self.publish_statuses(std::slice::from_ref(status), term)
            }
            Command::PublishStatuses { statuses } => self.publish_statuses(statuses, term),
            Command::RecordControllerTest { controller, test } => {
                self.record_controller_test(controller, test)
            }
            Command::SetNodeKey {
                orchestrator,
                public_key_hex,
            } => self.set_node_key(orchestrator, public_key_hex),
            Command::CloudStateCas {
                cloud,
                expected_revision,
                new_state,
            } => self.cloud_state_cas(cloud, *expected_revision, new_state, term),
        }
    }

    fn cloud_state_cas(
        &mut self,
        cloud: &CloudId,
        expected: u64,
        new_state: &CloudStateDoc,
        term: Term,
    ) -> Response {
        let current = self.clouds.get(cloud).map_or(0, |d| d.revision);
        if current != expected {
            return Response::Rejected {
                reason: format!(
                    "cloud {cloud}: stale write, decided at revision {expected}, the state is at \
                     revision {current}"
                ),
            };
        }
        if new_state.revision != current + 1 {
            return Response::Rejected {
                reason: format!(
                    "cloud {cloud}: new revision {} must be {}",
                    new_state.revision,
                    current + 1
                ),
            };
        }
        let mut doc = new_state.clone();
        doc.changed_in_term = term;
        self.clouds.insert(cloud.clone(), doc);
        Response::Applied
    }

    fn register_controller(&mut self, controller: &ControllerRecord) -> Response {
        self.controllers
            .insert(controller.id.clone(), controller.clone());
        Response::Applied
    }

    fn remove_controller(&mut self, controller: &ControllerId) -> Response {
        self.controllers.remove(controller);
        self.controller_tests.remove(controller);
        Response::Applied
    }

    fn register_plan(
        &mut self,
        plan: &PlanId,
        config: &serde_json::Value,
        initial_state: &PlanStateDoc,
        term: Term,
    ) -> Response {
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

    fn create_plan(
        &mut self,
        plan: &PlanId,
        config: &serde_json::Value,
        initial_state: &PlanStateDoc,
        term: Term,
    ) -> Response {
        if self.plans.contains_key(plan) {
            return Response::Rejected {
                reason: format!("plan {plan:?} already exists"),
            };
        }
        self.register_plan(plan, config, initial_state, term)
    }

    /// The plan's record if its generation is still `expected`; otherwise the response that
    /// refuses the command (an unknown plan, or a lost compare-and-set).
    fn plan_at(
        &mut self,
        plan: &PlanId,
        expected: Generation,
    ) -> Result<&mut PlanRecord, Response> {
        let Some(record) = self.plans.get_mut(plan) else {
            return Err(Response::Rejected {
                reason: format!("plan {plan:?} is not registered"),
            });
        };
        let current = record.state.generation;
        if current != expected {
            return Err(Response::Conflict {
                plan: plan.clone(),
                expected,
                current,
            });
        }
        Ok(record)
    }

    fn apply_plan_config(
        &mut self,
        plan: &PlanId,
        expected: Generation,
        config: &serde_json::Value,
        new_state: Option<&PlanStateDoc>,
        term: Term,
    ) -> Response {
        let record = match self.plan_at(plan, expected) {
            Ok(record) => record,
            Err(refused) => return refused,
        };
        let current = record.state.generation;
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

    fn remove_plan(&mut self, plan: &PlanId, expected: Generation) -> Response {
        if let Err(refused) = self.plan_at(plan, expected) {
            return refused;
        }
        self.plans.remove(plan);
        self.statuses.remove(plan);
        Response::Applied
    }

    fn plan_state_cas(
        &mut self,
        plan: &PlanId,
        expected: Generation,
        new_state: &PlanStateDoc,
        term: Term,
    ) -> Response {
        let record = match self.plan_at(plan, expected) {
            Ok(record) => record,
            Err(refused) => return refused,
        };
        let current = record.state.generation;
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

    fn orchestrator_state(
        &mut self,
        orchestrator: &OrchestratorId,
        state: &OrchestratorRecord,
    ) -> Response {
        self.orchestrators
            .insert(orchestrator.clone(), state.clone());
        Response::Applied
    }

    fn append_event(&mut self, event: &EventDraft, term: Term) -> Response {
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

    /// All or nothing: a draft of an unknown format refuses the whole batch.
    fn publish_statuses(&mut self, statuses: &[StatusDraft], term: Term) -> Response {
        if let Some(refused) = statuses.iter().find_map(unknown_status_format) {
            return refused;
        }
        for status in statuses {
            self.statuses.insert(
                status.plan.clone(),
                PublishedStatus {
                    term,
                    status: status.clone(),
                },
            );
        }
        Response::Applied
    }

    fn record_controller_test(
        &mut self,
        controller: &ControllerId,
        test: &ControllerTestRecord,
    ) -> Response {
        if !self.controllers.contains_key(controller) {
            return Response::Rejected {
                reason: format!("controller {controller:?} is not registered"),
            };
        }
        self.controller_tests
            .insert(controller.clone(), test.clone());
        Response::Applied
    }

    fn set_node_key(&mut self, orchestrator: &OrchestratorId, public_key_hex: &str) -> Response {
        match hex::decode(public_key_hex) {
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
