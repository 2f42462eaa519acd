//! Benchmark: fence-to-verified-off time and CPU, qfence's Redfish driver against Pacemaker's
//! `fence_redfish` on the same sushy-tools emulator, side by side. A report, not a test.
//!
//! ```text
//! cargo bench -p qfence-controllers --bench fence_redfish          # release build
//! cargo bench -p qfence-controllers --bench fence_redfish --profile dev
//! QFENCE_BENCH_ROUNDS=5 QFENCE_BENCH_POWER_DELAY=2 ...
//! ```
//!
//! Each round powers node1 on (not measured), then fences it and stops the clock when a read
//! shows `PowerState=Off`:
//! - **qfence redfish**: `RedfishDriver::perform` in this process. CPU is this process's CPU
//!   time over the call (the sum of its threads' `/proc/self/task/*/schedstat`, in ns).
//! - **fence_redfish**: the agent run with `action=off` on stdin (it polls until Off itself).
//!   CPU is the children's CPU time over the run (`cutime + cstime` of `/proc/self/stat`, what
//!   `getrusage(RUSAGE_CHILDREN)` reports).
//! - **qfence fence-agent + fence_redfish**: qfence's generic driver wrapping the same agent
//!   (`off`, then `status` as the read-back): both CPU figures added.
//!
//! sushy applies power changes after `QFENCE_BENCH_POWER_DELAY` seconds (default 2; its own
//! default is a random 1–11 s, which would swamp the comparison).

// A benchmark measures real elapsed time on the machine's monotonic clock.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qfence_controllers::fence_agent::FenceAgentDriver;
use qfence_controllers::redfish::RedfishDriver;
use qfence_controllers::{CallContext, Driver, Secret, Target};
use qfence_model::config::{RedfishAuth, TlsTrust};
use qfence_model::{ControllerId, FenceLevel, OrchestratorId, SiteId};

const NODE1: &str = "11111111-1111-4111-8111-111111111111";

fn self_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
                .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

fn clk_tck() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100)
}

fn children_cpu_ns(tck: u64) -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 16 and 17 of stat(5); `after` starts at field 3.
    let ticks: u64 = [13, 14]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<u64>().ok())
        .sum();
    ticks * 1_000_000_000 / tck
}

fn ctx(secs: u64) -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("bench").unwrap(),
        Duration::from_secs(secs),
    )
}

fn target() -> Target {
    Target {
        capability: "power.off".into(),
        resource: NODE1.into(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    }
}

#[derive(Default)]
struct Col {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Col {
    fn row(&self, name: &str) {
        let stats = |v: &[f64]| {
            let mut s = v.to_vec();
            s.sort_by(f64::total_cmp);
            let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
            (
                mean,
                s.first().copied().unwrap_or(0.0),
                s.last().copied().unwrap_or(0.0),
            )
        };
        let (wm, wmin, wmax) = stats(&self.wall);
        let (cm, cmin, cmax) = stats(&self.cpu);
        println!(
            "{name:<36} {:>3}  {wm:>7.2} s ({wmin:.2}–{wmax:.2})   {:>8.1} ms ({:.1}–{:.1})",
            self.wall.len(),
            cm * 1e3,
            cmin * 1e3,
            cmax * 1e3
        );
    }
}

fn main() {
    let rounds: usize = std::env::var("QFENCE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let delay = std::env::var("QFENCE_BENCH_POWER_DELAY").unwrap_or_else(|_| "2".into());
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators");
    let run = tempfile::Builder::new()
        .prefix("qfence-bench-")
        .tempdir()
        .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(tools.join("start-redfish-sushy.sh"))
        .env("QFENCE_EMU_RUN", run.path())
        .env("REDFISH_PORT", port.to_string())
        .env("REDFISH_POWER_DELAY", &delay)
        .output()
        .expect("tools/emulators/start-redfish-sushy.sh (install with tools/emulators/install.sh)");
    assert!(
        out.status.success(),
        "sushy did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stop = || {
        let _ = Command::new(tools.join("stop.sh"))
            .arg("redfish-sushy")
            .env("QFENCE_EMU_RUN", run.path())
            .output();
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoint = url::Url::parse(&format!("https://127.0.0.1:{port}")).unwrap();
    let ca = run.path().join("sushy/ca.pem").display().to_string();
    let redfish = RedfishDriver::new(
        ControllerId::new("bench-bmc").unwrap(),
        &endpoint,
        "admin",
        RedfishAuth::Basic,
        &TlsTrust::CaFile(ca),
        Some(Secret::new("password".into())),
    )
    .unwrap();
    let port_s = port.to_string();
    let uri = format!("/redfish/v1/Systems/{NODE1}");
    let options: BTreeMap<String, String> = [
        ("ip", "127.0.0.1"),
        ("ipport", port_s.as_str()),
        ("username", "admin"),
        ("ssl_insecure", "1"),
        ("systems_uri", uri.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let agent = FenceAgentDriver::new(
        ControllerId::new("bench-agent").unwrap(),
        "fence_redfish",
        &options,
        FenceLevel::Compute,
        Some(Secret::new("password".into())),
    )
    .unwrap();
    let tck = clk_tck();
    let power_on = || {
        rt.block_on(redfish.undo(&ctx(60), &target()))
            .expect("power on");
    };
    // Warm up: TLS setup, the agent's metadata, Python's file cache.
    power_on();
    rt.block_on(agent.check(&ctx(30), &target()))
        .expect("agent status");

    let (mut q, mut fr, mut qa) = (Col::default(), Col::default(), Col::default());
    for round in 1..=rounds {
        power_on();
        let (c0, t0) = (self_cpu_ns(), Instant::now());
        let r = rt
            .block_on(redfish.perform(&ctx(60), &target()))
            .expect("qfence fence");
        q.wall.push(t0.elapsed().as_secs_f64());
        q.cpu.push((self_cpu_ns() - c0) as f64 / 1e9);
        assert!(r.holds);

        power_on();
        let (k0, t0) = (children_cpu_ns(tck), Instant::now());
        let mut child = Command::new("fence_redfish")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fence_redfish (Debian package fence-agents)");
        let mut stdin = child.stdin.take().unwrap();
        for (k, v) in &options {
            writeln!(stdin, "{k}={v}").unwrap();
        }
        writeln!(stdin, "action=off\npassword=password").unwrap();
        drop(stdin);
        let status = child.wait().unwrap();
        fr.wall.push(t0.elapsed().as_secs_f64());
        fr.cpu.push((children_cpu_ns(tck) - k0) as f64 / 1e9);
        assert!(status.success(), "fence_redfish off failed");

        power_on();
        let (c0, k0, t0) = (self_cpu_ns(), children_cpu_ns(tck), Instant::now());
        let r = rt
            .block_on(agent.perform(&ctx(60), &target()))
            .expect("agent fence");
        qa.wall.push(t0.elapsed().as_secs_f64());
        qa.cpu
            .push(((self_cpu_ns() - c0) + (children_cpu_ns(tck) - k0)) as f64 / 1e9);
        assert!(r.holds);
        eprintln!("round {round}/{rounds} done");
    }
    stop();
    println!(
        "\nfence to verified off, sushy-tools 2.2.0 on 127.0.0.1, power delay {delay} s, {} build",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!(
        "{:<36} {:>3}  {:>22}   {:>24}",
        "", "n", "wall: mean (min–max)", "CPU: mean (min–max)"
    );
    q.row("qfence redfish driver");
    fr.row("fence_redfish (off)");
    qa.row("qfence fence-agent + fence_redfish");
}
