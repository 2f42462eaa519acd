//! What the CLI reads: status (its warnings, tables and JSON), plans, controllers, events,
//! the offline forms beside the online ones, and a followed event log.

use qfence_lab::redfish::Role;
use qfence_runtime::dto::VerdictDto;

use super::*;

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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_print_a_table_json_lines_and_filter() {
    let s = Server::start().await;

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
async fn instance_ha_commands_read_the_api_for_people_and_scripts() {
    let s = Server::start().await;

    phase("the lab has no Instance HA cloud: each command says so, exit 0, as a viewer too");
    let out = s.run_as(VIEWER, &["instance-ha", "status"]).await;
    assert!(
        out.ok().stdout.contains("no Instance HA clouds configured"),
        "{}",
        out.stdout
    );
    let out = s.run(&["instance-ha", "hosts"]).await;
    assert!(
        out.ok().stdout.contains("no compute hosts"),
        "{}",
        out.stdout
    );
    let out = s.run(&["instance-ha", "evacuations"]).await;
    assert!(out.ok().stdout.contains("no evacuations"), "{}", out.stdout);

    phase("for scripts: the API's own JSON");
    let v = s
        .run(&["--format", "json", "instance-ha", "status"])
        .await
        .ok()
        .json();
    assert_eq!(v, serde_json::json!({"clouds": []}));
    let v = s
        .run(&["--format", "json", "instance-ha", "hosts"])
        .await
        .ok()
        .json();
    assert_eq!(v, serde_json::json!([]));

    phase("with a token the API does not know: refused, exit 1");
    let out = s.run_as("not-a-token", &["instance-ha", "status"]).await;
    assert_eq!(out.code, Some(1), "{out:#?}");
}
