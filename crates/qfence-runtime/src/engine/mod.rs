//! The engine: one decision per plan per tick, on the leader only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use qfence_cluster::node::ClusterNode;
use qfence_cluster::state::{
    Command as ClusterCommand, ControllerRecord, PlanStateDoc, Response, STATUS_FORMAT,
    SiteVerdict, StatusDraft,
};
use qfence_core::{
    BindingKey, Decision, Leadership, Millis, Observation, OpId, OpResult, PlanState, Reason,
    Rules, Snapshot, StoredPlanState, decide,
};
use qfence_model::config::ValidatedConfig;
use qfence_model::{Generation, OrchestratorId, PlanId, Verdict};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::effective::{ConfigCell, EffectiveConfig};
use super::executor::Executor;
use super::systemd::{Beat, Heartbeat};
use super::{Clock, RuntimeError};
use crate::events::{EventKind, EventLog, JsonlStore, NewEvent};
use crate::metrics::Metrics;

/// The schema number of the plan state the core defines, as stored in the cluster.
pub const PLAN_STATE_SCHEMA: u32 = 1;
/// While a transition runs, the leader republishes its status at least this often, so a
/// follower's `status --watch` moves with the steps.
pub const PUBLISH_DURING_TRANSITION: Duration = Duration::from_secs(2);
/// The longest a status write may hold up a cycle.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);
/// In steady state an unchanged status is republished this often (check times move on).
pub const PUBLISH_WHEN_STEADY: Duration = Duration::from_secs(30);
/// Plans decided on one read of the replicated state whose cluster writes then go together
/// (concurrently, so the cluster commits them in few log batches).
pub const DECIDE_BATCH: usize = 128;
/// Statuses carried by one `PublishStatuses` write.
pub const PUBLISH_BATCH: usize = 500;
/// Cluster writes of registration at start-up in flight at once.
const REGISTER_CONCURRENCY: usize = 64;

/// Timers of the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The longest wait between two ticks (a result or an intent wakes it sooner). Defaults to
    /// the shortest plan interval.
    pub tick: Duration,
    /// How long a leadership confirmed by the cluster counts as a lease for the core.
    pub lease: Duration,
    /// Told on every turn of the loop (systemd's readiness and watchdog); none by default.
    pub heartbeat: Option<Heartbeat>,
}

impl EngineOptions {
    /// The defaults for a configuration.
    pub fn for_config(config: &ValidatedConfig) -> Self {
        let tick = config
            .plans()
            .map(|(_, p)| p.interval)
            .min()
            .unwrap_or(Duration::from_secs(10));
        Self {
            tick,
            lease: Duration::from_secs(1),
            heartbeat: None,
        }
    }
}

/// What the runtime keeps about one plan between ticks. Not replicated: a new leader starts
/// with nothing read, and the core re-checks before it relies on anything.
#[derive(Debug, Clone, Default)]
pub struct PlanRuntime {
    pub observations: BTreeMap<BindingKey, Observation>,
    pub results: BTreeMap<OpId, OpResult>,
    pub in_flight: BTreeMap<OpId, BindingKey>,
    /// The last decision's sentence.
    pub last_reason: Option<String>,
    /// The last decision's verdict of each site, judged with its sentence (see
    /// [`qfence_core::Decision::sites`]): what the status shows beside that sentence.
    pub last_sites: Vec<qfence_core::rules::SiteVerdict>,
    /// The last sentence recorded in the event log, times of day masked.
    pub last_recorded: Option<String>,
    /// What this orchestrator last published as the plan's status (term, verdicts and the
    /// sentence with times masked) and when.
    pub last_published: Option<(String, Millis)>,
}

impl PlanRuntime {
    /// Forgets every reading and result, when the plan's configuration is replaced through
    /// the API: the new one starts unread. Operations in flight stay counted until they end;
    /// their results are filed under their bindings' keys (ids, not positions) only if the
    /// new configuration still has each binding as it was.
    pub fn reset(&mut self) {
        self.observations.clear();
        self.results.clear();
        self.last_reason = None;
        self.last_sites.clear();
        self.last_recorded = None;
        self.last_published = None;
    }
}

/// Each site's verdict and newest proving-fence check time: what the leader shows and
/// publishes beside the last sentence. They are the last decision's own verdicts, so the two
/// never disagree (judging again here, at another `now` or with another rule for the
/// owner, once showed "dc1 FENCED" beside "dc1 not fenced (...)"). Before this orchestrator
/// has decided the plan, there is no sentence to agree with: the core's
/// [`Rules::shown_verdict`] judges its observations now.
pub(crate) fn site_verdicts(
    config: &ValidatedConfig,
    plan: &qfence_model::config::PlanConfig,
    state: &PlanState,
    view: &PlanRuntime,
    now: Millis,
) -> Vec<SiteVerdict> {
    let rules = Rules::default();
    plan.sites()
        .map(|site| {
            let v = match view.last_sites.iter().find(|v| v.site == *site) {
                Some(v) => v.clone(),
                None if !view.last_sites.is_empty() => {
                    // The decision judged the plan without this site (its configuration
                    // changed since): it was not seen, UNKNOWN.
                    return SiteVerdict {
                        site: site.clone(),
                        verdict: Verdict::Unknown,
                        checked_at_ms: None,
                    };
                }
                None => rules.shown_verdict(config, plan, state, &view.observations, site, now),
            };
            SiteVerdict {
                site: site.clone(),
                verdict: v.verdict,
                checked_at_ms: v.readings.iter().filter_map(|r| r.at.map(|a| a.0)).max(),
            }
        })
        .collect()
}

