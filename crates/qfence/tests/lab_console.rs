//! The lab's failover watched in the web console: `qfence lab` prints the console's URL,
//! two headless chromium windows (the overview and erp-db's page) are signed in to it, and
//! `qfence lab fail dc1` shows up in both, live, without a reload. Screenshots go to
//! `target/console-screenshots/lab-*.png`.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

#[path = "../../qfence-server/tests/browser/harness.rs"]
mod harness;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use harness::Browser;

const QFENCE: &str = env!("CARGO_BIN_EXE_qfence");

fn phase(what: &str) {
    eprintln!("--- {what}");
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

/// The `Console: URL` line `qfence lab` prints, once it has.
async fn console_url(out: &Path) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        if let Some(url) = text
            .lines()
            .find_map(|l| l.strip_prefix("Console: "))
            .and_then(|rest| rest.split_whitespace().next())
        {
            return Ok(url.trim_end_matches('/').to_owned());
        }
        if Instant::now() > deadline {
            bail!("qfence lab printed no console URL within 120 s:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn env_var(dir: &Path, name: &str) -> Result<String> {
    let text = std::fs::read_to_string(dir.join("env"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .map(str::to_owned)
        .with_context(|| format!("{name} in the env file"))
}

async fn mark_page(b: &Browser) -> Result<()> {
    b.driver
        .execute("window.__qfence_marker = 'same page';", vec![])
        .await?;
    Ok(())
}

async fn same_page(b: &Browser) -> Result<bool> {
    let v = b
        .driver
        .execute("return window.__qfence_marker || null;", vec![])
        .await?;
    Ok(v.json().as_str() == Some("same page"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_labs_failover_is_seen_live_on_the_overview_and_the_plan_page() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("lab");
    let out = tmp.path().join("lab.out");
    let log = std::fs::File::create(&out)?;

    phase("qfence lab starts and prints the console's URL");
    let _lab = LabProcess(
        Command::new(QFENCE)
            .args(["lab", "--dir", dir.to_str().context("a UTF-8 dir")?])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?,
    );
    let url = console_url(&out).await?;
    ensure!(
        url.starts_with("https://127.0.0.2:"),
        "the console is dc2-a's, which survives `lab fail dc1`: {url}"
    );
    let token = env_var(&dir, "QFENCE_TOKEN")?;

    let overview = Browser::start(&url, "lab-overview").await?;
    let plan = Browser::start(&url, "lab-plan").await?;
    overview.sign_in(&token).await?;
    plan.sign_in(&token).await?;

    phase("steady: dc1 owns erp-db, dc2 FENCED");
    overview
        .wait_for_text_within("#overview", "dc2 FENCED", Duration::from_secs(90))
        .await?;
    overview.screenshot("1-steady").await?;
    plan.open("/plans/erp-db").await?;
    plan.wait_for_text_within("#plan-status-live", "dc1 owner", Duration::from_secs(30))
        .await?;
    mark_page(&overview).await?;
    mark_page(&plan).await?;

    phase("qfence lab fail dc1: both pages follow the failover to dc2");
    let failed = Command::new(QFENCE)
        .args([
            "lab",
            "--dir",
            dir.to_str().context("UTF-8")?,
            "fail",
            "dc1",
        ])
        .output()?;
    ensure!(
        failed.status.success(),
        "lab fail dc1: {}",
        String::from_utf8_lossy(&failed.stderr)
    );
    let took = Instant::now();
    overview
        .wait_for_text_within("#overview", "dc2 owner", Duration::from_secs(60))
        .await?;
    overview
        .wait_for_text_within("#overview", "dc1 FENCED", Duration::from_secs(30))
        .await?;
    eprintln!(
        "the overview showed dc2 owning erp-db {:.1} s after `lab fail dc1`",
        took.elapsed().as_secs_f64()
    );
    ensure!(same_page(&overview).await?, "the overview updated in place");
    overview.screenshot("2-failed-over").await?;

    plan.wait_for_text_within("#plan-status-live", "dc2 owner", Duration::from_secs(30))
        .await?;
    // Each orchestrator keeps its own event log: dc2-a's history has the failover when dc2-a
    // led it; when the witness did, the page says whose log has the decisions.
    plan.wait_until(
        "the history tells the failover or names the leader's log",
        || async {
            let t = plan
                .driver
                .find(harness::By::Css("#plan-history"))
                .await?
                .text()
                .await?;
            Ok(t.contains("committed: owner dc2")
                || (t.contains("The leader, witness-a, records this plan's decisions")
                    && t.contains("From dc2-a's event log")))
        },
    )
    .await?;
    let history = plan.wait_for("#plan-history").await?.text().await?;
    eprintln!("the plan page's history: {history}");
    ensure!(same_page(&plan).await?, "the plan page updated in place");
    // The actions follow the failover: the forms now carry generation 2 and say so.
    plan.wait_for("#plan-actions [data-generation='2']").await?;
    ensure!(
        plan.wait_for("#actions-updated")
            .await?
            .is_displayed()
            .await?,
        "the plan page says its actions were updated"
    );
    plan.screenshot("2-failed-over").await?;

    overview.quit().await?;
    plan.quit().await?;
    Ok(())
}
