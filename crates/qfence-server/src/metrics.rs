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

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

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

/// Which way a forwarded call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// This node sent it to the leader.
    Sent,
    /// This node, as leader, received it.
    Received,
}

type HistogramFamily = Family<ControllerLabel, Histogram, fn() -> Histogram>;

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
        Self {
            registry: Arc::new(Mutex::new(registry)),
            decisions,
            fence_results,
            check_duration,
            failovers,
            forwarded,
            refusals,
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
}
