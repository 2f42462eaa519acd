//! The API's [`Backend`] over the running orchestrator: the engine's view, the cluster and the
//! event log. Operators' requests become intents in the replicated plan state; the core acts
//! on them at the next tick (which the write wakes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qfence_call::{Answer, Call, Report};
use qfence_cluster::forward::CallOutcome;
use qfence_cluster::routing::{self, Placement, Route};
use qfence_cluster::state::{
    Command as ClusterCommand, ControllerRecord, ControllerTestRecord, PlanStateDoc,
    PublishedStatus, Response, SiteVerdict,
};
use qfence_controllers::SecretStore;
use qfence_controllers::registration::{self, Registration};
use qfence_core::dry_run::MoveKind;
use qfence_core::{CoreError, Intent, IntentKind, Millis, Phase, PlanState, StoredPlanState};
use qfence_model::config::{PlanConfig, plan_api};
use qfence_model::{ControllerId, Generation, PlanId, SiteId, Verdict};
use serde_json::json;

use crate::RuntimeError;
use crate::auth::Caller;
use crate::backend::{Backend, BackendError, CheckedController, CheckedPlan};
use crate::dto::{
    CapabilityGrade, ConfirmFencedRequest, ControllerTest, ControllerView, DiscoveredResource,
    DryRun, DryRunResult, FailoverRequest, IssueDto, LeaderInfo, MaintenanceRequest,
    OperationAccepted, OrchestratorView, PauseRequest, PlanSource, PlanStatus, PlanView,
    RegistrationStep, RejoinRequest, SecretRefView, SiteRole, SiteStatus, StagedPlan,
    StatusResponse, SwitchoverRequest,
};
use crate::effective::{
    API_SOURCE, ApiControllerRecord, ApiPlanRecord, EffectiveConfig, StagedRecord,
};
use crate::engine::{Engine, site_verdicts};
use crate::events::{EventKind, EventPage, EventQuery, NewEvent};
use crate::metrics::Direction;
use crate::shared::{Inner, PLAN_STATE_SCHEMA};

mod calls;
mod controllers;
mod forwarded;
mod intents;
mod plan_checks;
mod plans;
mod status;

use calls::REGISTRATION_TIMEOUT;
use forwarded::{ApiWrite, CheckedWrite, WriteServer};

/// The real backend.
#[derive(Debug, Clone)]
pub struct RuntimeBackend {
    inner: Arc<Inner>,
    secrets: SecretStore,
}

/// What a change to a plan of the configuration file is answered.
fn file_owned(plan: &PlanId) -> BackendError {
    BackendError::Conflict(format!(
        "plan {plan} comes from the configuration file; change it there (and restart the \
         orchestrators), or create a plan through the API to manage it here"
    ))
}

impl RuntimeBackend {
    /// A backend over `engine` (and its effective configuration).
    /// It also takes, when its node leads, the writes followers forward (ADR 0024).
    pub fn new(engine: &Engine, secrets: SecretStore) -> Self {
        engine.inner.node.set_write_handler(Arc::new(WriteServer {
            inner: Arc::downgrade(&engine.inner),
            secrets: secrets.clone(),
        }));
        Self {
            inner: engine.inner.clone(),
            secrets,
        }
    }

    /// The effective configuration, rebuilt first if the API's replicated entries changed
    /// (so a follower answers with what the leader just wrote).
    fn cfg(&self) -> Arc<EffectiveConfig> {
        self.inner.cell.refresh()
    }

    fn plan_config(&self, plan: &PlanId) -> Result<PlanConfig, BackendError> {
        self.cfg()
            .plan(plan.as_str())
            .cloned()
            .ok_or_else(|| not_found("plan", plan.as_str()))
    }

    fn state(&self, plan: &PlanId) -> Result<PlanState, BackendError> {
        let cfg = self.plan_config(plan)?;
        Ok(self
            .inner
            .plan_state(plan)
            .map_err(unavailable)?
            .unwrap_or_else(|| PlanState::initial(&cfg)))
    }

