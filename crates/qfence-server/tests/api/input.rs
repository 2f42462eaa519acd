//! Bad input: malformed JSON, wrong types, unknown fields, huge bodies, a missing content
//! type. Each gets a 4xx with a clear message and changes nothing.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::roles::endpoints;
use super::{ADMIN, Api, OPERATOR, VIEWER};
use qfence_server::api::BODY_LIMIT;

pub(super) fn raw(
    method: Method,
    path: &str,
    token: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    if let Some(ct) = content_type {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    b.body(Body::from(body)).unwrap()
}

/// The endpoints that take a body, with the admin token (enough for all).
fn body_endpoints() -> Vec<(Method, &'static str)> {
    endpoints()
        .into_iter()
        .filter(|(_, _, body, _)| body.is_some())
        .map(|(m, p, _, _)| (m, p))
        .collect()
}

#[tokio::test]
async fn malformed_json_is_400_invalid_json_on_every_body_endpoint() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    for (m, path) in body_endpoints() {
        for body in [
            &b"{"[..],
            b"{\"name\": }",
            b"nul",
            b"\xff\xfe",
            b"{\"name\": \"web\",}",
            b"[1",
        ] {
            let r = api
                .send(raw(
                    m.clone(),
                    path,
                    ADMIN,
                    Some("application/json"),
                    body.to_vec(),
                ))
                .await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::BAD_REQUEST, "invalid_json"),
                "{m} {path} {body:?}: {r:?}"
            );
            assert!(
                r.body["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("the body is not valid JSON"),
                "{r:?}"
            );
        }
    }
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn wrong_types_missing_and_unknown_fields_are_422_invalid_body_naming_the_field() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let cases = [
        (
            Method::POST,
            "/api/v1/plans/erp-db/switchover",
            json!({"target": "dc2", "expected_generation": "one"}),
            "expected_generation",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/switchover",
            json!({"target": 2, "expected_generation": 1}),
            "target",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/switchover",
            json!({"expected_generation": 1}),
            "target",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/switchover",
            json!({"target": "dc2", "expected_generation": 1, "force": true}),
            "force",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/failover",
            json!({"expected_generation": -1}),
            "expected_generation",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/apply",
            json!({"expected_generation": 1.5}),
            "expected_generation",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/apply",
            json!([1]),
            "object",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/apply",
            json!(1),
            "object",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/apply",
            json!(null),
            "object",
        ),
        (
            Method::POST,
            "/api/v1/plans",
            json!({"name": "web"}),
            "spec",
        ),
        (
            Method::POST,
            "/api/v1/plans",
            json!({"name": "web", "spec": {}, "owner": "dc1"}),
            "owner",
        ),
        (
            Method::PUT,
            "/api/v1/plans/erp-db/staged",
            json!({"plan": {}}),
            "plan",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/pause",
            json!({"reason": 5}),
            "reason",
        ),
        (
            Method::POST,
            "/api/v1/plans/erp-db/dry-run",
            json!({"action": "switchover"}),
            "target",
        ),
        (
            Method::POST,
            "/api/v1/controllers",
            json!({"name": ["x"], "spec": {}}),
            "name",
        ),
    ];
    for (m, path, body, field) in cases {
        let r = api
            .call(m.clone(), path, Some(ADMIN), Some(body.clone()))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            "{m} {path} {body}: {r:?}"
        );
        let msg = r.body["message"].as_str().unwrap();
        assert!(
            msg.contains(field),
            "{m} {path} {body}: message {msg:?} should name {field}"
        );
    }
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn a_body_without_the_json_content_type_is_415() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    for (m, path) in body_endpoints() {
        for ct in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let r = api
                .send(raw(m.clone(), path, ADMIN, ct, b"{}".to_vec()))
                .await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
                "{m} {path} {ct:?}: {r:?}"
            );
        }
    }
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn a_huge_body_is_413_on_every_body_endpoint_whether_announced_or_streamed() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    let huge = format!(
        "{{\"name\": \"web\", \"spec\": {{\"owner\": \"{}\"}}}}",
        "x".repeat(BODY_LIMIT + 10)
    );
    for (m, path) in body_endpoints() {
        let r = api
            .send(raw(
                m.clone(),
                path,
                ADMIN,
                Some("application/json"),
                huge.clone().into_bytes(),
            ))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            "{m} {path}: {r:?}"
        );
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains(&BODY_LIMIT.to_string())
        );
        // Streamed, without a length: the limit still holds.
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = huge
            .as_bytes()
            .chunks(8192)
            .map(|c| Ok(c.to_vec()))
            .collect();
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        let req = Request::builder()
            .method(m.clone())
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        let r = api.send(req).await;
        assert_eq!(
            r.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "streamed {m} {path}: {r:?}"
        );
    }
    assert_eq!(api.snapshot().await, before);
}

#[tokio::test]
async fn deeply_nested_json_is_refused_not_a_crash() {
    let api = Api::new().await;
    let deep = format!(
        "{{\"name\":\"web\",\"spec\":{}{}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let r = api
        .send(raw(
            Method::POST,
            "/api/v1/plans",
            ADMIN,
            Some("application/json"),
            deep.into_bytes(),
        ))
        .await;
    assert!(r.status.is_client_error(), "{r:?}");
    let _ = (VIEWER, OPERATOR);
}

#[tokio::test]
async fn a_delete_without_its_generation_is_400_invalid_query() {
    let api = Api::new().await;
    let before = api.snapshot().await;
    for q in [
        "",
        "?expected_generation=",
        "?expected_generation=x",
        "?expected_generation=1&force=1",
    ] {
        let r = api
            .call(
                Method::DELETE,
                &format!("/api/v1/plans/erp-db{q}"),
                Some(ADMIN),
                None,
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "invalid_query"),
            "{q}: {r:?}"
        );
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .contains("expected_generation")
                || q.contains("force"),
            "{r:?}"
        );
    }
    assert_eq!(api.snapshot().await, before);
}

mod generated {
    //! Generated bodies on every body endpoint, without Python: whatever is sent, the answer
    //! is never a 5xx, and anything but a 2xx changes nothing.

    use proptest::prelude::*;
    use serde_json::Value;

    use super::super::roles::endpoints;
    use super::super::{ADMIN, Api};
    use super::raw;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z0-9.-]{0,12}".prop_map(Value::String),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            let keys = prop_oneof![
                Just("name".to_owned()),
                Just("spec".to_owned()),
                Just("target".to_owned()),
                Just("expected_generation".to_owned()),
                Just("reason".to_owned()),
                Just("action".to_owned()),
                Just("owner".to_owned()),
                Just("instances".to_owned()),
                "[a-z_]{1,8}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keys, inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn no_generated_body_gets_a_server_error_or_changes_anything_when_refused(
            body in json_value(),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
            pick in 0usize..64,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let api = Api::new().await;
                let targets: Vec<_> = endpoints().into_iter().filter(|e| e.2.is_some()).collect();
                let (m, path, _, _) = &targets[pick % targets.len()];
                for payload in [serde_json::to_vec(&body).unwrap(), bytes.clone()] {
                    let before = api.snapshot().await;
                    let r = api.send(raw(m.clone(), path, ADMIN, Some("application/json"), payload.clone())).await;
                    prop_assert!(!r.status.is_server_error(), "{m} {path} {:?}: {r:?}", String::from_utf8_lossy(&payload));
                    prop_assert!(r.status.is_success() || !r.code().is_empty(), "{r:?}");
                    if !r.status.is_success() {
                        prop_assert_eq!(api.snapshot().await, before);
                    }
                }
                Ok(())
            })?;
        }
    }
}
