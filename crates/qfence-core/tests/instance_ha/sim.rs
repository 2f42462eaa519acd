//! The seeded simulation: a cloud of compute hosts with flaky BMCs, a flaky Nova, hosts that
//! hang, dump their kernels, lose their network, come back or get powered on by someone,
//! servers whose evacuations fail, leaders that change and deposed ones that still decide,
//! operators who disable Instance HA or bring hosts back; the core decides at every step, and
//! the checker (`check.rs`) checks the named invariants after every decision.
//!
//! `QFENCE_IHA_SCHEDULES` sets how many schedules each invariant runs; `QFENCE_IHA_SEED`
//! replays one and prints its trace. A failure prints the seed.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use qfence_core::Leadership;
use qfence_core::Observed;
use qfence_core::instance_ha::{
    Aggregate, CloudState, Command, Mutation, Rules, ServerId, ServerStatus, ServiceStatus,
};
use qfence_model::config::HostName;
use qfence_model::{SiteId, Term};

use crate::check::{Checker, Invariant, Violation};
use crate::world::{Fate, Faults, Run, World, config, host, sid};

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

    /// True with probability `p` per mille.
    pub fn permille(&mut self, p: u64) -> bool {
        self.next_u64() % 1000 < p
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// The world's faults, drawn from the schedule's stream.
struct RandomFaults {
    rng: Rng,
    /// Per mille of calls refused, and of calls unanswered.
    refused: u64,
    unanswered: u64,
    /// Per mille of fence read-backs that cannot read.
    unreadable: u64,
    /// Per mille of evacuations that fail.
    evacuation_fails: u64,
}

impl Faults for RandomFaults {
    fn fate(&mut self, cmd: &Command) -> Fate {
        if matches!(cmd.action, qfence_core::instance_ha::Action::Event { .. }) {
            return Fate::Done;
        }
        let n = self.rng.below(1000);
        if n < self.refused {
            Fate::Failed
        } else if n < self.refused + self.unanswered {
            Fate::Unknown {
                applied: self.rng.permille(500),
            }
        } else {
            Fate::Done
        }
    }

    fn read(&mut self, _host: &HostName, truth: Observed) -> Observed {
        if self.rng.permille(self.unreadable) {
            Observed::Unknown
        } else {
            truth
        }
    }

    fn evacuation(&mut self, _server: &ServerId) -> (bool, Duration) {
        let ok = !self.rng.permille(self.evacuation_fails);
        (ok, Duration::from_secs(3 + self.rng.below(25)))
    }
}

/// The poll interval of every simulated cloud.
pub const POLL: Duration = Duration::from_secs(15);

/// What a schedule did, for the figures and to show the schedules reach what the invariants
/// are about.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub steps: usize,
    pub decisions: usize,
    pub fences: usize,
    pub evacuations: usize,
    pub recoveries: usize,
    pub smart_failures: usize,
    pub left_disabled: usize,
    pub gate_trips: usize,
    pub deferred: usize,
    pub kdump_waits: usize,
    pub resumes: usize,
    pub leftover_unlocks: usize,
    pub deposed: usize,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.steps += o.steps;
        self.decisions += o.decisions;
        self.fences += o.fences;
        self.evacuations += o.evacuations;
        self.recoveries += o.recoveries;
        self.smart_failures += o.smart_failures;
        self.left_disabled += o.left_disabled;
        self.gate_trips += o.gate_trips;
        self.deferred += o.deferred;
        self.kdump_waits += o.kdump_waits;
        self.resumes += o.resumes;
        self.leftover_unlocks += o.leftover_unlocks;
        self.deposed += o.deposed;
    }
}

/// One schedule's world and runtime.
struct Sim {
    rng: Rng,
    run: Run,
    faults: RandomFaults,
    checker: Checker,
    /// States the cluster accepted, with their term: a deposed leader decides on one.
    history: Vec<(CloudState, Term)>,
    /// When each partition heals, the conductor recovers, Nova answers again.
    heal_at: flaky::Until,
    stats: Stats,
    keep: bool,
}

mod flaky {
    use qfence_core::Millis;

    /// World conditions that end at a time.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Until {
        pub partition: Option<Millis>,
        pub recording: Option<Millis>,
        pub nova: Option<Millis>,
        pub quorum: Option<Millis>,
        pub scheduler: Option<Millis>,
        pub disabled: Option<Millis>,
        pub lost_site: Option<Millis>,
    }
}

