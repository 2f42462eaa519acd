//! An imagined cloud for Instance HA's tests: compute hosts with BMCs, nova-compute
//! heartbeats, servers, migrations, a scheduler, behaving as the Compute API reference says
//! (a forced-down service is `down`; evacuation needs the source service down and a host to go
//! to; a migration record goes accepted → done or error). And a runtime that polls it, runs the
//! core's commands against it and turns the answers into the next snapshot, as the real one
//! will. Faults come from a [`Faults`] the test or the simulation supplies.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use qfence_core::instance_ha::{
    self, Action, Aggregate, CloudState, Command, ComputeService, Decision, Migration,
    MigrationStatus, NovaView, ObserverHealth, Rules, SchedulerService, Server, ServerId,
    ServerStatus, ServiceState, ServiceStatus, Snapshot, Target,
};
use qfence_core::{Leadership, Millis, Observation, Observed, OpId, OpResult, Outcome};
use qfence_model::config::{HostName, ValidatedConfig, load_str};
use qfence_model::{CloudId, Term};

/// Nova's `service_down_time`: a service not reporting this long is `down`.
pub const SERVICE_DOWN: Duration = Duration::from_secs(60);
/// How long a powered-on host takes to report again.
pub const BOOT: Duration = Duration::from_secs(20);
pub const T0: Millis = Millis(1_700_000_000_000);

pub fn host(s: &str) -> HostName {
    HostName::new(s).unwrap()
}

pub fn sid(s: &str) -> ServerId {
    ServerId(s.to_owned())
}

/// A configuration with a cloud `cloud` over `hosts` (named `dc1-...` or `dc2-...`, each with
/// a Redfish BMC `bmc-HOST`, unless listed in `no_bmc`), and `params` (YAML lines) for it.
pub fn config(hosts: &[String], no_bmc: &[&str], params: &[&str]) -> ValidatedConfig {
    let mut y = String::from(
        "cluster: {name: t}\nsites: {dc1: {}, dc2: {}}\norchestrators:\n  o1: {site: dc1, address: \"127.0.0.1:7401\"}\n  o2: {site: dc2, address: \"127.0.0.1:7402\"}\ncontrollers:\n  nova: {type: nova, endpoint: \"https://127.0.0.1:5000/v3\", site: dc1, reach: [dc2], secret: nova, username: qfence, project: admin}\n",
    );
    for h in hosts {
        if no_bmc.contains(&h.as_str()) {
            continue;
        }
        let site = if h.starts_with("dc2") { "dc2" } else { "dc1" };
        let other = if site == "dc1" { "dc2" } else { "dc1" };
        y.push_str(&format!(
            "  bmc-{h}: {{type: redfish, endpoint: \"https://127.0.0.1:8443\", site: {site}, reach: [{other}], secret: bmc, username: root}}\n"
        ));
    }
    y.push_str("instance_ha:\n  cloud:\n    nova: nova\n    host_rules:\n");
    for site in ["dc1", "dc2"] {
        y.push_str(&format!(
            "      - {{match: \"{site}-*\", controller: \"bmc-{{short}}\", capability: power.off, resource: \"1\", site: {site}}}\n"
        ));
    }
    for p in params {
        y.push_str(&format!("    {p}\n"));
    }
    match load_str(&y, "test.yaml") {
        Ok(l) => l.config,
        Err(e) => panic!(
            "{y}\n{}",
            e.iter().map(|i| format!("{i}\n")).collect::<String>()
        ),
    }
}

/// One compute host of the world.
#[derive(Debug, Clone)]
pub struct WHost {
    pub powered: bool,
    /// Hung or crashed: powered but not reporting.
    pub crashed: bool,
    /// Cut off from Nova by the network: not reporting.
    pub partitioned: bool,
    /// Reports again from then, after a power-on.
    pub boots_at: Option<Millis>,
    pub zone: String,
    pub status: ServiceStatus,
    pub forced_down: bool,
    pub reason: Option<String>,
    pub updated_at: Option<Millis>,
    /// Sends fence_kdump messages every 10 s until then.
    pub kdump_until: Option<Millis>,
    pub last_kdump: Option<Millis>,
    /// Its nova-compute ran at the last step: one that starts again cleans up.
    pub was_running: bool,
}

impl WHost {
    pub fn reporting(&self, now: Millis) -> bool {
        self.running(now) && !self.partitioned
    }

    /// Its nova-compute runs (whether Nova hears it or not).
    pub fn running(&self, now: Millis) -> bool {
        self.powered && !self.crashed && self.boots_at.is_none_or(|b| now >= b)
    }
}