    /// The API's record of `plan`, for a change to it: `Conflict` for a plan of the file,
    /// `NotFound` for none. A plan the API created that no longer validates (left out of the
    /// effective configuration) still has its record, so it can be fixed or deleted.
    fn api_plan(&self, plan: &PlanId) -> Result<ApiPlanRecord, BackendError> {
        let cfg = self.cfg();
        let record = self
            .inner
            .node
            .read(|s| s.plans.get(plan).map(|r| r.config.clone()));
        let in_force = cfg.plan(plan.as_str()).is_some();
        if in_force && !cfg.plan_is_api(plan) {
            return Err(file_owned(plan));
        }
        record
            .as_ref()
            .and_then(ApiPlanRecord::read)
            .ok_or_else(|| not_found("plan", plan.as_str()))
    }

    /// The replicated state of a plan the API may change.
    fn replicated_state(&self, plan: &PlanId) -> Result<PlanState, BackendError> {
        self.inner
            .plan_state(plan)
            .map_err(unavailable)?
            .ok_or_else(|| not_found("plan", plan.as_str()))
    }

    /// Writes a plan's API record (and with `next`, its state at the next generation) as one
    /// compare-and-set on `expected`.
    async fn write_plan_record(
        &self,
        plan: &PlanId,
        expected: Generation,
        record: &ApiPlanRecord,
        next: Option<&PlanState>,
    ) -> Result<(), BackendError> {
        let config =
            serde_json::to_value(record).map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let new_state = next.map(|n| encode_state(plan, n)).transpose()?;
        let response = self
            .inner
            .node
            .write(ClusterCommand::ApplyPlanConfig {
                plan: plan.clone(),
                expected_generation: expected,
                config,
                new_state,
            })
            .await
            .map_err(|e| map_err(plan, e.into()))?;
        written(plan, expected, response)
    }

    /// Makes the configuration take the change now rather than at the next tick, then
    /// forgets what the runtime read about `plan` under the previous one, so its bindings
    /// start unread. In that order: a result the executor files after the reset is judged
    /// against the new configuration (see the executor's `file`).
    fn reconfigured(&self, plan: &PlanId) {
        self.cfg();
        self.inner
            .runtime()
            .entry(plan.clone())
            .or_default()
            .reset();
        self.inner.wake.notify_one();
    }

    /// What applying the staged change would do: validated again, owner kept, generation on.
    fn dry_run_apply(
        &self,
        name: &PlanId,
        state: &PlanState,
    ) -> Result<DryRunResult, BackendError> {
        let record = self.api_plan(name)?;
        let Some(staged) = record.staged else {
            return Err(BackendError::Conflict(format!(
                "plan {name:?} has no staged change"
            )));
        };
        let result = |reason: String, commands: Vec<String>, refused: bool| DryRunResult {
            plan: name.to_string(),
            generation: state.generation.0,
            reason,
            commands,
            refused,
        };
        if staged.base_generation != state.generation.0 {
            return Ok(result(
                format!(
                    "refused: the change was staged on generation {}, the plan is at {}",
                    staged.base_generation, state.generation
                ),
                Vec::new(),
                true,
            ));
        }
        Ok(
            match plan_api::check_plan(&self.cfg().text, name.as_str(), &staged.spec) {
                Err(issues) => result(
                    format!(
                        "refused: the staged change no longer validates ({} issue(s))",
                        issues.iter().filter(|i| i.is_error()).count()
                    ),
                    Vec::new(),
                    true,
                ),
                Ok(c) if c.value.instance(&state.owner).is_none() => result(
                    format!(
                        "refused: the staged change removes the owner {}",
                        state.owner
                    ),
                    Vec::new(),
                    true,
                ),
                Ok(_) => result(
                    format!(
                        "applying would move plan {name} to generation {}",
                        state.generation.next()
                    ),
                    vec![format!(
                        "replace plan {name} (staged by {})",
                        staged.staged_by
                    )],
                    false,
                ),
            },
        )
    }

    /// The view of a plan the API manages, even when it is not in force (it no longer
    /// validates): then from its record and replicated state.
    fn api_plan_view(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        let cfg = self.cfg();
        if cfg.plan(name.as_str()).is_some() {
            return self.plan_view(&cfg, name);
        }
        let record = self.api_plan(name)?;
        let state = self.replicated_state(name)?;
        Ok(PlanView {
            name: name.to_string(),
            generation: state.generation.0,
            spec: record.spec,
            paused: state.paused,
            staged: record.staged.map(staged_view),
            source: PlanSource::Api,
            maintenance: maintenance(&state),
        })
    }

