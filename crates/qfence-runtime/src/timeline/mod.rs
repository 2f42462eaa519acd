//! A plan's moves (failovers, operator failovers, switchovers) as timelines, read from the
//! event log: each step (health lost, fences, read-back, readiness, unfence, switchover,
//! commit, service) a span with its start and end, and the commands and results of the step
//! beneath it.
//!
//! The engine writes a [`Mark`] into every decision record about a move (`data.timeline`):
//! the move under way after the decision, the steps it entered, a halt, an end. [`timeline`]
//! is the one pure function that turns a plan's records, oldest first, into
//! [`PlanTimeline`]; the API (`GET /api/v1/plans/{plan}/timeline`), hence `qfence events
//! --timeline`, and the console's plan page all show what it returns. Records from before the
//! marks were written tell no timeline (the history still lists them).

use serde::{Deserialize, Serialize};

use qfence_core::{Decision, Note, Phase, PlanState, Stage, TransitionKind};

use crate::events::{Event, EventKind};

#[cfg(test)]
mod tests;

/// The key of a decision record's `data` that holds its [`Mark`].
pub const MARK_KEY: &str = "timeline";

/// A step of a move, in the order a move takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The owner's health was bad (or unreadable) until the failover started.
    HealthLost,
    /// A planned switchover's check of the target's readiness, before anything is touched.
    Preflight,
    /// Application-level fences at the sites given up.
    AppFences,
    /// The fences of every site but the target.
    Fences,
    /// Every required fence read back.
    ReadBack,
    /// The target's readiness.
    Readiness,
    /// The target's own fences undone.
    Unfence,
    /// The application promoted at the target.
    Switchover,
    /// The new owner committed (generation + 1).
    Commit,
    /// The service pointed at the new owner.
    Service,
}

impl Step {
    /// The step's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::HealthLost => "health lost",
            Step::Preflight => "preflight",
            Step::AppFences => "application fences",
            Step::Fences => "fences",
            Step::ReadBack => "read-back",
            Step::Readiness => "readiness",
            Step::Unfence => "unfence",
            Step::Switchover => "switchover",
            Step::Commit => "commit",
            Step::Service => "service",
        }
    }
}

impl From<Stage> for Step {
    fn from(s: Stage) -> Self {
        match s {
            Stage::Preflight => Step::Preflight,
            Stage::AppFences => Step::AppFences,
            Stage::Fences => Step::Fences,
            Stage::Verify => Step::ReadBack,
            Stage::Readiness => Step::Readiness,
            Stage::Unfence => Step::Unfence,
            Stage::Switchover => Step::Switchover,
            Stage::Commit => Step::Commit,
            Stage::Service => Step::Service,
        }
    }
}

/// What started a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum MoveKind {
    /// qfence's own: the owner's health stayed bad, or its site was lost.
    Failover,
    /// An operator's failover.
    OperatorFailover,
    /// A planned switchover.
    Switchover,
}

impl MoveKind {
    /// The kind as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveKind::Failover => "failover",
            MoveKind::OperatorFailover => "operator failover",
            MoveKind::Switchover => "switchover",
        }
    }
}

/// How a move ended, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum MoveOutcome {
    /// Under way.
    Running,
    /// Stopped, waiting for an operator (confirm fenced, retry or abort).
    Halted,
    /// The target owns the plan and its service: steady again.
    Done,
    /// An operator aborted it; the old owner kept the plan.
    Aborted,
    /// Another move started before this one's end was recorded (a new leader's records, say).
    Superseded,
}

impl MoveOutcome {
    /// The outcome as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveOutcome::Running => "running",
            MoveOutcome::Halted => "halted",
            MoveOutcome::Done => "done",
            MoveOutcome::Aborted => "aborted",
            MoveOutcome::Superseded => "superseded",
        }
    }
}

/// The move under way after a decision, as its [`Mark`] carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveMark {
    pub kind: MoveKind,
    /// The cause (a failover) or the operator's reason.
    pub why: String,
    pub from: String,
    pub target: String,
    /// When the move started (ms since the Unix epoch): it names the move.
    pub started_ms: u64,
    /// The step under way.
    pub step: Step,
    /// Since when the owner's health was bad, when it was at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_bad_since_ms: Option<u64>,
    /// Why it halted, while it waits for an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
}

/// What a decision record says about a move, in its `data.timeline`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The move under way after the decision; absent once steady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving: Option<MoveMark>,
    /// The steps the decision entered, in order (a step with commands to issue, and the
    /// commit).
    #[serde(default)]
    pub entered: Vec<Step>,
    /// How the move ended, when this decision ended it ([`MoveOutcome::Done`] or
    /// [`MoveOutcome::Aborted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<MoveOutcome>,
}

