//! The timeline of recorded event sequences: a failover of a lost site, an operator's
//! failover halted and then aborted, a planned switchover. The records are written as the
//! engine and the executor write them (a decision's `data.timeline` mark, commands and
//! results by `data.op`, the engine's "committed" record).

use serde_json::json;

use super::*;
use crate::events::NewEvent;

const T0: u64 = 1_700_000_000_000;

/// Builds a plan's log, sealing each record at `T0 + ms`.
struct Log {
    events: Vec<Event>,
}

impl Log {
    fn new() -> Self {
        Self { events: Vec::new() }
    }

    fn push(&mut self, at: u64, e: NewEvent) -> &mut Self {
        let prev = self.events.last().map(|e| (e.seq, e.hash.clone()));
        let sealed = e
            .plan("erp-db")
            .seal(prev.as_ref().map(|(s, h)| (*s, h.as_str())), T0 + at);
        self.events.push(sealed);
        self
    }

    /// A decision whose mark says the move is at `step` having entered `entered`.
    fn decision(
        &mut self,
        at: u64,
        moving: Option<serde_json::Value>,
        entered: &[&str],
        ended: Option<&str>,
    ) -> &mut Self {
        let mut mark = json!({"entered": entered});
        if let Some(m) = moving {
            mark["moving"] = m;
        }
        if let Some(e) = ended {
            mark["ended"] = json!(e);
        }
        self.push(
            at,
            NewEvent::new(EventKind::Decision, "dc1-a", format!("decision at {at}"))
                .data(json!({"commands": [], "state_change": true, "timeline": mark})),
        )
    }

    fn command(&mut self, at: u64, op: &str, what: &str, site: &str) -> &mut Self {
        self.push(
            at,
            NewEvent::new(EventKind::Command, "dc1-a", what)
                .site(site)
                .data(json!({"op": op, "binding": format!("{site}[0]")})),
        )
    }

    fn result(&mut self, at: u64, op: &str, what: &str, took_ms: u64) -> &mut Self {
        self.push(
            at,
            NewEvent::new(EventKind::Result, "dc1-a", what)
                .data(json!({"op": op, "took_ms": took_ms, "outcome": "done"})),
        )
    }

    fn committed(&mut self, at: u64, owner: &str) -> &mut Self {
        self.push(
            at,
            NewEvent::new(
                EventKind::Decision,
                "dc1-a",
                format!("erp-db committed: owner {owner} at generation 2 (was dc1 at 1)"),
            )
            .site(owner),
        )
    }
}

fn moving(kind: &str, target: &str, step: &str, bad_since: Option<u64>) -> serde_json::Value {
    let mut m = json!({"kind": kind, "why": "dc1 lost", "from": "dc1", "target": target,
        "started_ms": T0 + 1_000, "step": step});
    if let Some(b) = bad_since {
        m["health_bad_since_ms"] = json!(T0 + b);
    }
    m
}

/// (step, start, end) of each span, relative to `T0`.
fn shape(m: &MoveTimeline) -> Vec<(Step, u64, Option<u64>)> {
    m.spans
        .iter()
        .map(|s| (s.step, s.start_ms - T0, s.end_ms.map(|e| e - T0)))
        .collect()
}

