//! The gates between a failed host and its fence or its evacuation, each documented as
//! fail-open (when it cannot judge, it lets the action through) or fail-closed (it stops it).
//! `docs/specs/instance-ha.md` has the table; [`GateKind::ALL`] is its order.
//!
//! The cloud-wide and per-domain gates are computed once per decision ([`Gates::compute`]);
//! the per-host ones (already processed, fence binding, kdump, per-cycle cap, fence proof) are
//! checked where the host's step is decided.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use qfence_model::SiteId;
use qfence_model::config::{CloudConfig, HostName};
use serde::{Deserialize, Serialize};

use super::Mutation;
use super::snapshot::{ComputeService, NovaView, ServiceState, ServiceStatus, Snapshot};
use super::state::CloudState;
use super::types::DisableReason;
use crate::types::Millis;

/// Every gate, in the order they are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateKind {
    /// Leader with a valid lease.
    Leadership,
    /// Nova answered the last poll, recently enough, and the cluster has its quorum.
    Observer,
    /// `disabled: true`.
    Disabled,
    /// Every compute service stale at once: Nova's own reporting is broken.
    AllStale,
    /// Most hosts up at the poll before failed at once: the network, not the hosts.
    HeartbeatCliff,
    /// A host with an incident is driven by its record, never taken on again.
    Processing,
    /// Hosts without evacuable instances (by tags) are ignored.
    Eligibility,
    /// Hosts disabled by someone else are ignored.
    OperatorDisabled,
    /// The cloud's failed percentage above `threshold_percent`.
    Threshold,
    /// A site lost as a whole: left to site failover.
    SiteLost,
    /// A site's failed percentage above `threshold_percent` (hosts spanning sites).
    SiteThreshold,
    /// More failed hosts in an aggregate than its limit.
    AggregateLimit,
    /// No nova-scheduler up: nothing could place the servers.
    Scheduler,
    /// `max_hosts_per_cycle` fences started in this poll.
    PerCycleCap,
    /// The host has no fence binding.
    FenceBinding,
    /// `check_kdump`: the host may be dumping its kernel.
    Kdump,
    /// A server is evacuated only from a host whose fence reads back off, fresh.
    FenceProof,
}

/// What a gate does when it cannot judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailMode {
    /// Lets the action through.
    Open,
    /// Stops it.
    Closed,
}

impl GateKind {
    pub const ALL: [GateKind; 17] = [
        GateKind::Leadership,
        GateKind::Observer,
        GateKind::Disabled,
        GateKind::AllStale,
        GateKind::HeartbeatCliff,
        GateKind::Processing,
        GateKind::Eligibility,
        GateKind::OperatorDisabled,
        GateKind::Threshold,
        GateKind::SiteLost,
        GateKind::SiteThreshold,
        GateKind::AggregateLimit,
        GateKind::Scheduler,
        GateKind::PerCycleCap,
        GateKind::FenceBinding,
        GateKind::Kdump,
        GateKind::FenceProof,
    ];

    /// Its name, as in the spec's table and the events.
    pub fn name(self) -> &'static str {
        match self {
            GateKind::Leadership => "leadership",
            GateKind::Observer => "observer health",
            GateKind::Disabled => "disabled",
            GateKind::AllStale => "all services stale",
            GateKind::HeartbeatCliff => "heartbeat cliff",
            GateKind::Processing => "already being processed",
            GateKind::Eligibility => "evacuable filter",
            GateKind::OperatorDisabled => "disabled by an operator",
            GateKind::Threshold => "threshold",
            GateKind::SiteLost => "site lost",
            GateKind::SiteThreshold => "site threshold",
            GateKind::AggregateLimit => "aggregate limit",
            GateKind::Scheduler => "scheduler up",
            GateKind::PerCycleCap => "per-cycle cap",
            GateKind::FenceBinding => "fence binding",
            GateKind::Kdump => "kdump",
            GateKind::FenceProof => "fence proof",
        }
    }

    /// Fail-open or fail-closed. Only two gates open when they cannot judge: the evacuable
    /// filter (nothing tagged means every host and server is evacuable, as in InstanceHA),
    /// and the kdump wait (a host that keeps sending messages is fenced after
    /// `kdump_max_wait_seconds`; its fence is still proven by read-back). The heartbeat cliff
    /// is fail-closed while it holds and expires after `heartbeat_cliff_cycles`.
    pub fn fail_mode(self) -> FailMode {
        match self {
            GateKind::Eligibility | GateKind::Kdump => FailMode::Open,
            _ => FailMode::Closed,
        }
    }
}

