//! Running one Instance HA command: a host's fence through its binding's controller (routed
//! by the cluster like a plan's fence, an undo read back by an independent check), or one
//! Nova call through the Nova driver; and what each is recorded as in the event log.

use std::time::Duration;

use qfence_call::{Call, PreFence, Target as CallTarget, Verb};
use qfence_cluster::forward::CallOutcome;
use qfence_controllers::AnyDriver;
use qfence_controllers::driver::{DriverError, ErrorKind};
use qfence_controllers::nova::EvacuateRequest;
use qfence_core::instance_ha::{Action, Command, Event, Migration, ServerId, Severity};
use qfence_core::{Observation, Observed, Outcome};
use qfence_model::CloudId;
use qfence_model::config::{Binding, HostName};
use tokio_util::sync::CancellationToken;

use super::InstanceHa;
use crate::drivers::Read;
use crate::events::{EventKind, NewEvent};
use crate::executor::{Finished, answer_within, run_call};
use crate::shared::Inner;

/// What a command came to.
#[derive(Debug, Clone)]
pub(super) struct Ran {
    pub outcome: Outcome,
    pub detail: String,
    /// A fence's read-back, for the host's fence reading.
    pub reading: Option<(HostName, Observation)>,
    /// A `FollowMigration`'s read of the server's evacuation records.
    pub migrations: Option<(ServerId, Vec<Migration>)>,
}

impl Ran {
    fn of(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: detail.into(),
            reading: None,
            migrations: None,
        }
    }

    fn unknown(detail: impl Into<String>) -> Self {
        Self::of(Outcome::Unknown, detail)
    }
}

/// A Nova answer: done, or refused (FAILED), or UNKNOWN when the state may have changed or
/// nothing answered.
fn nova_outcome<T>(r: Result<T, DriverError>, done: impl FnOnce(T) -> String) -> Ran {
    match r {
        Ok(v) => Ran::of(Outcome::Done, done(v)),
        Err(e) => {
            let unknown = e.state_unknown
                || matches!(
                    e.kind,
                    ErrorKind::Timeout | ErrorKind::Unreachable | ErrorKind::Cancelled
                );
            Ran::of(
                if unknown {
                    Outcome::Unknown
                } else {
                    Outcome::Failed
                },
                e.to_string(),
            )
        }
    }
}

/// Runs `command` (not an event) and says what it came to. A command decided in a term older
/// than the cluster's is not run.
pub(super) async fn run(
    ha: &InstanceHa,
    cloud: &CloudId,
    command: &Command,
    token: &CancellationToken,
) -> Ran {
    let inner = &ha.inner;
    let term = inner.node.term();
    if term > command.term {
        return Ran::unknown(format!(
            "not run: decided in term {}, the cluster is at term {term}",
            command.term
        ));
    }
    match &command.action {
        Action::Fence { host, binding } => {
            fence(inner, cloud, host, binding, Verb::Perform, token).await
        }
        Action::CheckFence { host, binding } => {
            fence(inner, cloud, host, binding, Verb::Check, token).await
        }
        Action::PowerOn { host, binding } => {
            fence(inner, cloud, host, binding, Verb::Undo, token).await
        }
        _ => run_nova(ha, cloud, &command.action, token).await,
    }
}

/// A call of the host's fence binding, through the cluster's routing.
async fn fence(
    inner: &Inner,
    cloud: &CloudId,
    host: &HostName,
    binding: &Binding,
    verb: Verb,
    token: &CancellationToken,
) -> Ran {
    let config = inner.config();
    let Some(cloud_config) = config.cloud(cloud.as_str()) else {
        return Ran::unknown(format!("cloud {cloud} is not configured"));
    };
    let Some(controller) = config.controller(binding.controller.as_str()) else {
        return Ran::unknown(format!(
            "controller {} is not configured",
            binding.controller
        ));
    };
    let Some(site) = config.host_site(cloud_config, host) else {
        return Ran::unknown(format!("host {host} has no site"));
    };
    let mut call = Call::new(verb, CallTarget::of(binding, site), controller.timeout);
    if verb == Verb::Perform {
        call.pre_fence = Some(PreFence {
            identity: inner
                .registered()
                .identity(&binding.controller)
                .map(str::to_owned),
        });
    }
    let controller_id = binding.controller.clone();
    // A reading is stamped with the call's start: it held at some instant after that.
    let started = inner.clock.now();
    let finished: Finished = run_call(&call, false, |c: Call| {
        let controller_id = controller_id.clone();
        async move { route(inner, &controller_id, &c, token).await }
    })
    .await;
    let reading = (verb == Verb::Check).then(|| {
        (
            host.clone(),
            Observation {
                value: finished.observed,
                at: started,
                detail: finished.detail.clone(),
                definitive: finished.definitive,
            },
        )
    });
    Ran {
        outcome: finished.outcome,
        detail: finished.detail,
        reading,
        migrations: None,
    }
}

