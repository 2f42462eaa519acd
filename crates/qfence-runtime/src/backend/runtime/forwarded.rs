//! API writes through any orchestrator (ADR 0024): a follower sends each write, as one typed
//! [`ApiWrite`] with its caller, to the leader over the cluster's mutual TLS; the leader runs it
//! on its own backend as that caller and answers with the typed result or [`BackendError`].
//! Serialised only at the wire, in [`RuntimeBackend::to_leader`] and [`WriteServer`].

use std::sync::Weak;

use qfence_cluster::forward::{BoxFuture, WriteHandler};
use qfence_model::OrchestratorId;
use serde::{Deserialize, Serialize};

use super::*;
use crate::auth::Access;

/// How long a follower waits for the leader's answer: registering a controller, the slowest
/// write, may run the registration steps.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(REGISTRATION_TIMEOUT.as_secs() * 3);

/// Every write of the API, as a follower forwards it. A plan or controller travels as the
/// spec the caller sent: the leader validates it again against its own configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum ApiWrite {
    CreatePlan {
        name: PlanId,
        spec: serde_json::Value,
    },
    StagePlan {
        name: PlanId,
        spec: serde_json::Value,
    },
    DiscardStaged {
        name: PlanId,
    },
    ApplyStaged {
        name: PlanId,
        expected: u64,
    },
    DeletePlan {
        name: PlanId,
        expected: u64,
    },
    RegisterController {
        name: ControllerId,
        spec: serde_json::Value,
    },
    Switchover {
        plan: PlanId,
        req: SwitchoverRequest,
    },
    Failover {
        plan: PlanId,
        req: FailoverRequest,
    },
    ConfirmFenced {
        plan: PlanId,
        site: SiteId,
        req: ConfirmFencedRequest,
    },
    Rejoin {
        plan: PlanId,
        site: SiteId,
        req: RejoinRequest,
    },
    Pause {
        plan: PlanId,
        req: PauseRequest,
    },
    Resume {
        plan: PlanId,
        req: PauseRequest,
    },
    SetMaintenance {
        plan: PlanId,
        site: SiteId,
        req: MaintenanceRequest,
    },
    /// A controller test a follower ran: its grades and pinned identity, for the leader to
    /// write into the replicated state.
    RecordControllerTest {
        name: ControllerId,
        test: qfence_cluster::state::ControllerTestRecord,
    },
}

impl ApiWrite {
    /// The role the API asks of this write's caller; the leader checks it again.
    fn needs(&self) -> Access {
        match self {
            ApiWrite::Switchover { .. }
            | ApiWrite::Failover { .. }
            | ApiWrite::ConfirmFenced { .. }
            | ApiWrite::Rejoin { .. }
            | ApiWrite::Pause { .. }
            | ApiWrite::Resume { .. }
            | ApiWrite::SetMaintenance { .. } => Access::Operator,
            // Recording a test is part of the test, which its caller was let run (the API asks
            // the admin role for it; the backend, as before, records whoever ran it).
            ApiWrite::RecordControllerTest { .. } => Access::Viewer,
            _ => Access::Admin,
        }
    }
}

/// What a write answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", content = "value", rename_all = "snake_case")]
pub enum WriteResult {
    Plan(PlanView),
    Deleted,
    Controller(ControllerView),
    Accepted(OperationAccepted),
    Recorded,
}

impl WriteResult {
    fn mismatch(self) -> BackendError {
        BackendError::Unavailable(format!(
            "the leader answered a different kind of result: {self:?}"
        ))
    }
    pub(super) fn plan(self) -> Result<PlanView, BackendError> {
        match self {
            WriteResult::Plan(v) => Ok(v),
            other => Err(other.mismatch()),
        }
    }
    pub(super) fn deleted(self) -> Result<(), BackendError> {
        match self {
            WriteResult::Deleted => Ok(()),
            other => Err(other.mismatch()),
        }
    }
    pub(super) fn controller(self) -> Result<ControllerView, BackendError> {
        match self {
            WriteResult::Controller(v) => Ok(v),
            other => Err(other.mismatch()),
        }
    }
    pub(super) fn accepted(self) -> Result<OperationAccepted, BackendError> {
        match self {
            WriteResult::Accepted(v) => Ok(v),
            other => Err(other.mismatch()),
        }
    }
}

