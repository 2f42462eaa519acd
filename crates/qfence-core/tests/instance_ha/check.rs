//! The checker of the Instance HA simulation. It does not reuse the core's rules: it judges
//! from the raw snapshot each decision saw (fence readings with their times, the view of
//! Nova), from the commands issued before, and from the world's own record (which migrations
//! really failed, which servers really left a host).

use std::collections::{BTreeMap, BTreeSet};

use qfence_core::instance_ha::{
    Action, CloudState, Decision, DisableReason, MigrationStatus, ServerId, ServiceState,
    ServiceStatus,
};
use qfence_core::{Leadership, Millis, Observed, Outcome};
use qfence_model::SiteId;
use qfence_model::config::HostName;

use crate::world::Run;

/// The named safety invariants of Instance HA (`docs/specs/instance-ha.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// (g) A server is evacuated only from a host whose fence reads back off, fresh, read
    /// after the host's latest fence command.
    EvacuateOnlyFenced,
    /// (h) A host proven fenced is never fenced again in the same incident.
    FencedOnce,
    /// (i) No more hosts get a fence command in one poll cycle than `max_hosts_per_cycle`.
    CapPerCycle,
    /// (j) Nothing is fenced or evacuated while a gate is closed: observer unhealthy,
    /// `disabled`, all services stale, no scheduler up, over the threshold (counting hosts
    /// forced down earlier), a site lost or over its threshold, an aggregate over its limit.
    GatesHold,
    /// (k) A host is re-enabled only after its evacuations succeeded, unless `force_enable`
    /// allows, and never after smart evacuation gave up on one of its servers.
    EnableAfterEvacuation,
    /// (l) Commands carry the current term, only under a valid lease; a deposed leader's
    /// write is refused.
    CurrentTermOnly,
}

impl Invariant {
    pub const ALL: [Invariant; 6] = [
        Invariant::EvacuateOnlyFenced,
        Invariant::FencedOnce,
        Invariant::CapPerCycle,
        Invariant::GatesHold,
        Invariant::EnableAfterEvacuation,
        Invariant::CurrentTermOnly,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::EvacuateOnlyFenced => "(g) evacuate only from a host proven fenced",
            Invariant::FencedOnce => "(h) never fenced twice in one incident",
            Invariant::CapPerCycle => "(i) at most max_hosts_per_cycle fences a cycle",
            Invariant::GatesHold => "(j) nothing fenced or evacuated through a closed gate",
            Invariant::EnableAfterEvacuation => "(k) re-enabled only after its evacuations",
            Invariant::CurrentTermOnly => "(l) current term only",
        }
    }

    pub fn test_name(self) -> &'static str {
        match self {
            Invariant::EvacuateOnlyFenced => "invariant_g_evacuate_only_from_a_host_proven_fenced",
            Invariant::FencedOnce => "invariant_h_never_fenced_twice_in_one_incident",
            Invariant::CapPerCycle => "invariant_i_at_most_the_cap_of_fences_a_cycle",
            Invariant::GatesHold => "invariant_j_nothing_through_a_closed_gate",
            Invariant::EnableAfterEvacuation => "invariant_k_re_enabled_only_after_its_evacuations",
            Invariant::CurrentTermOnly => "invariant_l_current_term_only",
        }
    }

    pub fn seed_base(self) -> u64 {
        match self {
            Invariant::EvacuateOnlyFenced => 0x16A0_0000,
            Invariant::FencedOnce => 0x16B0_0000,
            Invariant::CapPerCycle => 0x16C0_0000,
            Invariant::GatesHold => 0x16D0_0000,
            Invariant::EnableAfterEvacuation => 0x16E0_0000,
            Invariant::CurrentTermOnly => 0x16F0_0000,
        }
    }
}

/// A broken invariant, with where and how.
#[derive(Debug, Clone)]
pub struct Violation {
    pub seed: u64,
    pub step: usize,
    pub invariant: Invariant,
    pub detail: String,
    pub trace: Vec<String>,
}

