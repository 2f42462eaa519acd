//! The seeded simulation: drives `decide` through random schedules (observations flipping,
//! fences failing or timing out, sites lost and returning, leadership changing, operators
//! acting) against an imagined world, and checks named safety invariants after every step.
//!
//! Each invariant has its own test file; they share this harness. `QFENCE_SIM_SCHEDULES`
//! sets how many schedules each file runs; `QFENCE_SIM_SEED` replays one schedule and prints
//! its trace. A failure prints the seed.
//!
//! The checker does not reuse the core's rules: it recomputes what counts as proof from the
//! raw observations and from the world's own record (which watchdog really fired, which
//! operator really confirmed what), so a bug in the rules cannot hide itself. `world.rs` holds
//! the world (copies, the VIP, watchdogs) and the runtime acting on it; `world_check.rs` the
//! invariants judged on the world itself, (m) to (o).

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

pub mod fixtures;
mod hot_standby;
#[path = "../support/spread.rs"]
mod spread;
mod world;
mod world_check;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use qfence_core::rules::{binding, fence_level};
use qfence_core::{
    Action, BindingKey, Decision, EvidenceKind, Intent, IntentKind, Leadership, Millis,
    Observation, Observed, OpId, OpResult, PlanState, Rules, Snapshot, Stage, Transition,
    TransitionKind, decide_with,
};
use qfence_model::config::{PlanConfig, ValidatedConfig};
use qfence_model::{FenceLevel, Generation, PlanId, Role, SiteId, Term};
use world::{Pending, World};
use world_check::{MAX_DELAY, WorldWatch};

/// The named safety invariants (see `docs/specs/invariants.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// (a) No switchover or service command at a site unless every other site is FENCED or
    /// operator-confirmed at that generation.
    FencedBeforePromote,
    /// (b) At most one owner per generation; generations only increase.
    OneOwnerPerGeneration,
    /// (c) No command carries a term other than the current leader's.
    CurrentTermOnly,
    /// (d) UNKNOWN is never used as proof.
    UnknownIsNotProof,
    /// (e) No unfence at a non-owner site.
    NoUnfenceAtNonOwner,
    /// (f) A site in maintenance never becomes owner, nor the target of a move.
    MaintenanceNeverOwns,
    /// (m) Never two sites running a primary copy while clients can reach either.
    OneCopyReachable,
    /// (n) In steady state the VIP points at the owner, or is pointed back within two
    /// intervals of the last disturbance.
    VipAtOwner,
    /// (o) No dead-man evidence unless the world's watchdog really fired.
    DeadManFired,
    /// (p) A planned switchover commits only with the resource proven stopped at the old
    /// owner, and, standing on its resource-level fences, only while the world's copy there
    /// is really stopped.
    SwitchoverStopsResource,
    /// (q) In a plan with hot standbys, a failover commits only with every site it gives up
    /// proven stopped by its required fences or evidence: a standby reading never counts.
    HotStandbyIsNotAFence,
}

impl Invariant {
    pub const ALL: [Invariant; 11] = [
        Invariant::FencedBeforePromote,
        Invariant::OneOwnerPerGeneration,
        Invariant::CurrentTermOnly,
        Invariant::UnknownIsNotProof,
        Invariant::NoUnfenceAtNonOwner,
        Invariant::MaintenanceNeverOwns,
        Invariant::OneCopyReachable,
        Invariant::VipAtOwner,
        Invariant::DeadManFired,
        Invariant::SwitchoverStopsResource,
        Invariant::HotStandbyIsNotAFence,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::FencedBeforePromote => "(a) fenced before promote",
            Invariant::OneOwnerPerGeneration => "(b) one owner per generation",
            Invariant::CurrentTermOnly => "(c) current term only",
            Invariant::UnknownIsNotProof => "(d) UNKNOWN is never proof",
            Invariant::NoUnfenceAtNonOwner => "(e) no unfence at a non-owner",
            Invariant::MaintenanceNeverOwns => "(f) a site in maintenance never owns",
            Invariant::OneCopyReachable => "(m) one reachable copy",
            Invariant::VipAtOwner => "(n) the VIP at the owner",
            Invariant::DeadManFired => "(o) dead-man evidence only when the watchdog fired",
            Invariant::SwitchoverStopsResource => {
                "(p) a switchover commits with the resource stopped at the old owner"
            }
            Invariant::HotStandbyIsNotAFence => "(q) a hot standby's reading is never a fence",
        }
    }

    fn seed_base(self) -> u64 {
        match self {
            Invariant::FencedBeforePromote => 0xA000_0000,
            Invariant::OneOwnerPerGeneration => 0xB000_0000,
            Invariant::CurrentTermOnly => 0xC000_0000,
            Invariant::UnknownIsNotProof => 0xD000_0000,
            Invariant::NoUnfenceAtNonOwner => 0xE000_0000,
            Invariant::MaintenanceNeverOwns => 0x1F00_0000,
            Invariant::OneCopyReachable => 0x2A00_0000,
            Invariant::VipAtOwner => 0x2B00_0000,
            Invariant::DeadManFired => 0x2C00_0000,
            Invariant::SwitchoverStopsResource => 0x2D00_0000,
            Invariant::HotStandbyIsNotAFence => 0x2E00_0000,
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

/// What a schedule did, for the figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub steps: usize,
    pub decisions: usize,
    pub commands: usize,
    pub commits: usize,
    pub switchovers: usize,
    pub halts: usize,
    /// Sites counted fenced by an expired dead-man switch, and by an operator.
    pub dead_man_evidence: usize,
    pub confirmations: usize,
    /// Alarms, shields raised, restarts in place.
    pub alarms: usize,
    pub shields: usize,
    pub recoveries: usize,
    /// Sites put in maintenance, and requests to do so the core refused (owner, target).
    pub maintenance: usize,
    pub maintenance_refused: usize,
    /// Watchdogs disarmed or re-set behind qfence's back, and VIPs moved by hand.
    pub tampers: usize,
    pub vip_moves: usize,
    /// Drains of the leader, each ended by a hand-over.
    pub drains: usize,
    /// Planned switchovers committed on the old owner's resource-level proof (its host left
    /// on), and those that escalated to the required fences.
    pub resource_commits: usize,
    pub escalations: usize,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.steps += o.steps;
        self.decisions += o.decisions;
        self.commands += o.commands;
        self.commits += o.commits;
        self.switchovers += o.switchovers;
        self.halts += o.halts;
        self.dead_man_evidence += o.dead_man_evidence;
        self.confirmations += o.confirmations;
        self.alarms += o.alarms;
        self.shields += o.shields;
        self.recoveries += o.recoveries;
        self.maintenance += o.maintenance;
        self.maintenance_refused += o.maintenance_refused;
        self.tampers += o.tampers;
        self.vip_moves += o.vip_moves;
        self.drains += o.drains;
        self.resource_commits += o.resource_commits;
        self.escalations += o.escalations;
    }
}