/// A write whose plan or controller the API checked against this node's configuration: run
/// here as checked, or forwarded as the caller's spec for the leader to check again.
#[derive(Debug)]
pub(super) enum CheckedWrite {
    CreatePlan(CheckedPlan),
    StagePlan(CheckedPlan),
    RegisterController(CheckedController),
}

impl CheckedWrite {
    /// The write as it crosses the wire: the spec only, as the caller sent it.
    fn forwarded(&self) -> ApiWrite {
        match self {
            CheckedWrite::CreatePlan(p) => ApiWrite::CreatePlan {
                name: p.name.clone(),
                spec: p.spec.clone(),
            },
            CheckedWrite::StagePlan(p) => ApiWrite::StagePlan {
                name: p.name.clone(),
                spec: p.spec.clone(),
            },
            CheckedWrite::RegisterController(c) => ApiWrite::RegisterController {
                name: c.name.clone(),
                spec: c.spec.clone(),
            },
        }
    }
}

/// A write and who asked for it: what crosses the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ForwardedCall {
    caller: Caller,
    write: ApiWrite,
}

impl RuntimeBackend {
    /// Whether a write must go to the leader: this node is not leading and knows another
    /// node that is. Otherwise the write runs here (and a node that lost its lease, or knows
    /// no leader, refuses it with `not_leader`).
    pub(super) async fn forwards(&self) -> bool {
        let node = &self.inner.node;
        node.leadership().await.is_err() && node.leader().is_some_and(|l| l != self.inner.me)
    }

    /// Runs `write` here, or on the leader when this node forwards (see [`Self::forwards`]).
    pub(super) async fn write(
        &self,
        caller: &Caller,
        write: ApiWrite,
    ) -> Result<WriteResult, BackendError> {
        if self.forwards().await {
            self.to_leader(caller, write).await
        } else {
            self.run_here(caller, write).await
        }
    }

    /// Runs a write the API already checked here, or forwards it to the leader as the spec the
    /// caller sent (see [`Self::forwards`]): only the leader's configuration can check it there.
    pub(super) async fn write_checked(
        &self,
        caller: &Caller,
        write: CheckedWrite,
    ) -> Result<WriteResult, BackendError> {
        if self.forwards().await {
            self.to_leader(caller, write.forwarded()).await
        } else {
            self.run_checked(caller, write).await
        }
    }

    /// Sends `write` to the leader and returns its answer, its errors included.
    pub(super) async fn to_leader(
        &self,
        caller: &Caller,
        write: ApiWrite,
    ) -> Result<WriteResult, BackendError> {
        let call = ForwardedCall {
            caller: caller.clone(),
            write,
        };
        let body =
            serde_json::to_value(&call).map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let reply = match self.inner.node.forward_write(body, FORWARD_TIMEOUT).await {
            Ok(r) => r,
            Err(qfence_cluster::ClusterError::NotLeader { .. }) => {
                return Err(BackendError::NotLeader {
                    leader: Some(self.leader_info().await),
                });
            }
            Err(e) => {
                return Err(BackendError::Unavailable(format!(
                    "the write could not be forwarded to the leader; its effect is unknown: {e}"
                )));
            }
        };
        serde_json::from_value::<Result<WriteResult, BackendError>>(reply).map_err(|e| {
            BackendError::Unavailable(format!("the leader's answer could not be read: {e}"))
        })?
    }