impl Mark {
    /// The mark of `decision`, taken on `before`; `None` when it concerns no move (a steady
    /// plan's routine decision).
    pub fn of(decision: &Decision, before: &PlanState) -> Option<Self> {
        let after = decision.state_change.as_ref().map_or(before, |c| &c.next);
        let moving = match &after.phase {
            Phase::Steady => None,
            Phase::Transition(t) => {
                let (kind, why) = match &t.kind {
                    TransitionKind::Failover { cause } => (MoveKind::Failover, cause.clone()),
                    TransitionKind::OperatorFailover { why, by } => {
                        (MoveKind::OperatorFailover, format!("{by}: {why}"))
                    }
                    TransitionKind::Switchover { why, by } => {
                        (MoveKind::Switchover, format!("{by}: {why}"))
                    }
                };
                Some(MoveMark {
                    kind,
                    why,
                    from: t.from.to_string(),
                    target: t.target.to_string(),
                    started_ms: t.started.0,
                    step: t.stage.into(),
                    // The start cleared nothing yet: `before` still has the bad health.
                    health_bad_since_ms: before.health.bad_since.map(|m| m.0),
                    halted: t.halted.clone(),
                })
            }
        };
        let mut entered = Vec::new();
        let mut ended = None;
        for n in decision.reason.notes() {
            match n {
                Note::Step { stage, .. } => entered.push(Step::from(*stage)),
                Note::Committed { .. } => entered.push(Step::Commit),
                Note::Done { .. } => ended = Some(MoveOutcome::Done),
                Note::Aborted { .. } => ended = Some(MoveOutcome::Aborted),
                _ => {}
            }
        }
        if moving.is_none() && before.transition().is_none() && ended.is_none() {
            return None;
        }
        Some(Self {
            moving,
            entered,
            ended,
        })
    }
}

/// A command of a step and its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OpSpan {
    /// The operation's id (a command and its result carry the same).
    pub op: String,
    /// The command, as recorded: `fence dc1[0] (g1 t1)`.
    pub what: String,
    /// The site acted on; absent for a service binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    pub start_ms: u64,
    /// Absent while no result is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// The result's sentence: `power.off done: ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// One step of a move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Span {
    pub step: Step,
    /// When the step was entered (ms since the Unix epoch).
    pub start_ms: u64,
    /// When the next step was entered or the move ended; absent while under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// `end_ms - start_ms`; absent while under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How many times the step was entered (a retry enters it again).
    pub attempts: u32,
    /// Why the move halted in this step, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// The step's commands and their results, in order.
    pub ops: Vec<OpSpan>,
}

/// One move of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MoveTimeline {
    pub kind: MoveKind,
    /// The cause (a failover) or who asked and why.
    pub why: String,
    pub from: String,
    pub target: String,
    /// When it started (ms since the Unix epoch); a failover's health-lost span starts earlier.
    pub start_ms: u64,
    /// When it ended; absent while under way or halted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    pub outcome: MoveOutcome,
    /// Its steps, in the order they were entered.
    pub spans: Vec<Span>,
}

impl MoveTimeline {
    /// The earliest start of its spans (health lost starts before the move).
    pub fn first_ms(&self) -> u64 {
        self.spans
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(self.start_ms)
            .min(self.start_ms)
    }

    /// The latest time it shows: its end, or the last span's or result's.
    pub fn last_ms(&self) -> u64 {
        let spans = self.spans.iter().flat_map(|s| {
            [s.start_ms, s.end_ms.unwrap_or(0)].into_iter().chain(
                s.ops
                    .iter()
                    .flat_map(|o| [o.start_ms, o.end_ms.unwrap_or(0)]),
            )
        });
        spans
            .chain(self.end_ms)
            .max()
            .unwrap_or(self.start_ms)
            .max(self.start_ms)
    }
}

/// A plan's moves, oldest first: `GET /api/v1/plans/{plan}/timeline`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanTimeline {
    pub plan: String,
    pub moves: Vec<MoveTimeline>,
}

/// The plan's moves told by `records` (the plan's records, oldest first; others are skipped).
pub fn timeline(plan: &str, records: &[Event]) -> PlanTimeline {
    let mut moves: Vec<MoveTimeline> = Vec::new();
    // Whether the last move is still open (records after its end are not its own).
    let mut open = false;
    for e in records.iter().filter(|e| e.plan.as_deref() == Some(plan)) {
        match e.kind {
            EventKind::Decision => {
                if let Some(mark) = e.data.get(MARK_KEY).and_then(|m| Mark::deserialize(m).ok()) {
                    open = apply(&mut moves, open, &mark, e.time_ms);
                } else if open && e.message.contains(" committed: owner ") {
                    // The cluster accepted the commit: the commit step ends here.
                    if let Some(s) = current(&mut moves).and_then(|m| m.spans.last_mut())
                        && s.step == Step::Commit
                    {
                        close(s, e.time_ms);
                    }
                }
            }
            EventKind::Command if open => {
                if let Some(s) = current(&mut moves).and_then(|m| m.spans.last_mut()) {
                    s.ops.push(OpSpan {
                        op: op_id(e),
                        what: e.message.clone(),
                        site: e.site.clone(),
                        start_ms: e.time_ms,
                        end_ms: None,
                        result: None,
                    });
                }
            }
            EventKind::Result if open => {
                if let Some(m) = current(&mut moves) {
                    result(m, e);
                }
            }
            _ => {}
        }
    }
    PlanTimeline {
        plan: plan.to_owned(),
        moves,
    }
}

