//! Prometheus metrics. The runtime holds a [`Metrics`] handle (cheap to clone) and calls it as
//! things happen; the API serves the registry at `/metrics` in the Prometheus text format.
//!
//! | metric | labels | counts |
//! |---|---|---|
//! | `qfence_decisions_total` | plan | decisions of the core |
//! | `qfence_fence_results_total` | controller, verdict | fence results (FENCED, FAILED, UNKNOWN) |
//! | `qfence_check_duration_seconds` | controller | how long one check (a read-back) took |
//! | `qfence_failovers_total` | plan, result | failovers, by how they ended |
//! | `qfence_forwarded_calls_total` | direction | calls forwarded to or received from the leader |
//! | `qfence_forward_refusals_total` | reason | forwarded calls refused (stale term, bad signature...) |
//! | `qfence_lane_queued` | controller, lane | calls waiting for a turn in a controller's lane (checks, changes) |
//! | `qfence_lane_running` | controller, lane | calls sent and not yet answered |
//! | `qfence_lane_latency_seconds` | controller, lane | from entering the lane to the answer (wait + call) |
//! | `qfence_lane_calls_total` | controller, lane, result | calls answered: `ok` (a reading or a done action) or `error` |
//! | `qfence_instance_ha_hosts` | cloud, state | hosts being processed, by phase (`fencing`, `evacuating`, ...), and hosts seen failed and not taken on (`failed`) |
//! | `qfence_instance_ha_evacuations_total` | cloud, outcome | server evacuations ended `done` or `unsuccessful`, and failed attempts (`failed`) |
//! | `qfence_instance_ha_gate_trips_total` | cloud, gate | Instance HA gates that closed (threshold, heartbeat cliff, ...) |
//!
//! And the live gauges of [`live`], read at each scrape: `qfence_leader`, `qfence_term`,
//! `qfence_lease_remaining_seconds`, `qfence_lease_seconds` (per orchestrator); `qfence_plan_generation`,
//! `qfence_plan_phase`, `qfence_plan_site_verdict`,
//! `qfence_plan_site_fenced_timestamp_seconds`, `qfence_plan_alarm` (per plan, on the
//! leader). `deploy/prometheus/qfence.rules.yml` holds the alerts built on them.

pub mod live;

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

pub use live::{
    AlarmKind, OrchestratorGauges, OrchestratorSource, PlanGauges, SiteGauge, SiteRole,
};

