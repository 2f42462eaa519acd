//! A check's schedule does not drift with its own latency, nor with the tick's jitter: a pure
//! decision sequence driven the way the runtime drives it (full ticks exactly an interval
//! apart, each decision a few jittery milliseconds after its tick, checks stamped when they
//! start and answering tens of milliseconds later, a result that changes a reading waking the
//! plan 10 ms after it comes back).

mod sim;

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_core::{
    Action, BindingKey, Command, Leadership, Millis, Observation, Observed, OpId, OpResult,
    Outcome, Phase, PlanState, Snapshot, decide,
};
use qfence_model::Term;
use qfence_model::config::ValidatedConfig;
use sim::fixtures;

const T0: Millis = Millis(1_699_970_520_000);
const TICK_MS: u64 = 1000;
/// How long a check takes, start to answer.
const LATENCY_MS: u64 = 35;

/// The owner's `db.health` in the PostgreSQL plan.
fn health() -> BindingKey {
    fixtures::placed(Some("dc1"), 4)
}

/// A decision's delay after its tick: 0 to 22 ms, never the same twice in a row.
fn jitter(tick: u64) -> u64 {
    (tick * 37) % 23
}

struct Loop {
    cfg: ValidatedConfig,
    state: PlanState,
    obs: BTreeMap<BindingKey, Observation>,
    results: BTreeMap<OpId, OpResult>,
    in_flight: BTreeMap<OpId, BindingKey>,
    /// Checks under way: when each answers, what it read, whether definitively.
    pending: Vec<(Millis, Command, Observed, bool)>,
    /// From this time on, the owner's health reads unhealthy.
    dies_at: Option<Millis>,
    /// Whether those readings are definitive (a refused connection) or ambiguous.
    definitive: bool,
    /// When each check of the owner's health was issued.
    health_checks: Vec<Millis>,
    /// When the failover started, if it did.
    failover_at: Option<Millis>,
}

impl Loop {
    fn new(interval_ms: u64, failover_after_ms: u64) -> Self {
        Self::with(interval_ms, failover_after_ms, None)
    }

    fn with(interval_ms: u64, failover_after_ms: u64, definitive: Option<u32>) -> Self {
        let mut plan = fixtures::pg_plan();
        plan.failover_after_definitive = definitive;
        plan.interval = Duration::from_millis(interval_ms);
        plan.freshness = Duration::from_millis(interval_ms * 3);
        plan.failover_after = Duration::from_millis(failover_after_ms);
        plan.fence_timeout = Duration::from_millis(interval_ms / 2);
        let cfg = fixtures::config_with(vec![("pg", plan)]);
        let state = PlanState::initial(cfg.plan("pg").unwrap());
        Self {
            cfg,
            state,
            obs: BTreeMap::new(),
            results: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            pending: Vec::new(),
            dies_at: None,
            definitive: false,
            health_checks: Vec::new(),
            failover_at: None,
        }
    }

    fn decide_at(&mut self, now: Millis) {
        let d = decide(&Snapshot {
            config: &self.cfg,
            plan: fixtures::plan_id("pg"),
            state: &self.state,
            observations: &self.obs,
            results: &self.results,
            in_flight: &self.in_flight,
            leadership: Leadership {
                leader: true,
                term: Term(2),
                lease_until: now.plus(Duration::from_secs(5)),
            },
            now,
        });
        if let Some(ch) = &d.state_change {
            self.state = self.state.apply(ch).expect("the only writer");
        }
        if self.failover_at.is_none() && matches!(self.state.phase, Phase::Transition(_)) {
            self.failover_at = Some(now);
        }
        for c in d.commands {
            let Action::Check { binding, .. } = &c.action else {
                continue;
            };
            if *binding == health() {
                self.health_checks.push(now);
            }
            let dead = self.dies_at.is_some_and(|t| now >= t);
            let value = if *binding == health() && dead {
                Observed::NotHeld
            } else {
                Observed::Holds
            };
            self.in_flight.insert(c.op.clone(), binding.clone());
            let definitive = value == Observed::NotHeld && self.definitive;
            self.pending.push((
                now.plus(Duration::from_millis(LATENCY_MS)),
                c,
                value,
                definitive,
            ));
        }
    }