/// One controller call through the cluster's routing (here or forwarded), under `token`.
/// `Err` is UNKNOWN.
async fn route(
    inner: &Inner,
    controller: &qfence_model::ControllerId,
    call: &Call,
    token: &CancellationToken,
) -> Result<Read, String> {
    let outer = answer_within(call);
    let outcome = tokio::select! {
        () = token.cancelled() => {
            return Err("cancelled: leadership was lost or the runtime stopped".into())
        }
        r = tokio::time::timeout(outer, inner.node.call(controller, None, call)) => {
            r.map_err(|_| format!("no answer within {outer:?}"))?
        }
    };
    match outcome {
        CallOutcome::Done { by, result } => match result {
            qfence_call::Answer::Reading(read) => Ok(read),
            other => Err(format!(
                "{by} answered {} to a {:?} call",
                other.kind(),
                call.verb
            )),
        },
        CallOutcome::Refused { by, refusal } => Err(format!("{by} refused the call: {refusal:?}")),
        CallOutcome::Unknown { reason, .. } => Err(reason),
    }
}

/// One Nova call through the cloud's Nova driver, on this orchestrator.
async fn run_nova(
    ha: &InstanceHa,
    cloud: &CloudId,
    action: &Action,
    token: &CancellationToken,
) -> Ran {
    let inner = &ha.inner;
    let config = inner.config();
    let Some(cloud_config) = config.cloud(cloud.as_str()) else {
        return Ran::unknown(format!("cloud {cloud} is not configured"));
    };
    let any = match ha.drivers.nova(&cloud_config.nova) {
        Ok(d) => d,
        Err(e) => return Ran::unknown(e),
    };
    let AnyDriver::Nova(d) = &*any else {
        return Ran::unknown(format!(
            "controller {} is not a Nova controller",
            cloud_config.nova
        ));
    };
    let timeout = super::nova_timeout(inner, cloud_config);
    let ctx = super::nova::context(&inner.me, timeout, token);
    let service = |s: qfence_controllers::nova::ComputeService| s.describe();
    let server = |s: qfence_controllers::nova::Server| s.describe();
    match action {
        Action::Disable { host, reason } => nova_outcome(
            d.disable_service(&ctx, host.as_str(), &reason.to_string())
                .await,
            service,
        ),
        Action::ForceDown { host } => {
            nova_outcome(d.force_down(&ctx, host.as_str()).await, service)
        }
        Action::Enable { host } | Action::EnableReserved { host, .. } => {
            nova_outcome(d.enable_service(&ctx, host.as_str()).await, service)
        }
        Action::ClearForcedDown { host } => {
            nova_outcome(d.clear_forced_down(&ctx, host.as_str()).await, service)
        }
        Action::Lock { server: id, reason } => {
            nova_outcome(d.lock(&ctx, &id.0, reason).await, server)
        }
        Action::Unlock { server: id } => nova_outcome(d.unlock(&ctx, &id.0).await, server),
        Action::Evacuate { server: id, to, .. } => {
            let request = EvacuateRequest {
                target_host: to.as_ref().map(|h| h.to_string()),
                on_shared_storage: None,
            };
            nova_outcome(d.evacuate(&ctx, &id.0, &request).await, |e| {
                format!(
                    "accepted from {} (microversion {})",
                    e.source, e.microversion
                )
            })
        }
        Action::FollowMigration { server: id } => {
            match super::nova::evacuations(d, &ctx, Some(id)).await {
                Ok(m) => Ran {
                    outcome: Outcome::Done,
                    detail: format!("{} evacuation record(s)", m.len()),
                    reading: None,
                    migrations: Some((id.clone(), m)),
                },
                Err(e) => nova_outcome::<()>(Err(e), |()| String::new()),
            }
        }
        Action::Fence { .. }
        | Action::CheckFence { .. }
        | Action::PowerOn { .. }
        | Action::Event { .. } => Ran::unknown("not a Nova command"),
    }
}

/// An event of the core, in the event log: an alarm when an operator must act.
pub(super) fn record_event(inner: &Inner, cloud: &CloudId, command: &Command, event: &Event) {
    let message = describe(cloud, event);
    let severity = event.kind.severity();
    let kind = if severity == Severity::Alarm {
        tracing::error!(cloud = %cloud, term = %command.term, "{message}");
        EventKind::Alarm
    } else {
        if severity == Severity::Warning {
            tracing::warn!(cloud = %cloud, term = %command.term, "{message}");
        } else {
            tracing::info!(cloud = %cloud, term = %command.term, "{message}");
        }
        EventKind::Decision
    };
    if let qfence_core::instance_ha::EventKind::GateClosed { gate, .. } = &event.kind {
        inner
            .metrics
            .instance_ha_gate_trip(cloud.as_str(), gate.name());
    }
    let mut e = NewEvent::new(kind, inner.me.as_str(), message)
        .term(command.term.0)
        .data(serde_json::json!({
            "instance_ha": cloud,
            "host": event.host,
            "incident": command.incident,
            "event": event.kind,
        }));
    if let Some(i) = command.incident {
        e = e.generation(i.0);
    }
    inner.record(e);
}

