//! `cargo bench -p qfence --bench pg_failover -- [--runs N] [--switchovers N]
//! [--soak-minutes M] [--show-events] [--keep] [PROFILE...]` (issue 19): a real PostgreSQL 15 pair on
//! loopback (tools/emulators/start-pg-pair.sh), the built `qfence serve` at dc2 over it, a
//! fence agent standing in for each host's BMC (`off` kills the server, `status` is OFF once
//! none runs) and a client inserting a row every 100 ms into whichever server takes writes.
//! Prints figures; asserts nothing.
//!
//! Per profile (`default`: nothing set; `definitive`: `failover_after_definitive: 2`; `fast`:
//! docs/postgres.md's fast profile), each run starts a fresh pair and a fresh orchestrator,
//! waits until the plan is steady, writes for 2 s plus a random part of an interval (the
//! kill's phase), kills the primary and times kill → first write acknowledged by the replica,
//! with the event log's breakdown, and counts acknowledged writes missing on the new primary.
//! Switchover runs time the longest write gap of `qfence plan switchover db --to dc2`, its
//! parts (the clean stop's CHECKPOINT and stop, the promotion, promoted → first write) and the
//! old primary's rejoin (first write at dc2 → dc1 streaming from dc2). The
//! soak runs every profile at once for M minutes through a delaying, "lossy" proxy on the
//! checks' path (proxy.rs) and counts failovers, which must be none.

mod orchestrator;
mod pair;
mod proxy;
mod writer;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use orchestrator::{Endpoints, Orchestrator};
use pair::Pair;
use writer::Writer;

/// Now, in milliseconds since the Unix epoch (qfence's one time helper).
pub fn now_ms() -> u64 {
    qfence_model::time::now_unix_ms()
}

/// A set of timings, as plan keys (and the controllers' timeouts).
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: &'static str,
    pub plan: Vec<&'static str>,
    pub pg_timeout: Option<f64>,
    pub fence_agent_timeout: Option<f64>,
    /// The check interval, for the kill's random phase.
    pub interval: Duration,
}

fn profile(name: &str) -> Option<Profile> {
    Some(match name {
        "default" => Profile {
            name: "default",
            plan: vec![],
            pg_timeout: None,
            fence_agent_timeout: None,
            interval: Duration::from_secs(2),
        },
        "definitive" => Profile {
            name: "definitive",
            plan: vec!["failover_after_definitive: 2"],
            pg_timeout: None,
            fence_agent_timeout: None,
            interval: Duration::from_secs(2),
        },
        // docs/postgres.md's fast profile (2026-12-08): a refused connection acts after two
        // readings; an unanswered check may take a second, and three seconds of them are
        // tolerated. With a 0.3 s timeout and a one-second window a loaded machine's slow
        // answers failed over a healthy pair (the soaks of 2026-12-03 and 2026-12-08).
        "fast" => Profile {
            name: "fast",
            plan: vec![
                "interval_seconds: 0.2",
                "failover_after_seconds: 3",
                "failover_after_definitive: 2",
                "fence_timeout_seconds: 1.5",
                "max_recoveries: 0",
            ],
            pg_timeout: Some(1.0),
            fence_agent_timeout: Some(0.5),
            interval: Duration::from_millis(200),
        },
        _ => return None,
    })
}

struct Options {
    profiles: Vec<Profile>,
    runs: usize,
    switchovers: usize,
    soak: Duration,
    show_events: bool,
    /// Keep the lab's directories (event logs, server logs) at exit, for a post-mortem.
    keep: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        profiles: vec![],
        runs: 8,
        switchovers: 3,
        soak: Duration::ZERO,
        show_events: false,
        keep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<u64> {
            args.next()
                .with_context(|| format!("{what} needs a number"))?
                .parse()
                .with_context(|| format!("{what} needs a number"))
        };
        match a.as_str() {
            "--bench" => {}
            "--runs" => o.runs = usize::try_from(num("--runs")?)?,
            "--switchovers" => o.switchovers = usize::try_from(num("--switchovers")?)?,
            "--soak-minutes" => o.soak = Duration::from_secs(60 * num("--soak-minutes")?),
            "--show-events" => o.show_events = true,
            "--keep" => o.keep = true,
            p => o
                .profiles
                .push(profile(p).with_context(|| format!("unknown profile or option {p}"))?),
        }
    }
    if o.profiles.is_empty() {
        o.profiles = ["default", "definitive", "fast"]
            .iter()
            .filter_map(|p| profile(p))
            .collect();
    }
    Ok(o)
}

struct Lab {
    exe: PathBuf,
    tools: PathBuf,
    root: PathBuf,
    agents: PathBuf,
}