/// An evacuation under way in the world.
#[derive(Debug, Clone)]
struct Moving {
    server: ServerId,
    migration: u64,
    done_at: Millis,
    success: bool,
    dest: HostName,
}

/// What a command's call does, as the faults decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Done,
    Failed,
    /// No answer; `applied` says whether it took anyway.
    Unknown {
        applied: bool,
    },
}

/// Where the world's faults come from.
pub trait Faults {
    fn fate(&mut self, _cmd: &Command) -> Fate {
        Fate::Done
    }
    /// What a fence read-back returns, given the truth.
    fn read(&mut self, _host: &HostName, truth: Observed) -> Observed {
        truth
    }
    /// Whether an accepted evacuation succeeds, and how long it takes.
    fn evacuation(&mut self, _server: &ServerId) -> (bool, Duration) {
        (true, Duration::from_secs(10))
    }
}

/// No faults at all.
#[derive(Debug, Default)]
pub struct NoFaults;
impl Faults for NoFaults {}

#[derive(Debug, Clone)]
pub struct World {
    pub now: Millis,
    pub hosts: BTreeMap<HostName, WHost>,
    pub servers: BTreeMap<ServerId, Server>,
    pub migrations: Vec<Migration>,
    moving: Vec<Moving>,
    pub schedulers_up: bool,
    /// Nova records heartbeats (a broken conductor freezes every `updated_at`).
    pub recording: bool,
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    pub images: BTreeMap<String, BTreeMap<String, String>>,
    pub aggregates: Vec<Aggregate>,
    /// Servers whose evacuations always fail.
    pub cursed: BTreeSet<ServerId>,
    pub kdump: BTreeMap<HostName, Vec<Millis>>,
    next_migration: u64,
}

impl World {
    /// `hosts`, each up with `per_host` ACTIVE servers (`HOST-sN`), one scheduler up.
    pub fn new(hosts: &[String], per_host: usize) -> Self {
        let mut w = World {
            now: T0,
            hosts: BTreeMap::new(),
            servers: BTreeMap::new(),
            migrations: Vec::new(),
            moving: Vec::new(),
            schedulers_up: true,
            recording: true,
            flavors: BTreeMap::new(),
            images: BTreeMap::new(),
            aggregates: Vec::new(),
            cursed: BTreeSet::new(),
            kdump: BTreeMap::new(),
            next_migration: 1,
        };
        w.flavors.insert("m1.small".into(), BTreeMap::new());
        w.images.insert("cirros".into(), BTreeMap::new());
        for h in hosts {
            let zone = if h.starts_with("dc2") { "az2" } else { "az1" };
            w.hosts.insert(
                host(h),
                WHost {
                    powered: true,
                    crashed: false,
                    partitioned: false,
                    boots_at: None,
                    zone: zone.into(),
                    status: ServiceStatus::Enabled,
                    forced_down: false,
                    reason: None,
                    updated_at: Some(T0),
                    kdump_until: None,
                    last_kdump: None,
                    was_running: true,
                },
            );
            for i in 0..per_host {
                w.add_server(&format!("{h}-s{i}"), h, ServerStatus::Active);
            }
        }
        w
    }

    pub fn add_server(&mut self, id: &str, on: &str, status: ServerStatus) {
        self.servers.insert(
            sid(id),
            Server {
                id: sid(id),
                name: id.to_owned(),
                host: host(on),
                status,
                task_state: None,
                flavor: "m1.small".into(),
                image: Some("cirros".into()),
                locked: false,
                locked_reason: None,
            },
        );
    }

    pub fn h(&mut self, name: &str) -> &mut WHost {
        self.hosts.get_mut(name).expect("a host of the world")
    }

    /// Nova's state of a service: `down` when forced down or not reporting for
    /// `service_down_time`.
    pub fn state(&self, h: &WHost) -> ServiceState {
        let fresh = h
            .updated_at
            .is_some_and(|u| self.now.since(u) <= SERVICE_DOWN);
        if fresh && !h.forced_down {
            ServiceState::Up
        } else {
            ServiceState::Down
        }
    }

