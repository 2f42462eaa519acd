//! A plan's moves drawn as bars (server-rendered SVG): one chart per move, newest first, a
//! row per step from its start to its end on the move's own time axis, the step's commands as
//! thin bars beneath, and the same spans as a table. The spans are
//! [`qfence_runtime::timeline::timeline`]'s, as the API and `qfence events --timeline` show.

use qfence_runtime::timeline::{MoveTimeline, PlanTimeline, Span, Step, duration_text};

use super::fmt_ms;

/// The chart's width, the step labels' column and the durations' column, in SVG units.
const WIDTH: f64 = 960.0;
const LABEL: f64 = 150.0;
const DURATION: f64 = 110.0;
const ROW: f64 = 30.0;
const AXIS: f64 = 22.0;

/// A step's bar.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    pub label: &'static str,
    /// `step-fences`, plus `open` while under way and `halted` when it stopped there.
    pub class: String,
    pub y: f64,
    pub x: f64,
    pub w: f64,
    pub duration: String,
    pub title: String,
    /// The step's commands: (x, w, title).
    pub ops: Vec<(f64, f64, String)>,
}

/// A row of the spans' table.
#[derive(Debug, Clone)]
pub(crate) struct SpanRow {
    pub step: &'static str,
    pub start: String,
    pub end: String,
    pub duration: String,
    pub detail: String,
}

/// One move, laid out.
#[derive(Debug, Clone)]
pub(crate) struct MoveChart {
    /// `failover dc1 → dc2`.
    pub title: String,
    pub outcome: &'static str,
    pub why: String,
    /// When it started and how long it took (or has run).
    pub summary: String,
    pub height: f64,
    pub bars: Vec<Bar>,
    /// The axis' labels: (x, text).
    pub ticks: Vec<(f64, String)>,
    pub axis_y: f64,
    pub rows: Vec<SpanRow>,
}

impl MoveChart {
    pub fn width(&self) -> f64 {
        WIDTH
    }
}

fn step_class(s: Step) -> &'static str {
    match s {
        Step::HealthLost => "step-health",
        Step::Commit => "step-commit",
        Step::Fences | Step::AppFences | Step::ReadBack => "step-fence",
        _ => "step-move",
    }
}

/// The charts of `t`'s moves, newest first; a move under way is drawn up to `now_ms`.
pub(crate) fn charts(t: &PlanTimeline, now_ms: u64) -> Vec<MoveChart> {
    t.moves.iter().rev().map(|m| chart(m, now_ms)).collect()
}

fn chart(m: &MoveTimeline, now_ms: u64) -> MoveChart {
    let from = m.first_ms();
    let to = m
        .end_ms
        .unwrap_or_else(|| now_ms.max(m.last_ms()))
        .max(from + 1);
    let span_ms = (to - from) as f64;
    let area = WIDTH - LABEL - DURATION;
    let x = |at: u64| LABEL + (at.saturating_sub(from)) as f64 / span_ms * area;
    let bars = m
        .spans
        .iter()
        .enumerate()
        .map(|(i, s)| bar(s, i, to, &x))
        .collect();
    let rows = m.spans.iter().map(|s| row(s, to)).collect();
    let axis_y = m.spans.len() as f64 * ROW + 12.0;
    let ticks = (0..=4)
        .map(|k| {
            let at = from + (to - from) * k / 4;
            (x(at), format!("+{}", duration_text(at - from)))
        })
        .collect();
    let took = to - m.start_ms.min(to);
    let summary = format!(
        "started {} UTC · {} {}",
        fmt_ms(m.start_ms),
        if m.end_ms.is_some() { "took" } else { "for" },
        duration_text(took)
    );
    MoveChart {
        title: format!("{} {} → {}", m.kind.as_str(), m.from, m.target),
        outcome: m.outcome.as_str(),
        why: m.why.clone(),
        summary,
        height: axis_y + AXIS,
        bars,
        ticks,
        axis_y,
        rows,
    }
}

