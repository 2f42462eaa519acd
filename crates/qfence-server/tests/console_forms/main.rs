//! The console's plan editor and controller registration over plain HTTP: every route's
//! success and refusals (roles, cross-site forms), and bad input answered with a 422 page that
//! shows the validation message next to its field and keeps everything typed. On the router
//! (`oneshot`) over the lab running for real (`qfence_server::testing::LabRuntime`).

mod editor;
mod register;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use tower::ServiceExt;

use qfence_runtime::{Access, Metrics, TokenStore};
use qfence_server::ApiConfig;
use qfence_server::testing::LabRuntime;

pub const VIEWER: &str = "viewer-token-1";
pub const OPERATOR: &str = "operator-token-2";
pub const ADMIN: &str = "admin-token-3";
pub const HOST: &str = "127.0.0.1:7400";

pub fn tokens() -> TokenStore {
    TokenStore::default()
        .with_token(Access::Viewer, "grafana", VIEWER)
        .with_token(Access::Operator, "oncall", OPERATOR)
        .with_token(Access::Admin, "alice", ADMIN)
}

/// The console over a fresh lab backend (with erp-db at generation 1).
#[allow(missing_debug_implementations)]
pub struct Console {
    pub app: Router,
    pub backend: Arc<dyn qfence_runtime::Backend>,
    pub lab: LabRuntime,
}

/// A response: status, headers, body as text.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The messages shown next to field `key` (`<p class="field-error" data-for="KEY">`).
    pub fn errors_at(&self, key: &str) -> Vec<String> {
        let marker = format!("class=\"field-error\" data-for=\"{key}\">");
        self.body
            .match_indices(&marker)
            .map(|(i, _)| {
                let rest = &self.body[i + marker.len()..];
                unescape(&rest[..rest.find("</p>").unwrap()])
            })
            .collect()
    }

    /// The value an `<input name="NAME" ... value="V">` shows, or the selected option of a
    /// `<select name="NAME">`.
    pub fn value_of(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\"");
        let at = self.body.find(&marker)?;
        let open = self.body[..at].rfind('<')?;
        let tag_end = at + self.body[at..].find('>')?;
        let tag = &self.body[open..tag_end];
        if tag.starts_with("<select") {
            let close = tag_end + self.body[tag_end..].find("</select>")?;
            let inner = &self.body[tag_end..close];
            let sel = inner.find(" selected>")?;
            let opt = inner[..sel].rfind("value=\"")?;
            let v = &inner[opt + 7..];
            return Some(unescape(&v[..v.find('"')?]));
        }
        let v = tag.find(" value=\"")?;
        let v = &tag[v + 8..];
        Some(unescape(&v[..v.find('"')?]))
    }

    /// The option values of `<select name="NAME">`.
    pub fn options_of(&self, name: &str) -> Vec<String> {
        let marker = format!("name=\"{name}\"");
        let Some(at) = self.body.find(&marker) else {
            return Vec::new();
        };
        let close = at + self.body[at..].find("</select>").unwrap();
        self.body[at..close]
            .match_indices("<option value=\"")
            .map(|(i, m)| {
                let v = &self.body[at + i + m.len()..];
                unescape(&v[..v.find('"').unwrap()])
            })
            .filter(|v| !v.is_empty())
            .collect()
    }

    pub fn has(&self, text: &str) -> bool {
        unescape(&self.body).contains(text)
    }
}

/// Undoes askama's HTML escaping.
pub fn unescape(s: &str) -> String {
    s.replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// `application/x-www-form-urlencoded`.
pub fn encode(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl Console {
    pub async fn new() -> Self {
        let lab = LabRuntime::start().await.expect("the lab starts");
        let backend = lab.backend();
        let app = qfence_server::router(
            backend.clone(),
            tokens(),
            Metrics::new(),
            &ApiConfig::default(),
        );
        Self { app, backend, lab }
    }

    pub async fn send(&self, req: Request<Body>) -> Page {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        Page {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// A page as the browser signed in with `token` sees it.
    pub async fn get(&self, path: &str, token: &str) -> Page {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(header::HOST, HOST)
            .header(header::COOKIE, format!("qfence_session={token}"))
            .body(Body::empty())
            .unwrap();
        self.send(req).await
    }

    /// A form posted from one of this console's pages.
    pub async fn post(&self, path: &str, token: &str, fields: &[(&str, &str)]) -> Page {
        self.post_from(path, token, fields, &format!("https://{HOST}"))
            .await
    }

    pub async fn post_from(
        &self,
        path: &str,
        token: &str,
        fields: &[(&str, &str)],
        origin: &str,
    ) -> Page {
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::HOST, HOST)
            .header(header::ORIGIN, origin)
            .header(header::COOKIE, format!("qfence_session={token}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(encode(fields)))
            .unwrap();
        self.send(req).await
    }
}

/// Logs a phase of a story test.
pub fn phase(s: &str) {
    eprintln!("--- {s}");
}

impl Console {
    /// The plans' names.
    pub async fn plan_names(&self) -> Vec<String> {
        self.backend
            .plans()
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect()
    }

    /// A plan's generation and the spec in force.
    pub async fn plan_spec(&self, name: &str) -> (u64, serde_json::Value) {
        let v = self
            .backend
            .plan(&qfence_model::PlanId::new(name).unwrap())
            .await
            .unwrap();
        (v.generation, v.spec)
    }

    /// A plan's staged change, if any.
    pub async fn staged(&self, name: &str) -> Option<serde_json::Value> {
        let v = self
            .backend
            .plan(&qfence_model::PlanId::new(name).unwrap())
            .await
            .unwrap();
        v.staged.map(|s| s.spec)
    }
}