impl Lab {
    fn new() -> Result<Self> {
        let root = PathBuf::from(format!("/tmp/qfpg-{}", std::process::id()));
        let agents = root.join("bin");
        pair::write_agent(&agents)?;
        Ok(Self {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_qfence")),
            tools: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators"),
            root,
            agents,
        })
    }

    /// A fresh pair and orchestrator in `name`, the plan steady; the proxy in front when `lossy`.
    async fn up(
        &self,
        name: &str,
        p: &Profile,
        ports: [u16; 2],
        lossy: bool,
    ) -> Result<(Pair, Orchestrator, u64)> {
        let pair = Pair::start(&self.tools, &self.root.join(name).join("pg"), ports)?;
        writer::create_table(&pair.url(0)).await?;
        let pg = if lossy {
            [proxy::start(ports[0]).await?, proxy::start(ports[1]).await?]
        } else {
            ports
        };
        let e = Endpoints {
            pg,
            sockets: pair.sockets.clone(),
            ports,
            passfile: pair.passfile()?,
        };
        let o = Orchestrator::start(
            &self.exe,
            &self.root.join(name).join("q"),
            &self.agents,
            p,
            &e,
        )
        .await?;
        let generation = o.wait_steady(Duration::from_secs(120)).await?;
        Ok((pair, o, generation))
    }
}