#[test]
fn a_lost_site_failing_over_is_each_step_from_health_lost_to_service() {
    let mut log = Log::new();
    let fo = |step| Some(moving("failover", "dc2", step, Some(0)));
    log.push(
        0,
        NewEvent::new(EventKind::Decision, "dc1-a", "dc1 health bad since ..."),
    )
    .decision(1_000, fo("fences"), &["fences"], None)
    .command(1_000, "op-1", "fence dc1[0] (g1 t1)", "dc1")
    .result(1_400, "op-1", "fence done: power.off", 400)
    .decision(1_500, fo("read-back"), &["read-back"], None)
    // A check recorded only by its result: it ran for its took_ms.
    .result(1_900, "op-2", "check holds: power.off FENCED", 300)
    .decision(2_000, fo("readiness"), &["readiness"], None)
    .decision(2_300, fo("switchover"), &["switchover"], None)
    .command(2_300, "op-3", "switchover dc2[3] (g1 t1)", "dc2")
    .result(3_000, "op-3", "switchover done: vm.start", 700)
    .decision(3_100, fo("service"), &["commit"], None)
    .committed(3_150, "dc2")
    .decision(3_200, fo("service"), &["service"], None)
    .command(3_200, "op-4", "service service[0] -> dc2 (g2 t1)", "dc2")
    .result(3_500, "op-4", "service done: vip.own", 300)
    .decision(3_600, None, &[], Some("done"))
    // After the end: the next routine record belongs to no move.
    .result(9_000, "op-9", "check holds", 10);

    let t = timeline("erp-db", &log.events);
    assert_eq!(t.moves.len(), 1, "{t:#?}");
    let m = &t.moves[0];
    assert_eq!((m.kind, m.outcome), (MoveKind::Failover, MoveOutcome::Done));
    assert_eq!((m.from.as_str(), m.target.as_str()), ("dc1", "dc2"));
    assert_eq!(
        (m.start_ms - T0, m.end_ms.map(|e| e - T0)),
        (1_000, Some(3_600))
    );
    assert_eq!(
        shape(m),
        vec![
            (Step::HealthLost, 0, Some(1_000)),
            (Step::Fences, 1_000, Some(1_500)),
            (Step::ReadBack, 1_500, Some(2_000)),
            (Step::Readiness, 2_000, Some(2_300)),
            (Step::Switchover, 2_300, Some(3_100)),
            (Step::Commit, 3_100, Some(3_150)),
            (Step::Service, 3_200, Some(3_600)),
        ]
    );
    assert_eq!(m.spans[1].duration_ms, Some(500));
    let fence = &m.spans[1].ops[0];
    assert_eq!(
        (fence.start_ms - T0, fence.end_ms.map(|e| e - T0)),
        (1_000, Some(1_400))
    );
    assert_eq!(fence.result.as_deref(), Some("fence done: power.off"));
    let check = &m.spans[2].ops[0];
    assert_eq!(
        (check.start_ms - T0, check.end_ms.map(|e| e - T0)),
        (1_600, Some(1_900)),
        "a result alone started took_ms before it"
    );
    assert!(
        m.spans.iter().all(|s| s.ops.iter().all(|o| o.op != "op-9")),
        "nothing after the end is the move's"
    );
    assert_eq!((m.first_ms() - T0, m.last_ms() - T0), (0, 3_600));
}

#[test]
fn a_halted_operator_failover_shows_why_then_its_abort_ends_it() {
    let mut log = Log::new();
    let fo = |step, halted: Option<&str>| {
        let mut m = moving("operator-failover", "dc2", step, Some(500));
        if let Some(h) = halted {
            m["halted"] = json!(h);
        }
        Some(m)
    };
    log.decision(1_000, fo("fences", None), &["fences"], None)
        .command(1_000, "op-1", "fence dc1[0] (g1 t1)", "dc1")
        // Retried once: the step is entered again, it is the same span.
        .decision(4_000, fo("fences", None), &["fences"], None)
        .decision(
            8_000,
            fo("fences", Some("dc1 power.off UNKNOWN after 2 attempts")),
            &[],
            None,
        );

    let running = timeline("erp-db", &log.events);
    let m = &running.moves[0];
    assert_eq!(m.outcome, MoveOutcome::Halted);
    assert_eq!(m.end_ms, None);
    assert_eq!(
        shape(m),
        vec![(Step::Fences, 1_000, None)],
        "an operator's failover shows no health-lost step"
    );
    assert_eq!(m.spans[0].attempts, 2);
    assert_eq!(
        m.spans[0].halted.as_deref(),
        Some("dc1 power.off UNKNOWN after 2 attempts")
    );
    assert_eq!(m.spans[0].ops[0].end_ms, None, "the fence never answered");

    log.decision(12_000, None, &[], Some("aborted"));
    let t = timeline("erp-db", &log.events);
    let m = &t.moves[0];
    assert_eq!(m.outcome, MoveOutcome::Aborted);
    assert_eq!(m.end_ms.map(|e| e - T0), Some(12_000));
    assert_eq!(shape(m), vec![(Step::Fences, 1_000, Some(12_000))]);
    assert_eq!(m.spans[0].duration_ms, Some(11_000));
}

