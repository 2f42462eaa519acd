//! `cargo bench -p qfence-server --bench instance_ha_scale [-- OPTIONS]`: issue 15's Instance
//! HA benchmark. Prints figures; asserts nothing.
//!
//! The cloud in one process, as the runtime tests of Instance HA build it
//! (`tests/runtime/instance_ha.rs`): the Nova simulator (qfence-lab) with `--hosts` compute
//! hosts holding `--instances` servers between them and `--spares` empty hosts to take them, a
//! Redfish simulator as every host's BMC (each host's power line wired to its nova-compute),
//! the Nova API slowed by `--latency-ms` on every answer, and one orchestrator (`dc1-a`, a
//! one-voter cluster) running the real Instance HA loop, drivers and cluster writes.
//!
//! Each worker count runs in a child process of its own, in phases: start the simulators and
//! the orchestrator, wait for the loop's first decision with every host up, idle for
//! `--idle-seconds`, then stop the `--hosts` hosts' heartbeats in one instant (as the runtime
//! tests kill a host) and start the clock. It stops when every server is ACTIVE, with no task,
//! on another host than before, as the simulator holds it (read every 20 ms); the run then
//! waits for the failed hosts to come back into service. First host down, first fenced and
//! the first evacuation sent are read from the orchestrator's event log afterwards.
//!
//! CPU is read per thread from /proc/self/task as in `failover_scale`: the simulators run on
//! one Tokio runtime (threads `lab-sim`), the orchestrator on another (`qfence-orch`).

// A benchmark measures real elapsed time on the machine's clocks.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::process::Command as Process;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use qfence_lab::lab::Cloud as LabCloud;
use qfence_lab::nova::{Host, MigrationStatus, NovaState, VmState};
use qfence_runtime::InstanceHa;
use qfence_runtime::events::{Event, EventKind};
use qfence_server::testing::lab::Orchestrator;

#[path = "common/procfs.rs"]
mod procfs;
use procfs::{cpu, load_average, status_kib};

const SIM_THREADS: &str = "lab-sim";
const ORCH_THREADS: &str = "qfence-orch";
/// Nova reads a host down this long after its last heartbeat (the runtime tests' value; a
/// real Nova's `service_down_time` is 60 s). It is part of every "from death" figure.
const DOWN_AFTER: Duration = Duration::from_secs(2);
/// How often the simulator is read for evacuated servers.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// What the command line asks for.
#[derive(Debug, Clone)]
struct Options {
    workers: Vec<u32>,
    hosts: usize,
    spares: usize,
    instances: usize,
    latency_ms: u64,
    rebuild_ms: u64,
    poll_ms: u64,
    evacuation_poll_ms: u64,
    idle: Duration,
    limit: Duration,
    /// Run one worker count in this process (the parent passes it to each child).
    child: bool,
}

const USAGE: &str = "usage: instance_ha_scale [--workers N[,N...]] [--hosts N] [--spares N] \
                     [--instances N] [--latency-ms MS] [--rebuild-ms MS] [--poll-ms MS] \
                     [--evacuation-poll-ms MS] [--idle-seconds S] [--limit-seconds S]";

