//! The seeded simulation: a cluster of two to four orchestrators over two sites (sometimes a
//! witness), agents and controllers, jobs that start on any orchestrator not read-only and
//! take a while, orchestrators that crash and restart forgetting they were read-only, leaders
//! that die, agents that ignore or half-follow migrate messages, lost commands, time that
//! jumps past retries and deadlines, and an operator who prepares and cancels at random. The
//! leader decides at every step and the checker (`check.rs`) checks the named invariants
//! after every decision.
//!
//! `QFENCE_MAINT_SCHEDULES` sets how many schedules the real rules run; `QFENCE_MAINT_SEED`
//! replays one and prints its trace. A failure prints the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use qfence_core::maintenance::{
    Action, Agent, AgentAlgorithm, Controller, Decision, Event, Job, JobKind, MaintenanceState,
    Mutation, Orchestrator, OrchestratorStatus, Request, Rules, Settings, Snapshot, decide_with,
    request_with,
};
use qfence_core::{Leadership, Millis};
use qfence_model::config::HostName;
use qfence_model::{ControllerId, OrchestratorId, SiteId, Term};

use crate::check::{Invariant, Violation, check};
use crate::fixture::{T0, c, h, o, site};

pub const STEPS: usize = 120;

/// splitmix64: tiny, seeded, good enough to shuffle schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

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

struct World {
    rng: Rng,
    orchestrators: BTreeMap<OrchestratorId, Orchestrator>,
    leader: Option<OrchestratorId>,
    term: u64,
    state: MaintenanceState,
    /// Jobs with the steps each still takes.
    jobs: BTreeMap<OrchestratorId, Vec<(Job, u32)>>,
    read_only: BTreeSet<OrchestratorId>,
    agents: BTreeMap<HostName, Agent>,
    controllers: BTreeMap<ControllerId, Controller>,
    settings: Settings,
    now: Millis,
    jobs_started: u64,
    /// Kept only when asked (a replay, or a violation's second run): formatting every step
    /// would cost most of the simulation's time.
    tracing: bool,
    trace: Vec<String>,
}

fn build(seed: u64, tracing: bool) -> World {
    let mut rng = Rng(seed);
    let mut orchestrators = BTreeMap::new();
    let n = 2 + rng.below(3);
    for i in 1..=n {
        let s = if i == 1 || rng.permille(450) {
            "dc1"
        } else {
            "dc2"
        };
        orchestrators.insert(o(&format!("o{i}")), crate::fixture::orch(s));
    }
    if rng.permille(300) {
        let mut w = crate::fixture::orch("dc3");
        w.witness = true;
        orchestrators.insert(o("w"), w);
    }
    let at = |s: &SiteId, m: &BTreeMap<OrchestratorId, Orchestrator>| -> Vec<OrchestratorId> {
        m.iter()
            .filter(|(_, v)| &v.site == s && !v.witness)
            .map(|(id, _)| id.clone())
            .collect()
    };
    let sites: Vec<SiteId> = [site("dc1"), site("dc2")]
        .into_iter()
        .filter(|s| !at(s, &orchestrators).is_empty())
        .collect();
    let mut agents = BTreeMap::new();
    for i in 0..rng.below(13) {
        let s = rng.pick(&sites).clone();
        let mut allowed = at(&s, &orchestrators);
        for k in (1..allowed.len()).rev() {
            let j = rng.below(k as u64 + 1) as usize;
            allowed.swap(k, j);
        }
        let connected = Some(rng.pick(&allowed).clone());
        agents.insert(h(&format!("h{i}")), Agent { allowed, connected });
    }
    let mut controllers = BTreeMap::new();
    for i in 0..1 + rng.below(3) {
        let s = rng.pick(&sites).clone();
        let mut ss = vec![s.clone()];
        if rng.permille(300) {
            ss.push(if s.as_str() == "dc1" {
                site("dc2")
            } else {
                site("dc1")
            });
        }
        let callers: Vec<OrchestratorId> = ss.iter().flat_map(|x| at(x, &orchestrators)).collect();
        let holder = Some(rng.pick(&callers).clone());
        controllers.insert(c(&format!("bmc{i}")), Controller { sites: ss, holder });
    }
    let ids: Vec<OrchestratorId> = orchestrators.keys().cloned().collect();
    let leader = Some(rng.pick(&ids).clone());
    World {
        rng,
        orchestrators,
        leader,
        term: 1,
        state: MaintenanceState::default(),
        jobs: BTreeMap::new(),
        read_only: BTreeSet::new(),
        agents,
        controllers,
        settings: Settings {
            timeout: Duration::from_secs(180),
            algorithm: AgentAlgorithm::Static,
            migrate_per_second: 3,
            retry: Duration::from_secs(5),
        },
        now: T0,
        jobs_started: 0,
        tracing,
        trace: Vec::new(),
    }
}

