//! Tokens and roles: every endpoint refuses a missing, malformed or unknown token (401) and
//! a role below its own (403), changing nothing; a sufficient role gets through.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use super::{ADMIN, Api, OPERATOR, VIEWER, phase};

/// Every authenticated endpoint: method, path, body, and the least role it needs.
pub fn endpoints() -> Vec<(Method, &'static str, Option<Value>, &'static str)> {
    vec![
        (Method::GET, "/metrics", None, VIEWER),
        (Method::GET, "/api/v1/whoami", None, VIEWER),
        (Method::GET, "/api/v1/status", None, VIEWER),
        (Method::GET, "/api/v1/plans", None, VIEWER),
        (
            Method::POST,
            "/api/v1/plans",
            Some(json!({"name": "web", "spec": qfence_server::testing::erp_db_spec()})),
            ADMIN,
        ),
        (Method::GET, "/api/v1/plans/erp-db", None, VIEWER),
        (
            Method::DELETE,
            "/api/v1/plans/erp-db?expected_generation=1",
            None,
            ADMIN,
        ),
        (
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            Some(json!({"spec": qfence_server::testing::erp_db_spec()})),
            ADMIN,
        ),
        (Method::DELETE, "/api/v1/plans/erp-db/staged", None, ADMIN),
        (
            Method::POST,
            "/api/v1/plans/erp-db/apply",
            Some(json!({"expected_generation": 1})),
            ADMIN,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/dry-run",
            Some(json!({"action": "cycle"})),
            VIEWER,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/switchover",
            Some(json!({"target": "dc2", "expected_generation": 1})),
            OPERATOR,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/failover",
            Some(json!({"expected_generation": 1})),
            OPERATOR,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/sites/dc2/confirm-fenced",
            Some(json!({"expected_generation": 1, "reason": "checked the PDU"})),
            OPERATOR,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/pause",
            Some(json!({})),
            OPERATOR,
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/resume",
            Some(json!({})),
            OPERATOR,
        ),
        (
            Method::PUT,
            "/api/v1/plans/erp-db/sites/dc2/maintenance",
            Some(json!({"enabled": true, "expected_generation": 1})),
            OPERATOR,
        ),
        (Method::GET, "/api/v1/secrets", None, ADMIN),
        (Method::GET, "/api/v1/controllers", None, VIEWER),
        (
            Method::POST,
            "/api/v1/controllers",
            Some(json!({"name": "bmc-extra", "spec": {"type": "redfish",
                "endpoint": "https://127.0.0.1:8446", "site": "dc1", "secret": "lab-redfish",
                "username": "qfence", "tls": {"insecure": true}}})),
            ADMIN,
        ),
        (
            Method::POST,
            "/api/v1/controllers/bmc-dc1/test",
            None,
            ADMIN,
        ),
        (
            Method::POST,
            "/api/v1/controllers/probe",
            Some(json!({"name": "bmc-new", "spec": {"type": "redfish",
                "endpoint": "https://127.0.0.1:8446", "site": "dc1", "secret": "lab-redfish",
                "username": "qfence", "tls": {"insecure": true}}})),
            ADMIN,
        ),
        (
            Method::GET,
            "/api/v1/controllers/pve-dc1/resources",
            None,
            VIEWER,
        ),
        (Method::GET, "/api/v1/events", None, VIEWER),
        (Method::GET, "/api/v1/plans/erp-db/timeline", None, VIEWER),
        (Method::GET, "/api/v1/orchestrators", None, VIEWER),
    ]
}

fn rank(token: &str) -> u8 {
    match token {
        VIEWER => 0,
        OPERATOR => 1,
        _ => 2,
    }
}

async fn with_auth(
    api: &Api,
    m: &Method,
    path: &str,
    body: &Option<Value>,
    auth: Option<&str>,
) -> super::Resp {
    let mut b = Request::builder().method(m.clone()).uri(path);
    if let Some(a) = auth {
        b = b.header(header::AUTHORIZATION, a);
    }
    let req = match body {
        Some(v) => b
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(v).unwrap()))
            .unwrap(),
        None => b.body(Body::empty()).unwrap(),
    };
    api.send(req).await
}

