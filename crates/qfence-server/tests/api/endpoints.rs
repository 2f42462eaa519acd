//! Each endpoint's success and error paths, as stories.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use qfence_model::Verdict;
use serde_json::json;

use super::{ADMIN, Api, OPERATOR, VIEWER, phase};
use qfence_runtime::dto::VerdictDto;
use qfence_runtime::events::EventKind;
use qfence_runtime::events::{Record, VerifyOptions, verify};
use qfence_server::ApiConfig;
use qfence_server::testing::erp_db_spec;

#[tokio::test]
async fn status_shows_every_plan_with_owner_generation_verdicts_and_reason() {
    let api = Api::new().await;
    // The engine's first readings: dc2's host is off at its BMC.
    api.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();
    let r = api.get("/api/v1/status", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["leader"]["is_self"], true);
    let p = &r.body["plans"][0];
    assert_eq!(p["plan"], "erp-db");
    assert_eq!(p["owner"], "dc1");
    assert_eq!(p["generation"], 1);
    assert_eq!(p["paused"], false);
    assert!(p["last_reason"].as_str().unwrap().contains("owned by dc1"));
    assert_eq!(
        p["sites"][0],
        json!({"site": "dc1", "role": "owner", "verdict": "UNKNOWN", "checked_at_ms": null, "maintenance": false})
    );
    assert_eq!(p["sites"][1]["role"], "standby");
}

#[tokio::test]
async fn plans_are_created_read_staged_applied_with_compare_and_set_and_deleted() {
    let api = Api::new().await;
    phase("create a second plan: 201 at generation 1");
    let mut spec = erp_db_spec();
    spec["owner"] = json!("dc2");
    let r = api
        .post("/api/v1/plans", ADMIN, json!({"name": "web", "spec": spec}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["generation"], 1);
    assert_eq!(r.body["spec"]["owner"], "dc2");
    let list = api.get("/api/v1/plans", VIEWER).await;
    let names: Vec<&str> = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["erp-db", "web"]);

    phase("the same name again is a conflict");
    let r = api
        .post(
            "/api/v1/plans",
            ADMIN,
            json!({"name": "web", "spec": erp_db_spec()}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "conflict"),
        "{r:?}"
    );

    phase("stage a change: nothing in force yet");
    let mut changed = erp_db_spec();
    changed["interval_seconds"] = json!(5);
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            Some(json!({"spec": changed})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["staged"]["base_generation"], 1);
    assert_eq!(r.body["staged"]["staged_by"], "alice");
    assert_eq!(r.body["spec"]["interval_seconds"], 10);
    assert_eq!(api.generation("erp-db").await, 1);

    phase("a dry run of applying it says what would change");
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "apply_staged"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("generation 2"));

    phase("apply with a stale generation: 409 with the current one, nothing applied");
    let r = api
        .post(
            "/api/v1/plans/erp-db/apply",
            ADMIN,
            json!({"expected_generation": 0}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "stale_generation"),
        "{r:?}"
    );
    assert_eq!(r.body["current_generation"], 1);
    assert_eq!(api.generation("erp-db").await, 1);

    phase("apply with the current generation: in force at generation 2");
    let r = api
        .post(
            "/api/v1/plans/erp-db/apply",
            ADMIN,
            json!({"expected_generation": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["generation"], 2);
    assert_eq!(r.body["spec"]["interval_seconds"], 5);
    assert!(r.body["staged"].is_null());

    phase("applying again: nothing staged is a conflict");
    let r = api
        .post(
            "/api/v1/plans/erp-db/apply",
            ADMIN,
            json!({"expected_generation": 2}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "conflict"),
        "{r:?}"
    );

    phase("stage, then discard; discarding nothing is a conflict");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            Some(json!({"spec": erp_db_spec()})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api
        .call(
            Method::DELETE,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.body["staged"].is_null());
    let r = api
        .call(
            Method::DELETE,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "conflict"));

    phase("a change staged before an ownership change cannot be applied after it");
    api.call(
        Method::PUT,
        "/api/v1/plans/erp-db/staged",
        Some(ADMIN),
        Some(json!({"spec": erp_db_spec()})),
    )
    .await;
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    // The engine carries the switchover out (fence dc1, start dc2's VM, move the VIP): the
    // ownership change is generation 3.
    api.lab.owner_is("dc2").await.unwrap();
    let r = api
        .post(
            "/api/v1/plans/erp-db/apply",
            ADMIN,
            json!({"expected_generation": 3}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "conflict"),
        "{r:?}"
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("stage it again")
    );

    phase("delete: stale is 409, current is 204, then 404");
    let r = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=7",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "stale_generation")
    );
    assert_eq!(r.body["current_generation"], 1);
    let r = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=1",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{r:?}");
    let r = api.get("/api/v1/plans/web", VIEWER).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = api
        .call(
            Method::DELETE,
            "/api/v1/plans/web?expected_generation=1",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    phase("every accepted change is in the event log, and the chain verifies");
    let events = api.lab.caller_events();
    let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    let expected = [
        "Created plan web",
        "Staged a change of plan erp-db",
        "Applied the staged change of plan erp-db",
        "Staged a change of plan erp-db",
        "Discarded the staged change of plan erp-db",
        "Staged a change of plan erp-db",
        "switchover of erp-db requested",
        "Deleted plan web",
    ];
    assert_eq!(messages.len(), expected.len(), "{messages:#?}");
    for (m, e) in messages.iter().zip(expected) {
        assert!(m.starts_with(e), "{m:?} is not {e:?}...: {messages:#?}");
    }
    let records: Vec<Record> = api
        .lab
        .all_events()
        .into_iter()
        .map(|e| Record::Event(Box::new(e)))
        .collect();
    verify(&records, &VerifyOptions::default()).unwrap();
}