impl World {
    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.tracing {
            self.trace.push(line());
        }
    }

    fn alive(&self, id: &OrchestratorId) -> bool {
        self.orchestrators.get(id).is_some_and(|v| v.alive)
    }

    fn ids(&self) -> Vec<OrchestratorId> {
        self.orchestrators.keys().cloned().collect()
    }

    /// Time, jobs, crashes, restarts, elections and agents reconnecting by themselves.
    fn moves(&mut self) {
        let dt = if self.rng.permille(30) {
            30_000 + self.rng.below(170_000)
        } else {
            200 + self.rng.below(1300)
        };
        self.now = Millis(self.now.0 + dt);
        for js in self.jobs.values_mut() {
            for j in js.iter_mut() {
                j.1 = j.1.saturating_sub(1);
            }
            js.retain(|j| j.1 > 0);
        }
        for id in self.ids() {
            let free = self.alive(&id) && !self.read_only.contains(&id);
            if free && !self.orchestrators[&id].witness && self.rng.permille(250) {
                self.jobs_started += 1;
                let kind =
                    *self
                        .rng
                        .pick(&[JobKind::Fence, JobKind::Failover, JobKind::Evacuation]);
                let steps = 2 + self.rng.below(8) as u32;
                let job = Job {
                    kind,
                    subject: format!("j{}", self.jobs_started),
                };
                self.jobs.entry(id.clone()).or_default().push((job, steps));
            }
            if self.alive(&id) && self.rng.permille(20) {
                self.crash(&id);
            } else if !self.alive(&id) && self.rng.permille(150) {
                // A restart forgets it was read-only: the core must ask again.
                let v = self.orchestrators.get_mut(&id).unwrap();
                v.alive = true;
                v.renews = true;
                self.log(|| format!("{id} restarts"));
            }
        }
        if self.leader.is_none() {
            self.elect();
        }
        let ids = self.ids();
        for a in self.agents.values_mut() {
            if a.connected.is_none() && self.rng.permille(500) {
                a.connected = a
                    .allowed
                    .iter()
                    .find(|x| self.orchestrators[*x].alive && !self.read_only.contains(*x))
                    .cloned();
            }
        }
        let _ = ids;
    }

    fn crash(&mut self, id: &OrchestratorId) {
        let v = self.orchestrators.get_mut(id).unwrap();
        v.alive = false;
        v.renews = false;
        self.read_only.remove(id);
        self.jobs.remove(id);
        for a in self.agents.values_mut() {
            if a.connected.as_ref() == Some(id) {
                a.connected = None;
            }
        }
        self.log(|| format!("{id} crashes"));
        if self.leader.as_ref() == Some(id) {
            self.leader = None;
            self.elect();
        }
    }

    fn elect(&mut self) {
        let cands: Vec<OrchestratorId> = self
            .orchestrators
            .iter()
            .filter(|(id, v)| {
                v.alive && self.state.status_of(id) != OrchestratorStatus::Maintenance
            })
            .map(|(id, _)| id.clone())
            .collect();
        if cands.is_empty() {
            return;
        }
        let l = self.rng.pick(&cands).clone();
        self.term += 1;
        let term = self.term;
        self.log(|| format!("{l} leads in term {term}"));
        self.leader = Some(l);
    }

    fn jobs_view(&self) -> BTreeMap<OrchestratorId, Vec<Job>> {
        self.jobs
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.iter().map(|j| j.0.clone()).collect()))
            .collect()
    }

    /// Runs the decision's commands, each with its fate.
    fn execute(&mut self, d: &Decision) {
        for cmd in &d.commands {
            let ok = self.rng.permille(800);
            match &cmd.action {
                Action::GoReadOnly { orchestrator } if ok && self.alive(orchestrator) => {
                    self.read_only.insert(orchestrator.clone());
                }
                Action::EndReadOnly { orchestrator } if ok && self.alive(orchestrator) => {
                    self.read_only.remove(orchestrator);
                }
                Action::HandOverLeadership { to, .. } if ok && self.alive(to) => {
                    self.term += 1;
                    self.leader = Some(to.clone());
                    let term = self.term;
                    self.log(|| format!("{to} takes the lead in term {term}"));
                }
                Action::MigrateAgent { agent, to, .. } if ok => {
                    let next = to
                        .iter()
                        .find(|x| self.alive(x) && !self.read_only.contains(*x))
                        .cloned();
                    // Some agents drop their connection first and come back later by themselves.
                    let drop = self.rng.permille(150);
                    if let Some(a) = self.agents.get_mut(agent) {
                        a.connected = if drop { None } else { next };
                    }
                }
                Action::MoveSession { controller, to, .. } if ok && self.alive(to) => {
                    if let Some(ctl) = self.controllers.get_mut(controller) {
                        ctl.holder = Some(to.clone());
                    }
                }
                _ => {}
            }
        }
    }

    fn operator(&mut self) -> Option<Request> {
        let ids = self.ids();
        if self.rng.permille(120) {
            let algorithm = match self.rng.below(4) {
                0 => None,
                1 => Some(AgentAlgorithm::Static),
                2 => Some(AgentAlgorithm::RoundRobin),
                _ => Some(AgentAlgorithm::Shuffle),
            };
            return Some(Request::Prepare {
                orchestrator: self.rng.pick(&ids).clone(),
                algorithm,
            });
        }
        let out: Vec<OrchestratorId> = ids
            .into_iter()
            .filter(|x| self.state.status_of(x) != OrchestratorStatus::Up)
            .collect();
        if !out.is_empty() && self.rng.permille(40) {
            return Some(Request::Cancel {
                orchestrator: self.rng.pick(&out).clone(),
                rebalance: self.rng.permille(500),
            });
        }
        None
    }
}