impl Options {
    fn parse() -> Result<Self> {
        let mut o = Self {
            workers: Vec::new(),
            hosts: 20,
            spares: 4,
            instances: 1000,
            latency_ms: 50,
            rebuild_ms: 0,
            poll_ms: 1000,
            evacuation_poll_ms: 100,
            idle: Duration::from_secs(5),
            limit: Duration::from_secs(900),
            child: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = |name: &str| -> Result<String> {
                args.next().with_context(|| format!("{name} needs a value"))
            };
            let number = |name: &str, v: String| -> Result<u64> {
                v.parse()
                    .with_context(|| format!("{name} takes a whole number, not {v:?}"))
            };
            match a.as_str() {
                // cargo bench passes --bench to every bench binary.
                "--bench" => {}
                "--child" => o.child = true,
                "--workers" => {
                    for w in value(&a)?.split(',') {
                        o.workers.push(u32::try_from(number(&a, w.to_owned())?)?);
                    }
                }
                "--hosts" => o.hosts = usize::try_from(number(&a, value(&a)?)?)?,
                "--spares" => o.spares = usize::try_from(number(&a, value(&a)?)?)?,
                "--instances" => o.instances = usize::try_from(number(&a, value(&a)?)?)?,
                "--latency-ms" => o.latency_ms = number(&a, value(&a)?)?,
                "--rebuild-ms" => o.rebuild_ms = number(&a, value(&a)?)?,
                "--poll-ms" => o.poll_ms = number(&a, value(&a)?)?,
                "--evacuation-poll-ms" => o.evacuation_poll_ms = number(&a, value(&a)?)?,
                "--idle-seconds" => o.idle = Duration::from_secs(number(&a, value(&a)?)?),
                "--limit-seconds" => o.limit = Duration::from_secs(number(&a, value(&a)?)?),
                other => bail!("unknown argument {other:?}; {USAGE}"),
            }
        }
        if o.workers.is_empty() {
            o.workers = vec![4, 32];
        }
        if o.workers.contains(&0) {
            bail!("--workers takes counts of 1 or more");
        }
        if o.hosts == 0 || o.spares == 0 || o.instances < o.hosts {
            bail!(
                "--hosts and --spares take 1 or more, and --instances at least one per failed \
                 host; {USAGE}"
            );
        }
        if o.poll_ms < 100 || o.evacuation_poll_ms < 100 {
            bail!(
                "--poll-ms and --evacuation-poll-ms take 100 or more (the configuration's floor)"
            );
        }
        Ok(o)
    }

    fn total_hosts(&self) -> usize {
        self.hosts + self.spares
    }

    /// The least `threshold_percent` that lets all the failed hosts through: the core closes
    /// the gate when failed × 100 > hosts × threshold.
    fn threshold_percent(&self) -> usize {
        (self.hosts * 100).div_ceil(self.total_hosts())
    }

    /// The lower bound: instances × latency / workers.
    fn bound_ms(&self, workers: u32) -> f64 {
        self.instances as f64 * self.latency_ms as f64 / f64::from(workers)
    }

