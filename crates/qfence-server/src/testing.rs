//! Test support, behind the `testing` feature so other crates' tests (the CLI's) can use it:
//! the lab started for real ([`LabRuntime`]: the lab's simulators, a one-voter cluster in a
//! temporary directory, the engine and its loop, and the [`RuntimeBackend`] the API serves),
//! the pieces it is made of ([`lab`], which the runtime tests start one by one), and
//! [`FaultyBackend`], which wraps a backend to inject the two faults the runtime has no real
//! cause for (a panic, a slow call).
//!
//! [`MemoryBackend`], the in-memory double below, is still used by the CLI's client tests and
//! the browser tests, which drive it step by step; it goes once they run over [`LabRuntime`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use qfence_model::config::{ControllerConfig, PlanConfig, plan_api};
use qfence_model::{ControllerId, PlanId, Role, SiteId, Verdict};
use serde_json::json;

use qfence_runtime::RuntimeBackend;
use qfence_runtime::auth::{Access, Caller};
use qfence_runtime::backend::{Backend, BackendError, CheckedController, CheckedPlan};
use qfence_runtime::dto::*;
use qfence_runtime::events::{
    Event, EventKind, EventLog, EventPage, EventQuery, MemoryStore, NewEvent,
};

pub mod lab;

pub const LAB: &str = include_str!("../../../examples/lab.yaml");

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

    /// The lab with `dc2-a` leading (it creates the cluster and erp-db) and `dc1-a` joined as
    /// its follower; the backend is `dc1-a`'s, so it refuses writes with `not_leader`, naming
    /// `dc2-a`, as a follower does.
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
}

#[derive(Debug)]
struct Plan {
    spec: serde_json::Value,
    config: PlanConfig,
    generation: u64,
    owner: SiteId,
    paused: bool,
    phase: String,
    last_reason: String,
    staged: Option<StagedPlan>,
    verdicts: BTreeMap<SiteId, Verdict>,
    maintenance: BTreeSet<SiteId>,
    /// With `hold_operations`: the site an accepted switchover or failover moves to, once the
    /// test completes it.
    pending: Option<SiteId>,
}

#[derive(Debug)]
struct Controller {
    config: ControllerConfig,
    grades: Vec<CapabilityGrade>,
    tested_at_ms: Option<u64>,
}

#[derive(Debug)]
struct State {
    config_text: String,
    plans: BTreeMap<PlanId, Plan>,
    controllers: BTreeMap<ControllerId, Controller>,
    orchestrators: Vec<OrchestratorView>,
    log: EventLog<MemoryStore>,
}

/// The double. `leader` false makes it a follower that cannot forward.
#[derive(Debug)]
pub struct MemoryBackend {
    state: Mutex<State>,
    me: String,
    pub leader: AtomicBool,
    /// `status` panics (a bug in the backend).
    pub panic_on_status: AtomicBool,
    /// `orchestrators` takes this long.
    pub slow_orchestrators: Mutex<Option<Duration>>,
    /// A switchover or failover is accepted but not carried out: the plan stays with its
    /// owner in phase `switchover` or `failover` until the test calls [`Self::step`],
    /// [`Self::complete`] or [`Self::fail`], the way the runtime works through the steps.
    pub hold_operations: AtomicBool,
    /// A controller test or probe pretends its target answered (an identity made from the
    /// endpoint, a fingerprint shaped like a real one), so a console can show them. Off, the
    /// double has no driver and reaches nothing, as it says.
    pub simulate_targets: AtomicBool,
    clock_ms: AtomicU64,
}

impl MemoryBackend {
    /// The lab's configuration (without its plans), with erp-db created through validation.
    pub fn lab() -> Self {
        let loaded = qfence_model::config::load_str(LAB, "lab").expect("the lab loads");
        let cfg = loaded.config.config();
        let controllers = cfg
            .controllers
            .iter()
            .map(|(id, c)| {
                (
                    id.clone(),
                    Controller {
                        config: c.clone(),
                        grades: Vec::new(),
                        tested_at_ms: None,
                    },
                )
            })
            .collect();
        let orchestrators = cfg
            .orchestrators
            .iter()
            .map(|(id, o)| OrchestratorView {
                name: id.as_str().to_owned(),
                site: o.site.as_str().to_owned(),
                address: o.address.clone(),
                leader: id.as_str() == "dc1-a",
                reachable: true,
                last_seen_ms: Some(1_700_000_000_000),
            })
            .collect();
        let b = Self {
            state: Mutex::new(State {
                config_text: LAB.to_owned(),
                plans: BTreeMap::new(),
                controllers,
                orchestrators,
                log: EventLog::open(MemoryStore::default()).unwrap(),
            }),
            me: "dc1-a".to_owned(),
            leader: AtomicBool::new(true),
            panic_on_status: AtomicBool::new(false),
            slow_orchestrators: Mutex::new(None),
            hold_operations: AtomicBool::new(false),
            simulate_targets: AtomicBool::new(false),
            clock_ms: AtomicU64::new(1_700_000_000_000),
        };
        let checked = plan_api::check_plan(LAB, "erp-db", &erp_db_spec()).expect("erp-db is valid");
        let mut st = b.state.lock().unwrap();
        st.plans.insert(
            PlanId::new("erp-db").unwrap(),
            new_plan(erp_db_spec(), checked.value),
        );
        drop(st);
        b
    }