    /// Time passes: heartbeats, kdump messages, evacuations ending.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now.plus(d);
        let now = self.now;
        let recording = self.recording;
        let mut started = Vec::new();
        for (name, h) in self.hosts.iter_mut() {
            let running = h.running(now);
            if running && !h.was_running {
                started.push(name.clone());
            }
            h.was_running = running;
            if recording && h.reporting(now) {
                h.updated_at = Some(now);
            }
            if h.kdump_until.is_some_and(|t| now < t)
                && h.last_kdump
                    .is_none_or(|l| now.since(l) >= Duration::from_secs(10))
            {
                h.last_kdump = Some(now);
                self.kdump.entry(name.clone()).or_default().push(now);
            }
        }
        // Nova: a nova-compute that starts destroys what was evacuated away from its host and
        // marks those records completed, also those still under way (they end `done` later).
        for m in &mut self.migrations {
            if started.contains(&m.source)
                && matches!(
                    m.status,
                    MigrationStatus::Accepted
                        | MigrationStatus::PreMigrating
                        | MigrationStatus::Done
                )
            {
                m.status = MigrationStatus::Completed;
            }
        }
        let due: Vec<Moving> = self
            .moving
            .iter()
            .filter(|m| m.done_at <= now)
            .cloned()
            .collect();
        self.moving.retain(|m| m.done_at > now);
        for m in due {
            let status = if m.success {
                MigrationStatus::Done
            } else {
                MigrationStatus::Error
            };
            if let Some(r) = self.migrations.iter_mut().find(|r| r.id == m.migration) {
                r.status = status;
            }
            if let Some(s) = self.servers.get_mut(&m.server) {
                if m.success {
                    s.host = m.dest.clone();
                    if s.status == ServerStatus::Error {
                        s.status = ServerStatus::Active;
                    }
                } else {
                    s.status = ServerStatus::Error;
                }
                s.task_state = None;
            }
        }
    }

    /// A host qfence may place servers on: enabled, `up`.
    fn placeable(&self, name: &HostName) -> bool {
        self.hosts.get(name).is_some_and(|h| {
            h.status == ServiceStatus::Enabled && self.state(h) == ServiceState::Up
        })
    }

    /// Runs one command's call. Returns its outcome (and for a check, the reading).
    pub fn apply(&mut self, cmd: &Command, faults: &mut dyn Faults) -> (Outcome, Option<Observed>) {
        let fate = faults.fate(cmd);
        let (outcome, applies) = match fate {
            Fate::Done => (Outcome::Done, true),
            Fate::Failed => (Outcome::Failed, false),
            Fate::Unknown { applied } => (Outcome::Unknown, applied),
        };
        let mut reading = None;
        let now = self.now;
        let outcome = match &cmd.action {
            Action::CheckFence { host, .. } => {
                let truth = if self.hosts[host].powered {
                    Observed::NotHeld
                } else {
                    Observed::Holds
                };
                reading = Some(if applies {
                    faults.read(host, truth)
                } else {
                    Observed::Unknown
                });
                Outcome::Done
            }
            _ if !applies => outcome,
            Action::Fence { host, .. } => {
                self.h(host.as_str()).powered = false;
                outcome
            }
            Action::PowerOn { host, .. } => {
                let h = self.h(host.as_str());
                h.powered = true;
                h.crashed = false;
                h.kdump_until = None;
                h.boots_at = Some(now.plus(BOOT));
                outcome
            }
            // Nova: every write to a service record moves its updated_at, as a report does.
            Action::Disable { host, reason } => {
                let h = self.h(host.as_str());
                h.status = ServiceStatus::Disabled;
                h.reason = Some(reason.to_string());
                h.updated_at = Some(now);
                outcome
            }
            Action::ForceDown { host } => {
                let h = self.h(host.as_str());
                h.forced_down = true;
                h.updated_at = Some(now);
                outcome
            }
            Action::Enable { host } | Action::EnableReserved { host, .. } => {
                let h = self.h(host.as_str());
                h.status = ServiceStatus::Enabled;
                h.reason = None;
                h.updated_at = Some(now);
                outcome
            }
            // Nova: refused (400) while evacuation records from the host read `done`.
            Action::ClearForcedDown { host }
                if self
                    .migrations
                    .iter()
                    .any(|m| m.source == *host && m.status == MigrationStatus::Done) =>
            {
                Outcome::Failed
            }
            Action::ClearForcedDown { host } => {
                let h = self.h(host.as_str());
                h.forced_down = false;
                h.updated_at = Some(now);
                outcome
            }
            Action::Lock { server, reason } => {
                if let Some(s) = self.servers.get_mut(server) {
                    s.locked = true;
                    s.locked_reason = Some(reason.clone());
                }
                outcome
            }
            Action::Unlock { server } => {
                if let Some(s) = self.servers.get_mut(server) {
                    s.locked = false;
                    s.locked_reason = None;
                }
                outcome
            }
            Action::Evacuate { server, from, to } => {
                self.evacuate(server, from, to.as_ref(), faults, outcome)
            }
            Action::FollowMigration { .. } | Action::Event { .. } => outcome,
        };
        (outcome, reading)
    }

    fn evacuate(
        &mut self,
        server: &ServerId,
        from: &HostName,
        to: Option<&HostName>,
        faults: &mut dyn Faults,
        outcome: Outcome,
    ) -> Outcome {
        let Some(s) = self.servers.get(server) else {
            return Outcome::Failed;
        };
        // Nova: 409 unless the source service is down; 400 for a status it does not evacuate.
        let source_down = self
            .hosts
            .get(from)
            .is_some_and(|h| self.state(h) == ServiceState::Down);
        if s.host != *from || !source_down || !s.status.evacuable() || s.task_state.is_some() {
            return Outcome::Failed;
        }
        let dest = match to {
            Some(t) if self.placeable(t) => t.clone(),
            Some(_) => return Outcome::Failed,
            None => match self.hosts.keys().find(|h| *h != from && self.placeable(h)) {
                Some(h) => h.clone(),
                None => return Outcome::Failed,
            },
        };
        let (mut success, took) = faults.evacuation(server);
        success &= !self.cursed.contains(server);
        let id = self.next_migration;
        self.next_migration += 1;
        self.migrations.push(Migration {
            id,
            server: server.clone(),
            source: from.clone(),
            dest: Some(dest.clone()),
            status: MigrationStatus::Accepted,
            created_at: self.now,
        });
        if let Some(s) = self.servers.get_mut(server) {
            s.task_state = Some("rebuilding".into());
        }
        self.moving.push(Moving {
            server: server.clone(),
            migration: id,
            done_at: self.now.plus(took),
            success,
            dest,
        });
        outcome
    }

    /// What a poll of Nova reads now.
    pub fn view(&self) -> NovaView {
        NovaView {
            read_at: self.now,
            computes: self
                .hosts
                .iter()
                .map(|(name, h)| ComputeService {
                    host: name.clone(),
                    zone: Some(h.zone.clone()),
                    state: self.state(h),
                    status: h.status,
                    updated_at: h.updated_at,
                    forced_down: h.forced_down,
                    disabled_reason: h.reason.clone(),
                })
                .collect(),
            schedulers: vec![SchedulerService {
                host: "controller-0".into(),
                state: if self.schedulers_up {
                    ServiceState::Up
                } else {
                    ServiceState::Down
                },
                status: ServiceStatus::Enabled,
            }],
            servers: self.servers.values().cloned().collect(),
            flavors: self.flavors.clone(),
            images: self.images.clone(),
            aggregates: self.aggregates.clone(),
            migrations: self.migrations.clone(),
            migrations_read_at: BTreeMap::new(),
        }
    }
}