    /// Delivers the answers due by `until`; returns when the last one that changed a reading
    /// (or was definitive) came back (the runtime wakes the plan for it).
    fn deliver(&mut self, until: Millis) -> Option<Millis> {
        let mut news = None;
        let (due, rest): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|p| p.0 <= until);
        self.pending = rest;
        for (at, c, value, definitive) in due {
            let binding = self.in_flight.remove(&c.op).expect("in flight");
            let started = Millis(at.0 - LATENCY_MS);
            // A definitive reading is news even when it repeats: it counts toward a failover.
            if definitive || self.obs.get(&binding).map(|o| o.value) != Some(value) {
                news = Some(at);
            }
            let mut o = Observation::new(value, started);
            o.definitive = definitive;
            self.obs.insert(binding.clone(), o);
            self.results.insert(
                c.op,
                OpResult {
                    binding: Some(binding),
                    outcome: Outcome::Done,
                    at,
                },
            );
        }
        news
    }

    /// Runs `ticks` full ticks, plus the wakes the answers cause in between.
    fn run(&mut self, ticks: u64) {
        for tick in 0..ticks {
            let at = T0.plus(Duration::from_millis(tick * TICK_MS + jitter(tick)));
            self.decide_at(at);
            let next = T0.plus(Duration::from_millis((tick + 1) * TICK_MS));
            while let Some(woke) = self.deliver(Millis(next.0 - 1)) {
                let wake = woke.plus(Duration::from_millis(10));
                if wake >= next {
                    break;
                }
                self.decide_at(wake);
            }
        }
    }
}

fn gaps(times: &[Millis]) -> Vec<u64> {
    times.windows(2).map(|w| w[1].0 - w[0].0).collect()
}

#[test]
fn checks_run_every_interval_not_every_other_one() {
    let mut l = Loop::new(TICK_MS, 60_000);
    l.run(20);
    let gaps = gaps(&l.health_checks);
    assert_eq!(l.health_checks.len(), 20, "one check per tick: {gaps:?}");
    for g in &gaps {
        assert!(
            (TICK_MS - 25..=TICK_MS + 25).contains(g),
            "checks {g} ms apart, not about {TICK_MS}: {gaps:?}"
        );
    }
}

#[test]
fn the_failover_starts_failover_after_seconds_after_the_first_bad_reading_not_a_check_later() {
    let mut l = Loop::new(TICK_MS, 3000);
    // Dies between two ticks: the tick at 5 s is the first to read it.
    l.dies_at = Some(T0.plus(Duration::from_millis(4500)));
    l.run(12);
    let first_bad = l
        .health_checks
        .iter()
        .copied()
        .find(|t| *t >= l.dies_at.unwrap())
        .expect("a check after the death");
    let failover = l.failover_at.expect("a failover");
    let after = failover.0 - first_bad.0;
    assert!(
        (3000 - 25..=3000 + 25).contains(&after),
        "failover {after} ms after the first bad reading, not about 3000 (checks at {:?})",
        gaps(&l.health_checks)
    );
}

/// The failover's delay after the owner dies at 4.5 s, with `failover_after_definitive`.
fn failover_delay(definitive_readings: bool, after: Option<u32>) -> Option<u64> {
    let mut l = Loop::with(TICK_MS, 20_000, after);
    l.dies_at = Some(T0.plus(Duration::from_millis(4500)));
    l.definitive = definitive_readings;
    l.run(30);
    let first_bad = l
        .health_checks
        .iter()
        .copied()
        .find(|t| *t >= l.dies_at.unwrap())?;
    l.failover_at.map(|f| f.0 - first_bad.0)
}

#[test]
fn two_definitive_readings_in_a_row_fail_over_a_second_after_the_first() {
    let after = failover_delay(true, Some(2)).expect("a failover");
    assert!(
        (1000 - 25..=1000 + 25 + LATENCY_MS + 10).contains(&after),
        "failover {after} ms after the first definitive reading"
    );
    let after = failover_delay(true, Some(1)).expect("a failover");
    assert!(after <= LATENCY_MS + 10 + 25, "one is enough: {after} ms");
}

#[test]
fn ambiguous_readings_or_the_setting_off_wait_out_failover_after_seconds() {
    let after = failover_delay(false, Some(2)).expect("a failover");
    assert!(
        (20_000 - 25..=20_000 + 25).contains(&after),
        "ambiguous readings wait the window: {after} ms"
    );
    let after = failover_delay(true, None).expect("a failover");
    assert!(
        (20_000 - 25..=20_000 + 25).contains(&after),
        "without the setting, definitive readings wait the window: {after} ms"
    );
}
