//! Keystone v3, as much as a Nova client needs: `POST /v3/auth/tokens` (password scoped to a
//! project, or an application credential), the token in `X-Subject-Token`, a body with
//! `expires_at`, user, project, roles and the service catalog (compute and image, public,
//! this simulator's own address), and `GET /v3`. Errors in Keystone's shape
//! `{"error": {"code", "title", "message"}}`.

// Helpers return the ready HTTP answer as their error: it is built once, on a cold path.
#![allow(clippy::result_large_err)]
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Shared, TokenInfo};

type Shr = State<std::sync::Arc<Shared>>;

pub(super) fn ks_error(status: StatusCode, title: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": status.as_u16(), "title": title, "message": message}})),
    )
        .into_response()
}

fn unauthorized() -> Response {
    ks_error(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "The request you have made requires authentication.",
    )
}

pub(super) async fn version(State(s): Shr) -> Response {
    let base = s.base();
    axum::Json(json!({"version": {
        "id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/v3/")}],
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.identity-v3+json"}]}}))
    .into_response()
}

/// `POST /v3/auth/tokens`.
pub(super) async fn issue(State(s): Shr, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return ks_error(
            StatusCode::BAD_REQUEST,
            "Bad Request",
            "Expecting to find auth in request body.",
        );
    };
    let identity = &req["auth"]["identity"];
    let methods: Vec<&str> = identity["methods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let info = {
        let state = s.lock();
        let now = SystemTime::now();
        let expires = now + state.token_lifetime;
        if methods == ["password"] {
            let u = &identity["password"]["user"];
            let (name, pw) = (u["name"].as_str(), u["password"].as_str());
            let Some(user) = state
                .users
                .iter()
                .find(|x| Some(x.name.as_str()) == name && Some(x.password.as_str()) == pw)
            else {
                return unauthorized();
            };
            let project = req["auth"]["scope"]["project"]["name"].as_str();
            if project.is_some_and(|p| p != user.project) {
                // No role in that project: Keystone answers 401 as for a bad password.
                return unauthorized();
            }
            TokenInfo {
                user: user.name.clone(),
                project_name: user.project.clone(),
                project_id: state.projects[&user.project].clone(),
                roles: user.roles.clone(),
                expires,
            }
        } else if methods == ["application_credential"] {
            let a = &identity["application_credential"];
            if !req["auth"]["scope"].is_null() {
                return ks_error(
                    StatusCode::UNAUTHORIZED,
                    "Unauthorized",
                    "Application credentials cannot request a scope.",
                );
            }
            let Some(ac) = state.app_credentials.iter().find(|c| {
                Some(c.id.as_str()) == a["id"].as_str()
                    && Some(c.secret.as_str()) == a["secret"].as_str()
            }) else {
                return unauthorized();
            };
            TokenInfo {
                user: ac.user.clone(),
                project_name: ac.project.clone(),
                project_id: state.projects[&ac.project].clone(),
                roles: ac.roles.clone(),
                expires,
            }
        } else {
            return ks_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "Invalid input for field 'identity': methods not supported.",
            );
        }
    };
    let token = s.new_token(info.clone());
    let base = s.base();
    let region = s.lock().region.clone();
    let endpoint = |ty: &str, path: &str| {
        json!({"type": ty, "id": ty, "name": ty, "endpoints": [
            {"id": format!("{ty}-public"), "interface": "public", "region_id": region,
             "region": region, "url": format!("{base}{path}")}]})
    };
    let body = json!({"token": {
        "methods": methods,
        "expires_at": iso(info.expires),
        "issued_at": iso(SystemTime::now()),
        "user": {"id": format!("u-{}", info.user), "name": info.user,
                 "domain": {"id": "default", "name": "Default"}},
        "project": {"id": info.project_id, "name": info.project_name,
                    "domain": {"id": "default", "name": "Default"}},
        "roles": info.roles.iter().map(|r| json!({"id": format!("r-{r}"), "name": r})).collect::<Vec<_>>(),
        "catalog": [endpoint("identity", "/v3"), endpoint("compute", "/compute/v2.1"),
                    endpoint("image", "/image")],
    }});
    let mut headers = HeaderMap::new();
    if let Ok(v) = token.parse() {
        headers.insert("x-subject-token", v);
    }
    (StatusCode::CREATED, headers, axum::Json(body)).into_response()
}

/// The token of a request, if it is valid now; else Keystone middleware's 401.
pub(super) fn authenticate(s: &Shared, headers: &HeaderMap) -> Result<TokenInfo, Response> {
    let token = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(unauthorized)?;
    let info = s.token(token).ok_or_else(unauthorized)?;
    if info.expires <= SystemTime::now() {
        return Err(unauthorized());
    }
    Ok(info)
}

/// `2026-12-01T14:02:07.000000Z`.
pub(super) fn iso(t: SystemTime) -> String {
    format!("{}Z", nova_time(t))
}

/// `2026-12-01T14:02:07.000000`, as Nova writes times (UTC, no zone).
pub(super) fn nova_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let epoch = d.as_secs();
    let (days, secs) = (epoch / 86_400, epoch % 86_400);
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_micros()
    )
}