/// splitmix64: tiny, seeded, good enough to shuffle schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p` percent.
    pub fn pct(&mut self, p: u64) -> bool {
        self.next_u64() % 100 < p
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// One schedule's run.
struct Sim<'c> {
    seed: u64,
    rng: Rng,
    /// Drives maintenance on its own stream, so the other events of a seed stay as they were
    /// before maintenance existed.
    maintenance_rng: Rng,
    /// The world's own doings (tampering, a VIP moved by hand), on their own stream too.
    world_rng: Rng,
    /// Drains of the leader (`serve`'s first signal), on their own stream too.
    drain_rng: Rng,
    /// While the leader drains: until when. It starts nothing new but keeps arming and
    /// renewing the owner's dead-man switches, then hands the leadership over (ADR 0013).
    draining_until: Option<Millis>,
    /// What invariant (n) keeps between steps.
    watch: WorldWatch,
    config: &'c ValidatedConfig,
    plan_id: PlanId,
    plan: &'c PlanConfig,
    rules: Rules,
    check: Vec<Invariant>,
    state: PlanState,
    world: World,
    observations: BTreeMap<BindingKey, Observation>,
    results: BTreeMap<OpId, OpResult>,
    queue: VecDeque<Pending>,
    now: Millis,
    term: Term,
    leader: bool,
    lease_until: Millis,
    /// Old states a deposed leader may still hold, with its term.
    history: VecDeque<(PlanState, Term, Millis)>,
    /// Sites operators really confirmed, by generation.
    confirmed: BTreeSet<(SiteId, Generation)>,
    /// Evidence that was true when the core recorded it (site, when recorded). Later events
    /// nobody could observe (a host powered on while unreachable) do not make it a lie.
    legit: BTreeSet<(SiteId, Millis)>,
    owners: BTreeMap<Generation, SiteId>,
    max_generation: Generation,
    trace: Vec<String>,
    stats: Stats,
}

/// Runs one schedule with `rules`, checking `check` after every step.
pub fn run_schedule(
    seed: u64,
    rules: Rules,
    check: &[Invariant],
    steps: usize,
    keep_trace: bool,
) -> Result<Stats, Violation> {
    let mut rng = Rng::new(seed);
    let (name, plan) = match rng.below(100) {
        // Half the PostgreSQL schedules have hot standbys, chosen from the seed so the
        // stream (and the other schedules) stay as they were.
        0..35 if seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63 == 1 => {
            ("pg", fixtures::pg_hot_plan())
        }
        0..35 => ("pg", fixtures::pg_plan()),
        35..55 => ("erp-db", fixtures::erp_plan_three(&["dc3", "dc2"])),
        _ => ("erp-db", fixtures::erp_plan_full()),
    };
    let config = fixtures::config_with(vec![(name, plan)]);
    let plan_id = fixtures::plan_id(name);
    let plan = config.plan(plan_id.as_str()).unwrap();
    let mut sim = Sim::new(seed, rng, &config, plan_id.clone(), plan, rules, check);
    let r = sim.run(steps, keep_trace);
    if keep_trace {
        for l in &sim.trace {
            eprintln!("{l}");
        }
    }
    r
}

