//! The executor: runs the commands of a decision, one operation per binding at a time.
//!
//! One command is one operation in four steps: **resolve** its binding once, when the
//! command is taken ([`resolve`]: controller, capability, resource, params, role, level,
//! timeout, the [`qfence_call::Call`] itself); **call** the controller through the cluster's
//! routing (here, with no serialisation, or forwarded signed); **read back** an undo with an
//! independent check; **classify** the answer ([`classify`]) into the outcome and
//! observation the decision core reads next, filed under the binding it was resolved for.

mod classify;
mod resolve;

use std::sync::Arc;
use std::time::Duration;

use qfence_call::{Answer, Call, Verb};
use qfence_cluster::forward::CallOutcome;
use qfence_core::rules;
use qfence_core::{
    Action, BindingKey, Command, Millis, Observation, Observed, OpResult, Outcome, Rules,
};
use qfence_model::Role;
use qfence_model::config::Binding;
use tokio_util::sync::CancellationToken;

pub use self::classify::Finished;
use self::classify::{classify, is_dead_man, routine, undo_failed, undo_read_back};
use self::resolve::Resolved;
use crate::capitalised;
use crate::drivers::Read;
use crate::effective::EffectiveConfig;
use crate::events::{EventKind, NewEvent};
use crate::metrics::Direction;
use crate::shared::Inner;