fn current(moves: &mut [MoveTimeline]) -> Option<&mut MoveTimeline> {
    moves.last_mut()
}

fn close(s: &mut Span, at: u64) {
    if s.end_ms.is_none() {
        let end = at.max(s.start_ms);
        s.end_ms = Some(end);
        s.duration_ms = Some(end - s.start_ms);
    }
}

fn span(step: Step, at: u64) -> Span {
    Span {
        step,
        start_ms: at,
        end_ms: None,
        duration_ms: None,
        attempts: 1,
        halted: None,
        ops: Vec::new(),
    }
}

/// Applies one decision's mark; whether a move is open after it.
fn apply(moves: &mut Vec<MoveTimeline>, open: bool, mark: &Mark, at: u64) -> bool {
    if let Some(mv) = &mark.moving {
        let same = open && moves.last().is_some_and(|m| m.start_ms == mv.started_ms);
        if !same {
            if open && let Some(m) = current(moves) {
                end(m, MoveOutcome::Superseded, at);
            }
            moves.push(start(mv));
        }
        let m = current(moves).expect("a move was just found or started");
        for step in &mark.entered {
            enter(m, *step, at);
        }
        // A step waiting to be entered (a retry's wait, a busy binding) is shown from when
        // the move came to it; after a commit, the service step waits for its own entry.
        let shown = m
            .spans
            .last()
            .filter(|s| s.end_ms.is_none())
            .map(|s| s.step);
        if mark.entered.is_empty() && shown.is_none() {
            enter(m, mv.step, at);
        }
        m.outcome = MoveOutcome::Running;
        if let Some(why) = &mv.halted {
            m.outcome = MoveOutcome::Halted;
            if let Some(s) = m.spans.last_mut() {
                s.halted = Some(why.clone());
            }
        }
        return true;
    }
    if open && let Some(m) = current(moves) {
        for step in &mark.entered {
            enter(m, *step, at);
        }
        end(m, mark.ended.unwrap_or(MoveOutcome::Done), at);
    }
    false
}

fn start(mv: &MoveMark) -> MoveTimeline {
    let mut spans = Vec::new();
    if let Some(since) = mv.health_bad_since_ms.filter(|s| *s <= mv.started_ms)
        && mv.kind == MoveKind::Failover
    {
        let mut s = span(Step::HealthLost, since);
        close(&mut s, mv.started_ms);
        spans.push(s);
    }
    MoveTimeline {
        kind: mv.kind,
        why: mv.why.clone(),
        from: mv.from.clone(),
        target: mv.target.clone(),
        start_ms: mv.started_ms,
        end_ms: None,
        outcome: MoveOutcome::Running,
        spans,
    }
}

/// Enters `step` at `at`: a new span, unless it is the step under way (entered again: a
/// retry, or the step shown after the one that entered it).
fn enter(m: &mut MoveTimeline, step: Step, at: u64) {
    if let Some(last) = m.spans.last_mut()
        && last.step == step
        && last.end_ms.is_none()
    {
        if last.start_ms != at {
            last.attempts += 1;
        }
        last.halted = None;
        return;
    }
    if let Some(last) = m.spans.last_mut() {
        close(last, at);
    }
    m.spans.push(span(step, at));
}

fn end(m: &mut MoveTimeline, outcome: MoveOutcome, at: u64) {
    for s in &mut m.spans {
        close(s, at);
    }
    m.end_ms = Some(at);
    m.outcome = outcome;
}

/// A result record closes its command's op (by `data.op`), or, for a check recorded only by
/// its result, adds one that ends at the record and started `took_ms` before.
fn result(m: &mut MoveTimeline, e: &Event) {
    let op = op_id(e);
    let found = m
        .spans
        .iter_mut()
        .rev()
        .flat_map(|s| s.ops.iter_mut())
        .find(|o| o.end_ms.is_none() && !op.is_empty() && o.op == op);
    match found {
        Some(o) => {
            o.end_ms = Some(e.time_ms.max(o.start_ms));
            o.result = Some(e.message.clone());
        }
        None => {
            let took = e.data.get("took_ms").and_then(|v| v.as_u64()).unwrap_or(0);
            if let Some(s) = m.spans.last_mut() {
                s.ops.push(OpSpan {
                    op,
                    what: e.message.clone(),
                    site: e.site.clone(),
                    start_ms: e.time_ms.saturating_sub(took).max(s.start_ms),
                    end_ms: Some(e.time_ms),
                    result: Some(e.message.clone()),
                });
            }
        }
    }
}

/// A command's or result's operation id (`data.op`), empty when it has none.
fn op_id(e: &Event) -> String {
    e.data
        .get("op")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A duration as shown beside a span, in the console and the terminal: `450 ms`, `12.3 s`,
/// `3 min 05 s`, `2 h 04 min`.
pub fn duration_text(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", ms / 1_000, ms % 1_000 / 100),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}
