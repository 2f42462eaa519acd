//! `POST /api/v1/plans/{plan}/sites/{site}/rejoin` (ADR 0023, "After a failover"): an
//! operator's call, refused at once for what the request alone shows. The lab's erp-db binds
//! no `db.rejoin`, so no site there can rejoin; the accepted path runs end to end in
//! `crates/qfence/tests/pg_rejoin.rs` against a real PostgreSQL pair.

use axum::http::StatusCode;
use serde_json::json;

use super::{Api, OPERATOR, VIEWER, phase};

#[tokio::test]
async fn a_rejoin_is_an_operators_call_refused_at_once_for_the_owner_or_a_site_without_a_binding() {
    let api = Api::new().await;
    let path = "/api/v1/plans/erp-db/sites/dc2/rejoin";
    let body = json!({"expected_generation": 1, "reason": "dc2 is back"});

    phase("a viewer may not ask");
    let r = api.post(path, VIEWER, body.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");

    phase("dc2 has no rejoin binding; dc1 owns the plan; dc7 is no site of it");
    let r = api.post(path, OPERATOR, body.clone()).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "refused"),
        "{r:?}"
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("dc2 has no rejoin binding (db.rejoin with role rejoin) in erp-db"),
        "{r:?}"
    );
    let r = api
        .post(
            "/api/v1/plans/erp-db/sites/dc1/rejoin",
            OPERATOR,
            body.clone(),
        )
        .await;
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
    let r = api
        .post("/api/v1/plans/erp-db/sites/dc7/rejoin", OPERATOR, body)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");

    phase("nothing was written: no intent, the generation unchanged");
    assert_eq!(api.generation("erp-db").await, 1);
    assert!(
        !api.lab
            .events()
            .iter()
            .any(|e| e.message.contains("rejoin")),
        "{:#?}",
        api.lab.events()
    );
}
