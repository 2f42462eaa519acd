//! The online commands, run as an operator would: the built `qfence` binary against the real
//! API router, served over HTTPS (a self-signed certificate, trusted by pin or CA file) on
//! loopback, over the lab running for real (`qfence_server::testing::LabRuntime`: the lab's
//! simulators, a one-voter cluster, the engine's loop). The engine carries operations out
//! while the binary polls; a test changes the simulators to make one stop.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use qfence_lab::faults::Cut;
use qfence_lab::redfish::Role;
use qfence_runtime::dto::VerdictDto;
use qfence_runtime::{Access, Metrics, TokenStore};
use qfence_server::ApiConfig;
use qfence_server::testing::LabRuntime;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_warns_of_a_binding_to_a_capability_that_cannot_work() {
    let s = Server::start().await;
    let set_role = |role: Role| {
        s.lab
            .sims
            .bmc2
            .update(|b| b.accounts.iter_mut().for_each(|a| a.role = role));
    };

    phase("bmc-dc2's account is read-only and its test grades power.off failed");
    set_role(Role::ReadOnly);
    s.lab.test_controller("bmc-dc2").await.unwrap();
    let out = s.run(&["status"]).await;
    assert!(
        out.ok().stdout.contains(
            "warning: plan erp-db: plans.erp-db.instances.dc2[0].capability: bound to a \
             capability that cannot work: power.off of controller bmc-dc2 was graded failed by \
             its latest test ("
        ),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("ReadOnly"), "{}", out.stdout);
    let v = s.run(&["--format", "json", "status"]).await.ok().json();
    assert_eq!(
        v["plans"][0]["unworkable"][0]["path"],
        "plans.erp-db.instances.dc2[0].capability"
    );
    assert_eq!(v["plans"][0]["unworkable"][0]["controller"], "bmc-dc2");

    phase("the account fixed and tested again: no warning");
    set_role(Role::Operator);
    s.lab.test_controller("bmc-dc2").await.unwrap();
    let out = s.run(&["status"]).await;
    assert!(!out.ok().stdout.contains("cannot work"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_plans_controllers_and_events_print_tables_and_json() {
    let s = Server::start().await;
    s.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();

    phase("status, for people and for scripts");
    let out = s.run(&["status"]).await;
    out.ok();
    in_order(
        &out.stdout,
        &[
            "leader dc1-a",
            "PLAN",
            "OWNER",
            "PHASE",
            "erp-db",
            "dc1",
            "steady",
        ],
    );
    // The engine read dc2's fences back: the standby is FENCED.
    assert!(out.stdout.contains("dc2 standby FENCED"), "{}", out.stdout);
    let out = s.run(&["--format", "json", "status"]).await;
    let v = out.ok().json();
    assert_eq!(v["plans"][0]["plan"], "erp-db");
    assert_eq!(v["plans"][0]["generation"], 1);
    assert_eq!(v["leader"]["orchestrator"], "dc1-a");

    phase("plan list and plan show, online");
    let out = s.run(&["plan", "list"]).await;
    in_order(
        &out.ok().stdout,
        &["PLAN", "GEN", "erp-db", "dc1", "steady", "1"],
    );
    let v = s
        .run(&["plan", "list", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(v["plans"][0]["name"], "erp-db");
    let out = s.run(&["plan", "show", "erp-db"]).await;
    in_order(
        &out.ok().stdout,
        &[
            "plan erp-db, generation 1",
            "owner dc1",
            "SITE",
            "dc1",
            "owner",
            "dc2",
            "standby",
            "spec:",
            "  interval_seconds: 10",
        ],
    );
    let v = s
        .run(&["plan", "show", "erp-db", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(v["plan"]["spec"]["owner"], "dc1");
    assert_eq!(v["status"]["owner"], "dc1");
    let out = s.run(&["plan", "show", "no-such-plan"]).await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(not_found, HTTP 404)"),
        "{}",
        out.stderr
    );

    phase("controller list");
    let out = s.run(&["controller", "list"]).await;
    in_order(
        &out.ok().stdout,
        &[
            "CONTROLLER",
            "TYPE",
            "SECRET",
            "bmc-dc1",
            "redfish",
            "dc1",
            "lab-redfish",
            "untested",
        ],
    );
    let v = s
        .run(&["controller", "list", "--format", "json"])
        .await
        .ok()
        .json();
    assert!(v.as_array().unwrap().iter().any(|c| c["name"] == "pve-dc2"));

    phase("events: the table, JSON lines, filters");
    s.run(&["plan", "pause", "erp-db", "--reason", "patching"])
        .await
        .ok();
    let out = s.run(&["events"]).await;
    in_order(
        &out.ok().stdout,
        &[
            "SEQ",
            "KIND",
            "ACTOR",
            "operator",
            "erp-db",
            "token:oncall",
            "pause of erp-db requested: patching",
        ],
    );
    let out = s
        .run(&["events", "--format", "json", "--kind", "operator"])
        .await;
    let lines: Vec<serde_json::Value> = out
        .ok()
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(lines[0]["message"], "pause of erp-db requested: patching");
    let out = s.run(&["events", "--plan", "no-such-plan"]).await;
    assert!(out.ok().stdout.contains("no events"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_actions_dry_run_pause_confirm_fenced_and_register() {
    let s = Server::start().await;

    phase("dry runs: the next cycle, a failover, a switchover");
    let out = s.run(&["plan", "dry-run", "erp-db"]).await;
    out.ok();
    assert!(
        out.stdout.starts_with("plan erp-db, generation 1"),
        "{}",
        out.stdout
    );
    let v = s
        .run(&[
            "plan", "dry-run", "erp-db", "--to", "dc2", "--format", "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(v["refused"], false);
    assert!(v["commands"].as_array().unwrap().len() > 1, "{v}");
    let out = s
        .run(&["plan", "dry-run", "erp-db", "--switchover", "--to", "dc2"])
        .await;
    in_order(&out.ok().stdout, &["plan erp-db", "  1. "]);

    phase("pause and resume");
    let out = s.run(&["plan", "pause", "erp-db"]).await;
    assert!(
        out.ok().stdout.contains("pause erp-db: generation 1"),
        "{}",
        out.stdout
    );
    // A pause is an intent: the engine's next cycle carries it out.
    s.status_until("erp-db paused", |v| v["plans"][0]["paused"] == true)
        .await;
    let v = s
        .run(&["plan", "resume", "erp-db", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(v["operation"], "resume");
    s.status_until("erp-db running", |v| v["plans"][0]["paused"] == false)
        .await;

    phase("a viewer may not pause: 403, exit 1, the role named");
    let out = Out::of(
        s.command_as(VIEWER, &["plan", "pause", "erp-db"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("needs the operator role"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("(forbidden, HTTP 403)"),
        "{}",
        out.stderr
    );

    phase("confirm-fenced the standby: recorded, generation checked");
    let out = s
        .run(&[
            "plan",
            "confirm-fenced",
            "erp-db",
            "dc2",
            "--generation",
            "1",
            "--reason",
            "checked the rack by hand",
        ])
        .await;
    assert!(
        out.ok().stdout.contains("confirm_fenced erp-db"),
        "{}",
        out.stdout
    );
    let v = s.run(&["--format", "json", "status"]).await.json();
    let dc2 = v["plans"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["site"] == "dc2")
        .unwrap()
        .clone();
    assert_eq!(dc2["verdict"], "FENCED", "{v}");

    phase("controller register from YAML, then test it through the API");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bmc.yaml");
    // A port nothing listens on: the test reaches no BMC there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    std::fs::write(
        &spec,
        format!(
            "type: redfish\nendpoint: https://127.0.0.1:{port}\nsite: dc2\nreach: [dc1]\n\
             secret: lab-redfish\nusername: qfence\ntls: {{insecure: true}}\n"
        ),
    )
    .unwrap();
    let spec = spec.display().to_string();
    let out = s
        .run_as(
            ADMIN,
            &["controller", "register", "bmc-dc2-b", "--spec", &spec],
        )
        .await;
    in_order(
        &out.ok().stdout,
        &["registered bmc-dc2-b", "bmc-dc2-b", "redfish", "dc2"],
    );
    let out = s
        .run_as(
            ADMIN,
            &["controller", "register", "bmc-dc2-b", "--spec", &spec],
        )
        .await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("(conflict, HTTP 409)"),
        "{}",
        out.stderr
    );
    std::fs::write(dir.path().join("bad.yaml"), "type: redfish\nsite: dc9\n").unwrap();
    let bad = dir.path().join("bad.yaml").display().to_string();
    let out = s
        .run_as(ADMIN, &["controller", "register", "bmc-x", "--spec", &bad])
        .await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("validation_failed"), "{}", out.stderr);
    assert!(
        out.stderr.contains("error: controllers.bmc-x"),
        "{}",
        out.stderr
    );
    // Nothing answers at its endpoint: the test cannot reach it (no capability graded), and
    // the CLI fails on that.
    let out = s.run_as(ADMIN, &["controller", "test", "bmc-dc2-b"]).await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stdout.contains("bmc-dc2-b: NOT reachable"), "{out:#?}");
    assert!(!out.stdout.contains("CAPABILITY"), "{out:#?}");
    assert!(
        out.stderr.contains("bmc-dc2-b is not reachable"),
        "{}",
        out.stderr
    );
    let v = s
        .run(&["controller", "list", "--format", "json"])
        .await
        .json();
    let b = v
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "bmc-dc2-b")
        .unwrap()
        .clone();
    assert!(b["tested_at_ms"].is_u64(), "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_shows_each_step_until_the_new_owner_is_steady() {
    let s = Server::start().await;
    s.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();

    phase("the CLI asks for a switchover and follows the engine through its steps");
    let mut cli = Live::spawn(s.command(&[
        "plan",
        "switchover",
        "erp-db",
        "--to",
        "dc2",
        "--generation",
        "1",
        "--poll-seconds",
        "0.1",
        "--reason",
        "planned maintenance",
    ]));
    cli.until("accepted at generation").await;
    let out = cli.finish().await;
    assert_eq!(out.code, Some(0), "{out:#?}");
    in_order(
        &out.stdout,
        &[
            "erp-db: owner dc1",
            "switchover of erp-db accepted at generation 1",
            "operator: switchover of erp-db requested: planned maintenance",
            "decision: oncall switches erp-db over from dc1 to dc2 (planned maintenance)",
            "phase fences to dc2",
            "decision: erp-db to dc2, verify step",
            "decision: erp-db to dc2, switchover step: dc2 vm.start",
            "decision: committed erp-db to dc2 at generation 2",
            "decision: erp-db to dc2, service step",
            "phase steady",
            "done: dc2 owns erp-db (generation 2)",
        ],
    );
    // Each step is printed once, with its time.
    assert_eq!(
        out.stdout
            .matches("decision: oncall switches erp-db over")
            .count(),
        1,
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.len() > 9 && l.as_bytes()[2] == b':' && l.contains("requested")),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_stops_exits_1_and_one_not_allowed_is_refused() {
    let s = Server::start().await;

    phase("a failover to the owner is refused, nothing changes");
    let out = s
        .run(&[
            "plan",
            "failover",
            "erp-db",
            "--to",
            "dc1",
            "--generation",
            "1",
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stderr.contains("(refused, HTTP 409)"), "{}", out.stderr);
    assert!(s.lab.caller_events().is_empty(), "{:#?}", s.lab.events());

    phase("dc1's BMC does not answer: the failover is accepted, dc1 is never proven fenced");
    s.lab.sims.bmc1.faults().set_unreachable(Some(Cut::Refuse));
    let mut cli = Live::spawn(s.command(&[
        "plan",
        "failover",
        "erp-db",
        "--generation",
        "1",
        "--poll-seconds",
        "0.1",
        "--timeout",
        "120",
        "--format",
        "json",
    ]));
    cli.until("\"accepted\"").await;
    let out = cli.finish().await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["accepted"]["operation"], "failover");
    assert!(
        lines.iter().any(|l| l["step"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("halted"))),
        "{}",
        out.stdout
    );
    let last = lines.last().unwrap();
    assert_eq!(last["outcome"], "failed", "{last}");
    assert_eq!(last["plan"]["owner"], "dc1");
    assert!(out.stderr.contains("halted"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_generation_is_refused_and_says_what_the_generation_is_now() {
    let s = Server::start().await;
    s.run(&[
        "plan",
        "switchover",
        "erp-db",
        "--to",
        "dc2",
        "--generation",
        "1",
    ])
    .await
    .ok();
    // The ownership change is generation 2 once the engine carried it out.
    s.lab.owner_is("dc2").await.unwrap();
    let out = s
        .run(&[
            "plan",
            "switchover",
            "erp-db",
            "--to",
            "dc1",
            "--generation",
            "1",
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(stale_generation, HTTP 409)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("the plan is now at generation 2"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--generation 2"), "{}", out.stderr);
    let v = s
        .run(&[
            "plan",
            "switchover",
            "erp-db",
            "--to",
            "dc1",
            "--generation",
            "1",
            "--format",
            "json",
        ])
        .await
        .json();
    assert_eq!(v["error"]["code"], "stale_generation");
    assert_eq!(v["error"]["current_generation"], 2);
    assert_eq!(v["http_status"], 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_shows_a_failover_step_by_step() {
    let s = Server::start().await;
    s.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();
    let mut watch = Live::spawn(s.command(&["status", "--watch", "--interval-seconds", "0.1"]));
    watch.until("erp-db").await;
    s.run(&[
        "plan",
        "failover",
        "erp-db",
        "--generation",
        "1",
        "--no-wait",
    ])
    .await
    .ok();
    // The engine fences dc1 (power.off at its BMC), reads it back, then promotes dc2.
    watch.until("erp-db: fences to dc2 owner dc1").await;
    watch.until("erp-db: steady owner dc2").await;
    // Ctrl-C, as an operator ends it.
    let pid = watch.child.id().unwrap();
    interrupt(pid);
    let out = watch.finish().await;
    assert_eq!(out.code, Some(0), "{out:#?}");
    in_order(
        &out.stdout,
        &[
            "PLAN",
            "erp-db",
            "steady",
            "erp-db: fences to dc2 owner dc1, generation 1",
            "erp-db: steady owner dc2, generation 2",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_trust_tokens_and_reachability_give_clear_errors_and_exit_codes() {
    let s = Server::start().await;

    phase("a CA file instead of a pin");
    let ca = s.ca_file.display().to_string();
    let out = Out::of(
        bare(&[
            "status",
            "--api",
            &s.url,
            "--ca-file",
            &ca,
            "--token",
            VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    out.ok();

    phase("a wrong pin: not trusted, exit 3, both fingerprints' owner named");
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let out = Out::of(
        bare(&[
            "status", "--api", &s.url, "--pin", &wrong, "--token", VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(
        out.stderr.contains("cannot reach the API"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&s.pin),
        "the seen fingerprint is shown: {}",
        out.stderr
    );

    phase("no trust given: the system roots do not know a self-signed certificate");
    let out = Out::of(
        bare(&["status", "--api", &s.url, "--token", VIEWER])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(out.stderr.contains("pass it with --pin"), "{}", out.stderr);

    phase("a wrong token: exit 1, a clear message, the token never printed");
    let out = Out::of(
        s.command_as("not-a-token-9", &["status"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(unauthorized, HTTP 401)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("check --token or QFENCE_TOKEN"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("not-a-token-9") && !out.stdout.contains("not-a-token-9"));

    phase("nothing listening: exit 3");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = Out::of(
        bare(&[
            "status",
            "--api",
            &format!("https://127.0.0.1:{port}"),
            "--pin",
            &s.pin,
            "--token",
            VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(
        out.stderr.contains("cannot reach the API"),
        "{}",
        out.stderr
    );

    phase("usage: no API, no token, a format the command does not print: exit 2");
    let out = Out::of(bare(&["status", "--token", VIEWER]).output().await.unwrap());
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr.contains("--api URL or set QFENCE_API"),
        "{}",
        out.stderr
    );
    let out = Out::of(
        bare(&["plan", "list", "--api", &s.url])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains("no token given"), "{}", out.stderr);
    let out = s.run(&["--format", "mermaid", "status"]).await;
    assert_eq!(out.code, Some(2), "{out:#?}");
    let out = s
        .run(&["plan", "switchover", "erp-db", "--to", "dc2"])
        .await;
    assert_eq!(out.code, Some(2), "--generation is required: {out:#?}");
    let out = s
        .run(&["plan", "dry-run", "erp-db", "--assume", "dc1[0]=unknown"])
        .await;
    assert_eq!(out.code, Some(2), "{out:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_forms_still_read_the_file_with_the_api_set() {
    let s = Server::start().await;
    let lab: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        "lab.yaml",
    ]
    .iter()
    .collect();
    let lab = lab.display().to_string();
    // QFENCE_API is set (an operator's shell): two names still mean the file.
    let out = s.run(&["plan", "show", &lab, "erp-db"]).await;
    out.ok();
    assert!(out.stdout.contains("bmc-dc1"), "{}", out.stdout);
    let out = s
        .run(&[
            "plan", "dry-run", &lab, "erp-db", "--to", "dc2", "--format", "json",
        ])
        .await;
    assert!(out.json().is_object() || out.json().is_array(), "{out:#?}");
    let out = s.run(&["plan", "dry-run", &lab, "erp-db"]).await;
    assert_eq!(
        out.code,
        Some(2),
        "the offline dry-run needs --to: {out:#?}"
    );
    let out = s
        .run(&[
            "controller",
            "test",
            &lab,
            "bmc-dc1",
            "--orchestrator",
            "dc1-a",
            "--timeout-seconds",
            "1",
        ])
        .await;
    assert!(
        out.stdout
            .contains("controller bmc-dc1 (redfish) tested from orchestrator dc1-a"),
        "{out:#?}"
    );
    // Nothing reached the API.
    assert!(s.lab.caller_events().is_empty(), "{:#?}", s.lab.events());

    phase("events verify FILE checks an export offline; events alone asks the API");
    s.run(&["plan", "pause", "erp-db"]).await.ok();
    s.run(&["plan", "resume", "erp-db"]).await.ok();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    // The whole log: the start-up, the engine's records and the two calls.
    let lines: Vec<String> = s
        .lab
        .all_events()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    assert_eq!(s.lab.caller_events().len(), 2, "{:#?}", s.lab.events());
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let log = log.display().to_string();
    s.run(&["events", "verify", &log]).await.ok();
    std::fs::write(&log, lines[1].clone() + "\n").unwrap();
    let out = s.run(&["events", "verify", &log]).await;
    assert_eq!(
        out.code,
        Some(1),
        "a log missing its first record is broken: {out:#?}"
    );
    let out = s
        .run(&["events", "--format", "json", "--kind", "operator"])
        .await;
    in_order(
        &out.ok().stdout,
        &["pause of erp-db requested", "resume of erp-db requested"],
    );
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_prints_new_records_as_they_come() {
    let s = Server::start().await;
    s.run(&["plan", "pause", "erp-db", "--reason", "patching"])
        .await
        .ok();
    let mut follow = Live::spawn(s.command(&["events", "--plan", "erp-db", "--follow"]));
    follow.until("pause of erp-db requested").await;
    s.run(&["plan", "resume", "erp-db"]).await.ok();
    follow.until("resume of erp-db requested").await;
    let pid = follow.child.id().unwrap();
    interrupt(pid);
    let out = follow.finish().await;
    assert_eq!(out.code, Some(0), "{out:#?}");
    // One header, then the followed record as a row of its own.
    assert_eq!(out.stdout.matches("SEQ").count(), 1, "{}", out.stdout);
    in_order(
        &out.stdout,
        &[
            "SEQ",
            "pause of erp-db requested",
            "resume of erp-db requested",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_that_sees_no_end_times_out_with_exit_1_and_says_the_operation_may_go_on() {
    let s = Server::start().await;
    // pve-dc1 takes calls and never answers: the first step (dc1's vm.stop) waits for its
    // 3 s deadline, longer than the CLI's 0.5 s.
    s.lab
        .sims
        .pve1
        .faults()
        .set_unreachable(Some(Cut::Blackhole));
    let out = s
        .run(&[
            "plan",
            "switchover",
            "erp-db",
            "--to",
            "dc2",
            "--generation",
            "1",
            "--timeout",
            "0.5",
            "--poll-seconds",
            "0.1",
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stderr.contains("no end after"), "{}", out.stderr);
    assert!(
        out.stderr.contains("may still be running"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("done:"), "{}", out.stdout);
    // The operation itself was accepted and goes on.
    let v = s.run(&["--format", "json", "status"]).await.ok().json();
    let phase = v["plans"][0]["phase"].as_str().unwrap_or_default();
    assert!(phase.ends_with("to dc2"), "{v}");
    assert_eq!(v["plans"][0]["owner"], "dc1", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_maintenance_takes_a_site_in_and_out_and_refuses_the_owner() {
    let s = Server::start().await;

    phase("the owner cannot go into maintenance: refused, exit 1, the reason given");
    let out = s
        .run(&[
            "plan",
            "maintenance",
            "erp-db",
            "dc1",
            "on",
            "--generation",
            "1",
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("dc1 owns erp-db: switch over"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("(refused, HTTP 409)"), "{}", out.stderr);

    phase("dc2 in maintenance: accepted, shown by status and plan show");
    let out = s
        .run(&[
            "plan",
            "maintenance",
            "erp-db",
            "dc2",
            "on",
            "--generation",
            "1",
            "--reason",
            "replacing a disk",
        ])
        .await;
    assert!(
        out.ok()
            .stdout
            .starts_with("maintenance erp-db: generation "),
        "{}",
        out.stdout
    );
    let v = s.run(&["--format", "json", "status"]).await.ok().json();
    let dc2 = v["plans"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["site"] == "dc2")
        .unwrap()
        .clone();
    assert_eq!(dc2["maintenance"], true);
    let generation = v["plans"][0]["generation"].as_u64().unwrap().to_string();
    let out = s.run(&["status"]).await;
    assert!(out.ok().stdout.contains("(maintenance)"), "{}", out.stdout);
    let v = s
        .run(&["plan", "show", "erp-db", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(v["plan"]["maintenance"], serde_json::json!(["dc2"]));

    phase("a switchover to it is refused");
    let out = s
        .run(&[
            "plan",
            "switchover",
            "erp-db",
            "--to",
            "dc2",
            "--generation",
            &generation,
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(out.stderr.contains("in maintenance"), "{}", out.stderr);

    phase("a stale generation is refused; out of maintenance with the current one");
    let out = s
        .run(&[
            "plan",
            "maintenance",
            "erp-db",
            "dc2",
            "off",
            "--generation",
            "99",
        ])
        .await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(stale_generation, HTTP 409)"),
        "{}",
        out.stderr
    );
    let v = s
        .run(&[
            "plan",
            "maintenance",
            "erp-db",
            "dc2",
            "off",
            "--generation",
            &generation,
            "--format",
            "json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(v["operation"], "maintenance");
    let v = s
        .run(&["plan", "show", "erp-db", "--format", "json"])
        .await
        .ok()
        .json();
    assert_eq!(v["plan"]["maintenance"], serde_json::json!([]));

    phase("on|off only");
    let out = s
        .run(&[
            "plan",
            "maintenance",
            "erp-db",
            "dc2",
            "maybe",
            "--generation",
            "1",
        ])
        .await;
    assert_eq!(out.code, Some(2), "{out:#?}");
}

/// Ctrl-C to a child, by pid.
fn interrupt(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .expect("a child's pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
}