    fn plan_view(&self, cfg: &EffectiveConfig, name: &PlanId) -> Result<PlanView, BackendError> {
        let plan = cfg
            .plan(name.as_str())
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        let state = self
            .inner
            .plan_state(name)
            .map_err(unavailable)?
            .unwrap_or_else(|| PlanState::initial(plan));
        let record = cfg
            .plan_is_api(name)
            .then(|| {
                self.inner.node.read(|s| {
                    s.plans
                        .get(name)
                        .and_then(|r| ApiPlanRecord::read(&r.config))
                })
            })
            .flatten();
        Ok(match record {
            Some(r) => PlanView {
                name: name.to_string(),
                generation: state.generation.0,
                spec: r.spec,
                paused: state.paused,
                staged: r.staged.map(staged_view),
                source: PlanSource::Api,
                maintenance: maintenance(&state),
            },
            // The file's plans are shown as a summary: the file has the whole text.
            None => PlanView {
                name: name.to_string(),
                generation: state.generation.0,
                spec: json!({
                    "owner": plan.owner,
                    "interval_seconds": plan.interval.as_secs(),
                    "sites": plan.sites().collect::<Vec<_>>(),
                    "current_owner": state.owner,
                }),
                paused: state.paused,
                staged: None,
                source: PlanSource::File,
                maintenance: maintenance(&state),
            },
        })
    }