impl<'c> Sim<'c> {
    fn new(
        seed: u64,
        mut rng: Rng,
        config: &'c ValidatedConfig,
        plan_id: PlanId,
        plan: &'c PlanConfig,
        rules: Rules,
        check: &[Invariant],
    ) -> Self {
        let state = PlanState::initial(plan);
        let mut stopped = BTreeMap::new();
        let mut healthy = BTreeMap::new();
        let mut ready = BTreeMap::new();
        let mut shield_up = BTreeMap::new();
        let standby_fenced = rng.pct(60);
        for s in plan.sites() {
            let fenced = *s != state.owner && standby_fenced;
            for (i, b) in plan.instances[s].iter().enumerate() {
                let k = BindingKey::new(Some(s), i, b);
                match b.role {
                    Role::Fence => {
                        stopped.insert(k, fenced);
                    }
                    Role::Shield => {
                        shield_up.insert(k, false);
                    }
                    _ => {}
                }
            }
            healthy.insert(s.clone(), true);
            ready.insert(s.clone(), rng.pct(80));
        }
        let flaky = *rng.pick(&[0, 5, 15, 30]);
        let mut owners = BTreeMap::new();
        owners.insert(state.generation, state.owner.clone());
        let now = Millis(1_700_000_000_000);
        let owner = state.owner.clone();
        Self {
            seed,
            rng,
            maintenance_rng: Rng::new(seed ^ 0x6D61_696E_7465_6E61),
            world_rng: Rng::new(seed ^ 0x776F_726C_6421),
            drain_rng: Rng::new(seed ^ 0x6472_6169_6E21),
            draining_until: None,
            watch: WorldWatch::new(now),
            config,
            plan_id,
            plan,
            rules,
            check: check.to_vec(),
            max_generation: state.generation,
            state,
            world: World {
                stopped,
                healthy,
                ready,
                shield_up,
                flaky,
                ..World::new(&owner, !plan.service.is_empty())
            },
            observations: BTreeMap::new(),
            results: BTreeMap::new(),
            queue: VecDeque::new(),
            now,
            term: Term(1),
            leader: true,
            lease_until: now.plus(Duration::from_secs(2)),
            history: VecDeque::new(),
            confirmed: BTreeSet::new(),
            legit: BTreeSet::new(),
            owners,
            trace: Vec::new(),
            stats: Stats::default(),
        }
    }

    fn log(&mut self, keep: bool, line: impl FnOnce() -> String) {
        if keep {
            self.trace.push(line());
        }
    }

    fn run(&mut self, steps: usize, keep: bool) -> Result<Stats, Violation> {
        for step in 0..steps {
            self.stats.steps += 1;
            self.now = self
                .now
                .plus(Duration::from_millis(500 + self.rng.below(4500)));
            self.events(keep);
            self.drain(keep);
            self.world_events(keep);
            self.execute(keep);
            self.fire_watchdogs();
            self.leader_cycle(step, keep)?;
            self.check_world(step)?;
        }
        Ok(self.stats)
    }

    fn sites(&self) -> Vec<SiteId> {
        self.plan.sites().cloned().collect()
    }

    // ----- the world changes on its own, and operators act -----

    fn events(&mut self, keep: bool) {
        let sites = self.sites();
        let owner = self.state.owner.clone();
        if self.rng.pct(4) {
            self.world.healthy.insert(owner.clone(), false);
            self.log(keep, || format!("  world: {owner} unhealthy"));
        }
        if self.rng.pct(3) {
            let s = self.rng.pick(&sites).clone();
            self.world.healthy.insert(s.clone(), true);
        }
        if self.rng.pct(5) {
            let s = self.rng.pick(&sites).clone();
            let r = !self.world.ready[&s];
            self.world.ready.insert(s, r);
        }
        if self.rng.pct(3) {
            let s = self.rng.pick(&sites).clone();
            self.log(keep, || format!("  world: {s} lost"));
            self.hold_calls_at(&s);
            self.world.lost.insert(s);
        }
        if self.rng.pct(6) && !self.world.lost.is_empty() {
            let v: Vec<SiteId> = self.world.lost.iter().cloned().collect();
            let s = self.rng.pick(&v).clone();
            self.world.lost.remove(&s);
        }
        if self.rng.pct(2) {
            // A returning site: someone powers a fenced site back on.
            let s = self.rng.pick(&sites).clone();
            for (k, v) in self.world.stopped.iter_mut() {
                if k.site.as_ref() == Some(&s) {
                    *v = false;
                }
            }
            self.world.healthy.insert(s.clone(), true);
            self.log(keep, || format!("  world: {s} powered back on"));
        }
        if self.rng.pct(3) {
            // A new leader: the old one's lease has run out first.
            self.term = Term(self.term.0 + 1);
            self.leader = true;
            self.lease_until = self.now.plus(Duration::from_secs(2));
            let t = self.term;
            self.log(keep, || format!("  cluster: new leader, term {t}"));
        } else if self.rng.pct(3) {
            self.leader = false;
        } else if self.rng.pct(90) {
            self.leader = true;
            self.lease_until = self.now.plus(Duration::from_secs(2));
        }
        if self.rng.pct(5) {
            self.operator(keep);
        }
        self.maintenance(keep);
    }