impl fmt::Display for GateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A closed gate announced (an event when it closes, another when it opens), with its scope:
/// empty for the cloud, else the site, aggregate or host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Trip {
    pub gate: GateKind,
    pub scope: String,
}

/// Why a host counts as failed (step 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FailWhy {
    /// Nova says `down`.
    Down { last: Option<Millis> },
    /// Enabled, `up`, but not updated for `delta_seconds` (as of the poll).
    Stale { last: Option<Millis> },
}

/// Whether an enabled compute service has failed, as of the poll that read it.
pub(crate) fn failure(c: &ComputeService, read_at: Millis, cloud: &CloudConfig) -> Option<FailWhy> {
    if c.status != ServiceStatus::Enabled {
        return None;
    }
    if c.state == ServiceState::Down {
        return Some(FailWhy::Down { last: c.updated_at });
    }
    let stale = c.updated_at.is_none_or(|u| read_at.since(u) > cloud.delta);
    stale.then_some(FailWhy::Stale { last: c.updated_at })
}

/// Whether a compute service was disabled by qfence.
pub(crate) fn disabled_by_us(c: &ComputeService) -> bool {
    c.status == ServiceStatus::Disabled
        && c.disabled_reason
            .as_deref()
            .is_some_and(DisableReason::is_ours)
}

/// A reserved host: disabled with a reason that says "reserved", not by qfence.
pub(crate) fn reserved_spare(c: &ComputeService) -> bool {
    c.status == ServiceStatus::Disabled
        && !disabled_by_us(c)
        && c.disabled_reason
            .as_deref()
            .is_some_and(|r| r.to_ascii_lowercase().contains("reserved"))
}

/// Whether its reports are recent, whatever Nova's state says (a forced-down host is `down`
/// even while it reports).
pub(crate) fn reports(c: &ComputeService, read_at: Millis, cloud: &CloudConfig) -> bool {
    c.updated_at
        .is_some_and(|u| read_at.since(u) <= cloud.delta)
}

/// Up and reporting: what the cliff compares poll to poll.
pub(crate) fn reporting(c: &ComputeService, read_at: Millis, cloud: &CloudConfig) -> bool {
    c.status == ServiceStatus::Enabled && failure(c, read_at, cloud).is_none()
}

/// A count of failed hosts against a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ratio {
    pub failed: usize,
    pub of: usize,
    /// Percent.
    pub limit: u32,
}

impl Ratio {
    pub fn over(&self) -> bool {
        self.of > 0 && self.failed * 100 > self.of * self.limit as usize
    }

    pub fn percent(&self) -> usize {
        (self.failed * 100).checked_div(self.of).unwrap_or(0)
    }
}

/// Who counts toward the thresholds, and who of them has failed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Census {
    /// Hosts that should be running: enabled, or disabled by qfence, or in an incident.
    /// Reserved hosts and hosts an operator disabled are not.
    pub population: BTreeSet<HostName>,
    /// Of those: failed now, forced down (from earlier cycles too), or in an incident.
    pub failed: BTreeSet<HostName>,
}

pub(crate) fn census(
    view: &NovaView,
    state: &CloudState,
    cloud: &CloudConfig,
    mutation: Mutation,
) -> Census {
    let mut c = Census::default();
    for svc in &view.computes {
        let ours = disabled_by_us(svc) || state.hosts.contains_key(&svc.host);
        if svc.status != ServiceStatus::Enabled && !ours {
            continue;
        }
        c.population.insert(svc.host.clone());
        let earlier = svc.forced_down || ours;
        // The planted bug: count only hosts failing now, as a threshold without memory would.
        let earlier = earlier && mutation != Mutation::ThresholdForgetsEarlierFailures;
        if earlier || failure(svc, view.read_at, cloud).is_some() {
            c.failed.insert(svc.host.clone());
        }
    }
    c
}

/// Why the observer cannot trust its view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blind {
    NovaUnreachable,
    ViewOld { read_at: Millis },
    NoQuorum,
}

/// A closed gate, as it stops a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Closed {
    Blind(Blind),
    Disabled,
    AllStale {
        of: usize,
    },
    Cliff {
        lost: usize,
        of: usize,
        until: Millis,
    },
    Threshold(Ratio),
    SiteLost {
        site: SiteId,
        by_cluster: bool,
    },
    Site {
        site: SiteId,
        ratio: Ratio,
    },
    Aggregate {
        name: String,
        failed: usize,
        max: u32,
    },
    NoScheduler,
}

