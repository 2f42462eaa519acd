//! The README's story, end to end: `qfence lab` (five simulators, three `qfence serve`
//! orchestrators in one cluster), `qfence lab fail dc1`, erp-db fails over to dc2 with the
//! VIP within 30 s, the event logs verify, and `qfence lab heal dc1` brings dc1 back fenced.
//!
//! The orchestrators log at TRACE, as JSON (`RUST_LOG=trace`, `QFENCE_LOG_FORMAT=json`,
//! inherited from the lab): the survivors' logs tell the failover in sentences with their
//! fields (leadership, decision, commands, results, the commit), and no log line of any
//! process holds a secret of the lab.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

const QFENCE: &str = env!("CARGO_BIN_EXE_qfence");

fn phase(what: &str) {
    eprintln!("--- {what}");
}

/// Runs `qfence ARGS` and returns its stdout, failing on a non-zero exit.
fn q(args: &[&str]) -> Result<String> {
    let out = Command::new(QFENCE).args(args).output()?;
    if !out.status.success() {
        bail!(
            "qfence {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn lab_state(dir: &str) -> Result<Value> {
    Ok(serde_json::from_str(&q(&[
        "lab", "--dir", dir, "state", "--format", "json",
    ])?)?)
}

/// `qfence ARGS --format json` against one orchestrator's API: its stdout.
fn api_out(o: &Value, token: &str, args: &[&str]) -> Result<String> {
    let api = o["api"].as_str().context("api")?;
    let pin = o["pin"].as_str().context("pin")?;
    let out = Command::new(QFENCE)
        .args(args)
        .args([
            "--format",
            "json",
            "--api",
            api,
            "--pin",
            pin,
            "--request-timeout-seconds",
            "2",
        ])
        .env("QFENCE_TOKEN", token)
        .output()?;
    if !out.status.success() {
        bail!(
            "{} from {api}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `qfence ARGS --format json` against one orchestrator's API, parsed.
fn api_json(o: &Value, token: &str, args: &[&str]) -> Result<Value> {
    Ok(serde_json::from_str(&api_out(o, token, args)?)?)
}

/// `qfence status --format json` against one orchestrator's API.
fn status(o: &Value, token: &str) -> Result<Value> {
    api_json(o, token, &["status"])
}

/// The status as the leader sees it (a follower has no observations of its own), from the
/// orchestrators not frozen.
fn leader_status(state: &Value, token: &str) -> Option<Value> {
    state["orchestrators"]
        .as_array()?
        .iter()
        .filter(|o| o["frozen"] == false)
        .filter_map(|o| status(o, token).ok())
        .find(|s| s["leader"]["is_self"] == true)
}

fn plan_site(s: &Value, site: &str) -> Option<String> {
    s["plans"][0]["sites"]
        .as_array()?
        .iter()
        .find(|x| x["site"] == site)
        .and_then(|x| x["verdict"].as_str())
        .map(str::to_owned)
}

fn wait<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn env_var(dir: &Path, name: &str) -> Result<String> {
    let text = std::fs::read_to_string(dir.join("env"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .map(str::to_owned)
        .with_context(|| format!("{name} in the env file"))
}

struct LabProcess(Child);

impl Drop for LabProcess {
    fn drop(&mut self) {
        if let Some(pid) = i32::try_from(self.0.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
    }
}

/// `qfence lab --dir TMP/lab EXTRA`, logging at [`LOG_FILTER`] as JSON into `TMP/lab.out`, once
/// its env file is written and its control endpoint answers: the process, the lab directory
/// and that directory as a string.
fn start_lab(tmp: &Path, extra: &[&str]) -> Result<(LabProcess, std::path::PathBuf, String)> {
    let dir_path = tmp.join("lab");
    let dir = dir_path.to_str().context("a UTF-8 temp dir")?.to_owned();
    let log = std::fs::File::create(tmp.join("lab.out"))?;
    let lab = LabProcess(
        Command::new(QFENCE)
            .args(["lab", "--dir", &dir])
            .args(extra)
            .env("RUST_LOG", LOG_FILTER)
            .env("QFENCE_LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?,
    );
    wait(Duration::from_secs(120), "the lab's env file", || {
        dir_path.join("env").exists().then_some(())
    })
    .inspect_err(|_| {
        eprintln!(
            "{}",
            std::fs::read_to_string(tmp.join("lab.out")).unwrap_or_default()
        );
    })?;
    wait(Duration::from_secs(10), "the control endpoint", || {
        lab_state(&dir).ok()
    })?;
    Ok((lab, dir_path, dir))
}

#[test]
fn the_lab_fails_erp_db_over_to_dc2_within_30_seconds_and_dc1_comes_back_fenced() -> Result<()> {
    let tmp = tempfile::tempdir()?;

    phase("qfence lab starts the simulators and three orchestrators");
    let (lab, dir_path, dir) = start_lab(tmp.path(), &[])?;
    let token = env_var(&dir_path, "QFENCE_TOKEN")?;
    let api = env_var(&dir_path, "QFENCE_API")?;
    assert!(
        api.starts_with("https://127.0.0.2:"),
        "the env file points at dc2-a: {api}"
    );

    phase("steady state: erp-db owned by dc1, dc2 FENCED, the VIP at dc1");
    let steady = wait(Duration::from_secs(60), "dc1 owner, dc2 FENCED", || {
        let s = leader_status(&lab_state(&dir).ok()?, &token)?;
        (s["plans"][0]["owner"] == "dc1" && plan_site(&s, "dc2").as_deref() == Some("FENCED"))
            .then_some(s)
    })?;
    assert_eq!(steady["plans"][0]["generation"], 1);
    let before = lab_state(&dir)?;
    assert_eq!(before["vip"], serde_json::json!(["10.1.1.5"]));
    assert_eq!(before["power"]["pve-dc1-01"], "On");

    phase("qfence lab fail dc1");
    q(&["lab", "--dir", &dir, "fail", "dc1"])?;
    let failed_at = Instant::now();
    let cut = lab_state(&dir)?;
    assert_eq!(cut["failed"], serde_json::json!(["dc1"]));

    phase("erp-db fails over: owned by dc2, steady, the VIP at dc2");
    let dc2 = before["orchestrators"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["name"] == "dc2-a"))
        .cloned()
        .context("dc2-a")?;
    let after = wait(
        Duration::from_secs(60),
        "dc2 owning erp-db with the VIP",
        || {
            let s = status(&dc2, &token).ok()?;
            let l = lab_state(&dir).ok()?;
            (s["plans"][0]["owner"] == "dc2"
                && s["plans"][0]["phase"] == "steady"
                && l["vip"] == serde_json::json!(["10.2.1.5"]))
            .then_some((s, l))
        },
    )?;
    let took = failed_at.elapsed();
    eprintln!(
        "failover took {:.1} s from `lab fail dc1`",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(30),
        "failover within 30 s, took {took:?}"
    );
    assert_eq!(after.0["plans"][0]["generation"], 2);
    assert_eq!(
        after.1["power"]["pve-dc1-01"], "Off",
        "dc1's host fenced at its BMC"
    );
    assert_eq!(after.1["power"]["pve-dc2-01"], "On", "dc2's host unfenced");
    assert_eq!(after.1["vm101"]["pve-dc2"], "running");

    phase("the survivors' logs tell the failover; no log holds a secret");
    let survivors = read_logs(&dir_path, &["dc2-a", "witness-a"])?;
    check_failover_log(&survivors)?;

    phase("the event logs verify");
    let mut verified = 0;
    for name in ["dc1-a", "dc2-a", "witness-a"] {
        let log = dir_path.join(name).join("events.jsonl");
        if log.exists() {
            q(&["events", "verify", log.to_str().context("UTF-8")?])?;
            verified += 1;
        }
    }
    assert!(
        verified >= 2,
        "at least the surviving orchestrators keep logs"
    );

    phase("qfence lab heal dc1: dc1 comes back fenced and does not get erp-db back");
    q(&["lab", "--dir", &dir, "heal", "dc1"])?;
    let healed = wait(
        Duration::from_secs(30),
        "a leader reading dc1 FENCED",
        || {
            let s = leader_status(&lab_state(&dir).ok()?, &token)?;
            (plan_site(&s, "dc1").as_deref() == Some("FENCED")).then_some(s)
        },
    )?;
    assert_eq!(healed["plans"][0]["owner"], "dc2");
    std::thread::sleep(Duration::from_secs(5));
    let later = lab_state(&dir)?;
    assert_eq!(later["power"]["pve-dc1-01"], "Off", "the host stays off");
    assert_eq!(later["vip"], serde_json::json!(["10.2.1.5"]));
    let s = status(&dc2, &token)?;
    assert_eq!(s["plans"][0]["owner"], "dc2");
    assert_eq!(s["plans"][0]["generation"], 2);
    check_no_secret(&dir_path, &tmp.path().join("lab.out"))?;
    drop(lab);
    Ok(())
}

/// qfence's own code at TRACE (the daemon's own output, where a secret could slip into a
/// line); its libraries at INFO: their per-message DEBUG and TRACE chatter (every Raft
/// heartbeat of three nodes) slows a two-core machine so much that the cluster does not form
/// in time. The drivers' HTTP and TLS stacks at TRACE are covered by the controllers'
/// `secret_logs` test.
const LOG_FILTER: &str = "info,qfence=trace";

/// The JSON records of these orchestrators' logs (each log also holds `qfence serve`'s
/// start-up lines on stdout, which are not JSON).
fn read_logs(dir: &Path, names: &[&str]) -> Result<Vec<Value>> {
    let mut records = Vec::new();
    for name in names {
        let path = dir.join("logs").join(format!("{name}.log"));
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let mut r: Value = serde_json::from_str(line)
                .with_context(|| format!("a log line of {name} is not JSON: {line}"))?;
            for key in ["timestamp", "level", "target", "message"] {
                if r.get(key).is_none() {
                    bail!("a log record of {name} has no {key}: {line}");
                }
            }
            r["from"] = Value::from(*name);
            records.push(r);
        }
    }
    Ok(records)
}

/// The failover as the survivors logged it: a new leader, the decision to fail erp-db over,
/// the commands it started and their results, the commit of dc2 at generation 2, each a
/// capitalised sentence with the fields an operator filters on.
fn check_failover_log(records: &[Value]) -> Result<()> {
    let find = |what: &str, f: &dyn Fn(&Value) -> bool| -> Result<&Value> {
        records.iter().find(|r| f(r)).with_context(|| {
            let info: Vec<String> = records
                .iter()
                .filter(|r| r["level"] != "TRACE" && r["level"] != "DEBUG")
                .map(|r| format!("{} {} {}", r["from"], r["level"], r["message"]))
                .collect();
            format!("no log record of {what} among:\n{}", info.join("\n"))
        })
    };
    let message = |r: &Value| r["message"].as_str().unwrap_or_default().to_owned();
    let leader = find("a new leader", &|r| {
        message(r) == "Became leader" && r["level"] == "INFO" && r["term"].as_str() != Some("1")
    })?;
    eprintln!(
        "   {} became leader at term {}",
        leader["orchestrator"], leader["term"]
    );
    let decision = find("the decision to fail erp-db over", &|r| {
        r["plan"] == "erp-db"
            && r["level"] == "INFO"
            && r["target"] == "qfence_runtime::engine"
            && r["generation"] == "1"
            && r.get("term").is_some()
            && message(r)
                .to_lowercase()
                .contains("failing erp-db over from dc1 to dc2")
    })?;
    eprintln!("   decision: {}", message(decision));
    let started = find("a fence started at dc1", &|r| {
        r["plan"] == "erp-db" && message(r).starts_with("Started ") && r["site"] == "dc1"
    })?;
    eprintln!("   command: {}", message(started));
    let result = find("a result with its controller", &|r| {
        r["plan"] == "erp-db"
            && r["level"] == "INFO"
            && r.get("controller").is_some()
            && r.get("took_ms").is_some()
            && message(r).contains(" done")
    })?;
    eprintln!("   result: {} ({})", message(result), result["controller"]);
    let commit = find("the commit of dc2 at generation 2", &|r| {
        r["plan"] == "erp-db"
            && r["site"] == "dc2"
            && r["generation"] == "2"
            && message(r).starts_with("Committed erp-db: owner dc2 at generation 2")
    })?;
    eprintln!("   commit: {} (term {})", message(commit), commit["term"]);
    // Capitalised sentences, unless they open with a name (`erp-db to dc2, ...`).
    for r in records
        .iter()
        .filter(|r| r["level"] == "INFO" || r["level"] == "WARN")
        .filter(|r| {
            r["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("qfence"))
        })
    {
        let m = message(r);
        let first = m.split([' ', ',', ':']).next().unwrap_or_default();
        let name = first.contains(|c: char| c == '-' || c == '.' || c.is_ascii_digit());
        if m.chars().next().is_some_and(char::is_lowercase) && !name {
            bail!("a qfence log line is not a capitalised sentence: {r}");
        }
    }
    Ok(())
}

/// Every secret of the lab: the controllers' credentials, the API and control tokens, the
/// join tokens and every private key; none may appear in any process's output.
fn check_no_secret(dir: &Path, lab_out: &Path) -> Result<()> {
    let mut secrets: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(dir.join("secrets"))? {
        let p = entry?.path();
        secrets.push((
            p.display().to_string(),
            std::fs::read_to_string(&p)?.trim().to_owned(),
        ));
    }
    secrets.push(("QFENCE_TOKEN".into(), env_var(dir, "QFENCE_TOKEN")?));
    let control: Value = serde_json::from_str(&std::fs::read_to_string(
        qfence_lab::lab::ControlFile::path(dir),
    )?)?;
    if let Some(t) = control["token"].as_str() {
        secrets.push(("the control token".into(), t.to_owned()));
    }
    for entry in std::fs::read_dir(dir.join("dc1-a").join("join-tokens"))? {
        let p = entry?.path();
        secrets.push((
            p.display().to_string(),
            std::fs::read_to_string(&p)?.trim().to_owned(),
        ));
    }
    for key in [
        "dc1-a/ca/ca.key",
        "dc1-a/tls/node.key",
        "dc2-a/tls/node.key",
    ] {
        let pem = std::fs::read_to_string(dir.join(key))?;
        // The base64 body of the key, line by line (a log would print it that way too).
        for (i, line) in pem.lines().filter(|l| !l.starts_with("-----")).enumerate() {
            secrets.push((format!("{key} line {i}"), line.to_owned()));
        }
    }
    // The nodes' Ed25519 signing keys (DER), as a log would print bytes.
    for node in ["dc1-a", "dc2-a", "witness-a"] {
        let der = std::fs::read(dir.join(node).join(qfence_cluster::node::NODE_KEY_FILE))?;
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        secrets.push((format!("{node}'s signing key (hex)"), hex));
    }
    let mut logs = vec![lab_out.to_path_buf()];
    for name in ["dc1-a", "dc2-a", "witness-a"] {
        logs.push(dir.join("logs").join(format!("{name}.log")));
    }
    let mut bytes = 0;
    for log in &logs {
        let text = std::fs::read_to_string(log)?;
        bytes += text.len();
        for (what, value) in &secrets {
            // `qfence lab` prints the operator's API token for the demo, on purpose; the
            // orchestrators never do.
            if log.as_path() == lab_out && what == "QFENCE_TOKEN" {
                continue;
            }
            if value.len() >= 8 && text.contains(value.as_str()) {
                bail!("{} holds the secret {what}", log.display());
            }
        }
    }
    eprintln!(
        "   {} secrets searched in {} logs ({:.1} MB)",
        secrets.len(),
        logs.len(),
        bytes as f64 / 1e6
    );
    // The filter was really below INFO: routine results are logged at DEBUG.
    let survivors = read_logs(dir, &["dc2-a"])?;
    if !survivors.iter().any(|r| {
        r["level"] == "DEBUG"
            && r["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("qfence"))
    }) {
        bail!("no DEBUG record of qfence in dc2-a's log: the filter {LOG_FILTER} was not applied");
    }
    Ok(())
}

/// The orchestrator that leads (its own status says so), among those not frozen.
fn leader(state: &Value, token: &str) -> Option<Value> {
    state["orchestrators"]
        .as_array()?
        .iter()
        .filter(|o| o["frozen"] == false)
        .find(|o| status(o, token).is_ok_and(|s| s["leader"]["is_self"] == true))
        .cloned()
}

/// `host` in a list of hosts (the API's or the lab's).
fn find_host<'a>(hosts: &'a Value, key: &str, host: &str) -> Option<&'a Value> {
    hosts.as_array()?.iter().find(|h| h[key] == host)
}

#[test]
fn a_failed_compute_host_is_fenced_its_servers_evacuated_and_it_comes_back() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    phase("qfence lab --cloud starts with a cloud: four compute hosts, eight servers");
    let (lab, dir_path, dir) = start_lab(tmp.path(), &["--cloud"])?;
    let token = env_var(&dir_path, "QFENCE_TOKEN")?;
    // The env file's API (dc2-a), as an operator would use it: hosts being processed and
    // evacuations are replicated, so a follower shows them too.
    let env_api = serde_json::json!({
        "api": env_var(&dir_path, "QFENCE_API")?,
        "pin": env_var(&dir_path, "QFENCE_API_PIN")?,
    });
    let leading = wait(Duration::from_secs(60), "the leader polling Nova", || {
        let o = leader(&lab_state(&dir).ok()?, &token)?;
        let hosts = api_json(&o, &token, &["instance-ha", "hosts"]).ok()?;
        let up = hosts.as_array()?.iter().filter(|h| h["state"] == "up");
        (up.count() == 4).then_some(o)
    })?;
    eprintln!("   {} leads and polls Nova", leading["name"]);

    phase("qfence lab fail-host compute-2: its nova-compute stops, its BMC still reads On");
    let said = q(&["lab", "--dir", &dir, "fail-host", "compute-2"])?;
    assert!(said.contains("compute-2 is dead"), "{said}");
    let failed_at = Instant::now();
    let dead = lab_state(&dir)?;
    let h = find_host(&dead["cloud"], "host", "compute-2").context("compute-2")?;
    assert!(h["reporting"] == false && h["power"] == "On", "{h}");

    phase("Instance HA fences it (read back) and evacuates its two servers");
    let fenced = wait(Duration::from_secs(30), "compute-2 fenced", || {
        let hosts = api_json(&env_api, &token, &["instance-ha", "hosts"]).ok()?;
        let h = find_host(&hosts, "host", "compute-2")?;
        (h["incident"].is_u64() && h["fenced_at_ms"].is_u64()).then(|| h.clone())
    })?;
    eprintln!(
        "   fenced {:.1} s after fail-host: {fenced}",
        failed_at.elapsed().as_secs_f64()
    );
    let evacuations = wait(Duration::from_secs(30), "compute-2's evacuations", || {
        let es = api_json(&env_api, &token, &["instance-ha", "evacuations"]).ok()?;
        let of_host: Vec<Value> = es
            .as_array()?
            .iter()
            .filter(|e| e["host"] == "compute-2")
            .cloned()
            .collect();
        (of_host.len() == 2).then_some(of_host)
    })?;
    eprintln!("   evacuations: {}", Value::from(evacuations));

    phase("compute-2 comes back: powered on, reporting, enabled, no longer forced down");
    let back = wait(Duration::from_secs(60), "compute-2 back in service", || {
        let l = lab_state(&dir).ok()?;
        let h = find_host(&l["cloud"], "host", "compute-2")?;
        let back = h["power"] == "On"
            && h["reporting"] == true
            && h["service"] == "up"
            && h["disabled"] == false
            && h["forced_down"] == false;
        back.then(|| l.clone())
    })?;
    eprintln!(
        "   back in service {:.1} s after fail-host",
        failed_at.elapsed().as_secs_f64()
    );
    let cloud = back["cloud"].as_array().context("the cloud's hosts")?;
    let count = |key: &str| cloud.iter().filter_map(|h| h[key].as_u64()).sum::<u64>();
    let h = find_host(&back["cloud"], "host", "compute-2").context("compute-2")?;
    assert_eq!(h["servers"], 0, "its servers left it: {h}");
    assert_eq!((count("servers"), count("active")), (8, 8), "{cloud:?}");

    phase("the leader shows compute-2 up, its incident over; its log tells the story");
    let o = leader(&lab_state(&dir)?, &token).context("a leader")?;
    let hosts = wait(
        Duration::from_secs(20),
        "compute-2 up at the leader",
        || {
            let hosts = api_json(&o, &token, &["instance-ha", "hosts"]).ok()?;
            let h = find_host(&hosts, "host", "compute-2")?;
            (h["state"] == "up" && h["incident"].is_null()).then_some(hosts)
        },
    )?;
    assert_eq!(hosts.as_array().map(Vec::len), Some(4), "{hosts}");
    let evacuations = api_json(&o, &token, &["instance-ha", "evacuations"])?;
    assert_eq!(evacuations, serde_json::json!([]), "a finished incident");
    let said: Vec<String> = api_out(
        &o,
        &token,
        &["events", "--kind", "decision", "--limit", "500"],
    )?
    .lines()
    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    .filter_map(|e| e["message"].as_str().map(str::to_owned))
    .collect();
    for step in [
        "compute-2: fenced, read back",
        "compute-2: evacuated: 2 done, 0 unsuccessful",
        "compute-2: back in service",
    ] {
        assert!(
            said.iter().any(|m| m.contains(step)),
            "no {step:?} among {said:#?}"
        );
    }
    // The Nova application credential's secret joins the others searched for.
    check_no_secret(&dir_path, &tmp.path().join("lab.out"))?;
    drop(lab);
    Ok(())
}
