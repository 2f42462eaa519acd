//! `cargo bench -p qfence-server --bench failover_scale [-- N...]`: N plans failing over
//! together (issue 5). Prints figures; asserts nothing.
//!
//! The lab in one process: one Redfish BMC per site, one Proxmox VE per site holding N VMs and
//! N replication jobs, one FortiOS with N VIPs, all on loopback with pinned certificates, and a
//! single orchestrator (`dc2-a`, a one-voter cluster at the surviving site) running the real
//! engine, executor and drivers. Every plan owns one VM at dc1 and one VIP; all plans share the
//! controllers and the two hosts, as on a real pair of clusters.
//!
//! Each N runs in a child process of its own (so VmHWM and RSS are that run's), in phases:
//! start the simulators (their memory is the baseline), start the orchestrator, wait until
//! every plan is steady (dc1 healthy, dc2 read FENCED), idle for `--idle-seconds`, then power
//! dc1's host off at its BMC (which darkens dc1's Proxmox API: the site is lost) and start the
//! clock. The clock stops for a plan when its VIP on the FortiOS simulator points at its dc2
//! address (polled every 10 ms); the run ends when every plan's has.
//!
//! CPU is read per thread from /proc/self/task: the simulators run on their own Tokio runtime
//! (threads `lab-sim`), the orchestrator on another (`qfence-orch`), so the orchestrator's CPU
//! is separated from the lab's. Memory is per process (the simulators included): the report
//! gives the orchestrator's share as RSS minus the simulators-only baseline.

// A benchmark measures real elapsed time on the machine's monotonic clock.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command as Process;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
use qfence_cluster::tls::CertificateAuthority;
use qfence_controllers::SecretStore;
use qfence_controllers::secrets::{ENV_PREFIX, SecretSource, env_name};
use qfence_core::{BindingKey, Observed, Phase, StoredPlanState};
use qfence_lab::lab::{self, Scenario, Sims};
use qfence_lab::redfish::PowerState;
use qfence_model::config::ValidatedConfig;
use qfence_model::{OrchestratorId, PlanId, SiteId};
use qfence_runtime::Metrics;
use qfence_runtime::PLAN_STATE_SCHEMA;
use qfence_runtime::events::{EventLog, JsonlStore};
use qfence_runtime::{ConfigCell, DriverExecutor, Engine, EngineOptions, LocalDrivers};
use tokio_util::sync::CancellationToken;

#[path = "common/procfs.rs"]
mod procfs;
use procfs::{cpu, load_average, status_kib};

const SIM_THREADS: &str = "lab-sim";
const ORCH_THREADS: &str = "qfence-orch";

/// What the command line asks for.
#[derive(Debug, Clone)]
struct Options {
    plans: Vec<usize>,
    idle: Duration,
    interval_seconds: u64,
    failover_after_seconds: u64,
    fence_timeout_seconds: u64,
    limit: Duration,
    /// Run one N in this process (the parent passes it to each child).
    child: bool,
}

