//! The executor: runs the commands of a decision, one operation per binding at a time.

use std::sync::Arc;
use std::time::Duration;

use qfence_cluster::forward::CallOutcome;
use qfence_core::rules;
use qfence_core::{Action, BindingKey, Command, Millis, Observation, Observed, OpResult, Outcome};
use qfence_model::{Role, Verdict};
use tokio_util::sync::CancellationToken;

use super::capitalised;
use super::drivers::{PreFence, Verb, WireCall, WireResult};
use super::engine::Inner;
use crate::events::{EventKind, NewEvent};
use crate::metrics::Direction;

/// Runs commands. Each runs in its own task under a deadline and a child of the leadership
/// token; the loop never waits for one.
#[derive(Debug, Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

/// What one call came to.
struct Finished {
    outcome: Outcome,
    observed: Observed,
    detail: String,
    /// A reading that does not hold, in the target's own word (see `Reading::definitive`).
    definitive: bool,
}

impl Executor {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// How many operations are running.
    pub fn in_flight(&self) -> usize {
        self.inner
            .runtime()
            .values()
            .map(|p| p.in_flight.len())
            .sum()
    }

    /// How many operations are running that a drain waits for: all but dead-man arms and
    /// renewals, which go on while draining (ADR 0013).
    pub fn in_flight_but_renewals(&self) -> usize {
        let config = self.inner.config();
        self.inner
            .runtime()
            .iter()
            .map(|(id, p)| {
                let plan = config.plan(id.as_str());
                p.in_flight
                    .values()
                    .filter(|k| {
                        plan.and_then(|plan| rules::binding(plan, k))
                            .is_none_or(|b| b.role != Role::DeadMan)
                    })
                    .count()
            })
            .sum()
    }

