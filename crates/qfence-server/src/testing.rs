//! Test support, behind the `testing` feature so other crates' tests (the CLI's) can use it:
//! the lab started for real ([`LabRuntime`]: the lab's simulators, a one-voter cluster in a
//! temporary directory, the engine and its loop, and the [`RuntimeBackend`] the API serves),
//! the pieces it is made of ([`lab`], which the runtime tests start one by one), and
//! [`FaultyBackend`], which wraps a backend to inject the two faults the runtime has no real
//! cause for (a panic, a slow call).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use qfence_model::config::plan_api;
use qfence_model::{ControllerId, PlanId, SiteId};
use serde_json::json;

use qfence_runtime::RuntimeBackend;
use qfence_runtime::auth::{Access, Caller};
use qfence_runtime::backend::{Backend, BackendError, CheckedController, CheckedPlan};
use qfence_runtime::dto::*;
use qfence_runtime::events::{Event, EventPage, EventQuery};

pub mod lab;

/// The lab's erp-db plan, as the API receives it.
pub fn erp_db_spec() -> serde_json::Value {
    let inst = |dc: &str| {
        json!([
            {"controller": format!("bmc-{dc}"), "capability": "power.off", "resource": format!("pve-{dc}-01"), "role": "fence", "required": true},
            {"controller": format!("pve-{dc}"), "capability": "vm.stop", "resource": format!("pve-{dc}-01/101"), "role": "fence"},
            {"controller": format!("pve-{dc}"), "capability": "vm.status", "resource": format!("pve-{dc}-01/101"), "role": "health"},
            {"controller": format!("pve-{dc}"), "capability": "vm.start", "resource": format!("pve-{dc}-01/101"), "role": "switchover"}
        ])
    };
    json!({
        "owner": "dc1",
        "interval_seconds": 10,
        "instances": {"dc1": inst("dc1"), "dc2": inst("dc2")},
        "service": [{"controller": "fgt-edge", "capability": "vip.own", "resource": "vip-erp-db",
                     "role": "service", "params": {"dc1": "10.1.1.5", "dc2": "10.2.1.5"}}]
    })
}

/// The lab running for real, as the API, console and CLI tests use it: the lab's simulators
/// ([`lab::Sims`]: dc1's host on and running VM 101, dc2's the fenced standby), the lab's
/// configuration without its plans, orchestrator `dc1-a` (a one-voter cluster in a temporary
/// directory) with its engine's loop running, and the [`RuntimeBackend`] over it. erp-db is
/// created through the backend ([`erp_db_spec`], `source: api`), as an operator would.
#[allow(missing_debug_implementations)]
pub struct LabRuntime {
    pub sims: lab::Sims,
    /// The orchestrator the backend serves (`dc1-a`).
    pub orchestrator: lab::Orchestrator,
    /// In [`LabRuntime::start_follower`], the leader (`dc2-a`), which created the cluster.
    pub leader: Option<lab::Orchestrator>,
    pub backend: Arc<RuntimeBackend>,
    /// The configuration text the orchestrators started with.
    pub config_text: String,
    /// The last event of the start-up (erp-db's creation): [`Self::events`] starts after it.
    started_at: u64,
}

/// The caller that creates erp-db at start-up.
fn lab_admin() -> Caller {
    Caller {
        name: "lab".into(),
        access: Access::Admin,
    }
}

/// The lab's configuration for these simulators without its plans: erp-db is created
/// through the API instead.
fn without_plans(text: &str) -> String {
    match text.find("\nplans:") {
        Some(at) => text[..=at].to_owned(),
        None => text.to_owned(),
    }
}

/// Creates erp-db through `backend`, validated against its configuration as the API does.
async fn create_erp_db(backend: &RuntimeBackend) -> anyhow::Result<()> {
    let base = backend.config_source().await?;
    let checked = plan_api::check_plan(&base, "erp-db", &erp_db_spec())
        .map_err(|issues| anyhow::anyhow!("erp-db does not validate: {issues:#?}"))?;
    backend
        .create_plan(
            &lab_admin(),
            CheckedPlan {
                name: lab::plan(),
                spec: erp_db_spec(),
                config: checked.value,
                warnings: checked.warnings,
            },
        )
        .await?;
    Ok(())
}

/// Waits until the engine registered the lab's controllers (a loaded machine takes a moment):
/// a discovery through one of them is answered.
async fn ready(backend: &RuntimeBackend) -> anyhow::Result<()> {
    let pve = ControllerId::new("pve-dc1")?;
    lab::eventually(
        Duration::from_secs(30),
        "the lab's controllers registered",
        || async { backend.discover(&pve).await.ok().map(|_| ()) },
    )
    .await
}