impl Options {
    fn parse() -> Result<Self> {
        let mut o = Self {
            plans: Vec::new(),
            idle: Duration::from_secs(10),
            interval_seconds: 1,
            failover_after_seconds: 4,
            fence_timeout_seconds: 3,
            limit: Duration::from_secs(900),
            child: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = |name: &str| -> Result<u64> {
                args.next()
                    .with_context(|| format!("{name} needs a value"))?
                    .parse()
                    .with_context(|| format!("{name} takes a whole number"))
            };
            match a.as_str() {
                // cargo bench passes --bench to every bench binary.
                "--bench" => {}
                "--child" => o.child = true,
                "--idle-seconds" => o.idle = Duration::from_secs(value("--idle-seconds")?),
                "--interval-seconds" => o.interval_seconds = value("--interval-seconds")?,
                "--failover-after-seconds" => {
                    o.failover_after_seconds = value("--failover-after-seconds")?;
                }
                "--fence-timeout-seconds" => {
                    o.fence_timeout_seconds = value("--fence-timeout-seconds")?;
                }
                "--limit-seconds" => o.limit = Duration::from_secs(value("--limit-seconds")?),
                n => o.plans.push(n.parse().with_context(|| {
                    format!(
                        "{n:?} is not a plan count; usage: failover_scale [--idle-seconds S] \
                         [--interval-seconds S] [--failover-after-seconds S] \
                         [--fence-timeout-seconds S] [--limit-seconds S] [N...]"
                    )
                })?),
            }
        }
        if o.plans.is_empty() {
            o.plans = vec![1, 100, 1000, 5000];
        }
        if o.plans.contains(&0) || o.plans.iter().any(|&n| n > 60_000) {
            bail!("plan counts go from 1 to 60000 (each plan takes two addresses of a /16)");
        }
        Ok(o)
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
        let n = *o.plans.first().context("a child runs one plan count")?;
        let figures = one(n, &o)?;
        // The parent reads this one line.
        println!("FIGURES {}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    println!(
        "failover_scale: {} cores, load average {} at start; interval {} s, failover after {} s, fence timeout {} s, idle window {} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        o.interval_seconds,
        o.failover_after_seconds,
        o.fence_timeout_seconds,
        o.idle.as_secs()
    );
    let me = std::env::current_exe()?;
    let mut rows = Vec::new();
    for &n in &o.plans {
        eprintln!("--- {n} plans");
        let out = Process::new(&me)
            .args([
                "--child".to_owned(),
                "--idle-seconds".to_owned(),
                o.idle.as_secs().to_string(),
                "--interval-seconds".to_owned(),
                o.interval_seconds.to_string(),
                "--failover-after-seconds".to_owned(),
                o.failover_after_seconds.to_string(),
                "--fence-timeout-seconds".to_owned(),
                o.fence_timeout_seconds.to_string(),
                "--limit-seconds".to_owned(),
                o.limit.as_secs().to_string(),
                n.to_string(),
            ])
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().find_map(|l| l.strip_prefix("FIGURES ")) {
            Some(json) => rows.push(serde_json::from_str::<Figures>(json)?),
            None => eprintln!("{n} plans: the run failed ({})", out.status),
        }
    }
    println!("{}", table(&rows));
    println!("load average at end: {}", load_average());
    Ok(())
}

/// What one run measured.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Figures {
    plans: usize,
    /// Decisions recorded as "left alone" for want of a lease during the whole run.
    #[serde(default)]
    left_alone: usize,
    /// From the orchestrator's start to every plan steady.
    settle_ms: u64,
    /// Site lost → every plan's VIP at dc2; `None` when the limit passed first.
    all_ms: Option<u64>,
    /// How many VIPs had moved when the run ended.
    moved: usize,
    p50_ms: u64,
    p99_ms: u64,
    first_ms: u64,
    sims_rss_kib: u64,
    idle_rss_kib: u64,
    failover_rss_max_kib: u64,
    hwm_kib: u64,
    idle_seconds: f64,
    idle_orch_cpu_s: f64,
    idle_process_cpu_s: f64,
    failover_seconds: f64,
    failover_orch_cpu_s: f64,
    failover_process_cpu_s: f64,
    load_average: String,
}

