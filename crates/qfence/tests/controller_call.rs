//! `qfence controller call`, a fence by hand, run as an operator would against independent
//! emulators: sushy-tools (Redfish) and ipmi_sim (IPMI). The exit status is a fence agent's:
//! 0 done or on, 2 off, 1 failed or unknown.

// Tests wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

#[path = "../../qfence-controllers/tests/it/emulators.rs"]
mod emulators;

use std::path::Path;
use std::process::{Command, Output};

use emulators::{Starter, Sushy};

const CONFIG_HEAD: &str = r#"cluster: {name: call}
sites:
  dc1: {}
  dc2: {}
  witness: {witness: true}
orchestrators:
  dc1-a: {site: dc1, address: "127.0.0.1:7401"}
  dc2-a: {site: dc2, address: "127.0.0.1:7402"}
  witness-a: {site: witness, address: "127.0.0.1:7403"}
controllers:
"#;

/// Writes a configuration with one controller `bmc` (its YAML settings) into `dir`.
fn config(dir: &Path, controller: &str) -> String {
    let path = dir.join("qfence.yaml");
    std::fs::write(&path, format!("{CONFIG_HEAD}  bmc:\n{controller}")).unwrap();
    path.display().to_string()
}

/// `qfence controller call CONFIG bmc ARGS...` as orchestrator dc1-a, the BMC's password in
/// the environment as `qfence serve` would read it.
fn call(config: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qfence"))
        .args(["controller", "call", config, "bmc"])
        .args(args)
        .env("QFENCE_ORCHESTRATOR", "dc1-a")
        .env("QFENCE_SECRET_BMC_PASSWORD", "password")
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .expect("the binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", text(out)))
}

/// The story every BMC tells: off by hand, a check that says off (exit 2) with the verdict
/// FENCED, the undo (power.on) read back, a check that says on (exit 0).
fn fence_by_hand(config: &str, resource: &str) {
    eprintln!("Phase: power.off performed by hand");
    let out = call(config, &["power.off", resource]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("perform power.off"), "{}", text(&out));
    assert!(stdout.contains(": done"), "{}", text(&out));

    eprintln!("Phase: a check reads it off, exit 2, FENCED");
    let out = call(config, &["power.off", resource, "--verb", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("status: off"), "{}", text(&out));
    assert!(stdout.contains("verdict: FENCED"), "{}", text(&out));

    eprintln!("Phase: the same check as JSON");
    let out = call(
        config,
        &["power.off", resource, "--verb", "check", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let j = json(&out);
    assert_eq!(j["verb"], "check", "{j}");
    assert_eq!(j["outcome"], "done", "{j}");
    assert_eq!(j["observed"], "holds", "{j}");
    assert_eq!(j["status"], "off", "{j}");
    assert_eq!(j["verdict"], "FENCED", "{j}");
    assert_eq!(j["exit"], 2, "{j}");
    assert_eq!(j["orchestrator"], "dc1-a", "{j}");

    eprintln!("Phase: undo (power.on), read back by an independent check");
    let out = call(
        config,
        &["power.off", resource, "--verb", "undo", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j = json(&out);
    assert_eq!(j["outcome"], "done", "{j}");
    assert_eq!(j["observed"], "not-held", "{j}");
    assert!(
        j["detail"].as_str().unwrap().starts_with("read back:"),
        "{j}"
    );

    eprintln!("Phase: a check reads it on, exit 0, not fenced");
    let out = call(config, &["power.off", resource, "--verb", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("status: on"), "{}", text(&out));
    assert!(!stdout.contains("verdict: FENCED"), "{}", text(&out));
}

#[test]
fn a_fence_by_hand_through_redfish_reads_off_then_on() {
    let Some(sushy) = Sushy::start(Some("0")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!(
            "    type: redfish\n    endpoint: {}\n    site: dc1\n    secret: bmc-password\n    \
             username: admin\n    auth: basic\n    tls: {{ca_file: {}}}\n",
            sushy.endpoint(),
            sushy.ca_file()
        ),
    );
    fence_by_hand(&config, "node1");
}

#[test]
fn a_fence_by_hand_through_ipmi_reads_off_then_on() {
    let Some(sim) = Starter::new("start-ipmi-sim.sh")
        .prefix("qcall")
        .arg("1")
        .env("IPMI_START_ON", "1")
        .udp_port("IPMI_PORT")
        .private_tcp_port("IPMI_VM_PORT")
        .start()
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!(
            "    type: ipmi\n    endpoint: 127.0.0.1:{}\n    site: dc1\n    secret: bmc-password\n    \
             username: admin\n    cipher_suite: 3\n",
            sim.port("IPMI_PORT")
        ),
    );
    fence_by_hand(&config, "node1");
}

#[test]
fn a_capability_the_controller_lacks_is_refused_with_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        "    type: redfish\n    endpoint: https://127.0.0.1:9\n    site: dc1\n    \
         secret: bmc-password\n    username: admin\n",
    );
    let out = call(&config, &["power.of", "node1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"power.of\" is not a capability of controller bmc (redfish)"),
        "{}",
        text(&out)
    );
    assert!(stderr.contains("power.off"), "{}", text(&out));
    assert!(stderr.contains("power.status"), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[test]
fn an_unreachable_controller_reads_unknown_and_exits_1() {
    let port = emulators::free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &format!(
            "    type: redfish\n    endpoint: https://127.0.0.1:{port}\n    site: dc1\n    \
             secret: bmc-password\n    username: admin\n    auth: basic\n    timeout_seconds: 2\n    \
             tls: {{pin: \"sha256:{}\"}}\n",
            "00".repeat(32)
        ),
    );
    for verb in ["check", "perform"] {
        let out = call(&config, &["power.off", "node1", "--verb", verb]);
        assert_eq!(out.status.code(), Some(1), "{verb}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("UNKNOWN"),
            "{verb}: {}",
            text(&out)
        );
        let out = call(
            &config,
            &["power.off", "node1", "--verb", verb, "--format", "json"],
        );
        assert_eq!(out.status.code(), Some(1), "{verb}: {}", text(&out));
        let j = json(&out);
        assert_eq!(j["observed"], "unknown", "{verb}: {j}");
        assert_ne!(j["outcome"], "done", "{verb}: {j}");
        assert_eq!(j["exit"], 1, "{verb}: {j}");
        if verb == "check" {
            assert_eq!(j["verdict"], "UNKNOWN", "{j}");
        }
    }
}