/// A command on its way: when it is answered, and whether it is lost.
#[derive(Debug, Clone)]
pub struct Queued {
    pub cmd: Command,
    pub at: Millis,
    pub ready_at: Millis,
    pub lost: bool,
}

/// The runtime around the core: it polls the world, decides, writes the state change, and runs
/// the commands.
pub struct Run {
    pub world: World,
    pub config: ValidatedConfig,
    pub cloud: CloudId,
    pub state: CloudState,
    pub view: NovaView,
    pub fences: BTreeMap<HostName, Observation>,
    pub results: BTreeMap<OpId, OpResult>,
    pub queue: Vec<Queued>,
    pub observer: ObserverHealth,
    pub term: Term,
    pub leader: bool,
    pub lease_until: Millis,
    pub rules: Rules,
    /// Every command issued by an accepted decision, with the snapshot's poll time.
    pub issued: Vec<(Millis, Command)>,
    pub last: Option<Decision>,
    /// The configuration's `disabled: true` twin, used while `disabled` is set.
    pub disabled_config: Option<ValidatedConfig>,
    pub disabled: bool,
    /// Every command the executor ran, with its outcome and when.
    pub executed: Vec<(Command, Outcome, Millis)>,
}

impl Run {
    pub fn new(world: World, config: ValidatedConfig) -> Self {
        let view = world.view();
        let now = world.now;
        Run {
            world,
            config,
            cloud: CloudId::new("cloud").unwrap(),
            state: CloudState::default(),
            view,
            fences: BTreeMap::new(),
            results: BTreeMap::new(),
            queue: Vec::new(),
            observer: ObserverHealth {
                nova_reachable: true,
                quorum: true,
                lost_sites: BTreeSet::new(),
            },
            term: Term(1),
            leader: true,
            lease_until: now.plus(Duration::from_secs(3600)),
            rules: Rules::default(),
            issued: Vec::new(),
            last: None,
            disabled_config: None,
            disabled: false,
            executed: Vec::new(),
        }
    }