impl Closed {
    pub fn kind(&self) -> GateKind {
        match self {
            Closed::Blind(_) => GateKind::Observer,
            Closed::Disabled => GateKind::Disabled,
            Closed::AllStale { .. } => GateKind::AllStale,
            Closed::Cliff { .. } => GateKind::HeartbeatCliff,
            Closed::Threshold(_) => GateKind::Threshold,
            Closed::SiteLost { .. } => GateKind::SiteLost,
            Closed::Site { .. } => GateKind::SiteThreshold,
            Closed::Aggregate { .. } => GateKind::AggregateLimit,
            Closed::NoScheduler => GateKind::Scheduler,
        }
    }

    pub fn trip(&self) -> Trip {
        let scope = match self {
            Closed::SiteLost { site, .. } | Closed::Site { site, .. } => site.to_string(),
            Closed::Aggregate { name, .. } => name.clone(),
            _ => String::new(),
        };
        Trip {
            gate: self.kind(),
            scope,
        }
    }
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Closed::Blind(Blind::NovaUnreachable) => {
                f.write_str("Nova did not answer the last poll, so qfence cannot trust its view")
            }
            Closed::Blind(Blind::ViewOld { read_at }) => write!(
                f,
                "Nova was last read at {read_at}, two polls ago or more, so qfence cannot trust \
                 its view"
            ),
            Closed::Blind(Blind::NoQuorum) => {
                f.write_str("the orchestrator cluster lost its quorum")
            }
            Closed::Disabled => f.write_str("Instance HA is disabled: failures are only recorded"),
            Closed::AllStale { of } => write!(
                f,
                "all {of} compute services are stale at once: Nova's own reporting is broken"
            ),
            Closed::Cliff { lost, of, until } => write!(
                f,
                "{lost} of the {of} hosts up at the poll before failed at once, a heartbeat cliff \
                 (the network, not the hosts), holding until {until}"
            ),
            Closed::Threshold(r) => write!(
                f,
                "{} of {} hosts failed ({} %), over the threshold of {} %",
                r.failed,
                r.of,
                r.percent(),
                r.limit
            ),
            Closed::SiteLost { site, by_cluster } => {
                if *by_cluster {
                    write!(f, "site {site} is lost to the orchestrator cluster")?;
                } else {
                    write!(f, "every host of site {site} failed")?;
                }
                f.write_str(": a site lost as a whole is its site failover's job")
            }
            Closed::Site { site, ratio } => write!(
                f,
                "{} of {} hosts of site {site} failed ({} %), over the threshold of {} %",
                ratio.failed,
                ratio.of,
                ratio.percent(),
                ratio.limit
            ),
            Closed::Aggregate { name, failed, max } => write!(
                f,
                "{failed} hosts of aggregate {name} failed, more than its limit of {max}"
            ),
            Closed::NoScheduler => f.write_str("no nova-scheduler is up to place the servers"),
        }
    }
}

/// The aggregate metadata key that limits failed hosts in it (InstanceHA's
/// `instanceha:max_failures`).
pub const AGGREGATE_MAX_FAILURES: &str = "qfence:max_failures";

/// The cloud-wide and per-domain gates of one decision.
#[derive(Debug, Clone)]
pub(crate) struct Gates {
    pub blind: Option<Blind>,
    pub disabled: bool,
    pub all_stale: Option<usize>,
    pub cliff: Option<Closed>,
    pub threshold: Ratio,
    /// Per site, only when the population spans sites.
    pub sites: BTreeMap<SiteId, Closed>,
    /// Aggregates over their limit, with their hosts.
    pub aggregates: Vec<(BTreeSet<HostName>, Closed)>,
    pub scheduler_up: bool,
    pub census: Census,
}