    /// Starts `command` under `leadership` (a child token of it cancels the operation when
    /// leadership is lost). A binding that already has an operation running is left alone:
    /// one operation per target at a time.
    pub fn start(&self, command: Command, leadership: &CancellationToken) {
        let inner = &self.inner;
        if let Action::Alarm { site, detail } = &command.action {
            tracing::error!(plan = %command.plan, site = ?site, "Alarm: {detail}");
            let mut e = NewEvent::new(EventKind::Alarm, inner.me.as_str(), detail.clone())
                .plan(command.plan.as_str())
                .term(command.term.0)
                .generation(command.generation.0);
            if let Some(s) = site {
                e = e.site(s.as_str());
            }
            inner.record(e);
            return;
        }
        let Some(key) = command.action.binding().cloned() else {
            return;
        };
        let epoch = {
            let mut all = inner.runtime();
            let plan = all.entry(command.plan.clone()).or_default();
            if plan.in_flight.values().any(|k| *k == key) {
                tracing::debug!(plan = %command.plan, binding = %key, "Busy: one operation per binding");
                return;
            }
            plan.in_flight.insert(command.op.clone(), key.clone());
            plan.epoch
        };
        let mut event = NewEvent::new(EventKind::Command, inner.me.as_str(), command.to_string())
            .plan(command.plan.as_str())
            .term(command.term.0)
            .generation(command.generation.0)
            .data(serde_json::json!({"op": command.op, "binding": key.to_string()}));
        if let Some(s) = &key.site {
            event = event.site(s.as_str());
        }
        // Routine checks and renewals go to the log only when their reading changes (see
        // `finish`).
        if !routine(&command.action) {
            tracing::info!(plan = %command.plan, site = key.site.as_ref().map_or("-", |s| s.as_str()), term = %command.term,
                generation = %command.generation, op = %command.op, "Started {command}");
            inner.record(event);
        }
        let token = leadership.child_token();
        let this = self.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let controller = this.controller_of(&command, &key);
            let finished = this.run(&command, &key, token).await;
            this.finish(
                &command,
                key,
                epoch,
                controller,
                finished,
                started.elapsed(),
            );
        });
    }

    fn controller_of(&self, command: &Command, key: &BindingKey) -> Option<String> {
        let config = self.inner.config();
        let plan = config.plan(command.plan.as_str())?;
        rules::binding(plan, key).map(|b| b.controller.to_string())
    }

    async fn run(&self, command: &Command, key: &BindingKey, token: CancellationToken) -> Finished {
        let unknown = |detail: String| Finished {
            outcome: Outcome::Unknown,
            observed: Observed::Unknown,
            detail,
            definitive: false,
        };
        let inner = &self.inner;
        // Stale term or generation means refuse: a newer leader or owner decides now.
        let term = inner.node.term();
        if term > command.term {
            return unknown(format!(
                "not run: decided in term {}, the cluster is at term {term}",
                command.term
            ));
        }
        if let Some(g) = inner.node.read(|s| s.plan_generation(&command.plan))
            && g > command.generation
        {
            return unknown(format!(
                "not run: decided at generation {}, the plan is at generation {g}",
                command.generation
            ));
        }
        // The configuration in force now: a plan changed through the API since this was
        // decided is at a newer generation, refused above.
        let config = inner.config();
        let Some(plan) = config.plan(command.plan.as_str()) else {
            return unknown(format!("plan {} is not configured", command.plan));
        };
        let Some(binding) = rules::binding(plan, key) else {
            return unknown(format!("plan {} has no binding {key}", command.plan));
        };
        let Some(controller) = config.controller(binding.controller.as_str()) else {
            return unknown(format!(
                "controller {} is not configured",
                binding.controller
            ));
        };
        let mut timeout = controller.timeout.min(plan.fence_timeout);
        let capability = binding.capability.clone();
        let site = match &command.action {
            // A service binding's check asks "does it point at the owner the decision saw".
            Action::Service { site, .. }
            | Action::Check {
                points_at: Some(site),
                ..
            } => site.clone(),
            _ => key.site.clone().unwrap_or_else(|| plan.owner.clone()),
        };
        let mut not_after_unix_ms = None;
        let verb = match &command.action {
            Action::Check { .. } => Verb::Check,
            // The driver contract undoes a fence through `undo` of the fence's own capability
            // (the catalog's `unfence` names what that does, such as power.on).
            Action::Unfence { .. } | Action::LowerShield { .. } => Verb::Undo,
            Action::ArmDeadMan { not_after, .. } | Action::RenewDeadMan { not_after, .. } => {
                // Never act after `not_after`: a later leader's proof that the switch fired
                // rests on it. The deadline travels with the call, absolute, so the
                // orchestrator that runs it enforces it too, however late it arrives.
                let left = not_after.since(inner.clock.now());
                if left.is_zero() {
                    return unknown(format!(
                        "{} not started: past {not_after}",
                        command.action.name()
                    ));
                }
                timeout = timeout.min(left);
                not_after_unix_ms = Some(not_after.0);
                // Arming sets the countdown from the binding and starts the timer (the
                // driver's perform); renewing restarts the countdown.
                if matches!(command.action, Action::ArmDeadMan { .. }) {
                    Verb::Perform
                } else {
                    Verb::Renew
                }
            }
            _ => Verb::Perform,
        };
        let call = WireCall {
            verb,
            capability,
            resource: binding.resource.clone(),
            params: binding.params.clone(),
            site,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            known: Default::default(),
            pre_fence: self.pre_fence(&command.action, &binding.controller),
            not_after_unix_ms,
        };
        let result = match self.call(command, &binding.controller, &call, &token).await {
            Ok(r) => r,
            Err(why) => return unknown(why),
        };
        // An undo is believed only through an independent read-back: the condition must no
        // longer hold (drivers differ in what their undo's own reading says).
        if verb == Verb::Undo {
            if let WireResult::Error(e) = &result {
                let outcome = if e.state_unknown {
                    Outcome::Unknown
                } else {
                    Outcome::Failed
                };
                return Finished {
                    outcome,
                    observed: Observed::Unknown,
                    detail: e.message.clone(),
                    definitive: false,
                };
            }
            let check = WireCall {
                verb: Verb::Check,
                ..call
            };
            return match self
                .call(command, &binding.controller, &check, &token)
                .await
            {
                Ok(WireResult::Reading(r)) => Finished {
                    outcome: if r.holds {
                        Outcome::Failed
                    } else {
                        Outcome::Done
                    },
                    observed: if r.holds {
                        Observed::Holds
                    } else {
                        Observed::NotHeld
                    },
                    detail: format!("read back: {} (read by {})", r.detail, r.by),
                    definitive: false,
                },
                Ok(WireResult::Error(e)) => unknown(format!("read back failed: {}", e.message)),
                Err(why) => unknown(why),
            };
        }
        if is_dead_man(&command.action) {
            return dead_man_finished(result);
        }
        let is_check = verb == Verb::Check;
        match result {
            WireResult::Reading(r) => Finished {
                outcome: if is_check || r.holds {
                    Outcome::Done
                } else {
                    Outcome::Failed
                },
                observed: if r.holds {
                    Observed::Holds
                } else {
                    Observed::NotHeld
                },
                detail: format!("{} (read by {})", r.detail, r.by),
                definitive: !r.holds && r.definitive,
            },
            WireResult::Error(e) => Finished {
                outcome: if is_check || e.state_unknown {
                    Outcome::Unknown
                } else {
                    Outcome::Failed
                },
                observed: Observed::Unknown,
                detail: e.message,
                definitive: false,
            },
        }
    }

    /// The checks a fence must pass first (see [`PreFence`]), for a fence only: the identity
    /// the controller's latest test pinned, checked by the orchestrator that calls it.
    fn pre_fence(
        &self,
        action: &Action,
        controller: &qfence_model::ControllerId,
    ) -> Option<PreFence> {
        matches!(action, Action::Fence { .. }).then(|| PreFence {
            identity: self
                .inner
                .registered()
                .identity(controller)
                .map(str::to_owned),
        })
    }

    /// One controller call through the cluster's routing, under `token` and a deadline a
    /// little over the driver's own (a forwarded hop needs its round trip). `Err` is UNKNOWN.
    async fn call(
        &self,
        command: &Command,
        controller: &qfence_model::ControllerId,
        call: &WireCall,
        token: &CancellationToken,
    ) -> Result<WireResult, String> {
        let inner = &self.inner;
        let call_json = serde_json::to_value(call)
            .map_err(|e| format!("the call could not be encoded: {e}"))?;
        let fut = inner.node.call(
            controller,
            Some((command.plan.clone(), command.generation)),
            call_json,
        );
        let mut outer = Duration::from_millis(call.timeout_ms) + Duration::from_secs(2);
        if call.verb == Verb::Check {
            // A check may queue for its turn at the controller before its own timeout starts.
            outer += super::drivers::CHECK_QUEUE_LIMIT;
        }
        if call.pre_fence.is_some() {
            // The pre-fence checks run first, with a budget of their own.
            outer += Duration::from_millis(call.timeout_ms);
        }
        let outcome = tokio::select! {
            () = token.cancelled() => {
                return Err("cancelled: leadership was lost or the runtime stopped".into())
            }
            r = tokio::time::timeout(outer, fut) => {
                r.map_err(|_| format!("no answer within {outer:?}"))?
            }
        };
        match outcome {
            CallOutcome::Done { by, result } => {
                if by != inner.me {
                    inner.metrics.forwarded(Direction::Sent);
                }
                serde_json::from_value::<WireResult>(result)
                    .map_err(|e| format!("{by} answered something unreadable: {e}"))
            }
            CallOutcome::Refused { by, refusal } => {
                inner.metrics.forward_refusal(&format!("{refusal:?}"));
                Err(format!("{by} refused the call: {refusal:?}"))
            }
            CallOutcome::Unknown { reason, .. } => Err(reason),
        }
    }

    fn finish(
        &self,
        command: &Command,
        key: BindingKey,
        epoch: u64,
        controller: Option<String>,
        f: Finished,
        took: Duration,
    ) {
        let inner = &self.inner;
        let at = inner.clock.now();
        let started_at = Millis(at.0.saturating_sub(took.as_millis().try_into().unwrap_or(0)));
        let is_check = matches!(command.action, Action::Check { .. });
        // A dead-man call reads the switch back: its reading is the binding's observation.
        let observes = is_check || is_dead_man(&command.action);
        let news = {
            let mut all = inner.runtime();
            let plan = all.entry(command.plan.clone()).or_default();
            plan.in_flight.remove(&command.op);
            // The plan was changed (or deleted, or created again) through the API while this
            // ran: its binding keys may name other targets now, so what it read is dropped.
            // An action's outcome is still logged.
            let current = plan.epoch == epoch;
            if !current {
                tracing::info!(plan = %command.plan, binding = %key, op = %command.op,
                    "Dropped a result decided on the plan's previous configuration");
            }
            // A routine call (a check, a renewal) is news when its reading changes; a renewal
            // also when it did not get done. A definitive reading is news even when it
            // repeats: each one counts toward `failover_after_definitive`, and waiting for the
            // next tick would add a tick.
            let renewal_failed = !is_check && f.outcome != Outcome::Done;
            let news = !routine(&command.action)
                || renewal_failed
                || (current
                    && (f.definitive
                        || plan.observations.get(&key).map(|o| o.value) != Some(f.observed)));
            if observes && current {
                plan.observations.insert(
                    key.clone(),
                    // Stamped with the check's start: what it read held at some instant
                    // after that, so a reading never looks fresher than it is, and the next
                    // check is due an interval after this one started, whatever its latency.
                    Observation {
                        value: f.observed,
                        at: started_at,
                        detail: f.detail.clone(),
                        definitive: f.definitive,
                    },
                );
            }
            if current {
                plan.results.insert(
                    command.op.clone(),
                    OpResult {
                        binding: Some(key.clone()),
                        outcome: f.outcome,
                        // A reading's result carries the reading's own stamp (its start): the
                        // core asks "read since the last act" as `reading.at >= result.at`,
                        // which a check's own later finish would make false for ever (a shield
                        // never raised, a VIP never re-applied), and a renewal is due an
                        // interval after the last one started, not after it answered.
                        at: if observes { started_at } else { at },
                    },
                );
            }
            news
        };
        let role = inner
            .config()
            .plan(command.plan.as_str())
            .and_then(|p| rules::binding(p, &key))
            .map(|b| b.role);
        if let Some(c) = &controller {
            if is_check {
                inner.metrics.check_duration(c, took.as_secs_f64());
            }
            if is_check && role == Some(Role::Fence) {
                let verdict = match f.observed {
                    Observed::Holds => Verdict::Fenced,
                    Observed::NotHeld => Verdict::Failed,
                    Observed::Unknown => Verdict::Unknown,
                };
                inner.metrics.fence_result(c, verdict);
            }
        }
        let word = match (is_check, f.observed, f.outcome) {
            (true, Observed::Holds, _) => "holds",
            (true, Observed::NotHeld, _) => "does not hold",
            (true, Observed::Unknown, _) | (false, _, Outcome::Unknown) => "UNKNOWN",
            (false, _, Outcome::Done) => "done",
            (false, _, Outcome::Failed) => "failed",
        };
        let message = format!("{} {word}: {}", command.action.name(), f.detail);
        // A routine reading is news only when it changes; an action that did not get done
        // (a controller error, a refusal, UNKNOWN) is a warning.
        macro_rules! result {
            ($level:expr) => {
                tracing::event!($level, plan = %command.plan, site = key.site.as_ref().map_or("-", |s| s.as_str()), binding = %key,
                    controller = controller.as_deref().unwrap_or("-"), term = %command.term,
                    generation = %command.generation, op = %command.op,
                    took_ms = took.as_millis(), "{}", capitalised(&message))
            };
        }
        match (news, is_check, f.outcome, f.observed) {
            (false, _, _, _) => result!(tracing::Level::DEBUG),
            (true, false, Outcome::Done, _)
            | (true, true, _, Observed::Holds | Observed::NotHeld) => {
                result!(tracing::Level::INFO)
            }
            (true, _, _, _) => result!(tracing::Level::WARN),
        }
        let mut event = NewEvent::new(EventKind::Result, inner.me.as_str(), message)
            .plan(command.plan.as_str())
            .term(command.term.0)
            .generation(command.generation.0)
            .data(serde_json::json!({
                "op": command.op,
                "binding": key.to_string(),
                "controller": controller,
                "outcome": f.outcome,
                "observed": f.observed,
                "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            }));
        if let Some(s) = &key.site {
            event = event.site(s.as_str());
        }
        if news {
            inner.record(event);
        }
        inner.wake_plan(&command.plan);
    }
}

/// Whether `action` arms or renews a dead-man switch.
fn is_dead_man(action: &Action) -> bool {
    matches!(
        action,
        Action::ArmDeadMan { .. } | Action::RenewDeadMan { .. }
    )
}

/// Whether `action` runs every interval (a check, a renewal): logged only when it says
/// something new.
fn routine(action: &Action) -> bool {
    matches!(action, Action::Check { .. } | Action::RenewDeadMan { .. })
}

/// What an arm or a renewal came to. The driver's dead-man perform and renew end by reading
/// the switch back in the same call, as its check does (docs/specs/controller.md): the timer
/// runs with the countdown the binding sets. That reading is the binding's observation, and
/// the call is done only when the driver accepted it AND the reading holds: a switch that
/// runs with someone else's countdown, or not at all, is NOT HELD, and a renewal that cannot
/// be read back proves nothing.
fn dead_man_finished(result: WireResult) -> Finished {
    match result {
        WireResult::Reading(r) => Finished {
            outcome: if r.holds {
                Outcome::Done
            } else {
                Outcome::Failed
            },
            observed: if r.holds {
                Observed::Holds
            } else {
                Observed::NotHeld
            },
            detail: format!("read back: {} (read by {})", r.detail, r.by),
            // Definitive readings are a health check's (failover_after_definitive).
            definitive: false,
        },
        WireResult::Error(e) => Finished {
            outcome: if e.state_unknown {
                Outcome::Unknown
            } else {
                Outcome::Failed
            },
            observed: Observed::Unknown,
            detail: e.message,
            definitive: false,
        },
    }
}
