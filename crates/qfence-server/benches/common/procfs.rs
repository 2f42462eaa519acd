//! What the benchmarks read of this machine and of their own process from /proc: the load
//! average, memory (VmRSS, VmHWM) and CPU per thread name, so a figure says whose it is.
//! Included by each benchmark with `#[path]` (a bench has no shared crate of its own).

/// Linux's USER_HZ on every architecture qfence targets (reading sysconf would need unsafe).
const TICKS_PER_SECOND: f64 = 100.0;

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A field of /proc/self/status in KiB.
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(str::to_owned))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// utime + stime in seconds from a stat line (fields after the parenthesised name).
fn stat_cpu(stat: &str) -> f64 {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // rest starts at field 3 (state); utime is field 14, stime 15.
    (ticks(11) + ticks(12)) as f64 / TICKS_PER_SECOND
}

/// CPU seconds so far: the whole process (dead threads included), and the live threads whose
/// name starts with `prefix`.
pub fn cpu(prefix: &str) -> (f64, f64) {
    let process = std::fs::read_to_string("/proc/self/stat").map_or(0.0, |s| stat_cpu(&s));
    let mut threads = 0.0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end().starts_with(prefix) {
                threads +=
                    std::fs::read_to_string(task.path().join("stat")).map_or(0.0, |s| stat_cpu(&s));
            }
        }
    }
    (process, threads)
}
