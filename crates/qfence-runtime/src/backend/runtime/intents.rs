//! Operators' intents (switchover, failover, confirm fenced, rejoin, pause, resume, maintenance):
//! written into the replicated plan state for the core to act on at the next tick.

use qfence_model::Role;

use super::*;

pub(super) async fn switchover(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    req: &SwitchoverRequest,
) -> Result<OperationAccepted, BackendError> {
    let to = b.site(plan, &req.target)?;
    b.refuse_owner(plan, &to)?;
    let why = req
        .reason
        .clone()
        .unwrap_or_else(|| "planned switchover".into());
    b.intend(
        caller,
        plan,
        Some(req.expected_generation),
        IntentKind::Switchover { to },
        why,
        "switchover",
    )
    .await
}

pub(super) async fn failover(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    req: &FailoverRequest,
) -> Result<OperationAccepted, BackendError> {
    let cfg = b.plan_config(plan)?;
    let state = b.state(plan)?;
    let to = match &req.target {
        Some(t) => b.site(plan, t)?,
        None => qfence_core::failover_order(&cfg, &state)
            .candidates
            .first()
            .cloned()
            .ok_or_else(|| no_target(plan, &state))?,
    };
    b.refuse_owner(plan, &to)?;
    let why = req
        .reason
        .clone()
        .unwrap_or_else(|| "operator failover".into());
    b.intend(
        caller,
        plan,
        Some(req.expected_generation),
        IntentKind::Failover { to },
        why,
        "failover",
    )
    .await
}

pub(super) async fn confirm_fenced(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    site: &SiteId,
    req: &ConfirmFencedRequest,
) -> Result<OperationAccepted, BackendError> {
    if b.plan_config(plan)?.instance(site).is_none() {
        return Err(not_found("site", site.as_str()));
    }
    b.intend(
        caller,
        plan,
        Some(req.expected_generation),
        IntentKind::ConfirmFenced { site: site.clone() },
        req.reason.clone(),
        "confirm_fenced",
    )
    .await
}

/// Refused at once for what the request alone shows (a site this plan does not have, the
/// owner, no `rejoin` binding, not an old owner waiting to rejoin); the core decides the
/// rest on the state it acts on (steady, not paused, the site answering).
pub(super) async fn rejoin(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    site: &SiteId,
    req: &RejoinRequest,
) -> Result<OperationAccepted, BackendError> {
    let cfg = b.plan_config(plan)?;
    if cfg.instance(site).is_none() {
        return Err(not_found("site", site.as_str()));
    }
    b.refuse_owner(plan, site)?;
    if cfg.bindings(site, Role::Rejoin).next().is_none() {
        return Err(BackendError::Refused(format!(
            "{site} has no rejoin binding (db.rejoin with role rejoin) in {plan}"
        )));
    }
    if !b.state(plan)?.awaiting_rejoin.contains_key(site) {
        return Err(BackendError::Refused(format!(
            "{site} is not an old owner of {plan} waiting to rejoin: its copy was not given \
             up by a move, or it rejoined already"
        )));
    }
    let why = req.reason.clone().unwrap_or_else(|| "rejoin".into());
    b.intend(
        caller,
        plan,
        Some(req.expected_generation),
        IntentKind::Rejoin { site: site.clone() },
        why,
        "rejoin",
    )
    .await
}

pub(super) async fn pause(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    req: &PauseRequest,
) -> Result<OperationAccepted, BackendError> {
    let why = req.reason.clone().unwrap_or_else(|| "paused".into());
    b.intend(caller, plan, None, IntentKind::Pause, why, "pause")
        .await
}

pub(super) async fn resume(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    req: &PauseRequest,
) -> Result<OperationAccepted, BackendError> {
    let why = req.reason.clone().unwrap_or_else(|| "resumed".into());
    b.intend(caller, plan, None, IntentKind::Resume, why, "resume")
        .await
}

/// A compare-and-set on the generation the operator saw, checked by the core's own rule
/// (`PlanState::with_maintenance`) on the state read under the write lock, so a move that
/// started meanwhile is seen. The generation does not change: no owner changes.
pub(super) async fn set_maintenance(
    b: &RuntimeBackend,
    caller: &Caller,
    plan: &PlanId,
    site: &SiteId,
    req: &MaintenanceRequest,
) -> Result<OperationAccepted, BackendError> {
    let cfg = b.plan_config(plan)?;
    if cfg.instance(site).is_none() {
        return Err(not_found("site", site.as_str()));
    }
    b.write_guard().await?;
    let on = req.enabled;
    let mut was = None;
    let next = b
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
    b.inner.record(
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
    b.inner.wake.notify_one();
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