/// The schedule's cloud: hosts, servers, tags, aggregates, a spare, and the parameters.
fn build(rng: &mut Rng) -> (Run, bool) {
    let two_sites = rng.permille(400);
    let n = 4 + rng.below(6) as usize;
    let mut hosts: Vec<String> = (0..n)
        .map(|i| {
            let site = if two_sites && i % 2 == 1 {
                "dc2"
            } else {
                "dc1"
            };
            format!("{site}-c{i}")
        })
        .collect();
    let spare = rng.permille(300);
    if spare {
        hosts.push("dc1-spare".into());
    }
    let mut world = World::new(&hosts, 0);
    let tags = rng.permille(200);
    if tags {
        world.flavors.insert(
            "m1.ha".into(),
            [("evacuable".to_owned(), "true".to_owned())].into(),
        );
    }
    let statuses = [
        ServerStatus::Active,
        ServerStatus::Active,
        ServerStatus::Active,
        ServerStatus::Shutoff,
        ServerStatus::Error,
        ServerStatus::Paused,
    ];
    for h in hosts.iter().filter(|h| !h.ends_with("spare")) {
        for i in 0..rng.below(4) {
            let id = format!("{h}-s{i}");
            world.add_server(&id, h, rng.pick(&statuses).clone());
            if tags && rng.permille(600) {
                world.servers.get_mut(&sid(&id)).unwrap().flavor = "m1.ha".into();
            }
            if rng.permille(120) {
                world.cursed.insert(sid(&id));
            }
        }
    }
    if rng.permille(300) {
        let members: BTreeSet<HostName> = hosts.iter().step_by(2).map(|h| host(h)).collect();
        world.aggregates.push(Aggregate {
            name: "rack-a".into(),
            hosts: members,
            metadata: [(
                "qfence:max_failures".to_owned(),
                (1 + rng.below(2)).to_string(),
            )]
            .into(),
            zone: None,
        });
    }
    if spare {
        let s = world.h("dc1-spare");
        s.status = ServiceStatus::Disabled;
        s.reason = Some("reserved for instance HA".into());
    }
    let no_bmc: Vec<&str> = if rng.permille(150) {
        vec![hosts[0].as_str()]
    } else {
        vec![]
    };
    let smart = rng.permille(500);
    let mut params = vec![
        "poll_seconds: 15".to_owned(),
        "delta_seconds: 30".to_owned(),
        "kdump_timeout_seconds: 20".to_owned(),
        "kdump_max_wait_seconds: 60".to_owned(),
        "evacuation_timeout_seconds: 60".to_owned(),
        format!("smart_evacuation: {smart}"),
        format!("leave_disabled: {}", rng.permille(250)),
        format!("force_enable: {}", rng.permille(400)),
        format!("check_kdump: {}", rng.permille(300)),
        format!("reserved_hosts: {spare}"),
        format!("workers: {}", 1 + rng.below(4)),
        format!("evacuation_retries: {}", 2 + rng.below(4)),
        format!("max_hosts_per_cycle: {}", rng.pick(&[1, 1, 2, 3, 10])),
        format!("threshold_percent: {}", rng.pick(&[34, 50, 50, 75, 100])),
    ];
    if rng.permille(200) {
        params.push("aggregate_max_failures: 2".into());
    }
    let refs: Vec<&str> = params.iter().map(String::as_str).collect();
    let cfg = config(&hosts, &no_bmc, &refs);
    params.push("disabled: true".into());
    let refs: Vec<&str> = params.iter().map(String::as_str).collect();
    let disabled = config(&hosts, &no_bmc, &refs);
    let mut run = Run::new(world, cfg);
    run.disabled_config = Some(disabled);
    run.lease_until = run.now().plus(Duration::from_secs(10));
    (run, smart)
}

/// Runs one schedule with `rules`, checking `check` after every decision.
pub fn run_schedule(
    seed: u64,
    rules: Rules,
    check: &[Invariant],
    steps: usize,
    keep: bool,
) -> Result<Stats, Violation> {
    let mut rng = Rng::new(seed);
    let (mut run, _) = build(&mut rng);
    run.rules = rules;
    let faults = RandomFaults {
        rng: Rng::new(seed ^ 0x5EED_FA17),
        refused: *rng.pick(&[0, 30, 60]),
        unanswered: *rng.pick(&[0, 30, 60]),
        unreadable: *rng.pick(&[0, 50, 150]),
        evacuation_fails: *rng.pick(&[0, 100, 250]),
    };
    let mut sim = Sim {
        rng,
        run,
        faults,
        checker: Checker::new(seed, check),
        history: Vec::new(),
        heal_at: flaky::Until::default(),
        stats: Stats::default(),
        keep,
    };
    let r = sim.go(steps);
    if keep {
        for l in &sim.checker.trace {
            eprintln!("{l}");
        }
    }
    r
}