    /// Runs a write here, as `caller`, never forwarding it again.
    async fn run_here(
        &self,
        caller: &Caller,
        write: ApiWrite,
    ) -> Result<WriteResult, BackendError> {
        if caller.access < write.needs() {
            return Err(BackendError::Refused(format!(
                "{} ({}) may not make this write: it needs the {} role",
                caller.name,
                caller.access,
                write.needs()
            )));
        }
        Ok(match write {
            ApiWrite::CreatePlan { name, spec } => {
                let plan = self.check_plan(&name, spec)?;
                self.run_checked(caller, CheckedWrite::CreatePlan(plan))
                    .await?
            }
            ApiWrite::StagePlan { name, spec } => {
                let plan = self.check_plan(&name, spec)?;
                self.run_checked(caller, CheckedWrite::StagePlan(plan))
                    .await?
            }
            ApiWrite::DiscardStaged { name } => {
                WriteResult::Plan(plans::discard_staged(self, caller, &name).await?)
            }
            ApiWrite::ApplyStaged { name, expected } => {
                WriteResult::Plan(plans::apply_staged(self, caller, &name, expected).await?)
            }
            ApiWrite::DeletePlan { name, expected } => {
                plans::delete_plan(self, caller, &name, expected).await?;
                WriteResult::Deleted
            }
            ApiWrite::RegisterController { name, spec } => {
                let c = self.check_controller(&name, spec)?;
                self.run_checked(caller, CheckedWrite::RegisterController(c))
                    .await?
            }
            ApiWrite::Switchover { plan, req } => {
                WriteResult::Accepted(intents::switchover(self, caller, &plan, &req).await?)
            }
            ApiWrite::Failover { plan, req } => {
                WriteResult::Accepted(intents::failover(self, caller, &plan, &req).await?)
            }
            ApiWrite::ConfirmFenced { plan, site, req } => WriteResult::Accepted(
                intents::confirm_fenced(self, caller, &plan, &site, &req).await?,
            ),
            ApiWrite::Rejoin { plan, site, req } => {
                WriteResult::Accepted(intents::rejoin(self, caller, &plan, &site, &req).await?)
            }
            ApiWrite::Pause { plan, req } => {
                WriteResult::Accepted(intents::pause(self, caller, &plan, &req).await?)
            }
            ApiWrite::Resume { plan, req } => {
                WriteResult::Accepted(intents::resume(self, caller, &plan, &req).await?)
            }
            ApiWrite::SetMaintenance { plan, site, req } => WriteResult::Accepted(
                intents::set_maintenance(self, caller, &plan, &site, &req).await?,
            ),
            ApiWrite::RecordControllerTest { name, test } => {
                controllers::record_test(self, &name, test).await?;
                WriteResult::Recorded
            }
        })
    }

    /// Runs a checked write here: the API checked it against this node's configuration, or
    /// [`Self::run_here`] did on the leader.
    async fn run_checked(
        &self,
        caller: &Caller,
        write: CheckedWrite,
    ) -> Result<WriteResult, BackendError> {
        Ok(match write {
            CheckedWrite::CreatePlan(plan) => {
                WriteResult::Plan(plans::create_plan(self, caller, plan).await?)
            }
            CheckedWrite::StagePlan(plan) => {
                WriteResult::Plan(plans::stage_plan(self, caller, plan).await?)
            }
            CheckedWrite::RegisterController(c) => {
                WriteResult::Controller(controllers::register_controller(self, caller, c).await?)
            }
        })
    }

    /// A forwarded plan, validated against the leader's configuration as the API does.
    fn check_plan(
        &self,
        name: &PlanId,
        spec: serde_json::Value,
    ) -> Result<CheckedPlan, BackendError> {
        let c = plan_api::check_plan(&self.cfg().text, name.as_str(), &spec)
            .map_err(|issues| invalid("plan", name.as_str(), issues))?;
        Ok(CheckedPlan {
            name: name.clone(),
            spec,
            config: c.value,
            warnings: c.warnings,
        })
    }

