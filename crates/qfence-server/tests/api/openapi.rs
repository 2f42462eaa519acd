//! The OpenAPI document is kept in sync: the committed `openapi.json` is what the server
//! serves. After changing the API, regenerate it with
//! `QFENCE_UPDATE_OPENAPI=1 cargo test -p qfence-server --test api openapi`.

use axum::http::{Method, StatusCode};

use super::Api;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[tokio::test]
async fn the_served_document_is_the_committed_one() {
    let api = Api::new().await;
    let r = api.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    let served = qfence_server::api::openapi().to_pretty_json().unwrap() + "\n";
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&served).unwrap(),
        r.body
    );
    if std::env::var_os("QFENCE_UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &served).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == served,
        "openapi.json is out of date: run QFENCE_UPDATE_OPENAPI=1 cargo test -p qfence-server --test api openapi"
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_every_error_is_an_error_body() {
    let doc = serde_json::to_value(qfence_server::api::openapi()).unwrap();
    let api = Api::new().await;
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            // A documented route answers something other than the 404/405 fallbacks.
            let concrete = path
                .replace("{plan}", "erp-db")
                .replace("{site}", "dc2")
                .replace("{controller}", "bmc-dc1");
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = api.call(m, &concrete, None, None).await;
            assert!(
                r.status != StatusCode::NOT_FOUND && r.status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not routed: {r:?}"
            );
            for (status, resp) in op["responses"].as_object().unwrap() {
                if status.starts_with('4') || status.starts_with('5') {
                    let schema = &resp["content"]["application/json"]["schema"]["$ref"];
                    if path != "/leader" {
                        assert_eq!(
                            schema, "#/components/schemas/ErrorBody",
                            "{method} {path} {status}"
                        );
                    }
                }
            }
            let secured = op.get("security").is_some();
            let open = ["/health", "/leader"].contains(&path.as_str());
            assert_eq!(secured, !open, "{method} {path}: security declared wrongly");
        }
    }
    assert_eq!(operations, 32, "operations documented");
}