/// The sentence with every `HH:MM:SS` replaced by `--:--:--`, to tell a new sentence from the
/// same one at a later time.
pub fn without_times(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let is_time = i + 8 <= b.len()
            && b[i..i + 8].iter().enumerate().all(|(j, c)| {
                if j == 2 || j == 5 {
                    *c == b':'
                } else {
                    c.is_ascii_digit()
                }
            });
        if is_time {
            out.push_str("--:--:--");
            i += 8;
        } else {
            let ch = s[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The parts the engine, the executor and the API backend share.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The effective configuration (the file's plus the API's), swapped whole when the
    /// replicated API entries change: take one snapshot ([`Inner::config`]) and use it
    /// throughout a step.
    pub cell: Arc<ConfigCell>,
    pub node: ClusterNode,
    pub me: OrchestratorId,
    pub events: Mutex<EventLog<JsonlStore>>,
    pub metrics: Metrics,
    pub clock: Clock,
    pub plans: Mutex<BTreeMap<PlanId, PlanRuntime>>,
    /// A plan's state writes one at a time: the cluster compares the generation, this lock
    /// makes the revision half of the compare-and-set hold too. One lock per plan, so plans
    /// commit concurrently.
    pub write_locks: Mutex<BTreeMap<PlanId, Arc<tokio::sync::Mutex<()>>>>,
    /// Controller registrations through the API one at a time (the name check and the
    /// write are one).
    pub controller_lock: tokio::sync::Mutex<()>,
    pub wake: Notify,
    /// Plans with news (a result came back) since the last tick: a wake decides only these;
    /// every plan is decided at least every `options.tick`.
    pub dirty: Mutex<BTreeSet<PlanId>>,
    /// Set by [`Inner::wake_all`]: the next tick decides every plan.
    pub wake_all: AtomicBool,
    /// Draining: no new operations start.
    pub draining: AtomicBool,
    pub options: EngineOptions,
    /// The controllers' latest tests, decoded (see [`super::registered`]).
    pub registered: super::registered::RegisteredCache,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    /// The effective configuration as last built.
    pub fn config(&self) -> Arc<EffectiveConfig> {
        self.cell.get()
    }

    pub fn runtime(&self) -> MutexGuard<'_, BTreeMap<PlanId, PlanRuntime>> {
        lock(&self.plans)
    }

    /// What the controllers' latest tests established (pinned identities, failed grades).
    pub fn registered(&self) -> Arc<super::registered::Registered> {
        self.node.read(|s| self.registered.get(&s.controller_tests))
    }

    /// Appends one record to the event log. A log that cannot be written is an operator's
    /// problem, said at ERROR; the runtime goes on (refusing to fence because a disk is full
    /// would be worse).
    pub fn record(&self, event: NewEvent) {
        let at = self.clock.now().0;
        if let Err(e) = lock(&self.events).append(event, at) {
            tracing::error!(error = %e, "Could not append to the event log");
        }
    }

    /// Wakes the engine for a tick that decides `plan` (and any other plan with news).
    pub fn wake_plan(&self, plan: &PlanId) {
        lock(&self.dirty).insert(plan.clone());
        self.wake.notify_one();
    }

    /// Wakes the engine for a tick that decides every plan (an operator's intent).
    pub fn wake_all(&self) {
        self.wake_all.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// The plan's replicated state, or `None` when the cluster does not know the plan yet.
    /// Reads that one plan's record in place (no copy of the whole replicated state).
    pub fn plan_state(&self, plan: &PlanId) -> Result<Option<PlanState>, RuntimeError> {
        self.plan_states(std::slice::from_ref(plan))
            .pop()
            .and_then(|(_, s)| s.transpose())
            .transpose()
    }

    /// The replicated state of each of `plans`, read together under one read of the cluster
    /// state (the documents are decoded after the read lock is released).
    pub fn plan_states(
        &self,
        plans: &[PlanId],
    ) -> Vec<(PlanId, Result<Option<PlanState>, RuntimeError>)> {
        let docs: Vec<Option<PlanStateDoc>> = self.node.read(|state| {
            plans
                .iter()
                .map(|p| state.plans.get(p).map(|r| r.state.clone()))
                .collect()
        });
        plans
            .iter()
            .zip(docs)
            .map(|(plan, doc)| {
                let decoded = doc
                    .map(|doc| {
                        doc.decode::<StoredPlanState>(PLAN_STATE_SCHEMA)
                            .map(StoredPlanState::into_current)
                            .map_err(|e| RuntimeError::Plan {
                                plan: plan.to_string(),
                                reason: e.to_string(),
                            })
                    })
                    .transpose();
                (plan.clone(), decoded)
            })
            .collect()
    }

    /// Registers every controller and plan of the configuration file the cluster does not
    /// know yet (plans at their initial state), so routing and the compare-and-set have them;
    /// the API registers its own. The writes of many plans go concurrently, so the cluster
    /// commits them in few batches.
    pub async fn register_plans(&self) -> Result<(), RuntimeError> {
        let file = self.cell.file();
        let controllers: Vec<ControllerRecord> = file
            .config()
            .controllers
            .iter()
            .map(|(id, c)| ControllerRecord {
                id: id.clone(),
                site: c.site.clone(),
                reach: c.reach.clone(),
                // Secrets appear here by reference only.
                config: serde_json::to_value(c).unwrap_or_default(),
            })
            .collect();
        let (controllers, missing): (Vec<ControllerRecord>, Vec<PlanId>) =
            self.node.read(|cluster| {
                (
                    controllers
                        .into_iter()
                        .filter(|r| cluster.controllers.get(&r.id) != Some(r))
                        .collect(),
                    file.plans()
                        .filter(|(id, _)| !cluster.plans.contains_key(*id))
                        .map(|(id, _)| id.clone())
                        .collect(),
                )
            });
        for record in controllers {
            self.node
                .write(ClusterCommand::RegisterController { controller: record })
                .await?;
        }
        let mut writes = futures_util::stream::iter(missing.into_iter().map(|id| async move {
            let plan = file.plan(id.as_str()).ok_or_else(|| RuntimeError::Plan {
                plan: id.to_string(),
                reason: "not configured".into(),
            })?;
            let initial = StoredPlanState::from(PlanState::initial(plan));
            let doc =
                PlanStateDoc::encode(PLAN_STATE_SCHEMA, Generation(1), &initial).map_err(|e| {
                    RuntimeError::Plan {
                        plan: id.to_string(),
                        reason: e.to_string(),
                    }
                })?;
            self.node
                .write(ClusterCommand::RegisterPlan {
                    plan: id.clone(),
                    config: serde_json::json!({"owner": plan.owner}),
                    initial_state: doc,
                })
                .await?;
            tracing::info!(plan = %id, owner = %plan.owner, "Registered the plan at generation 1");
            Ok::<(), RuntimeError>(())
        }))
        .buffer_unordered(REGISTER_CONCURRENCY);
        let mut first_error = None;
        while let Some(r) = writes.next().await {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The lock that makes one plan's writes go one at a time on this orchestrator.
    pub fn write_lock(&self, plan: &PlanId) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.write_locks)
            .entry(plan.clone())
            .or_default()
            .clone()
    }

    /// Writes `change` if the plan is still exactly as it was decided on: generation and
    /// revision. Returns the state written.
    pub async fn commit(
        &self,
        plan: &PlanId,
        change: &qfence_core::PlanStateChange,
    ) -> Result<PlanState, RuntimeError> {
        let writer = self.write_lock(plan);
        let _one_writer = writer.lock().await;
        let current = self.plan_state(plan)?.ok_or_else(|| RuntimeError::Plan {
            plan: plan.to_string(),
            reason: "not registered".into(),
        })?;
        let next = current
            .apply(change)
            .map_err(|source| RuntimeError::Stale {
                plan: plan.to_string(),
                source,
            })?;
        self.cas(plan, current.generation, &next).await?;
        Ok(next)
    }

    /// Changes the plan's state through `f`, if it is at `expected` (operators' intents).
    pub async fn update(
        &self,
        plan: &PlanId,
        expected: Option<Generation>,
        f: impl FnOnce(&mut PlanState),
    ) -> Result<PlanState, RuntimeError> {
        self.try_update(plan, expected, |s| {
            f(s);
            Ok(())
        })
        .await
    }

    /// Like [`Inner::update`], but `f` may refuse on the state it is given (the current one,
    /// read under the write lock), and then nothing is written.
    pub async fn try_update(
        &self,
        plan: &PlanId,
        expected: Option<Generation>,
        f: impl FnOnce(&mut PlanState) -> Result<(), RuntimeError>,
    ) -> Result<PlanState, RuntimeError> {
        let writer = self.write_lock(plan);
        let _one_writer = writer.lock().await;
        let current = self.plan_state(plan)?.ok_or_else(|| RuntimeError::Plan {
            plan: plan.to_string(),
            reason: "not registered".into(),
        })?;
        if let Some(expected) = expected
            && expected != current.generation
        {
            return Err(RuntimeError::Generation {
                plan: plan.to_string(),
                expected: expected.0,
                current: current.generation.0,
            });
        }
        let mut next = current.clone();
        f(&mut next)?;
        next.revision = current.revision + 1;
        self.cas(plan, current.generation, &next).await?;
        Ok(next)
    }

    async fn cas(
        &self,
        plan: &PlanId,
        expected: Generation,
        next: &PlanState,
    ) -> Result<(), RuntimeError> {
        let doc = PlanStateDoc::encode(
            PLAN_STATE_SCHEMA,
            next.generation,
            &StoredPlanState::from(next.clone()),
        )
        .map_err(|e| RuntimeError::Plan {
            plan: plan.to_string(),
            reason: e.to_string(),
        })?;
        let response = self
            .node
            .write(ClusterCommand::PlanStateCas {
                plan: plan.clone(),
                expected_generation: expected,
                new_state: doc,
            })
            .await?;
        match response {
            Response::Applied => Ok(()),
            Response::Conflict { current, .. } => Err(RuntimeError::Generation {
                plan: plan.to_string(),
                expected: expected.0,
                current: current.0,
            }),
            other => Err(RuntimeError::Plan {
                plan: plan.to_string(),
                reason: format!("the cluster refused the write: {other:?}"),
            }),
        }
    }
}

/// The runtime loop of one orchestrator.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    executor: Executor,
    /// Where the next full tick starts in the list of plans: it moves on every tick, so no
    /// plan is always decided last.
    rotation: Arc<AtomicUsize>,
}

/// The leadership a run of decisions is made under.
#[derive(Debug, Clone)]
struct Lease {
    leadership: Leadership,
    token: Option<CancellationToken>,
    /// When the confirmation was asked for: the lease counts from here, not from the answer,
    /// so a slow confirmation shortens it rather than stretching it.
    from: Millis,
}

/// One plan's decision, made under `token` (`None`: not leading), waiting to be acted on.
struct Decided {
    plan: PlanId,
    state: PlanState,
    decision: Decision,
    term: qfence_model::Term,
    token: Option<CancellationToken>,
}

/// A status to publish, and what its publication will be remembered as.
struct ToPublish {
    status: StatusDraft,
    gist: String,
    token: CancellationToken,
}

impl Engine {
    /// An engine over a started cluster node, the configuration cell and an event log.
    /// The cell is attached to `node`: from now on it follows the API's replicated entries.
    pub fn new(
        cell: Arc<ConfigCell>,
        node: ClusterNode,
        events: EventLog<JsonlStore>,
        metrics: Metrics,
        options: EngineOptions,
    ) -> Self {
        cell.attach(node.clone());
        cell.refresh();
        let inner = Arc::new(Inner {
            me: node.name().clone(),
            cell,
            node,
            events: Mutex::new(events),
            metrics,
            clock: Clock::system(),
            plans: Mutex::new(BTreeMap::new()),
            write_locks: Mutex::new(BTreeMap::new()),
            controller_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            dirty: Mutex::new(BTreeSet::new()),
            wake_all: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            options,
            registered: Default::default(),
        });
        Self {
            executor: Executor::new(inner.clone()),
            inner,
            rotation: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The executor (tests start commands through it directly).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Each plan's runtime view: observations, results, in flight, last sentence.
    pub fn runtime(&self, plan: &PlanId) -> PlanRuntime {
        self.inner.runtime().get(plan).cloned().unwrap_or_default()
    }

    /// The plan's replicated state.
    pub fn plan_state(&self, plan: &PlanId) -> Result<Option<PlanState>, RuntimeError> {
        self.inner.plan_state(plan)
    }

    /// Every record of the event log so far.
    pub fn events(&self) -> Vec<crate::events::Event> {
        lock(&self.inner.events).all().to_vec()
    }

    /// The effective configuration in force (the file's plus the API's), rebuilt first if
    /// the API's replicated entries changed.
    pub fn config(&self) -> Arc<EffectiveConfig> {
        self.inner.cell.refresh()
    }

    /// The clock decisions read.
    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Registers the configured controllers and plans in the cluster (the leader does it on
    /// every tick; this is for start-up and tests).
    pub async fn register(&self) -> Result<(), RuntimeError> {
        self.inner.register_plans().await
    }

    /// Wakes the loop for an immediate tick of every plan.
    pub fn wake(&self) {
        self.inner.wake_all();
    }

    /// Runs ticks until `stop` is cancelled: every plan at least every `options.tick`, and,
    /// when results come back in between, the plans they belong to.
    pub async fn run(self, stop: CancellationToken) {
        let mut next_full = tokio::time::Instant::now();
        let heartbeat = self.inner.options.heartbeat.clone();
        let mut ticked = false;
        loop {
            let now = tokio::time::Instant::now();
            let full = self.inner.wake_all.swap(false, Ordering::SeqCst) || now >= next_full;
            let dirty = std::mem::take(&mut *lock(&self.inner.dirty));
            let only = if full {
                // A plan created through the API may want a shorter interval than the file's.
                let every = self
                    .inner
                    .config()
                    .plans()
                    .map(|(_, p)| p.interval)
                    .min()
                    .map_or(self.inner.options.tick, |i| i.min(self.inner.options.tick));
                next_full = now + every;
                None
            } else {
                Some(dirty)
            };
            if only.as_ref().is_none_or(|d| !d.is_empty()) {
                // A tick can wait on the cluster (a leader that lost its quorum); stopping must
                // not.
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = self.tick_plans(only) => {}
                }
                // What the tick recorded is on disk before the engine waits again.
                if let Err(e) = lock(&self.inner.events).sync() {
                    tracing::error!("The event log could not be synced: {e}");
                }
                if let Some(h) = heartbeat.as_ref().filter(|_| !ticked) {
                    (h.beat)(Beat::FirstTick);
                }
                ticked = true;
            }
            if let Some(h) = &heartbeat {
                (h.beat)(Beat::Alive);
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = Heartbeat::due(heartbeat.as_ref()) => {}
                () = tokio::time::sleep_until(next_full) => {}
                // A short pause coalesces a burst of results into one tick.
                () = self.inner.wake.notified() => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        if let Err(e) = lock(&self.inner.events).sync() {
            tracing::error!("The event log could not be synced: {e}");
        }
        tracing::info!(orchestrator = %self.inner.me, "The engine stopped");
    }

    /// Stops starting operations (but the owner's dead-man renewals) and waits up to
    /// `timeout` for those in flight; then, if this orchestrator leads, hands the leadership
    /// to another live voter (ADR 0013): the owner's switch is renewed all along, by this
    /// leader until the next one has taken over, so a routine restart never leaves it
    /// unrenewed for a failure detection and an election. Returns how many operations were
    /// still running when it gave up (renewals not counted: they go on until the engine stops).
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.inner.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + timeout;
        let left = loop {
            let n = self.executor.in_flight_but_renewals();
            if n == 0 || tokio::time::Instant::now() >= deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.hand_over().await;
        left
    }

    /// Hands the leadership to another live voter, if this orchestrator leads, and waits
    /// (bounded) until one has it.
    async fn hand_over(&self) {
        let node = &self.inner.node;
        let me = &self.inner.me;
        if node.leader().as_ref() != Some(me) {
            return;
        }
        let status = node.status();
        // A witness may lead, but it calls no controller itself: every renewal would take a
        // forwarding hop, so a site's orchestrator is preferred.
        let mut candidates: Vec<_> = status
            .members
            .iter()
            .filter(|m| &m.name != me && m.voter && m.live == Some(true))
            .collect();
        candidates.sort_by_key(|m| m.witness);
        let Some(to) = candidates.first().map(|m| m.name.clone()) else {
            tracing::warn!(orchestrator = %me, "No other live voter to hand the leadership to: the next leader is elected after this one stops");
            return;
        };
        if let Err(e) = node.transfer_leadership(&to).await {
            tracing::warn!(orchestrator = %me, to = %to, "The leadership could not be handed over: {e}");
            return;
        }
        let until = tokio::time::Instant::now() + HAND_OVER_WAIT;
        while tokio::time::Instant::now() < until {
            if node.leader().is_some_and(|l| &l != me) {
                tracing::info!(orchestrator = %me, to = %to, "Handed the leadership over before stopping");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(orchestrator = %me, to = %to, "The leadership hand-over did not complete within {HAND_OVER_WAIT:?}");
    }

    /// One tick: decide every plan (when leading), commit, execute.
    pub async fn tick(&self) {
        self.tick_plans(None).await;
    }

    /// Asks the cluster whether this orchestrator leads with a valid lease.
    async fn confirm(&self) -> Lease {
        let inner = &self.inner;
        let from = inner.clock.now();
        // A leader without a quorum may never get its lease confirmed (openraft waits for the
        // read index to apply): bounded, and then it is not leading.
        let lead = match tokio::time::timeout(
            inner.options.lease.max(PUBLISH_TIMEOUT) * 2,
            inner.node.leadership(),
        )
        .await
        {
            Ok(lead) => lead,
            Err(_) => Err(qfence_cluster::ClusterError::NotLeader { leader: None }),
        };
        match lead {
            Ok(l) if !l.token.is_cancelled() => Lease {
                leadership: Leadership {
                    leader: true,
                    term: l.term,
                    lease_until: from.plus(inner.options.lease),
                },
                token: Some(l.token),
                from,
            },
            _ => Lease {
                leadership: Leadership {
                    leader: false,
                    term: inner.node.term(),
                    lease_until: from,
                },
                token: None,
                from,
            },
        }
    }

    /// Decides `only` these plans, or every plan, in batches of [`DECIDE_BATCH`]: one read of
    /// the replicated state per batch; the lease confirmed again whenever half of it is spent,
    /// so each decision gets the lease actually held when it is made; then the batch's
    /// commits go together, each plan's commands start once its own commit is in, and the
    /// statuses to publish go in one write per [`PUBLISH_BATCH`] at the end.
    async fn tick_plans(&self, only: Option<BTreeSet<PlanId>>) {
        let inner = &self.inner;
        let mut lease = self.confirm().await;
        // Plans with news are registered already: only a full tick looks for new ones.
        if only.is_none()
            && lease.token.is_some()
            && let Err(e) = inner.register_plans().await
        {
            tracing::warn!(error = %e, "Could not register the configured plans");
            return;
        }
        // One configuration for the whole tick; plans created, changed or deleted through the
        // API since the last one are in it.
        let config = inner.cell.refresh();
        let mut plans: Vec<PlanId> = config
            .plans()
            .map(|(id, _)| id)
            .filter(|id| only.as_ref().is_none_or(|o| o.contains(*id)))
            .cloned()
            .collect();
        if only.is_none() && !plans.is_empty() {
            let start = self.rotation.fetch_add(DECIDE_BATCH, Ordering::Relaxed) % plans.len();
            plans.rotate_left(start);
        }
        let renew_after = inner.options.lease / 2;
        let mut to_publish = Vec::new();
        for batch in plans.chunks(DECIDE_BATCH) {
            let mut decided = Vec::with_capacity(batch.len());
            for (plan, state) in inner.plan_states(batch) {
                if lease.token.is_some() && inner.clock.now() >= lease.from.plus(renew_after) {
                    lease = self.confirm().await;
                }
                match state {
                    Ok(Some(state)) => decided.push(self.decide_plan(&config, plan, state, &lease)),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(plan = %plan, error = %e, "The plan's cycle ended without acting");
                    }
                }
            }
            let acted =
                futures_util::future::join_all(decided.into_iter().map(|d| self.act(&config, d)));
            to_publish.extend(acted.await.into_iter().flatten());
        }
        self.publish(to_publish).await;
        // Only the leader exports plans; a full tick drops the plans deleted since.
        if lease.token.is_none() {
            inner.metrics.retain_plans(&|_| false);
        } else if only.is_none() {
            inner.metrics.retain_plans(&|p| config.plan(p).is_some());
        }
    }

    /// Decides one plan on its replicated `state` under `lease`, and records what is news.
    fn decide_plan(
        &self,
        config: &EffectiveConfig,
        plan: PlanId,
        state: PlanState,
        lease: &Lease,
    ) -> Decided {
        let inner = &self.inner;
        let leadership = lease.leadership;
        let now = inner.clock.now();
        let view = self.runtime(&plan);
        let decision = decide(&Snapshot {
            config,
            plan: plan.clone(),
            state: &state,
            observations: &view.observations,
            results: &view.results,
            in_flight: &view.in_flight,
            leadership,
            now,
        });
        inner.metrics.decision(plan.as_str());
        // Routine checks are not news: a decision is recorded when it changes the state, acts
        // beyond checking, or says something new (times of day aside).
        let acted = decision.state_change.is_some()
            || decision
                .commands
                .iter()
                .any(|c| !matches!(c.action, qfence_core::Action::Check { .. }));
        let gist = without_times(&decision.reason.gist());
        let changed = view.last_recorded.as_deref() != Some(gist.as_str());
        if acted || changed {
            tracing::info!(plan = %plan, term = %leadership.term, generation = %state.generation,
                "{}", super::capitalised(&decision.reason));
            inner.record(
                NewEvent::new(EventKind::Decision, inner.me.as_str(), decision.reason.to_string())
                    .plan(plan.as_str())
                    .term(leadership.term.0)
                    .generation(state.generation.0)
                    .data(serde_json::json!({
                        "commands": decision.commands.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "state_change": decision.state_change.is_some(),
                    })),
            );
        }
        {
            let mut all = inner.runtime();
            let entry = all.entry(plan.clone()).or_default();
            entry.last_reason = Some(decision.reason.to_string());
            entry.last_sites = decision.sites.clone();
            if acted || changed {
                entry.last_recorded = Some(gist);
            }
            prune(entry, &state, now, config.plan(plan.as_str()));
        }
        Decided {
            plan,
            state,
            decision,
            term: leadership.term,
            token: lease.token.clone(),
        }
    }

    /// Acts on a decision made as leader: commits its state change (a stale generation is
    /// refused by the cluster, and then nothing starts), starts its commands, and says what
    /// status to publish, if any.
    async fn act(&self, config: &EffectiveConfig, d: Decided) -> Option<ToPublish> {
        let inner = &self.inner;
        let token = d.token?;
        let plan = &d.plan;
        let mut state = d.state;
        if let Some(change) = &d.decision.state_change {
            let next = match inner.commit(plan, change).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(plan = %plan, error = %e, "The plan's cycle ended without acting");
                    return None;
                }
            };
            if next.generation != state.generation {
                tracing::info!(plan = %plan, site = %next.owner, term = %d.term,
                    generation = %next.generation, "Committed {plan}: owner {} at generation {} (was {} at {})",
                    next.owner, next.generation, state.owner, state.generation);
                inner.metrics.failover(plan.as_str(), "committed");
                inner.record(
                    NewEvent::new(
                        EventKind::Decision,
                        inner.me.as_str(),
                        format!(
                            "{plan} committed: owner {} at generation {} (was {} at {})",
                            next.owner, next.generation, state.owner, state.generation
                        ),
                    )
                    .plan(plan.as_str())
                    .site(next.owner.as_str())
                    .term(d.term.0)
                    .generation(next.generation.0),
                );
            }
            state = next;
        }
        let status = self.status_to_publish(config, plan, d.term, &d.decision.reason, &state);
        let draining = inner.draining.load(Ordering::SeqCst);
        if !draining && d.decision.state_change.is_some() && d.decision.commands.is_empty() {
            // A step was committed with nothing to wait for: the next may go at once.
            inner.wake_plan(plan);
        }
        for command in d.decision.commands {
            // A drain starts nothing new but the owner's dead-man renewals (and re-arms):
            // stopping them while the drain waits would let the owner's watchdog power it off
            // during a routine restart (ADR 0013).
            if !draining || keeps_the_owner_alive(&command.action) {
                self.executor.start(command, &token);
            }
        }
        status.map(|(status, gist)| ToPublish {
            status,
            gist,
            token,
        })
    }

    /// The plan's status (the leader's verdicts and sentence) if it is due for publication:
    /// it changed, or the last publication is old (see [`PUBLISH_DURING_TRANSITION`],
    /// [`PUBLISH_WHEN_STEADY`]). "Changed" reads the reason's gist ([`Reason::gist`]): a
    /// steady plan's sentence alternates between "checking health (N checks); ..." and
    /// "no action: ..." as its checks go out and come back, which is not news.
    fn status_to_publish(
        &self,
        config: &EffectiveConfig,
        plan: &PlanId,
        term: qfence_model::Term,
        reason: &Reason,
        state: &PlanState,
    ) -> Option<(StatusDraft, String)> {
        let inner = &self.inner;
        let cfg = config.plan(plan.as_str())?;
        let now = inner.clock.now();
        let view = self.runtime(plan);
        let sites = site_verdicts(config, cfg, state, &view, now);
        // The same verdicts, beside the same sentence, go to the metrics, with what cannot
        // work (a binding to a capability graded failed) before it is needed.
        let unworkable = inner.registered().unworkable(plan, cfg);
        inner.metrics.plan(
            plan.as_str(),
            super::gauges::plan(state, &sites, &unworkable),
        );
        let gist = format!(
            "{term} {} {}",
            sites
                .iter()
                .map(|s| format!("{}={}", s.site, s.verdict.as_str()))
                .collect::<Vec<_>>()
                .join(","),
            without_times(&reason.gist())
        );
        let every = if state.transition().is_some() {
            PUBLISH_DURING_TRANSITION
        } else {
            PUBLISH_WHEN_STEADY
        };
        if let Some((last, at)) = &view.last_published
            && *last == gist
            && now.since(*at) < every
        {
            return None;
        }
        let status = StatusDraft {
            format: STATUS_FORMAT,
            plan: plan.clone(),
            sites,
            reason: reason.to_string(),
            at_unix_ms: now.0,
            by: inner.me.clone(),
        };
        Some((status, gist))
    }

    /// Publishes statuses into the replicated state, [`PUBLISH_BATCH`] to a write, so any
    /// orchestrator can answer a status request. A failed write is logged and retried on the
    /// next tick; it never stops the cycle.
    async fn publish(&self, all: Vec<ToPublish>) {
        let inner = &self.inner;
        let writes = all.chunks(PUBLISH_BATCH).map(|batch| async move {
            let token = batch[0].token.clone();
            let statuses = batch.iter().map(|p| p.status.clone()).collect();
            // A leader that has lost its quorum must not hang its cycle on a view: the write
            // is bounded and dropped with the leadership.
            let write = inner
                .node
                .write(ClusterCommand::PublishStatuses { statuses });
            let outcome = tokio::select! {
                () = token.cancelled() => return,
                r = tokio::time::timeout(PUBLISH_TIMEOUT, write) => r,
            };
            let Ok(outcome) = outcome else {
                tracing::warn!(plans = batch.len(), "Publishing the plans' statuses timed out");
                return;
            };
            match outcome {
                Ok(Response::Applied) => {
                    let mut all = inner.runtime();
                    for p in batch {
                        if let Some(entry) = all.get_mut(&p.status.plan) {
                            entry.last_published =
                                Some((p.gist.clone(), Millis(p.status.at_unix_ms)));
                        }
                    }
                }
                Ok(other) => {
                    tracing::warn!(plans = batch.len(), "The cluster refused the plans' statuses: {other:?}");
                }
                Err(e) => {
                    tracing::warn!(plans = batch.len(), error = %e, "Could not publish the plans' statuses");
                }
            }
        });
        futures_util::future::join_all(writes).await;
    }
}

/// Forgets results nobody can ask about any more: older than the plan's freshness window plus
/// two fence timeouts, and not named by the transition under way.
fn prune(
    entry: &mut PlanRuntime,
    state: &PlanState,
    now: qfence_core::Millis,
    plan: Option<&qfence_model::config::PlanConfig>,
) {
    let Some(plan) = plan else { return };
    let keep = plan.freshness + plan.fence_timeout * 2 + plan.interval;
    let pending: Vec<&OpId> = state
        .transition()
        .map(|t| t.pending.values().collect())
        .unwrap_or_default();
    entry
        .results
        .retain(|op, r| now.since(r.at) <= keep || pending.contains(&op));
}

/// How long a drain waits for the leadership it hands over to be taken.
const HAND_OVER_WAIT: Duration = Duration::from_secs(5);

/// Whether a draining engine still starts `action`: the owner's dead-man switch is armed and
/// renewed until the engine stops, so a drain never powers the owner off.
fn keeps_the_owner_alive(action: &qfence_core::Action) -> bool {
    matches!(
        action,
        qfence_core::Action::ArmDeadMan { .. } | qfence_core::Action::RenewDeadMan { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Between two decisions the status shows what the last one judged, beside its sentence:
    /// judged again at the request's `now`, a reading that aged out meanwhile read UNKNOWN
    /// beside "dc2 fenced (...)".
    #[test]
    fn the_status_shows_the_last_decisions_verdicts_beside_its_sentence() {
        use qfence_core::{Leadership, Observed};
        use qfence_model::{SiteId, Term};
        let loaded = qfence_model::config::load_str(
            include_str!("../../../../examples/lab.yaml"),
            "lab.yaml",
        )
        .expect("the lab configuration validates");
        let config = loaded.config;
        let plan = config.plan("erp-db").expect("erp-db");
        let state = PlanState::initial(plan);
        let dc2 = SiteId::new("dc2").unwrap();
        let t0 = Millis(1_700_000_000_000);
        let mut view = PlanRuntime::default();
        view.observations.insert(
            BindingKey::site_at(plan, &dc2, 0),
            Observation::new(Observed::Holds, t0),
        );
        let at = |secs| t0.plus(Duration::from_secs(secs));
        // Before any decision, the status judges its observations now.
        let fresh = site_verdicts(&config, plan, &state, &view, at(29));
        assert_eq!(fresh[1].verdict, Verdict::Fenced);
        let decision = decide(&Snapshot {
            config: &config,
            plan: PlanId::new("erp-db").unwrap(),
            state: &state,
            observations: &view.observations,
            results: &view.results,
            in_flight: &view.in_flight,
            leadership: Leadership {
                leader: true,
                term: Term(1),
                lease_until: at(40),
            },
            now: at(29),
        });
        assert!(
            decision.reason.contains("dc2 fenced (power.off FENCED"),
            "{}",
            decision.reason
        );
        view.last_reason = Some(decision.reason.to_string());
        view.last_sites = decision.sites;
        // Two seconds on, the reading is past freshness (30 s); the sentence still says
        // fenced until the next decision, and so does the status.
        let shown = site_verdicts(&config, plan, &state, &view, at(31));
        assert_eq!(shown[1].site, dc2);
        assert_eq!(shown[1].verdict, Verdict::Fenced, "{}", decision.reason);
        assert_eq!(shown[1].checked_at_ms, Some(t0.0));
        // The owner dc1 was never read: UNKNOWN, not FENCED.
        assert_eq!(shown[0].verdict, Verdict::Unknown);
        view.last_sites.clear();
        view.last_reason = None;
        let judged_now = site_verdicts(&config, plan, &state, &view, at(31));
        assert_eq!(judged_now[1].verdict, Verdict::Unknown);
    }

    #[test]
    fn times_of_day_are_masked_and_nothing_else() {
        assert_eq!(
            without_times("dc2 fenced (power.off FENCED at 14:02:07); due at 09:00:00"),
            "dc2 fenced (power.off FENCED at --:--:--); due at --:--:--"
        );
        assert_eq!(
            without_times("g12 t3 12:3:45 1:02:03x"),
            "g12 t3 12:3:45 1:02:03x"
        );
        assert_eq!(without_times("é 10:11:12"), "é --:--:--");
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_moves_with_tokio_time() {
        let c = super::super::Clock::starting_at(qfence_core::Millis(1_000));
        assert_eq!(c.now(), qfence_core::Millis(1_000));
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(c.now(), qfence_core::Millis(91_000));
        assert_eq!(
            c.after(Duration::from_millis(5)),
            qfence_core::Millis(91_005)
        );
    }
}
