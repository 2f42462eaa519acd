//! The API's [`Backend`] over the running orchestrator: the engine's view, the cluster and the
//! event log. Operators' requests become intents in the replicated plan state; the core acts
//! on them at the next tick (which the write wakes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qfence_cluster::forward::CallOutcome;
use qfence_cluster::routing::{self, Placement, Route};
use qfence_cluster::state::{PublishedStatus, SiteVerdict};
use qfence_controllers::SecretStore;
use qfence_controllers::registration::{self, Registration};
use qfence_core::dry_run::{MoveKind, dry_run};
use qfence_core::{Intent, IntentKind, Millis, Phase, PlanState};
use qfence_model::config::plan_api;
use qfence_model::{ControllerId, Generation, PlanId, SiteId, Verdict};
use serde_json::json;

use super::RuntimeError;
use super::drivers::{WireCall, WireReport, WireResource};
use super::engine::{Engine, Inner, site_verdicts};
use crate::auth::Caller;
use crate::backend::{Backend, BackendError, CheckedController, CheckedPlan};
use crate::dto::{
    CapabilityGrade, ConfirmFencedRequest, ControllerTest, ControllerView, DiscoveredResource,
    DryRun, DryRunResult, FailoverRequest, LeaderInfo, MaintenanceRequest, OperationAccepted,
    OrchestratorView, PauseRequest, PlanStatus, PlanView, RegistrationStep, SecretRefView,
    SiteRole, SiteStatus, StatusResponse, SwitchoverRequest,
};
use crate::events::{EventKind, EventPage, EventQuery, NewEvent};
use crate::metrics::Direction;

/// The real backend.
#[derive(Debug, Clone)]
pub struct RuntimeBackend {
    inner: Arc<Inner>,
    /// The configuration file's text: what new plans and controllers are validated against.
    config_text: String,
    secrets: SecretStore,
}

const FILE_ONLY: &str = "plans and controllers come from the configuration file in this \
    version: edit the file, validate it (qfence config validate) and restart the orchestrators";

impl RuntimeBackend {
    /// A backend over `engine`.
    pub fn new(engine: &Engine, config_text: String, secrets: SecretStore) -> Self {
        Self {
            inner: engine.inner.clone(),
            config_text,
            secrets,
        }
    }

    fn plan_config(
        &self,
        plan: &PlanId,
    ) -> Result<&qfence_model::config::PlanConfig, BackendError> {
        self.inner
            .config
            .plan(plan.as_str())
            .ok_or_else(|| not_found("plan", plan.as_str()))
    }

    fn state(&self, plan: &PlanId) -> Result<PlanState, BackendError> {
        let cfg = self.plan_config(plan)?;
        Ok(self
            .inner
            .plan_state(plan)
            .map_err(unavailable)?
            .unwrap_or_else(|| PlanState::initial(cfg)))
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
        self.inner.wake.notify_one();
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
    ) -> Result<(WireReport, String), BackendError> {
        let call = WireCall::register(config.site.clone(), REGISTRATION_TIMEOUT);
        let (value, how) = self
            .route_call(name, config, call, "registration check", || async {
                let known = BTreeMap::new();
                let report = registration::register(Registration {
                    config: &self.inner.config,
                    controller: name,
                    orchestrator: &self.inner.me,
                    secrets: &self.secrets,
                    known: &known,
                    timeout: REGISTRATION_TIMEOUT,
                })
                .await;
                serde_json::to_value(&report).map_err(|e| e.to_string())
            })
            .await?;
        let report: WireReport = serde_json::from_value(value).map_err(|e| {
            BackendError::Unavailable(format!(
                "the registration check of {name} came back unreadable: {e}"
            ))
        })?;
        Ok((report, how))
    }

