//! The `qfence` binary, run as an operator or a script would: exit codes, where output goes,
//! and the JSON shapes scripts rely on.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo(rel: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", rel]
        .iter()
        .collect();
    p.display().to_string()
}

fn fixture(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", name]
        .iter()
        .collect();
    p.display().to_string()
}

fn qfence(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qfence"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn the_examples_check_clean() {
    for example in [
        "examples/lab.yaml",
        "examples/pg-docker.yaml",
        // The Debian package's /etc/qfence/qfence.example.yaml.
        "deploy/debian/qfence.example.yaml",
    ] {
        let out = qfence(&["config", "check", &repo(example)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{example}: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
        assert!(!stderr.contains("error"), "{stderr}");
    }
    // The lab's insecure TLS is warned about, and warnings do not fail the check.
    let out = qfence(&[
        "config",
        "check",
        "--format",
        "json",
        &repo("examples/lab.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let issues = json(&out);
    let issues = issues.as_array().expect("a list");
    assert!(!issues.is_empty());
    assert!(issues.iter().all(|i| i["severity"] == "warning"));
}

#[test]
fn a_broken_file_exits_1_and_lists_every_problem() {
    let file = fixture("broken.yaml");
    let out = qfence(&["config", "check", &file]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("broken.yaml:23: plans.erp-db.instances.dc1[0].capability"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter2"),
        "a credential was echoed: {stderr}"
    );

    let out = qfence(&["--format", "json", "config", "check", &file]);
    assert_eq!(out.status.code(), Some(1));
    let issues = json(&out);
    let got: Vec<(&str, &str)> = issues
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| (i["path"].as_str().unwrap(), i["severity"].as_str().unwrap()))
        .collect();
    for path in [
        "controllers.bmc-dc1.password",
        "plans.erp-db.instances.dc1[0].capability",
        "plans.erp-db.instances.dc2[0].controller",
    ] {
        assert!(got.contains(&(path, "error")), "{path} not in {got:?}");
    }
    for i in issues.as_array().unwrap() {
        assert!(i["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn an_unreadable_file_is_an_error_not_a_panic() {
    let out = qfence(&[
        "config",
        "check",
        "--format",
        "json",
        "/nonexistent/qfence.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let issues = json(&out);
    assert_eq!(issues[0]["severity"], "error");
    assert!(
        issues[0]["message"]
            .as_str()
            .unwrap()
            .contains("cannot read")
    );
}

#[test]
fn plan_show_draws_the_plan_in_three_formats() {
    let lab = repo("examples/lab.yaml");
    let out = qfence(&["plan", "show", &lab, "erp-db"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("instance at dc1"), "{text}");
    assert!(text.contains("power.off pve-dc1-01  fence, required (compute; unfence power.on)"));
    assert!(text.contains("via bmc-dc1 (redfish, site dc1, reach dc2) → secret lab-redfish"));

    let out = qfence(&["plan", "show", &lab, "erp-db", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let plan = json(&out);
    assert_eq!(plan["owner"], "dc1");
    assert_eq!(plan["instances"][0]["site"], "dc1");
    let b0 = &plan["instances"][0]["bindings"][0];
    assert_eq!(b0["capability"], "power.off");
    assert_eq!(b0["required"], true);
    assert_eq!(b0["level"], "compute");
    assert_eq!(plan["service"][0]["params"]["dc2"], "10.2.1.5");
    assert_eq!(plan["controllers"]["bmc-dc1"]["secret"], "lab-redfish");
    assert_eq!(plan["controllers"]["bmc-dc1"]["reach"][0], "dc2");

    let out = qfence(&["plan", "show", &lab, "erp-db", "--format", "mermaid"]);
    assert_eq!(out.status.code(), Some(0));
    let m = String::from_utf8_lossy(&out.stdout);
    assert!(m.starts_with("flowchart TB\n"), "{m}");
    assert!(m.contains("plan[\"Plan<br/>erp-db\"]"));
    assert!(m.contains("[(\"Secret<br/>lab-redfish\")]"));
    // Every node a link points at is declared.
    for line in m.lines().filter(|l| l.contains(" --> ")) {
        let target = line.split(" --> ").nth(1).unwrap();
        let id = target.split('[').next().unwrap().trim();
        assert!(
            m.lines()
                .any(|l| l.trim_start().starts_with(&format!("{id}["))
                    || l.contains(&format!("--> {id}["))),
            "{id} is linked but never declared"
        );
    }
}

#[test]
fn plan_show_of_an_unknown_plan_names_the_plans() {
    let out = qfence(&[
        "plan",
        "show",
        &repo("examples/pg-docker.yaml"),
        "nope",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let issues = json(&out);
    assert_eq!(issues[0]["path"], "plans.nope");
    assert!(
        issues[0]["message"]
            .as_str()
            .unwrap()
            .contains("orders-db, web")
    );
}

#[test]
fn mermaid_is_refused_where_it_does_not_apply() {
    let out = qfence(&[
        "--format",
        "mermaid",
        "config",
        "check",
        &repo("examples/lab.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

// ----- qfence serve: a whole cluster member by itself -----

/// A `qfence serve` child, its output in a log file; killed when dropped.
struct Served {
    name: &'static str,
    child: std::process::Child,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(name: &'static str, log: PathBuf, args: &[&str]) -> Self {
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_qfence"))
            .args(args)
            .env_remove("QFENCE_JOIN_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("the binary runs");
        Self { name, child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the "serving https://ADDR" line; returns ADDR.
    fn wait_serving(&mut self) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let log = self.log();
            if let Some(addr) = log
                .lines()
                .find_map(|l| l.split_once(" serving https://").map(|(_, a)| a.to_owned()))
            {
                return addr;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}) before serving:\n{log}", self.name);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not serve within 90 s:\n{log}",
                self.name
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 300 ms for up to `secs` seconds.
fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
fn three_serve_commands_make_a_cluster_with_a_witness_that_never_owns() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p);
    let s = |p: PathBuf| p.display().to_string();
    let cluster: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let dead = free_port();
    // The lab's configuration on free loopback ports. No secrets are given, so no driver is
    // built and nothing is called; auto_failover is off as a second guard, so this test never
    // touches anything another test may run on the lab's default ports.
    let mut config = std::fs::read_to_string(repo("examples/lab.yaml")).unwrap();
    for (i, default) in ["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"]
        .iter()
        .enumerate()
    {
        config = config.replace(default, &format!("127.0.0.1:{}", cluster[i]));
    }
    for port in ["8443", "8444", "8006", "8007", "8445"] {
        config = config.replace(&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{dead}"));
    }
    config = config.replace(
        "    owner: dc1\n",
        "    owner: dc1\n    auto_failover: false\n",
    );
    std::fs::write(d("qfence.yaml"), &config).unwrap();
    let token = "oncall-token-3";
    std::fs::write(
        d("tokens"),
        qfence_runtime::auth::token_line(qfence_runtime::Access::Operator, "oncall", token),
    )
    .unwrap();
    let serve = |name: &'static str, extra: &[String]| {
        let mut args: Vec<String> = [
            "serve",
            "--config",
            &s(d("qfence.yaml")),
            "--name",
            name,
            "--data",
            &s(d(name)),
            "--tokens",
            &s(d("tokens")),
            "--listen",
            "127.0.0.1:0",
            "--fast-timers",
            "--drain-seconds",
            "1",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Served::start(name, d(&format!("{name}.log")), &args)
    };
    let seed = format!("127.0.0.1:{}", cluster[0]);
    let join = |name: &str| {
        vec![
            "--join".to_owned(),
            seed.clone(),
            "--join-token-file".to_owned(),
            s(d("dc1-a").join("join-tokens").join(format!("{name}.token"))),
        ]
    };

    // The first node creates the cluster and a join token for each other orchestrator.
    let mut dc1 = serve("dc1-a", &["--init".to_owned()]);
    let api1 = dc1.wait_serving();
    let tokens = d("dc1-a").join("join-tokens");
    let mut written: Vec<String> = std::fs::read_dir(&tokens)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["dc2-a.token", "witness-a.token"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(tokens.join("dc2-a.token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "a join token holds a private key");
    }

    // A token is for one orchestrator only; refused before anything is written.
    let wrong = qfence(&[
        "serve",
        "--config",
        &s(d("qfence.yaml")),
        "--name",
        "dc2-a",
        "--data",
        &s(d("wrong")),
        "--listen",
        "127.0.0.1:0",
        "--join",
        &seed,
        "--join-token-file",
        &s(tokens.join("witness-a.token")),
    ]);
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("the join token is for orchestrator witness-a, not dc2-a"),
        "{err}"
    );
    assert!(!d("wrong").join("tls").exists());

    // The other two join with one command each, at the same time.
    let mut dc2 = serve("dc2-a", &join("dc2-a"));
    let mut witness = serve("witness-a", &join("witness-a"));
    let api2 = dc2.wait_serving();
    let api3 = witness.wait_serving();
    for (o, who) in [(&dc1, "dc1-a"), (&dc2, "dc2-a"), (&witness, "witness-a")] {
        let expect = if who == "dc1-a" {
            "Created a one-voter cluster".to_owned()
        } else {
            format!("Joined the cluster through {seed}")
        };
        assert!(o.log().contains(&expect), "{who}: {}", o.log());
    }
    assert!(
        witness.log().contains("witness-a is a witness"),
        "{}",
        witness.log()
    );

    // Three voters, the witness marked as one from the configuration, one leader.
    let members = eventually(30, "three voters", || {
        let out = qfence(&["cluster", "status", "--data-dir", &s(d("dc1-a")), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let m = v["members"].as_array()?.clone();
        (m.len() == 3 && m.iter().all(|m| m["voter"] == true)).then_some(m)
    });
    for m in &members {
        assert_eq!(m["witness"], m["name"] == "witness-a", "{m}");
    }

    // Every node's API: a leader known, the plan registered and owned by dc1. Sampled for a
    // while: the witness never owns it.
    let status = |api: &str| {
        let out = qfence(&[
            "--format",
            "json",
            "status",
            "--api",
            &format!("https://{api}"),
            "--ca-file",
            &s(d("dc1-a").join("ca").join("ca.pem")),
            "--token",
            token,
        ]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    };
    for api in [&api1, &api2, &api3] {
        let v = eventually(30, "the plan registered, a leader known", || {
            let v = status(api)?;
            (v["leader"]["leader"].is_string() && v["plans"][0]["plan"] == "erp-db").then_some(v)
        });
        assert_eq!(v["plans"][0]["owner"], "dc1", "{v}");
    }
    for _ in 0..10 {
        for api in [&api1, &api2, &api3] {
            if let Some(v) = status(api) {
                assert_ne!(v["plans"][0]["owner"], "witness", "{v}");
                assert!(
                    v["plans"][0]["sites"]
                        .as_array()
                        .is_some_and(|s| s.iter().all(|s| s["site"] != "witness")),
                    "{v}"
                );
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // A restart with the same flags: already a member, nothing to join.
    drop(dc2);
    let mut dc2 = serve("dc2-a", &join("dc2-a"));
    dc2.wait_serving();
    let log = dc2.log();
    assert!(
        log.contains("Already a member of the cluster: nothing to join"),
        "{log}"
    );
    eventually(30, "dc2-a back", || {
        status(&dc2.wait_serving()).filter(|v| v["plans"][0]["owner"] == "dc1")
    });
    drop(witness);
    drop(dc2);
    drop(dc1);
}