    /// A forwarded controller, validated against the leader's configuration as the API does.
    fn check_controller(
        &self,
        name: &ControllerId,
        spec: serde_json::Value,
    ) -> Result<CheckedController, BackendError> {
        let c = plan_api::check_controller(&self.cfg().text, name.as_str(), &spec)
            .map_err(|issues| invalid("controller", name.as_str(), issues))?;
        Ok(CheckedController {
            name: name.clone(),
            spec,
            config: c.value,
            warnings: c.warnings,
        })
    }
}

/// A forwarded spec the leader's configuration refuses, as the API words it.
fn invalid(kind: &str, name: &str, issues: Vec<qfence_model::config::Issue>) -> BackendError {
    BackendError::Invalid {
        message: format!(
            "{kind} {name:?} is not valid: {} error(s); nothing was changed",
            issues.iter().filter(|i| i.is_error()).count()
        ),
        issues,
    }
}

/// The leader's side: what the cluster hands a forwarded write to. It holds the runtime weakly,
/// so the node it is installed in does not keep the runtime alive.
#[derive(Debug)]
pub(super) struct WriteServer {
    pub(super) inner: Weak<Inner>,
    pub(super) secrets: SecretStore,
}

impl WriteServer {
    async fn run(
        &self,
        from: &OrchestratorId,
        write: serde_json::Value,
    ) -> Result<WriteResult, BackendError> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(BackendError::Unavailable(
                "the orchestrator is stopping".into(),
            ));
        };
        let call: ForwardedCall = serde_json::from_value(write)
            .map_err(|e| BackendError::Unavailable(format!("not a qfence API write: {e}")))?;
        tracing::info!(orchestrator = %from, by = %call.caller.name, "Running an API write a follower forwarded");
        let backend = RuntimeBackend {
            inner,
            secrets: self.secrets.clone(),
        };
        backend.run_here(&call.caller, call.write).await
    }
}

impl WriteHandler for WriteServer {
    fn handle<'a>(
        &'a self,
        from: &'a OrchestratorId,
        write: serde_json::Value,
    ) -> BoxFuture<'a, serde_json::Value> {
        Box::pin(async move {
            let result = self.run(from, write).await;
            serde_json::to_value(&result).unwrap_or_else(|e| {
                tracing::warn!(orchestrator = %from, error = %e, "Could not encode the answer to a forwarded write");
                serde_json::to_value(Err::<WriteResult, _>(BackendError::Unavailable(
                    e.to_string(),
                )))
                .unwrap_or_default()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error the leader may answer reads back as itself on the follower: the API maps
    /// it to the same status and code there.
    #[test]
    fn every_backend_error_crosses_the_wire_unchanged() {
        let issue = qfence_model::config::Issue {
            path: "plans.web.owner".into(),
            message: "no such site".into(),
            severity: qfence_model::config::Severity::Error,
            line: None,
        };
        let errors = [
            not_found("plan", "web"),
            not_found("controller", "bmc"),
            BackendError::StaleGeneration {
                plan: "web".into(),
                expected: 1,
                current: 2,
            },
            BackendError::Conflict("taken".into()),
            BackendError::Refused("owner".into()),
            BackendError::Invalid {
                message: "bad".into(),
                issues: vec![issue.clone()],
            },
            BackendError::CapabilityFailed {
                message: "failed".into(),
                issues: vec![issue.clone()],
            },
            BackendError::BindingCheckFailed {
                message: "no vm".into(),
                issues: vec![issue],
            },
            BackendError::NotLeader { leader: None },
            BackendError::Unavailable("later".into()),
        ];
        for e in errors {
            let wire = serde_json::to_value(Err::<WriteResult, _>(e.clone())).unwrap();
            let back: Result<WriteResult, BackendError> = serde_json::from_value(wire).unwrap();
            assert_eq!(back, Err(e));
        }
    }
}
