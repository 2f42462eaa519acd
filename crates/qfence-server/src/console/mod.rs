//! The web console: server-rendered pages over the same [`Backend`](qfence_runtime::Backend) the API
//! calls, so the console and the API share every validation and every refusal.
//!
//! A browser signs in with one of the API's tokens; the token is kept in an `HttpOnly`,
//! `SameSite=Strict` cookie and checked on every request exactly as a bearer token is. Pages
//! are plain HTML rendered by askama; a little JavaScript subscribes to server-sent events for
//! the live parts. Nothing here is in the OpenAPI document: the API is the contract, the
//! console one client of the backend.
//!
//! Every state-changing form is a POST whose `Origin` (or, failing that, `Referer`) must name
//! this server ([`FormSession`]); with the `SameSite=Strict` cookie this keeps other sites from
//! submitting forms on a signed-in operator's behalf. Buttons the caller's role may not use are
//! not offered, and the backend refuses them anyway.
//!
//! Pages: the overview ([`overview`], live: counts, filters and paging for thousands of
//! plans), a plan's page ([`plans`]: the diagram, its moves' timeline ([`timeline`]), its
//! history, operator actions with a confirmation step showing the dry run), the sites
//! ([`sites`]), Instance HA's clouds, hosts and evacuations ([`instance_ha`], live), the event
//! log and the orchestrators ([`pages`]). The live parts are server-sent events ([`live`]) carrying HTML
//! fragments rendered by the same templates as the page.

mod actions;
mod diagram;
mod editor;
mod instance_ha;
mod live;
mod overview;
mod pages;
mod plans;
mod register;
mod sites;
mod timeline;

use askama::Template;
use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::api::AppState;
use qfence_runtime::auth::{Access, Caller};
use qfence_runtime::backend::BackendError;
use qfence_runtime::dto::{SiteRole, SiteStatus, VerdictDto};

/// The cookie holding the session's token.
pub const SESSION_COOKIE: &str = "qfence_session";

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

/// The console's routes, merged into the API's router (same state, same middleware).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/console.css", get(css))
        .route("/console.js", get(js))
        .merge(plans::routes())
        .merge(pages::routes())
        .merge(sites::routes())
        .merge(instance_ha::routes())
        .merge(live::routes())
        .merge(editor::routes())
        .merge(register::routes())
        // Last, so it covers every console route above.
        .layer(axum::middleware::from_fn(browser_headers))
}

/// What every console response tells the browser: run only this server's own script and
/// style (no inline script, nothing from elsewhere), never inside another site's frame (a
/// "Fail over" button must not be clickable through a disguise), send no referrer to other
/// sites, and trust the declared content types.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

async fn browser_headers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        h.insert(name, header::HeaderValue::from_static(value));
    }
    resp
}

// ---- session ----

/// A signed-in browser: the caller its cookie's token names.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub caller: Caller,
}

// The action pages use these to offer only what the caller's role may do.
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

/// A signed-in browser submitting a form from one of this server's pages: the session, and
/// an `Origin` (or `Referer`) naming this server. Every state-changing console route takes
/// this instead of [`Session`].
#[derive(Debug, Clone)]
pub(crate) struct FormSession(pub Session);

impl FromRequestParts<AppState> for FormSession {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, Response> {
        if let Err(why) = same_origin(&parts.headers) {
            return Err(forbidden_form(&why));
        }
        Session::from_request_parts(parts, s).await.map(FormSession)
    }
}

/// A form refused because it did not come from this server's pages.
fn forbidden_form(why: &str) -> Response {
    let t = ErrorPage {
        who: None,
        title: "Refused".into(),
        message: format!(
            "this form was not sent from this console's own pages ({why}), so it was not \
             carried out; open the page again and resubmit"
        ),
    };
    (StatusCode::FORBIDDEN, page(&t)).into_response()
}

/// Whether a POST came from this server's own pages: its `Origin`, or when a browser sends
/// none its `Referer`, must be `http(s)://HOST` with the request's `Host`. Browsers send
/// `Origin` on every form POST; a request with neither is refused (scripts use the API).
fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("the request names no Host")?;
    // The part after the scheme: exactly the host for an Origin, the host then a path for a
    // Referer.
    let after_scheme = |v: &'_ str| -> Option<String> {
        ["http://", "https://"]
            .iter()
            .find_map(|scheme| v.strip_prefix(scheme))
            .map(str::to_owned)
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        return if after_scheme(origin).as_deref() == Some(host) {
            Ok(())
        } else {
            Err(format!("its origin {origin:?} is not {host}"))
        };
    }
    match headers.get(header::REFERER).and_then(|v| v.to_str().ok()) {
        Some(r)
            if after_scheme(r)
                .and_then(|rest| rest.strip_prefix(host).map(|p| p.starts_with('/')))
                == Some(true) =>
        {
            Ok(())
        }
        Some(r) => Err(format!("it was sent from {r:?}, not {host}")),
        None => Err("the browser sent neither Origin nor Referer".into()),
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
        .map(|(_, v)| decode(v))
}