/// What the schedules reached, so a simulation that never gets anywhere does not pass quietly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reached {
    pub started: u64,
    pub entered: u64,
    pub timed_out: u64,
    pub cancelled: u64,
    pub rebalanced: u64,
    pub resumed: u64,
    pub handovers: u64,
    pub migrations: u64,
    pub sessions: u64,
    pub refused: u64,
}

impl Reached {
    fn count(&mut self, d: &Decision) {
        for c in &d.commands {
            match &c.action {
                Action::Event { event } => match event {
                    Event::PreparationStarted { .. } => self.started += 1,
                    Event::EnteredMaintenance { .. } => self.entered += 1,
                    Event::TimedOut { .. } => self.timed_out += 1,
                    Event::Cancelled { .. } => self.cancelled += 1,
                    Event::Rebalanced { .. } => self.rebalanced += 1,
                    Event::Resumed { .. } => self.resumed += 1,
                    _ => {}
                },
                Action::HandOverLeadership { .. } => self.handovers += 1,
                Action::MigrateAgent { .. } => self.migrations += 1,
                Action::MoveSession { .. } => self.sessions += 1,
                _ => {}
            }
        }
    }

    fn add(&mut self, o: Reached) {
        self.started += o.started;
        self.entered += o.entered;
        self.timed_out += o.timed_out;
        self.cancelled += o.cancelled;
        self.rebalanced += o.rebalanced;
        self.resumed += o.resumed;
        self.handovers += o.handovers;
        self.migrations += o.migrations;
        self.sessions += o.sessions;
        self.refused += o.refused;
    }
}