    fn now(&self) -> u64 {
        self.clock_ms.fetch_add(1000, Ordering::SeqCst)
    }

    fn write_guard(&self) -> Result<(), BackendError> {
        if self.leader.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(BackendError::NotLeader {
                leader: Some(LeaderInfo {
                    term: 4,
                    leader: Some("dc2-a".into()),
                    address: Some("127.0.0.1:7402".into()),
                    is_self: false,
                    orchestrator: self.me.clone(),
                }),
            })
        }
    }

    fn record(&self, st: &mut State, e: NewEvent) {
        let t = self.now();
        st.log.append(e, t).expect("memory store appends");
    }

    /// The log's head, to check that refused calls changed nothing.
    pub fn head(&self) -> (u64, String) {
        self.state.lock().unwrap().log.head()
    }

    /// The whole log, for verification in tests.
    pub fn all_events(&self) -> Vec<qfence_runtime::events::Event> {
        self.state.lock().unwrap().log.all().to_vec()
    }

    /// The phase of a plan (`steady`, or the held operation's).
    pub fn phase(&self, plan: &str) -> String {
        self.state.lock().unwrap().plans[plan].phase.clone()
    }

    /// One step of a held operation: the phase moves on and the step's sentence is recorded,
    /// as the runtime records each decision.
    pub fn step(&self, plan: &str, phase: &str, sentence: &str) {
        let mut st = self.state.lock().unwrap();
        let p = st.plans.get_mut(plan).unwrap();
        p.phase = phase.to_owned();
        p.last_reason = sentence.to_owned();
        let g = p.generation;
        self.record(
            &mut st,
            NewEvent::new(EventKind::Decision, self.me.clone(), sentence)
                .plan(plan)
                .generation(g),
        );
    }

    /// Ends a held operation: the pending site owns the plan, steady.
    pub fn complete(&self, plan: &str) {
        let mut st = self.state.lock().unwrap();
        let p = st.plans.get_mut(plan).unwrap();
        let to = p.pending.take().expect("an operation is held");
        let from = std::mem::replace(&mut p.owner, to.clone());
        p.phase = "steady".into();
        p.last_reason = format!("{to} owns {plan}; {from} is standby");
        let (g, reason) = (p.generation, p.last_reason.clone());
        self.record(
            &mut st,
            NewEvent::new(EventKind::Decision, self.me.clone(), reason)
                .plan(plan)
                .site(to.as_str())
                .generation(g),
        );
    }

    /// Stops a held operation: the plan stays with its owner, in phase `failed`.
    pub fn fail(&self, plan: &str, why: &str) {
        let mut st = self.state.lock().unwrap();
        let p = st.plans.get_mut(plan).unwrap();
        p.pending = None;
        p.phase = "failed".into();
        p.last_reason = why.to_owned();
        let g = p.generation;
        self.record(
            &mut st,
            NewEvent::new(EventKind::Alarm, self.me.clone(), why)
                .plan(plan)
                .generation(g),
        );
    }

    /// Sets a controller's grades, as its latest test would have graded it: a capability
    /// graded failed is refused in new plans and reported in the status for the plans that
    /// bind it.
    pub fn set_grades(&self, controller: &str, grades: Vec<CapabilityGrade>) {
        let mut st = self.state.lock().unwrap();
        let c = st
            .controllers
            .get_mut(controller)
            .expect("a controller of the double");
        c.grades = grades;
        c.tested_at_ms = Some(self.clock_ms.load(Ordering::SeqCst));
    }

    /// What the controllers' grades make of the plans (see [`qfence_runtime::registered`]).
    fn registered(st: &State) -> qfence_runtime::registered::Registered {
        let mut r = qfence_runtime::registered::Registered::default();
        for (id, c) in &st.controllers {
            r.graded(id, &c.grades);
        }
        r
    }

    /// Sets a site's verdict, as the runtime would after a fence's read-back.
    pub fn set_verdict(&self, plan: &str, site: &str, v: Verdict) {
        let mut st = self.state.lock().unwrap();
        let p = st.plans.get_mut(plan).unwrap();
        p.verdicts.insert(SiteId::new(site).unwrap(), v);
    }
}