use qfence_model::Verdict;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabel {
    plan: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FenceLabels {
    controller: String,
    verdict: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailoverLabels {
    plan: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloudLabels {
    cloud: String,
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    cloud: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    cloud: String,
    gate: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    controller: String,
    lane: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneResultLabels {
    controller: String,
    lane: String,
    result: String,
}

/// Which of a controller's lanes a call waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Checks (read-backs, health, readiness).
    Checks,
    /// Calls that may change a target: perform, undo, renew.
    Changes,
}

/// Which way a forwarded call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// This node sent it to the leader.
    Sent,
    /// This node, as leader, received it.
    Received,
}

type HistogramFamily = Family<ControllerLabel, Histogram, fn() -> Histogram>;
type LaneHistograms = Family<LaneLabels, Histogram, fn() -> Histogram>;

fn check_histogram() -> Histogram {
    // 5 ms to about 20 s: a BMC read-back can take seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// The metrics handle.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    decisions: Family<PlanLabel, Counter>,
    fence_results: Family<FenceLabels, Counter>,
    check_duration: HistogramFamily,
    failovers: Family<FailoverLabels, Counter>,
    forwarded: Family<DirectionLabel, Counter>,
    refusals: Family<ReasonLabel, Counter>,
    lane_queued: Family<LaneLabels, Gauge>,
    lane_running: Family<LaneLabels, Gauge>,
    lane_latency: LaneHistograms,
    lane_calls: Family<LaneResultLabels, Counter>,
    iha_hosts: Family<CloudLabels, Gauge>,
    iha_evacuations: Family<OutcomeLabels, Counter>,
    iha_gate_trips: Family<GateLabels, Counter>,
    live: Arc<live::Live>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A new registry with every qfence metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let decisions = Family::<PlanLabel, Counter>::default();
        registry.register(
            "qfence_decisions",
            "Decisions of the core, per plan",
            decisions.clone(),
        );
        let fence_results = Family::<FenceLabels, Counter>::default();
        registry.register(
            "qfence_fence_results",
            "Fence results, per controller and verdict",
            fence_results.clone(),
        );
        let check_duration: HistogramFamily = Family::new_with_constructor(check_histogram);
        registry.register(
            "qfence_check_duration_seconds",
            "How long one check of a controller took",
            check_duration.clone(),
        );
        let failovers = Family::<FailoverLabels, Counter>::default();
        registry.register(
            "qfence_failovers",
            "Failovers, per plan and how they ended",
            failovers.clone(),
        );
        let forwarded = Family::<DirectionLabel, Counter>::default();
        registry.register(
            "qfence_forwarded_calls",
            "Calls forwarded to the leader (sent) or from followers (received)",
            forwarded.clone(),
        );
        let refusals = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "qfence_forward_refusals",
            "Forwarded calls refused, per reason",
            refusals.clone(),
        );
        let lane_queued = Family::<LaneLabels, Gauge>::default();
        registry.register(
            "qfence_lane_queued",
            "Calls waiting for a turn in a controller's lane",
            lane_queued.clone(),
        );
        let lane_running = Family::<LaneLabels, Gauge>::default();
        registry.register(
            "qfence_lane_running",
            "Calls of a controller's lane sent and not yet answered",
            lane_running.clone(),
        );
        let lane_latency: LaneHistograms = Family::new_with_constructor(check_histogram);
        registry.register(
            "qfence_lane_latency_seconds",
            "From a call entering its controller's lane to its answer (wait and call)",
            lane_latency.clone(),
        );
        let lane_calls = Family::<LaneResultLabels, Counter>::default();
        registry.register(
            "qfence_lane_calls",
            "Calls of a controller's lane answered, ok or error",
            lane_calls.clone(),
        );
        let iha_hosts = Family::<CloudLabels, Gauge>::default();
        registry.register(
            "qfence_instance_ha_hosts",
            "Instance HA hosts being processed, by phase, and seen failed (failed)",
            iha_hosts.clone(),
        );
        let iha_evacuations = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "qfence_instance_ha_evacuations",
            "Instance HA server evacuations, by outcome (done, unsuccessful; failed attempts)",
            iha_evacuations.clone(),
        );
        let iha_gate_trips = Family::<GateLabels, Counter>::default();
        registry.register(
            "qfence_instance_ha_gate_trips",
            "Instance HA gates that closed, per cloud and gate",
            iha_gate_trips.clone(),
        );
        let live = Arc::new(live::Live::default());
        registry.register_collector(Box::new(live.clone()));
        Self {
            registry: Arc::new(Mutex::new(registry)),
            decisions,
            fence_results,
            check_duration,
            failovers,
            forwarded,
            refusals,
            lane_queued,
            lane_running,
            lane_latency,
            lane_calls,
            iha_hosts,
            iha_evacuations,
            iha_gate_trips,
            live,
        }
    }

    /// An Instance HA state of `cloud` was written: the hosts by state are set from `next`,
    /// and each evacuation that ended or failed between `before` and `next` is counted.
    pub fn instance_ha_changes(
        &self,
        cloud: &str,
        before: &qfence_core::instance_ha::CloudState,
        next: &qfence_core::instance_ha::CloudState,
    ) {
        use qfence_core::instance_ha::EvacState;
        const PHASES: [&str; 10] = [
            "kdump wait",
            "fencing",
            "verifying",
            "isolating",
            "evacuating",
            "powering on",
            "enabling",
            "left disabled",
            "halted",
            "failed",
        ];
        let mut counts: std::collections::BTreeMap<&str, i64> =
            PHASES.iter().map(|p| (*p, 0)).collect();
        for r in next.hosts.values() {
            *counts.entry(r.phase.as_str()).or_default() += 1;
        }
        let failed = next
            .failed
            .keys()
            .filter(|h| !next.hosts.contains_key(*h))
            .count();
        counts.insert("failed", i64::try_from(failed).unwrap_or(i64::MAX));
        for (state, n) in counts {
            self.iha_hosts
                .get_or_create(&CloudLabels {
                    cloud: cloud.to_owned(),
                    state: state.to_owned(),
                })
                .set(n);
        }
        let count = |outcome: &str, n: u64| {
            if n > 0 {
                self.iha_evacuations
                    .get_or_create(&OutcomeLabels {
                        cloud: cloud.to_owned(),
                        outcome: outcome.to_owned(),
                    })
                    .inc_by(n);
            }
        };
        for (host, r) in &next.hosts {
            let was = before.hosts.get(host).filter(|b| b.incident == r.incident);
            for (server, e) in &r.servers {
                let old = was.and_then(|b| b.servers.get(server));
                let ended_now = |done: bool| {
                    let is = match &e.state {
                        EvacState::Done { .. } => done,
                        EvacState::Unsuccessful => !done,
                        _ => false,
                    };
                    let was_same = old.is_some_and(|o| o.state == e.state);
                    is && !was_same
                };
                count("done", u64::from(ended_now(true)));
                count("unsuccessful", u64::from(ended_now(false)));
                let failures = e.failures.saturating_sub(old.map_or(0, |o| o.failures));
                count("failed", u64::from(failures));
            }
        }
    }

    /// An Instance HA gate of `cloud` closed.
    pub fn instance_ha_gate_trip(&self, cloud: &str, gate: &str) {
        self.iha_gate_trips
            .get_or_create(&GateLabels {
                cloud: cloud.to_owned(),
                gate: gate.to_owned(),
            })
            .inc();
    }

    /// The leader's last decision on `plan`, as gauges (a site's last proof of being fenced
    /// is kept while it reads otherwise).
    pub fn plan(&self, plan: &str, gauges: PlanGauges) {
        self.live.set_plan(plan, gauges);
    }

    /// Drops the gauges of every plan `keep` refuses (deleted plans; all of them when this
    /// orchestrator stops leading).
    pub fn retain_plans(&self, keep: &dyn Fn(&str) -> bool) {
        self.live.retain_plans(keep);
    }

    /// Reads this orchestrator's leadership, term and lease from `source` at every scrape.
    pub fn observe_orchestrator(&self, source: OrchestratorSource) {
        self.live.set_orchestrator(source);
    }

    /// Follows one call through `controller`'s `lane`: queued now, running from
    /// [`LaneWatch::running`], answered at [`LaneWatch::answered`] (dropped before: it only
    /// leaves the gauges).
    pub fn lane(&self, controller: &str, lane: Lane) -> LaneWatch {
        let labels = LaneLabels {
            controller: controller.to_owned(),
            lane: match lane {
                Lane::Checks => "checks",
                Lane::Changes => "changes",
            }
            .to_owned(),
        };
        self.lane_queued.get_or_create(&labels).inc();
        LaneWatch {
            metrics: self.clone(),
            labels,
            started: qfence_model::time::monotonic_now(),
            running: false,
        }
    }

    /// The core made a decision for `plan`.
    pub fn decision(&self, plan: &str) {
        self.decisions
            .get_or_create(&PlanLabel {
                plan: plan.to_owned(),
            })
            .inc();
    }

    /// A fence through `controller` ended with `verdict`.
    pub fn fence_result(&self, controller: &str, verdict: Verdict) {
        self.fence_results
            .get_or_create(&FenceLabels {
                controller: controller.to_owned(),
                verdict: verdict.as_str().to_owned(),
            })
            .inc();
    }

    /// A check of `controller` took `seconds`.
    pub fn check_duration(&self, controller: &str, seconds: f64) {
        self.check_duration
            .get_or_create(&ControllerLabel {
                controller: controller.to_owned(),
            })
            .observe(seconds);
    }

    /// A failover of `plan` ended with `result` (`completed`, `refused`, `failed`, ...).
    pub fn failover(&self, plan: &str, result: &str) {
        self.failovers
            .get_or_create(&FailoverLabels {
                plan: plan.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// A call was forwarded.
    pub fn forwarded(&self, direction: Direction) {
        let direction = match direction {
            Direction::Sent => "sent",
            Direction::Received => "received",
        };
        self.forwarded
            .get_or_create(&DirectionLabel {
                direction: direction.to_owned(),
            })
            .inc();
    }

    /// A forwarded call was refused for `reason` (`stale_term`, `bad_signature`, ...).
    pub fn forward_refusal(&self, reason: &str) {
        self.refusals
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Every metric, in the Prometheus text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// One call in a controller's lane (see [`Metrics::lane`]).
#[derive(Debug)]
pub struct LaneWatch {
    metrics: Metrics,
    labels: LaneLabels,
    started: std::time::Instant,
    running: bool,
}

impl LaneWatch {
    /// Its turn came: it is sent now.
    pub fn running(&mut self) {
        if !self.running {
            self.running = true;
            self.metrics.lane_queued.get_or_create(&self.labels).dec();
            self.metrics.lane_running.get_or_create(&self.labels).inc();
        }
    }

    /// It was answered: `ok` for a reading or a done action, not for an error.
    pub fn answered(self, ok: bool) {
        self.metrics
            .lane_latency
            .get_or_create(&self.labels)
            .observe(self.started.elapsed().as_secs_f64());
        let LaneLabels { controller, lane } = self.labels.clone();
        self.metrics
            .lane_calls
            .get_or_create(&LaneResultLabels {
                controller,
                lane,
                result: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
    }
}

impl Drop for LaneWatch {
    fn drop(&mut self) {
        let gauge = if self.running {
            &self.metrics.lane_running
        } else {
            &self.metrics.lane_queued
        };
        gauge.get_or_create(&self.labels).dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_shows_up_under_its_documented_name_and_labels() {
        let m = Metrics::new();
        m.decision("erp-db");
        m.decision("erp-db");
        m.fence_result("bmc-dc1", Verdict::Fenced);
        m.fence_result("bmc-dc1", Verdict::Unknown);
        m.check_duration("bmc-dc1", 0.25);
        m.failover("erp-db", "completed");
        m.forwarded(Direction::Sent);
        m.forward_refusal("stale_term");
        let text = m.render();
        for line in [
            "qfence_decisions_total{plan=\"erp-db\"} 2",
            "qfence_fence_results_total{controller=\"bmc-dc1\",verdict=\"FENCED\"} 1",
            "qfence_fence_results_total{controller=\"bmc-dc1\",verdict=\"UNKNOWN\"} 1",
            "qfence_check_duration_seconds_count{controller=\"bmc-dc1\"} 1",
            "qfence_check_duration_seconds_sum{controller=\"bmc-dc1\"} 0.25",
            "qfence_failovers_total{plan=\"erp-db\",result=\"completed\"} 1",
            "qfence_forwarded_calls_total{direction=\"sent\"} 1",
            "qfence_forward_refusals_total{reason=\"stale_term\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    fn two_sites(owner: &str, standby_verdict: Verdict, fenced_at_ms: Option<u64>) -> PlanGauges {
        let other = if owner == "dc1" { "dc2" } else { "dc1" };
        PlanGauges {
            owner: owner.into(),
            generation: 3,
            phase: "steady".into(),
            sites: vec![
                SiteGauge {
                    site: owner.into(),
                    role: SiteRole::Owner,
                    verdict: Verdict::Failed,
                    fenced_at_ms: None,
                },
                SiteGauge {
                    site: other.into(),
                    role: SiteRole::Standby,
                    verdict: standby_verdict,
                    fenced_at_ms,
                },
            ],
            alarms: vec![],
        }
    }

    #[test]
    fn a_plans_gauges_replace_their_series_and_keep_the_last_proof_of_fencing() {
        let m = Metrics::new();
        m.plan(
            "erp-db",
            two_sites("dc1", Verdict::Fenced, Some(1_700_000_000_500)),
        );
        let mut unknown = two_sites("dc1", Verdict::Unknown, None);
        unknown.alarms.push((AlarmKind::NotFenced, "dc2".into()));
        m.plan("erp-db", unknown);
        let text = m.render();
        for line in [
            r#"qfence_plan_generation{plan="erp-db",owner="dc1"} 3"#,
            r#"qfence_plan_phase{plan="erp-db",phase="steady"} 1"#,
            r#"qfence_plan_site_verdict{plan="erp-db",site="dc1",role="owner",verdict="FAILED"} 1"#,
            r#"qfence_plan_site_verdict{plan="erp-db",site="dc2",role="standby",verdict="UNKNOWN"} 1"#,
            // UNKNOWN now, but dc2 was last proven fenced then.
            r#"qfence_plan_site_fenced_timestamp_seconds{plan="erp-db",site="dc2"} 1700000000.5"#,
            r#"qfence_plan_alarm{plan="erp-db",site="dc2",kind="not_fenced"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains(r#"verdict="FENCED"} 1"#),
            "one verdict a site:\n{text}"
        );
        // Failed over: dc2 owns it, and a proof of fencing dc2 no longer applies.
        m.plan(
            "erp-db",
            two_sites("dc2", Verdict::Fenced, Some(1_700_000_100_000)),
        );
        let text = m.render();
        assert!(text.contains(r#"qfence_plan_generation{plan="erp-db",owner="dc2"} 3"#));
        assert!(!text.contains(r#"site_fenced_timestamp_seconds{plan="erp-db",site="dc2"}"#));
        assert!(
            text.contains(r#"site_fenced_timestamp_seconds{plan="erp-db",site="dc1"} 1700000100"#)
        );
        m.retain_plans(&|_| false);
        assert!(
            !m.render().contains(r#"plan="erp-db""#),
            "a follower exports no plan"
        );
    }

    #[test]
    fn a_lane_counts_its_queue_running_calls_and_answers() {
        let m = Metrics::new();
        let mut first = m.lane("bmc-dc1", Lane::Checks);
        let second = m.lane("bmc-dc1", Lane::Checks);
        let text = m.render();
        assert!(
            text.contains(r#"qfence_lane_queued{controller="bmc-dc1",lane="checks"} 2"#),
            "{text}"
        );
        first.running();
        let text = m.render();
        assert!(
            text.contains(r#"qfence_lane_queued{controller="bmc-dc1",lane="checks"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"qfence_lane_running{controller="bmc-dc1",lane="checks"} 1"#),
            "{text}"
        );
        first.answered(false);
        drop(second);
        let text = m.render();
        for line in [
            r#"qfence_lane_queued{controller="bmc-dc1",lane="checks"} 0"#,
            r#"qfence_lane_running{controller="bmc-dc1",lane="checks"} 0"#,
            r#"qfence_lane_calls_total{controller="bmc-dc1",lane="checks",result="error"} 1"#,
            r#"qfence_lane_latency_seconds_count{controller="bmc-dc1",lane="checks"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    /// At 10,000 plans of two sites a scrape holds about five series a plan: measured, so a
    /// change that multiplies them shows.
    #[test]
    fn ten_thousand_plans_make_about_five_series_each() {
        let m = Metrics::new();
        for i in 0..10_000 {
            m.plan(
                &format!("plan-{i:05}"),
                two_sites("dc1", Verdict::Fenced, Some(1_700_000_000_000)),
            );
        }
        let started = qfence_model::time::monotonic_now();
        let text = m.render();
        let took = started.elapsed();
        let series = text
            .lines()
            .filter(|l| l.starts_with("qfence_plan_"))
            .count();
        eprintln!(
            "10,000 plans: {series} series, {:.1} MB, rendered in {took:?}",
            text.len() as f64 / 1e6
        );
        assert_eq!(series, 50_000);
    }
}
