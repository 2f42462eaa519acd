//! The real Nova test peer (`tools/emulators/nova`: Keystone, Nova 34 with fake compute
//! hosts, PostgreSQL, RabbitMQ), shared by every test of one test run.
//!
//! The cloud is heavy (~1.6 GiB, ~1-2 min to start), so one runs per test run, not per test:
//! the first test to need it (in whichever test process) starts it in a run directory named
//! after the run (`NEXTEST_RUN_ID`, or this process when run without nextest), with ports
//! of its own; the others wait for it and use it. A watchdog started with it stops it (by
//! pid file, `stop.sh`) and deletes its directory once the test runner has exited, so it
//! never outlives the run. The tests that change hosts are serialized (nextest test group
//! `nova`), and each starts with [`Cloud::reset`]: every host running, up, enabled and not
//! forced down, no servers.
//!
//! `QFENCE_NOVA_PEER=DIR` uses a peer already started by hand with `QFENCE_EMU_RUN=DIR
//! tools/emulators/nova/start.sh` instead (it is left running): quicker when working on the
//! driver.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::emulators::{free_port, missing, tools_dir};

/// The ports the start script reads.
const PORTS: [&str; 9] = [
    "NOVA_PG_PORT",
    "NOVA_RABBIT_PORT",
    "NOVA_RABBIT_DIST_PORT",
    "NOVA_EPMD_PORT",
    "KEYSTONE_PORT",
    "NOVA_API_PORT",
    "PLACEMENT_PORT",
    "GLANCE_PORT",
    "NEUTRON_PORT",
];
/// How long a first start may take (one attempt): 116-254 s were seen on a 2-core machine
/// while the rest of the suite ran, 300 s once under a heavier load.
const START: Duration = Duration::from_secs(420);

/// A running peer: what its start script printed.
#[derive(Debug)]
pub struct Cloud {
    pub vars: BTreeMap<String, String>,
    pub run: PathBuf,
}

static CLOUD: OnceLock<Option<Cloud>> = OnceLock::new();

/// The run's cloud, started if no test started it yet. `None` only with
/// `QFENCE_SKIP_EMULATORS=1` when it is not installed.
pub fn cloud() -> Option<&'static Cloud> {
    CLOUD.get_or_init(start_or_join).as_ref()
}

fn venv_ready() -> bool {
    let mut data = std::fs::read(tools_dir().join("requirements/nova.txt")).unwrap_or_default();
    let python = std::env::var("QFENCE_EMU_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    data.extend_from_slice(python.as_bytes());
    data.push(b'\n');
    let digest = ring::digest::digest(&ring::digest::SHA256, &data);
    let home = std::env::var("QFENCE_EMU_HOME").unwrap_or_else(|_| "/opt/qfence-emu".into());
    Path::new(&home)
        .join(format!("nova-{}", &hex::encode(digest.as_ref())[..12]))
        .join(".qfence-installed")
        .is_file()
}

/// The run's key and the process whose end ends the cloud.
fn run_key() -> (String, u32) {
    match std::env::var("NEXTEST_RUN_ID") {
        // Test processes are the runner's children: the cloud lives as long as the runner.
        Ok(id) => (
            id,
            rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32),
        ),
        Err(_) => (format!("pid-{}", std::process::id()), std::process::id()),
    }
}

