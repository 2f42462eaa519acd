//! The lab's three orchestrators: `qfence serve` child processes forming one cluster.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::io_err;
use crate::LabError;

/// Who runs where: one orchestrator per site, each on its own loopback address.
#[derive(Debug, Clone)]
pub struct Topology {
    /// `(name, site, cluster address, API address)`, dc1 first: it creates the cluster.
    pub nodes: Vec<(String, String, SocketAddr, SocketAddr)>,
}

fn free_port(ip: Ipv4Addr) -> Result<SocketAddr, LabError> {
    let addr = SocketAddr::from((ip, 0));
    let l = std::net::TcpListener::bind(addr).map_err(|source| LabError::Bind { addr, source })?;
    l.local_addr()
        .map_err(|source| LabError::Bind { addr, source })
}

impl Topology {
    /// dc1-a on 127.0.0.1, dc2-a on 127.0.0.2, witness-a on 127.0.0.3, on free ports.
    pub fn pick() -> Result<Self, LabError> {
        let mut nodes = Vec::new();
        for (i, (name, site)) in [("dc1-a", "dc1"), ("dc2-a", "dc2"), ("witness-a", "witness")]
            .into_iter()
            .enumerate()
        {
            let last = u8::try_from(i + 1).unwrap_or(1);
            let ip = Ipv4Addr::new(127, 0, 0, last);
            nodes.push((name.into(), site.into(), free_port(ip)?, free_port(ip)?));
        }
        Ok(Self { nodes })
    }

    /// `(name, cluster address)` for the configuration's `orchestrators:`.
    pub fn cluster_addresses(&self) -> Vec<(&str, SocketAddr)> {
        self.nodes
            .iter()
            .map(|(n, _, c, _)| (n.as_str(), *c))
            .collect()
    }
}

/// One running orchestrator.
#[derive(Debug)]
pub struct Orchestrator {
    pub name: String,
    pub site: String,
    pub cluster: SocketAddr,
    pub api: SocketAddr,
    /// SHA-256 of its API certificate (hex), as `qfence serve` printed it.
    pub pin: String,
    pub data: PathBuf,
    pub log: PathBuf,
    pub pid: u32,
    child: tokio::sync::Mutex<Child>,
    frozen: Mutex<bool>,
}

impl Orchestrator {
    /// `https://ADDR`.
    pub fn api_url(&self) -> String {
        format!("https://{}", self.api)
    }

    /// Whether it is frozen by `lab fail`.
    pub fn frozen(&self) -> bool {
        self.frozen.lock().map(|g| *g).unwrap_or(false)
    }

    fn signal(&self, sig: rustix::process::Signal) -> Result<(), LabError> {
        // Never pid 0 or a negative one: those would signal a whole group, ours included.
        let pid = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| LabError::Orchestrator {
                name: self.name.clone(),
                reason: format!("no process to signal (pid {})", self.pid),
            })?;
        rustix::process::kill_process(pid, sig).map_err(|e| LabError::Orchestrator {
            name: self.name.clone(),
            reason: format!("signal {sig:?} to pid {} failed: {e}", self.pid),
        })
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the process.
    pub fn set_frozen(&self, on: bool) -> Result<(), LabError> {
        self.signal(if on {
            rustix::process::Signal::STOP
        } else {
            rustix::process::Signal::CONT
        })?;
        if let Ok(mut g) = self.frozen.lock() {
            *g = on;
        }
        Ok(())
    }
}

