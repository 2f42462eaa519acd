//! The README's story, end to end: `qfence lab` (five simulators, three `qfence serve`
//! orchestrators in one cluster), `qfence lab fail dc1`, erp-db fails over to dc2 with the
//! VIP within 30 s, the event logs verify, and `qfence lab heal dc1` brings dc1 back fenced.

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

/// `qfence status --format json` against one orchestrator's API.
fn status(o: &Value, token: &str) -> Result<Value> {
    let api = o["api"].as_str().context("api")?;
    let pin = o["pin"].as_str().context("pin")?;
    let out = Command::new(QFENCE)
        .args([
            "status",
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
            "status from {api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
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

#[test]
fn the_lab_fails_erp_db_over_to_dc2_within_30_seconds_and_dc1_comes_back_fenced() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir_path = tmp.path().join("lab");
    let dir = dir_path.to_str().context("a UTF-8 temp dir")?.to_owned();
    let log = std::fs::File::create(tmp.path().join("lab.out"))?;

    phase("qfence lab starts the simulators and three orchestrators");
    let lab = LabProcess(
        Command::new(QFENCE)
            .args(["lab", "--dir", &dir])
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
            std::fs::read_to_string(tmp.path().join("lab.out")).unwrap_or_default()
        );
    })?;
    wait(Duration::from_secs(10), "the control endpoint", || {
        lab_state(&dir).ok()
    })?;
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
    drop(lab);
    Ok(())
}