/// What the checker remembers between decisions.
pub struct Checker {
    seed: u64,
    check: Vec<Invariant>,
    pub trace: Vec<String>,
    /// When each host's latest fence command was issued.
    last_fence: BTreeMap<HostName, Millis>,
    /// Hosts proven fenced (a reading that holds, taken after their latest fence command),
    /// until qfence powers them on or Nova shows them back in service.
    proven: BTreeMap<HostName, Millis>,
    /// When each host's proof was last ended (a power-on, back in service): readings from
    /// before prove nothing more.
    cleared: BTreeMap<HostName, Millis>,
    /// When each host's latest incident's proof came: evacuations count from then.
    incident: BTreeMap<HostName, Millis>,
    /// Servers evacuate commands were issued for, by host, in its latest incident.
    requested: BTreeMap<HostName, BTreeSet<ServerId>>,
    /// Evacuate requests refused, and each one's latest outcome, in the incident.
    refused: BTreeMap<(HostName, ServerId), u32>,
    last_outcome: BTreeMap<(HostName, ServerId), Outcome>,
    /// Hosts with a fence command, per poll (the view's read time).
    fenced_in_poll: BTreeMap<Millis, BTreeSet<HostName>>,
}

impl Checker {
    pub fn new(seed: u64, check: &[Invariant]) -> Self {
        Checker {
            seed,
            check: check.to_vec(),
            trace: Vec::new(),
            last_fence: BTreeMap::new(),
            proven: BTreeMap::new(),
            cleared: BTreeMap::new(),
            incident: BTreeMap::new(),
            requested: BTreeMap::new(),
            refused: BTreeMap::new(),
            last_outcome: BTreeMap::new(),
            fenced_in_poll: BTreeMap::new(),
        }
    }

    fn on(&self, i: Invariant) -> bool {
        self.check.contains(&i)
    }

    pub fn violation(&self, step: usize, invariant: Invariant, detail: String) -> Violation {
        Violation {
            seed: self.seed,
            step,
            invariant,
            detail,
            trace: self.trace.clone(),
        }
    }

    /// The executor's answers since `from`: evacuations refused, and their outcomes.
    pub fn executed(&mut self, run: &Run, from: usize) {
        for (cmd, outcome, _) in &run.executed[from..] {
            if let Action::Evacuate { server, from, .. } = &cmd.action {
                let k = (from.clone(), server.clone());
                if *outcome == Outcome::Failed {
                    *self.refused.entry(k.clone()).or_default() += 1;
                }
                self.last_outcome.insert(k, *outcome);
            }
        }
    }