fn new_plan(spec: serde_json::Value, config: PlanConfig) -> Plan {
    let owner = config.owner.clone();
    let verdicts = config
        .sites()
        .map(|s| (s.clone(), Verdict::Unknown))
        .collect();
    Plan {
        spec,
        generation: 1,
        owner: owner.clone(),
        paused: false,
        phase: "steady".into(),
        last_reason: format!("no action: owned by {owner}"),
        staged: None,
        verdicts,
        maintenance: BTreeSet::new(),
        pending: None,
        config,
    }
}

fn not_found(what: &'static str, name: &str) -> BackendError {
    BackendError::NotFound {
        what,
        name: name.to_owned(),
    }
}

fn cas(plan: &PlanId, p: &Plan, expected: u64) -> Result<(), BackendError> {
    if p.generation == expected {
        Ok(())
    } else {
        Err(BackendError::StaleGeneration {
            plan: plan.as_str().to_owned(),
            expected,
            current: p.generation,
        })
    }
}

fn view(name: &PlanId, p: &Plan) -> PlanView {
    PlanView {
        name: name.as_str().to_owned(),
        generation: p.generation,
        spec: p.spec.clone(),
        paused: p.paused,
        staged: p.staged.clone(),
        // Every plan of the double is managed through the API, erp-db included.
        source: PlanSource::Api,
        maintenance: p
            .maintenance
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
    }
}

fn controller_view(name: &ControllerId, c: &Controller) -> ControllerView {
    ControllerView {
        name: name.as_str().to_owned(),
        controller_type: c.config.controller_type().as_str().to_owned(),
        site: c.config.site.as_str().to_owned(),
        reach: c
            .config
            .reach
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
        secret: c.config.secret.as_ref().map(|s| s.as_str().to_owned()),
        grades: c.grades.clone(),
        tested_at_ms: c.tested_at_ms,
        identity: None,
    }
}

fn site_in(plan: &PlanId, p: &Plan, site: &str) -> Result<SiteId, BackendError> {
    p.config
        .sites()
        .find(|s| s.as_str() == site)
        .cloned()
        .ok_or_else(|| BackendError::Invalid {
            message: format!(
                "site {site:?} is not one of plan {:?}'s sites: {}",
                plan.as_str(),
                p.config
                    .sites()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            issues: Vec::new(),
        })
}

/// The commands a failover to `target` would issue: the owner's required fences, then the
/// target's switchover bindings, then the service bindings.
fn failover_commands(p: &Plan, target: &SiteId) -> Vec<String> {
    let mut out: Vec<String> = p
        .config
        .required_fences(&p.owner)
        .map(|(_, b)| {
            format!(
                "fence {} via {} {} {}",
                p.owner,
                b.controller.as_str(),
                b.capability,
                b.resource
            )
        })
        .collect();
    out.extend(p.config.bindings(target, Role::Switchover).map(|(_, b)| {
        format!(
            "promote {target} via {} {} {}",
            b.controller.as_str(),
            b.capability,
            b.resource
        )
    }));
    out.extend(p.config.service.iter().map(|b| {
        format!(
            "move service to {target} via {} {} {}",
            b.controller.as_str(),
            b.capability,
            b.resource
        )
    }));
    out
}

/// The endpoint (URL or `host:port`) a controller's settings name, if any.
fn double_endpoint(config: &ControllerConfig) -> Option<String> {
    let v = serde_json::to_value(config).ok()?;
    fn find(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::Object(m) => m
                .get("endpoint")
                .and_then(|e| e.as_str().map(str::to_owned))
                .or_else(|| m.values().find_map(find)),
            _ => None,
        }
    }
    find(&v)
}

/// The double's one failure: a target whose endpoint host ends in `.invalid` (RFC 2606: it
/// never resolves) cannot be reached.
fn double_unreachable(config: &ControllerConfig) -> bool {
    double_endpoint(config).is_some_and(|e| {
        let host = e
            .split("://")
            .last()
            .unwrap_or("")
            .split(['/', ':'])
            .next()
            .unwrap_or("");
        host.ends_with(".invalid")
    })
}

