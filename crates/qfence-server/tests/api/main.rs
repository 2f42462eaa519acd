//! The API test suite: every endpoint's success and error paths, roles included, on the
//! router (plain HTTP through `oneshot`), plus one real TLS test and the schemathesis fuzz run
//! against a served `/openapi.json`.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod console;
mod endpoints;
mod follower;
mod fuzz;
mod input;
mod openapi;
mod rejoin;
mod roles;
mod tls;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use qfence_runtime::{Access, Metrics, TokenStore};
use qfence_server::ApiConfig;

use qfence_server::testing::{FaultyBackend, LabRuntime};

pub const VIEWER: &str = "viewer-token-1";
pub const OPERATOR: &str = "operator-token-2";
pub const ADMIN: &str = "admin-token-3";

pub fn tokens() -> TokenStore {
    TokenStore::default()
        .with_token(Access::Viewer, "grafana", VIEWER)
        .with_token(Access::Operator, "oncall", OPERATOR)
        .with_token(Access::Admin, "alice", ADMIN)
}

/// The real router over a fresh lab running for real ([`LabRuntime`]), through a
/// [`FaultyBackend`] that can inject a panic or a slow call.
#[allow(missing_debug_implementations)]
pub struct Api {
    pub app: Router,
    pub backend: Arc<FaultyBackend>,
    pub lab: LabRuntime,
    pub metrics: Metrics,
}

/// A response: status, content type, body (JSON when it parses, else a string).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub content_type: String,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
}

impl Resp {
    /// The error code of an error response.
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }
}

impl Api {
    pub async fn new() -> Self {
        Self::with_config(&ApiConfig::default()).await
    }

    pub async fn with_config(config: &ApiConfig) -> Self {
        let lab = LabRuntime::start().await.expect("the lab starts");
        Self::over(lab, config)
    }

    /// The router over a follower (`dc1-a`) of the leader `dc2-a`.
    pub async fn follower() -> Self {
        let lab = LabRuntime::start_follower().await.expect("the lab starts");
        Self::over(lab, &ApiConfig::default())
    }

    fn over(lab: LabRuntime, config: &ApiConfig) -> Self {
        let backend = Arc::new(FaultyBackend::over(lab.backend()));
        let metrics = Metrics::new();
        let app = qfence_server::router(backend.clone(), tokens(), metrics.clone(), config);
        Self {
            app,
            backend,
            lab,
            metrics,
        }
    }

    pub async fn send(&self, req: Request<Body>) -> Resp {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Resp {
            status,
            content_type,
            headers,
            body,
        }
    }

    /// A call with an optional token and an optional JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&v).unwrap()))
                .unwrap(),
            None => b.body(Body::empty()).unwrap(),
        };
        self.send(req).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// The current generation of a plan.
    pub async fn generation(&self, plan: &str) -> u64 {
        let r = self.get(&format!("/api/v1/plans/{plan}"), VIEWER).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        r.body["generation"].as_u64().unwrap()
    }

    /// Waits (up to 30 s) until erp-db's status says `paused`: the engine acts on a pause or
    /// resume at its next cycle.
    pub async fn paused_is(&self, paused: bool) {
        let what = format!("erp-db paused {paused}");
        qfence_server::testing::lab::eventually(
            std::time::Duration::from_secs(30),
            &what,
            || async {
                let s = self.get("/api/v1/status", VIEWER).await;
                (s.body["plans"][0]["paused"] == paused).then_some(())
            },
        )
        .await
        .unwrap();
    }

    /// Everything a refused call must leave as it was: what callers wrote to the event log
    /// (how many records, the last one's hash; the engine's loop records its own decisions
    /// meanwhile) and the plans.
    pub async fn snapshot(&self) -> (u64, String, Value) {
        let by_callers = self.lab.caller_events();
        let last = by_callers
            .last()
            .map(|e| e.hash.clone())
            .unwrap_or_default();
        let plans = self.get("/api/v1/plans", VIEWER).await.body;
        (by_callers.len() as u64, last, plans)
    }
}

/// Logs a phase of a story test.
pub fn phase(s: &str) {
    eprintln!("--- {s}");
}