#[test]
fn a_switchover_starts_at_preflight_and_a_second_move_is_its_own() {
    let mut log = Log::new();
    let sw = |step| Some(moving("switchover", "dc2", step, None));
    log.decision(1_000, sw("preflight"), &["preflight"], None)
        .decision(1_200, sw("fences"), &["app-fences", "fences"], None)
        .decision(1_800, sw("read-back"), &["read-back"], None)
        .decision(2_000, sw("switchover"), &["switchover"], None)
        .decision(2_500, sw("service"), &["commit"], None)
        .committed(2_520, "dc2")
        .decision(2_600, sw("service"), &["service"], None)
        .decision(3_000, None, &[], Some("done"));
    // A later switchover back: another move, started later.
    let mut back = moving("switchover", "dc1", "preflight", None);
    back["from"] = json!("dc2");
    back["started_ms"] = json!(T0 + 10_000);
    log.decision(10_000, Some(back), &["preflight"], None);

    let t = timeline("erp-db", &log.events);
    assert_eq!(t.moves.len(), 2);
    let m = &t.moves[0];
    assert_eq!(
        (m.kind, m.outcome),
        (MoveKind::Switchover, MoveOutcome::Done)
    );
    let steps: Vec<Step> = m.spans.iter().map(|s| s.step).collect();
    assert_eq!(
        steps,
        vec![
            Step::Preflight,
            Step::AppFences,
            Step::Fences,
            Step::ReadBack,
            Step::Switchover,
            Step::Commit,
            Step::Service
        ]
    );
    // Two steps entered by one decision: the first took no time.
    assert_eq!(m.spans[1].duration_ms, Some(0));
    assert_eq!(m.spans[2].duration_ms, Some(600));
    let second = &t.moves[1];
    assert_eq!(
        (second.from.as_str(), second.target.as_str()),
        ("dc2", "dc1")
    );
    assert_eq!(second.outcome, MoveOutcome::Running);
    assert_eq!(shape(second), vec![(Step::Preflight, 10_000, None)]);
}

#[test]
fn records_of_other_plans_and_unmarked_records_tell_no_move() {
    let mut log = Log::new();
    log.push(
        0,
        NewEvent::new(
            EventKind::Decision,
            "dc1-a",
            "no action: erp-db owned by dc1",
        ),
    );
    assert!(timeline("erp-db", &log.events).moves.is_empty());
    log.decision(
        1_000,
        Some(moving("failover", "dc2", "fences", None)),
        &["fences"],
        None,
    );
    assert!(timeline("crm", &log.events).moves.is_empty());
    assert_eq!(timeline("erp-db", &log.events).moves.len(), 1);
}

#[test]
fn a_mark_reads_back_what_it_wrote() {
    let mark = Mark {
        moving: Some(MoveMark {
            kind: MoveKind::OperatorFailover,
            why: "oncall: dc1 lost".into(),
            from: "dc1".into(),
            target: "dc2".into(),
            started_ms: T0,
            step: Step::ReadBack,
            health_bad_since_ms: None,
            halted: None,
        }),
        entered: vec![Step::Fences, Step::ReadBack],
        ended: None,
    };
    let v = serde_json::to_value(&mark).unwrap();
    assert_eq!(v["moving"]["step"], "read-back");
    assert_eq!(v["moving"]["kind"], "operator-failover");
    assert_eq!(Mark::deserialize(&v).unwrap(), mark);
}

#[test]
fn durations_read_as_people_say_them() {
    assert_eq!(duration_text(450), "450 ms");
    assert_eq!(duration_text(12_345), "12.3 s");
    assert_eq!(duration_text(185_000), "3 min 05 s");
    assert_eq!(duration_text(7_440_000), "2 h 04 min");
}