/// What the double answers for a test or probe of `config`: the four steps as the runtime
/// reports them, with no target contacted. By default connectivity is skipped (no driver, not
/// reachable) and every capability unverifiable. With `simulate`, connectivity "passes" with a
/// warning saying it was simulated (the identity is made from the endpoint, and an `https`
/// endpoint gets a fingerprint computed from its URL, shaped like a real one). Either way an
/// endpoint on `.invalid` fails connectivity and skips step 4, as an unreachable target does.
fn double_test(
    name: &ControllerId,
    config: &ControllerConfig,
    extra: &[String],
    simulate: bool,
) -> ControllerTest {
    let step = |number: u8, name: &str, status: &str, notes: Vec<String>| RegistrationStep {
        number,
        name: name.to_owned(),
        status: status.to_owned(),
        notes,
    };
    let endpoint = double_endpoint(config);
    let mut warnings: Vec<String> = extra.to_vec();
    let mut s1 = vec![format!(
        "type {}, site {}",
        config.controller_type().as_str(),
        config.site.as_str()
    )];
    let insecure = matches!(config.tls, qfence_model::config::TlsTrust::Insecure);
    if insecure {
        let w = format!(
            "controller {}: TLS certificate checking is OFF (tls: insecure: true); anyone on \
             the path can impersonate it. Pin its certificate instead.",
            name.as_str()
        );
        s1.push(w.clone());
        warnings.insert(0, w);
    }
    let mut steps = vec![
        step(
            1,
            "configuration",
            if insecure { "warning" } else { "ok" },
            s1,
        ),
        step(
            2,
            "secret",
            "ok",
            vec![match &config.secret {
                Some(s) => format!("secret {} is taken to resolve (test double)", s.as_str()),
                None => "the controller names no secret".to_owned(),
            }],
        ),
    ];
    if double_unreachable(config) {
        steps.push(step(
            3,
            "connectivity",
            "failed",
            vec![format!(
                "unreachable: {} does not resolve (test double)",
                endpoint.unwrap_or_default()
            )],
        ));
        steps.push(step(
            4,
            "capabilities",
            "skipped",
            vec!["the target could not be read".into()],
        ));
        return ControllerTest {
            controller: name.as_str().to_owned(),
            reachable: false,
            identity: None,
            grades: Vec::new(),
            message: format!(
                "{} could not be reached (test double: .invalid endpoint)",
                name.as_str()
            ),
            tls_fingerprint: None,
            facts: BTreeMap::new(),
            warnings,
            steps,
        };
    }
    let grades: Vec<CapabilityGrade> = config
        .controller_type()
        .capabilities()
        .iter()
        .map(|cap| CapabilityGrade {
            capability: cap.name.to_owned(),
            grade: GradeDto::Unverifiable,
            detail: "test double: no driver to probe".into(),
        })
        .collect();
    if !simulate {
        let why = "test double: no driver, so no target was contacted".to_owned();
        warnings.push(why.clone());
        steps.push(step(3, "connectivity", "skipped", vec![why]));
        steps.push(step(
            4,
            "capabilities",
            "warning",
            vec![format!("{} capabilities unverifiable", grades.len())],
        ));
        return ControllerTest {
            controller: name.as_str().to_owned(),
            reachable: false,
            identity: None,
            grades,
            message: "test double: no driver".into(),
            tls_fingerprint: None,
            facts: BTreeMap::from([("driver".to_owned(), "test double".to_owned())]),
            warnings,
            steps,
        };
    }
    let ep = endpoint.clone().unwrap_or_else(|| "local".to_owned());
    let identity = format!("double:{}:{ep}", config.controller_type().as_str());
    let tls_fingerprint = ep.starts_with("https://").then(|| {
        let d = ring::digest::digest(&ring::digest::SHA256, ep.as_bytes());
        format!("sha256:{}", hex::encode(d.as_ref()))
    });
    let no_target = "test double: the target's answer was simulated; nothing is proven".to_owned();
    warnings.push(no_target.clone());
    let mut s3 = vec![format!("identity {identity}"), no_target];
    if let Some(fp) = &tls_fingerprint {
        s3.push(format!(
            "TLS certificate {fp}: compare it with the device's, then pin it with tls: {{pin: \"{fp}\"}}"
        ));
    }
    steps.push(step(3, "connectivity", "warning", s3));
    steps.push(step(
        4,
        "capabilities",
        "ok",
        vec![format!("{} capabilities graded unverifiable", grades.len())],
    ));
    let facts = BTreeMap::from([
        ("driver".to_owned(), "test double".to_owned()),
        ("endpoint".to_owned(), ep),
    ]);
    ControllerTest {
        controller: name.as_str().to_owned(),
        reachable: true,
        identity: Some(identity),
        grades,
        message: "test double: the steps ran without a driver; no capability is proven".into(),
        tls_fingerprint,
        facts,
        warnings,
        steps,
    }
}

