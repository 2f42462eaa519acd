//! The online commands, run as an operator would: the built `qfence` binary against the real
//! API router, served over HTTPS (a self-signed certificate, trusted by pin or CA file) on
//! loopback, over the lab running for real (`qfence_server::testing::LabRuntime`: the lab's
//! simulators, a one-voter cluster, the engine's loop). The engine carries operations out
//! while the binary polls; a test changes the simulators to make one stop.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use qfence_runtime::{Access, Metrics, TokenStore};
use qfence_server::ApiConfig;
use qfence_server::testing::LabRuntime;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

mod operations;
mod reads;
mod timeline;
mod trust;

const VIEWER: &str = "viewer-token-1";
const OPERATOR: &str = "operator-token-2";
const ADMIN: &str = "admin-token-3";

fn phase(s: &str) {
    eprintln!("--- {s}");
}

/// The API on 127.0.0.1 over HTTPS, and what a client needs to trust it.
struct Server {
    url: String,
    pin: String,
    ca_file: PathBuf,
    lab: LabRuntime,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Server {
    async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cert = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])
        .unwrap();
        let der = cert.cert.der().clone();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("api.pem");
        std::fs::write(&ca_file, cert.cert.pem()).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let server_config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .unwrap();
        let lab = LabRuntime::start().await.expect("the lab starts");
        let tokens = TokenStore::default()
            .with_token(Access::Viewer, "grafana", VIEWER)
            .with_token(Access::Operator, "oncall", OPERATOR)
            .with_token(Access::Admin, "alice", ADMIN);
        let app =
            qfence_server::router(lab.backend(), tokens, Metrics::new(), &ApiConfig::default());
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(qfence_server::tls::serve_tls(
            tcp,
            server_config,
            app,
            stop.clone(),
        ));
        Self {
            url: format!("https://127.0.0.1:{}", addr.port()),
            pin: qfence_controllers::tls::fingerprint(&der),
            ca_file,
            lab,
            stop,
            _dir: dir,
        }
    }

    /// `qfence ARGS` with the API, the pin and the operator's token in the environment.
    fn command(&self, args: &[&str]) -> Command {
        self.command_as(OPERATOR, args)
    }

    fn command_as(&self, token: &str, args: &[&str]) -> Command {
        let mut c = bare(args);
        c.env("QFENCE_API", &self.url)
            .env("QFENCE_API_PIN", &self.pin)
            .env("QFENCE_TOKEN", token);
        c
    }

    async fn run(&self, args: &[&str]) -> Out {
        Out::of(self.command(args).output().await.unwrap())
    }

    async fn run_as(&self, token: &str, args: &[&str]) -> Out {
        Out::of(self.command_as(token, args).output().await.unwrap())
    }

    /// Asks `status --format json` until `holds` (the engine acts on its next cycle).
    async fn status_until(&self, what: &str, holds: impl Fn(&serde_json::Value) -> bool) {
        for _ in 0..300 {
            let v = self.run(&["--format", "json", "status"]).await.ok().json();
            if holds(&v) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no {what} in the status within 30 s");
    }
}

/// The binary with no QFENCE_* settings inherited from the environment.
fn bare(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qfence"));
    c.args(args)
        .env_remove("QFENCE_API")
        .env_remove("QFENCE_TOKEN")
        .env_remove("QFENCE_API_PIN")
        .env_remove("QFENCE_API_CA")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    fn of(o: Output) -> Self {
        Self {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    fn ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "{self:#?}");
        self
    }
}

/// A running CLI whose stdout is read line by line as it prints: the test moves the double on
/// only after the CLI showed the previous step, so the story is the same however slow the
/// machine, and the output is proven live, not printed at the end.
struct Live {
    child: Child,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
    seen: String,
}

impl Live {
    fn spawn(mut c: Command) -> Self {
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            lines,
            seen: String::new(),
        }
    }

    /// Reads lines until one holds `needle`.
    async fn until(&mut self, needle: &str) {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {needle:?} within 30 s; so far:\n{}", self.seen))
                .unwrap();
            let Some(line) = line else {
                panic!("the CLI ended before {needle:?}:\n{}", self.seen);
            };
            self.seen.push_str(&line);
            self.seen.push('\n');
            if line.contains(needle) {
                return;
            }
        }
    }

    /// Waits for the end and collects the rest.
    async fn finish(mut self) -> Out {
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("the CLI ends")
            .unwrap();
        while let Some(line) = self.lines.next_line().await.unwrap() {
            self.seen.push_str(&line);
            self.seen.push('\n');
        }
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .await
            .unwrap();
        Out {
            code: status.code(),
            stdout: self.seen,
            stderr,
        }
    }
}

/// Site `name` of the first plan in a `status --format json` answer.
fn site_of(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v["plans"][0]["sites"]
        .as_array()
        .and_then(|sites| sites.iter().find(|x| x["site"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no site {name} in {v}"))
}

/// Asserts that `needles` appear in `hay` in this order.
fn in_order(hay: &str, needles: &[&str]) {
    let mut from = 0;
    for n in needles {
        match hay[from..].find(n) {
            Some(i) => from += i + n.len(),
            None => panic!("{n:?} missing or out of order in:\n{hay}"),
        }
    }
}

/// Ctrl-C to a child, by pid.
fn interrupt(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .expect("a child's pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
}