    pub fn now(&self) -> Millis {
        self.world.now
    }

    pub fn in_flight(&self) -> BTreeMap<OpId, Target> {
        self.queue
            .iter()
            .filter_map(|q| Some((q.cmd.op.clone(), q.cmd.action.target()?)))
            .collect()
    }

    /// Polls Nova: the view becomes what the world shows now (the follow-up reads kept).
    pub fn poll(&mut self) {
        let read = std::mem::take(&mut self.view.migrations_read_at);
        self.view = self.world.view();
        self.view.migrations_read_at = read;
    }

    pub fn leadership(&self) -> Leadership {
        Leadership {
            leader: self.leader,
            term: self.term,
            lease_until: self.lease_until,
        }
    }

    /// The configuration in force (its `disabled: true` twin while `disabled`).
    pub fn current_config(&self) -> &ValidatedConfig {
        match (&self.disabled_config, self.disabled) {
            (Some(c), true) => c,
            _ => &self.config,
        }
    }

    /// The snapshot of this instant, against `state` (the leader's own, or an older one).
    pub fn decide_on(&self, state: &CloudState, leadership: Leadership) -> Decision {
        let in_flight = self.in_flight();
        let config = self.current_config();
        let snap = Snapshot {
            config,
            cloud: self.cloud.clone(),
            state,
            nova: &self.view,
            fences: &self.fences,
            kdump: &self.world.kdump,
            results: &self.results,
            in_flight: &in_flight,
            leadership,
            observer: &self.observer,
            now: self.world.now,
        };
        instance_ha::decide_with(&snap, self.rules)
    }

    /// The leader decides: the state change is written, the commands queued (answered after
    /// `delay`, or never when `lost`).
    pub fn decide(&mut self) -> Decision {
        let d = self.decide_on(&self.state.clone(), self.leadership());
        if let Some(ch) = &d.state_change {
            self.state = self.state.apply(ch).expect("the leader's own write");
        }
        for c in &d.commands {
            self.issued.push((self.view.read_at, c.clone()));
            self.queue.push(Queued {
                cmd: c.clone(),
                at: self.now(),
                ready_at: self.now(),
                lost: false,
            });
        }
        self.last = Some(d.clone());
        d
    }

    /// Runs every queued command whose time has come, after half a second (calls take time).
    pub fn execute(&mut self, faults: &mut dyn Faults) {
        self.world.advance(Duration::from_millis(500));
        let now = self.now();
        let (due, later): (Vec<Queued>, Vec<Queued>) =
            self.queue.drain(..).partition(|q| q.ready_at <= now);
        self.queue = later;
        for q in due {
            if q.lost {
                continue;
            }
            // The executor refuses a deposed leader's command.
            let (outcome, reading) = if q.cmd.term < self.term {
                (Outcome::Unknown, None)
            } else {
                self.world.apply(&q.cmd, faults)
            };
            match &q.cmd.action {
                Action::CheckFence { host, .. } => {
                    let value = reading.unwrap_or(Observed::Unknown);
                    self.fences
                        .insert(host.clone(), Observation::new(value, now));
                }
                Action::FollowMigration { server } => {
                    self.view.migrations = self.world.migrations.clone();
                    self.view.migrations_read_at.insert(server.clone(), now);
                }
                _ => {}
            }
            self.results.insert(
                q.cmd.op.clone(),
                OpResult {
                    binding: None,
                    outcome,
                    at: now,
                },
            );
            self.executed.push((q.cmd, outcome, now));
        }
    }

    /// Decides and runs everything until nothing more is issued (at most `n` rounds), with no
    /// time passing: one poll's worth of work.
    pub fn settle(&mut self, faults: &mut dyn Faults, n: usize) -> Vec<Decision> {
        let mut out = Vec::new();
        for _ in 0..n {
            let d = self.decide();
            let idle = d
                .commands
                .iter()
                .all(|c| matches!(c.action, Action::Event { .. }));
            self.execute(faults);
            out.push(d);
            if idle {
                break;
            }
        }
        out
    }

    /// Time passes by `d`, in steps of at most 5 s, deciding and running at each; Nova is
    /// polled every `poll`.
    pub fn run_for(&mut self, d: Duration, poll: Duration, faults: &mut dyn Faults) {
        let end = self.now().plus(d);
        while self.now() < end {
            let step = Duration::from_secs(5).min(end.since(self.now()));
            self.world.advance(step);
            if self.now().since(self.view.read_at) >= poll {
                self.poll();
            }
            self.settle(faults, 10);
        }
    }
}
