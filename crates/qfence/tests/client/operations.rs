//! What the CLI asks the orchestrator to do, and how it follows it: dry runs, pause, confirm
//! fenced, registration, switchover, failover, maintenance, stale generations and timeouts.

use qfence_lab::faults::Cut;
use qfence_runtime::dto::VerdictDto;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_actions_dry_run_pause_and_confirm_fenced() {
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

    phase("dc2's BMC and Proxmox API go dark: nothing proves the standby fenced");
    s.lab.sims.bmc2.faults().set_unreachable(Some(Cut::Refuse));
    s.lab.sims.pve2.faults().set_unreachable(Some(Cut::Refuse));
    s.lab.verdict_is("dc2", VerdictDto::Unknown).await.unwrap();

    phase("confirm-fenced the standby: recorded, generation checked, FENCED on that word");
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
    s.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();
    let v = s.run(&["--format", "json", "status"]).await.ok().json();
    assert_eq!(site_of(&v, "dc2")["verdict"], "FENCED", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_register_refuses_a_taken_name_and_a_bad_spec_and_tests_through_the_api() {
    let s = Server::start().await;

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
    let out = maintenance(&s, "dc1", "on", "1", &[]).await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("dc1 owns erp-db: switch over"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("(refused, HTTP 409)"), "{}", out.stderr);

    phase("dc2 in maintenance: accepted, shown by status and plan show");
    let out = maintenance(&s, "dc2", "on", "1", &["--reason", "replacing a disk"]).await;
    assert!(
        out.ok()
            .stdout
            .starts_with("maintenance erp-db: generation "),
        "{}",
        out.stdout
    );
    let v = s.run(&["--format", "json", "status"]).await.ok().json();
    let dc2 = site_of(&v, "dc2");
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
    let out = maintenance(&s, "dc2", "off", "99", &[]).await;
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(stale_generation, HTTP 409)"),
        "{}",
        out.stderr
    );
    let v = maintenance(&s, "dc2", "off", &generation, &["--format", "json"])
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
    let out = maintenance(&s, "dc2", "maybe", "1", &[]).await;
    assert_eq!(out.code, Some(2), "{out:#?}");
}

/// `qfence plan maintenance erp-db SITE STATE --generation G EXTRA...`.
async fn maintenance(s: &Server, site: &str, state: &str, generation: &str, extra: &[&str]) -> Out {
    let mut args = vec![
        "plan",
        "maintenance",
        "erp-db",
        site,
        state,
        "--generation",
        generation,
    ];
    args.extend_from_slice(extra);
    s.run(&args).await
}
