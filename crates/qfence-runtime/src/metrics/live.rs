//! The gauges that answer "is everything safe right now": each plan as the leader's last
//! decision judged it, and this orchestrator's place in the cluster, read when scraped.
//!
//! Plans are exported by the leader only (a follower decides nothing and would only repeat
//! the leader's view), so a scrape of every orchestrator holds each plan once; dashboards
//! and alerts aggregate `by (plan, site)` so a change of leader does not break them.
//!
//! Cardinality (10,000 plans of two sites): `qfence_plan_generation` and
//! `qfence_plan_phase` one series a plan, `qfence_plan_site_verdict` and
//! `qfence_plan_site_fenced_timestamp_seconds` one a site (the owner has no proof of being
//! fenced), `qfence_plan_alarm` only while an alarm is raised: about 5 series a plan, 50,000
//! in all. Label values that change (owner, phase, verdict, role) replace their series: one
//! series each, never one per value.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use qfence_model::Verdict;

/// What a site is to its plan now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteRole {
    /// It owns the plan: it runs the service, it is never fenced.
    Owner,
    /// It must stay fenced.
    Standby,
    /// An operator put it in maintenance: checked and shown, alarm-free.
    Maintenance,
}

impl SiteRole {
    fn as_str(self) -> &'static str {
        match self {
            SiteRole::Owner => "owner",
            SiteRole::Standby => "standby",
            SiteRole::Maintenance => "maintenance",
        }
    }
}

/// One site of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteGauge {
    pub site: String,
    pub role: SiteRole,
    pub verdict: Verdict,
    /// When it was last proven fenced (the newest proving check), Unix ms: kept from earlier
    /// ticks while it reads otherwise.
    pub fenced_at_ms: Option<u64>,
}

/// An alarm raised on a plan (exported only while raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmKind {
    /// A site that does not own the plan is not proven fenced.
    NotFenced,
    /// The owner's health is lost but automatic failover is off: an operator decides.
    FailoverHeld,
    /// A transition stopped and waits for an operator (retry, abort, confirm fenced).
    Halted,
    /// A binding of the site (`service` for the service bindings) is bound to a capability
    /// that cannot work: its controller's latest test graded it failed.
    CapabilityFailed,
}

impl AlarmKind {
    fn as_str(self) -> &'static str {
        match self {
            AlarmKind::NotFenced => "not_fenced",
            AlarmKind::FailoverHeld => "failover_held",
            AlarmKind::Halted => "halted",
            AlarmKind::CapabilityFailed => "capability_failed",
        }
    }
}

/// One plan as the leader's last decision judged it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanGauges {
    pub owner: String,
    pub generation: u64,
    /// `steady`, or the step of the transition under way (`fences`, `verify`, ...).
    pub phase: String,
    pub sites: Vec<SiteGauge>,
    pub alarms: Vec<(AlarmKind, String)>,
}

/// This orchestrator's place in the cluster, read at each scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct OrchestratorGauges {
    pub name: String,
    pub leader: bool,
    pub term: u64,
    /// How long the leader may still act without hearing from a quorum (zero unless leader).
    pub lease_remaining: Duration,
    /// The whole leader lease.
    pub lease: Duration,
}

/// Reads [`OrchestratorGauges`] when scraped.
pub type OrchestratorSource = Arc<dyn Fn() -> OrchestratorGauges + Send + Sync>;