    /// Now and then the leader drains for a few seconds (a rolling restart), in the middle of
    /// whatever it was doing, and then hands the leadership over: a new term.
    fn drain(&mut self, keep: bool) {
        match self.draining_until {
            Some(until) if self.now >= until => {
                self.draining_until = None;
                self.term = Term(self.term.0 + 1);
                self.leader = true;
                self.lease_until = self.now.plus(Duration::from_secs(2));
                let t = self.term;
                self.log(keep, || {
                    format!("  cluster: drained, leadership handed over, term {t}")
                });
            }
            None if self.drain_rng.below(1000) < 6 => {
                let until = self
                    .now
                    .plus(Duration::from_millis(2_000 + self.drain_rng.below(10_000)));
                self.draining_until = Some(until);
                self.stats.drains += 1;
                self.log(keep, || {
                    format!("  cluster: the leader drains until {until}")
                });
            }
            _ => {}
        }
    }

    /// Operators take sites in and out of maintenance, through the core's own check (the
    /// API's path), written like every change with a new revision.
    fn maintenance(&mut self, keep: bool) {
        let sites = self.sites();
        let leave = !self.state.maintenance.is_empty() && self.maintenance_rng.pct(6);
        let enter = self.maintenance_rng.pct(3);
        if !leave && !enter {
            return;
        }
        let site = self.maintenance_rng.pick(&sites).clone();
        let on = !leave;
        let site = if on {
            site
        } else {
            let v: Vec<SiteId> = self.state.maintenance.iter().cloned().collect();
            self.maintenance_rng.pick(&v).clone()
        };
        match self
            .state
            .with_maintenance(self.plan, self.plan_id.as_str(), &site, on)
        {
            Ok(next) => {
                if on && !self.state.in_maintenance(&site) {
                    self.stats.maintenance += 1;
                }
                self.log(keep, || {
                    format!(
                        "  operator: {site} {} maintenance",
                        if on { "in" } else { "out of" }
                    )
                });
                self.state = next;
                self.state.revision += 1;
            }
            Err(e) => {
                self.stats.maintenance_refused += 1;
                self.log(keep, || format!("  operator: maintenance refused: {e}"));
            }
        }
    }

    fn operator(&mut self, keep: bool) {
        let sites = self.sites();
        let s = self.rng.pick(&sites).clone();
        let kind = match self.rng.below(9) {
            0 | 1 => IntentKind::Failover { to: s.clone() },
            2 => IntentKind::Switchover { to: s.clone() },
            3 | 4 => IntentKind::ConfirmFenced { site: s.clone() },
            5 => IntentKind::Pause,
            6 => IntentKind::Resume,
            7 => IntentKind::Retry,
            _ => IntentKind::Abort,
        };
        let generation = if self.rng.pct(10) {
            Generation(self.state.generation.0.saturating_sub(1))
        } else {
            self.state.generation
        };
        if let IntentKind::ConfirmFenced { site } = &kind
            && generation == self.state.generation
        {
            self.confirmed.insert((site.clone(), generation));
            if self.world.primary.contains(site) && !self.site_down(site) {
                self.world.confirmed_running.insert(site.clone());
            }
        }
        let k = kind.clone();
        self.log(keep, || {
            format!("  operator: {k:?} at generation {generation}")
        });
        // Intents are written through the same compare-and-set as everything else.
        self.state.intents.push(Intent {
            kind,
            generation,
            by: "op".into(),
            why: "sim".into(),
            at: self.now,
        });
        self.state.revision += 1;
    }

    // ----- the leader decides -----