fn table(rows: &[Figures]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:>6} {:>9} {:>10} {:>8} {:>8} {:>8} | {:>9} {:>9} {:>9} | {:>10} {:>10} | {:>11} {:>11} | {:>6}",
        "plans",
        "settle s",
        "all VIPs s",
        "first s",
        "p50 s",
        "p99 s",
        "sims MiB",
        "idle MiB",
        "peak MiB",
        "idle cores",
        "fail cores",
        "fail CPU s",
        "proc CPU s",
        "alone"
    );
    for r in rows {
        let secs = |ms: u64| ms as f64 / 1000.0;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let all = r.all_ms.map_or_else(
            || format!("> limit ({}/{})", r.moved, r.plans),
            |ms| format!("{:.2}", secs(ms)),
        );
        let _ = writeln!(
            t,
            "{:>6} {:>9.1} {:>10} {:>8.2} {:>8.2} {:>8.2} | {:>9.1} {:>9.1} {:>9.1} | {:>10.3} {:>10.3} | {:>11.2} {:>11.2} | {:>6}",
            r.plans,
            secs(r.settle_ms),
            all,
            secs(r.first_ms),
            secs(r.p50_ms),
            secs(r.p99_ms),
            mib(r.sims_rss_kib),
            mib(r.idle_rss_kib),
            mib(r.failover_rss_max_kib.max(r.hwm_kib)),
            r.idle_orch_cpu_s / r.idle_seconds,
            r.failover_orch_cpu_s / r.failover_seconds.max(1e-9),
            r.failover_orch_cpu_s,
            r.failover_process_cpu_s,
            r.left_alone,
        );
    }
    let _ = writeln!(
        t,
        "settle: orchestrator start → every plan steady; all VIPs / first / p50 / p99: dc1's host \
         powered off → VIPs at dc2;\nMiB: process RSS (sims only before the orchestrator starts; \
         idle; peak = VmHWM); cores and fail CPU s: the orchestrator's threads only; proc CPU s: \
         the whole process (simulators included) during the failover;\nalone: decisions recorded as \
         \"left alone\" for want of a lease over the whole run (one orchestrator: should be 0)."
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

fn loopback() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

/// Every plan's settings: the command line's timings, and dc2 powered on when promoted.
fn plan_lines(o: &Options) -> String {
    format!(
        "    interval_seconds: {interval}\n    recovery_after_seconds: {recovery}\n    \
         failover_after_seconds: {failover}\n    fence_timeout_seconds: {fence}\n    \
         unfence_on_promote: true\n",
        fence = o.fence_timeout_seconds,
        interval = o.interval_seconds,
        recovery = (o.failover_after_seconds / 2).max(1),
        failover = o.failover_after_seconds,
    )
}

/// Listings and single reads (VMs, then replication jobs) both Proxmox simulators have
/// answered.
fn vm_reads(sims: &Sims) -> [u64; 4] {
    use std::sync::atomic::Ordering::Relaxed;
    let (a, b) = (sims.pve1.reads(), sims.pve2.reads());
    [
        a.listings.load(Relaxed) + b.listings.load(Relaxed),
        a.status_current.load(Relaxed) + b.status_current.load(Relaxed),
        a.job_listings.load(Relaxed) + b.job_listings.load(Relaxed),
        a.job_status.load(Relaxed) + b.job_status.load(Relaxed),
    ]
}

/// Which of the `waiting` VIPs (index, name, dc2 address) now point at dc2. Names and
/// addresses are made once by the caller: this runs under the FortiOS simulator's lock,
/// which the orchestrator's VIP changes need too (at 5,000 plans, building them here on
/// every poll kept the lock so busy that VIP changes timed out).
fn at_dc2(sims: &Sims, waiting: &[(usize, String, String)]) -> Vec<usize> {
    sims.fgt.edit(|s| {
        let vips = &s.vdoms["root"].vips;
        waiting
            .iter()
            .filter(|(_, name, addr)| {
                vips.get(name)
                    .is_some_and(|v| v.mappedip == [addr.as_str()])
            })
            .map(|(i, _, _)| *i)
            .collect()
    })
}

/// The orchestrator's own secret store, from a map (the process environment stays untouched).
fn secrets() -> SecretStore {
    let values: BTreeMap<String, String> = lab::SECRETS
        .into_iter()
        .map(|(k, v)| (env_name(ENV_PREFIX, k), v.to_owned()))
        .collect();
    SecretStore::new(vec![SecretSource::Env {
        prefix: ENV_PREFIX.into(),
        lookup: Arc::new(move |k| values.get(k).cloned()),
    }])
}

/// The key of `at`'s binding `index` of `plan` in `config` (keys name bindings by id).
fn key_in(config: &ValidatedConfig, plan: &PlanId, at: &str, index: usize) -> BindingKey {
    let p = config.plan(plan.as_str()).expect("a plan in force");
    BindingKey::site_at(p, &site(at), index)
}

fn site(s: &str) -> SiteId {
    SiteId::new(s).expect("a site name")
}

/// One orchestrator at dc2, its cluster node and engine, running.
struct Orchestrator {
    engine: Engine,
    node: ClusterNode,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    drivers: Arc<LocalDrivers>,
    _dir: tempfile::TempDir,
}

impl Orchestrator {
    async fn start(config_text: &str) -> Result<Self> {
        let loaded = match qfence_model::config::load_str(config_text, "bench.yaml") {
            Ok(l) => l,
            Err(issues) => bail!(
                "the generated configuration does not validate: {:#?}",
                issues.iter().take(5).collect::<Vec<_>>()
            ),
        };
        let config = loaded.config;
        let dir = tempfile::tempdir()?;
        let me = OrchestratorId::new("dc2-a")?;
        let ca = CertificateAuthority::generate("bench")?;
        let tls = ca.issue("dc2-a", &["127.0.0.1".into()])?;
        let cell = ConfigCell::new(config.clone(), config_text);
        let drivers = Arc::new(LocalDrivers::build(me.clone(), &cell, &secrets()));
        if !drivers.unavailable().is_empty() {
            bail!("drivers missing: {:?}", drivers.unavailable());
        }
        let node = ClusterNode::start(
            NodeOptions {
                name: me,
                site: site("dc2"),
                witness: false,
                listen: loopback(),
                advertise: None,
                data_dir: dir.path().join("data"),
                tls,
                timing: Timing::fast(),
                admin_api: false,
            },
            Arc::new(DriverExecutor(drivers.clone())),
        )
        .await?;
        node.initialize().await?;
        let log = EventLog::open(JsonlStore::open(dir.path().join("events.jsonl"))?)?;
        let options = EngineOptions::for_config(&config);
        let engine = Engine::new(cell, node.clone(), log, Metrics::new(), options);
        let stop = CancellationToken::new();
        let task = tokio::spawn(engine.clone().run(stop.clone()));
        Ok(Self {
            engine,
            node,
            stop,
            task,
            drivers,
            _dir: dir,
        })
    }

    /// The key of `at`'s binding `index` of `plan` in the configuration in force.
    fn key(&self, plan: &PlanId, at: &str, index: usize) -> BindingKey {
        key_in(&self.engine.config(), plan, at, index)
    }

    /// Marks the plans seen with dc1's VM running and dc2's host off, and counts those that
    /// have been, and are now owned by dc1 and steady. A latch, because under load single
    /// checks time out (UNKNOWN) now and then, and all N are rarely fresh at one instant.
    fn steady(&self, plans: &[PlanId], seen: &mut [bool]) -> usize {
        let config = self.engine.config();
        // One copy of the replicated state for all plans (Engine::plan_state copies it per call).
        let cluster = self.node.state();
        let steady_at_dc1 = |p: &PlanId| {
            cluster
                .plans
                .get(p)
                .and_then(|r| r.state.decode::<StoredPlanState>(PLAN_STATE_SCHEMA).ok())
                .map(StoredPlanState::into_current)
                .is_some_and(|s| s.owner.as_str() == "dc1" && matches!(s.phase, Phase::Steady))
        };
        let mut ready = 0;
        for (p, seen) in plans.iter().zip(seen.iter_mut()) {
            let (dc1_health, dc2_fence) =
                (key_in(&config, p, "dc1", 3), key_in(&config, p, "dc2", 0));
            let view = self.engine.runtime(p);
            let holds = |k: &BindingKey| {
                view.observations
                    .get(k)
                    .is_some_and(|o| o.value == Observed::Holds)
            };
            *seen |= holds(&dc1_health) && holds(&dc2_fence);
            if *seen && steady_at_dc1(p) {
                ready += 1;
            }
        }
        ready
    }

    async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.node.shutdown().await;
        self.drivers.close().await;
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One run with `n` plans.
fn one(n: usize, o: &Options) -> Result<Figures> {
    let sim_rt = runtime(SIM_THREADS)?;
    let orch_rt = runtime(ORCH_THREADS)?;
    let say = |what: &str| eprintln!("[{n} plans] {what}");

    say("starting the simulators");
    // The lab's plan shape N times; each VM's replication syncs every 5 s.
    let scenario = Scenario::scaled(n, Duration::from_secs(5));
    let sims = sim_rt.block_on(Sims::start_with(&scenario))?;
    let sims_rss_kib = status_kib("VmRSS");
    let text = sims.scaled_config(&scenario.plans, &plan_lines(o));
    let plans: Vec<PlanId> = scenario
        .plans
        .iter()
        .map(|p| PlanId::new(p.name.as_str()))
        .collect::<Result<_, _>>()?;

    say("starting the orchestrator");
    let started = Instant::now();
    let orch = orch_rt.block_on(Orchestrator::start(&text))?;
    let settle_limit = o.limit;
    let mut reported = Instant::now();
    let mut seen = vec![false; n];
    loop {
        let ready = orch.steady(&plans, &mut seen);
        if ready == n {
            break;
        }
        if started.elapsed() > settle_limit {
            bail!("{ready} of {n} plans steady after {settle_limit:?}");
        }
        if reported.elapsed() > Duration::from_secs(10) {
            reported = Instant::now();
            let first = orch.engine.runtime(&plans[0]);
            say(&format!(
                "{ready} of {n} plans steady so far; {}: {}",
                plans[0],
                first.last_reason.as_deref().unwrap_or("no decision yet")
            ));
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
    let settle_ms = started.elapsed().as_millis() as u64;
    say(&format!(
        "steady after {:.1} s; idle for {} s",
        settle_ms as f64 / 1000.0,
        o.idle.as_secs()
    ));

    let (p0, t0) = cpu(ORCH_THREADS);
    let reads0 = vm_reads(&sims);
    let idle_start = Instant::now();
    std::thread::sleep(o.idle);
    let (p1, t1) = cpu(ORCH_THREADS);
    let idle_seconds = idle_start.elapsed().as_secs_f64();
    let reads1 = vm_reads(&sims);
    let rate = |i: usize| (reads1[i] - reads0[i]) as f64 / idle_seconds;
    say(&format!(
        "while idle, both Proxmox APIs answered per second {:.1} VM listings, {:.1} single-VM \
         reads, {:.1} replication listings, {:.1} single-job reads",
        rate(0),
        rate(1),
        rate(2),
        rate(3)
    ));
    let idle_rss_kib = status_kib("VmRSS");

    say("powering dc1's host off: the site is lost");
    let lost = Instant::now();
    if !sims.bmc1.set_power("pve-dc1-01", PowerState::Off) {
        bail!("bmc-dc1 has no system pve-dc1-01");
    }
    let mut done: Vec<Option<u64>> = vec![None; n];
    let mut left = n;
    let mut rss_max = 0;
    let mut samples = 0u64;
    let mut waiting: Vec<(usize, String, String)> = scenario
        .plans
        .iter()
        .enumerate()
        .map(|(i, p)| (i, p.vip.clone(), p.dc2.clone()))
        .collect();
    while left > 0 && lost.elapsed() < o.limit {
        let at = lost.elapsed().as_millis() as u64;
        let moved = at_dc2(&sims, &waiting);
        for &i in &moved {
            done[i] = Some(at);
            left -= 1;
        }
        if !moved.is_empty() {
            waiting.retain(|(i, _, _)| done[*i].is_none());
        }
        samples += 1;
        if samples.is_multiple_of(50) {
            rss_max = rss_max.max(status_kib("VmRSS"));
        }
        if reported.elapsed() > Duration::from_secs(10) {
            reported = Instant::now();
            // The first plan still waiting, and what it last said.
            if let Some(i) = done.iter().position(Option::is_none) {
                let view = orch.engine.runtime(&plans[i]);
                let read = |at: &str, index: usize| {
                    view.observations
                        .get(&orch.key(&plans[i], at, index))
                        .map_or_else(|| "never read".to_owned(), |o| o.detail.clone())
                };
                say(&format!(
                    "{} of {n} VIPs at dc2 so far; {}: {} [dc1 power.off read: {}] \
                     [dc2 replication.lag read: {}]",
                    n - left,
                    plans[i],
                    view.last_reason.as_deref().unwrap_or("no decision yet"),
                    read("dc1", 0),
                    read("dc2", 2)
                ));
                // What its commands on dc1's power fence came back with, newest last.
                let dc1_power = orch.key(&plans[i], "dc1", 0);
                for r in view
                    .results
                    .values()
                    .filter(|r| r.binding.as_ref() == Some(&dc1_power))
                    .rev()
                    .take(3)
                {
                    say(&format!(
                        "  dc1 power.off result at {}: {:?}",
                        r.at, r.outcome
                    ));
                }
            }
        }
        if left > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let failover_seconds = lost.elapsed().as_secs_f64();
    let (p2, t2) = cpu(ORCH_THREADS);
    rss_max = rss_max.max(status_kib("VmRSS"));
    let hwm_kib = status_kib("VmHWM");
    let mut times: Vec<u64> = done.iter().flatten().copied().collect();
    times.sort_unstable();
    let all_ms = (left == 0).then(|| times.last().copied().unwrap_or(0));
    say(&format!(
        "{} of {n} VIPs at dc2 after {failover_seconds:.2} s",
        n - left
    ));
    if left > 0 {
        // Plans that stopped for an operator (UNKNOWN fences after every attempt) are the safe
        // outcome, not a slow one: say how many, and the first one's words.
        let stopped: Vec<String> = plans
            .iter()
            .filter_map(|p| orch.engine.runtime(p).last_reason)
            .filter(|r| r.contains(" stopped at "))
            .collect();
        say(&format!(
            "{} of the {left} still waiting stopped for an operator{}",
            stopped.len(),
            stopped
                .first()
                .map(|r| format!(", e.g. {r}"))
                .unwrap_or_default()
        ));
    }

    // Decisions recorded as "left alone" (no lease) while this, the only orchestrator, led.
    let left_alone = orch
        .engine
        .events()
        .iter()
        .filter(|e| e.message.contains("left alone"))
        .count();
    // Each Redfish driver keeps one session (made again on 401): more would mean leaks.
    let open = |sims: &Sims| {
        format!(
            "bmc-dc1 {}, bmc-dc2 {}",
            sims.bmc1.snapshot().sessions.len(),
            sims.bmc2.snapshot().sessions.len()
        )
    };
    say(&format!("Redfish sessions open: {}", open(&sims)));
    orch_rt.block_on(orch.shutdown());
    std::thread::sleep(Duration::from_millis(500));
    say(&format!(
        "Redfish sessions open after the orchestrator stopped: {}",
        open(&sims)
    ));
    sim_rt.block_on(sims.stop());
    Ok(Figures {
        plans: n,
        left_alone,
        settle_ms,
        all_ms,
        moved: n - left,
        p50_ms: percentile(&times, 0.50),
        p99_ms: percentile(&times, 0.99),
        first_ms: times.first().copied().unwrap_or(0),
        sims_rss_kib,
        idle_rss_kib,
        failover_rss_max_kib: rss_max,
        hwm_kib,
        idle_seconds,
        idle_orch_cpu_s: t1 - t0,
        idle_process_cpu_s: p1 - p0,
        failover_seconds,
        failover_orch_cpu_s: t2 - t1,
        failover_process_cpu_s: p2 - p1,
        load_average: load_average(),
    })
}