impl LabRuntime {
    /// The lab with `dc1-a` alone, leading; erp-db created.
    pub async fn start() -> anyhow::Result<Self> {
        let sims = lab::Sims::start().await?;
        let config_text = without_plans(&sims.config_text());
        let o = lab::Orchestrator::start(&config_text, true).await?;
        let backend = Arc::new(RuntimeBackend::new(&o.engine, lab::secrets()));
        create_erp_db(&backend).await?;
        ready(&backend).await?;
        Ok(Self::assemble(sims, o, None, backend, config_text))
    }

    /// The lab's plan `n` times over (`p00000`, `p00001`, ... from the configuration file,
    /// as the runtime's scale tests run them), with `plan_lines` as each plan's timings, the
    /// simulated replication running every `sync_every`, and `dc1-a` alone, leading.
    pub async fn start_scaled(
        n: usize,
        plan_lines: &str,
        sync_every: Duration,
    ) -> anyhow::Result<Self> {
        let scenario = qfence_lab::lab::Scenario::scaled(n, sync_every);
        let sims = lab::Sims::start_scenario(&scenario).await?;
        let config_text = sims.scaled_config(&scenario.plans, plan_lines);
        let o = lab::Orchestrator::start(&config_text, true).await?;
        let backend = Arc::new(RuntimeBackend::new(&o.engine, lab::secrets()));
        Ok(Self::assemble(sims, o, None, backend, config_text))
    }

    /// The lab with `dc2-a` leading (it creates the cluster and erp-db) and `dc1-a` joined as
    /// its follower; the backend is `dc1-a`'s, so its reads are the follower's own and its writes
    /// are forwarded to `dc2-a`, as a follower's are (ADR 0024).
    pub async fn start_follower() -> anyhow::Result<Self> {
        let sims = lab::Sims::start().await?;
        let config_text = without_plans(&sims.config_text());
        let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
        let dc2 =
            lab::Orchestrator::start_as(&config_text, "dc2-a", "dc2", &ca, None, true).await?;
        create_erp_db(&RuntimeBackend::new(&dc2.engine, lab::secrets())).await?;
        let seed = dc2.node.member().address.clone();
        let dc1 = lab::Orchestrator::start_as(&config_text, "dc1-a", "dc1", &ca, Some(&seed), true)
            .await?;
        let backend = Arc::new(RuntimeBackend::new(&dc1.engine, lab::secrets()));
        // The follower knows the leader and has the plan once the log reached it.
        lab::eventually(
            Duration::from_secs(20),
            "dc1-a following dc2-a with erp-db",
            || {
                let backend = backend.clone();
                async move {
                    let leader = backend.leader().await;
                    (leader.leader.as_deref() == Some("dc2-a")
                        && backend.plan(&lab::plan()).await.is_ok())
                    .then_some(())
                }
            },
        )
        .await?;
        Ok(Self::assemble(sims, dc1, Some(dc2), backend, config_text))
    }

    fn assemble(
        sims: lab::Sims,
        orchestrator: lab::Orchestrator,
        leader: Option<lab::Orchestrator>,
        backend: Arc<RuntimeBackend>,
        config_text: String,
    ) -> Self {
        let log_of = leader.as_ref().unwrap_or(&orchestrator);
        let started_at = log_of.engine.events().last().map_or(0, |e| e.seq);
        Self {
            sims,
            orchestrator,
            leader,
            backend,
            config_text,
            started_at,
        }
    }

    /// The backend as the router takes it.
    pub fn backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    /// Every event since the start-up, the engine's and the callers', in order.
    pub fn events(&self) -> Vec<Event> {
        self.orchestrator
            .engine
            .events()
            .into_iter()
            .filter(|e| e.seq > self.started_at)
            .collect()
    }

    /// The events API callers caused since the start-up (actor `token:NAME`), to check that a
    /// refused call changed nothing: the engine's loop records its own decisions meanwhile.
    pub fn caller_events(&self) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.actor.starts_with("token:"))
            .collect()
    }

    /// The whole log, start-up included, for verifying its chain.
    pub fn all_events(&self) -> Vec<Event> {
        self.orchestrator.engine.events()
    }

    /// Waits (up to 30 s) until the status shows `site`'s verdict in erp-db as `verdict`
    /// (as the engine reads it from the simulators), and returns that status.
    pub async fn verdict_is(
        &self,
        site: &str,
        verdict: VerdictDto,
    ) -> anyhow::Result<StatusResponse> {
        let what = format!("{site} {verdict:?} in erp-db's status");
        lab::eventually(Duration::from_secs(30), &what, || async {
            let s = self.backend.status().await.ok()?;
            let p = s.plans.iter().find(|p| p.plan == "erp-db")?;
            p.sites
                .iter()
                .any(|x| x.site == site && x.verdict == verdict)
                .then_some(s.clone())
        })
        .await
    }

    /// Waits (up to 60 s) until `site` owns erp-db, steady.
    pub async fn owner_is(&self, site: &str) -> anyhow::Result<()> {
        let what = format!("{site} owning erp-db, steady");
        lab::eventually(Duration::from_secs(60), &what, || async {
            let s = self.orchestrator.engine.plan_state(&lab::plan()).ok()??;
            (s.owner.as_str() == site && matches!(s.phase, qfence_core::Phase::Steady))
                .then_some(())
        })
        .await
    }

    /// Runs controller `name`'s test (the four steps against its simulator), as an admin
    /// would: its grades are then the controller's latest.
    pub async fn test_controller(&self, name: &str) -> anyhow::Result<ControllerTest> {
        let id = ControllerId::new(name)?;
        Ok(self.backend.test_controller(&lab_admin(), &id).await?)
    }

    /// Stops the orchestrators and the simulators.
    pub async fn stop(self) {
        self.orchestrator.shutdown().await;
        if let Some(l) = self.leader {
            l.shutdown().await;
        }
        self.sims.stop().await;
    }
}

