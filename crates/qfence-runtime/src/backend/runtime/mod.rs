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
use qfence_core::dry_run::{MoveKind, dry_run};
use qfence_core::{CoreError, Intent, IntentKind, Millis, Phase, PlanState, StoredPlanState};
use qfence_model::config::{PlanConfig, plan_api};
use qfence_model::{ControllerId, Generation, PlanId, SiteId, Verdict};
use serde_json::json;

use super::RuntimeError;
use super::effective::{
    API_SOURCE, ApiControllerRecord, ApiPlanRecord, EffectiveConfig, StagedRecord,
};
use super::engine::{Engine, Inner, PLAN_STATE_SCHEMA, site_verdicts};
use crate::auth::Caller;
use crate::backend::{Backend, BackendError, CheckedController, CheckedPlan};
use crate::dto::{
    CapabilityGrade, ConfirmFencedRequest, ControllerTest, ControllerView, DiscoveredResource,
    DryRun, DryRunResult, FailoverRequest, IssueDto, LeaderInfo, MaintenanceRequest,
    OperationAccepted, OrchestratorView, PauseRequest, PlanSource, PlanStatus, PlanView,
    RegistrationStep, SecretRefView, SiteRole, SiteStatus, StagedPlan, StatusResponse,
    SwitchoverRequest,
};
use crate::events::{EventKind, EventPage, EventQuery, NewEvent};
use crate::metrics::Direction;

