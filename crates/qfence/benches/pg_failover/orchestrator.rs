//! One `qfence serve` (the built binary) at dc2 over the pair, its configuration, and what the
//! bench reads back: the plan's status through the CLI and the event log's records.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use crate::Profile;

const TOKEN: &str = "bench-operator-token-0123456789";

/// A running orchestrator.
pub struct Orchestrator {
    pub dir: PathBuf,
    exe: PathBuf,
    api: String,
    pin: String,
    child: Child,
}

/// The controllers' endpoints: the servers themselves, or a delaying proxy in front of them.
pub struct Endpoints {
    pub pg: [u16; 2],
    pub sockets: PathBuf,
    pub ports: [u16; 2],
    /// The pgpass file `db.rejoin`'s conninfos name (no password in the configuration).
    pub passfile: PathBuf,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The configuration: the shape of `examples/pg-docker.yaml` with the fence agent for the BMC.
pub fn config(profile: &Profile, e: &Endpoints, cluster_port: u16) -> String {
    let mut y = format!(
        "cluster: {{name: pgbench}}\nsites: {{dc1: {{}}, dc2: {{}}}}\n\
         orchestrators:\n  dc2-a: {{site: dc2, address: \"127.0.0.1:{cluster_port}\"}}\n\
         controllers:\n"
    );
    for (i, site) in ["dc1", "dc2"].iter().enumerate() {
        let other = ["dc2", "dc1"][i];
        let pg_timeout = profile
            .pg_timeout
            .map(|t| format!(", timeout_seconds: {t}"))
            .unwrap_or_default();
        let fence_timeout = profile
            .fence_agent_timeout
            .map(|t| format!(", timeout_seconds: {t}"))
            .unwrap_or_default();
        let _ = write!(
            y,
            "  pg-{site}: {{type: postgres, endpoint: \"postgresql://127.0.0.1:{}/postgres\", \
             site: {site}, reach: [{other}], secret: bench-pg, username: postgres{pg_timeout}}}\n\
             \x20 host-{site}: {{type: fence-agent, agent: fence_pgkill, site: {site}, \
             reach: [{other}], options: {{pgport: \"{}\", sockets: \"{}\"}}{fence_timeout}}}\n",
            e.pg[i],
            e.ports[i],
            e.sockets.display()
        );
    }
    let _ = write!(y, "plans:\n  db:\n    owner: dc1\n");
    for line in &profile.plan {
        let _ = writeln!(y, "    {line}");
    }
    y.push_str("    instances:\n");
    for (i, site) in ["dc1", "dc2"].iter().enumerate() {
        // ADR 0023: the demote is a clean stop, and the old primary rejoins as a replica.
        let data = e.sockets.join(["primary", "replica"][i]);
        let data = data.display();
        let (other, pass) = (e.ports[1 - i], e.passfile.display());
        let _ = write!(
            y,
            "      {site}:\n\
             \x20       - {{controller: pg-{site}, capability: db.demote, resource: self, role: fence, \
             params: {{data_dir: \"{data}\"}}}}\n\
             \x20       - {{controller: pg-{site}, capability: db.rejoin, resource: self, role: rejoin, \
             params: {{data_dir: \"{data}\", primary_conninfo: \"host=127.0.0.1 port={other} \
             user=replicator application_name={site} passfile={pass}\", rewind_conninfo: \
             \"host=127.0.0.1 port={other} user=postgres dbname=postgres passfile={pass}\"}}}}\n\
             \x20       - {{controller: host-{site}, capability: power.off, resource: {site}-db, role: fence, required: true}}\n\
             \x20       - {{controller: pg-{site}, capability: replication.lag, resource: self, role: readiness, \
             params: {{max_lag_bytes: 16777216, max_lag_seconds: 30}}}}\n\
             \x20       - {{controller: pg-{site}, capability: db.promote, resource: self, role: switchover}}\n\
             \x20       - {{controller: pg-{site}, capability: db.health, resource: self, role: health}}\n"
        );
    }
    y
}

impl Orchestrator {
    /// Writes the configuration and token file into `dir` and starts `qfence serve --init`
    /// with `agents` on its PATH, waiting until its API serves.
    pub async fn start(
        exe: &Path,
        dir: &Path,
        agents: &Path,
        profile: &Profile,
        e: &Endpoints,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let cluster_port = free_port()?;
        let api_port = free_port()?;
        let cfg = dir.join("qfence.yaml");
        std::fs::write(&cfg, config(profile, e, cluster_port))?;
        let check = std::process::Command::new(exe)
            .args(["config", "check"])
            .arg(&cfg)
            .output()?;
        if !check.status.success() {
            bail!(
                "config check refused the bench's configuration:\n{}{}",
                String::from_utf8_lossy(&check.stdout),
                String::from_utf8_lossy(&check.stderr)
            );
        }
        let tokens = dir.join("tokens");
        std::fs::write(
            &tokens,
            format!("operator bench sha256:{}\n", sha256_hex(TOKEN)),
        )?;
        std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let log = dir.join("serve.log");
        let out = std::fs::File::create(&log)?;
        let path = format!(
            "{}:{}",
            agents.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(exe)
            .args(["serve", "--config"])
            .arg(&cfg)
            .args(["--name", "dc2-a", "--data"])
            .arg(dir.join("data"))
            .arg("--tokens")
            .arg(&tokens)
            .args(["--listen", &format!("127.0.0.1:{api_port}"), "--init"])
            .args(["--drain-seconds", "1"])
            .env("PATH", path)
            .env("QFENCE_SECRET_BENCH_PG", "postgres")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .kill_on_drop(true)
            .spawn()
            .context("starting qfence serve")?;
        let mut o = Self {
            dir: dir.to_owned(),
            exe: exe.to_owned(),
            api: format!("https://127.0.0.1:{api_port}"),
            pin: String::new(),
            child,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(l) = text
                .lines()
                .find(|l| l.starts_with("API certificate sha256:"))
            {
                o.pin = format!(
                    "sha256:{}",
                    l.trim_start_matches("API certificate sha256:").trim()
                );
                return Ok(o);
            }
            if let Some(st) = o.child.try_wait()? {
                bail!("qfence serve exited ({st}):\n{text}");
            }
            if tokio::time::Instant::now() > deadline {
                bail!("qfence serve did not serve within 60 s:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs a client command (`qfence status --format json`, ...) against this orchestrator.
    pub async fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.exe)
            .args(args)
            .env("QFENCE_API", &self.api)
            .env("QFENCE_TOKEN", TOKEN)
            .env("QFENCE_API_PIN", &self.pin)
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "qfence {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The plan's status: `(owner, generation, phase, last reason)`.
    pub async fn status(&self) -> Result<(String, u64, String, String)> {
        let v: serde_json::Value =
            serde_json::from_str(&self.cli(&["status", "--format", "json"]).await?)?;
        let p = v["plans"]
            .as_array()
            .and_then(|a| a.first())
            .context("no plan in status")?;
        Ok((
            p["owner"].as_str().unwrap_or_default().to_owned(),
            p["generation"].as_u64().unwrap_or_default(),
            p["phase"].as_str().unwrap_or_default().to_owned(),
            p["last_reason"].as_str().unwrap_or_default().to_owned(),
        ))
    }

    /// Waits until the plan is steady at dc1 with its health read good.
    pub async fn wait_steady(&self, limit: Duration) -> Result<u64> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut last = String::new();
        loop {
            if let Ok((owner, generation, phase, reason)) = self.status().await {
                if owner == "dc1" && phase == "steady" && reason.starts_with("no action") {
                    return Ok(generation);
                }
                last = reason;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the plan did not settle: {last}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The event log's records, oldest first.
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("data").join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