    fn leader_cycle(&mut self, step: usize, keep: bool) -> Result<(), Violation> {
        // Now and then a deposed leader decides from an old state; its lease has run out.
        // (The lease protocol has a new leader wait out the old lease, so by the time a newer
        // term exists the deposed leader's lease has run out.)
        let i = self.rng.below(self.history.len().max(1) as u64) as usize;
        if self.rng.pct(3) && self.history.get(i).is_some_and(|h| h.1 < self.term) {
            let (old, term, lease) = self.history[i].clone();
            let lease_until = std::cmp::min(lease, self.now);
            let in_flight = self.in_flight();
            let snap = self.snapshot(
                &old,
                &in_flight,
                Leadership {
                    leader: true,
                    term,
                    lease_until,
                },
            );
            let d = decide_with(&snap, &self.rules);
            self.check_decision(step, &snap, &d, None)?;
            if let Some(ch) = &d.state_change
                && let Ok(next) = self.state.apply(ch)
            {
                return Err(self.violation(
                    step,
                    Invariant::OneOwnerPerGeneration,
                    format!("a deposed leader's write was accepted: {next:?}"),
                ));
            }
        }
        let leadership = Leadership {
            leader: self.leader,
            term: self.term,
            lease_until: self.lease_until,
        };
        let state = self.state.clone();
        let in_flight = self.in_flight();
        // Built from the fields, not through a method, so the trace can grow meanwhile.
        let snap = Snapshot {
            config: self.config,
            plan: self.plan_id.clone(),
            state: &state,
            observations: &self.observations,
            results: &self.results,
            in_flight: &in_flight,
            leadership,
            now: self.now,
        };
        let d = decide_with(&snap, &self.rules);
        self.stats.decisions += 1;
        if keep {
            self.trace.push(format!("[{step}] {}", d.reason));
        }
        let next = match &d.state_change {
            Some(ch) => match self.state.apply(ch) {
                Ok(n) => Some(n),
                Err(e) => {
                    return Err(self.violation(
                        step,
                        Invariant::OneOwnerPerGeneration,
                        format!("the leader's own write was refused: {e}"),
                    ));
                }
            },
            None => None,
        };
        self.check_decision(step, &snap, &d, next.as_ref())?;
        if let Some(n) = &next {
            self.check_dead_man_evidence(step, &state, n)?;
        }
        if let Some(n) = next {
            if n.generation != self.state.generation {
                self.stats.commits += 1;
                if let Some(t) = self.state.transition()
                    && matches!(t.kind, TransitionKind::Switchover { .. })
                    && !t.escalated
                    && !self.site_down(&t.from)
                {
                    self.stats.resource_commits += 1;
                }
            }
            if n.transition().is_some_and(|t| t.escalated)
                && self.state.transition().is_some_and(|t| !t.escalated)
            {
                self.stats.escalations += 1;
            }
            if n.transition().is_some_and(|t| t.halted.is_some())
                && self.state.transition().is_none_or(|t| t.halted.is_none())
            {
                self.stats.halts += 1;
            }
            self.history
                .push_back((self.state.clone(), self.term, self.lease_until));
            if self.history.len() > 8 {
                self.history.pop_front();
            }
            for e in &n.evidence {
                if is_new(&self.state.evidence, e) {
                    match e.kind {
                        EvidenceKind::DeadManExpired { .. } => self.stats.dead_man_evidence += 1,
                        EvidenceKind::OperatorConfirmed { .. } => self.stats.confirmations += 1,
                    }
                }
                if is_new(&self.state.evidence, e)
                    && self.evidence_legit(&e.site, &e.kind, e.generation, self.state.owner_since)
                {
                    self.legit.insert((e.site.clone(), e.at));
                }
            }
            self.state = n;
        }
        self.check_owner(step)?;
        for c in d.commands {
            self.stats.commands += 1;
            match c.action {
                Action::Switchover { .. } => self.stats.switchovers += 1,
                Action::Alarm { .. } => self.stats.alarms += 1,
                Action::RaiseShield { .. } => self.stats.shields += 1,
                Action::Recover { .. } => self.stats.recoveries += 1,
                _ => {}
            }
            let line = c.to_string();
            self.log(keep, || format!("  issue {line}"));
            let delay = self.rng.below(MAX_DELAY.as_millis() as u64);
            // A draining leader starts nothing new but its dead-man calls (and alarms): the
            // rest never runs and never answers, as a call lost on the way.
            let drained = self.draining_until.is_some()
                && !matches!(
                    c.action,
                    Action::ArmDeadMan { .. } | Action::RenewDeadMan { .. } | Action::Alarm { .. }
                );
            if drained {
                self.log(keep, || "    (not started: draining)".to_string());
            }
            let lost = self.rng.pct(2) || drained;
            // Now and then a forwarded call is held up well past its deadline.
            let forwarded = self.world_rng.pct(3);
            let delay = if forwarded {
                15_000 + self.world_rng.below(75_000)
            } else {
                delay
            };
            if delay >= MAX_DELAY.as_millis() as u64
                && c.action.binding().is_some_and(|b| b.site.is_none())
            {
                self.watch
                    .disturb(self.now.plus(Duration::from_millis(delay)));
            }
            self.queue.push_back(Pending {
                ready_at: self.now.plus(Duration::from_millis(delay)),
                cmd: c,
                lost,
                forwarded,
            });
        }
        Ok(())
    }

    fn in_flight(&self) -> BTreeMap<OpId, BindingKey> {
        self.queue
            .iter()
            .filter_map(|p| Some((p.cmd.op.clone(), p.cmd.action.binding()?.clone())))
            .collect()
    }