/// What the double "discovers": every resource a plan binds through the controller, once per
/// capability and resource, then one made-up resource for each capability of its type that no
/// plan binds yet (`NAME-CAPABILITY-1`), so an editor has something to offer for each.
fn double_resources(
    name: &ControllerId,
    config: &ControllerConfig,
    plans: &BTreeMap<PlanId, Plan>,
) -> Vec<DiscoveredResource> {
    let mut out: BTreeMap<(String, String), String> = BTreeMap::new();
    for (plan_id, p) in plans {
        let bindings = p
            .config
            .instances
            .values()
            .flatten()
            .chain(p.config.service.iter());
        for b in bindings.filter(|b| b.controller == *name) {
            out.entry((b.capability.clone(), b.resource.clone()))
                .or_insert_with(|| {
                    format!(
                        "{} (bound by plan {}; test double)",
                        b.resource,
                        plan_id.as_str()
                    )
                });
        }
    }
    for cap in config.controller_type().capabilities() {
        if !out.keys().any(|(c, _)| c == cap.name) {
            out.insert(
                (
                    cap.name.to_owned(),
                    format!("{}-{}-1", name.as_str(), cap.name.replace('.', "-")),
                ),
                "made up by the test double".to_owned(),
            );
        }
    }
    out.into_iter()
        .map(|((capability, resource), description)| DiscoveredResource {
            capability,
            resource,
            description,
        })
        .collect()
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn leader(&self) -> LeaderInfo {
        let is_self = self.leader.load(Ordering::SeqCst);
        LeaderInfo {
            term: 4,
            leader: Some(if is_self {
                self.me.clone()
            } else {
                "dc2-a".into()
            }),
            address: Some(
                if is_self {
                    "127.0.0.1:7401"
                } else {
                    "127.0.0.1:7402"
                }
                .into(),
            ),
            is_self,
            orchestrator: self.me.clone(),
        }
    }

    async fn status(&self) -> Result<StatusResponse, BackendError> {
        if self.panic_on_status.load(Ordering::SeqCst) {
            panic!("status exploded (test)");
        }
        let leader = self.leader().await;
        let st = self.state.lock().unwrap();
        let registered = Self::registered(&st);
        let plans = st
            .plans
            .iter()
            .map(|(name, p)| PlanStatus {
                plan: name.as_str().to_owned(),
                owner: p.owner.as_str().to_owned(),
                generation: p.generation,
                paused: p.paused,
                phase: p.phase.clone(),
                last_reason: p.last_reason.clone(),
                sites: p
                    .verdicts
                    .iter()
                    .map(|(s, v)| SiteStatus {
                        site: s.as_str().to_owned(),
                        role: if *s == p.owner {
                            SiteRole::Owner
                        } else {
                            SiteRole::Standby
                        },
                        verdict: (*v).into(),
                        checked_at_ms: None,
                        posture: None,
                        maintenance: p.maintenance.contains(s),
                    })
                    .collect(),
                unworkable: registered.unworkable(name, &p.config),
            })
            .collect();
        Ok(StatusResponse { leader, plans })
    }

    async fn config_source(&self) -> Result<String, BackendError> {
        Ok(self.state.lock().unwrap().config_text.clone())
    }

    async fn plans(&self) -> Result<Vec<PlanView>, BackendError> {
        let st = self.state.lock().unwrap();
        Ok(st.plans.iter().map(|(n, p)| view(n, p)).collect())
    }

    async fn plan(&self, name: &PlanId) -> Result<PlanView, BackendError> {
        let st = self.state.lock().unwrap();
        let p = st
            .plans
            .get(name)
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        Ok(view(name, p))
    }

    async fn create_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        Self::registered(&st).refuse_unworkable(&plan.name, &plan.config)?;
        if st.plans.contains_key(&plan.name) {
            return Err(BackendError::Conflict(format!(
                "plan {:?} already exists; stage a change to it instead",
                plan.name.as_str()
            )));
        }
        let p = new_plan(plan.spec, plan.config);
        let v = view(&plan.name, &p);
        st.plans.insert(plan.name.clone(), p);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Created plan {}", plan.name.as_str()),
            )
            .plan(plan.name.as_str())
            .generation(1),
        );
        Ok(v)
    }

    async fn stage_plan(
        &self,
        caller: &Caller,
        plan: CheckedPlan,
    ) -> Result<PlanView, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        Self::registered(&st).refuse_unworkable(&plan.name, &plan.config)?;
        let p = st
            .plans
            .get_mut(&plan.name)
            .ok_or_else(|| not_found("plan", plan.name.as_str()))?;
        p.staged = Some(StagedPlan {
            spec: plan.spec,
            base_generation: p.generation,
            staged_by: caller.name.clone(),
            staged_at_ms: Some(self.clock_ms.load(Ordering::SeqCst)),
            warnings: plan.warnings.iter().map(IssueDto::from).collect(),
        });
        let (v, g) = (view(&plan.name, p), p.generation);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Staged a change of plan {}", plan.name.as_str()),
            )
            .plan(plan.name.as_str())
            .generation(g),
        );
        Ok(v)
    }

    async fn discard_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
    ) -> Result<PlanView, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(name)
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        if p.staged.take().is_none() {
            return Err(BackendError::Conflict(format!(
                "plan {:?} has no staged change",
                name.as_str()
            )));
        }
        let v = view(name, p);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Discarded the staged change of plan {}", name.as_str()),
            )
            .plan(name.as_str()),
        );
        Ok(v)
    }

    async fn apply_staged(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<PlanView, BackendError> {
        self.write_guard()?;
        let base = self.state.lock().unwrap().config_text.clone();
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(name)
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        cas(name, p, expected)?;
        let Some(staged) = &p.staged else {
            return Err(BackendError::Conflict(format!(
                "plan {:?} has no staged change to apply",
                name.as_str()
            )));
        };
        if staged.base_generation != p.generation {
            return Err(BackendError::Conflict(format!(
                "the staged change was made on generation {}, the plan is at {}: stage it again",
                staged.base_generation, p.generation
            )));
        }
        let checked =
            plan_api::check_plan(&base, name.as_str(), &staged.spec).map_err(|issues| {
                BackendError::Invalid {
                    message: "the staged change no longer validates".into(),
                    issues,
                }
            })?;
        if checked.value.instance(&p.owner).is_none() {
            return Err(BackendError::Refused(format!(
                "the staged change removes the owner {} from the plan: switch over first",
                p.owner
            )));
        }
        let staged = p.staged.take().expect("checked above");
        p.spec = staged.spec;
        p.config = checked.value;
        p.generation += 1;
        for s in p.config.sites() {
            p.verdicts.entry(s.clone()).or_insert(Verdict::Unknown);
        }
        let cfg = p.config.clone();
        p.verdicts.retain(|s, _| cfg.instance(s).is_some());
        let (v, g) = (view(name, p), p.generation);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Applied the staged change of plan {}", name.as_str()),
            )
            .plan(name.as_str())
            .generation(g),
        );
        Ok(v)
    }

    async fn delete_plan(
        &self,
        caller: &Caller,
        name: &PlanId,
        expected: u64,
    ) -> Result<(), BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get(name)
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        cas(name, p, expected)?;
        st.plans.remove(name);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Deleted plan {}", name.as_str()),
            )
            .plan(name.as_str())
            .generation(expected),
        );
        Ok(())
    }

    async fn dry_run(&self, name: &PlanId, what: &DryRun) -> Result<DryRunResult, BackendError> {
        let st = self.state.lock().unwrap();
        let p = st
            .plans
            .get(name)
            .ok_or_else(|| not_found("plan", name.as_str()))?;
        let result = |reason: String, commands: Vec<String>, refused: bool| DryRunResult {
            plan: name.as_str().to_owned(),
            generation: p.generation,
            reason,
            commands,
            refused,
        };
        Ok(match what {
            DryRun::Cycle => result(p.last_reason.clone(), Vec::new(), false),
            DryRun::ApplyStaged => match &p.staged {
                None => {
                    return Err(BackendError::Conflict(format!(
                        "plan {:?} has no staged change",
                        name.as_str()
                    )));
                }
                Some(s) => result(
                    format!(
                        "applying would move plan {} to generation {}",
                        name.as_str(),
                        p.generation + 1
                    ),
                    vec![format!(
                        "replace plan {} (staged by {})",
                        name.as_str(),
                        s.staged_by
                    )],
                    false,
                ),
            },
            DryRun::Switchover { target }
            | DryRun::Failover {
                target: Some(target),
            } => {
                let t = site_in(name, p, target)?;
                if t == p.owner {
                    result(
                        format!("refused: {t} already owns {}", name.as_str()),
                        Vec::new(),
                        true,
                    )
                } else {
                    result(
                        format!("would move {} from {} to {t}", name.as_str(), p.owner),
                        failover_commands(p, &t),
                        false,
                    )
                }
            }
            DryRun::Failover { target: None } => match p.config.sites().find(|s| **s != p.owner) {
                Some(t) => result(
                    format!("would move {} from {} to {t}", name.as_str(), p.owner),
                    failover_commands(p, t),
                    false,
                ),
                None => result("refused: no other site".into(), Vec::new(), true),
            },
        })
    }

    async fn controllers(&self) -> Result<Vec<ControllerView>, BackendError> {
        let st = self.state.lock().unwrap();
        Ok(st
            .controllers
            .iter()
            .map(|(n, c)| controller_view(n, c))
            .collect())
    }

    async fn register_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerView, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        if st.controllers.contains_key(&c.name) {
            return Err(BackendError::Conflict(format!(
                "controller {:?} already exists",
                c.name.as_str()
            )));
        }
        // Later plans may bind it: it joins the configuration they are validated against.
        st.config_text = plan_api::with_entry(
            &st.config_text,
            "controllers",
            c.name.as_str(),
            &c.spec,
            false,
        )
        .map_err(|issues| BackendError::Invalid {
            message: "cannot add the controller".into(),
            issues,
        })?;
        let entry = Controller {
            config: c.config,
            grades: Vec::new(),
            tested_at_ms: None,
        };
        let v = controller_view(&c.name, &entry);
        st.controllers.insert(c.name.clone(), entry);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Config,
                caller.actor(),
                format!("Registered controller {}", c.name.as_str()),
            )
            .data(json!({"controller": c.name.as_str()})),
        );
        Ok(v)
    }

    async fn test_controller(
        &self,
        caller: &Caller,
        name: &ControllerId,
    ) -> Result<ControllerTest, BackendError> {
        let t = self.now();
        let mut st = self.state.lock().unwrap();
        let c = st
            .controllers
            .get_mut(name)
            .ok_or_else(|| not_found("controller", name.as_str()))?;
        let test = double_test(
            name,
            &c.config,
            &[],
            self.simulate_targets.load(Ordering::SeqCst),
        );
        c.grades = test.grades.clone();
        c.tested_at_ms = Some(t);
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Tested controller {}", name.as_str()),
            ),
        );
        Ok(test)
    }

    async fn probe_controller(
        &self,
        caller: &Caller,
        c: CheckedController,
    ) -> Result<ControllerTest, BackendError> {
        let mut st = self.state.lock().unwrap();
        if st.controllers.contains_key(&c.name) {
            return Err(BackendError::Conflict(format!(
                "controller {:?} is registered: test it (POST /api/v1/controllers/{}/test) \
                 instead of probing it",
                c.name.as_str(),
                c.name.as_str()
            )));
        }
        let warnings: Vec<String> = c
            .warnings
            .iter()
            .map(|i| format!("{}: {}", i.path, i.message))
            .collect();
        let test = double_test(
            &c.name,
            &c.config,
            &warnings,
            self.simulate_targets.load(Ordering::SeqCst),
        );
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Probed controller {} (not registered)", c.name.as_str()),
            )
            .data(json!({"controller": c.name.as_str(), "reachable": test.reachable})),
        );
        Ok(test)
    }

    async fn discover(
        &self,
        controller: &ControllerId,
    ) -> Result<Vec<DiscoveredResource>, BackendError> {
        let st = self.state.lock().unwrap();
        let c = st
            .controllers
            .get(controller)
            .ok_or_else(|| not_found("controller", controller.as_str()))?;
        if double_unreachable(&c.config) {
            return Err(BackendError::Unavailable(format!(
                "controller {} could not be listed: its endpoint does not resolve (test double)",
                controller.as_str()
            )));
        }
        Ok(double_resources(controller, &c.config, &st.plans))
    }

    async fn switchover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &SwitchoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(plan)
            .ok_or_else(|| not_found("plan", plan.as_str()))?;
        cas(plan, p, req.expected_generation)?;
        let t = site_in(plan, p, &req.target)?;
        if t == p.owner {
            return Err(BackendError::Refused(format!(
                "{t} already owns plan {}",
                plan.as_str()
            )));
        }
        self.start_move(p, &t, "switchover", |from| {
            format!("switched over from {from} to {t}")
        })?;
        let (g, reason) = (p.generation, p.last_reason.clone());
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Switchover of {} to {t}", plan.as_str()),
            )
            .plan(plan.as_str())
            .site(t.as_str())
            .generation(g)
            .data(json!({"reason": req.reason})),
        );
        Ok(OperationAccepted {
            plan: plan.as_str().to_owned(),
            operation: "switchover".into(),
            generation: g,
            reason,
        })
    }

    async fn failover(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &FailoverRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(plan)
            .ok_or_else(|| not_found("plan", plan.as_str()))?;
        cas(plan, p, req.expected_generation)?;
        let t = match &req.target {
            Some(t) => site_in(plan, p, t)?,
            None => p
                .config
                .sites()
                .find(|s| **s != p.owner)
                .cloned()
                .ok_or_else(|| BackendError::Refused("no other site to fail over to".into()))?,
        };
        if t == p.owner {
            return Err(BackendError::Refused(format!(
                "{t} already owns plan {}",
                plan.as_str()
            )));
        }
        let verdict = p
            .verdicts
            .get(&p.owner)
            .copied()
            .unwrap_or(Verdict::Unknown);
        if verdict != Verdict::Fenced {
            return Err(BackendError::Refused(format!(
                "refused: {} is {verdict}, not proven FENCED; fence it or confirm it fenced first",
                p.owner
            )));
        }
        self.start_move(p, &t, "failover", |from| {
            format!("failed over from {from} (FENCED) to {t}")
        })?;
        let (g, reason) = (p.generation, p.last_reason.clone());
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Failover of {} to {t}", plan.as_str()),
            )
            .plan(plan.as_str())
            .site(t.as_str())
            .generation(g),
        );
        Ok(OperationAccepted {
            plan: plan.as_str().to_owned(),
            operation: "failover".into(),
            generation: g,
            reason,
        })
    }

    async fn confirm_fenced(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &ConfirmFencedRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(plan)
            .ok_or_else(|| not_found("plan", plan.as_str()))?;
        if p.config.instance(site).is_none() {
            return Err(not_found("site", site.as_str()));
        }
        cas(plan, p, req.expected_generation)?;
        p.verdicts.insert(site.clone(), Verdict::Fenced);
        p.generation += 1;
        let g = p.generation;
        self.record(
            &mut st,
            NewEvent::new(
                EventKind::Operator,
                caller.actor(),
                format!("Confirmed {site} fenced by hand"),
            )
            .plan(plan.as_str())
            .site(site.as_str())
            .generation(g)
            .data(json!({"reason": req.reason})),
        );
        Ok(OperationAccepted {
            plan: plan.as_str().to_owned(),
            operation: "confirm_fenced".into(),
            generation: g,
            reason: format!("{site} confirmed fenced by {}", caller.name),
        })
    }

    async fn pause(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.set_paused(caller, plan, req, true)
    }

    async fn resume(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.set_paused(caller, plan, req, false)
    }

    async fn set_maintenance(
        &self,
        caller: &Caller,
        plan: &PlanId,
        site: &SiteId,
        req: &MaintenanceRequest,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(plan)
            .ok_or_else(|| not_found("plan", plan.as_str()))?;
        if p.config.instance(site).is_none() {
            return Err(not_found("site", site.as_str()));
        }
        cas(plan, p, req.expected_generation)?;
        if req.enabled && *site == p.owner {
            return Err(BackendError::Refused(format!(
                "{site} owns plan {}: switch over before putting it in maintenance",
                plan.as_str()
            )));
        }
        let changed = if req.enabled {
            p.maintenance.insert(site.clone())
        } else {
            p.maintenance.remove(site)
        };
        // As in the daemon: no owner changes, so the generation stays.
        let g = p.generation;
        if changed {
            self.record(
                &mut st,
                NewEvent::new(
                    EventKind::Operator,
                    caller.actor(),
                    format!(
                        "{} {site} maintenance",
                        if req.enabled { "Started" } else { "Ended" }
                    ),
                )
                .plan(plan.as_str())
                .site(site.as_str())
                .generation(g)
                .data(json!({"reason": req.reason})),
            );
        }
        Ok(OperationAccepted {
            plan: plan.as_str().to_owned(),
            operation: "maintenance".into(),
            generation: g,
            reason: format!(
                "{site} {} maintenance",
                if req.enabled { "in" } else { "out of" }
            ),
        })
    }

    async fn secrets(&self) -> Result<Vec<SecretRefView>, BackendError> {
        let st = self.state.lock().unwrap();
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, c) in &st.controllers {
            if let Some(s) = &c.config.secret {
                by.entry(s.as_str().to_owned())
                    .or_default()
                    .push(id.as_str().to_owned());
            }
        }
        Ok(by
            .into_iter()
            .map(|(name, used_by)| SecretRefView { name, used_by })
            .collect())
    }

    async fn events(&self, query: &EventQuery) -> Result<EventPage, BackendError> {
        Ok(self.state.lock().unwrap().log.query(query))
    }

    async fn orchestrators(&self) -> Result<Vec<OrchestratorView>, BackendError> {
        let slow = *self.slow_orchestrators.lock().unwrap();
        if let Some(d) = slow {
            tokio::time::sleep(d).await;
        }
        Ok(self.state.lock().unwrap().orchestrators.clone())
    }
}

