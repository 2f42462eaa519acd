//! The engine: one decision per plan per tick, on the leader only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use qfence_cluster::node::ClusterNode;
use qfence_cluster::state::{
    Command as ClusterCommand, ControllerRecord, PlanStateDoc, Response, STATUS_FORMAT,
    SiteVerdict, StatusDraft,
};
use qfence_core::{
    BindingKey, Leadership, Millis, Observation, OpId, OpResult, PlanState, Rules, Snapshot,
    StoredPlanState, decide,
};
use qfence_model::config::ValidatedConfig;
use qfence_model::{Generation, OrchestratorId, PlanId};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::effective::{ConfigCell, EffectiveConfig};
use super::executor::Executor;
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

/// Timers of the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The longest wait between two ticks (a result or an intent wakes it sooner). Defaults to
    /// the shortest plan interval.
    pub tick: Duration,
    /// How long a leadership confirmed by the cluster counts as a lease for the core.
    pub lease: Duration,
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
    /// The last sentence recorded in the event log, times of day masked.
    pub last_recorded: Option<String>,
    /// What this orchestrator last published as the plan's status (term, verdicts and the
    /// sentence with times masked) and when.
    pub last_published: Option<(String, Millis)>,
    /// Moves on whenever the plan's configuration is replaced through the API (applied,
    /// deleted, created again): an operation started before comes back to a view that no
    /// longer takes its result.
    pub epoch: u64,
}

impl PlanRuntime {
    /// Forgets every reading and result (they were keyed by the old configuration's
    /// bindings) and moves the epoch on. Operations in flight stay counted until they end.
    pub fn reset(&mut self) {
        self.observations.clear();
        self.results.clear();
        self.last_reason = None;
        self.last_recorded = None;
        self.last_published = None;
        self.epoch += 1;
    }
}

/// Each site's verdict and newest proving-fence check time, from this orchestrator's
/// observations: what the leader shows and publishes.
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
            let v = rules.site_verdict(
                config,
                plan,
                state,
                &view.observations,
                site,
                now,
                None,
                state.transition().map(|t| t.started),
            );
            let checked_at_ms = qfence_core::rules::proving_fences(config, plan, site)
                .iter()
                .filter_map(|k| view.observations.get(k).map(|o| o.at.0))
                .max();
            SiteVerdict {
                site: site.clone(),
                verdict: v.verdict,
                checked_at_ms,
            }
        })
        .collect()
}

