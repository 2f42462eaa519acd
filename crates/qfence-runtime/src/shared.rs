//! The parts the engine, the executor and the API backend share: the effective
//! configuration, the cluster node, the event log and each plan's runtime view, with the
//! writes to the replicated plan state (the compare-and-set). Its own module so that the
//! engine and the executor both stand on it rather than on each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::StreamExt;
use qfence_cluster::node::ClusterNode;
use qfence_cluster::state::{Command as ClusterCommand, ControllerRecord, PlanStateDoc, Response};
use qfence_core::{BindingKey, Millis, Observation, OpId, OpResult, PlanState, StoredPlanState};
use qfence_model::{Generation, OrchestratorId, PlanId};
use tokio::sync::Notify;

use crate::effective::{ConfigCell, EffectiveConfig};
use crate::events::{EventLog, JsonlStore, NewEvent};
use crate::metrics::Metrics;
use crate::{Clock, RuntimeError};

/// Cluster writes of registration at start-up in flight at once.
const REGISTER_CONCURRENCY: usize = 64;
/// The schema number of the plan state the core defines, as stored in the cluster.
pub const PLAN_STATE_SCHEMA: u32 = 1;

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
    /// The last decision saw a move under way or started one: every result wakes the plan
    /// (a steady plan wakes on news and when its last operation in flight ends).
    pub moving: bool,
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
    /// every plan is decided at least every `EngineOptions::tick`.
    pub dirty: Mutex<BTreeSet<PlanId>>,
    /// Set by [`Inner::wake_all`]: the next tick decides every plan.
    pub wake_all: AtomicBool,
    /// Draining: no new operations start.
    pub draining: AtomicBool,
    /// The controllers' latest tests, decoded (see [`crate::registered`]).
    pub registered: crate::registered::RegisteredCache,
    /// Each Instance HA cloud as this orchestrator's loop last saw it (for the API).
    pub instance_ha: Mutex<BTreeMap<qfence_model::CloudId, crate::instance_ha::CloudRuntime>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    pub fn registered(&self) -> Arc<crate::registered::Registered> {
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
        // Decoded where they are stored, under one read: no copy of any plan's JSON.
        self.node.read(|state| {
            plans
                .iter()
                .map(|plan| {
                    let decoded = state
                        .plans
                        .get(plan)
                        .map(|r| {
                            r.state
                                .decode::<StoredPlanState>(PLAN_STATE_SCHEMA)
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
        })
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
