//! `plans:`: a plan's sites, owner, priority and timings, and the checks of the plan as a
//! whole; its bindings are in [`super::bindings`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::read::Fields;
use super::{Decoder, child, index, list_names, secs};
use crate::config::tree::{Node, Value};
use crate::config::{Binding, ControllerConfig, PlanConfig, RejoinPolicy, StandbyPosture, keys};
use crate::domain::Role;
use crate::ids::{ControllerId, PlanId, SiteId};

impl Decoder {
    pub(super) fn plans(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<BTreeMap<PlanId, PlanConfig>> {
        let entries = self.named(node, path, "plans");
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            match (PlanId::new(name.clone()), self.plan(n, &p, controllers)) {
                (Ok(id), Some(plan)) => {
                    out.insert(id, plan);
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn plan(
        &mut self,
        node: &Node,
        path: &str,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<PlanConfig> {
        let f = self.fields(node, path, keys::PLAN)?;
        // The plan's sites come first: owner, priority and vip.own params are checked
        // against them.
        let sites = self.plan_sites(&f);
        let owner = self.owner(&f, &sites);
        let priority = self.opt(&f, "priority", Vec::new(), |d, n, p| {
            d.priority(n, p, &sites)
        });
        let timings = self.timings(&f);
        let max_retries = self.opt(&f, "max_retries", 2, Self::count);
        let definitive = self.definitive(&f);
        let unfence_on_promote = self.opt(&f, "unfence_on_promote", false, Self::boolean);
        let auto_failover = self.opt(&f, "auto_failover", true, Self::boolean);
        let postures = [
            (StandbyPosture::Cold.as_str(), StandbyPosture::Cold),
            (StandbyPosture::Hot.as_str(), StandbyPosture::Hot),
        ];
        let standby = self.opt(&f, "standby", StandbyPosture::Cold, |d, n, p| {
            d.word(n, p, "standby posture", &postures)
        });
        let policies = [
            (RejoinPolicy::Manual.as_str(), RejoinPolicy::Manual),
            (RejoinPolicy::Auto.as_str(), RejoinPolicy::Auto),
        ];
        let rejoin = self.opt(&f, "rejoin", RejoinPolicy::Manual, |d, n, p| {
            d.word(n, p, "rejoin policy", &policies)
        });

        let mut instances = BTreeMap::new();
        let mut bindings_ok = true;
        for (name, n) in &sites.entries {
            let sp = child(&f.path("instances"), name);
            let Ok(site) = SiteId::new(name.clone()) else {
                continue;
            };
            match self.bindings(n, &sp, Some(&site), &sites.ids, controllers) {
                Some(b) => {
                    instances.insert(site, b);
                }
                None => bindings_ok = false,
            }
        }
        let service = match f.get("service") {
            None => Some(Vec::new()),
            Some(n) => self.bindings(n, &f.path("service"), None, &sites.ids, controllers),
        };

        if let Some(timing) = timings.known() {
            self.check_timing(path, timing);
        }
        let plan = PlanConfig {
            owner: owner?,
            priority: priority?,
            interval: timings.interval?,
            freshness: timings.freshness?,
            recovery_after: timings.recovery_after?,
            max_recoveries: timings.max_recoveries?,
            failover_after: timings.failover_after?,
            fence_timeout: timings.fence_timeout?,
            failover_after_definitive: definitive?,
            max_retries: max_retries?,
            unfence_on_promote: unfence_on_promote?,
            auto_failover: auto_failover?,
            standby: standby?,
            rejoin: rejoin?,
            instances,
            service: service?,
        };
        if !(bindings_ok && sites.ok) {
            return None;
        }
        self.check_plan(path, &plan, controllers);
        Some(plan)
    }

    /// The sites named under `instances:`, each checked to be a declared, non-witness site.
    fn plan_sites<'a>(&mut self, f: &Fields<'a>) -> PlanSites<'a> {
        let inst_path = f.path("instances");
        let entries = match self.require(f, "instances", "each site's instance") {
            Some(n) => self.named(n, &inst_path, "instances"),
            None => Vec::new(),
        };
        let mut ids: Vec<SiteId> = Vec::new();
        let mut ok = true;
        for (name, n) in &entries {
            let sp = child(&inst_path, name);
            let key = Node {
                value: Value::Str(name.clone()),
                line: n.line,
            };
            match self.site_ref(&key, &sp, false, "holds no plan instances") {
                Some(s) => ids.push(s),
                None => ok = false,
            }
        }
        if f.get("instances").is_some() && ok && ids.len() < 2 {
            self.error(
                &inst_path,
                format!(
                    "a plan needs instances at two sites or more to fail over between; found {}: {}",
                    ids.len(),
                    list_names(ids.iter().map(SiteId::as_str))
                ),
            );
        }
        let names = list_names(ids.iter().map(SiteId::as_str));
        PlanSites {
            entries,
            ids,
            ok,
            names,
        }
    }

    fn owner(&mut self, f: &Fields<'_>, sites: &PlanSites<'_>) -> Option<SiteId> {
        let n = self.require(f, "owner", "the site that owns the plan at first")?;
        let p = f.path("owner");
        let s: SiteId = self.name(n, &p, "a site name")?;
        if sites.ids.contains(&s) || !sites.ok {
            Some(s)
        } else {
            self.error(
                &p,
                format!("\"{s}\" is not one of the plan's sites: {}", sites.names),
            );
            None
        }
    }

    fn priority(&mut self, n: &Node, p: &str, sites: &PlanSites<'_>) -> Option<Vec<SiteId>> {
        let items = self.list(n, p, "site names");
        let mut out: Vec<SiteId> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = index(p, i);
            let Some(s) = self.name::<SiteId>(item, &ip, "a site name") else {
                ok = false;
                continue;
            };
            if !sites.ids.contains(&s) {
                self.error(
                    &ip,
                    format!("\"{s}\" is not one of the plan's sites: {}", sites.names),
                );
                ok = false;
            } else if out.contains(&s) {
                self.error(&ip, format!("\"{s}\" is listed twice"));
                ok = false;
            } else {
                out.push(s);
            }
        }
        ok.then_some(out)
    }

    /// `failover_after_definitive`: absent (off), or a count of at least 1.
    fn definitive(&mut self, f: &Fields<'_>) -> Option<Option<u32>> {
        let Some(n) = f.get("failover_after_definitive") else {
            return Some(None);
        };
        let path = f.path("failover_after_definitive");
        match self.count(n, &path)? {
            0 => {
                self.error(
                    &path,
                    "failover_after_definitive must be at least 1 (leave it out to wait \
                     failover_after_seconds for every reading)",
                );
                None
            }
            c => Some(Some(c)),
        }
    }

    /// The timings; those left out are the defaults, scaled up with an interval longer than
    /// the default one (see `config::DEFAULT_INTERVAL`), so a plan that only slows its checks
    /// down keeps their relations, and one that only speeds them up keeps its windows.
    fn timings(&mut self, f: &Fields<'_>) -> Timings {
        let interval = self.opt(
            f,
            "interval_seconds",
            crate::config::DEFAULT_INTERVAL,
            Self::seconds,
        );
        let base = interval.map(|i| i.max(crate::config::DEFAULT_INTERVAL));
        let scaled = |d: &mut Self, key: &str, times: u32| match f.get(key) {
            Some(n) => d.seconds(n, &f.path(key)),
            None => base.map(|i| i * times),
        };
        let recovery_after = scaled(self, "recovery_after_seconds", 2);
        let max_recoveries = self.opt(f, "max_recoveries", 1, Self::count);
        let failover_after = scaled(self, "failover_after_seconds", 4);
        let fence_timeout = scaled(self, "fence_timeout_seconds", 3);
        // Three intervals, and never less than a read-back may take plus the tick that
        // judges it (see `check_timing`).
        let freshness = match f.get("freshness_seconds") {
            Some(n) => self.seconds(n, &f.path("freshness_seconds")),
            None => interval
                .zip(fence_timeout)
                .map(|(i, fence)| (i * 3).max(fence + i)),
        };
        Timings {
            interval,
            freshness,
            freshness_given: f.get("freshness_seconds").is_some(),
            recovery_after,
            max_recoveries,
            failover_after,
            fence_timeout,
        }
    }

    fn check_timing(&mut self, path: &str, p: Timing) {
        if p.freshness_given && p.freshness < p.interval {
            self.error(
                &child(path, "freshness_seconds"),
                format!(
                    "freshness_seconds ({}) must be at least interval_seconds ({}): every \
                     observation would be stale before the next one is made",
                    secs(p.freshness),
                    secs(p.interval)
                ),
            );
        }
        // Readings are stamped when their call starts, and a read-back is waited for up to
        // the fence timeout, then judged at the next tick: a shorter freshness would find a
        // read-back that answered in time already stale, and a move under load would read
        // its fences back again and again without ever going on.
        if p.freshness_given
            && p.freshness >= p.interval
            && p.freshness < p.fence_timeout + p.interval
        {
            self.error(
                &child(path, "freshness_seconds"),
                format!(
                    "freshness_seconds ({}) must be at least fence_timeout_seconds plus \
                     interval_seconds ({}): a read-back that answers within the fence timeout \
                     would be stale when it is judged",
                    secs(p.freshness),
                    secs(p.fence_timeout + p.interval)
                ),
            );
        }
        if p.interval >= p.failover_after {
            self.error(
                &child(path, "interval_seconds"),
                format!(
                    "interval_seconds ({}) must be less than failover_after_seconds ({})",
                    secs(p.interval),
                    secs(p.failover_after)
                ),
            );
        }
        if p.fence_timeout >= p.failover_after {
            self.error(
                &child(path, "fence_timeout_seconds"),
                format!(
                    "fence_timeout_seconds ({}) must be less than failover_after_seconds ({})",
                    secs(p.fence_timeout),
                    secs(p.failover_after)
                ),
            );
        }
        if p.max_recoveries > 0 && p.recovery_after >= p.failover_after {
            self.error(
                &child(path, "recovery_after_seconds"),
                format!(
                    "recovery_after_seconds ({}) must be less than failover_after_seconds ({}), \
                     or a restart in place never runs before a failover (set max_recoveries: 0 \
                     to go straight to failover)",
                    secs(p.recovery_after),
                    secs(p.failover_after)
                ),
            );
        }
    }

    /// Checks that need the whole plan with its bindings decoded.
    fn check_plan(
        &mut self,
        path: &str,
        plan: &PlanConfig,
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) {
        self.check_standby(path, plan);
        self.check_rejoin(path, plan);
        for (site, bindings) in &plan.instances {
            let sp = child(&child(path, "instances"), site.as_str());
            let required: Vec<&Binding> = bindings
                .iter()
                .filter(|b| b.role == Role::Fence && b.required)
                .collect();
            if required.is_empty() {
                self.warn(
                    &sp,
                    format!(
                        "no required fence: qfence can never prove {site} stopped, so it never \
                         fails the plan over away from {site} on its own"
                    ),
                );
            } else if required.iter().all(|b| {
                controllers
                    .get(&b.controller)
                    .is_some_and(|c| c.allowed_sites().all(|s| s == site))
            }) {
                let names = list_names(required.iter().map(|b| b.controller.as_str()));
                self.warn(
                    &sp,
                    format!(
                        "every required fence of {site} is called only from {site} ({names}): if \
                         {site} is lost, nothing can prove it fenced; give one of them a reach"
                    ),
                );
            }
            if !bindings.iter().any(|b| b.role == Role::Switchover) {
                self.warn(
                    &sp,
                    format!(
                        "no switchover binding: a failover to {site} cannot promote anything there"
                    ),
                );
            }
        }
        // A dead-man switch is renewed once an interval; a renewal that fails, a drain or a
        // leader's hand-over can cost one more. Below three intervals a routine restart of
        // the orchestrators could let the owner's own watchdog power it off.
        for (site, bindings) in &plan.instances {
            let sp = child(&child(path, "instances"), site.as_str());
            for (i, b) in bindings.iter().enumerate() {
                let countdown = b
                    .params
                    .get("timeout_seconds")
                    .and_then(|t| t.parse::<f64>().ok())
                    .filter(|t| t.is_finite());
                let Some(countdown) = countdown.filter(|_| b.role == Role::DeadMan) else {
                    continue;
                };
                let floor = 3.0 * plan.interval.as_secs_f64();
                if countdown < floor {
                    self.error(
                        &child(&child(&index(&sp, i), "params"), "timeout_seconds"),
                        format!(
                            "the dead-man countdown ({countdown} s) must be at least three \
                             intervals (3 x interval_seconds = {floor} s): it is renewed once an \
                             interval, and a failed renewal, a drain or a leader's hand-over may \
                             skip one without the owner being lost"
                        ),
                    );
                }
            }
        }
        // A controller's own call deadline must fit inside the plan's fence deadline.
        let mut reported = BTreeSet::new();
        for b in plan.instances.values().flatten() {
            if b.role != Role::Fence || !reported.insert(b.controller.clone()) {
                continue;
            }
            if let Some(c) = controllers.get(&b.controller)
                && c.timeout >= plan.fence_timeout
            {
                self.error(
                    &child(path, "fence_timeout_seconds"),
                    format!(
                        "fence_timeout_seconds ({}) must be more than the timeout_seconds ({}) \
                         of controller {:?}, which fences for this plan",
                        secs(plan.fence_timeout),
                        secs(c.timeout),
                        b.controller.as_str()
                    ),
                );
            }
        }
    }
}

/// A plan's sites, from the keys of its `instances:`.
struct PlanSites<'a> {
    /// Each site's name and its instance's bindings, in file order.
    entries: Vec<(String, &'a Node)>,
    /// The sites that are declared and may hold an instance.
    ids: Vec<SiteId>,
    /// Whether every name was such a site.
    ok: bool,
    /// `ids` listed for messages.
    names: String,
}

/// A plan's timings as read; `None` where a value was refused.
struct Timings {
    interval: Option<Duration>,
    freshness: Option<Duration>,
    freshness_given: bool,
    recovery_after: Option<Duration>,
    max_recoveries: Option<u32>,
    failover_after: Option<Duration>,
    fence_timeout: Option<Duration>,
}

impl Timings {
    /// The timings, when every one of them was read.
    fn known(&self) -> Option<Timing> {
        Some(Timing {
            interval: self.interval?,
            freshness: self.freshness?,
            freshness_given: self.freshness_given,
            recovery_after: self.recovery_after?,
            max_recoveries: self.max_recoveries?,
            failover_after: self.failover_after?,
            fence_timeout: self.fence_timeout?,
        })
    }
}

/// A plan's timings, for the checks of how they relate.
struct Timing {
    interval: Duration,
    freshness: Duration,
    freshness_given: bool,
    recovery_after: Duration,
    max_recoveries: u32,
    failover_after: Duration,
    fence_timeout: Duration,
}

impl Decoder {
    /// A hot plan's standbys are judged by their `standby` bindings, so every site needs one
    /// (it is a standby whenever another site owns the plan); a cold plan never reads them,
    /// and a binding nobody reads is a mistake.
    fn check_standby(&mut self, path: &str, plan: &PlanConfig) {
        for (site, bindings) in &plan.instances {
            let has = bindings.iter().any(|b| b.role == Role::Standby);
            match plan.standby {
                StandbyPosture::Hot if !has => self.error(
                    &child(&child(path, "instances"), site.as_str()),
                    format!(
                        "standby: hot needs a standby binding at every site (db.standby): \
                         without one nothing shows {site} safe as a standby"
                    ),
                ),
                StandbyPosture::Cold if has => self.error(
                    &child(path, "standby"),
                    format!(
                        "{site} has a standby binding, which only a plan with standby: hot \
                         reads: set standby: hot, or remove the binding"
                    ),
                ),
                _ => {}
            }
        }
    }

    /// `rejoin: auto` acts through the old owner's `rejoin` bindings: a plan with none would
    /// say it rejoins and never could.
    fn check_rejoin(&mut self, path: &str, plan: &PlanConfig) {
        let any = plan
            .instances
            .values()
            .flatten()
            .any(|b| b.role == Role::Rejoin);
        if plan.rejoin == RejoinPolicy::Auto && !any {
            self.error(
                &child(path, "rejoin"),
                "auto rejoins a failover's old owner through its rejoin bindings (db.rejoin), \
                 and no site has one: bind db.rejoin with role rejoin, or set rejoin: manual",
            );
        }
    }
}
