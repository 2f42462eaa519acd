//! Writes through any orchestrator (ADR 0024): every write of the API sent to a follower
//! (`dc1-a`) reaches the leader (`dc2-a`), and the answer is the leader's, errors included.

use axum::http::{Method, StatusCode};
use qfence_model::PlanId;
use serde_json::json;

use qfence_runtime::backend::Backend;
use qfence_server::testing::{erp_db_spec, lab};

use super::*;

impl Api {
    /// The leader's own backend, to see each write's effect where it was made.
    fn leader_backend(&self) -> qfence_runtime::RuntimeBackend {
        let leader = self
            .lab
            .leader
            .as_ref()
            .expect("a follower lab has a leader");
        qfence_runtime::RuntimeBackend::new(&leader.engine, lab::secrets())
    }

    /// Whether the leader's event log has a record by `actor` whose message contains `what`.
    fn leader_recorded(&self, actor: &str, what: &str) -> bool {
        let leader = self
            .lab
            .leader
            .as_ref()
            .expect("a follower lab has a leader");
        leader
            .engine
            .events()
            .iter()
            .any(|e| e.actor == actor && e.message.contains(what))
    }

    /// Asserts a stale generation is answered as the leader answers it: 409 and the current.
    fn stale(r: &Resp, current: u64) {
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::CONFLICT, "stale_generation"),
            "{r:?}"
        );
        assert_eq!(r.body["current_generation"], current, "{r:?}");
    }
}

