//! The engine: one decision per plan per tick, on the leader only. What it shows and
//! publishes of each decision is in [`publish`]; what it shares with the executor and the
//! API's backend is in [`crate::shared`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_cluster::node::ClusterNode;
use qfence_core::{Decision, Leadership, Millis, OpId, PlanState, Snapshot, decide};
use qfence_model::PlanId;
use qfence_model::config::ValidatedConfig;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::effective::{ConfigCell, EffectiveConfig};
use crate::events::{EventKind, EventLog, JsonlStore, NewEvent};
use crate::executor::Executor;
use crate::metrics::Metrics;
use crate::shared::{Inner, PlanRuntime, lock};
use crate::systemd::{Beat, Heartbeat};
use crate::{Clock, RuntimeError};

mod publish;

use publish::ToPublish;
pub(crate) use publish::site_verdicts;
pub use publish::without_times;

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

/// The runtime loop of one orchestrator.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    executor: Executor,
    options: Arc<EngineOptions>,
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
            registered: Default::default(),
            instance_ha: Mutex::new(BTreeMap::new()),
        });
        Self {
            executor: Executor::new(inner.clone()),
            inner,
            options: Arc::new(options),
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
        let heartbeat = self.options.heartbeat.clone();
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
                    .map_or(self.options.tick, |i| i.min(self.options.tick));
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
            self.options.lease.max(PUBLISH_TIMEOUT) * 2,
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
                    lease_until: from.plus(self.options.lease),
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
        let renew_after = self.options.lease / 2;
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
        // The plan's view is read in place, under the runtime lock, not copied: a decision
        // runs for every plan on every tick and every result, and copying its readings and
        // results was the idle orchestrator's largest cost at 1,000 plans.
        let (decision, acted, changed) = {
            let mut all = inner.runtime();
            if !all.contains_key(&plan) {
                all.insert(plan.clone(), PlanRuntime::default());
            }
            let view = all.get_mut(&plan).expect("inserted above");
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
            // Routine checks are not news: a decision is recorded when it changes the state,
            // acts beyond checking, or says something new (times of day aside).
            let acted = decision.state_change.is_some()
                || decision
                    .commands
                    .iter()
                    .any(|c| !matches!(c.action, qfence_core::Action::Check { .. }));
            let gist = without_times(&decision.reason.gist());
            let changed = view.last_recorded.as_deref() != Some(gist.as_str());
            view.last_reason = Some(decision.reason.to_string());
            view.last_sites = decision.sites.clone();
            view.moving = state.transition().is_some() || decision.state_change.is_some();
            if acted || changed {
                view.last_recorded = Some(gist);
            }
            prune(view, &state, now, config.plan(plan.as_str()));
            (decision, acted, changed)
        };
        inner.metrics.decision(plan.as_str());
        if acted || changed {
            tracing::info!(plan = %plan, term = %leadership.term, generation = %state.generation,
                "{}", crate::capitalised(&decision.reason));
            inner.record(
                NewEvent::new(
                    EventKind::Decision,
                    inner.me.as_str(),
                    decision.reason.to_string(),
                )
                .plan(plan.as_str())
                .term(leadership.term.0)
                .generation(state.generation.0)
                .data(decision_data(&decision, &state)),
            );
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
}

/// A decision record's details: its commands, whether it changed the state, and what it says
/// about a move under way (the timeline's [`Mark`](crate::timeline::Mark)).
fn decision_data(decision: &qfence_core::Decision, before: &PlanState) -> serde_json::Value {
    let mut data = serde_json::json!({
        "commands": decision.commands.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "state_change": decision.state_change.is_some(),
    });
    if let Some(mark) = crate::timeline::Mark::of(decision, before)
        && let Ok(v) = serde_json::to_value(mark)
    {
        data[crate::timeline::MARK_KEY] = v;
    }
    data
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
/// renewed until the engine stops, and a former owner's disarmed, so a drain never powers a
/// host off.
fn keeps_the_owner_alive(action: &qfence_core::Action) -> bool {
    matches!(
        action,
        qfence_core::Action::ArmDeadMan { .. }
            | qfence_core::Action::RenewDeadMan { .. }
            | qfence_core::Action::DisarmDeadMan { .. }
    )
}

#[cfg(test)]
mod tests;