impl Sim {
    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.keep {
            self.checker.trace.push(line());
        }
    }

    fn go(&mut self, steps: usize) -> Result<Stats, Violation> {
        self.run.poll();
        for step in 0..steps {
            self.stats.steps += 1;
            let d = Duration::from_millis(1000 + self.rng.below(5000));
            self.events();
            self.run.world.advance(d);
            self.heal();
            let before = self.run.executed.len();
            self.run.execute(&mut self.faults);
            self.checker.executed(&self.run, before);
            if self.run.observer.nova_reachable
                && self.run.now().since(self.run.view.read_at) >= POLL
            {
                self.run.poll();
            }
            self.deposed(step)?;
            self.decide(step)?;
        }
        Ok(self.stats)
    }

    fn hosts(&self) -> Vec<String> {
        self.run
            .world
            .hosts
            .keys()
            .map(|h| h.to_string())
            .filter(|h| !h.ends_with("spare"))
            .collect()
    }

    /// The world changes on its own, and people act.
    fn events(&mut self) {
        let hosts = self.hosts();
        let now = self.run.now();
        let r = &mut self.rng;
        if r.permille(25) {
            let h = r.pick(&hosts).clone();
            let kdump = r.permille(500);
            let until = now.plus(Duration::from_secs(20 + r.below(60)));
            let w = self.run.world.h(&h);
            w.crashed = true;
            if kdump {
                w.kdump_until = Some(until);
            }
            self.log(|| format!("  world: {h} hangs{}", if kdump { ", dumping" } else { "" }));
        }
        let r = &mut self.rng;
        if r.permille(5) {
            let h = r.pick(&hosts).clone();
            self.run.world.h(&h).powered = false;
            self.log(|| format!("  world: {h} loses power"));
        }
        let r = &mut self.rng;
        if r.permille(10) {
            let h = r.pick(&hosts).clone();
            let w = self.run.world.h(&h);
            if w.crashed {
                w.crashed = false;
                w.kdump_until = None;
                self.log(|| format!("  world: {h} reboots by itself"));
            }
        }
        let r = &mut self.rng;
        if r.permille(3) {
            let h = r.pick(&hosts).clone();
            let w = self.run.world.h(&h);
            if !w.powered {
                w.powered = true;
                w.boots_at = Some(now.plus(Duration::from_secs(20)));
                self.log(|| format!("  world: someone powers {h} on"));
            }
        }
        let r = &mut self.rng;
        if r.permille(5) && self.heal_at.partition.is_none() {
            // A switch: most hosts cut off at once.
            let cut: Vec<String> = hosts.iter().filter(|_| r.permille(800)).cloned().collect();
            self.heal_at.partition = Some(now.plus(Duration::from_secs(20 + r.below(70))));
            for h in &cut {
                self.run.world.h(h).partitioned = true;
            }
            self.log(|| format!("  world: partition cuts {cut:?}"));
        }
        let r = &mut self.rng;
        if r.permille(5) && self.heal_at.scheduler.is_none() {
            self.heal_at.scheduler = Some(now.plus(Duration::from_secs(15 + r.below(45))));
            self.run.world.schedulers_up = false;
        }
        let r = &mut self.rng;
        if r.permille(3) && self.heal_at.recording.is_none() {
            self.heal_at.recording = Some(now.plus(Duration::from_secs(30 + r.below(30))));
            self.run.world.recording = false;
            self.log(|| "  world: Nova stops recording heartbeats".into());
        }
        let r = &mut self.rng;
        if r.permille(15) && self.heal_at.nova.is_none() {
            self.heal_at.nova = Some(now.plus(Duration::from_secs(5 + r.below(25))));
            self.run.observer.nova_reachable = false;
        }
        let r = &mut self.rng;
        if r.permille(5) && self.heal_at.quorum.is_none() {
            self.heal_at.quorum = Some(now.plus(Duration::from_secs(5 + r.below(15))));
            self.run.observer.quorum = false;
        }
        let r = &mut self.rng;
        if r.permille(5) && self.heal_at.disabled.is_none() {
            self.heal_at.disabled = Some(now.plus(Duration::from_secs(30 + r.below(60))));
            self.run.disabled = true;
            self.log(|| "  operator: disabled".into());
        }
        let r = &mut self.rng;
        if r.permille(5) && self.heal_at.lost_site.is_none() {
            self.heal_at.lost_site = Some(now.plus(Duration::from_secs(20 + r.below(40))));
            self.run
                .observer
                .lost_sites
                .insert(SiteId::new("dc2").unwrap());
        }
        let r = &mut self.rng;
        if r.permille(25) {
            // An operator brings back a host qfence left disabled or gave up on.
            let held: Vec<HostName> = self
                .run
                .state
                .hosts
                .iter()
                .filter(|(_, r)| {
                    matches!(
                        r.phase,
                        qfence_core::instance_ha::HostPhase::LeftDisabled { .. }
                            | qfence_core::instance_ha::HostPhase::Halted { .. }
                    )
                })
                .map(|(h, _)| h.clone())
                .collect();
            if !held.is_empty() {
                let h = r.pick(&held).clone();
                let w = self.run.world.h(h.as_str());
                w.powered = true;
                w.crashed = false;
                w.kdump_until = None;
                w.boots_at = Some(now.plus(Duration::from_secs(10)));
                w.forced_down = false;
                w.status = ServiceStatus::Enabled;
                w.reason = None;
                self.log(|| format!("  operator: brings {h} back"));
            }
        }
        self.leadership();
    }

    fn heal(&mut self) {
        let now = self.run.now();
        let due = |t: &mut Option<qfence_core::Millis>| {
            let d = t.is_some_and(|t| t <= now);
            if d {
                *t = None;
            }
            d
        };
        let u = &mut self.heal_at;
        if due(&mut u.partition) {
            for h in self.run.world.hosts.values_mut() {
                h.partitioned = false;
            }
        }
        if due(&mut u.recording) {
            self.run.world.recording = true;
        }
        if due(&mut u.nova) {
            self.run.observer.nova_reachable = true;
        }
        if due(&mut u.quorum) {
            self.run.observer.quorum = true;
        }
        if due(&mut u.scheduler) {
            self.run.world.schedulers_up = true;
        }
        if due(&mut u.disabled) {
            self.run.disabled = false;
        }
        if due(&mut u.lost_site) {
            self.run.observer.lost_sites.clear();
        }
    }

    fn leadership(&mut self) {
        let now = self.run.now();
        let r = &mut self.rng;
        if r.permille(20) {
            // A new leader: the old one's lease ran out; what it had running is refused by
            // the executor (older term) and its readings and results stay with it.
            self.run.term = Term(self.run.term.0 + 1);
            self.run.leader = true;
            self.run.results.clear();
            self.run.fences.clear();
            let t = self.run.term;
            self.log(|| format!("  cluster: new leader, term {t}"));
        } else if r.permille(20) {
            self.run.leader = false;
        } else if r.permille(900) {
            self.run.leader = true;
        }
        self.run.lease_until = now.plus(Duration::from_secs(10));
        if self.rng.permille(15) {
            // The lease runs out before the next decision.
            self.run.lease_until = now;
        }
    }

    /// Now and then a deposed leader decides from an old state: its lease has run out.
    fn deposed(&mut self, step: usize) -> Result<(), Violation> {
        if self.history.is_empty() || !self.rng.permille(30) {
            return Ok(());
        }
        let i = self.rng.below(self.history.len() as u64) as usize;
        let (old, term) = self.history[i].clone();
        if term >= self.run.term {
            return Ok(());
        }
        self.stats.deposed += 1;
        let leadership = Leadership {
            leader: true,
            term,
            lease_until: self.run.now(),
        };
        let d = self.run.decide_on(&old, leadership);
        self.checker
            .decision(step, &self.run, &old, leadership, &d, None)?;
        if let Some(ch) = &d.state_change
            && self.run.state.apply(ch).is_ok()
        {
            return Err(self.checker.violation(
                step,
                Invariant::CurrentTermOnly,
                "a deposed leader's write was accepted".into(),
            ));
        }
        Ok(())
    }

    fn decide(&mut self, step: usize) -> Result<(), Violation> {
        let before = self.run.state.clone();
        let leadership = self.run.leadership();
        let from = self.run.queue.len();
        let d = self.run.decide();
        self.stats.decisions += 1;
        if self.keep {
            let line = format!("[{step}] {}", d.sentence);
            self.checker.trace.push(line);
            for c in &d.commands {
                let line = format!("  issue {c}");
                self.checker.trace.push(line);
            }
        }
        self.checker.decision(
            step,
            &self.run,
            &before,
            leadership,
            &d,
            Some(&self.run.state),
        )?;
        self.count(&d);
        if d.state_change.is_some() {
            self.history.push((before, leadership.term));
            if self.history.len() > 8 {
                self.history.remove(0);
            }
        }
        // Calls take their time, and a few answers are lost.
        for q in &mut self.run.queue[from..] {
            q.ready_at = q.at.plus(Duration::from_millis(self.rng.below(4000)));
            q.lost = self.rng.permille(20);
        }
        Ok(())
    }

    fn count(&mut self, d: &qfence_core::instance_ha::Decision) {
        use qfence_core::instance_ha::{Action, EventKind, Note};
        for c in &d.commands {
            match &c.action {
                Action::Fence { .. } => self.stats.fences += 1,
                Action::Evacuate { .. } => self.stats.evacuations += 1,
                Action::Unlock { .. } if c.incident.is_none() => self.stats.leftover_unlocks += 1,
                Action::Event { event } => match event.kind {
                    EventKind::Recovered => self.stats.recoveries += 1,
                    EventKind::SmartEvacuationFailed { .. } => self.stats.smart_failures += 1,
                    EventKind::LeftDisabled { .. } => self.stats.left_disabled += 1,
                    EventKind::GateClosed { .. } => self.stats.gate_trips += 1,
                    EventKind::Resumed { .. } => self.stats.resumes += 1,
                    _ => {}
                },
                _ => {}
            }
        }
        for n in &d.sentence.notes {
            match n {
                Note::Deferred { .. } => self.stats.deferred += 1,
                Note::KdumpWaiting { .. } => self.stats.kdump_waits += 1,
                _ => {}
            }
        }
    }
}