impl Gates {
    /// Every gate that does not depend on one host's own step.
    pub fn compute(
        s: &Snapshot<'_>,
        cloud: &CloudConfig,
        state: &CloudState,
        site_of: &BTreeMap<HostName, SiteId>,
        mutation: Mutation,
    ) -> Gates {
        let view = s.nova;
        let blind = if !s.observer.nova_reachable {
            Some(Blind::NovaUnreachable)
        } else if !s.observer.quorum {
            Some(Blind::NoQuorum)
        } else if s.now.since(view.read_at) >= cloud.poll * 2 {
            Some(Blind::ViewOld {
                read_at: view.read_at,
            })
        } else {
            None
        };
        let stale = view
            .computes
            .iter()
            .filter(|c| {
                c.updated_at
                    .is_none_or(|u| view.read_at.since(u) > cloud.delta)
            })
            .count();
        let all_stale = (view.computes.len() >= 2 && stale == view.computes.len())
            .then_some(view.computes.len());
        let cliff = state.cliff.as_ref().map(|c| Closed::Cliff {
            lost: c.lost,
            of: c.of,
            until: c.since.plus(cloud.poll * cloud.heartbeat_cliff_cycles),
        });
        let census = census(view, state, cloud, mutation);
        let threshold = Ratio {
            failed: census.failed.len(),
            of: census.population.len(),
            limit: cloud.threshold_percent,
        };
        let mut per_site: BTreeMap<&SiteId, (usize, usize)> = BTreeMap::new();
        for h in &census.population {
            if let Some(site) = site_of.get(h) {
                let e = per_site.entry(site).or_default();
                e.1 += 1;
                if census.failed.contains(h) {
                    e.0 += 1;
                }
            }
        }
        let mut sites = BTreeMap::new();
        let span = per_site.len() >= 2;
        for (site, (failed, of)) in per_site {
            let by_cluster = s.observer.lost_sites.contains(site);
            let ratio = Ratio {
                failed,
                of,
                limit: cloud.threshold_percent,
            };
            let closed = if by_cluster || (span && of > 0 && failed == of) {
                Some(Closed::SiteLost {
                    site: site.clone(),
                    by_cluster,
                })
            } else if span && ratio.over() {
                Some(Closed::Site {
                    site: site.clone(),
                    ratio,
                })
            } else {
                None
            };
            if let Some(c) = closed {
                sites.insert(site.clone(), c);
            }
        }
        let mut aggregates = Vec::new();
        for a in &view.aggregates {
            let max = a
                .metadata
                .get(AGGREGATE_MAX_FAILURES)
                .and_then(|v| v.trim().parse::<u32>().ok())
                .or(cloud.aggregate_max_failures);
            let Some(max) = max else { continue };
            let failed = a
                .hosts
                .iter()
                .filter(|h| census.failed.contains(*h))
                .count();
            if failed > max as usize {
                aggregates.push((
                    a.hosts.clone(),
                    Closed::Aggregate {
                        name: a.name.clone(),
                        failed,
                        max,
                    },
                ));
            }
        }
        let scheduler_up = view
            .schedulers
            .iter()
            .any(|s| s.state == ServiceState::Up && s.status == ServiceStatus::Enabled);
        Gates {
            blind,
            disabled: cloud.disabled,
            all_stale,
            cliff,
            threshold,
            sites,
            aggregates,
            scheduler_up,
            census,
        }
    }

    /// The first closed gate that stops fencing (or evacuating) `host`, if any.
    pub fn closed_for(&self, host: &HostName, site: Option<&SiteId>) -> Option<Closed> {
        if let Some(b) = &self.blind {
            return Some(Closed::Blind(b.clone()));
        }
        if self.disabled {
            return Some(Closed::Disabled);
        }
        if let Some(of) = self.all_stale {
            return Some(Closed::AllStale { of });
        }
        if let Some(c) = &self.cliff {
            return Some(c.clone());
        }
        if self.threshold.over() {
            return Some(Closed::Threshold(self.threshold.clone()));
        }
        if let Some(c) = site.and_then(|s| self.sites.get(s)) {
            return Some(c.clone());
        }
        if let Some((_, c)) = self.aggregates.iter().find(|(h, _)| h.contains(host)) {
            return Some(c.clone());
        }
        if !self.scheduler_up {
            return Some(Closed::NoScheduler);
        }
        None
    }

    /// Every closed gate, for the events.
    pub fn all_closed(&self) -> Vec<Closed> {
        let mut v = Vec::new();
        if let Some(b) = &self.blind {
            v.push(Closed::Blind(b.clone()));
        }
        if self.disabled {
            v.push(Closed::Disabled);
        }
        if let Some(of) = self.all_stale {
            v.push(Closed::AllStale { of });
        }
        v.extend(self.cliff.clone());
        if self.threshold.over() {
            v.push(Closed::Threshold(self.threshold.clone()));
        }
        v.extend(self.sites.values().cloned());
        v.extend(self.aggregates.iter().map(|(_, c)| c.clone()));
        if !self.scheduler_up {
            v.push(Closed::NoScheduler);
        }
        v
    }
}