#[tokio::test]
async fn every_plan_and_controller_write_sent_to_a_follower_is_the_leaders() {
    let api = Api::follower().await;
    let leader = api.leader_backend();
    let web = PlanId::new("web").unwrap();

    phase("create a plan through the follower: 201, in force on the leader, actor the caller");
    let mut spec = erp_db_spec();
    spec["owner"] = json!("dc2");
    let r = api
        .post("/api/v1/plans", ADMIN, json!({"name": "web", "spec": spec}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(leader.plan(&web).await.unwrap().generation, 1);
    assert!(api.leader_recorded("token:alice", "Created plan web"));
    let r = api
        .post("/api/v1/plans", ADMIN, json!({"name": "web", "spec": spec}))
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "conflict"));

    phase("stage, then apply with a stale generation (409) and the current one");
    let mut changed = spec.clone();
    changed["interval_seconds"] = json!(5);
    let staged = json!({"spec": changed});
    let path = "/api/v1/plans/web/staged";
    let r = api
        .call(Method::PUT, path, Some(ADMIN), Some(staged.clone()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["staged"]["staged_by"], "alice");
    assert!(leader.plan(&web).await.unwrap().staged.is_some());
    let apply = |g: u64| json!({"expected_generation": g});
    Api::stale(
        &api.post("/api/v1/plans/web/apply", ADMIN, apply(0)).await,
        1,
    );
    let r = api.post("/api/v1/plans/web/apply", ADMIN, apply(1)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(leader.plan(&web).await.unwrap().generation, 2);

    phase("stage again and discard it");
    let r = api.call(Method::PUT, path, Some(ADMIN), Some(staged)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = api.call(Method::DELETE, path, Some(ADMIN), None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(leader.plan(&web).await.unwrap().staged.is_none());

    phase("delete with a stale generation (409), then with the current one");
    let delete = |g: u64| format!("/api/v1/plans/web?expected_generation={g}");
    Api::stale(
        &api.call(Method::DELETE, &delete(1), Some(ADMIN), None)
            .await,
        2,
    );
    let r = api
        .call(Method::DELETE, &delete(2), Some(ADMIN), None)
        .await;
    assert!(r.status.is_success(), "{r:?}");
    assert!(matches!(
        leader.plan(&web).await,
        Err(qfence_runtime::BackendError::NotFound { .. })
    ));

    phase("register a controller on the leader; a test runs where it is asked (here)");
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
    let names: Vec<String> = leader
        .controllers()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert!(names.contains(&"bmc-dc1b".to_owned()), "{names:?}");
    let tested_at = |views: Vec<qfence_runtime::dto::ControllerView>| {
        views
            .into_iter()
            .find(|c| c.name == "bmc-dc1")
            .and_then(|c| c.tested_at_ms)
    };
    let before = tested_at(leader.controllers().await.unwrap());
    let r = api
        .post("/api/v1/controllers/bmc-dc1/test", ADMIN, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // The follower's test is kept: its record was written through the leader, which lists it.
    let after = tested_at(leader.controllers().await.unwrap());
    assert!(
        after.is_some() && after > before,
        "the leader lists the follower's test: {before:?} -> {after:?}"
    );
    let r = api
        .post("/api/v1/controllers/nope/test", ADMIN, json!({}))
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test]
async fn every_operation_sent_to_a_follower_is_the_leaders_and_a_viewer_is_refused_there() {
    let api = Api::follower().await;
    let leader = api.leader_backend();
    let erp = lab::plan();

    phase("a viewer is refused on the follower itself: 403, nothing reaches the leader");
    let r = api
        .post("/api/v1/plans/erp-db/pause", VIEWER, json!({"reason": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert!(!api.leader_recorded("token:grafana", ""));

    phase("pause and resume");
    let r = api
        .post(
            "/api/v1/plans/erp-db/pause",
            OPERATOR,
            json!({"reason": "patching"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(api.leader_recorded("token:oncall", "patching"));
    api.paused_is(true).await;
    let r = api
        .post("/api/v1/plans/erp-db/resume", OPERATOR, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    api.paused_is(false).await;

    phase("maintenance of dc2: stale (409), in, out");
    let path = "/api/v1/plans/erp-db/sites/dc2/maintenance";
    let body = |on: bool, g: u64| json!({"enabled": on, "expected_generation": g, "reason": "fw"});
    let r = api
        .call(Method::PUT, path, Some(OPERATOR), Some(body(true, 0)))
        .await;
    Api::stale(&r, 1);
    let r = api
        .call(Method::PUT, path, Some(OPERATOR), Some(body(true, 1)))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(leader.plan(&erp).await.unwrap().maintenance, ["dc2"]);
    let r = api
        .call(Method::PUT, path, Some(OPERATOR), Some(body(false, 1)))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(leader.plan(&erp).await.unwrap().maintenance.is_empty());

    phase("confirm fenced: stale (409), then recorded on the leader");
    let path = "/api/v1/plans/erp-db/sites/dc2/confirm-fenced";
    let r = api
        .post(
            path,
            OPERATOR,
            json!({"expected_generation": 0, "reason": "x"}),
        )
        .await;
    Api::stale(&r, 1);
    let r = api
        .post(
            path,
            OPERATOR,
            json!({"expected_generation": 1, "reason": "PDU off, checked"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(api.leader_recorded("token:oncall", "PDU off, checked"));

    phase("failover with a stale generation (409); switchover carried out by the leader");
    let r = api
        .post(
            "/api/v1/plans/erp-db/failover",
            OPERATOR,
            json!({"expected_generation": 0}),
        )
        .await;
    Api::stale(&r, 1);
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 0}),
        )
        .await;
    Api::stale(&r, 1);
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 1, "reason": "maintenance"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    api.lab.owner_is("dc2").await.unwrap();

    phase("failover back to dc1 at the current generation: accepted by the leader");
    let g = api.generation("erp-db").await;
    let r = api
        .post(
            "/api/v1/plans/erp-db/failover",
            OPERATOR,
            json!({"expected_generation": g}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    assert!(api.leader_recorded("token:oncall", "failover of erp-db requested"));
}

/// The rejoin of an old owner (ADR 0023), the one write the tests above leave out: erp-db gains
/// a `db.rejoin` binding at dc1 (its server is nowhere: the rejoin itself is not the point),
/// moves to dc2, and every answer to a rejoin sent to the follower is the leader's.
#[tokio::test]
async fn a_rejoin_sent_to_a_follower_is_the_leaders() {
    let api = Api::follower().await;
    let leader = api.leader_backend();
    let erp = lab::plan();

    phase("through the follower: a PostgreSQL controller at dc1 and a rejoin binding there");
    let pg = json!({"type": "postgres", "endpoint": "postgresql://127.0.0.1:9/postgres",
        "site": "dc1", "reach": ["dc2"], "secret": "lab-redfish", "username": "postgres"});
    let r = api
        .post(
            "/api/v1/controllers",
            ADMIN,
            json!({"name": "pg-dc1", "spec": pg}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let mut spec = erp_db_spec();
    spec["instances"]["dc1"].as_array_mut().unwrap().push(
        json!({"controller": "pg-dc1", "capability": "db.rejoin", "resource": "self",
            "role": "rejoin", "params": {"data_dir": "/var/lib/postgresql/15/main"}}),
    );
    let r = api
        .call(
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(ADMIN),
            Some(json!({"spec": spec})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = api
        .post(
            "/api/v1/plans/erp-db/apply",
            ADMIN,
            json!({"expected_generation": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(leader.plan(&erp).await.unwrap().generation, 2);

    let path = "/api/v1/plans/erp-db/sites/dc1/rejoin";
    let body = |g: u64| json!({"expected_generation": g, "reason": "dc1 is back, checked"});
    phase("dc1 owns erp-db: the leader refuses its rejoin (409 refused)");
    let r = api.post(path, OPERATOR, body(2)).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "refused"),
        "{r:?}"
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("dc1 already owns"),
        "{r:?}"
    );

    phase("a switchover to dc2 through the follower leaves dc1 waiting to rejoin");
    let r = api
        .post(
            "/api/v1/plans/erp-db/switchover",
            OPERATOR,
            json!({"target": "dc2", "expected_generation": 2, "reason": "move"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{r:?}");
    api.lab.owner_is("dc2").await.unwrap();
    let g = leader.plan(&erp).await.unwrap().generation;

    phase("a viewer is refused on the follower; a stale generation is the leader's 409");
    let r = api.post(path, VIEWER, body(g)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    Api::stale(&api.post(path, OPERATOR, body(g - 1)).await, g);

    phase("at the current generation: accepted by the leader, recorded with the caller");
    let r = api.post(path, OPERATOR, body(g)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(api.leader_recorded("token:oncall", "dc1 is back, checked"));
}