    /// Checks one decision, made on `before` with `leadership`, against the run's snapshot.
    /// `after` is the state the cluster accepted (the leader's), `None` for a deposed leader.
    pub fn decision(
        &mut self,
        step: usize,
        run: &Run,
        before: &CloudState,
        leadership: Leadership,
        d: &Decision,
        after: Option<&CloudState>,
    ) -> Result<(), Violation> {
        let _ = before;
        let now = run.now();
        if self.on(Invariant::CurrentTermOnly) {
            let valid = leadership.valid_at(now);
            if !valid && d.state_change.is_some() {
                return Err(self.violation(
                    step,
                    Invariant::CurrentTermOnly,
                    "a write without a valid lease".into(),
                ));
            }
            for c in &d.commands {
                if !valid || c.term != leadership.term || c.term != run.term {
                    return Err(self.violation(
                        step,
                        Invariant::CurrentTermOnly,
                        format!("{c} issued with {leadership:?}, current term {}", run.term),
                    ));
                }
            }
        }
        if after.is_none() {
            return Ok(());
        }
        // Only a leader that may decide takes in what its snapshot shows.
        if leadership.valid_at(now) {
            self.observe(run);
        }
        for c in &d.commands {
            match &c.action {
                Action::Fence { host, .. } => {
                    if self.on(Invariant::FencedOnce)
                        && let Some(at) = self.proven.get(host)
                    {
                        return Err(self.violation(
                            step,
                            Invariant::FencedOnce,
                            format!("{c}: {host} was proven fenced at {at} in this incident"),
                        ));
                    }
                    let poll = self.fenced_in_poll.entry(run.view.read_at).or_default();
                    poll.insert(host.clone());
                    let hosts = poll.clone();
                    let cap = cloud(run).max_hosts_per_cycle as usize;
                    if self.on(Invariant::CapPerCycle) && hosts.len() > cap {
                        return Err(self.violation(
                            step,
                            Invariant::CapPerCycle,
                            format!(
                                "{hosts:?} fenced in the poll of {} (cap {cap})",
                                run.view.read_at
                            ),
                        ));
                    }
                    self.gates(step, run, host, &c.to_string())?;
                }
                Action::Evacuate { server, from, .. } => {
                    self.fenced(step, run, from, &c.to_string())?;
                    self.gates(step, run, from, &c.to_string())?;
                    self.requested
                        .entry(from.clone())
                        .or_default()
                        .insert(server.clone());
                }
                Action::Enable { host } => self.enable(step, run, host, &c.to_string())?,
                _ => {}
            }
        }
        for c in &d.commands {
            match &c.action {
                Action::Fence { host, .. } => {
                    self.last_fence.insert(host.clone(), now);
                }
                Action::PowerOn { host, .. } => {
                    self.proven.remove(host);
                    self.cleared.insert(host.clone(), now);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What the snapshot proves: hosts read off after their latest fence command; hosts Nova
    /// shows back in service.
    fn observe(&mut self, run: &Run) {
        for (h, o) in &run.fences {
            let after_fence = self.last_fence.get(h).is_some_and(|t| o.at >= *t)
                && self.cleared.get(h).is_none_or(|t| o.at > *t);
            if o.value == Observed::Holds && after_fence && !self.proven.contains_key(h) {
                self.proven.insert(h.clone(), o.at);
                if self.incident.get(h).is_none_or(|t| *t < self.last_fence[h]) {
                    self.incident.insert(h.clone(), o.at);
                    self.requested.remove(h);
                    self.refused.retain(|(host, _), _| host != h);
                    self.last_outcome.retain(|(host, _), _| host != h);
                }
            }
        }
        let delta = cloud(run).delta;
        let view = &run.view;
        for c in &view.computes {
            let back = c.status == ServiceStatus::Enabled
                && !c.forced_down
                && c.state == ServiceState::Up
                && c.updated_at.is_some_and(|u| view.read_at.since(u) <= delta);
            if back && self.proven.get(&c.host).is_some_and(|t| view.read_at > *t) {
                self.proven.remove(&c.host);
                self.cleared.insert(c.host.clone(), view.read_at);
            }
        }
    }

    /// (g): the host's latest reading holds, is fresh (two polls), and was taken after its
    /// latest fence command.
    fn fenced(&self, step: usize, run: &Run, host: &HostName, what: &str) -> Result<(), Violation> {
        if !self.on(Invariant::EvacuateOnlyFenced) {
            return Ok(());
        }
        let poll = cloud(run).poll;
        let o = run.fences.get(host);
        let ok = o.is_some_and(|o| {
            o.value == Observed::Holds
                && run.now().since(o.at) <= poll * 2
                && self.last_fence.get(host).is_some_and(|t| o.at >= *t)
        });
        if ok {
            return Ok(());
        }
        Err(self.violation(
            step,
            Invariant::EvacuateOnlyFenced,
            format!(
                "{what}: {host} not proven fenced (reading {:?}, last fence command {:?})",
                o.map(|o| (o.value, o.at)),
                self.last_fence.get(host)
            ),
        ))
    }

    /// (j): recomputed from the view the decision saw.
    fn gates(&self, step: usize, run: &Run, host: &HostName, what: &str) -> Result<(), Violation> {
        if !self.on(Invariant::GatesHold) {
            return Ok(());
        }
        let config = run.current_config();
        let cloud = config.cloud("cloud").unwrap();
        let view = &run.view;
        let now = run.now();
        let stale = |c: &qfence_core::instance_ha::ComputeService| {
            c.updated_at
                .is_none_or(|u| view.read_at.since(u) > cloud.delta)
        };
        let mut closed = Vec::new();
        if !run.observer.nova_reachable
            || !run.observer.quorum
            || now.since(view.read_at) >= cloud.poll * 2
        {
            closed.push("observer".to_owned());
        }
        if cloud.disabled {
            closed.push("disabled".to_owned());
        }
        if view.computes.len() >= 2 && view.computes.iter().all(stale) {
            closed.push("all stale".to_owned());
        }
        if !view
            .schedulers
            .iter()
            .any(|s| s.state == ServiceState::Up && s.status == ServiceStatus::Enabled)
        {
            closed.push("no scheduler".to_owned());
        }
        // Who should be running, and who of them failed: hosts qfence disabled count, and
        // so do those forced down from earlier cycles.
        let ours = |c: &qfence_core::instance_ha::ComputeService| {
            c.status == ServiceStatus::Disabled
                && c.disabled_reason
                    .as_deref()
                    .is_some_and(DisableReason::is_ours)
        };
        let mut population: Vec<(&HostName, Option<SiteId>, bool)> = Vec::new();
        for c in &view.computes {
            if c.status != ServiceStatus::Enabled && !ours(c) {
                continue;
            }
            let failed = c.forced_down
                || ours(c)
                || (c.status == ServiceStatus::Enabled
                    && (c.state == ServiceState::Down || stale(c)));
            population.push((&c.host, config.host_site(cloud, &c.host), failed));
        }
        let over = |failed: usize, of: usize| {
            of > 0 && failed * 100 > of * cloud.threshold_percent as usize
        };
        let failed = population.iter().filter(|p| p.2).count();
        if over(failed, population.len()) {
            closed.push(format!("threshold: {failed} of {}", population.len()));
        }
        let sites: BTreeSet<&SiteId> = population.iter().filter_map(|p| p.1.as_ref()).collect();
        let site = config.host_site(cloud, host);
        if let Some(site) = &site {
            if run.observer.lost_sites.contains(site) {
                closed.push(format!("site {site} lost to the cluster"));
            }
            if sites.len() >= 2 {
                let here: Vec<_> = population
                    .iter()
                    .filter(|p| p.1.as_ref() == Some(site))
                    .collect();
                let f = here.iter().filter(|p| p.2).count();
                if f == here.len() || over(f, here.len()) {
                    closed.push(format!("site {site}: {f} of {}", here.len()));
                }
            }
        }
        for a in &view.aggregates {
            let limit = a
                .metadata
                .get("qfence:max_failures")
                .and_then(|v| v.parse::<usize>().ok())
                .or(cloud.aggregate_max_failures.map(|m| m as usize));
            if let Some(limit) = limit
                && a.hosts.contains(host)
            {
                let f = population
                    .iter()
                    .filter(|p| p.2 && a.hosts.contains(p.0))
                    .count();
                if f > limit {
                    closed.push(format!("aggregate {}: {f} failed, limit {limit}", a.name));
                }
            }
        }
        if closed.is_empty() {
            return Ok(());
        }
        Err(self.violation(
            step,
            Invariant::GatesHold,
            format!("{what} while closed: {}", closed.join("; ")),
        ))
    }

    /// (k): from the world's record of the incident's evacuations.
    fn enable(&self, step: usize, run: &Run, host: &HostName, what: &str) -> Result<(), Violation> {
        if !self.on(Invariant::EnableAfterEvacuation) {
            return Ok(());
        }
        let cloud = cloud(run);
        let since = self.incident.get(host).copied().unwrap_or(Millis(0));
        let world = &run.world;
        let migrations = |s: &ServerId, status: fn(&MigrationStatus) -> bool| {
            world
                .migrations
                .iter()
                .filter(|m| &m.server == s && &m.source == host && m.created_at >= since)
                .filter(|m| status(&m.status))
                .count()
        };
        let requested = self.requested.get(host).cloned().unwrap_or_default();
        let fail = |why: String| {
            Err(self.violation(
                step,
                Invariant::EnableAfterEvacuation,
                format!("{what}: {why}"),
            ))
        };
        for s in &requested {
            let k = (host.clone(), s.clone());
            let failures = self.refused.get(&k).copied().unwrap_or(0)
                + migrations(s, |m| *m == MigrationStatus::Error) as u32;
            if cloud.smart_evacuation && failures >= cloud.evacuation_retries {
                return fail(format!(
                    "{s} failed {failures} times: smart evacuation gave {host} up"
                ));
            }
            if cloud.force_enable {
                continue;
            }
            let left = world.servers.get(s).is_some_and(|srv| srv.host != *host);
            let succeeded = if cloud.smart_evacuation {
                migrations(s, MigrationStatus::succeeded) > 0
            } else {
                left || self.last_outcome.get(&k) == Some(&Outcome::Done)
            };
            if !succeeded {
                return fail(format!("{s}'s evacuation did not succeed"));
            }
        }
        if cloud.smart_evacuation && !cloud.force_enable {
            let tags = world
                .flavors
                .values()
                .any(|m| m.get("evacuable").is_some_and(|v| v == "true"));
            let stranded: Vec<&ServerId> = world
                .servers
                .values()
                .filter(|s| s.host == *host && s.status.evacuable())
                .filter(|s| !tags || s.flavor == "m1.ha")
                .map(|s| &s.id)
                .collect();
            if !stranded.is_empty() {
                return fail(format!("{stranded:?} still on it"));
            }
        }
        Ok(())
    }
}

fn cloud(run: &Run) -> &qfence_model::config::CloudConfig {
    run.current_config().cloud("cloud").unwrap()
}