/// Undoes [`encode`] (a cookie's value is kept percent-encoded: a token may hold characters
/// a cookie may not, such as `;` or a space). A malformed escape is kept as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
        | BackendError::Refused(_)
        | BackendError::CapabilityFailed { .. }
        | BackendError::BindingCheckFailed { .. } => StatusCode::CONFLICT,
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

/// The CSS class of a site's chip: the owner's is neutral (it runs the service; its fence
/// verdict is in the tooltip, and the phase and last decision say when it is being fenced);
/// every other site shows its fence verdict.
pub(crate) fn site_class(s: &SiteStatus) -> &'static str {
    match s.role {
        SiteRole::Owner => "owner",
        SiteRole::Standby => verdict_class(&s.verdict),
    }
}

/// A site's chip text: `dc2 FENCED`, `dc1 owner`.
pub(crate) fn site_label(s: &SiteStatus) -> String {
    let verdict = verdict_class(&s.verdict).to_uppercase();
    let mut t = match s.role {
        SiteRole::Owner => format!("{} owner", s.site),
        // A hot standby, a stopped resource, a replica that is not safe: said in words.
        SiteRole::Standby => match &s.posture {
            Some(p) => format!("{} {p}", s.site),
            None => format!("{} {verdict}", s.site),
        },
    };
    if s.maintenance {
        t.push_str(" · maintenance");
    }
    t
}

/// A site's chip tooltip: its verdict and when it was checked.
pub(crate) fn site_title(s: &SiteStatus) -> String {
    format!(
        "{}: fence verdict {}{}{}",
        s.site,
        verdict_class(&s.verdict).to_uppercase(),
        s.posture
            .as_ref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default(),
        s.checked_at_ms
            .map(|t| format!(", checked {}", fmt_ms(t)))
            .unwrap_or_default()
    )
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub(crate) use qfence_model::time::utc as fmt_ms;

// ---- handlers ----

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        JS,
    )
        .into_response()
}

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

async fn login(
    State(s): State<AppState>,
    headers: HeaderMap,
    axum::Form(f): axum::Form<LoginForm>,
) -> Response {
    if let Err(why) = same_origin(&headers) {
        return forbidden_form(&why);
    }
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
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Secure",
        encode(token)
    );
    (
        StatusCode::SEE_OTHER,
        [(header::SET_COOKIE, cookie), (header::LOCATION, next)],
    )
        .into_response()
}

async fn logout(headers: HeaderMap) -> Response {
    if let Err(why) = same_origin(&headers) {
        return forbidden_form(&why);
    }
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
    fn a_token_survives_the_cookie_whatever_it_holds() {
        for token in [
            "plain-token_1",
            "with space;semi,comma=eq%",
            "ünïcode/slash",
        ] {
            let mut h = HeaderMap::new();
            h.insert(
                header::COOKIE,
                format!("a=1; {SESSION_COOKIE}={}", encode(token))
                    .parse()
                    .unwrap(),
            );
            assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some(token));
        }
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }

    #[test]
    fn forms_must_come_from_this_server() {
        let h = |pairs: &[(header::HeaderName, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(k.clone(), v.parse().unwrap());
            }
            m
        };
        let host = (header::HOST, "127.0.0.1:8443");
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::ORIGIN, "https://127.0.0.1:8443")
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::ORIGIN, "http://127.0.0.1:8443")
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::ORIGIN, "https://evil.example")
            ]))
            .is_err()
        );
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::ORIGIN, "https://127.0.0.1:8443.evil")
            ]))
            .is_err()
        );
        assert!(same_origin(&h(&[host.clone(), (header::ORIGIN, "null")])).is_err());
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::REFERER, "https://127.0.0.1:8443/plans/x")
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&h(&[
                host.clone(),
                (header::REFERER, "https://127.0.0.1:84430/")
            ]))
            .is_err()
        );
        assert!(same_origin(&h(std::slice::from_ref(&host))).is_err());
        assert!(same_origin(&h(&[(header::ORIGIN, "https://127.0.0.1:8443")])).is_err());
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(fmt_ms(0), "1970-01-01 00:00:00");
        assert_eq!(fmt_ms(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(fmt_ms(1_796_052_127_999), "2026-11-30 15:22:07");
    }

    #[test]
    fn next_is_encoded() {
        assert_eq!(encode("/plans/a b?x=1&y"), "/plans/a%20b%3Fx%3D1%26y");
    }
}