/// The lab's orchestrators.
#[derive(Debug)]
pub struct Orchestrators {
    pub list: Vec<Orchestrator>,
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(15);
    lines[from..].join("\n")
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

impl Orchestrators {
    /// Starts one `qfence serve` per orchestrator: the first with `--init` (it creates the
    /// cluster and writes the others' join tokens), the others with `--join` and their token,
    /// waiting for each to serve before the next joins (a joined voter that is down would
    /// cost the cluster its quorum).
    pub async fn start(
        exe: &Path,
        dir: &Path,
        topology: &Topology,
        config: &Path,
        tokens: &Path,
        secrets: &Path,
    ) -> Result<Self, LabError> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io_err(&logs))?;
        let mut list: Vec<Orchestrator> = Vec::new();
        let first_cluster = topology.nodes.first().map(|n| n.2);
        for (i, (name, site, cluster, api)) in topology.nodes.iter().enumerate() {
            let data = dir.join(name);
            let log = logs.join(format!("{name}.log"));
            std::fs::write(&log, "").map_err(io_err(&log))?;
            // One `qfence serve` each: the first creates the cluster and writes a join token
            // for each other orchestrator; the others join with theirs (the witness is one
            // by the configuration).
            let membership = if i == 0 {
                vec![s("--init")]
            } else {
                let token = dir
                    .join(&topology.nodes[0].0)
                    .join("join-tokens")
                    .join(format!("{name}.token"));
                vec![
                    s("--join"),
                    first_cluster.map(s).unwrap_or_default(),
                    s("--join-token-file"),
                    token.display().to_string(),
                ]
            };
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .map_err(io_err(&log))?;
            let err = file.try_clone().map_err(io_err(&log))?;
            let child = Command::new(exe)
                .args([
                    s("serve"),
                    s("--config"),
                    config.display().to_string(),
                    s("--name"),
                    name.clone(),
                    s("--data"),
                    data.display().to_string(),
                    s("--tokens"),
                    tokens.display().to_string(),
                    s("--listen"),
                    s(api),
                    s("--secrets-dir"),
                    secrets.display().to_string(),
                    s("--fast-timers"),
                    s("--drain-seconds"),
                    s(2),
                ])
                .args(&membership)
                .stdin(Stdio::null())
                .stdout(Stdio::from(file))
                .stderr(Stdio::from(err))
                .kill_on_drop(true)
                .spawn()
                .map_err(io_err(exe))?;
            let pid = child.id().unwrap_or(0);
            let mut o = Orchestrator {
                name: name.clone(),
                site: site.clone(),
                cluster: *cluster,
                api: *api,
                pin: String::new(),
                data,
                log,
                pid,
                child: tokio::sync::Mutex::new(child),
                frozen: Mutex::new(false),
            };
            o.pin = o.wait_serving(Duration::from_secs(60)).await?;
            list.push(o);
        }
        Ok(Self { list })
    }

    /// The orchestrator called `name`.
    pub fn get(&self, name: &str) -> Option<&Orchestrator> {
        self.list.iter().find(|o| o.name == name)
    }

    /// The orchestrators of `site`.
    pub fn at_site<'a>(&'a self, site: &'a str) -> impl Iterator<Item = &'a Orchestrator> + 'a {
        self.list.iter().filter(move |o| o.site == site)
    }

    /// Stops each one: thawed, SIGTERM, and SIGKILL after 5 s.
    pub async fn stop_all(&self) {
        for o in self.list.iter().rev() {
            if o.frozen() {
                let _ = o.set_frozen(false);
            }
            let _ = o.signal(rustix::process::Signal::TERM);
            let mut child = o.child.lock().await;
            if tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

impl Orchestrator {
    /// Waits for `qfence serve`'s "API certificate sha256:HEX" line; returns HEX.
    async fn wait_serving(&self, limit: Duration) -> Result<String, LabError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(line) = text
                .lines()
                .find(|l| l.starts_with("API certificate sha256:"))
            {
                return Ok(line
                    .trim_start_matches("API certificate sha256:")
                    .trim()
                    .to_owned());
            }
            let exited = self
                .child
                .lock()
                .await
                .try_wait()
                .map_err(io_err(&self.log))?;
            if let Some(status) = exited {
                return Err(LabError::Orchestrator {
                    name: self.name.clone(),
                    reason: format!(
                        "`qfence serve` exited ({status}); its log {}:\n{}",
                        self.log.display(),
                        tail(&self.log)
                    ),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(LabError::Orchestrator {
                    name: self.name.clone(),
                    reason: format!(
                        "not serving after {limit:?}; its log {}:\n{}",
                        self.log.display(),
                        tail(&self.log)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
