//! Plans through the API: create, stage, apply, discard and delete them (each a
//! compare-and-set on the generation), list them, and dry runs.

use super::*;

pub(super) async fn plans(b: &RuntimeBackend) -> Result<Vec<PlanView>, BackendError> {
    let cfg = b.cfg();
    let mut out = cfg
        .plans()
        .map(|(id, _)| b.plan_view(&cfg, id))
        .collect::<Result<Vec<_>, _>>()?;
    // Plans the API created that are not in force (they no longer validate) are listed
    // too, from their records, so an operator sees them and can fix or delete them.
    let left_out: Vec<PlanId> = b.inner.node.read(|s| {
        s.plans
            .iter()
            .filter(|(id, r)| {
                cfg.plan(id.as_str()).is_none() && ApiPlanRecord::read(&r.config).is_some()
            })
            .map(|(id, _)| id.clone())
            .collect()
    });
    for id in left_out {
        out.push(b.api_plan_view(&id)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(super) async fn plan(b: &RuntimeBackend, name: &PlanId) -> Result<PlanView, BackendError> {
    let cfg = b.cfg();
    if cfg.plan(name.as_str()).is_some() {
        b.plan_view(&cfg, name)
    } else {
        b.api_plan_view(name)
    }
}

pub(super) async fn create_plan(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: CheckedPlan,
) -> Result<PlanView, BackendError> {
    b.write_guard().await?;
    let name = plan.name.clone();
    let plan = b.checked_against_registration(plan).await?;
    {
        // Plan writes one at a time on this leader: the name check and the write are one.
        let plan_lock = b.inner.write_lock(&name);
        let _one_writer = plan_lock.lock().await;
        let cfg = b.cfg();
        let known = b.inner.node.read(|s| s.plans.contains_key(&name));
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
        let response = b
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
    b.reconfigured(&name);
    let cfg = b.cfg();
    if !cfg.plan_is_api(&name) {
        // Validated a moment ago against the same configuration; said rather than hidden.
        tracing::error!(plan = %name, "A plan created through the API is not in force: {:?}", cfg.dropped);
    }
    b.inner.record(
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
    b.plan_view(&cfg, &name)
}

pub(super) async fn stage_plan(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: CheckedPlan,
) -> Result<PlanView, BackendError> {
    b.write_guard().await?;
    let name = plan.name.clone();
    // A plan of the file is refused before its bindings are asked about.
    b.api_plan(&name)?;
    let plan = b.checked_against_registration(plan).await?;
    let generation = {
        let plan_lock = b.inner.write_lock(&name);
        let _one_writer = plan_lock.lock().await;
        let mut record = b.api_plan(&name)?;
        let state = b.replicated_state(&name)?;
        record.staged = Some(StagedRecord {
            spec: plan.spec.clone(),
            base_generation: state.generation.0,
            staged_by: caller.name.clone(),
            staged_at_ms: b.inner.clock.now().0,
            warnings: plan.warnings.iter().map(IssueDto::from).collect(),
        });
        b.write_plan_record(&name, state.generation, &record, None)
            .await?;
        state.generation
    };
    b.inner.record(
        NewEvent::new(
            EventKind::Config,
            caller.actor(),
            format!("Staged a change of plan {name} on generation {generation}"),
        )
        .plan(name.as_str())
        .generation(generation.0)
        .data(json!({"spec": plan.spec})),
    );
    b.api_plan_view(&name)
}

pub(super) async fn discard_staged(
    b: &RuntimeBackend,
    caller: &Caller,
    name: &PlanId,
) -> Result<PlanView, BackendError> {
    b.write_guard().await?;
    let generation = {
        let plan_lock = b.inner.write_lock(name);
        let _one_writer = plan_lock.lock().await;
        let mut record = b.api_plan(name)?;
        if record.staged.take().is_none() {
            return Err(BackendError::Conflict(format!(
                "plan {name:?} has no staged change"
            )));
        }
        let state = b.replicated_state(name)?;
        b.write_plan_record(name, state.generation, &record, None)
            .await?;
        state.generation
    };
    b.inner.record(
        NewEvent::new(
            EventKind::Config,
            caller.actor(),
            format!("Discarded the staged change of plan {name}"),
        )
        .plan(name.as_str())
        .generation(generation.0),
    );
    b.api_plan_view(name)
}

pub(super) async fn apply_staged(
    b: &RuntimeBackend,
    caller: &Caller,
    name: &PlanId,
    expected: u64,
) -> Result<PlanView, BackendError> {
    b.write_guard().await?;
    let (from, to, by) =
        {
            let plan_lock = b.inner.write_lock(name);
            let _one_writer = plan_lock.lock().await;
            let mut record = b.api_plan(name)?;
            let state = b.replicated_state(name)?;
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
            let checked = plan_api::check_plan(&b.cfg().text, name.as_str(), &staged.spec)
                .map_err(|issues| BackendError::Invalid {
                    message: format!(
                        "the staged change of plan {name} no longer validates; nothing was changed"
                    ),
                    issues,
                })?;
            let new = checked.value;
            // A capability may have been graded failed since the change was staged.
            b.refuse_failed_capabilities(name, &new)?;
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
            b.write_plan_record(name, state.generation, &record, Some(&next))
                .await?;
            (state.generation, next.generation, staged.staged_by)
        };
    b.reconfigured(name);
    b.inner.record(
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
    b.api_plan_view(name)
}

pub(super) async fn delete_plan(
    b: &RuntimeBackend,
    caller: &Caller,
    name: &PlanId,
    expected: u64,
) -> Result<(), BackendError> {
    b.write_guard().await?;
    {
        let plan_lock = b.inner.write_lock(name);
        let _one_writer = plan_lock.lock().await;
        b.api_plan(name)?;
        let state = b.replicated_state(name)?;
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
        let response = b
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
    b.reconfigured(name);
    b.inner.record(
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

pub(super) async fn dry_run(
    b: &RuntimeBackend,
    name: &PlanId,
    what: &DryRun,
) -> Result<DryRunResult, BackendError> {
    let cfg = b.plan_config(name)?;
    let state = b.state(name)?;
    let (kind, target) = match what {
        DryRun::Cycle => {
            let view = b.inner.runtime().get(name).cloned().unwrap_or_default();
            return Ok(DryRunResult {
                plan: name.to_string(),
                generation: state.generation.0,
                reason: view.last_reason.unwrap_or_else(|| "no decision yet".into()),
                commands: Vec::new(),
                refused: false,
            });
        }
        DryRun::ApplyStaged => return b.dry_run_apply(name, &state),
        DryRun::Switchover { target } => (MoveKind::Switchover, b.site(name, target)?),
        DryRun::Failover { target: Some(t) } => (MoveKind::Failover, b.site(name, t)?),
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
    let r = qfence_core::dry_run::dry_run(
        &b.cfg(),
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