fn start_or_join() -> Option<Cloud> {
    if let Ok(dir) = std::env::var("QFENCE_NOVA_PEER") {
        let text = std::fs::read_to_string(Path::new(&dir).join("nova/nova.env"))
            .unwrap_or_else(|e| panic!("QFENCE_NOVA_PEER={dir}: no nova/nova.env ({e})"));
        return Some(Cloud {
            vars: parse_vars(&text),
            run: PathBuf::from(dir),
        });
    }
    if !venv_ready() || !Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() {
        missing("the real Nova test peer (venv nova, rabbitmq-server)")?;
    }
    let (key, watched) = run_key();
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    // Short: PostgreSQL's socket lives under it (Unix socket paths are limited).
    let run = PathBuf::from(format!("/tmp/qfn-{}", &hex::encode(digest.as_ref())[..10]));
    let ready = run.join("ready.env");
    let failed = run.join("failed.txt");
    if std::fs::create_dir(&run).is_ok() {
        watch(&run, watched);
        let outcome = launch(&run);
        match outcome {
            Ok(text) => {
                let tmp = run.join("ready.tmp");
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, &ready).unwrap();
            }
            Err(why) => {
                std::fs::write(&failed, &why).unwrap();
            }
        }
    }
    // Two attempts, and the other processes' wait covers both.
    let until = Instant::now() + START * 2 + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            return Some(Cloud {
                vars: parse_vars(&text),
                run,
            });
        }
        if let Ok(why) = std::fs::read_to_string(&failed) {
            panic!("the real Nova test peer did not start:\n{why}");
        }
        assert!(
            Instant::now() < until,
            "the real Nova test peer in {} was not ready in time",
            run.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn parse_vars(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Stops the cloud once `pid` has exited: a detached shell polling it, then `stop.sh` by
/// pid files, then the run directory removed.
fn watch(run: &Path, pid: u32) {
    let stop = tools_dir().join("nova/stop.sh");
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 2; done; \
         QFENCE_EMU_RUN='{run}' bash '{stop}' >/dev/null 2>&1; rm -rf '{run}'",
        run = run.display(),
        stop = stop.display(),
    );
    // `setsid -f` forks the watchdog off and returns at once: nothing is left to wait for.
    let status = Command::new("setsid")
        .args(["-f", "bash", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start the Nova peer's watchdog");
    assert!(
        status.success(),
        "the Nova peer's watchdog did not start: {status}"
    );
}

/// Runs the start script (twice at most, on fresh ports: a port can be taken meanwhile).
fn launch(run: &Path) -> Result<String, String> {
    let mut report = String::new();
    for attempt in 1..=2 {
        let mut cmd = Command::new("bash");
        cmd.arg(tools_dir().join("nova/start.sh"))
            .env("QFENCE_EMU_RUN", run)
            .env("NOVA_FRESH", if attempt > 1 { "1" } else { "0" })
            .stdin(Stdio::null());
        let mut taken = Vec::new();
        for var in PORTS {
            let p = loop {
                let p = free_port();
                if !taken.contains(&p) {
                    break p;
                }
            };
            taken.push(p);
            cmd.env(var, p.to_string());
        }
        let t = Instant::now();
        let out = run_with_deadline(cmd, START, &run.join(format!("start-{attempt}.out")));
        match out {
            Ok(text) => {
                eprintln!(
                    "the real Nova test peer started in {:.0} s (attempt {attempt})",
                    t.elapsed().as_secs_f64()
                );
                return Ok(text
                    .lines()
                    .filter(|l| l.contains('=') && !l.starts_with('['))
                    .collect::<Vec<_>>()
                    .join("\n"));
            }
            Err(why) => {
                report.push_str(&format!("--- attempt {attempt}: {why}\n"));
                let _ = Command::new("bash")
                    .arg(tools_dir().join("nova/stop.sh"))
                    .env("QFENCE_EMU_RUN", run)
                    .output();
            }
        }
    }
    Err(report)
}

/// Runs `cmd` (its output to `log`) in its own process group, killed at the deadline.
fn run_with_deadline(mut cmd: Command, deadline: Duration, log: &Path) -> Result<String, String> {
    let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
    cmd.stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let until = Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
            _ => {
                if let Some(pgid) = i32::try_from(child.id())
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ =
                        rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                // Killed at the deadline: a failure, whatever status the kill left.
                break None;
            }
        }
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let Some(status) = status else {
        let lines: Vec<&str> = text.lines().collect();
        return Err(format!(
            "not ready within {} s:\n{}",
            deadline.as_secs(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        ));
    };
    if status.success() {
        Ok(text)
    } else {
        let lines: Vec<&str> = text.lines().collect();
        Err(format!(
            "{status}:\n{}",
            lines[lines.len().saturating_sub(40)..].join("\n")
        ))
    }
}

impl Cloud {
    pub fn var(&self, k: &str) -> &str {
        self.vars
            .get(k)
            .unwrap_or_else(|| panic!("the Nova peer printed no {k}: {:?}", self.vars))
    }

    pub fn hosts(&self) -> Vec<String> {
        self.var("NOVA_COMPUTE_HOSTS")
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn nova_run(&self) -> PathBuf {
        PathBuf::from(self.var("NOVA_RUN"))
    }

    /// The pid of `host`'s `nova-compute` while it runs.
    fn compute_pid(&self, host: &str) -> Option<rustix::process::Pid> {
        let pidfile = self.nova_run().join(format!("nova-compute-{host}.pid"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let pid = rustix::process::Pid::from_raw(pid)?;
        // Signal 0: is it alive (a zombie too, until its parent reaps it).
        rustix::process::test_kill_process(pid).ok().map(|()| pid)
    }

    /// SIGKILLs the `nova-compute` of `host` (a host that died).
    pub fn kill_compute(&self, host: &str) {
        let pid = self
            .compute_pid(host)
            .unwrap_or_else(|| panic!("{host}'s nova-compute is not running"));
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }

    /// SIGKILLs the `nova-compute` of `host` if it runs (its power cut); true if it ran.
    pub fn cut_compute(&self, host: &str) -> bool {
        let Some(pid) = self.compute_pid(host) else {
            return false;
        };
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
    }

    /// Starts again every `nova-compute` that is not running.
    pub fn start_computes(&self) {
        self.run_computes(&[]);
    }

    /// Starts `host`'s `nova-compute` if it is not running (its host powered on).
    pub fn start_compute(&self, host: &str) {
        self.run_computes(&[host]);
    }

    fn run_computes(&self, hosts: &[&str]) {
        let out = Command::new("bash")
            .arg(tools_dir().join("nova/start.sh"))
            .arg("computes")
            .args(hosts)
            .env("QFENCE_EMU_RUN", &self.run)
            .envs(self.port_env())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops one process of the peer by its pid-file name, gracefully.
    pub fn stop_process(&self, name: &str) {
        let _ = Command::new("bash")
            .arg(tools_dir().join("nova/stop.sh"))
            .arg(name)
            .env("QFENCE_EMU_RUN", &self.run)
            .output();
    }

    fn port_env(&self) -> Vec<(String, String)> {
        // The computes' configuration is already written; only the run dir matters.
        Vec::new()
    }

    /// An admin REST client on the peer (for setting tests up, independent of the driver).
    pub async fn admin(&self) -> Admin {
        Admin::login(self).await
    }

    /// Every host running, up, enabled and not forced down; no servers. Restarts a host's
    /// `nova-compute` when Nova refuses to clear forced-down because of `done` evacuations
    /// (it cleans those up when it starts).
    pub async fn reset(&self) {
        let t = Instant::now();
        self.start_computes();
        let a = self.admin().await;
        a.delete_all_servers().await;
        let until = Instant::now() + Duration::from_secs(120);
        for s in a.services().await {
            let host = s["host"].as_str().unwrap().to_owned();
            let id = s["id"].as_str().unwrap().to_owned();
            if !s["forced_down"].as_bool().unwrap_or(false) {
                continue;
            }
            let mut restarted = false;
            loop {
                let (code, body) = a.put_service(&id, json!({"forced_down": false})).await;
                if code == 200 {
                    break;
                }
                assert!(
                    Instant::now() < until,
                    "cannot clear forced-down on {host}: {body}"
                );
                if code == 400 && !restarted {
                    self.stop_process(&format!("nova-compute-{host}"));
                    self.start_computes();
                    restarted = true;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        loop {
            let s = a.services().await;
            if s.iter().all(|s| s["state"] == "up") {
                break;
            }
            assert!(
                Instant::now() < until,
                "compute hosts not up again: {}",
                Value::from(s)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for s in a.services().await {
            if s["status"] != "enabled" {
                let id = s["id"].as_str().unwrap();
                let (code, body) = a.put_service(id, json!({"status": "enabled"})).await;
                assert_eq!(code, 200, "{body}");
            }
        }
        eprintln!("--- nova peer reset in {:.1} s", t.elapsed().as_secs_f64());
    }
}

/// A small admin client for test set-up (boot, delete, pause, services), by REST.
pub struct Admin {
    http: reqwest::Client,
    token: String,
    nova: String,
    image: String,
}

impl Admin {
    async fn login(c: &Cloud) -> Self {
        let trust = qfence_model::config::TlsTrust::CaFile(c.var("NOVA_CACERT").to_owned());
        let tls = qfence_controllers::tls::client_config("nova-admin", &trust).unwrap();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.config)
            .timeout(Duration::from_secs(30))
            .no_proxy()
            .build()
            .unwrap();
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": c.var("ADMIN_USER"), "domain": {"name": "Default"},
            "password": c.var("ADMIN_PASSWORD")}}},
            "scope": {"project": {"name": c.var("ADMIN_PROJECT"), "domain": {"name": "Default"}}}}});
        let r = http
            .post(format!("{}/auth/tokens", c.var("KEYSTONE_URL")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let token = r.headers()["x-subject-token"].to_str().unwrap().to_owned();
        Self {
            http,
            token,
            nova: c.var("NOVA_URL").to_owned(),
            image: c.var("NOVA_IMAGE_ID").to_owned(),
        }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.nova))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", "compute 2.74");
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let code = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn services(&self) -> Vec<Value> {
        let (code, v) = self
            .call(
                reqwest::Method::GET,
                "/os-services?binary=nova-compute",
                None,
            )
            .await;
        assert_eq!(code, 200, "{v}");
        v["services"].as_array().unwrap().clone()
    }

    pub async fn put_service(&self, id: &str, body: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::PUT,
            &format!("/os-services/{id}"),
            Some(body),
        )
        .await
    }

    pub async fn servers(&self) -> Vec<Value> {
        let (code, v) = self
            .call(reqwest::Method::GET, "/servers/detail?all_tenants=1", None)
            .await;
        assert_eq!(code, 200, "{v}");
        v["servers"].as_array().unwrap().clone()
    }

    /// Boots `n` servers named `prefix-1..n` on `host`, and waits until they are ACTIVE.
    pub async fn boot_on(&self, prefix: &str, host: &str, n: usize) -> Vec<String> {
        let body = json!({"server": {"name": prefix, "imageRef": self.image, "flavorRef": "1",
            "networks": "none", "host": host, "min_count": n, "max_count": n}});
        let (code, v) = self
            .call(reqwest::Method::POST, "/servers", Some(body))
            .await;
        assert_eq!(code, 202, "{v}");
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            let mine: Vec<Value> = self
                .servers()
                .await
                .into_iter()
                .filter(|s| {
                    let name = s["name"].as_str().unwrap_or("");
                    name == prefix || name.starts_with(&format!("{prefix}-"))
                })
                .collect();
            let active = mine.iter().filter(|s| s["status"] == "ACTIVE").count();
            if mine.len() == n && active == n {
                return mine
                    .iter()
                    .map(|s| s["id"].as_str().unwrap().to_owned())
                    .collect();
            }
            assert!(
                mine.iter().all(|s| s["status"] != "ERROR"),
                "a server went to ERROR: {mine:?}"
            );
            assert!(
                Instant::now() < until,
                "servers not ACTIVE in time: {mine:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub async fn action(&self, id: &str, action: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            &format!("/servers/{id}/action"),
            Some(action),
        )
        .await
    }

    pub async fn delete_all_servers(&self) {
        let all = self.servers().await;
        for s in &all {
            let id = s["id"].as_str().unwrap();
            // A locked server cannot be deleted by its owner; the admin unlocks it first.
            if s["locked"].as_bool().unwrap_or(false) {
                self.action(id, json!({"unlock": null})).await;
            }
            let (code, v) = self
                .call(reqwest::Method::DELETE, &format!("/servers/{id}"), None)
                .await;
            assert!(code == 204 || code == 404, "delete {id}: {code} {v}");
        }
        let until = Instant::now() + Duration::from_secs(90);
        while !self.servers().await.is_empty() {
            assert!(Instant::now() < until, "servers not deleted in time");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Waits until the host's service reads `state`.
    pub async fn wait_state(&self, host: &str, state: &str, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let s = self.services().await;
            if s.iter().any(|s| s["host"] == host && s["state"] == state) {
                return;
            }
            assert!(Instant::now() < until, "{host} not {state} in time");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub async fn service_id(&self, host: &str) -> String {
        self.services()
            .await
            .into_iter()
            .find(|s| s["host"] == host)
            .and_then(|s| s["id"].as_str().map(str::to_owned))
            .unwrap()
    }
}
