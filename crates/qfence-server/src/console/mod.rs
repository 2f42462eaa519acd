//! The web console: server-rendered pages over the same [`Backend`](crate::Backend) the API
//! calls, so the console and the API share every validation and every refusal.
//!
//! A browser signs in with one of the API's tokens; the token is kept in an `HttpOnly`,
//! `SameSite=Strict` cookie and checked on every request exactly as a bearer token is. Pages
//! are plain HTML rendered by askama; a little JavaScript subscribes to server-sent events for
//! the live parts. Nothing here is in the OpenAPI document: the API is the contract, the
//! console one client of the backend.

use askama::Template;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::api::AppState;
use crate::auth::{Access, Caller};
use crate::backend::BackendError;
use crate::dto::{PlanStatus, StatusResponse, VerdictDto};

mod editor;
mod register;

/// The cookie holding the session's token.
pub const SESSION_COOKIE: &str = "qfence_session";

const CSS: &str = include_str!("../../assets/console.css");

/// The console's routes, merged into the API's router (same state, same middleware).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/console.css", get(css))
        .merge(editor::routes())
        .merge(register::routes())
}

// ---- session ----

/// A signed-in browser: the caller its cookie's token names.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub caller: Caller,
}

// The action pages use these to offer only what the caller's role may do.
#[allow(dead_code)]
impl Session {
    /// Whether the caller may use operator actions (switchover, failover...).
    pub fn operator(&self) -> bool {
        self.caller.access >= Access::Operator
    }

    /// Whether the caller may change plans and controllers.
    pub fn admin(&self) -> bool {
        self.caller.access >= Access::Admin
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, Response> {
        match cookie(&parts.headers, SESSION_COOKIE).and_then(|t| s.tokens.authenticate(&t)) {
            Some(caller) => Ok(Session { caller }),
            // Not signed in (or the token was withdrawn): back to the sign-in page, then here.
            None => {
                let here = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/");
                Err(Redirect::to(&format!("/login?next={}", encode(here))).into_response())
            }
        }
    }
}

/// The value of cookie `name`, if the request carries it.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Percent-encodes everything but unreserved characters (for a `next=` parameter).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where to go after signing in: only a path on this server (no `//host`, no scheme), so the
/// sign-in page cannot be used to send someone elsewhere.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/".to_owned(),
    }
}

// ---- rendering ----

/// A rendered page, or a plain error page when rendering itself fails (a bug).
fn page(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "A console template failed to render: this is a bug");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the console could not render this page; it was logged",
            )
                .into_response()
        }
    }
}

/// A backend error as a console page: what went wrong, in the same words the API uses.
fn error_page(session: Option<&Session>, e: &BackendError) -> Response {
    let status = match e {
        BackendError::NotFound { .. } => StatusCode::NOT_FOUND,
        BackendError::StaleGeneration { .. }
        | BackendError::Conflict(_)
        | BackendError::Refused(_) => StatusCode::CONFLICT,
        BackendError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        BackendError::NotLeader { .. } | BackendError::Unavailable(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    let t = ErrorPage {
        who: session.map(|s| s.caller.clone()),
        title: "Error".into(),
        message: e.to_string(),
    };
    (status, page(&t)).into_response()
}

/// The CSS class and text of a verdict.
pub(crate) fn verdict_class(v: &VerdictDto) -> &'static str {
    match v {
        VerdictDto::Fenced => "fenced",
        VerdictDto::Failed => "failed",
        VerdictDto::Unknown => "unknown",
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    who: Option<Caller>,
    title: String,
    message: String,
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    who: Option<Caller>,
    title: String,
    next: String,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    who: Option<Caller>,
    title: String,
    status: StatusResponse,
}

impl OverviewPage {
    fn plans(&self) -> &[PlanStatus] {
        &self.status.plans
    }
}

// ---- handlers ----

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

async fn login_form(Query(q): Query<NextQuery>) -> Response {
    page(&LoginPage {
        who: None,
        title: "Sign in".into(),
        next: safe_next(q.next.as_deref()),
        error: None,
    })
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(State(s): State<AppState>, axum::Form(f): axum::Form<LoginForm>) -> Response {
    let next = safe_next(f.next.as_deref());
    let token = f.token.trim();
    if s.tokens.authenticate(token).is_none() {
        let t = LoginPage {
            who: None,
            title: "Sign in".into(),
            next,
            error: Some("the token is not known".into()),
        };
        return (StatusCode::UNAUTHORIZED, page(&t)).into_response();
    }
    let cookie = format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Secure");
    (
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, next)],
    )
        .into_response()
}

async fn logout() -> Response {
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Secure; Max-Age=0");
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/login".to_owned()),
        ],
    )
        .into_response()
}

async fn overview(session: Session, State(s): State<AppState>) -> Response {
    match s.backend.status().await {
        Ok(status) => page(&OverviewPage {
            who: Some(session.caller),
            title: "Overview".into(),
            status,
        }),
        Err(e) => error_page(Some(&session), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(safe_next(Some("/plans/erp-db")), "/plans/erp-db");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; qfence_session=tok; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("tok"));
        assert_eq!(cookie(&h, "c"), None);
    }

    #[test]
    fn next_is_encoded() {
        assert_eq!(encode("/plans/a b?x=1&y"), "/plans/a%20b%3Fx%3D1%26y");
    }
}
