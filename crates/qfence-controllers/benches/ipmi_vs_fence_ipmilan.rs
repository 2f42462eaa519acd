//! Fence-to-verified-off time and CPU: qfence's IPMI driver against
//! `fence_ipmilan --lanplus --cipher=3`, on the same `ipmi_sim` instance, side by side.
//!
//! `cargo bench -p qfence-controllers --bench ipmi_vs_fence_ipmilan` (QFENCE_BENCH_RUNS,
//! default 7). A report, not a test: it asserts only that every fence really ended off.
//!
//! Time is wall-clock from the start of the fence to a read-back showing power off (qfence's
//! `perform` returns only then; fence_ipmilan polls `chassis power status` itself before it
//! exits 0). CPU is from /proc: for qfence, the CPU time of the thread running the
//! current-thread runtime (all of the driver's work); for fence_ipmilan, the waited-for
//! children's user + system time (python3 and every ipmitool it runs). The BMC's CPU is in
//! neither.

// A benchmark measures real elapsed time on the machine's monotonic clock.
#![allow(clippy::disallowed_methods)]

// The tests' emulator starter, which `support.rs` uses as `crate::emulators`.
#[path = "../tests/it/emulators.rs"]
mod emulators;
#[path = "../tests/it/ipmi/support.rs"]
mod ipmi_support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipmi_support::{Sim, ctx, driver, target};
use qfence_controllers::Driver;
use qfence_controllers::ipmi::IpmiDriver;

/// CPU time this thread has run, in ns (the current-thread runtime does all of qfence's work
/// on it); finer than the 10 ms ticks of /proc/self/stat.
fn own_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("read /proc/thread-self/schedstat")
}

/// (own user+system, waited-for children's user+system), in clock ticks.
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // fields after the parenthesised command name; utime is field 14 of the whole line
    let rest = &stat[stat.rfind(')').expect("stat has a comm") + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f[11] + f[12], f[13] + f[14])
}

fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

async fn power_on(d: &IpmiDriver) {
    let r = d
        .undo(&ctx(30), &target("power.off", &[]))
        .await
        .expect("power on");
    assert!(!r.holds, "{}", r.detail);
    // let the fake host settle on its serial link before the next fence
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn fence_ipmilan(port: u16, extra: &str) -> bool {
    // Options on stdin, as Pacemaker passes them (the password stays out of our argv).
    let mut child = Command::new("fence_ipmilan")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fence_ipmilan is installed (Debian fence-agents)");
    write!(
        child.stdin.take().expect("stdin"),
        "action=off\nip=127.0.0.1\nipport={port}\nusername=admin\npassword=password\nlanplus=1\ncipher=3\n{extra}"
    )
    .expect("write options");
    child.wait().expect("wait fence_ipmilan").success()
}

#[derive(Default)]
struct Row {
    ms: Vec<f64>,
    cpu_ms: f64,
}

impl Row {
    fn print(&self, name: &str) {
        let mut v = self.ms.clone();
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        println!(
            "| {name:<48} | {:>4} | {median:>9.0} | {:>7.0} | {:>7.0} | {:>10.1} |",
            v.len(),
            v[0],
            v[v.len() - 1],
            self.cpu_ms / v.len() as f64
        );
    }
}

fn main() {
    let runs: usize = std::env::var("QFENCE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let Some(sim) = Sim::start(60) else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let d = driver(&sim.endpoint(), "password");
    let off = target("power.off", &[]);
    let tick_ms = 1000.0 / ticks_per_second() as f64;
    let mut qfence = Row::default();
    let mut agent = Row::default();
    let mut agent_no_wait = Row::default();

    rt.block_on(async {
        for i in 0..runs {
            eprintln!("run {}/{runs}", i + 1);

            power_on(&d).await;
            let c0 = own_cpu_ns();
            let t = Instant::now();
            let r = d.perform(&ctx(30), &off).await.expect("qfence fence");
            qfence.ms.push(t.elapsed().as_secs_f64() * 1000.0);
            qfence.cpu_ms += (own_cpu_ns() - c0) as f64 / 1e6;
            assert!(r.holds && !r.detail.starts_with("already"), "{}", r.detail);

            for (row, extra) in [(&mut agent, ""), (&mut agent_no_wait, "power_wait=0\n")] {
                power_on(&d).await;
                let (_, c0) = cpu_ticks();
                let t = Instant::now();
                let ok = fence_ipmilan(sim.port, extra);
                row.ms.push(t.elapsed().as_secs_f64() * 1000.0);
                row.cpu_ms += (cpu_ticks().1 - c0) as f64 * tick_ms;
                assert!(ok, "fence_ipmilan -o off failed");
                let r = d.check(&ctx(10), &off).await.expect("read back");
                assert!(r.holds, "fence_ipmilan said off but {}", r.detail);
            }
        }
        power_on(&d).await;
    });

    println!();
    println!(
        "IPMI fence-to-verified-off against ipmi_sim (UDP 127.0.0.1:{}), {runs} runs each",
        sim.port
    );
    println!(
        "| tool                                             | runs | median ms | min ms  | max ms  | CPU ms/run |"
    );
    println!(
        "|--------------------------------------------------|------|-----------|---------|---------|------------|"
    );
    qfence.print("qfence IpmiDriver (lanplus, cipher 3)");
    agent.print("fence_ipmilan --lanplus --cipher=3");
    agent_no_wait.print("fence_ipmilan --lanplus --cipher=3 power_wait=0");
    println!(
        "(qfence CPU: its thread's schedstat, ns; fence_ipmilan CPU: waited-for children in {tick_ms:.0} ms ticks; fence_ipmilan's default power_wait is 2 s)"
    );
}