/// The live gauges, encoded on each scrape.
#[derive(Default)]
pub(super) struct Live {
    plans: Mutex<BTreeMap<String, PlanGauges>>,
    orchestrator: Mutex<Option<OrchestratorSource>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Live {
    pub(super) fn set_plan(&self, plan: &str, mut g: PlanGauges) {
        let mut plans = lock(&self.plans);
        if let Some(old) = plans.get(plan) {
            for s in g.sites.iter_mut().filter(|s| s.fenced_at_ms.is_none()) {
                s.fenced_at_ms = old
                    .sites
                    .iter()
                    .find(|o| o.site == s.site)
                    .and_then(|o| o.fenced_at_ms);
            }
        }
        plans.insert(plan.to_owned(), g);
    }

    pub(super) fn retain_plans(&self, keep: &dyn Fn(&str) -> bool) {
        lock(&self.plans).retain(|p, _| keep(p));
    }

    pub(super) fn set_orchestrator(&self, source: OrchestratorSource) {
        *lock(&self.orchestrator) = Some(source);
    }
}

/// One gauge family: its descriptor, then a sample per label set (integers stay integers:
/// `1`, not `1.0`).
fn gauges<'a, L: EncodeLabelSet + 'a, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Live {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let source = lock(&self.orchestrator).clone();
        if let Some(o) = source.map(|f| f()) {
            let me = [("orchestrator", o.name.clone())];
            gauges(
                &mut e,
                "qfence_leader",
                "1 while this orchestrator leads the cluster",
                std::iter::once((me.clone(), i64::from(o.leader))),
            )?;
            gauges(
                &mut e,
                "qfence_term",
                "The cluster's current term, as this orchestrator knows it",
                std::iter::once((me.clone(), i64::try_from(o.term).unwrap_or(i64::MAX))),
            )?;
            gauges(
                &mut e,
                "qfence_lease_remaining_seconds",
                "How long the leader may still act without a quorum's acknowledgement (0 unless leader)",
                std::iter::once((me.clone(), o.lease_remaining.as_secs_f64())),
            )?;
            gauges(
                &mut e,
                "qfence_lease_seconds",
                "The leader lease: how long a leader acts on one quorum acknowledgement",
                std::iter::once((me, o.lease.as_secs_f64())),
            )?;
        }
        // Encoded from a copy: a scrape of 10,000 plans must not hold up the engine's updates.
        let plans = lock(&self.plans).clone();
        gauges(
            &mut e,
            "qfence_plan_generation",
            "Each plan's generation, labelled with the site that owns it",
            plans.iter().map(|(p, g)| {
                (
                    [("plan", p.as_str()), ("owner", g.owner.as_str())],
                    i64::try_from(g.generation).unwrap_or(i64::MAX),
                )
            }),
        )?;
        gauges(
            &mut e,
            "qfence_plan_phase",
            "1 for each plan's phase: steady, or the step of its transition",
            plans
                .iter()
                .map(|(p, g)| ([("plan", p.as_str()), ("phase", g.phase.as_str())], 1_i64)),
        )?;
        gauges(
            &mut e,
            "qfence_plan_site_verdict",
            "1 for each site's verdict (FENCED, FAILED, UNKNOWN) and role (owner, standby, maintenance)",
            plans.iter().flat_map(|(p, g)| {
                g.sites.iter().map(move |s| {
                    (
                        [
                            ("plan", p.as_str()),
                            ("site", s.site.as_str()),
                            ("role", s.role.as_str()),
                            ("verdict", s.verdict.as_str()),
                        ],
                        1_i64,
                    )
                })
            }),
        )?;
        gauges(
            &mut e,
            "qfence_plan_site_fenced_timestamp_seconds",
            "When each site other than the owner was last proven fenced by a read-back (Unix time)",
            plans.iter().flat_map(|(p, g)| {
                g.sites
                    .iter()
                    .filter(|s| s.role != SiteRole::Owner)
                    .filter_map(move |s| {
                        s.fenced_at_ms.map(|ms| {
                            (
                                [("plan", p.as_str()), ("site", s.site.as_str())],
                                ms as f64 / 1000.0,
                            )
                        })
                    })
            }),
        )?;
        gauges(
            &mut e,
            "qfence_plan_alarm",
            "1 for each alarm raised on a plan (not_fenced, failover_held, halted, capability_failed), while raised",
            plans.iter().flat_map(|(p, g)| {
                g.alarms.iter().map(move |(kind, site)| {
                    (
                        [
                            ("plan", p.as_str()),
                            ("site", site.as_str()),
                            ("kind", kind.as_str()),
                        ],
                        1_i64,
                    )
                })
            }),
        )?;
        Ok(())
    }
}