#[tokio::test]
async fn every_endpoint_refuses_missing_malformed_and_unknown_tokens_and_changes_nothing() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    for (m, path, body, _) in endpoints() {
        for auth in [
            None,
            Some("Bearer"),
            Some("Bearer "),
            Some("Basic YWRtaW46YWRtaW4="),
            Some("Bearer not-a-token"),
            Some("bearer admin-token-3x"),
        ] {
            let r = with_auth(&api, &m, path, &body, auth).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{m} {path} with {auth:?}: {r:?}"
            );
            assert_eq!(r.code(), "unauthorized");
            assert!(!r.body["message"].as_str().unwrap().is_empty());
            assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
            // The token is not echoed back.
            assert!(!r.body.to_string().contains("admin-token"), "{r:?}");
        }
    }
    assert_eq!(
        api.snapshot().await,
        before,
        "a refused call changed something"
    );
}

#[tokio::test]
async fn every_endpoint_refuses_a_role_below_its_own_with_403_and_changes_nothing() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let mut refused = 0;
    for (m, path, body, need) in endpoints() {
        for token in [VIEWER, OPERATOR, ADMIN] {
            if rank(token) >= rank(need) {
                continue;
            }
            let r = with_auth(&api, &m, path, &body, Some(&format!("Bearer {token}"))).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{m} {path} as {token}: {r:?}"
            );
            assert_eq!(r.code(), "forbidden");
            assert!(
                r.body["message"].as_str().unwrap().contains("role"),
                "{r:?}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 15, "only {refused} refusals checked");
    assert_eq!(
        api.snapshot().await,
        before,
        "a forbidden call changed something"
    );
}

#[tokio::test]
async fn a_sufficient_role_gets_through_on_every_endpoint() {
    for (m, path, body, need) in endpoints() {
        // A fresh lab for each endpoint: a delete must not hide the next call's plan (only
        // an admin may delete, so a delete is the endpoint's last call).
        let api = Api::new().await;
        for token in [VIEWER, OPERATOR, ADMIN] {
            if rank(token) < rank(need) {
                continue;
            }
            let r = with_auth(&api, &m, path, &body, Some(&format!("Bearer {token}"))).await;
            assert!(
                r.status != StatusCode::UNAUTHORIZED && r.status != StatusCode::FORBIDDEN,
                "{m} {path} as {token}: {r:?}"
            );
            assert!(!r.status.is_server_error(), "{m} {path} as {token}: {r:?}");
        }
    }
}

#[tokio::test]
async fn health_leader_and_the_openapi_document_need_no_token() {
    let api = Api::new().await;
    phase("health and leader answer without a token");
    let r = api.call(Method::GET, "/health", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "ok");
    assert_eq!(r.body["orchestrator"], "dc1-a");
    let r = api.call(Method::GET, "/leader", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["is_self"], true);
    let r = api.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type.starts_with("application/json"));
    assert!(r.body["paths"]["/api/v1/status"].is_object());

    phase("a follower answers /leader with 503 and names the leader");
    let api = Api::follower().await;
    let r = api.call(Method::GET, "/leader", None, None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body["leader"], "dc2-a");
    assert_eq!(r.body["is_self"], false);
    let r = api.call(Method::GET, "/health", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "a follower is healthy");
}

#[tokio::test]
async fn whoami_names_the_token_and_its_role_and_the_event_log_records_the_token_name() {
    let api = Api::new().await;
    let r = api.get("/api/v1/whoami", OPERATOR).await;
    assert_eq!(r.body, json!({"name": "oncall", "role": "operator"}));
    let r = api
        .post(
            "/api/v1/plans/erp-db/pause",
            OPERATOR,
            json!({"reason": "patching"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let events = api.lab.caller_events();
    let last = events.last().unwrap();
    assert_eq!(last.actor, "token:oncall");
    assert!(
        !serde_json::to_string(&api.lab.all_events())
            .unwrap()
            .contains(OPERATOR)
    );
}