    fn snapshot<'s>(
        &'s self,
        state: &'s PlanState,
        in_flight: &'s BTreeMap<OpId, BindingKey>,
        leadership: Leadership,
    ) -> Snapshot<'s> {
        Snapshot {
            config: self.config,
            plan: self.plan_id.clone(),
            state,
            observations: &self.observations,
            results: &self.results,
            in_flight,
            leadership,
            now: self.now,
        }
    }

    // ----- the checker -----

    fn violation(&self, step: usize, invariant: Invariant, detail: String) -> Violation {
        Violation {
            seed: self.seed,
            step,
            invariant,
            detail,
            trace: self.trace.clone(),
        }
    }

    fn on(&self, i: Invariant) -> bool {
        self.check.contains(&i)
    }

    /// Whether `site` is proven stopped at `generation` for the move `t`, judged from the raw
    /// observations and the world's record, never from the core's verdict: as a site
    /// ([`Sim::site_proven`]) or, in a planned switchover, by its resource
    /// ([`Sim::resource_proven`]).
    fn proven(
        &self,
        snap: &Snapshot<'_>,
        state: &PlanState,
        site: &SiteId,
        generation: Generation,
        t: Option<&Transition>,
    ) -> Result<(), String> {
        let why = match self.site_proven(snap, state, site, generation) {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        match t {
            Some(t) if matches!(t.kind, TransitionKind::Switchover { .. }) => self
                .resource_proven(snap, site, t.started)
                .map_err(|r| format!("{why}; {r}")),
            _ => Err(why),
        }
    }

    /// Whether every resource-level fence of `site` (a fence that is not required, or is
    /// application-level) has a fresh read-back that holds, taken since `since`.
    fn resource_proven(
        &self,
        snap: &Snapshot<'_>,
        site: &SiteId,
        since: Millis,
    ) -> Result<(), String> {
        let mut readings = Vec::new();
        let mut all = true;
        for (i, b) in self.plan.instances[site].iter().enumerate() {
            let k = BindingKey::new(Some(site), i, b);
            if b.role != Role::Fence
                || b.required
                    && fence_level(self.config, self.plan, &k) != Some(FenceLevel::Application)
            {
                continue;
            }
            let o = snap.observations.get(&k);
            all &= o.is_some_and(|o| {
                o.value == Observed::Holds
                    && o.at >= since
                    && snap.now.since(o.at) <= self.plan.freshness
            });
            readings.push(format!("{k}={:?}", o.map(|o| (o.value, o.at.0))));
        }
        if all && !readings.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{site}'s resource not proven stopped since {since}: {}",
                readings.join(", ")
            ))
        }
    }

    /// Whether `site` is proven stopped as a site: its required fences or evidence.
    fn site_proven(
        &self,
        snap: &Snapshot<'_>,
        state: &PlanState,
        site: &SiteId,
        generation: Generation,
    ) -> Result<(), String> {
        let mut readings = Vec::new();
        let mut all = true;
        let mut contradicted = false;
        for (i, b) in self.plan.instances[site].iter().enumerate() {
            let k = BindingKey::new(Some(site), i, b);
            if b.role != Role::Fence
                || !b.required
                || fence_level(self.config, self.plan, &k) == Some(FenceLevel::Application)
            {
                continue;
            }
            let o = snap.observations.get(&k);
            let fresh = o.is_some_and(|o| snap.now.since(o.at) <= self.plan.freshness);
            let holds = fresh && o.is_some_and(|o| o.value == Observed::Holds);
            contradicted |= fresh && o.is_some_and(|o| o.value == Observed::NotHeld);
            all &= holds;
            readings.push(format!("{k}={:?}", o.map(|o| (o.value, o.at.0))));
        }
        if all && !readings.is_empty() {
            return Ok(());
        }
        if !contradicted {
            for e in state
                .evidence
                .iter()
                .filter(|e| &e.site == site && e.generation == generation)
            {
                let recorded_now = is_new(&snap.state.evidence, e);
                if self.legit.contains(&(site.clone(), e.at))
                    || recorded_now
                        && self.evidence_legit(site, &e.kind, generation, snap.state.owner_since)
                {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "{site} not proven at generation {generation}: {}; evidence {:?}; watchdog {:?}",
            readings.join(", "),
            state.evidence,
            self.world.dog.get(site),
        ))
    }

    fn evidence_legit(
        &self,
        site: &SiteId,
        kind: &EvidenceKind,
        generation: Generation,
        _owner_since: Millis,
    ) -> bool {
        match kind {
            // Confirmations carry over to the generation the new owner commits.
            EvidenceKind::OperatorConfirmed { .. } => {
                self.confirmed.contains(&(site.clone(), generation))
                    || self
                        .confirmed
                        .contains(&(site.clone(), Generation(generation.0.saturating_sub(1))))
            }
            // The world's own record: this site's watchdog really fired (or was changed
            // behind qfence's back where no read-back could show it).
            EvidenceKind::DeadManExpired { .. } => self.dog_fired_or_unseen(site),
        }
    }

    fn check_decision(
        &self,
        step: usize,
        snap: &Snapshot<'_>,
        d: &Decision,
        next: Option<&PlanState>,
    ) -> Result<(), Violation> {
        let after = next.unwrap_or(snap.state);
        if self.on(Invariant::CurrentTermOnly) {
            let valid = snap.leadership.valid_at(snap.now);
            for c in &d.commands {
                if !valid || c.term != snap.leadership.term || c.term != self.term {
                    return Err(self.violation(
                        step,
                        Invariant::CurrentTermOnly,
                        format!(
                            "{c} issued with leadership {:?}, current term {}",
                            snap.leadership, self.term
                        ),
                    ));
                }
            }
            if !valid && d.state_change.is_some() {
                return Err(self.violation(
                    step,
                    Invariant::CurrentTermOnly,
                    "a write without a valid lease".into(),
                ));
            }
        }
        for c in &d.commands {
            let promoted_at = match &c.action {
                Action::Switchover { binding } => binding.site.clone(),
                Action::Service { site, .. } => Some(site.clone()),
                Action::Unfence { binding } => binding.site.clone(),
                _ => None,
            };
            let Some(target) = promoted_at else { continue };
            // Keeping the VIP at the owner in steady state is not a promotion: (n) and (m)
            // watch it. Only a move's service step must stand on proof.
            if matches!(c.action, Action::Service { .. }) && after.transition().is_none() {
                if self.on(Invariant::FencedBeforePromote)
                    && (target != after.owner || c.generation != after.generation)
                {
                    return Err(self.violation(
                        step,
                        Invariant::FencedBeforePromote,
                        format!("{c}: the service kept pointing at a site that does not own it"),
                    ));
                }
                continue;
            }
            // An abort before the switchover undoes the move's fences at the old owner, which
            // owns the plan again: (m) watches that no second copy runs.
            // (Another move may start in the same decision: an intent after the abort.)
            if matches!(c.action, Action::Unfence { .. })
                && after.owner == target
                && after.generation == snap.state.generation
                && snap.state.transition().is_some_and(|t| {
                    t.from == target
                        && t.stage < Stage::Switchover
                        && t.after_verify < Stage::Switchover
                        && after.transition().is_none_or(|n| n.started != t.started)
                })
            {
                continue;
            }
            let inv = if matches!(c.action, Action::Unfence { .. }) {
                Invariant::NoUnfenceAtNonOwner
            } else {
                Invariant::FencedBeforePromote
            };
            if !self.on(inv) {
                continue;
            }
            if inv == Invariant::NoUnfenceAtNonOwner {
                let promoting = after.transition().map(|t| &t.target) == Some(&target)
                    || snap.state.transition().map(|t| &t.target) == Some(&target);
                if !promoting {
                    return Err(self.violation(
                        step,
                        inv,
                        format!("{c} at {target}, which is not being promoted"),
                    ));
                }
            }
            // Service goes last: only to the owner the commit made, at its generation.
            if matches!(c.action, Action::Service { .. })
                && (after.owner != target || c.generation != after.generation)
            {
                return Err(self.violation(
                    step,
                    inv,
                    format!("{c} before {target} was committed as owner"),
                ));
            }
            // The move this command is part of (the decision may have started it).
            let t = after
                .transition()
                .filter(|t| t.target == target)
                .or(snap.state.transition().filter(|t| t.target == target));
            for s in self.sites().iter().filter(|s| **s != target) {
                if let Err(why) = self.proven(snap, after, s, c.generation, t) {
                    return Err(self.violation(step, inv, format!("{c}: {why}")));
                }
            }
        }
        if self.on(Invariant::MaintenanceNeverOwns) {
            if after.generation != snap.state.generation
                && snap.state.maintenance.contains(&after.owner)
            {
                return Err(self.violation(
                    step,
                    Invariant::MaintenanceNeverOwns,
                    format!(
                        "committed {} at generation {} while it was in maintenance",
                        after.owner, after.generation
                    ),
                ));
            }
            if after.maintenance.contains(&after.owner) {
                return Err(self.violation(
                    step,
                    Invariant::MaintenanceNeverOwns,
                    format!("{} owns the plan and is in maintenance", after.owner),
                ));
            }
            if let Some(t) = after.transition()
                && after.maintenance.contains(&t.target)
            {
                return Err(self.violation(
                    step,
                    Invariant::MaintenanceNeverOwns,
                    format!("moving to {}, which is in maintenance", t.target),
                ));
            }
        }
        if self.on(Invariant::UnknownIsNotProof)
            && let Some(n) = next
        {
            if n.generation != snap.state.generation {
                let t = snap.state.transition();
                for s in self.sites().iter().filter(|s| **s != n.owner) {
                    if let Err(why) = self.proven(snap, n, s, n.generation, t) {
                        return Err(self.violation(
                            step,
                            Invariant::UnknownIsNotProof,
                            format!(
                                "committed {} at generation {}: {why}",
                                n.owner, n.generation
                            ),
                        ));
                    }
                }
            }
            for e in &n.evidence {
                if is_new(&snap.state.evidence, e)
                    && !self.evidence_legit(&e.site, &e.kind, e.generation, snap.state.owner_since)
                {
                    return Err(self.violation(
                        step,
                        Invariant::UnknownIsNotProof,
                        format!("evidence recorded without proof: {e:?}"),
                    ));
                }
            }
        }
        if self.on(Invariant::SwitchoverStopsResource)
            && let Some(n) = next
            && n.generation != snap.state.generation
            && let Some(t) = snap.state.transition()
            && matches!(t.kind, TransitionKind::Switchover { .. })
        {
            self.switchover_stopped_resource(step, snap, n, t)?;
        }
        if self.on(Invariant::HotStandbyIsNotAFence)
            && let Some(n) = next
        {
            self.hot_standby_not_a_fence(step, snap, n)?;
        }
        Ok(())
    }

    /// (p) at the commit of planned switchover `t`: the old owner is proven stopped, as a site
    /// or by its resource since the switchover started; and when only the resource proves it,
    /// the world's copy there is stopped (the read-back told the truth, and nothing started
    /// it again since). An operator's mistaken confirmation, and a watchdog changed where no
    /// read-back showed it, are the excuses (m) and (o) allow too.
    fn switchover_stopped_resource(
        &self,
        step: usize,
        snap: &Snapshot<'_>,
        n: &PlanState,
        t: &Transition,
    ) -> Result<(), Violation> {
        let inv = Invariant::SwitchoverStopsResource;
        let from = &t.from;
        if self.site_proven(snap, n, from, n.generation).is_ok() {
            return Ok(());
        }
        if let Err(why) = self.resource_proven(snap, from, t.started) {
            return Err(self.violation(
                step,
                inv,
                format!(
                    "committed {} at generation {}: {why}",
                    n.owner, n.generation
                ),
            ));
        }
        let excused =
            self.world.confirmed_running.contains(from) || self.world.tamper_unseen.contains(from);
        if self.world.primary.contains(from) && !self.site_down(from) && !excused {
            return Err(self.violation(
                step,
                inv,
                format!(
                    "committed {} at generation {} on {from}'s resource-level proof while \
                     {from}'s copy runs",
                    n.owner, n.generation
                ),
            ));
        }
        Ok(())
    }

    fn check_owner(&mut self, step: usize) -> Result<(), Violation> {
        if !self.on(Invariant::OneOwnerPerGeneration) {
            return Ok(());
        }
        let g = self.state.generation;
        if g < self.max_generation {
            return Err(self.violation(
                step,
                Invariant::OneOwnerPerGeneration,
                format!("generation went back from {} to {g}", self.max_generation),
            ));
        }
        self.max_generation = g;
        match self.owners.get(&g) {
            Some(o) if *o != self.state.owner => Err(self.violation(
                step,
                Invariant::OneOwnerPerGeneration,
                format!("generation {g} owned by {o} and by {}", self.state.owner),
            )),
            Some(_) => Ok(()),
            None => {
                self.owners.insert(g, self.state.owner.clone());
                Ok(())
            }
        }
    }
}