mod plan_checks;

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
    pub fn new(engine: &Engine, secrets: SecretStore) -> Self {
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

impl RuntimeBackend {
    /// Runs the registration check of `name` where routing says its calls run, so what it
    /// proves is the path a fence will take (issue 4, item 3), and says how it got there.
    ///
    /// The rule is [`routing::route`] seen from the orchestrator that received the request:
    /// it runs the check itself when its site is the controller's own or in its reach, and
    /// otherwise forwards it to an orchestrator at an allowed site, preferring the
    /// controller's own site. So `bmc-dc1` (dc1, reach dc2) asked at dc2-a runs at dc2-a:
    /// reach is what lets dc2's leader fence dc1's host once dc1 is lost, which is when that
    /// fence matters, so that is the path worth proving. Only the leader can sign a forward:
    /// the leader sends the check through [`ClusterNode::call`] exactly like an executor
    /// call (signed, with its term, refused from a deposed leader); a follower whose own site
    /// is not allowed answers `not_leader` naming the leader, and never runs the check
    /// from the wrong site.
    ///
    /// [`ClusterNode::call`]: qfence_cluster::node::ClusterNode::call
    async fn route_registration(
        &self,
        name: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
    ) -> Result<(Report, String), BackendError> {
        let known = self.inner.registered().identities().clone();
        let mut call = Call::register(config.site.clone(), REGISTRATION_TIMEOUT);
        call.known = known.clone();
        let (value, how) = self
            .route_call(name, config, call, "registration check", || async {
                let config = self.cfg();
                let report = registration::register(Registration {
                    config: &config,
                    controller: name,
                    orchestrator: &self.inner.me,
                    secrets: &self.secrets,
                    known: &known,
                    timeout: REGISTRATION_TIMEOUT,
                })
                .await;
                Ok(Answer::Report(Box::new(report)))
            })
            .await?;
        let Answer::Report(report) = value else {
            return Err(BackendError::Unavailable(format!(
                "the registration check of {name} came back as {}",
                value.kind()
            )));
        };
        Ok((*report, how))
    }

    /// Runs `call` on controller `name` where routing says (see [`Self::route_registration`]
    /// for the rule): through the cluster on the leader, or `local` here on a follower whose
    /// site may call the controller. Returns the answer and how it got there.
    async fn route_call<F, Fut>(
        &self,
        name: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
        call: Call,
        what: &str,
        local: F,
    ) -> Result<(Answer, String), BackendError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Answer, String>>,
    {
        let inner = &self.inner;
        if inner.node.leadership().await.is_ok() {
            // A forwarded hop needs its round trip on top of the check's own deadline.
            let outer = REGISTRATION_TIMEOUT + Duration::from_secs(5);
            let outcome = tokio::time::timeout(outer, inner.node.call(name, None, &call))
                .await
                .map_err(|_| {
                    BackendError::Unavailable(format!(
                        "the {what} of {name} did not answer within {outer:?}"
                    ))
                })?;
            return match outcome {
                CallOutcome::Done { by, result } => {
                    let how = if by == inner.me {
                        "here: this leader's site may call it".to_owned()
                    } else {
                        inner.metrics.forwarded(Direction::Sent);
                        format!("forwarded by the leader {} to {by}", inner.me)
                    };
                    Ok((result, how))
                }
                CallOutcome::Refused { by, refusal } => {
                    inner.metrics.forward_refusal(&format!("{refusal:?}"));
                    Err(BackendError::Unavailable(format!(
                        "{by} refused the {what} of {name}: {refusal:?}"
                    )))
                }
                CallOutcome::Unknown { reason, .. } => Err(BackendError::Unavailable(format!(
                    "the {what} of {name} was not run: {reason}"
                ))),
            };
        }
        match routing::route(
            &Placement::from(config),
            &inner.node.candidates(),
            &inner.me,
        ) {
            Route::Local => {
                let value = local().await.map_err(|e| {
                    BackendError::Unavailable(format!("the {what} of {name} failed here: {e}"))
                })?;
                Ok((value, "here: this site may call it".to_owned()))
            }
            Route::Forward { .. } | Route::Unreachable { .. } => Err(BackendError::NotLeader {
                leader: Some(self.leader_info().await),
            }),
        }
    }
}

/// The API's view of a registration report.
fn controller_test(
    name: &ControllerId,
    report: &Report,
    how: &str,
    mut warnings: Vec<String>,
) -> ControllerTest {
    let steps: Vec<RegistrationStep> = report
        .steps
        .iter()
        .map(|s| RegistrationStep {
            number: s.number,
            name: s.name.clone(),
            status: s.status.as_str().to_owned(),
            notes: s.notes.clone(),
        })
        .collect();
    let summary = steps
        .iter()
        .map(|s| {
            format!(
                "{}. {}: {} {}",
                s.number,
                s.name,
                s.status,
                s.notes.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    warnings.extend(report.warnings.iter().cloned());
    ControllerTest {
        controller: name.to_string(),
        reachable: report.identity.is_some(),
        identity: report.identity.as_ref().map(|i| i.id.clone()),
        grades: report
            .grades
            .iter()
            .map(|g| CapabilityGrade {
                capability: g.capability.clone(),
                grade: g.grade.into(),
                detail: g.reason.clone(),
            })
            .collect(),
        message: format!("Run by {} ({how}). {summary}", report.orchestrator),
        tls_fingerprint: report
            .identity
            .as_ref()
            .and_then(|i| i.tls_fingerprint.clone()),
        facts: report
            .identity
            .as_ref()
            .map(|i| i.facts.clone())
            .unwrap_or_default(),
        warnings,
        steps,
    }
}

/// How long a registration check may take at the orchestrator that runs it.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);

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
        let leader = self.leader_info().await;
        let now = self.inner.clock.now();
        // A follower reads nothing itself: it shows what the leader last published.
        let published = (!leader.is_self).then(|| self.inner.node.read(|s| s.statuses.clone()));
        let mut plans = Vec::new();
        let config = self.cfg();
        let registered = self.inner.registered();
        for (id, cfg) in config.plans() {
            let state = self.state(id)?;
            let (verdicts, last_reason) = match &published {
                None => {
                    let view = self.inner.runtime().get(id).cloned().unwrap_or_default();
                    let verdicts = site_verdicts(&config, cfg, &state, &view, now);
                    (verdicts, view.last_reason.unwrap_or_default())
                }
                Some(all) => match all.get(id) {
                    Some(p) => (p.status.sites.clone(), follower_reason(p, leader.term)),
                    None => (
                        cfg.sites()
                            .map(|site| SiteVerdict {
                                site: site.clone(),
                                verdict: Verdict::Unknown,
                                checked_at_ms: None,
                            })
                            .collect(),
                        format!(
                            "no status published by a leader yet (this is {}, a follower in term {})",
                            self.inner.me, leader.term
                        ),
                    ),
                },
            };
            let sites = cfg
                .sites()
                .map(|site| {
                    let v = verdicts.iter().find(|v| v.site == *site);
                    SiteStatus {
                        site: site.to_string(),
                        role: if *site == state.owner {
                            SiteRole::Owner
                        } else {
                            SiteRole::Standby
                        },
                        // A site the record does not name was not seen: UNKNOWN, never FENCED.
                        verdict: v.map_or(Verdict::Unknown, |v| v.verdict).into(),
                        checked_at_ms: v.and_then(|v| v.checked_at_ms),
                        maintenance: state.in_maintenance(site),
                    }
                })
                .collect();
            plans.push(PlanStatus {
                plan: id.to_string(),
                owner: state.owner.to_string(),
                generation: state.generation.0,
                paused: state.paused,
                phase: phase_name(&state),
                last_reason,
                sites,
                unworkable: registered.unworkable(id, cfg),
            });
        }
        Ok(StatusResponse { leader, plans })
    }

    async fn config_source(&self) -> Result<String, BackendError> {
        // The file's text with the API's controllers and plans: a new plan may bind a
        // controller registered a moment ago.
        Ok(self.cfg().text.clone())
    }

    async fn plans(&self) -> Result<Vec<PlanView>, BackendError> {
        let cfg = self.cfg();
        let mut out = cfg
            .plans()
            .map(|(id, _)| self.plan_view(&cfg, id))
            .collect::<Result<Vec<_>, _>>()?;
        // Plans the API created that are not in force (they no longer validate) are listed
        // too, from their records, so an operator sees them and can fix or delete them.
        let left_out: Vec<PlanId> = self.inner.node.read(|s| {
            s.plans
                .iter()
                .filter(|(id, r)| {
                    cfg.plan(id.as_str()).is_none() && ApiPlanRecord::read(&r.config).is_some()
                })
                .map(|(id, _)| id.clone())
                .collect()
        });
        for id in left_out {
            out.push(self.api_plan_view(&id)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        let cfg = self.cfg();
        if cfg.plan(name.as_str()).is_some() {
            self.plan_view(&cfg, name)
        } else {
            self.api_plan_view(name)
        }
    }

    async fn create_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_guard().await?;
        let name = plan.name.clone();
        let plan = self.checked_against_registration(plan).await?;
        {
            // Plan writes one at a time on this leader: the name check and the write are one.
            let plan_lock = self.inner.write_lock(&name);
            let _one_writer = plan_lock.lock().await;
            let cfg = self.cfg();
            let known = self.inner.node.read(|s| s.plans.contains_key(&name));
            if cfg.plan(name.as_str()).is_some() || known {
                return Err(BackendError::Conflict(format!(
                    "plan {name:?} already exists; stage a change to it instead"
                )));
            }
            let initial = PlanState::initial(&plan.config);
            let record = ApiPlanRecord {
                source: API_SOURCE.to_owned(),
                spec: plan.spec.clone(),
                staged: None,
                created_by: caller.name.clone(),
            };
            let response = self
                .inner
                .node
                .write(ClusterCommand::CreatePlan {
                    plan: name.clone(),
                    config: serde_json::to_value(&record)
                        .map_err(|e| BackendError::Unavailable(e.to_string()))?,
                    initial_state: encode_state(&name, &initial)?,
                })
                .await
                .map_err(|e| map_err(&name, e.into()))?;
            written(&name, initial.generation, response)?;
        }
        self.reconfigured(&name);
        let cfg = self.cfg();
        if !cfg.plan_is_api(&name) {
            // Validated a moment ago against the same configuration; said rather than hidden.
            tracing::error!(plan = %name, "A plan created through the API is not in force: {:?}", cfg.dropped);
        }
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Created plan {name} (owner {})", plan.config.owner),
            )
            .plan(name.as_str())
            .generation(1)
            .data(json!({"spec": plan.spec, "warnings": plan.warnings.iter().map(IssueDto::from).collect::<Vec<_>>()})),
        );
        tracing::info!(plan = %name, owner = %plan.config.owner, by = %caller.name, "Created a plan through the API at generation 1");
        self.plan_view(&cfg, &name)
    }

    async fn stage_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_guard().await?;
        let name = plan.name.clone();
        // A plan of the file is refused before its bindings are asked about.
        self.api_plan(&name)?;
        let plan = self.checked_against_registration(plan).await?;
        let generation = {
            let plan_lock = self.inner.write_lock(&name);
            let _one_writer = plan_lock.lock().await;
            let mut record = self.api_plan(&name)?;
            let state = self.replicated_state(&name)?;
            record.staged = Some(StagedRecord {
                spec: plan.spec.clone(),
                base_generation: state.generation.0,
                staged_by: caller.name.clone(),
                staged_at_ms: self.inner.clock.now().0,
                warnings: plan.warnings.iter().map(IssueDto::from).collect(),
            });
            self.write_plan_record(&name, state.generation, &record, None)
                .await?;
            state.generation
        };
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Staged a change of plan {name} on generation {generation}"),
            )
            .plan(name.as_str())
            .generation(generation.0)
            .data(json!({"spec": plan.spec})),
        );
        self.api_plan_view(&name)
    }

    async fn discard_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
    ) -> Result<PlanView, BackendError> {
        self.write_guard().await?;
        let generation = {
            let plan_lock = self.inner.write_lock(name);
            let _one_writer = plan_lock.lock().await;
            let mut record = self.api_plan(name)?;
            if record.staged.take().is_none() {
                return Err(BackendError::Conflict(format!(
                    "plan {name:?} has no staged change"
                )));
            }
            let state = self.replicated_state(name)?;
            self.write_plan_record(name, state.generation, &record, None)
                .await?;
            state.generation
        };
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Discarded the staged change of plan {name}"),
            )
            .plan(name.as_str())
            .generation(generation.0),
        );
        self.api_plan_view(name)
    }

    async fn apply_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<PlanView, BackendError> {
        self.write_guard().await?;
        let (from, to, by) = {
            let plan_lock = self.inner.write_lock(name);
            let _one_writer = plan_lock.lock().await;
            let mut record = self.api_plan(name)?;
            let state = self.replicated_state(name)?;
            if state.generation.0 != expected {
                return Err(BackendError::StaleGeneration {
                    plan: name.to_string(),
                    expected,
                    current: state.generation.0,
                });
            }
            let Some(staged) = record.staged.take() else {
                return Err(BackendError::Conflict(format!(
                    "plan {name:?} has no staged change to apply"
                )));
            };
            if staged.base_generation != state.generation.0 {
                return Err(BackendError::Conflict(format!(
                    "the staged change of plan {name} was made on generation {}, the plan is at \
                     {}: stage it again",
                    staged.base_generation, state.generation
                )));
            }
            if let Some(t) = state.transition() {
                return Err(BackendError::Refused(format!(
                    "a {} of plan {name} to {} is under way: apply the change once it has ended",
                    t.stage.as_str(),
                    t.target
                )));
            }
            let checked = plan_api::check_plan(&self.cfg().text, name.as_str(), &staged.spec)
                .map_err(|issues| BackendError::Invalid {
                    message: format!(
                        "the staged change of plan {name} no longer validates; nothing was changed"
                    ),
                    issues,
                })?;
            let new = checked.value;
            // A capability may have been graded failed since the change was staged.
            self.refuse_failed_capabilities(name, &new)?;
            if new.instance(&state.owner).is_none() {
                return Err(BackendError::Refused(format!(
                    "the staged change removes the owner {} from plan {name}: switch over first",
                    state.owner
                )));
            }
            // The owner, its health and pause stay; the generation moves on, so whatever was
            // decided or forwarded on the old plan is refused; memories of sites the plan no
            // longer has go.
            let mut next = state.clone();
            next.generation = state.generation.next();
            next.revision = state.revision + 1;
            next.renewals_stopped
                .retain(|s, _| new.instance(s).is_some());
            next.dead_man_armed.retain(|s| new.instance(s).is_some());
            next.dead_man_verified
                .retain(|s, _| new.instance(s).is_some());
            next.dead_man_alarmed.retain(|s| new.instance(s).is_some());
            next.alarmed.retain(|s| new.instance(s).is_some());
            record.spec = staged.spec;
            self.write_plan_record(name, state.generation, &record, Some(&next))
                .await?;
            (state.generation, next.generation, staged.staged_by)
        };
        self.reconfigured(name);
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!(
                    "Applied the staged change of plan {name} (staged by {by}): generation {from} -> {to}"
                ),
            )
            .plan(name.as_str())
            .generation(to.0),
        );
        tracing::info!(plan = %name, generation = %to, by = %caller.name, "Applied a staged change of the plan");
        self.api_plan_view(name)
    }

    async fn delete_plan(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<(), BackendError> {
        self.write_guard().await?;
        {
            let plan_lock = self.inner.write_lock(name);
            let _one_writer = plan_lock.lock().await;
            self.api_plan(name)?;
            let state = self.replicated_state(name)?;
            if state.generation.0 != expected {
                return Err(BackendError::StaleGeneration {
                    plan: name.to_string(),
                    expected,
                    current: state.generation.0,
                });
            }
            // The engine commits transitions under the same lock, so none can start between
            // this look and the write.
            if let Some(t) = state.transition() {
                return Err(BackendError::Refused(format!(
                    "a {} of plan {name} to {} is under way: delete it once it has ended",
                    t.stage.as_str(),
                    t.target
                )));
            }
            let response = self
                .inner
                .node
                .write(ClusterCommand::RemovePlan {
                    plan: name.clone(),
                    expected_generation: state.generation,
                })
                .await
                .map_err(|e| map_err(name, e.into()))?;
            written(name, state.generation, response)?;
        }
        self.reconfigured(name);
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Deleted plan {name} at generation {expected}"),
            )
            .plan(name.as_str())
            .generation(expected),
        );
        tracing::info!(plan = %name, generation = expected, by = %caller.name, "Deleted a plan created through the API");
        Ok(())
    }

    async fn dry_run(&self, name: &PlanId, what: &DryRun) -> Result<DryRunResult, BackendError> {
        let cfg = self.plan_config(name)?;
        let state = self.state(name)?;
        let (kind, target) = match what {
            DryRun::Cycle => {
                let view = self.inner.runtime().get(name).cloned().unwrap_or_default();
                return Ok(DryRunResult {
                    plan: name.to_string(),
                    generation: state.generation.0,
                    reason: view.last_reason.unwrap_or_else(|| "no decision yet".into()),
                    commands: Vec::new(),
                    refused: false,
                });
            }
            DryRun::ApplyStaged => return self.dry_run_apply(name, &state),
            DryRun::Switchover { target } => (MoveKind::Switchover, self.site(name, target)?),
            DryRun::Failover { target: Some(t) } => (MoveKind::Failover, self.site(name, t)?),
            DryRun::Failover { target: None } => (
                MoveKind::Failover,
                qfence_core::failover_order(&cfg, &state)
                    .candidates
                    .first()
                    .cloned()
                    .ok_or_else(|| no_target(name, &state))?,
            ),
        };
        if state.in_maintenance(&target) {
            return Ok(DryRunResult {
                plan: name.to_string(),
                generation: state.generation.0,
                reason: format!(
                    "refused: {target} is in maintenance for {name}: take it out of maintenance first"
                ),
                commands: Vec::new(),
                refused: true,
            });
        }
        if target == state.owner {
            return Ok(DryRunResult {
                plan: name.to_string(),
                generation: state.generation.0,
                reason: format!("refused: {target} already owns {name}"),
                commands: Vec::new(),
                refused: true,
            });
        }
        let r = dry_run(
            &self.cfg(),
            name.as_str(),
            &BTreeMap::new(),
            target.as_str(),
            kind,
        )
        .map_err(|e| BackendError::Refused(e.to_string()))?;
        Ok(DryRunResult {
            plan: name.to_string(),
            generation: state.generation.0,
            reason: r.outcome.clone(),
            commands: r.lines(),
            refused: !r.completes,
        })
    }

    async fn controllers(&self) -> Result<Vec<ControllerView>, BackendError> {
        let tests = self.inner.node.read(|s| s.controller_tests.clone());
        Ok(self
            .cfg()
            .config()
            .controllers
            .iter()
            .map(|(id, c)| {
                let mut v = controller_view(id, c);
                if let Some(t) = tests.get(id) {
                    // A record this build cannot read shows as untested rather than failing
                    // the list.
                    v.grades = serde_json::from_value(t.grades.clone()).unwrap_or_default();
                    v.tested_at_ms = Some(t.at_unix_ms);
                    v.identity.clone_from(&t.identity);
                }
                v
            })
            .collect())
    }

    async fn register_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerView, BackendError> {
        self.write_guard().await?;
        let name = c.name.clone();
        {
            let _one_writer = self.inner.controller_lock.lock().await;
            let known = self.inner.node.read(|s| s.controllers.contains_key(&name));
            if self.cfg().controller(name.as_str()).is_some() || known {
                return Err(BackendError::Conflict(format!(
                    "controller {:?} already exists",
                    name.as_str()
                )));
            }
            let record = ControllerRecord {
                id: name.clone(),
                site: c.config.site.clone(),
                reach: c.config.reach.clone(),
                // The spec as sent: secrets appear in it by reference only.
                config: serde_json::to_value(ApiControllerRecord {
                    source: API_SOURCE.to_owned(),
                    spec: c.spec.clone(),
                    registered_by: caller.name.clone(),
                })
                .map_err(|e| BackendError::Unavailable(e.to_string()))?,
            };
            self.inner
                .node
                .write(ClusterCommand::RegisterController { controller: record })
                .await
                .map_err(map_err_cluster)?;
        }
        let cfg = self.cfg();
        let Some(config) = cfg.controller(name.as_str()) else {
            return Err(BackendError::Unavailable(format!(
                "controller {name} was registered but is not in force: {}",
                cfg.dropped.join("; ")
            )));
        };
        self.inner.record(
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!(
                    "Registered controller {name} ({}, site {})",
                    config.controller_type(),
                    config.site
                ),
            )
            .data(json!({"controller": name, "spec": c.spec})),
        );
        tracing::info!(controller = %name, by = %caller.name, "Registered a controller through the API");
        Ok(controller_view(&name, config))
    }

    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError> {
        let cfg = self.cfg();
        let Some(config) = cfg.controller(name.as_str()) else {
            return Err(not_found("controller", name.as_str()));
        };
        let (report, how) = self.route_registration(name, config).await?;
        self.inner.record(
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Tested controller {name} at {}", report.orchestrator),
            )
            .data(json!({"passed": report.passed(), "by": report.orchestrator, "route": how})),
        );
        let pinned = self.inner.registered().identity(name).map(str::to_owned);
        let read = report.identity.as_ref().map(|i| i.id.clone());
        let mut warnings = Vec::new();
        if let (Some(old), Some(new)) = (&pinned, &read)
            && old != new
        {
            warnings.push(format!(
                "the identity changed: the previous test read {old}, this one {new}; this test \
                 pins {new}, and fences check it from now on"
            ));
        }
        let test = controller_test(name, &report, &how, warnings);
        // The grades go to the replicated state, so every orchestrator lists them. Only the
        // leader writes; a follower's test is answered but not kept.
        if self.inner.node.leadership().await.is_ok() {
            let record = ControllerTestRecord {
                at_unix_ms: self.inner.clock.now().0,
                by: report.orchestrator.clone(),
                grades: serde_json::to_value(&test.grades)
                    .map_err(|e| BackendError::Unavailable(e.to_string()))?,
                // A test that could not read the target keeps what was pinned before.
                identity: read.or(pinned),
            };
            let written = self
                .inner
                .node
                .write(ClusterCommand::RecordControllerTest {
                    controller: name.clone(),
                    test: record,
                })
                .await;
            if let Err(e) = written {
                tracing::warn!(controller = %name, error = %e, "Could not record the controller's grades");
            }
        }
        Ok(test)
    }

    async fn probe_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerTest, BackendError> {
        let cfg = self.cfg();
        if cfg.controller(c.name.as_str()).is_some() {
            return Err(BackendError::Conflict(format!(
                "controller {:?} is registered: test it (POST /api/v1/controllers/{}/test) \
                 instead of probing it",
                c.name.as_str(),
                c.name.as_str()
            )));
        }
        // The registration steps read the controller from a configuration: this one is the
        // configuration in force with the candidate added, validated again as a whole.
        let text = plan_api::with_entry(&cfg.text, "controllers", c.name.as_str(), &c.spec, true)
            .map_err(|issues| BackendError::Invalid {
            message: format!(
                "controller {:?} cannot be added to the configuration",
                c.name.as_str()
            ),
            issues,
        })?;
        let loaded =
            qfence_model::config::load_str(&text, "the configuration").map_err(|issues| {
                BackendError::Invalid {
                    message: format!("controller {:?} is not valid", c.name.as_str()),
                    issues,
                }
            })?;
        // An unregistered controller has no record in the cluster, so no other orchestrator
        // may be asked to call it: the probe runs here, from a site allowed to call it, or not
        // at all.
        let allowed: Vec<String> = c.config.allowed_sites().map(ToString::to_string).collect();
        if !matches!(
            routing::route(
                &Placement::from(&c.config),
                &self.inner.node.candidates(),
                &self.inner.me
            ),
            Route::Local
        ) {
            return Err(BackendError::Refused(format!(
                "orchestrator {} may not call controller {} (allowed sites: {}): send the probe \
                 to an orchestrator at one of those sites, or register the controller and test it",
                self.inner.me,
                c.name,
                allowed.join(", ")
            )));
        }
        let known = self.inner.registered().identities().clone();
        let report = registration::register(Registration {
            config: &loaded.config,
            controller: &c.name,
            orchestrator: &self.inner.me,
            secrets: &self.secrets,
            known: &known,
            timeout: REGISTRATION_TIMEOUT,
        })
        .await;
        self.inner.record(
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!(
                    "Probed controller {} (not registered) at {}",
                    c.name, report.orchestrator
                ),
            )
            .data(
                json!({"passed": report.passed(), "by": report.orchestrator, "controller": c.name}),
            ),
        );
        let warnings = c
            .warnings
            .iter()
            .map(|i| format!("{}: {}", i.path, i.message))
            .collect();
        Ok(controller_test(
            &c.name,
            &report,
            "here: this site may call it",
            warnings,
        ))
    }

    async fn discover(
        &self,
        controller: &ControllerId,
    ) -> Result<Vec<DiscoveredResource>, BackendError> {
        let cfg = self.cfg();
        let Some(config) = cfg.controller(controller.as_str()) else {
            return Err(not_found("controller", controller.as_str()));
        };
        let call = Call::discover(config.site.clone(), REGISTRATION_TIMEOUT);
        let (value, _) = self
            .route_call(controller, config, call, "discovery", || async {
                let known = BTreeMap::new();
                let found = registration::discover(Registration {
                    config: &cfg,
                    controller,
                    orchestrator: &self.inner.me,
                    secrets: &self.secrets,
                    known: &known,
                    timeout: REGISTRATION_TIMEOUT,
                })
                .await?;
                Ok(Answer::Discovered(found))
            })
            .await?;
        let Answer::Discovered(found) = value else {
            return Err(BackendError::Unavailable(format!(
                "the discovery of {controller} came back as {}",
                value.kind()
            )));
        };
        Ok(found
            .into_iter()
            .map(|r| DiscoveredResource {
                capability: r.capability,
                resource: r.resource,
                description: r.description,
            })
            .collect())
    }

    async fn switchover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &SwitchoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let to = self.site(plan, &req.target)?;
        self.refuse_owner(plan, &to)?;
        let why = req
            .reason
            .clone()
            .unwrap_or_else(|| "planned switchover".into());
        self.intend(
            caller,
            plan,
            Some(req.expected_generation),
            IntentKind::Switchover { to },
            why,
            "switchover",
        )
        .await
    }

    async fn failover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &FailoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let cfg = self.plan_config(plan)?;
        let state = self.state(plan)?;
        let to = match &req.target {
            Some(t) => self.site(plan, t)?,
            None => qfence_core::failover_order(&cfg, &state)
                .candidates
                .first()
                .cloned()
                .ok_or_else(|| no_target(plan, &state))?,
        };
        self.refuse_owner(plan, &to)?;
        let why = req
            .reason
            .clone()
            .unwrap_or_else(|| "operator failover".into());
        self.intend(
            caller,
            plan,
            Some(req.expected_generation),
            IntentKind::Failover { to },
            why,
            "failover",
        )
        .await
    }

    async fn confirm_fenced(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &ConfirmFencedRequest,
    ) -> Result<OperationAccepted, BackendError> {
        if self.plan_config(plan)?.instance(site).is_none() {
            return Err(not_found("site", site.as_str()));
        }
        self.intend(
            caller,
            plan,
            Some(req.expected_generation),
            IntentKind::ConfirmFenced { site: site.clone() },
            req.reason.clone(),
            "confirm_fenced",
        )
        .await
    }

    async fn pause(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let why = req.reason.clone().unwrap_or_else(|| "paused".into());
        self.intend(caller, plan, None, IntentKind::Pause, why, "pause")
            .await
    }

    async fn resume(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        let why = req.reason.clone().unwrap_or_else(|| "resumed".into());
        self.intend(caller, plan, None, IntentKind::Resume, why, "resume")
            .await
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
        let cfg = self.plan_config(plan)?;
        if cfg.instance(site).is_none() {
            return Err(not_found("site", site.as_str()));
        }
        self.write_guard().await?;
        let on = req.enabled;
        let mut was = None;
        let next = self
            .inner
            .try_update(plan, Some(Generation(req.expected_generation)), |s| {
                was = Some(s.in_maintenance(site));
                *s = s
                    .with_maintenance(&cfg, plan.as_str(), site, on)
                    .map_err(|source| RuntimeError::Stale {
                        plan: plan.to_string(),
                        source,
                    })?;
                Ok(())
            })
            .await
            .map_err(|e| match e {
                RuntimeError::Stale {
                    source: CoreError::MaintenanceRefused(why),
                    ..
                } => BackendError::Refused(why),
                e => map_err(plan, e),
            })?;
        let state = if on { "in" } else { "out of" };
        let changed = was != Some(on);
        let why = req.reason.clone().unwrap_or_default();
        let what = if changed {
            format!("{site} {state} maintenance for {plan}")
        } else {
            format!("{site} already {state} maintenance for {plan}")
        };
        self.inner.record(
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                if why.is_empty() {
                    format!("{what}, set by {}", caller.name)
                } else {
                    format!("{what}, set by {}: {why}", caller.name)
                },
            )
            .plan(plan.as_str())
            .site(site.as_str())
            .generation(next.generation.0)
            .data(json!({"maintenance": on, "changed": changed, "reason": req.reason})),
        );
        // The next cycle's sentence says it.
        self.inner.wake.notify_one();
        Ok(OperationAccepted {
            plan: plan.to_string(),
            operation: "maintenance".to_owned(),
            generation: next.generation.0,
            reason: if on {
                format!(
                    "{what}: never failed or switched over to, checked without alarms until \
                     taken out"
                )
            } else {
                what
            },
        })
    }

    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError> {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, c) in &self.cfg().config().controllers {
            if let Some(s) = &c.secret {
                by.entry(s.as_str().to_owned())
                    .or_default()
                    .push(id.to_string());
            }
        }
        Ok(by
            .into_iter()
            .map(|(name, used_by)| SecretRefView { name, used_by })
            .collect())
    }

    async fn events(&self, query: &EventQuery) -> Result<EventPage, BackendError> {
        Ok(self
            .inner
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .query(query))
    }

    async fn orchestrators(&self) -> Result<Vec<OrchestratorView>, BackendError> {
        let status = self.inner.node.status();
        Ok(status
            .members
            .into_iter()
            .map(|m| OrchestratorView {
                leader: status.leader.as_ref() == Some(&m.name),
                name: m.name.to_string(),
                site: m.site.to_string(),
                address: m.address,
                reachable: m.live.unwrap_or(m.name == status.name),
                last_seen_ms: None,
            })
            .collect())
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
