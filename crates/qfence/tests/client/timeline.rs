//! `qfence events --plan P --timeline` after a lost site failed over for real: the same
//! spans the console draws, through the API, as a table and as JSON.

use qfence_lab::redfish::PowerState;
use qfence_runtime::backend::Backend;
use qfence_runtime::dto::VerdictDto;
use qfence_server::testing::lab::eventually;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_timeline_prints_each_step_of_a_failover_with_its_duration() {
    let s = Server::start().await;
    s.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();

    phase("before any move: the timeline says there is none");
    let out = s.run(&["events", "--plan", "erp-db", "--timeline"]).await;
    assert!(
        out.ok()
            .stdout
            .contains("no failover or switchover recorded"),
        "{}",
        out.stdout
    );

    phase("dc1's host loses power; erp-db fails over to dc2 and settles");
    assert!(s.lab.sims.bmc1.set_power("pve-dc1-01", PowerState::Off));
    // The lab's failover_after (4 s), the fences and the promotion take a while on a loaded
    // machine: longer than the CLI's own status_until allows.
    eventually(
        Duration::from_secs(120),
        "dc2 owning erp-db, steady",
        || async {
            let st = s.lab.backend.status().await.ok()?;
            let p = st.plans.iter().find(|p| p.plan == "erp-db")?;
            (p.owner == "dc2" && p.phase == "steady").then_some(())
        },
    )
    .await
    .unwrap();

    phase("the table: the move, then each step from health lost to service");
    let out = s
        .run_as(VIEWER, &["events", "--plan", "erp-db", "--timeline"])
        .await;
    let text = &out.ok().stdout;
    eprintln!("{text}");
    in_order(
        text,
        &[
            "erp-db failover dc1 -> dc2: done, started ",
            "STEP",
            "DURATION",
            "health lost",
            "fences",
            "read-back",
            "switchover",
            "commit",
            "service",
        ],
    );
    assert!(
        text.contains("fence done") || text.contains("power.off"),
        "{text}"
    );

    phase("JSON: the API's spans, in order, each closed with its duration");
    let v = s
        .run(&[
            "--format",
            "json",
            "events",
            "--plan",
            "erp-db",
            "--timeline",
        ])
        .await
        .ok()
        .json();
    let m = &v["moves"][0];
    assert_eq!(m["kind"], "failover", "{v:#}");
    assert_eq!(m["outcome"], "done", "{v:#}");
    assert_eq!(
        (m["from"].as_str(), m["target"].as_str()),
        (Some("dc1"), Some("dc2"))
    );
    let spans = m["spans"].as_array().unwrap();
    let steps: Vec<&str> = spans.iter().filter_map(|x| x["step"].as_str()).collect();
    for want in [
        "health-lost",
        "fences",
        "read-back",
        "switchover",
        "commit",
        "service",
    ] {
        assert!(steps.contains(&want), "{want} in {steps:?}");
    }
    let mut last_start = 0;
    for x in spans {
        let (start, end) = (
            x["start_ms"].as_u64().unwrap(),
            x["end_ms"].as_u64().unwrap(),
        );
        assert!(start >= last_start, "spans in order: {v:#}");
        assert_eq!(x["duration_ms"].as_u64(), Some(end - start), "{x}");
        last_start = start;
    }
    // Health was lost from the first bad reading until the failover started.
    let lost = spans.iter().find(|x| x["step"] == "health-lost").unwrap();
    assert_eq!(lost["end_ms"], m["start_ms"], "{v:#}");
    assert!(lost["duration_ms"].as_u64().unwrap() > 0, "{lost}");

    phase("a timeline needs a plan; an unknown plan is the API's 404");
    let out = s.run(&["events", "--timeline"]).await;
    assert_eq!(out.code, Some(2), "{out:#?}");
    let out = s
        .run(&["events", "--plan", "no-such-plan", "--timeline"])
        .await;
    assert_ne!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("does not exist"), "{out:#?}");
}