/// What a sentence says once routine wording is set aside: times of day masked, and the
/// "no action: " and "checking health (N checks); " openings dropped, since a steady plan
/// alternates between the two every interval and neither is news.
pub fn routine_gist(s: &str) -> String {
    let masked = without_times(s);
    let mut rest = masked.as_str();
    if let Some(r) = rest.strip_prefix("no action: ") {
        rest = r;
    }
    if rest.starts_with("checking health (")
        && let Some((_, r)) = rest.split_once("); ")
    {
        rest = r;
    }
    rest.to_owned()
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
    /// Plan state writes one at a time: the cluster compares the generation, this lock makes
    /// the revision half of the compare-and-set hold too.
    pub write_lock: tokio::sync::Mutex<()>,
    pub wake: Notify,
    /// Draining: no new operations start.
    pub draining: AtomicBool,
    pub options: EngineOptions,
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

    /// Appends one record to the event log. A log that cannot be written is an operator's
    /// problem, said at ERROR; the runtime goes on (refusing to fence because a disk is full
    /// would be worse).
    pub fn record(&self, event: NewEvent) {
        let at = self.clock.now().0;
        if let Err(e) = lock(&self.events).append(event, at) {
            tracing::error!(error = %e, "Could not append to the event log");
        }
    }

    /// The plan's replicated state, or `None` when the cluster does not know the plan yet.
    pub fn plan_state(&self, plan: &PlanId) -> Result<Option<PlanState>, RuntimeError> {
        let state = self.node.state();
        let Some(record) = state.plans.get(plan) else {
            return Ok(None);
        };
        let stored: StoredPlanState =
            record
                .state
                .decode(PLAN_STATE_SCHEMA)
                .map_err(|e| RuntimeError::Plan {
                    plan: plan.to_string(),
                    reason: e.to_string(),
                })?;
        Ok(Some(stored.into_current()))
    }

    /// Registers every controller and plan of the configuration file the cluster does not
    /// know yet (plans at their initial state), so routing and the compare-and-set have them.
    /// The API registers its own.
    pub async fn register_plans(&self) -> Result<(), RuntimeError> {
        let file = self.cell.file();
        let (controllers, known) = self.node.read_state(|s| {
            (
                s.controllers.clone(),
                s.plans
                    .keys()
                    .cloned()
                    .collect::<std::collections::BTreeSet<_>>(),
            )
        });
        for (id, c) in &file.config().controllers {
            let record = ControllerRecord {
                id: id.clone(),
                site: c.site.clone(),
                reach: c.reach.clone(),
                // Secrets appear here by reference only.
                config: serde_json::to_value(c).unwrap_or_default(),
            };
            if controllers.get(id) != Some(&record) {
                self.node
                    .write(ClusterCommand::RegisterController { controller: record })
                    .await?;
            }
        }
        for (id, plan) in file.plans() {
            if known.contains(id) {
                continue;
            }
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
        }
        Ok(())
    }

    /// Writes `change` if the plan is still exactly as it was decided on: generation and
    /// revision. Returns the state written.
    pub async fn commit(
        &self,
        plan: &PlanId,
        change: &qfence_core::PlanStateChange,
    ) -> Result<PlanState, RuntimeError> {
        let _one_writer = self.write_lock.lock().await;
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
        let _one_writer = self.write_lock.lock().await;
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
        f(&mut next);
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
            write_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            draining: AtomicBool::new(false),
            options,
        });
        Self {
            executor: Executor::new(inner.clone()),
            inner,
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

    /// Wakes the loop for an immediate tick.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Runs ticks until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            // A tick can wait on the cluster (a leader that lost its quorum); stopping must not.
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.tick() => {}
            }
            // A plan created through the API may want a shorter interval than the file's.
            let tick = self
                .inner
                .config()
                .plans()
                .map(|(_, p)| p.interval)
                .min()
                .map_or(self.inner.options.tick, |i| i.min(self.inner.options.tick));
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(tick) => {}
                // A short pause coalesces a burst of results into one tick.
                () = self.inner.wake.notified() => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        tracing::info!(orchestrator = %self.inner.me, "The engine stopped");
    }

    /// Stops starting operations and waits up to `timeout` for those in flight. Returns how
    /// many were still running when it gave up.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.inner.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let n = self.executor.in_flight();
            if n == 0 || tokio::time::Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One tick: decide every plan (when leading), commit, execute.
    pub async fn tick(&self) {
        let inner = &self.inner;
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
        let now = inner.clock.now();
        let (leadership, token) = match &lead {
            Ok(l) if !l.token.is_cancelled() => (
                Leadership {
                    leader: true,
                    term: l.term,
                    lease_until: now.plus(inner.options.lease),
                },
                Some(l.token.clone()),
            ),
            _ => (
                Leadership {
                    leader: false,
                    term: inner.node.term(),
                    lease_until: now,
                },
                None,
            ),
        };
        if token.is_some()
            && let Err(e) = inner.register_plans().await
        {
            tracing::warn!(error = %e, "Could not register the configured plans");
            return;
        }
        // One configuration for the whole tick; plans created, changed or deleted through the
        // API since the last one are in it.
        let config = inner.cell.refresh();
        for (plan, _) in config.plans() {
            if let Err(e) = self
                .decide_plan(&config, plan, leadership, token.as_ref())
                .await
            {
                tracing::warn!(plan = %plan, error = %e, "The plan's cycle ended without acting");
            }
        }
    }

    async fn decide_plan(
        &self,
        config: &EffectiveConfig,
        plan: &PlanId,
        leadership: Leadership,
        token: Option<&CancellationToken>,
    ) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        let Some(state) = inner.plan_state(plan)? else {
            return Ok(());
        };
        let now = inner.clock.now();
        let view = self.runtime(plan);
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
        let gist = routine_gist(&decision.reason);
        let changed = view.last_recorded.as_deref() != Some(gist.as_str());
        if acted || changed {
            tracing::info!(plan = %plan, term = %leadership.term, generation = %state.generation,
                "{}", decision.reason);
            inner.record(
                NewEvent::new(EventKind::Decision, inner.me.as_str(), decision.reason.clone())
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
            entry.last_reason = Some(decision.reason.clone());
            if acted || changed {
                entry.last_recorded = Some(gist);
            }
            prune(entry, &state, now, config.plan(plan.as_str()));
        }
        let Some(token) = token else {
            return Ok(());
        };
        if let Some(change) = &decision.state_change {
            let next = inner.commit(plan, change).await?;
            if next.generation != state.generation {
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
                    .term(leadership.term.0)
                    .generation(next.generation.0),
                );
            }
        }
        self.publish(config, plan, leadership.term, &decision.reason, token)
            .await;
        if inner.draining.load(Ordering::SeqCst) {
            return Ok(());
        }
        if decision.state_change.is_some() && decision.commands.is_empty() {
            // A step was committed with nothing to wait for: the next may go at once.
            inner.wake.notify_one();
        }
        for command in decision.commands {
            self.executor.start(command, token);
        }
        Ok(())
    }
}