/// A [`Backend`] that delegates every call to another and injects only the two faults the
/// runtime has no real cause for: `status` panics (a bug), `orchestrators` is slow (a stuck
/// call). Fault injection, not a second implementation.
#[allow(missing_debug_implementations)]
pub struct FaultyBackend {
    inner: Arc<dyn Backend>,
    /// `status` panics.
    pub panic_on_status: AtomicBool,
    /// `orchestrators` takes this long first.
    pub slow_orchestrators: Mutex<Option<Duration>>,
}

impl FaultyBackend {
    /// `inner`, with no fault set.
    pub fn over(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            panic_on_status: AtomicBool::new(false),
            slow_orchestrators: Mutex::new(None),
        }
    }
}

#[async_trait]
impl Backend for FaultyBackend {
    async fn leader(&self) -> LeaderInfo {
        self.inner.leader().await
    }
    async fn status(&self) -> Result<StatusResponse, BackendError> {
        assert!(
            !self.panic_on_status.load(Ordering::SeqCst),
            "status panics (injected fault)"
        );
        self.inner.status().await
    }
    async fn config_source(&self) -> Result<String, BackendError> {
        self.inner.config_source().await
    }
    async fn plans(&self) -> Result<Vec<PlanView>, BackendError> {
        self.inner.plans().await
    }
    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        self.inner.plan(name).await
    }
    async fn create_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.inner.create_plan(caller, plan).await
    }
    async fn stage_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.inner.stage_plan(caller, plan).await
    }
    async fn discard_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
    ) -> Result<PlanView, BackendError> {
        self.inner.discard_staged(caller, name).await
    }
    async fn apply_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected_generation: u64,
    ) -> Result<PlanView, BackendError> {
        self.inner
            .apply_staged(caller, name, expected_generation)
            .await
    }
    async fn delete_plan(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected_generation: u64,
    ) -> Result<(), BackendError> {
        self.inner
            .delete_plan(caller, name, expected_generation)
            .await
    }
    async fn dry_run(&self, name: &PlanId, what: &DryRun) -> Result<DryRunResult, BackendError> {
        self.inner.dry_run(name, what).await
    }
    async fn controllers(&self) -> Result<Vec<ControllerView>, BackendError> {
        self.inner.controllers().await
    }
    async fn register_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerView, BackendError> {
        self.inner.register_controller(caller, c).await
    }
    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError> {
        self.inner.test_controller(caller, name).await
    }
    async fn probe_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerTest, BackendError> {
        self.inner.probe_controller(caller, c).await
    }
    async fn discover(
        &self,
        controller: &ControllerId,
    ) -> Result<Vec<DiscoveredResource>, BackendError> {
        self.inner.discover(controller).await
    }
    async fn switchover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &SwitchoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.switchover(caller, plan, req).await
    }
    async fn failover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &FailoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.failover(caller, plan, req).await
    }
    async fn confirm_fenced(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &ConfirmFencedRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.confirm_fenced(caller, plan, site, req).await
    }
    async fn rejoin(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &RejoinRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.rejoin(caller, plan, site, req).await
    }
    async fn pause(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.pause(caller, plan, req).await
    }
    async fn resume(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.resume(caller, plan, req).await
    }
    async fn set_maintenance(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &MaintenanceRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.inner.set_maintenance(caller, plan, site, req).await
    }
    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError> {
        self.inner.secrets().await
    }
    async fn events(&self, query: &EventQuery) -> Result<EventPage, BackendError> {
        self.inner.events(query).await
    }
    async fn orchestrators(&self) -> Result<Vec<OrchestratorView>, BackendError> {
        let slow = *self.slow_orchestrators.lock().unwrap();
        if let Some(d) = slow {
            tokio::time::sleep(d).await;
        }
        self.inner.orchestrators().await
    }
    async fn instance_ha(&self) -> Result<InstanceHaStatus, BackendError> {
        self.inner.instance_ha().await
    }
}