/// Whether `e` was recorded by this decision (evidence carried into a new generation at a
/// commit is the same evidence).
fn is_new(before: &[qfence_core::Evidence], e: &qfence_core::Evidence) -> bool {
    !before
        .iter()
        .any(|b| b.site == e.site && b.at == e.at && b.kind == e.kind)
}

fn binding_timeout(plan: &PlanConfig, k: &BindingKey) -> Duration {
    binding(plan, k)
        .and_then(|b| b.params.get("timeout_seconds")?.parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(60))
}

/// Schedules per invariant file by default: ten files make 20,000 per run.
pub const DEFAULT_SCHEDULES: u64 = 2000;

/// Steps per schedule: about seven minutes of simulated time (2.75 s a step on average).
pub const STEPS: usize = 150;

/// Steps per schedule: `QFENCE_SIM_STEPS`, or [`STEPS`]. Longer schedules reach failbacks
/// and chains of moves; a replay must use the same value as the run that failed.
pub fn steps() -> usize {
    env_u64("QFENCE_SIM_STEPS").map_or(STEPS, |n| n as usize)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs the schedules for one invariant file: `QFENCE_SIM_SCHEDULES` of them (default
/// `default`), or only `QFENCE_SIM_SEED` with its trace. Panics with the seed on a violation.
pub fn run_invariant(invariant: Invariant, default: u64) {
    if let Some(seed) = env_u64("QFENCE_SIM_SEED") {
        match run_schedule(seed, Rules::default(), &[invariant], steps(), true) {
            Ok(s) => eprintln!("seed {seed}: {} holds ({s:?})", invariant.name()),
            Err(v) => panic!("{}", report(&v)),
        }
        return;
    }
    let n = env_u64("QFENCE_SIM_SCHEDULES").unwrap_or(default);
    let started = std::time::Instant::now();
    let steps = steps();
    let total = spread::over_cores(n, |i| {
        run_schedule(
            invariant.seed_base() + i,
            Rules::default(),
            &[invariant],
            steps,
            false,
        )
    })
    .unwrap_or_else(|v| panic!("{}", report(&v)));
    eprintln!(
        "{}: {n} schedules in {:.1?}: {total:?}",
        invariant.name(),
        started.elapsed()
    );
    // The schedules must reach what the invariants are about, or they prove nothing.
    if n >= 1000 {
        assert!(
            total.commits > 0
                && total.switchovers > 0
                && total.dead_man_evidence > 0
                && total.confirmations > 0
                && total.alarms > 0
                && total.shields > 0
                && total.recoveries > 0
                && total.maintenance > 0
                && total.maintenance_refused > 0
                && total.tampers > 0
                && total.vip_moves > 0
                && total.drains > 0
                && total.resource_commits > 0
                && total.escalations > 0,
            "the schedules missed a behaviour: {total:?}"
        );
    }
}

/// A violation as printed: the invariant, the seed to replay, and the trace's tail.
pub fn report(v: &Violation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "invariant {} broken at step {} of seed {}: {}\nreplay: QFENCE_SIM_SEED={} cargo test -p qfence-core --test <this file> (with the same QFENCE_SIM_STEPS, if set)",
        v.invariant.name(),
        v.step,
        v.seed,
        v.detail,
        v.seed
    );
    for l in v.trace.iter().rev().take(60).rev() {
        let _ = writeln!(s, "{l}");
    }
    s
}