impl Engine {
    /// Publishes the plan's status (the leader's verdicts and sentence) into the replicated
    /// state when it changed, or when the last publication is old (see
    /// [`PUBLISH_DURING_TRANSITION`], [`PUBLISH_WHEN_STEADY`]), so any orchestrator can answer
    /// a status request. A failed write is logged and retried on the next tick; it never
    /// stops the cycle.
    async fn publish(
        &self,
        config: &EffectiveConfig,
        plan: &PlanId,
        term: qfence_model::Term,
        reason: &str,
        token: &CancellationToken,
    ) {
        let inner = &self.inner;
        let Some(cfg) = config.plan(plan.as_str()) else {
            return;
        };
        let state = match inner.plan_state(plan) {
            Ok(Some(s)) => s,
            _ => return,
        };
        let now = inner.clock.now();
        let view = self.runtime(plan);
        let sites = site_verdicts(config, cfg, &state, &view, now);
        let gist = format!(
            "{term} {} {}",
            sites
                .iter()
                .map(|s| format!("{}={}", s.site, s.verdict.as_str()))
                .collect::<Vec<_>>()
                .join(","),
            without_times(reason)
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
            return;
        }
        let status = StatusDraft {
            format: STATUS_FORMAT,
            plan: plan.clone(),
            sites,
            reason: reason.to_owned(),
            at_unix_ms: now.0,
            by: inner.me.clone(),
        };
        // A leader that has lost its quorum must not hang its cycle on a view: the write is
        // bounded and dropped with the leadership.
        let write = inner.node.write(ClusterCommand::PublishStatus { status });
        let outcome = tokio::select! {
            () = token.cancelled() => return,
            r = tokio::time::timeout(PUBLISH_TIMEOUT, write) => r,
        };
        let Ok(outcome) = outcome else {
            tracing::warn!(plan = %plan, term = %term, "Publishing the plan's status timed out");
            return;
        };
        match outcome {
            Ok(Response::Applied) => {
                if let Some(entry) = inner.runtime().get_mut(plan) {
                    entry.last_published = Some((gist, now));
                }
            }
            Ok(other) => {
                tracing::warn!(plan = %plan, term = %term, "The cluster refused the plan's status: {other:?}");
            }
            Err(e) => {
                tracing::warn!(plan = %plan, term = %term, error = %e, "Could not publish the plan's status");
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routine_checks_and_no_action_openings_are_not_news() {
        let a = "checking health (1 check); erp-db owned by dc2 at generation 2; dc1 fenced \
                 (power.off FENCED at 15:17:08)";
        let b = "no action: erp-db owned by dc2 at generation 2; dc1 fenced (power.off FENCED at \
                 15:17:10)";
        assert_eq!(routine_gist(a), routine_gist(b));
        let c = "no action: erp-db owned by dc2 at generation 2; dc1 reads UNKNOWN";
        assert_ne!(routine_gist(b), routine_gist(c));
        let d = "failing erp-db over from dc1 to dc2: health lost";
        assert_eq!(routine_gist(d), d);
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