impl MemoryBackend {
    /// Moves `p` to `t` (a switchover or a failover, `kind`), once the caller's own checks
    /// passed: refused for a site in maintenance; the generation moves on; with operations held
    /// the move waits as pending, otherwise it completes and `done(old owner)` says so.
    fn start_move(
        &self,
        p: &mut Plan,
        t: &SiteId,
        kind: &str,
        done: impl FnOnce(&SiteId) -> String,
    ) -> Result<(), BackendError> {
        if p.maintenance.contains(t) {
            return Err(BackendError::Refused(format!(
                "{t} is in maintenance: take it out first"
            )));
        }
        p.generation += 1;
        if self.hold_operations.load(Ordering::SeqCst) {
            p.pending = Some(t.clone());
            p.phase = kind.into();
            p.last_reason = format!("{kind} to {t} accepted");
        } else {
            let from = std::mem::replace(&mut p.owner, t.clone());
            p.last_reason = done(&from);
        }
        Ok(())
    }

    fn set_paused(
        &self,
        caller: &Caller,
        plan: &PlanId,
        req: &PauseRequest,
        paused: bool,
    ) -> Result<OperationAccepted, BackendError> {
        self.write_guard()?;
        let mut st = self.state.lock().unwrap();
        let p = st
            .plans
            .get_mut(plan)
            .ok_or_else(|| not_found("plan", plan.as_str()))?;
        let op = if paused { "pause" } else { "resume" };
        // Idempotent: pausing a paused plan is success, and recorded once.
        let changed = p.paused != paused;
        p.paused = paused;
        let g = p.generation;
        if changed {
            self.record(
                &mut st,
                NewEvent::new(
                    EventKind::Operator,
                    caller.actor(),
                    format!(
                        "{} {}",
                        if paused { "Paused" } else { "Resumed" },
                        plan.as_str()
                    ),
                )
                .plan(plan.as_str())
                .data(json!({"reason": req.reason})),
            );
        }
        Ok(OperationAccepted {
            plan: plan.as_str().to_owned(),
            operation: op.into(),
            generation: g,
            reason: format!(
                "{} {}",
                plan.as_str(),
                if paused { "paused" } else { "running" }
            ),
        })
    }
}