#[tokio::test]
async fn an_invalid_plan_is_refused_with_every_issue_at_its_file_path_and_changes_nothing() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let mut spec = erp_db_spec();
    spec["owner"] = json!("dc9");
    spec["interval_seconds"] = json!("often");
    spec["instances"]["dc1"][0]["capability"] = json!("power.of");
    spec["password"] = json!("hunter2");
    let r = api
        .post(
            "/api/v1/plans",
            ADMIN,
            json!({"name": "web", "spec": spec.clone()}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
        "{r:?}"
    );
    let paths: Vec<&str> = r.body["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    for p in [
        "plans.web.interval_seconds",
        "plans.web.instances.dc1[0].capability",
        "plans.web.password",
        "plans.web.owner",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
    let capability = r.body["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["path"] == "plans.web.instances.dc1[0].capability")
        .unwrap();
    assert!(
        capability["message"]
            .as_str()
            .unwrap()
            .contains("power.off"),
        "names what is allowed: {capability}"
    );
    assert!(
        !r.body.to_string().contains("hunter2"),
        "the credential is not echoed"
    );

    phase("staging an invalid change is refused the same way");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            Some(json!({"spec": spec})),
        )
        .await;
    assert_eq!(r.code(), "validation_failed");
    assert!(
        r.body["issues"][0]["path"]
            .as_str()
            .unwrap()
            .starts_with("plans.erp-db")
    );

    phase("a name that is not a name");
    let r = api
        .post(
            "/api/v1/plans",
            ADMIN,
            json!({"name": "Web DB", "spec": erp_db_spec()}),
        )
        .await;
    assert_eq!(r.code(), "validation_failed", "{r:?}");

    phase("staging a change to a plan that does not exist is 404");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/nope/staged",
            Some(ADMIN),
            Some(json!({"spec": erp_db_spec()})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn dry_runs_say_what_would_happen_and_change_nothing() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "cycle"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["commands"], json!([]));
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "failover", "target": "dc2"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let commands: Vec<&str> = r.body["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let at = |what: &str| {
        commands
            .iter()
            .position(|c| c.contains(what))
            .unwrap_or_else(|| panic!("{what:?} missing from {commands:#?}"))
    };
    let fence = at("fence       dc1      bmc-dc1 power.off pve-dc1-01");
    let promote = at("pve-dc2 vm.start pve-dc2-01/101");
    let service = at("fgt-edge vip.own vip-erp-db");
    assert!(
        fence < promote
            && promote < service
            && commands[service + 1..].iter().all(|c| !c.starts_with("  ")),
        "fences first, the service binding last: {commands:#?}"
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "switchover", "target": "dc1"}),
        )
        .await;
    assert_eq!(r.body["refused"], true);
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "switchover", "target": "dc7"}),
        )
        .await;
    assert_eq!(r.code(), "validation_failed");
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "apply_staged"}),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "conflict"));
    let r = api
        .post(
            "/api/v1/plans/erp-db/dry-run",
            VIEWER,
            json!({"action": "explode"}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        "{r:?}"
    );
    let r = api
        .post(
            "/api/v1/plans/nope/dry-run",
            VIEWER,
            json!({"action": "cycle"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn switchover_failover_and_confirm_fenced_compare_and_set_and_refuse_what_is_unsafe() {
    let api = Api::new().await;
    phase("switchover with a stale generation: 409 with the current one");
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 5}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "stale_generation")
    );
    assert_eq!(r.body["current_generation"], 1);

    phase("switchover to the owner is refused; to an unknown site or a bad name is 422");
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc1", "expected_generation": 1}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "refused"),
        "{r:?}"
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc7", "expected_generation": 1}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed")
    );
    assert!(
        r.body["message"].as_str().unwrap().contains("dc1, dc2"),
        "{r:?}"
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "DC 2", "expected_generation": 1}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert_eq!(api.generation("erp-db").await, 1);

    phase("switchover to dc2: 202; once carried out, dc2 owns erp-db at generation 2");
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 1, "reason": "maintenance"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    assert_eq!(r.body["operation"], "switchover");
    api.lab.owner_is("dc2").await.unwrap();
    assert_eq!(api.generation("erp-db").await, 2);

    phase("failover back to dc1 while dc2 is UNKNOWN: not carried out, UNKNOWN is never FENCED");
    // dc2's BMC goes dark: nothing shows whether its host is off. The runtime accepts the
    // request (an intent); the engine fences dc2 first and, unable to prove it, neither
    // promotes dc1 nor moves ownership.
    api.lab
        .sims
        .bmc2
        .faults()
        .set_unreachable(Some(qfence_lab::faults::Cut::Refuse));
    let r = api
        .post(
            "/api/v1/plans/erp-db/failover",
            OPERATOR,
            json!({"expected_generation": 2}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    let reason = qfence_server::testing::lab::eventually(
        Duration::from_secs(30),
        "dc2 not proven fenced",
        || async {
            let s = api.get("/api/v1/status", VIEWER).await;
            let reason = s.body["plans"][0]["last_reason"].as_str()?.to_owned();
            reason.contains("fences step to be retried").then_some(s)
        },
    )
    .await
    .unwrap();
    assert_eq!(reason.body["plans"][0]["owner"], "dc2", "{reason:?}");
    let said = api
        .lab
        .events()
        .into_iter()
        .any(|e| e.message.contains("dc2 not fenced (power.off UNKNOWN"));
    assert!(said, "{:#?}", api.lab.events());
    assert_eq!(api.generation("erp-db").await, 2);

    phase("confirm fenced: the reason is required, the site must be in the plan, CAS applies");
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/dc2/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 2, "reason": "  "}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/dc2/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 2}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        "reason missing: {r:?}"
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/witness/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 2, "reason": "x"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/dc2/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 1, "reason": "x"}),
        )
        .await;
    assert_eq!(r.code(), "stale_generation");
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/dc2/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 2, "reason": "PDU outlets 3 and 4 off, checked on site"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");

    phase("dc2 is FENCED on the operator's word, and the move under way completes on it");
    api.lab.verdict_is("dc2", VerdictDto::Fenced).await.unwrap();
    // The confirmation came while the fences step waited for its retry: the retried verify
    // still reads UNKNOWN, the operator's word is what stands (halted, it would need a retry).
    api.lab.owner_is("dc1").await.unwrap();
    assert_eq!(api.generation("erp-db").await, 3);

    phase("operations on a plan that does not exist are 404");
    let r = api
        .post(
            "/api/v1/plans/nope/failover",
            OPERATOR,
            json!({"expected_generation": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = api
        .post(
            "/api/v1/plans/nope/sites/dc1/confirm-fenced",
            OPERATOR,
            json!({"expected_generation": 1, "reason": "x"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pause_and_resume_are_idempotent_and_recorded_once() {
    let api = Api::new().await;
    for _ in 0..2 {
        let r = api
            .post(
                "/api/v1/plans/erp-db/pause",
                OPERATOR,
                json!({"reason": "patching"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body["operation"], "pause");
    }
    api.paused_is(true).await;
    let r = api
        .post("/api/v1/plans/erp-db/resume", OPERATOR, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    api.paused_is(false).await;
    // Each request is recorded as asked (with its reason), and the engine's decisions say
    // what it did.
    let asked: Vec<String> = api
        .lab
        .caller_events()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(
        asked,
        [
            "pause of erp-db requested: patching",
            "pause of erp-db requested: patching",
            "resume of erp-db requested: resumed"
        ],
        "{asked:#?}"
    );
    let decided = |what: &str| {
        api.lab
            .events()
            .iter()
            .filter(|e| e.kind == EventKind::Decision && e.message.contains(what))
            .count()
    };
    // A second pause of a paused plan changes nothing (the engine may say it again, in the
    // cycle that reads it); the one resume ends it.
    assert!(decided("paused by oncall") >= 1, "{:#?}", api.lab.events());
    assert_eq!(decided("resumed by oncall"), 1, "{:#?}", api.lab.events());
    let r = api
        .post("/api/v1/plans/nope/pause", OPERATOR, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn controllers_are_listed_registered_validated_and_tested() {
    let api = Api::new().await;
    phase("the lab's controllers, untested");
    let r = api.get("/api/v1/controllers", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    let bmc = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "bmc-dc1")
        .unwrap();
    assert_eq!(bmc["type"], "redfish");
    assert_eq!(bmc["secret"], "lab-redfish");
    assert_eq!(bmc["reach"], json!(["dc2"]));
    assert_eq!(bmc["grades"], json!([]));

    phase("register one: 201; again: conflict");
    let spec = json!({"type": "redfish", "endpoint": "https://127.0.0.1:8446", "site": "dc1",
        "reach": ["dc2"], "secret": "lab-redfish", "username": "qfence", "tls": {"insecure": true}});
    let r = api
        .post(
            "/api/v1/controllers",
            ADMIN,
            json!({"name": "bmc-dc1b", "spec": spec}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["name"], "bmc-dc1b");
    let r = api
        .post(
            "/api/v1/controllers",
            ADMIN,
            json!({"name": "bmc-dc1b", "spec": spec}),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "conflict"));

    phase("a plan may now bind it");
    let mut plan = erp_db_spec();
    plan["instances"]["dc1"][0]["controller"] = json!("bmc-dc1b");
    let r = api
        .post("/api/v1/plans", ADMIN, json!({"name": "web", "spec": plan}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");

    phase("an inline credential and an unknown type are refused with their paths");
    let r = api
        .post("/api/v1/controllers", ADMIN, json!({"name": "bad", "spec": {"type": "redfish",
            "endpoint": "https://127.0.0.1:1", "site": "dc1", "username": "u", "password": "hunter2"}}))
        .await;
    assert_eq!(r.code(), "validation_failed", "{r:?}");
    assert!(
        r.body["issues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["path"] == "controllers.bad.password")
    );
    assert!(!r.body.to_string().contains("hunter2"));
    let r = api
        .post(
            "/api/v1/controllers",
            ADMIN,
            json!({"name": "bad", "spec": {"type": "telnet", "site": "dc1"}}),
        )
        .await;
    assert_eq!(r.code(), "validation_failed");

    phase("test grades every capability, and the list shows the grades");
    let r = api
        .post("/api/v1/controllers/bmc-dc1/test", ADMIN, json!(null))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(
        r.body["grades"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["capability"] == "power.off")
    );
    let r = api.get("/api/v1/controllers", VIEWER).await;
    let bmc = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "bmc-dc1")
        .unwrap();
    assert!(!bmc["grades"].as_array().unwrap().is_empty());
    assert!(bmc["tested_at_ms"].is_u64());
    let r = api
        .post("/api/v1/controllers/nope/test", ADMIN, json!(null))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_controller_is_probed_before_it_is_registered_and_changes_nothing() {
    let api = Api::new().await;
    // Nothing listens on 127.0.0.1:8446; the lab's BMC of dc1 answers at its own address.
    let nowhere = json!({"type": "redfish", "endpoint": "https://127.0.0.1:8446", "site": "dc1",
        "reach": ["dc2"], "secret": "lab-redfish", "username": "qfence", "tls": {"insecure": true}});
    let mut spec = nowhere.clone();
    spec["endpoint"] = json!(api.lab.sims.bmc1.base_url());
    let controllers_before = api.get("/api/v1/controllers", VIEWER).await.body;

    phase("a target where nothing listens is not reached: four steps, connectivity failed");
    let r = api
        .post(
            "/api/v1/controllers/probe",
            ADMIN,
            json!({"name": "bmc-new", "spec": nowhere}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["reachable"], false);
    assert_eq!(r.body["steps"].as_array().unwrap().len(), 4);
    assert_eq!(r.body["steps"][2]["status"], "failed");
    assert!(r.body["tls_fingerprint"].is_null());

    phase("the lab's BMC answers: the four steps, identity, fingerprint, grades, warnings");
    let r = api
        .post(
            "/api/v1/controllers/probe",
            ADMIN,
            json!({"name": "bmc-new", "spec": spec}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["controller"], "bmc-new");
    assert_eq!(r.body["reachable"], true);
    let steps: Vec<(u64, &str)> = r.body["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["number"].as_u64().unwrap(), s["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            (1, "configuration"),
            (2, "secret"),
            (3, "connectivity"),
            (4, "capabilities")
        ]
    );
    assert_eq!(
        r.body["steps"][0]["status"], "warning",
        "TLS checking is off"
    );
    let fp = r.body["tls_fingerprint"].as_str().unwrap();
    assert!(fp.starts_with("sha256:") && fp.len() == 7 + 64, "{fp}");
    assert!(!r.body["identity"].as_str().unwrap().is_empty(), "{r:?}");
    assert!(!r.body["facts"].as_object().unwrap().is_empty());
    let warnings = r.body["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("TLS certificate checking is OFF")),
        "{warnings:?}"
    );
    assert!(
        r.body["grades"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["capability"] == "power.off" && g["grade"] == "proven"),
        "{r:?}"
    );

    phase("nothing was registered; the probe is in the event log");
    assert_eq!(
        api.get("/api/v1/controllers", VIEWER).await.body,
        controllers_before
    );
    let events = api.lab.caller_events();
    assert!(
        events
            .last()
            .unwrap()
            .message
            .contains("Probed controller bmc-new"),
        "{:?}",
        events.last()
    );

    phase("an unreachable target fails step 3 and skips step 4");
    let mut bad = spec.clone();
    bad["endpoint"] = json!("https://bmc.invalid:443");
    let r = api
        .post(
            "/api/v1/controllers/probe",
            ADMIN,
            json!({"name": "bmc-new", "spec": bad}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["reachable"], false);
    assert_eq!(r.body["steps"][2]["status"], "failed");
    assert_eq!(r.body["steps"][3]["status"], "skipped");
    assert_eq!(r.body["grades"], json!([]));

    phase("a bad spec is a 422 with its paths; a registered name is a 409");
    let r = api
        .post("/api/v1/controllers/probe", ADMIN, json!({"name": "bad", "spec": {"type": "redfish",
            "endpoint": "https://127.0.0.1:1", "site": "dc1", "username": "u", "password": "hunter2"}}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
        "{r:?}"
    );
    assert!(
        r.body["issues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["path"] == "controllers.bad.password")
    );
    assert!(!r.body.to_string().contains("hunter2"));
    let r = api
        .post(
            "/api/v1/controllers/probe",
            ADMIN,
            json!({"name": "bmc-dc1", "spec": spec}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "conflict"),
        "{r:?}"
    );
    assert!(r.body["message"].as_str().unwrap().contains("/test"));

    phase("the registered test fills the same fields");
    let r = api
        .post("/api/v1/controllers/bmc-dc1/test", ADMIN, json!(null))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["steps"].as_array().unwrap().len(), 4);
    assert!(r.body["tls_fingerprint"].is_string());
}

#[tokio::test]
async fn resources_are_discovered_per_controller() {
    let api = Api::new().await;
    phase("pve-dc1: what erp-db binds, and something for each unbound capability");
    let r = api
        .get("/api/v1/controllers/pve-dc1/resources", VIEWER)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let found = r.body.as_array().unwrap();
    assert!(
        found
            .iter()
            .any(|d| d["capability"] == "vm.stop" && d["resource"] == "pve-dc1-01/101"),
        "{found:?}"
    );
    for d in found {
        assert!(!d["description"].as_str().unwrap().is_empty(), "{d}");
    }
    phase("bmc-dc1 lists hosts for its power capabilities");
    let r = api
        .get("/api/v1/controllers/bmc-dc1/resources", VIEWER)
        .await;
    assert!(
        r.body
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["capability"] == "power.off" && d["resource"] == "pve-dc1-01"),
        "{r:?}"
    );

    phase("an unknown controller is a 404; a malformed name too");
    let r = api.get("/api/v1/controllers/nope/resources", VIEWER).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = api.get("/api/v1/controllers/-x-/resources", VIEWER).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    phase("an unreachable controller is a 503 that says so");
    let spec = json!({"type": "proxmox", "endpoint": "https://pve.invalid:8006", "site": "dc1",
        "secret": "lab-proxmox", "token_id": "qfence@pve!fence", "tls": {"insecure": true}});
    let r = api
        .post(
            "/api/v1/controllers",
            ADMIN,
            json!({"name": "pve-far", "spec": spec}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let r = api
        .get("/api/v1/controllers/pve-far/resources", VIEWER)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{r:?}"
    );
}

#[tokio::test]
async fn events_are_paged_and_filtered() {
    let api = Api::new().await;
    for i in 0..3 {
        api.post(
            "/api/v1/plans/erp-db/pause",
            OPERATOR,
            json!({"reason": format!("r{i}")}),
        )
        .await;
        api.post("/api/v1/plans/erp-db/resume", OPERATOR, json!({}))
            .await;
    }
    api.post("/api/v1/controllers/bmc-dc1/test", ADMIN, json!(null))
        .await;
    // The callers' seven records, among the engine's own: paged through the operator kind.
    let ours: Vec<u64> = api.lab.caller_events().iter().map(|e| e.seq).collect();
    assert_eq!(ours.len(), 7, "{:#?}", api.lab.caller_events());
    let r = api
        .get("/api/v1/events?kind=operator&limit=4", VIEWER)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let seqs: Vec<u64> = r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, ours[..4]);
    assert_eq!(r.body["next_after"], ours[3]);
    assert!(r.body["head_seq"].as_u64().unwrap() >= ours[6], "{r:?}");
    let r = api
        .get(
            &format!("/api/v1/events?kind=operator&after={}&limit=4", ours[3]),
            VIEWER,
        )
        .await;
    let seqs: Vec<u64> = r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, ours[4..]);
    assert!(r.body["next_after"].is_null());
    let r = api
        .get("/api/v1/events?plan=erp-db&kind=operator", VIEWER)
        .await;
    assert_eq!(r.body["events"].as_array().unwrap().len(), 6);
    let r = api.get("/api/v1/events?plan=other", VIEWER).await;
    assert_eq!(r.body["events"], json!([]));
    let e = &api
        .get("/api/v1/events?kind=operator&limit=1", VIEWER)
        .await
        .body["events"][0];
    assert_eq!(e["actor"], "token:oncall");
    assert_eq!(e["prev"].as_str().unwrap().len(), 64);

    phase("bad query strings are 400 with what was wrong");
    for q in ["limit=many", "kind=gossip", "after=-1", "colour=red"] {
        let r = api.get(&format!("/api/v1/events?{q}"), VIEWER).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "invalid_query"),
            "{q}: {r:?}"
        );
    }
}

#[tokio::test]
async fn orchestrators_are_listed() {
    let api = Api::new().await;
    let r = api.get("/api/v1/orchestrators", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    // The lab runs one orchestrator: a one-voter cluster.
    assert_eq!(names, ["dc1-a"]);
    assert_eq!(r.body[0]["leader"], true);
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let api = Api::new().await;
    api.metrics.decision("erp-db");
    api.metrics.fence_result("bmc-dc1", Verdict::Fenced);
    api.metrics.check_duration("bmc-dc1", 0.02);
    let r = api.get("/metrics", VIEWER).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.content_type.starts_with("text/plain"),
        "{}",
        r.content_type
    );
    let text = r.body.as_str().unwrap();
    assert!(
        text.contains("qfence_decisions_total{plan=\"erp-db\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("qfence_fence_results_total{controller=\"bmc-dc1\",verdict=\"FENCED\"} 1")
    );
    assert!(text.contains("# TYPE qfence_check_duration_seconds histogram"));
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let api = Api::new().await;
    let r = api.get("/api/v1/nothing", VIEWER).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = api
        .call(Method::PATCH, "/api/v1/plans", Some(ADMIN), None)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        "{r:?}"
    );
    let r = api.get("/api/v1/plans/Not%20A%20Name", VIEWER).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test]
async fn a_panic_in_a_handler_is_a_500_with_a_code_not_a_dropped_connection() {
    let api = Api::new().await;
    api.backend
        .panic_on_status
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let r = api.get("/api/v1/status", VIEWER).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        "{r:?}"
    );
    assert!(r.headers.contains_key("x-request-id"));
    // The server goes on serving.
    assert_eq!(
        api.get("/api/v1/plans", VIEWER).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_call_past_its_deadline_is_answered_timeout() {
    let api = Api::with_config(&ApiConfig {
        call_timeout: Duration::from_secs(2),
        ..ApiConfig::default()
    })
    .await;
    *api.backend.slow_orchestrators.lock().unwrap() = Some(Duration::from_secs(60));
    let r = api.get("/api/v1/orchestrators", VIEWER).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
        "{r:?}"
    );
    assert!(r.body["message"].as_str().unwrap().contains("event log"));
}

#[tokio::test]
async fn a_site_in_maintenance_is_not_failed_over_to_and_the_owner_cannot_be_put_in_it() {
    let api = Api::new().await;
    phase("the owner cannot go into maintenance");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc1/maintenance",
            Some(OPERATOR),
            Some(json!({"enabled": true, "expected_generation": 1})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "refused"),
        "{r:?}"
    );
    // No owner changes, so the generation stays (as in the daemon: docs/api.md).
    phase("dc2 goes into maintenance at generation 1, which stays; shown in the status");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc2/maintenance",
            Some(OPERATOR),
            Some(json!({"enabled": true, "expected_generation": 1, "reason": "firmware"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["generation"], 1);
    let s = api.get("/api/v1/status", VIEWER).await;
    assert_eq!(s.body["plans"][0]["sites"][1]["maintenance"], true);
    phase("a switchover to it is refused; a stale generation is 409; unknown site 404");
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 1}),
        )
        .await;
    assert_eq!(r.code(), "refused");
    assert!(r.body["message"].as_str().unwrap().contains("maintenance"));
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc2/maintenance",
            Some(OPERATOR),
            Some(json!({"enabled": false, "expected_generation": 2})),
        )
        .await;
    assert_eq!(r.code(), "stale_generation");
    assert_eq!(r.body["current_generation"], 1);
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc7/maintenance",
            Some(OPERATOR),
            Some(json!({"enabled": false, "expected_generation": 1})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    phase("out of maintenance, the switchover goes through");
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc2/maintenance",
            Some(OPERATOR),
            Some(json!({"enabled": false, "expected_generation": 1})),
        )
        .await;
    assert_eq!(r.body["generation"], 1);
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
}

#[tokio::test]
async fn secret_references_are_listed_by_name_with_their_users_and_never_a_value() {
    let api = Api::new().await;
    let r = api.get("/api/v1/secrets", ADMIN).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!([
            {"name": "lab-fortigate", "used_by": ["fgt-edge"]},
            {"name": "lab-proxmox", "used_by": ["pve-dc1", "pve-dc2"]},
            {"name": "lab-redfish", "used_by": ["bmc-dc1", "bmc-dc2"]},
        ])
    );
}