    fn site(&self, plan: &PlanId, site: &str) -> Result<SiteId, BackendError> {
        let cfg = self.plan_config(plan)?;
        cfg.sites()
            .find(|s| s.as_str() == site)
            .cloned()
            .ok_or_else(|| BackendError::Invalid {
                message: format!(
                    "site {site:?} is not one of plan {:?}'s sites: {}",
                    plan.as_str(),
                    cfg.sites()
                        .map(SiteId::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                issues: Vec::new(),
            })
    }

    async fn leader_info(&self) -> LeaderInfo {
        let node = &self.inner.node;
        let leader = node.leader();
        let address = leader.as_ref().and_then(|l| {
            node.status()
                .members
                .into_iter()
                .find(|m| &m.name == l)
                .map(|m| m.address)
        });
        LeaderInfo {
            term: node.term().0,
            is_self: leader.as_ref() == Some(&self.inner.me),
            leader: leader.map(|l| l.to_string()),
            address,
            orchestrator: self.inner.me.to_string(),
        }
    }

    async fn write_guard(&self) -> Result<(), BackendError> {
        if self.inner.node.leadership().await.is_ok() {
            Ok(())
        } else {
            Err(BackendError::NotLeader {
                leader: Some(self.leader_info().await),
            })
        }
    }

    /// Records an operator's intent in the replicated state, if the plan is still at
    /// `expected`, and wakes the engine.
    async fn intend(
        &self,
        caller: &Caller,
        plan: &PlanId,
        expected: Option<u64>,
        kind: IntentKind,
        why: String,
        operation: &str,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard().await?;
        let at = self.inner.clock.now();
        let current = self.state(plan)?.generation;
        let generation = expected.map_or(current, Generation);
        let intent = Intent {
            kind: kind.clone(),
            generation,
            by: caller.name.clone(),
            why: why.clone(),
            at,
        };
        let next = self
            .inner
            .update(plan, Some(generation), |s| s.intents.push(intent))
            .await
            .map_err(|e| map_err(plan, e))?;
        self.inner.record(
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("{operation} of {plan} requested: {why}"),
            )
            .plan(plan.as_str())
            .generation(next.generation.0)
            .data(json!({"intent": kind})),
        );
        self.inner.wake_all();
        Ok(OperationAccepted {
            plan: plan.to_string(),
            operation: operation.to_owned(),
            generation: next.generation.0,
            reason: format!("{operation} recorded; the next cycle acts on it"),
        })
    }

    fn refuse_owner(&self, plan: &PlanId, target: &SiteId) -> Result<(), BackendError> {
        let state = self.state(plan)?;
        if state.owner == *target {
            return Err(BackendError::Refused(format!(
                "{target} already owns plan {plan}"
            )));
        }
        if state.in_maintenance(target) {
            return Err(BackendError::Refused(format!(
                "{target} is in maintenance for plan {plan}: take it out of maintenance first"
            )));
        }
        Ok(())
    }
}

/// The sites of a plan in maintenance, as the views list them.
fn maintenance(state: &PlanState) -> Vec<String> {
    state.maintenance.iter().map(|s| s.to_string()).collect()
}

fn not_found(what: &'static str, name: &str) -> BackendError {
    BackendError::NotFound {
        what,
        name: name.to_owned(),
    }
}

fn controller_view(
    id: &ControllerId,
    c: &qfence_model::config::ControllerConfig,
) -> ControllerView {
    ControllerView {
        name: id.to_string(),
        controller_type: c.controller_type().as_str().to_owned(),
        site: c.site.to_string(),
        reach: c.reach.iter().map(ToString::to_string).collect(),
        secret: c.secret.as_ref().map(|s| s.as_str().to_owned()),
        grades: Vec::new(),
        tested_at_ms: None,
        identity: None,
    }
}

fn map_err_cluster(e: qfence_cluster::ClusterError) -> BackendError {
    match e {
        qfence_cluster::ClusterError::NotLeader { .. } => BackendError::NotLeader { leader: None },
        other => BackendError::Unavailable(other.to_string()),
    }
}

fn staged_view(s: StagedRecord) -> StagedPlan {
    StagedPlan {
        spec: s.spec,
        base_generation: s.base_generation,
        staged_by: s.staged_by,
        warnings: s.warnings,
        staged_at_ms: Some(s.staged_at_ms),
    }
}

fn encode_state(plan: &PlanId, state: &PlanState) -> Result<PlanStateDoc, BackendError> {
    PlanStateDoc::encode(
        PLAN_STATE_SCHEMA,
        state.generation,
        &StoredPlanState::from(state.clone()),
    )
    .map_err(|e| BackendError::Unavailable(format!("plan {plan}: {e}")))
}

/// What the cluster's answer to a compare-and-set write means to the API.
fn written(plan: &PlanId, expected: Generation, response: Response) -> Result<(), BackendError> {
    match response {
        Response::Applied => Ok(()),
        Response::Conflict { current, .. } => Err(BackendError::StaleGeneration {
            plan: plan.to_string(),
            expected: expected.0,
            current: current.0,
        }),
        Response::Rejected { reason } => Err(BackendError::Conflict(reason)),
        Response::NoCommand => Err(BackendError::Unavailable(format!(
            "the cluster did not apply the change of plan {plan}"
        ))),
    }
}

fn unavailable(e: RuntimeError) -> BackendError {
    BackendError::Unavailable(e.to_string())
}

fn map_err(plan: &PlanId, e: RuntimeError) -> BackendError {
    match e {
        RuntimeError::Generation {
            expected, current, ..
        } => BackendError::StaleGeneration {
            plan: plan.to_string(),
            expected,
            current,
        },
        RuntimeError::Stale { .. } => BackendError::Conflict(e.to_string()),
        RuntimeError::Cluster(qfence_cluster::ClusterError::NotLeader { .. }) => {
            BackendError::NotLeader { leader: None }
        }
        other => BackendError::Unavailable(other.to_string()),
    }
}

/// The published sentence, said to be the leader's view as of when it saw it; a record from an
/// older term than the one this orchestrator knows is marked stale.
fn follower_reason(p: &PublishedStatus, term_now: u64) -> String {
    let at = Millis(p.status.at_unix_ms);
    let stale = if p.term.0 < term_now {
        format!(
            "; STALE: written in term {}, the cluster is in term {term_now}",
            p.term
        )
    } else {
        String::new()
    };
    format!(
        "{} [leader {}'s view as of {at}, term {}{stale}]",
        p.status.reason, p.status.by, p.term
    )
}

fn phase_name(state: &PlanState) -> String {
    match &state.phase {
        Phase::Steady => "steady".into(),
        Phase::Transition(t) => match &t.halted {
            Some(why) => format!("{} to {} halted: {why}", t.stage.as_str(), t.target),
            None => format!("{} to {}", t.stage.as_str(), t.target),
        },
    }
}

#[async_trait]
impl Backend for RuntimeBackend {
    async fn leader(&self) -> LeaderInfo {
        self.leader_info().await
    }

    async fn status(&self) -> Result<StatusResponse, BackendError> {
        status::status(self).await
    }

    async fn config_source(&self) -> Result<String, BackendError> {
        // The file's text with the API's controllers and plans: a new plan may bind a
        // controller registered a moment ago.
        Ok(self.cfg().text.clone())
    }