/// One kill: kill → first write on the replica, its breakdown, writes lost.
struct Failover {
    total_ms: u64,
    parts: Vec<(&'static str, Option<u64>)>,
    lost: usize,
}

async fn failover(lab: &Lab, p: &Profile, n: usize, show: bool) -> Result<Failover> {
    let (pair, o, _) = lab
        .up(&format!("{}-f{n}", p.name), p, [55433, 55434], false)
        .await?;
    let w = Writer::start(pair.ports);
    let phase = u64::try_from(p.interval.as_millis()).unwrap_or(1000) * (now_ms() % 1000) / 1000;
    tokio::time::sleep(Duration::from_millis(2000 + phase)).await;
    let kill = now_ms();
    pair.kill(&lab.agents.join("fence_pgkill"), 0)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let first = loop {
        if let Some(a) = w.acks().iter().find(|a| a.port == pair.ports[1]) {
            break a.at_ms;
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "no write on the replica within 120 s of the kill: {:?}",
                o.status().await
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let acks = w.stop().await;
    let lost = writer::lost(&pair.url(1), &acks).await?;
    let events = o.events();
    if show {
        for e in events
            .iter()
            .filter(|e| e["time_ms"].as_u64() >= Some(kill))
        {
            println!(
                "  +{:>6} ms {:<9} {}",
                e["time_ms"].as_u64().unwrap_or(0).saturating_sub(kill),
                e["kind"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            );
        }
    }
    let parts = breakdown(&events, kill);
    o.stop().await;
    drop(pair);
    Ok(Failover {
        total_ms: first - kill,
        parts,
        lost,
    })
}

/// When each step was first seen in the event log after the kill (ms after it).
fn breakdown(events: &[serde_json::Value], kill: u64) -> Vec<(&'static str, Option<u64>)> {
    let after: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["time_ms"].as_u64().is_some_and(|t| t >= kill))
        .collect();
    // The sentences are the engine's (qfence_core::reason): matched by how they start.
    let find = |kind: &str, start: &str| {
        after
            .iter()
            .find(|e| {
                e["kind"] == kind
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(start) && !m.contains("Status: ON"))
            })
            .and_then(|e| e["time_ms"].as_u64())
            .map(|t| t - kill)
    };
    vec![
        ("detected", find("result", "check does not hold")),
        ("decided", find("decision", "failing")),
        ("fenced", find("result", "fence done")),
        ("verified", find("decision", "db to dc2, switchover step")),
        ("promoted", find("result", "switchover done")),
        ("committed", find("decision", "committed")),
    ]
}

/// Whether the server at `url` is in recovery and streaming (rejoined as a replica).
async fn streaming(url: &str) -> bool {
    let Some(c) = writer::connect(url).await else {
        return false;
    };
    c.query_one(
        "SELECT pg_is_in_recovery() AND coalesce((SELECT status = 'streaming' \
         FROM pg_stat_wal_receiver), false)",
        &[],
    )
    .await
    .is_ok_and(|r| r.get::<_, bool>(0))
}

/// One switchover: the longest write gap and its parts, whether the old primary still runs,
/// and the time from the first write at dc2 until dc1 streams from it (rejoined), if it did
/// within 60 s.
struct Switchover {
    gap: u64,
    /// The clean stop's steps as its reading names them, and the promotion's.
    checkpoint: Option<u64>,
    stop: Option<u64>,
    promote: Option<u64>,
    /// From the promotion's result until the client's first write at dc2.
    first_write: Option<u64>,
    old_runs: bool,
    rejoin: Option<u64>,
}

/// The `N` of "`step` N ms" in a reading's detail (the PostgreSQL driver names its steps).
fn step_ms(detail: &str, step: &str) -> Option<u64> {
    let key = format!("{step} ");
    detail.match_indices(&key).find_map(|(i, _)| {
        let rest = &detail[i + key.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest[digits..]
            .starts_with(" ms")
            .then(|| rest[..digits].parse().ok())
            .flatten()
    })
}

/// The first result of `capability` at or after `since` whose reading names `step`'s time
/// (a perform's, not a check's): that time and the event's.
fn step_of(
    events: &[serde_json::Value],
    capability: &str,
    since: u64,
    step: &str,
) -> Option<(u64, u64)> {
    events.iter().find_map(|e| {
        if e["kind"] != "result"
            || e["data"]["capability"] != capability
            || e["time_ms"].as_u64() < Some(since)
        {
            return None;
        }
        Some((
            step_ms(e["message"].as_str()?, step)?,
            e["time_ms"].as_u64()?,
        ))
    })
}

async fn switchover(lab: &Lab, p: &Profile, n: usize) -> Result<Switchover> {
    let (pair, o, generation) = lab
        .up(&format!("{}-s{n}", p.name), p, [55443, 55444], false)
        .await?;
    let w = Writer::start(pair.ports);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let g = generation.to_string();
    let asked = now_ms();
    o.cli(&[
        "plan",
        "switchover",
        "db",
        "--to",
        "dc2",
        "--generation",
        &g,
    ])
    .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let first_at_dc2 = loop {
        if let Some(a) = w.acks().iter().find(|a| a.port == pair.ports[1]) {
            break a.at_ms;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no write at dc2 within 60 s of the switchover");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut rejoin = None;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < until {
        if streaming(&pair.url(0)).await {
            rejoin = Some(now_ms().saturating_sub(first_at_dc2));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let acks = w.stop().await;
    let gap = acks
        .windows(2)
        .map(|a| a[1].at_ms - a[0].at_ms)
        .max()
        .unwrap_or(0);
    let events = o.events();
    if rejoin.is_none() {
        // Why not: the rejoin's decisions and results.
        for e in &events {
            let t = e.to_string();
            if t.contains("rejoin") {
                println!("  {t}");
            }
        }
    }
    let step = |capability, step| step_of(&events, capability, asked, step);
    let promote = step("db.promote", "promote");
    let old_runs = writer::connect(&pair.url(0)).await.is_some();
    o.stop().await;
    Ok(Switchover {
        gap,
        checkpoint: step("db.demote", "CHECKPOINT").map(|(ms, _)| ms),
        stop: step("db.demote", "stop").map(|(ms, _)| ms),
        promote: promote.map(|(ms, _)| ms),
        first_write: promote.map(|(_, at)| first_at_dc2.saturating_sub(at)),
        old_runs,
        rejoin,
    })
}

/// Every profile at once through the lossy proxy for `d`: failovers seen (must be none).
async fn soak(lab: &Lab, profiles: &[Profile], d: Duration) -> Result<()> {
    let mut ups = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        let base = 55500 + u16::try_from(i).unwrap_or(0) * 10;
        let (pair, o, generation) = lab
            .up(&format!("{}-soak", p.name), p, [base, base + 1], true)
            .await?;
        let w = Writer::start(pair.ports);
        ups.push((p, pair, o, generation, w));
    }
    let start = now_ms();
    println!("soak: {} profiles for {} s", ups.len(), d.as_secs());
    tokio::time::sleep(d).await;
    for (p, pair, o, generation, w) in ups {
        let acks = w.stop().await;
        let (owner, g, phase, reason) = o.status().await?;
        let events = o.events();
        let unhealthy = events
            .iter()
            .filter(|e| {
                // dc1's bad readings: its health (its power fence reads ON, left out)
                e["kind"] == "result"
                    && e["site"] == "dc1"
                    && e["time_ms"].as_u64() >= Some(start)
                    && e["message"].as_str().is_some_and(|m| {
                        (m.starts_with("check does not hold") || m.starts_with("check UNKNOWN"))
                            && !m.contains("Status: ON")
                    })
            })
            .count();
        let gap = acks
            .windows(2)
            .map(|a| a[1].at_ms - a[0].at_ms)
            .max()
            .unwrap_or(0);
        println!(
            "| {} | {} min | {} | {} | {} | {} ms | owner {owner}, generation {generation} → {g}, {phase}: {reason} |",
            p.name,
            d.as_secs() / 60,
            if owner == "dc1" && g == generation {
                0
            } else {
                1
            },
            unhealthy,
            acks.len(),
            gap,
        );
        if owner != "dc1" || g != generation {
            post_mortem(&events, start);
        }
        o.stop().await;
        drop(pair);
    }
    println!(
        "proxy: {} chunks delayed, {} of them 'lost' (200-1000 ms)",
        proxy::CHUNKS.load(std::sync::atomic::Ordering::Relaxed),
        proxy::LOST.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// What led to a soak's failover: the decision that started it and the five seconds of
/// records before it (readings, commands, decisions), so the cause is read, not guessed.
fn post_mortem(events: &[serde_json::Value], start: u64) {
    let at = |e: &serde_json::Value| e["time_ms"].as_u64().unwrap_or(0);
    let Some(first) = events.iter().position(|e| {
        at(e) >= start
            && e["kind"] == "decision"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("failing"))
    }) else {
        println!("  post-mortem: no decision starting with \"failing\" in the log");
        return;
    };
    let t = at(&events[first]);
    println!("  post-mortem: the five seconds before the failover's decision:");
    for e in events[..=first]
        .iter()
        .filter(|e| at(e) + 5000 >= t && at(e) >= start)
    {
        println!(
            "  {:+6} ms {:<9} {:<4} {}",
            at(e) as i64 - t as i64,
            e["kind"].as_str().unwrap_or(""),
            e["site"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    }
}

fn stats(v: &mut [u64]) -> String {
    v.sort_unstable();
    if v.is_empty() {
        return "—".into();
    }
    let s = |ms: u64| format!("{:.2}", ms as f64 / 1000.0);
    format!(
        "{} / {} / {} s",
        s(v[0]),
        s(v[v.len() / 2]),
        s(v[v.len() - 1])
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    let lab = Lab::new()?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("pg_failover: load average at start {}", load.trim());
    for p in &o.profiles {
        let mut totals = Vec::new();
        let mut parts: Vec<(&str, Vec<u64>)> = Vec::new();
        let mut lost = 0;
        for n in 0..o.runs {
            let f = failover(&lab, p, n, o.show_events).await?;
            println!(
                "{} run {n}: kill → first write {} ms, lost {}",
                p.name, f.total_ms, f.lost
            );
            totals.push(f.total_ms);
            lost += f.lost;
            for (name, at) in f.parts {
                match parts.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.extend(at),
                    None => parts.push((name, at.into_iter().collect())),
                }
            }
        }
        let mut gaps = Vec::new();
        let mut rejoins = Vec::new();
        let mut old_running = 0;
        for n in 0..o.switchovers {
            let s = switchover(&lab, p, n).await?;
            let ms = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v} ms"));
            println!(
                "{} switchover {n}: gap {} ms (CHECKPOINT {}, stop {}, promote {}, \
                 promoted → first write {}), old primary {}",
                p.name,
                s.gap,
                ms(s.checkpoint),
                ms(s.stop),
                ms(s.promote),
                ms(s.first_write),
                match s.rejoin {
                    Some(r) =>
                        format!("rejoined (streaming from dc2) {r} ms after the first write at dc2"),
                    None => "NOT rejoined within 60 s".to_owned(),
                }
            );
            gaps.push(s.gap);
            rejoins.extend(s.rejoin);
            old_running += usize::from(s.old_runs);
        }
        if o.runs == 0 && o.switchovers == 0 {
            continue;
        }
        let breakdown = parts
            .iter_mut()
            .map(|(n, v)| {
                v.sort_unstable();
                match v.get(v.len() / 2) {
                    Some(ms) => format!("{n} {:.2}", *ms as f64 / 1000.0),
                    None => format!("{n} —"),
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {} | {} | {} | {breakdown} (median s after the kill) | {lost} | {} | {} ({} of {}) | {old_running} of {} |",
            p.name,
            o.runs,
            stats(&mut totals),
            stats(&mut gaps),
            stats(&mut rejoins),
            rejoins.len(),
            o.switchovers,
            o.switchovers
        );
    }
    if !o.soak.is_zero() {
        soak(&lab, &o.profiles, o.soak).await?;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("pg_failover: load average at end {}", load.trim());
    if o.keep {
        println!("pg_failover: kept {}", lab.root.display());
    } else {
        let _ = std::fs::remove_dir_all(&lab.root);
    }
    Ok(())
}