    /// The arguments that give a child the same settings, running `workers`.
    fn child_args(&self, workers: u32) -> Vec<String> {
        let pairs = [
            ("--workers", workers.to_string()),
            ("--hosts", self.hosts.to_string()),
            ("--spares", self.spares.to_string()),
            ("--instances", self.instances.to_string()),
            ("--latency-ms", self.latency_ms.to_string()),
            ("--rebuild-ms", self.rebuild_ms.to_string()),
            ("--poll-ms", self.poll_ms.to_string()),
            ("--evacuation-poll-ms", self.evacuation_poll_ms.to_string()),
            ("--idle-seconds", self.idle.as_secs().to_string()),
            ("--limit-seconds", self.limit.as_secs().to_string()),
        ];
        let mut args = vec!["--child".to_owned()];
        for (k, v) in pairs {
            args.push(k.to_owned());
            args.push(v);
        }
        args
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let o = Options::parse()?;
    if o.child {
        let workers = *o.workers.first().context("a child runs one worker count")?;
        let figures = one(workers, &o)?;
        // The parent reads this one line.
        println!("FIGURES {}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    println!(
        "instance_ha_scale: {} cores, load average {} at start",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
    );
    println!("{}", settings(&o));
    let me = std::env::current_exe()?;
    let mut rows = Vec::new();
    for &w in &o.workers {
        eprintln!("--- workers {w}");
        let out = Process::new(&me)
            .args(o.child_args(w))
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().find_map(|l| l.strip_prefix("FIGURES ")) {
            Some(json) => rows.push(serde_json::from_str::<Figures>(json)?),
            None => eprintln!("workers {w}: the run failed ({})", out.status),
        }
    }
    println!("{}", table(&rows, &o));
    println!("load average at end: {}", load_average());
    Ok(())
}

/// What is set, and why, in words.
fn settings(o: &Options) -> String {
    format!(
        "cloud: {hosts} compute hosts fail at once with {inst} servers between them, {spares} \
         empty hosts take them; Nova answers every call {lat} ms late; Nova reads a host down \
         {down} s after its last heartbeat; a simulated rebuild takes {rebuild} ms.\n\
         instance_ha: smart_evacuation true; poll_seconds {poll}; evacuation_poll_seconds \
         {epoll} (at its floor: a followed evacuation's migration is read no sooner than this \
         after its last read, a poll's included; the simulated rebuilds take --rebuild-ms, so \
         a longer setting would mostly measure itself); threshold_percent {thr} ({hosts} of \
         {total} hosts is {pct:.1} %: the least threshold that lets them through, the default \
         50 would stop everything); \
         max_hosts_per_cycle {hosts} (the default 10 would start half the fences a poll \
         later); heartbeat_cliff_percent 100 ({hosts} of {total} heartbeats lost in one instant \
         is what the cliff reads as the network, and it would hold fencing back for \
         heartbeat_cliff_cycles polls); aggregate_max_failures unset (no limit, the default; \
         the one aggregate has no qfence:max_failures); delta_seconds 20; the Nova \
         controller's timeout_seconds 10.",
        hosts = o.hosts,
        inst = o.instances,
        spares = o.spares,
        total = o.total_hosts(),
        lat = o.latency_ms,
        down = DOWN_AFTER.as_secs(),
        rebuild = o.rebuild_ms,
        poll = o.poll_ms as f64 / 1000.0,
        epoll = o.evacuation_poll_ms as f64 / 1000.0,
        thr = o.threshold_percent(),
        pct = o.hosts as f64 * 100.0 / o.total_hosts() as f64,
    )
}

/// What one run measured; times in ms from the hosts' death, `None` when never seen.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Figures {
    workers: u32,
    first_down_ms: Option<u64>,
    first_fenced_ms: Option<u64>,
    all_fenced_ms: Option<u64>,
    first_evacuation_ms: Option<u64>,
    /// Every server ACTIVE elsewhere; `None` when the limit passed first.
    all_evacuated_ms: Option<u64>,
    /// How many were when the run ended.
    evacuated: usize,
    /// Evacuations finished (migration `done`) by then, from the simulator's records: the
    /// median's time.
    p50_done_ms: Option<u64>,
    /// Every failed host enabled, reporting, forced-down cleared.
    all_back_ms: Option<u64>,
    /// Evacuation records Nova holds at the end (more than the servers: retries).
    migrations: usize,
    /// Instance HA commands whose result was not done (failed or UNKNOWN).
    not_done: usize,
    /// The Instance HA decisions recorded (a sentence recorded when it changes).
    decisions: usize,
    idle_seconds: f64,
    idle_orch_cpu_s: f64,
    run_seconds: f64,
    run_orch_cpu_s: f64,
    run_process_cpu_s: f64,
    hwm_kib: u64,
    load_average: String,
}

fn table(rows: &[Figures], o: &Options) -> String {
    let secs = |ms: Option<u64>| {
        ms.map_or_else(|| "—".to_owned(), |m| format!("{:.2}", m as f64 / 1000.0))
    };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:>7} | {:>6} {:>7} {:>7} {:>7} | {:>9} {:>8} {:>7} {:>7} {:>6} | {:>7} | {:>6} {:>6} {:>5} | {:>9} {:>9} {:>9} {:>8} {:>8}",
        "workers",
        "down",
        "fenced",
        "all fen",
        "1st evac",
        "all evac",
        "evac ph",
        "bound",
        "ratio",
        "p50",
        "back",
        "migr",
        "!done",
        "dec",
        "idle core",
        "run cores",
        "run CPU s",
        "proc s",
        "peak MiB"
    );
    for r in rows {
        let bound = o.bound_ms(r.workers);
        let phase = r
            .all_evacuated_ms
            .zip(r.first_evacuation_ms)
            .map(|(a, f)| a.saturating_sub(f));
        let ratio = phase.map_or_else(|| "—".to_owned(), |p| format!("{:.1}×", p as f64 / bound));
        let all = r.all_evacuated_ms.map_or_else(
            || format!("> limit ({}/{})", r.evacuated, o.instances),
            |m| format!("{:.2}", m as f64 / 1000.0),
        );
        let _ = writeln!(
            t,
            "{:>7} | {:>6} {:>7} {:>7} {:>7} | {:>9} {:>8} {:>7.2} {:>7} {:>6} | {:>7} | {:>6} {:>6} {:>5} | {:>9.3} {:>9.3} {:>9.2} {:>8.2} {:>8.1}",
            r.workers,
            secs(r.first_down_ms),
            secs(r.first_fenced_ms),
            secs(r.all_fenced_ms),
            secs(r.first_evacuation_ms),
            all,
            secs(phase),
            bound / 1000.0,
            ratio,
            secs(r.p50_done_ms),
            secs(r.all_back_ms),
            r.migrations,
            r.not_done,
            r.decisions,
            r.idle_orch_cpu_s / r.idle_seconds.max(1e-9),
            r.run_orch_cpu_s / r.run_seconds.max(1e-9),
            r.run_orch_cpu_s,
            r.run_process_cpu_s,
            r.hwm_kib as f64 / 1024.0,
        );
    }
    let _ = writeln!(
        t,
        "seconds from the hosts' death (heartbeats stopped) to: down (first host read down), \
         fenced / all fen (first / last \"fenced, read back\"), 1st evac (first evacuate \
         command sent), all evac (every server ACTIVE on another host than before, in the simulator), p50 \
         (half the evacuations' migrations done), back (every failed host re-enabled, \
         forced-down cleared);\nevac ph: first evacuation sent → all evacuated; bound: \
         instances × latency / workers; ratio: evac ph / bound; migr: evacuation records; \
         !done: Instance HA commands failed or UNKNOWN; dec: decision sentences recorded;\n\
         idle core / run cores / run CPU s: the orchestrator's threads, idle before the death \
         and from the death to every host back; proc s: the whole process (simulators \
         included) over the same run; peak MiB: the process's VmHWM (simulators included)."
    );
    t
}