    async fn plans(&self) -> Result<Vec<PlanView>, BackendError> {
        plans::plans(self).await
    }

    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        plans::plan(self, name).await
    }

    async fn create_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_checked(caller, CheckedWrite::CreatePlan(plan))
            .await?
            .plan()
    }

    async fn stage_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_checked(caller, CheckedWrite::StagePlan(plan))
            .await?
            .plan()
    }

    async fn discard_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
    ) -> Result<PlanView, BackendError> {
        self.write(caller, ApiWrite::DiscardStaged { name: name.clone() })
            .await?
            .plan()
    }

    async fn apply_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<PlanView, BackendError> {
        let write = ApiWrite::ApplyStaged {
            name: name.clone(),
            expected,
        };
        self.write(caller, write).await?.plan()
    }

    async fn delete_plan(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<(), BackendError> {
        let write = ApiWrite::DeletePlan {
            name: name.clone(),
            expected,
        };
        self.write(caller, write).await?.deleted()
    }

    async fn dry_run(&self, name: &PlanId, what: &DryRun) -> Result<DryRunResult, BackendError> {
        plans::dry_run(self, name, what).await
    }

    async fn controllers(&self) -> Result<Vec<ControllerView>, BackendError> {
        controllers::controllers(self).await
    }

    async fn register_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerView, BackendError> {
        self.write_checked(caller, CheckedWrite::RegisterController(c))
            .await?
            .controller()
    }

    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError> {
        // A test runs where it is asked, from this site when allowed (ADR 0024).
        controllers::test_controller(self, caller, name).await
    }

    async fn probe_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerTest, BackendError> {
        controllers::probe_controller(self, caller, c).await
    }

    async fn discover(
        &self,
        controller: &ControllerId,
    ) -> Result<Vec<DiscoveredResource>, BackendError> {
        controllers::discover(self, controller).await
    }

    async fn switchover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &SwitchoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::Switchover {
            plan: plan.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn failover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &FailoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::Failover {
            plan: plan.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn confirm_fenced(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &ConfirmFencedRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::ConfirmFenced {
            plan: plan.clone(),
            site: site.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn rejoin(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &RejoinRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::Rejoin {
            plan: plan.clone(),
            site: site.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn pause(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::Pause {
            plan: plan.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn resume(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::Resume {
            plan: plan.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    /// A compare-and-set on the generation the operator saw, checked by the core's own rule
    /// (`PlanState::with_maintenance`) on the state read under the write lock, so a move that
    /// started meanwhile is seen. The generation does not change: no owner changes.
    async fn set_maintenance(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &MaintenanceRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let write = ApiWrite::SetMaintenance {
            plan: plan.clone(),
            site: site.clone(),
            req: req.clone(),
        };
        self.write(caller, write).await?.accepted()
    }

    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError> {
        status::secrets(self).await
    }

    async fn events(&self, query: &EventQuery) -> Result<EventPage, BackendError> {
        status::events(self, query).await
    }

    async fn orchestrators(&self) -> Result<Vec<OrchestratorView>, BackendError> {
        status::orchestrators(self).await
    }

    async fn instance_ha(&self) -> Result<crate::dto::InstanceHaStatus, BackendError> {
        let config = self.cfg();
        let mut clouds = Vec::new();
        for (id, cloud) in &config.config().instance_ha {
            let state = crate::instance_ha::read_state(&self.inner, id)
                .map_err(|e| BackendError::Unavailable(e.to_string()))?
                .unwrap_or_default();
            let shown = crate::shared::lock(&self.inner.instance_ha)
                .get(id)
                .cloned();
            clouds.push(crate::instance_ha::view::cloud_status(
                id,
                (cloud.nova.as_str(), cloud.disabled),
                &state,
                shown.as_ref(),
            ));
        }
        Ok(crate::dto::InstanceHaStatus { clouds })
    }
}

/// Why no failover target can be named: no other site, or every other one in maintenance.
fn no_target(plan: &PlanId, state: &PlanState) -> BackendError {
    if state.maintenance.is_empty() {
        BackendError::Refused("no other site to fail over to".into())
    } else {
        let names: Vec<String> = state.maintenance.iter().map(ToString::to_string).collect();
        BackendError::Refused(format!(
            "no site to fail over to for plan {plan}: {} in maintenance",
            names.join(", ")
        ))
    }
}