/// Runs one schedule, checking `invs` after every decision.
pub fn run_schedule(
    seed: u64,
    rules: Rules,
    invs: &[Invariant],
    steps: usize,
    print: bool,
) -> Result<Reached, Violation> {
    let mut reached = Reached::default();
    let mut w = build(seed, print);
    for step in 0..steps {
        w.moves();
        let Some(me) = w.leader.clone() else {
            continue;
        };
        let req = w.operator();
        let jobs = w.jobs_view();
        let mut lines = Vec::new();
        // Decide and check on borrowed views of the world; apply afterwards.
        let outcome: Result<Vec<(Decision, MaintenanceState)>, (Invariant, String)> = {
            let s = Snapshot {
                me: me.clone(),
                leadership: Leadership {
                    leader: true,
                    term: Term(w.term),
                    lease_until: w.now.plus(Duration::from_secs(2)),
                },
                state: &w.state,
                orchestrators: &w.orchestrators,
                jobs: &jobs,
                read_only: &w.read_only,
                agents: &w.agents,
                controllers: &w.controllers,
                settings: w.settings,
                seed: seed ^ step as u64,
                now: w.now,
            };
            let mut decisions = Vec::new();
            if let Some(r) = &req {
                match request_with(&s, r, rules) {
                    Ok(d) => decisions.push(d),
                    Err(e) => {
                        reached.refused += 1;
                        if w.tracing {
                            lines.push(format!("{step}: {r:?} {e}"));
                        }
                    }
                }
            }
            if decisions.is_empty() {
                decisions.push(decide_with(&s, rules));
            }
            let mut out = Vec::new();
            let mut broken = None;
            for d in decisions {
                let after = match &d.state_change {
                    Some(ch) => w.state.apply(ch).expect("one writer"),
                    None => w.state.clone(),
                };
                if w.tracing {
                    lines.push(format!("{step} {me}: {}", d.sentence));
                }
                if let Some(e) = invs
                    .iter()
                    .find_map(|inv| check(*inv, &s, &d, &after).err().map(|e| (*inv, e)))
                {
                    broken = Some(e);
                    break;
                }
                out.push((d, after));
            }
            match broken {
                Some(e) => Err(e),
                None => Ok(out),
            }
        };
        w.trace.extend(lines);
        match outcome {
            Ok(ds) => {
                for (d, after) in ds {
                    reached.count(&d);
                    w.state = after;
                    w.execute(&d);
                }
            }
            Err((invariant, detail)) => {
                let trace = if w.tracing {
                    std::mem::take(&mut w.trace)
                } else {
                    // Again with the trace on: the schedule is a function of its seed.
                    match run_schedule(seed, rules, invs, step + 1, true) {
                        Err(v) => v.trace,
                        Ok(_) => vec![
                            "(the replay did not break: the simulation is not deterministic)"
                                .into(),
                        ],
                    }
                };
                return Err(Violation {
                    invariant,
                    seed,
                    step,
                    detail,
                    trace,
                });
            }
        }
    }
    if print && steps == STEPS {
        eprintln!("{}", w.trace.join("\n"));
    }
    Ok(reached)
}

pub fn report(v: &Violation) -> String {
    let tail: Vec<&String> = v.trace.iter().rev().take(12).rev().collect();
    format!(
        "{} broken at step {} of seed {:#x}: {}\n(replay: QFENCE_MAINT_SEED={:#x})\n{}",
        v.invariant.name(),
        v.step,
        v.seed,
        v.detail,
        v.seed,
        tail.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The first of `within` schedules from `base` where `mutation` breaks `inv`.
pub fn catch(
    mutation: Mutation,
    inv: Invariant,
    base: u64,
    within: u64,
) -> Option<(u64, Violation)> {
    (0..within).find_map(|i| {
        run_schedule(base + i, Rules { mutation }, &[inv], STEPS, false)
            .err()
            .map(|v| (i + 1, v))
    })
}

#[test]
fn the_real_rules_keep_every_invariant_in_every_schedule() {
    if let Ok(seed) = std::env::var("QFENCE_MAINT_SEED") {
        let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("a hex seed");
        if let Err(v) = run_schedule(seed, Rules::default(), &Invariant::ALL, STEPS, true) {
            panic!("{}", report(&v));
        }
        return;
    }
    let n: u64 = std::env::var("QFENCE_MAINT_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let started = Instant::now();
    let mut reached = Reached::default();
    for i in 0..n {
        match run_schedule(
            0x3A17_0000 + i,
            Rules::default(),
            &Invariant::ALL,
            STEPS,
            false,
        ) {
            Ok(r) => reached.add(r),
            Err(v) => panic!("{}", report(&v)),
        }
    }
    eprintln!(
        "{n} schedules of {STEPS} steps in {:?}: {reached:?}",
        started.elapsed()
    );
    let r = reached;
    let every = [
        r.started,
        r.entered,
        r.timed_out,
        r.cancelled,
        r.rebalanced,
        r.resumed,
        r.handovers,
        r.migrations,
        r.sessions,
        r.refused,
    ];
    assert!(
        n < 200 || every.iter().all(|x| *x > 0),
        "the schedules never reached some outcome: {r:?}"
    );
}
