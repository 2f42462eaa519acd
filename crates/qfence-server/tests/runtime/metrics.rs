//! The metrics an on-call reads, checked with Prometheus' own tool: a live daemon's
//! `/metrics` passes `promtool check metrics` and says who owns erp-db, that dc2 is proven
//! fenced and since when, who leads on what lease, and how each controller's lane is doing;
//! the alerting rules pass `promtool check rules` and their unit tests; and every metric the
//! rules and the Grafana dashboard name is one the daemon exports.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::daemon::{TOKEN, client, start};
use crate::lab::{Sims, eventually, phase};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `promtool`: `$QFENCE_PROMTOOL`, or the one tools/emulators/install.sh unpacks from Debian's
/// prometheus package, or one on the PATH.
fn promtool_path() -> PathBuf {
    if let Some(p) = std::env::var_os("QFENCE_PROMTOOL") {
        return p.into();
    }
    let home = std::env::var_os("QFENCE_EMU_HOME").unwrap_or_else(|| "/opt/qfence-emu".into());
    let unpacked = Path::new(&home).join("prometheus-deb/usr/bin/promtool");
    if unpacked.is_file() {
        unpacked
    } else {
        "promtool".into()
    }
}

/// `promtool ARGS` with `stdin`; its output, failing on a non-zero exit.
fn promtool(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut child = Command::new(promtool_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("promtool is not installed: run tools/emulators/install.sh (as root)")?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.unwrap_or_default().as_bytes())?;
    drop(input);
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "promtool {}: {text}", args.join(" "));
    Ok(text)
}

/// The value of the sample `series` (name and labels exactly as exported), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_daemons_metrics_pass_promtool_and_say_what_is_safe() -> Result<()> {
    let sims = Sims::start().await?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let d = start(&sims, &data).await?;
    let c = client(&data, &d)?;
    let url = format!("https://localhost:{}/metrics", d.api_addr.port());

    phase("the leader exports erp-db: owner, phase, verdicts, proof of fencing");
    let text = eventually(
        Duration::from_secs(20),
        "dc2 FENCED in the metrics",
        || async {
            let text = c
                .get(&url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            // A standby reads FENCED on its resource-level proof too (a switchover's
            // standby, issue 19), which can come before the BMC's first check: wait for both.
            let fenced = r#"qfence_plan_site_verdict{plan="erp-db",site="dc2",role="standby",verdict="FENCED"}"#;
            let bmc = r#"qfence_lane_calls_total{controller="bmc-dc2",lane="checks",result="ok"}"#;
            (sample(&text, fenced).is_some() && sample(&text, bmc).is_some()).then_some(text)
        },
    )
    .await?;
    let has = |series: &str| sample(&text, series).with_context(|| format!("{series} in\n{text}"));
    assert_eq!(has(r#"qfence_leader{orchestrator="dc1-a"}"#)?, 1.0);
    assert!(has(r#"qfence_term{orchestrator="dc1-a"}"#)? >= 1.0);
    let lease = has(r#"qfence_lease_seconds{orchestrator="dc1-a"}"#)?;
    let left = has(r#"qfence_lease_remaining_seconds{orchestrator="dc1-a"}"#)?;
    assert!(left > 0.0 && left <= lease, "lease left {left} of {lease}");
    assert_eq!(
        has(r#"qfence_plan_generation{plan="erp-db",owner="dc1"}"#)?,
        1.0
    );
    assert_eq!(
        has(r#"qfence_plan_phase{plan="erp-db",phase="steady"}"#)?,
        1.0
    );
    let fenced = has(r#"qfence_plan_site_fenced_timestamp_seconds{plan="erp-db",site="dc2"}"#)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    assert!(
        (now - 60.0..=now + 1.0).contains(&fenced),
        "dc2 proven fenced within the last minute: {fenced} (now {now})"
    );
    // The owner is never "proven fenced"; no alarm is raised on a steady, fenced plan.
    assert!(
        !text.contains(r#"qfence_plan_site_fenced_timestamp_seconds{plan="erp-db",site="dc1"}"#)
    );
    assert!(!text.contains("qfence_plan_alarm{"), "{text}");
    assert!(
        has(r#"qfence_lane_calls_total{controller="bmc-dc2",lane="checks",result="ok"}"#)? >= 1.0
    );
    assert!(
        has(r#"qfence_lane_latency_seconds_count{controller="bmc-dc2",lane="checks"}"#)? >= 1.0
    );
    assert!(
        sample(
            &text,
            r#"qfence_lane_queued{controller="bmc-dc2",lane="checks"}"#
        )
        .is_some()
    );

    phase("promtool check metrics: the exposition is valid and lint-clean");
    let lint = promtool(&["check", "metrics"], Some(&text))?;
    eprintln!("promtool check metrics: {}", lint.trim());

    phase("every metric the rules and the dashboard name is exported (or recorded)");
    // What this daemon exports now, and the families that have no sample yet (no failover,
    // no forwarded call here), from a registry where each has one.
    let every = qfence_runtime::Metrics::new();
    every.failover("p", "committed");
    every.forwarded(qfence_runtime::metrics::Direction::Sent);
    every.forward_refusal("stale_term");
    let exported: BTreeSet<String> = [text.clone(), every.render()]
        .iter()
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let rules = std::fs::read_to_string(repo("deploy/prometheus/qfence.rules.yml"))?;
    let dashboard = std::fs::read_to_string(repo("deploy/grafana/qfence.json"))?;
    let recorded: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(|r| r.trim().to_owned())
        .collect();
    let dash: serde_json::Value = serde_json::from_str(&dashboard)?;
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().context("panels")? {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().context("a target's expr")?.to_owned());
        }
    }
    ensure!(
        exprs.len() >= 15,
        "the dashboard queries {} series",
        exprs.len()
    );
    exprs.push(rules);
    let mut named = BTreeSet::new();
    for e in &exprs {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            // A metric's name (`qfence_...`) or a recorded one (`qfence:...`), not the word
            // "qfence:" of a sentence.
            let name = word.trim_end_matches(':');
            if (name.starts_with("qfence_") || name.starts_with("qfence:")) && name.len() > 7 {
                named.insert(name.to_owned());
            }
        }
    }
    for name in &named {
        let base = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        if !exported.contains(base) && !exported.contains(name) && !recorded.contains(name) {
            bail!("{name} is named by the rules or the dashboard but not exported: {exported:?}");
        }
    }
    eprintln!(
        "{} metric names of the rules and dashboard, all exported",
        named.len()
    );
    d.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[test]
fn the_alerting_rules_pass_promtool_and_their_unit_tests() -> Result<()> {
    let rules = repo("deploy/prometheus/qfence.rules.yml");
    let tests = repo("deploy/prometheus/qfence.rules.test.yml");
    let checked = promtool(&["check", "rules", rules.to_str().context("UTF-8")?], None)?;
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", tests.to_str().context("UTF-8")?], None)?;
    assert!(tested.contains("SUCCESS"), "{tested}");
    Ok(())
}