/// Runs commands. Each runs in its own task under a deadline and a child of the leadership
/// token; the loop never waits for one.
#[derive(Debug, Clone)]
pub struct Executor {
    inner: Arc<Inner>,
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
        {
            let mut all = inner.runtime();
            let plan = all.entry(command.plan.clone()).or_default();
            if plan.in_flight.values().any(|k| *k == key) {
                tracing::debug!(plan = %command.plan, binding = %key, "Busy: one operation per binding");
                return;
            }
            plan.in_flight.insert(command.op.clone(), key.clone());
        }
        // Routine checks and renewals go to the log only when their reading changes (see
        // `finish`); their start record is not even built (thousands a second at scale).
        if !routine(&command.action) {
            let mut event =
                NewEvent::new(EventKind::Command, inner.me.as_str(), command.to_string())
                    .plan(command.plan.as_str())
                    .term(command.term.0)
                    .generation(command.generation.0)
                    .data(serde_json::json!({"op": command.op, "binding": key.to_string()}));
            if let Some(s) = &key.site {
                event = event.site(s.as_str());
            }
            tracing::info!(plan = %command.plan, site = key.site.as_ref().map_or("-", |s| s.as_str()), term = %command.term,
                generation = %command.generation, op = %command.op, "Started {command}");
            inner.record(event);
        }
        // Resolved once, here: the call, its answer and its result all use this value.
        let resolved = self.resolve(&command, &key);
        let taken_from = self.inner.config();
        let token = leadership.child_token();
        let this = self.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let finished = match &resolved {
                Ok(r) => this.run(&command, r, token).await,
                Err(why) => Finished::unknown(why.clone()),
            };
            let done = Done {
                command: &command,
                key,
                taken_from,
                resolved: resolved.as_ref().ok(),
            };
            this.finish(&done, finished, started.elapsed());
        });
    }

    /// Runs one resolved command: the call, an undo's read-back, and what it came to.
    async fn run(&self, command: &Command, r: &Resolved, token: CancellationToken) -> Finished {
        if let Err(why) = self.current(command) {
            return Finished::unknown(why);
        }
        let token = &token;
        let dead_man = is_dead_man(&command.action);
        run_call(&r.call, dead_man, move |call: Call| async move {
            self.call(command, r, &call, token).await
        })
        .await
    }

    /// Refuses a command decided in a stale term or at a stale generation: a newer leader or
    /// owner decides now.
    fn current(&self, command: &Command) -> Result<(), String> {
        let node = &self.inner.node;
        let term = node.term();
        if term > command.term {
            return Err(format!(
                "not run: decided in term {}, the cluster is at term {term}",
                command.term
            ));
        }
        if let Some(g) = node.read(|s| s.plan_generation(&command.plan))
            && g > command.generation
        {
            return Err(format!(
                "not run: decided at generation {}, the plan is at generation {g}",
                command.generation
            ));
        }
        Ok(())
    }

    /// One controller call through the cluster's routing, under `token` and a deadline a
    /// little over the driver's own (a forwarded hop needs its round trip). `Err` is UNKNOWN.
    /// A local call reaches the driver as this very value: the cluster serialises only a
    /// forward.
    async fn call(
        &self,
        command: &Command,
        r: &Resolved,
        call: &Call,
        token: &CancellationToken,
    ) -> Result<Read, String> {
        let inner = &self.inner;
        let fut = inner.node.call(
            &r.controller,
            Some((command.plan.clone(), command.generation)),
            call,
        );
        let outer = answer_within(call);
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
                match result {
                    Answer::Reading(read) => Ok(read),
                    other => Err(format!(
                        "{by} answered {} to a {:?} call",
                        other.kind(),
                        call.verb
                    )),
                }
            }
            CallOutcome::Refused { by, refusal } => {
                inner.metrics.forward_refusal(&format!("{refusal:?}"));
                Err(format!("{by} refused the call: {refusal:?}"))
            }
            CallOutcome::Unknown { reason, .. } => Err(reason),
        }
    }

    /// Files what `done`'s call came to under the binding it was resolved for, and reports it.
    fn finish(&self, done: &Done<'_>, f: Finished, took: Duration) {
        let at = self.inner.clock.now();
        let started_at = Millis(at.0.saturating_sub(took.as_millis().try_into().unwrap_or(0)));
        // Stamped with the call's start: what it read held at some instant after that, so a
        // reading never looks fresher than it is, and the next check is due an interval
        // after this one started, whatever its latency.
        let observation = Observation {
            value: f.observed,
            at: started_at,
            detail: f.detail.clone(),
            definitive: f.definitive,
        };
        let (news, wake) = self.file(done, &f, observation.clone(), at);
        if let Some(r) = done.resolved {
            let c = r.controller.as_str();
            let is_check = r.call.verb == Verb::Check;
            if is_check {
                self.inner.metrics.check_duration(c, took.as_secs_f64());
            }
            if is_check && r.role == Role::Fence {
                // The verdict of this one reading, by the core's own rule.
                let verdict =
                    Rules::default().reading_verdict(Some(&observation), at, Duration::MAX, None);
                self.inner.metrics.fence_result(c, verdict);
            }
        }
        self.report(done, &f, took, news);
        if wake {
            self.inner.wake_plan(&done.command.plan);
        }
    }

    /// Records the result in the plan's runtime state (the reading too, for a check or a
    /// dead-man call) and says whether it is news for the log, and whether the plan is to be
    /// decided again now: on news, on every result while the plan moves, and when its last
    /// operation in flight ends (the decision that says "no action"). A steady plan's routine
    /// reading that repeats while others are out does not wake it: at 1,000 plans those
    /// wakes were most of the idle decisions.
    fn file(
        &self,
        done: &Done<'_>,
        f: &Finished,
        observation: Observation,
        at: Millis,
    ) -> (bool, bool) {
        let (command, key) = (done.command, &done.key);
        let is_check = matches!(command.action, Action::Check { .. });
        // A dead-man call reads the switch back: its reading is the binding's observation.
        let observes = is_check || is_dead_man(&command.action);
        // The plan may have been changed (or deleted, or created again) through the API
        // while this ran. A key names its binding by id, so bindings added, removed or moved
        // around it do not matter; what is dropped is a result whose binding is gone or is
        // no longer what it was when the command was taken (a configured id kept while its
        // resource changed). An action's outcome is still logged. Judged under the runtime
        // lock, which the API's reset takes after it refreshed the configuration: a result
        // filed against the old configuration is cleared by the reset, one filed after it
        // was judged against the new one.
        let mut all = self.inner.runtime();
        let now = self.inner.config();
        // The same configuration (the common case) names the same binding; no copy is made.
        let current = Arc::ptr_eq(&now, &done.taken_from)
            || binding_in(&now, command, key) == binding_in(&done.taken_from, command, key);
        if !current {
            tracing::info!(plan = %command.plan, binding = %key, op = %command.op,
                "Dropped a result: its binding is not in the plan's configuration as it was");
        }
        let plan = all.entry(command.plan.clone()).or_default();
        plan.in_flight.remove(&command.op);
        // A routine call (a check, a renewal) is news when its reading changes; a renewal
        // also when it did not get done. A definitive reading is news even when it
        // repeats: each one counts toward `failover_after_definitive`, and waiting for the
        // next tick would add a tick.
        let renewal_failed = !is_check && f.outcome != Outcome::Done;
        let news = !routine(&command.action)
            || renewal_failed
            || (current
                && (f.definitive
                    || plan.observations.get(key).map(|o| o.value) != Some(f.observed)));
        let wake = news || plan.moving || plan.in_flight.is_empty();
        if !current {
            return (news, wake);
        }
        let stamp = observation.at;
        if observes {
            plan.observations.insert(key.clone(), observation);
        }
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
                at: if observes { stamp } else { at },
            },
        );
        (news, wake)
    }

    /// Logs the result (a routine reading only when it is news; an action that did not get
    /// done is a warning) and records it in the event log when it is news.
    fn report(&self, done: &Done<'_>, f: &Finished, took: Duration, news: bool) {
        let (command, key) = (done.command, &done.key);
        let controller = done.resolved.map(|r| r.controller.as_str());
        let is_check = matches!(command.action, Action::Check { .. });
        let word = match (is_check, f.observed, f.outcome) {
            (true, Observed::Holds, _) => "holds",
            (true, Observed::NotHeld, _) => "does not hold",
            (true, Observed::Unknown, _) | (false, _, Outcome::Unknown) => "UNKNOWN",
            (false, _, Outcome::Done) => "done",
            (false, _, Outcome::Failed) => "failed",
        };
        let message = format!("{} {word}: {}", command.action.name(), f.detail);
        macro_rules! result {
            ($level:expr) => {
                tracing::event!($level, plan = %command.plan, site = key.site.as_ref().map_or("-", |s| s.as_str()), binding = %key,
                    controller = controller.unwrap_or("-"), term = %command.term,
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
        if !news {
            return;
        }
        let mut event = NewEvent::new(EventKind::Result, self.inner.me.as_str(), message)
            .plan(command.plan.as_str())
            .term(command.term.0)
            .generation(command.generation.0)
            .data(serde_json::json!({
                "op": command.op,
                "binding": key.to_string(),
                "controller": controller,
                "capability": done.resolved.map(|r| r.spec.name),
                "level": done.resolved.and_then(|r| r.level),
                "outcome": f.outcome,
                "observed": f.observed,
                "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            }));
        if let Some(s) = &key.site {
            event = event.site(s.as_str());
        }
        self.inner.record(event);
    }
}

/// Runs one call as the executor does and says what it came to: `send` runs a call (the
/// executor's through the cluster's routing, `qfence controller call`'s straight to this
/// orchestrator's [`LocalDrivers`](crate::LocalDrivers)); an undo is then read back by an
/// independent check, and the answer is classified. `dead_man`: the call arms or renews a
/// dead-man switch, whose own answer is its read-back. `Err` from `send` is UNKNOWN.
pub async fn run_call<F, Fut>(call: &Call, dead_man: bool, send: F) -> Finished
where
    F: Fn(Call) -> Fut,
    Fut: Future<Output = Result<Read, String>>,
{
    let answer = match send(call.clone()).await {
        Ok(a) => a,
        Err(why) => return Finished::unknown(why),
    };
    if call.verb != Verb::Undo {
        return classify(dead_man, call.verb, answer);
    }
    // An undo is believed only through an independent read-back.
    if let Err(e) = &answer {
        return undo_failed(e);
    }
    undo_read_back(send(call.with_verb(Verb::Check)).await)
}

/// How long the caller waits for `call`'s answer: a little over the driver's own deadline (a
/// forwarded hop needs its round trip), plus a check's wait for its turn and a fence's
/// pre-fence checks, which come before their own deadline starts.
pub fn answer_within(call: &Call) -> Duration {
    let mut outer = call.timeout + Duration::from_secs(2);
    if call.verb == Verb::Check {
        outer += crate::drivers::CHECK_QUEUE_LIMIT;
    }
    if call.pre_fence.is_some() {
        outer += call.timeout;
    }
    outer
}

/// The binding `key` names in `config`, if any.
fn binding_in<'a>(
    config: &'a EffectiveConfig,
    command: &Command,
    key: &BindingKey,
) -> Option<&'a Binding> {
    rules::binding(config.plan(command.plan.as_str())?, key)
}

/// A command whose call has ended, with what it was resolved to when it was taken.
struct Done<'a> {
    command: &'a Command,
    key: BindingKey,
    /// The configuration in force when the command was taken: its result is filed only while
    /// the key still names the binding it named there.
    taken_from: Arc<EffectiveConfig>,
    /// `None` when the binding could not be resolved (nothing was called).
    resolved: Option<&'a Resolved>,
}