fn bar(s: &Span, i: usize, to: u64, x: &impl Fn(u64) -> f64) -> Bar {
    let end = s.end_ms.unwrap_or(to);
    let (x0, x1) = (x(s.start_ms), x(end));
    let mut class = step_class(s.step).to_owned();
    if s.end_ms.is_none() {
        class.push_str(" open");
    }
    if s.halted.is_some() {
        class.push_str(" halted");
    }
    let duration = duration_text(end.saturating_sub(s.start_ms));
    let ops = s
        .ops
        .iter()
        .map(|o| {
            let (a, b) = (x(o.start_ms), x(o.end_ms.unwrap_or(to)));
            let title = match &o.result {
                Some(r) if *r != o.what => format!("{} → {r}", o.what),
                _ => o.what.clone(),
            };
            (a, (b - a).max(2.0), title)
        })
        .collect();
    Bar {
        label: s.step.as_str(),
        class,
        y: i as f64 * ROW + 4.0,
        x: x0,
        w: (x1 - x0).max(3.0),
        duration: if s.end_ms.is_some() {
            duration
        } else {
            format!("{duration}…")
        },
        title: format!(
            "{}: {} to {}{}",
            s.step.as_str(),
            fmt_ms(s.start_ms),
            s.end_ms.map_or("now".to_owned(), fmt_ms),
            s.halted
                .as_ref()
                .map(|h| format!(" (halted: {h})"))
                .unwrap_or_default()
        ),
        ops,
    }
}

fn row(s: &Span, to: u64) -> SpanRow {
    let mut detail = Vec::new();
    if s.attempts > 1 {
        detail.push(format!("{} attempts", s.attempts));
    }
    if let Some(h) = &s.halted {
        detail.push(format!("halted: {h}"));
    }
    detail.extend(
        s.ops
            .iter()
            .map(|o| o.result.clone().unwrap_or(o.what.clone())),
    );
    SpanRow {
        step: s.step.as_str(),
        start: fmt_ms(s.start_ms),
        end: s.end_ms.map_or("—".to_owned(), fmt_ms),
        duration: match s.duration_ms {
            Some(d) => duration_text(d),
            None => format!(
                "{}, under way",
                duration_text(to.saturating_sub(s.start_ms))
            ),
        },
        detail: detail.join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qfence_runtime::timeline::{MoveKind, MoveOutcome};

    fn span(step: Step, start: u64, end: Option<u64>) -> Span {
        Span {
            step,
            start_ms: start,
            end_ms: end,
            duration_ms: end.map(|e| e - start),
            attempts: 1,
            halted: None,
            ops: vec![],
        }
    }

    #[test]
    fn bars_are_placed_on_the_moves_own_axis_and_an_open_step_runs_to_now() {
        let t = PlanTimeline {
            plan: "erp-db".into(),
            moves: vec![MoveTimeline {
                kind: MoveKind::Failover,
                why: "dc1 lost".into(),
                from: "dc1".into(),
                target: "dc2".into(),
                start_ms: 1_000,
                end_ms: None,
                outcome: MoveOutcome::Running,
                spans: vec![
                    span(Step::HealthLost, 0, Some(1_000)),
                    span(Step::Fences, 1_000, None),
                ],
            }],
        };
        let c = &charts(&t, 4_000)[0];
        assert_eq!(c.title, "failover dc1 → dc2");
        let area = WIDTH - LABEL - DURATION;
        assert_eq!(c.bars[0].x, LABEL);
        assert!((c.bars[0].w - area / 4.0).abs() < 1e-9, "{}", c.bars[0].w);
        assert!((c.bars[1].x + c.bars[1].w - (LABEL + area)).abs() < 1e-9);
        assert!(c.bars[1].class.contains("open"));
        assert_eq!(c.bars[1].duration, "3.0 s…");
        assert_eq!(c.rows[1].end, "—");
    }
}