fn runtime(name: &str) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()?)
}

fn host(n: usize) -> String {
    format!("compute-{n}")
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The cloud and its BMC, with each host's power wired to its nova-compute.
struct Cloud {
    /// Nova and the BMCs, each power line wired to its host (the lab's cloud).
    lab: LabCloud,
    /// The hosts that fail (`compute-1..=hosts`).
    failing: BTreeSet<String>,
    /// Each server's host before the death (a failed host back in service takes servers of
    /// the hosts evacuated after it).
    origin: BTreeMap<String, String>,
}

impl Cloud {
    /// The failing hosts hold the servers, as evenly as they divide; the spares none.
    fn state(o: &Options) -> NovaState {
        let mut state = NovaState::new(o.hosts, o.instances.div_ceil(o.hosts));
        // NovaState::new lays servers out host by host: the last hosts give up the surplus.
        let per_host = o.instances.div_ceil(o.hosts);
        let surplus = per_host * o.hosts - o.instances;
        let mut cut = BTreeSet::new();
        for k in 0..surplus {
            let h = host(o.hosts - (k % o.hosts));
            let idx = state
                .servers
                .iter()
                .rposition(|s| s.host == h && !cut.contains(&s.id))
                .expect("a server on the host");
            cut.insert(state.servers[idx].id.clone());
        }
        state.servers.retain(|s| !cut.contains(&s.id));
        for n in o.hosts + 1..=o.total_hosts() {
            state.hosts.push(Host::new(&host(n), n as u64));
            if let Some(a) = state.aggregates.first_mut() {
                a.hosts.push(host(n));
            }
        }
        state.service_down_time = DOWN_AFTER;
        state.evacuation.duration = Duration::from_millis(o.rebuild_ms);
        state
    }

    async fn start(o: &Options) -> Result<Self> {
        let state = Self::state(o);
        let origin = state
            .servers
            .iter()
            .map(|v| (v.id.clone(), v.host.clone()))
            .collect();
        Ok(Self {
            lab: LabCloud::start_with(state).await?,
            failing: (1..=o.hosts).map(host).collect(),
            origin,
        })
    }

    /// The configuration: one orchestrator, the Nova controller, the BMC, and the cloud
    /// `overcloud` with `workers` and the settings [`settings`] explains.
    fn config(&self, o: &Options, workers: u32) -> String {
        let pin = |fp: &str| format!("{{pin: \"sha256:{fp}\"}}");
        let hosts: String = (1..=o.total_hosts())
            .map(host)
            .map(|h| {
                format!("      {h}: {{controller: bmc, capability: power.off, resource: {h}}}\n")
            })
            .collect();
        format!(
            "cluster:\n  name: iha\nsites:\n  dc1: {{}}\norchestrators:\n  dc1-a: {{site: dc1, \
             address: \"127.0.0.1:7401\"}}\ncontrollers:\n  nova:\n    type: nova\n    \
             endpoint: {keystone}\n    site: dc1\n    secret: lab-nova\n    \
             application_credential_id: qfence\n    timeout_seconds: 10\n    tls: {nova_pin}\n  \
             bmc:\n    type: redfish\n    endpoint: {bmc}\n    site: dc1\n    secret: \
             lab-redfish\n    username: qfence\n    timeout_seconds: 5\n    tls: {bmc_pin}\n\
             instance_ha:\n  overcloud:\n    nova: nova\n    poll_seconds: {poll}\n    \
             delta_seconds: 20\n    smart_evacuation: true\n    workers: {workers}\n    \
             evacuation_poll_seconds: {epoll}\n    threshold_percent: {threshold}\n    \
             max_hosts_per_cycle: {failing}\n    heartbeat_cliff_percent: 100\n    hosts:\n\
             {hosts}",
            keystone = self.lab.nova.keystone_url(),
            nova_pin = pin(self.lab.nova.fingerprint()),
            bmc = self.lab.bmc.base_url(),
            bmc_pin = pin(self.lab.bmc.fingerprint()),
            poll = o.poll_ms as f64 / 1000.0,
            epoll = o.evacuation_poll_ms as f64 / 1000.0,
            threshold = o.threshold_percent(),
            failing = o.hosts,
        )
    }

    /// Every failing host's nova-compute dies in one instant.
    fn kill(&self) {
        self.lab.nova.update(|s| {
            for h in &self.failing {
                s.stop_heartbeat(h);
            }
        });
    }

    /// Servers ACTIVE, with no task, on another host than before the death (read under the
    /// simulator's lock, without copying its state).
    fn evacuated(&self) -> usize {
        self.lab.nova.update(|s| {
            s.servers
                .iter()
                .filter(|v| {
                    v.vm_state == VmState::Active
                        && v.task_state.is_none()
                        && self.origin.get(&v.id).is_some_and(|h| *h != v.host)
                })
                .count()
        })
    }

    /// Whether every failed host is enabled, reporting and no longer forced down.
    fn all_back(&self) -> bool {
        self.lab.nova.update(|s| {
            s.hosts
                .iter()
                .filter(|h| self.failing.contains(&h.name))
                .all(|h| h.alive && !h.disabled && !h.forced_down)
        })
    }

    /// Evacuation records, and when each finished `done` (ms since the Unix epoch).
    fn migrations(&self) -> (usize, Vec<u64>) {
        self.lab.nova.update(|s| {
            let mut done: Vec<u64> = s
                .migrations
                .iter()
                .filter(|m| matches!(m.status, MigrationStatus::Done | MigrationStatus::Completed))
                .map(|m| unix_ms(m.updated_at))
                .collect();
            done.sort_unstable();
            (s.migrations.len(), done)
        })
    }

    async fn stop(self) {
        self.lab.stop().await;
    }
}

/// Times read from the event log, in ms from `t0` (ms since the Unix epoch).
#[derive(Debug, Default)]
struct Logged {
    first_down: Option<u64>,
    first_fenced: Option<u64>,
    all_fenced: Option<u64>,
    first_evacuation: Option<u64>,
    not_done: usize,
    decisions: usize,
}

fn logged(events: &[Event], t0: u64, hosts: usize) -> Logged {
    let iha: Vec<&Event> = events
        .iter()
        .filter(|e| e.data.get("instance_ha").is_some() && e.time_ms >= t0)
        .collect();
    let first = |f: &dyn Fn(&Event) -> bool| {
        iha.iter()
            .find(|e| f(e))
            .map(|e| e.time_ms.saturating_sub(t0))
    };
    let fenced: Vec<u64> = iha
        .iter()
        .filter(|e| e.message.contains(": fenced, read back"))
        .map(|e| e.time_ms.saturating_sub(t0))
        .collect();
    Logged {
        first_down: first(&|e| e.message.ends_with(": host down")),
        first_fenced: fenced.first().copied(),
        all_fenced: (fenced.len() >= hosts)
            .then(|| fenced.last().copied())
            .flatten(),
        first_evacuation: first(&|e| {
            e.kind == EventKind::Command
                && e.message.starts_with("instance-ha overcloud: evacuate ")
        }),
        not_done: iha
            .iter()
            .filter(|e| {
                e.kind == EventKind::Result
                    && (e.message.contains(" failed: ") || e.message.contains(" UNKNOWN: "))
            })
            .count(),
        decisions: iha.iter().filter(|e| e.kind == EventKind::Decision).count(),
    }
}

/// One run with `workers`.
fn one(workers: u32, o: &Options) -> Result<Figures> {
    let sim_rt = runtime(SIM_THREADS)?;
    let orch_rt = runtime(ORCH_THREADS)?;
    let say = |what: &str| eprintln!("[workers {workers}] {what}");

    say("starting the simulators and the orchestrator");
    let cloud = sim_rt.block_on(Cloud::start(o))?;
    cloud
        .lab
        .nova
        .faults()
        .set_latency(Duration::from_millis(o.latency_ms));
    let text = cloud.config(o, workers);
    let orch = orch_rt.block_on(async {
        let orch = Orchestrator::start(&text, true).await?;
        tokio::spawn(InstanceHa::new(&orch.engine, orch.drivers.clone()).run(orch.stop.clone()));
        anyhow::Ok(orch)
    })?;
    let started = Instant::now();
    while !orch
        .engine
        .events()
        .iter()
        .any(|e| e.kind == EventKind::Decision && e.data.get("instance_ha").is_some())
    {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("no Instance HA decision within 120 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    say(&format!(
        "first decision after {:.1} s; idle for {} s",
        started.elapsed().as_secs_f64(),
        o.idle.as_secs()
    ));
    let (_, i0) = cpu(ORCH_THREADS);
    let idle_start = Instant::now();
    std::thread::sleep(o.idle);
    let (p1, t1) = cpu(ORCH_THREADS);
    let idle_seconds = idle_start.elapsed().as_secs_f64();

    say(&format!("{} hosts' nova-compute die", o.hosts));
    let t0 = unix_ms(SystemTime::now());
    let dead = Instant::now();
    cloud.kill();
    let (mut all_evacuated, mut all_back, mut evacuated) = (None, None, 0);
    let mut reported = Instant::now();
    while dead.elapsed() < o.limit && all_back.is_none() {
        let at = dead.elapsed().as_millis() as u64;
        if all_evacuated.is_none() {
            evacuated = cloud.evacuated();
            if evacuated == o.instances {
                all_evacuated = Some(at);
                say(&format!("all evacuated after {:.2} s", at as f64 / 1000.0));
            }
        } else if cloud.all_back() {
            all_back = Some(at);
        }
        if reported.elapsed() > Duration::from_secs(10) {
            reported = Instant::now();
            let sentence = orch
                .engine
                .events()
                .iter()
                .rev()
                .find(|e| e.kind == EventKind::Decision && e.data.get("instance_ha").is_some())
                .map(|e| e.message.clone())
                .unwrap_or_default();
            say(&format!(
                "{evacuated} of {} evacuated after {:.0} s; last decision: {sentence}",
                o.instances,
                dead.elapsed().as_secs_f64()
            ));
        }
        std::thread::sleep(WATCH_EVERY);
    }
    let run_seconds = dead.elapsed().as_secs_f64();
    let (p2, t2) = cpu(ORCH_THREADS);
    let events = orch.engine.events();
    let log = logged(&events, t0, o.hosts);
    let (migrations, done) = cloud.migrations();
    let p50_done_ms = done
        .get(done.len().saturating_sub(1) / 2)
        .map(|t| t.saturating_sub(t0));
    orch_rt.block_on(orch.shutdown());
    sim_rt.block_on(cloud.stop());
    Ok(Figures {
        workers,
        first_down_ms: log.first_down,
        first_fenced_ms: log.first_fenced,
        all_fenced_ms: log.all_fenced,
        first_evacuation_ms: log.first_evacuation,
        all_evacuated_ms: all_evacuated,
        evacuated,
        p50_done_ms,
        all_back_ms: all_back,
        migrations,
        not_done: log.not_done,
        decisions: log.decisions,
        idle_seconds,
        idle_orch_cpu_s: t1 - i0,
        run_seconds,
        run_orch_cpu_s: t2 - t1,
        run_process_cpu_s: p2 - p1,
        hwm_kib: status_kib("VmHWM"),
        load_average: load_average(),
    })
}
