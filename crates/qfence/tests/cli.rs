//! The `qfence` binary, run as an operator or a script would: exit codes, where output goes,
//! and the JSON shapes scripts rely on.

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
    for example in ["examples/lab.yaml", "examples/pg-docker.yaml"] {
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