/// `instance-ha overcloud: compute-2: fenced (PowerState=Off)`.
fn describe(cloud: &CloudId, event: &Event) -> String {
    use qfence_core::instance_ha::EventKind as K;
    let what = match &event.kind {
        K::HostDown => "host down".to_owned(),
        K::GateClosed { gate, detail } => format!("gate {} closed: {detail}", gate.name()),
        K::GateOpened { gate } => format!("gate {} opened", gate.name()),
        K::NoFence { why } => format!("no fence, never evacuated: {why}"),
        K::Kdump => "fence_kdump messages: the fence waits for the dump".to_owned(),
        K::FencingStarted { attempt } => format!("fencing (attempt {attempt})"),
        K::Fenced { detail } => format!("fenced, read back: {detail}"),
        K::FenceNotProven { detail } => format!("fence NOT proven, nothing evacuated: {detail}"),
        K::ReservedHostEnabled { spare } => format!("reserved host {spare} enabled for it"),
        K::NoReservedHost => "no reserved host to enable".to_owned(),
        K::EvacuationStarted { servers } => format!("evacuating {servers} server(s)"),
        K::EvacuationFailed {
            server,
            failures,
            of,
        } => {
            format!("evacuation of {server} failed ({failures} of {of})")
        }
        K::SmartEvacuationFailed { server, steps } => format!(
            "smart evacuation gave up on {server}; the operator must: {}",
            steps.join("; ")
        ),
        K::Evacuated { done, unsuccessful } => {
            format!("evacuated: {done} done, {unsuccessful} unsuccessful")
        }
        K::LeftDisabled { why } => format!("left disabled and forced down: {why}"),
        K::PoweredOnWhileEvacuated => {
            "the fence reads it powered ON while its servers are evacuated: stopped".to_owned()
        }
        K::PoweredOn => "powered back on".to_owned(),
        K::Recovered => "back in service: enabled, reporting, forced-down cleared".to_owned(),
        K::ReturnedByOperator => "brought back into service by an operator".to_owned(),
        K::Resumed { phase } => format!("resumed by a new leader at {phase}"),
    };
    match &event.host {
        Some(h) => format!("instance-ha {cloud}: {h}: {what}"),
        None => format!("instance-ha {cloud}: {what}"),
    }
}

/// A command started, in the event log (follow-up reads and fence read-backs only when their
/// result is news).
pub(super) fn record_start(inner: &Inner, cloud: &CloudId, command: &Command) {
    if matches!(
        command.action,
        Action::FollowMigration { .. } | Action::CheckFence { .. }
    ) {
        return;
    }
    tracing::info!(cloud = %cloud, term = %command.term, op = %command.op, "Started {command}");
    let mut e = NewEvent::new(
        EventKind::Command,
        inner.me.as_str(),
        format!("instance-ha {cloud}: {command}"),
    )
    .term(command.term.0)
    .data(serde_json::json!({"instance_ha": cloud, "op": command.op, "action": command.action}));
    if let Some(i) = command.incident {
        e = e.generation(i.0);
    }
    inner.record(e);
}

/// A command's result, in the event log.
pub(super) fn record_result(
    inner: &Inner,
    cloud: &CloudId,
    command: &Command,
    ran: &Ran,
    took: Duration,
) {
    let word = match (&ran.reading, ran.outcome) {
        (Some((_, r)), _) if r.value == Observed::Holds => "holds",
        (Some((_, r)), _) if r.value == Observed::NotHeld => "does not hold",
        (_, Outcome::Done) => "done",
        (_, Outcome::Failed) => "failed",
        (_, Outcome::Unknown) => "UNKNOWN",
    };
    let message = format!(
        "instance-ha {cloud}: {} {word}: {}",
        command.action.name(),
        ran.detail
    );
    if ran.outcome == Outcome::Done {
        tracing::info!(cloud = %cloud, op = %command.op, took_ms = took.as_millis(), "{message}");
    } else {
        tracing::warn!(cloud = %cloud, op = %command.op, took_ms = took.as_millis(), "{message}");
    }
    let mut e = NewEvent::new(EventKind::Result, inner.me.as_str(), message)
        .term(command.term.0)
        .data(serde_json::json!({
            "instance_ha": cloud,
            "op": command.op,
            "outcome": ran.outcome,
            "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        }));
    if let Some(i) = command.incident {
        e = e.generation(i.0);
    }
    inner.record(e);
}