/// Schedules per invariant by default: six invariants make 1,200 a run.
pub const DEFAULT_SCHEDULES: u64 = 200;

/// Steps per schedule: about ten minutes of cloud time (3.5 s a step on average).
pub const STEPS: usize = 180;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs the schedules for one invariant: `QFENCE_IHA_SCHEDULES` of them (default
/// [`DEFAULT_SCHEDULES`]), or only `QFENCE_IHA_SEED` with its trace. Panics with the seed on
/// a violation.
pub fn run_invariant(invariant: Invariant) {
    let steps = env_u64("QFENCE_IHA_STEPS").map_or(STEPS, |n| n as usize);
    if let Some(seed) = env_u64("QFENCE_IHA_SEED") {
        match run_schedule(seed, Rules::default(), &[invariant], steps, true) {
            Ok(s) => eprintln!("seed {seed}: {} holds ({s:?})", invariant.name()),
            Err(v) => panic!("{}", report(&v)),
        }
        return;
    }
    let n = env_u64("QFENCE_IHA_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let started = std::time::Instant::now();
    let total = crate::spread::over_cores(n, |i| {
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
    if n >= DEFAULT_SCHEDULES {
        assert!(
            total.fences > 0
                && total.evacuations > 0
                && total.recoveries > 0
                && total.smart_failures > 0
                && total.left_disabled > 0
                && total.gate_trips > 0
                && total.deferred > 0
                && total.kdump_waits > 0
                && total.resumes > 0
                && total.deposed > 0,
            "the schedules missed a behaviour: {total:?}"
        );
    }
}

/// The first schedule of `n` (from `base`) in which `mutation` breaks `invariant`.
pub fn catch(
    mutation: Mutation,
    invariant: Invariant,
    base: u64,
    n: u64,
) -> Option<(u64, Violation)> {
    let rules = Rules { mutation };
    (0..n).find_map(|i| {
        run_schedule(base + i, rules, &[invariant], STEPS, false)
            .err()
            .map(|v| (i + 1, v))
    })
}

/// A violation as printed: the invariant, the seed to replay, and the trace's tail.
pub fn report(v: &Violation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "invariant {} broken at step {} of seed {}: {}\nreplay: QFENCE_IHA_SEED={} cargo test -p qfence-core --test instance_ha {}",
        v.invariant.name(),
        v.step,
        v.seed,
        v.detail,
        v.seed,
        v.invariant.test_name()
    );
    for l in v.trace.iter().rev().take(60).rev() {
        let _ = writeln!(s, "{l}");
    }
    s
}