    /// Runs `call` on controller `name` where routing says (see [`Self::route_registration`]
    /// for the rule): through the cluster on the leader, or `local` here on a follower whose
    /// site may call the controller. Returns the answer and how it got there.
    async fn route_call<F, Fut>(
        &self,
        name: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
        call: WireCall,
        what: &str,
        local: F,
    ) -> Result<(serde_json::Value, String), BackendError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<serde_json::Value, String>>,
    {
        let inner = &self.inner;
        if inner.node.leadership().await.is_ok() {
            let call =
                serde_json::to_value(call).map_err(|e| BackendError::Unavailable(e.to_string()))?;
            // A forwarded hop needs its round trip on top of the check's own deadline.
            let outer = REGISTRATION_TIMEOUT + Duration::from_secs(5);
            let outcome = tokio::time::timeout(outer, inner.node.call(name, None, call))
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
    report: &WireReport,
    how: &str,
    mut warnings: Vec<String>,
) -> ControllerTest {
    let steps: Vec<RegistrationStep> = report
        .steps
        .iter()
        .map(|s| RegistrationStep {
            number: s.number,
            name: s.name.clone(),
            status: s.status.clone(),
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

fn not_found(what: &'static str, name: &str) -> BackendError {
    BackendError::NotFound {
        what,
        name: name.to_owned(),
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
        let published = (!leader.is_self).then(|| self.inner.node.state().statuses);
        let mut plans = Vec::new();
        for (id, cfg) in self.inner.config.plans() {
            let state = self.state(id)?;
            let (verdicts, last_reason) = match &published {
                None => {
                    let view = self.inner.runtime().get(id).cloned().unwrap_or_default();
                    let verdicts = site_verdicts(&self.inner.config, cfg, &state, &view, now);
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
                        maintenance: false,
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
            });
        }
        Ok(StatusResponse { leader, plans })
    }

    async fn config_source(&self) -> Result<String, BackendError> {
        Ok(self.config_text.clone())
    }

    async fn plans(&self) -> Result<Vec<PlanView>, BackendError> {
        let ids: Vec<PlanId> = self
            .inner
            .config
            .plans()
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in ids {
            out.push(self.plan(&id).await?);
        }
        Ok(out)
    }

    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        let cfg = self.plan_config(name)?;
        let state = self.state(name)?;
        Ok(PlanView {
            name: name.to_string(),
            generation: state.generation.0,
            spec: json!({
                "owner": cfg.owner,
                "interval_seconds": cfg.interval.as_secs(),
                "sites": cfg.sites().collect::<Vec<_>>(),
                "current_owner": state.owner,
            }),
            paused: state.paused,
            staged: None,
        })
    }

    async fn create_plan(&self, _: &Caller, _: CheckedPlan) -> Result<PlanView, BackendError> {
        Err(BackendError::Conflict(FILE_ONLY.into()))
    }

    async fn stage_plan(&self, _: &Caller, _: CheckedPlan) -> Result<PlanView, BackendError> {
        Err(BackendError::Conflict(FILE_ONLY.into()))
    }

    async fn discard_staged(&self, _: &Caller, name: &PlanId) -> Result<PlanView, BackendError> {
        self.plan_config(name)?;
        Err(BackendError::Conflict(format!(
            "plan {name:?} has no staged change"
        )))
    }

    async fn apply_staged(
        &self,
        _: &Caller,
        name: &PlanId,
        _: u64,
    ) -> Result<PlanView, BackendError> {
        self.plan_config(name)?;
        Err(BackendError::Conflict(format!(
            "plan {name:?} has no staged change"
        )))
    }

    async fn delete_plan(&self, _: &Caller, name: &PlanId, _: u64) -> Result<(), BackendError> {
        self.plan_config(name)?;
        Err(BackendError::Conflict(FILE_ONLY.into()))
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
            DryRun::ApplyStaged => {
                return Err(BackendError::Conflict(format!(
                    "plan {name:?} has no staged change"
                )));
            }
            DryRun::Switchover { target } => (MoveKind::Switchover, self.site(name, target)?),
            DryRun::Failover { target: Some(t) } => (MoveKind::Failover, self.site(name, t)?),
            DryRun::Failover { target: None } => (
                MoveKind::Failover,
                pick_target(cfg, &state.owner)
                    .ok_or_else(|| BackendError::Refused("no other site to fail over to".into()))?,
            ),
        };
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
            &self.inner.config,
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
        Ok(self
            .inner
            .config
            .config()
            .controllers
            .iter()
            .map(|(id, c)| ControllerView {
                name: id.to_string(),
                controller_type: c.controller_type().as_str().to_owned(),
                site: c.site.to_string(),
                reach: c.reach.iter().map(ToString::to_string).collect(),
                secret: c.secret.as_ref().map(|s| s.as_str().to_owned()),
                grades: Vec::new(),
                tested_at_ms: None,
            })
            .collect())
    }

    async fn register_controller(
        &self,
        _: &Caller,
        _: CheckedController,
    ) -> Result<ControllerView, BackendError> {
        Err(BackendError::Conflict(FILE_ONLY.into()))
    }

    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError> {
        let Some(config) = self.inner.config.controller(name.as_str()) else {
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
        Ok(controller_test(name, &report, &how, Vec::new()))
    }

    async fn probe_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerTest, BackendError> {
        if self.inner.config.controller(c.name.as_str()).is_some() {
            return Err(BackendError::Conflict(format!(
                "controller {:?} is registered: test it (POST /api/v1/controllers/{}/test) \
                 instead of probing it",
                c.name.as_str(),
                c.name.as_str()
            )));
        }
        // The registration steps read the controller from a configuration: this one is the
        // configuration in force with the candidate added, validated again as a whole.
        let text = plan_api::with_entry(
            &self.config_text,
            "controllers",
            c.name.as_str(),
            &c.spec,
            true,
        )
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
        let known = BTreeMap::new();
        let report = registration::register(Registration {
            config: &loaded.config,
            controller: &c.name,
            orchestrator: &self.inner.me,
            secrets: &self.secrets,
            known: &known,
            timeout: REGISTRATION_TIMEOUT,
        })
        .await;
        let report: WireReport = serde_json::to_value(&report)
            .and_then(serde_json::from_value)
            .map_err(|e| BackendError::Unavailable(e.to_string()))?;
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
        let Some(config) = self.inner.config.controller(controller.as_str()) else {
            return Err(not_found("controller", controller.as_str()));
        };
        let call = WireCall::discover(config.site.clone(), REGISTRATION_TIMEOUT);
        let (value, _) = self
            .route_call(controller, config, call, "discovery", || async {
                let known = BTreeMap::new();
                let found = registration::discover(Registration {
                    config: &self.inner.config,
                    controller,
                    orchestrator: &self.inner.me,
                    secrets: &self.secrets,
                    known: &known,
                    timeout: REGISTRATION_TIMEOUT,
                })
                .await?;
                serde_json::to_value(found).map_err(|e| e.to_string())
            })
            .await?;
        let found: Vec<WireResource> = serde_json::from_value(value).map_err(|e| {
            BackendError::Unavailable(format!(
                "the discovery of {controller} came back unreadable: {e}"
            ))
        })?;
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
        let owner = self.state(plan)?.owner;
        let to = match &req.target {
            Some(t) => self.site(plan, t)?,
            None => pick_target(cfg, &owner)
                .ok_or_else(|| BackendError::Refused("no other site to fail over to".into()))?,
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

    async fn set_maintenance(
        &self,
        _: &Caller,
        plan: &PlanId,
        site: &SiteId,
        _: &MaintenanceRequest,
    ) -> Result<OperationAccepted, BackendError> {
        if self.plan_config(plan)?.instance(site).is_none() {
            return Err(not_found("site", site.as_str()));
        }
        Err(BackendError::Conflict(
            "site maintenance is not in the decision core's plan state yet; pause the plan instead"
                .into(),
        ))
    }

    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError> {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, c) in &self.inner.config.config().controllers {
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

/// The failover target when none is named: the plan's priority list first, then by name.
fn pick_target(plan: &qfence_model::config::PlanConfig, owner: &SiteId) -> Option<SiteId> {
    plan.priority
        .iter()
        .chain(plan.sites())
        .find(|s| *s != owner)
        .cloned()
}
