//! The HTTP side of the Nova driver: one Keystone token shared by every call (made on first
//! need, reused until shortly before it expires, made again once when Nova answers 401), the
//! compute endpoint from its catalog, the server's microversion range, and every answer's
//! error mapped onto the driver contract's kinds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_model::ControllerId;
use qfence_model::config::{NovaAuth, NovaInterface, TlsTrust};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::keystone::{self, Token};
use super::microversion::{Microversion, VersionRange};
use crate::driver::{ControllerErrors, DriverError, ErrorKind};
use crate::http::{self, HttpClient};

/// How many times a read answered 5xx or lost in transit is sent.
const READ_ATTEMPTS: u32 = 3;

/// How long ending the session (revoking the token) may take.
const LOGOUT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which API a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Compute,
    /// Glance v2, for image properties.
    Image,
}

/// A token and the endpoints found in its catalog.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) token: Token,
    pub(crate) compute: url::Url,
    /// The catalog region of the compute endpoint.
    pub(crate) region: Option<String>,
    /// An error when the catalog has no (https) image service: image reads then fail.
    pub(crate) image: Result<url::Url, String>,
}

/// A successful answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

pub(crate) struct Client {
    pub(crate) id: ControllerId,
    keystone: url::Url,
    pub(crate) auth: NovaAuth,
    secret: SecretString,
    interface: NovaInterface,
    pub(crate) region: Option<String>,
    trust: TlsTrust,
    pub(crate) http: OnceCell<HttpClient>,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    versions: Mutex<Option<VersionRange>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NovaClient")
            .field("id", &self.id)
            .field("keystone", &self.keystone.as_str())
            .field("auth", &self.auth)
            .field("interface", &self.interface)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl ControllerErrors for Client {
    fn controller_id(&self) -> &ControllerId {
        &self.id
    }
}

impl Client {
    pub(crate) fn new(
        id: ControllerId,
        keystone: url::Url,
        auth: NovaAuth,
        secret: SecretString,
        interface: NovaInterface,
        region: Option<String>,
        trust: TlsTrust,
    ) -> Self {
        Self {
            id,
            keystone,
            auth,
            secret,
            interface,
            region,
            trust,
            http: OnceCell::new(),
            session: tokio::sync::Mutex::new(None),
            versions: Mutex::new(None),
        }
    }

    /// The HTTPS client (TLS trust, same-origin redirects, no proxy), built on first use
    /// because it reads the CA file. Keystone and Nova are both reached through it: a pin
    /// must match the certificate of each.
    pub(crate) async fn http(&self) -> Result<&HttpClient, DriverError> {
        http::shared_client(&self.http, &self.id, &self.trust).await
    }

    /// The session to use: the current one unless it is stale or is `failed` (the one Nova
    /// just refused), else a new login. One login at a time; the others wait for it.
    pub(crate) async fn session(
        &self,
        failed: Option<&Arc<Session>>,
    ) -> Result<Arc<Session>, DriverError> {
        let mut current = self.session.lock().await;
        if let Some(s) = current.as_ref() {
            let refused = failed.is_some_and(|f| Arc::ptr_eq(f, s));
            if !refused && !s.token.stale(qfence_model::time::wall_clock()) {
                return Ok(s.clone());
            }
        }
        *current = None;
        let made = Arc::new(self.login().await?);
        *current = Some(made.clone());
        Ok(made)
    }

    /// Revokes the token, if there is one (`DELETE /v3/auth/tokens`), waiting at most
    /// `LOGOUT_TIMEOUT`; the next call logs in again. A token Keystone does not revoke
    /// expires on its own.
    pub(crate) async fn logout(&self) {
        let Some(session) = self.session.lock().await.take() else {
            return;
        };
        let call = "DELETE /v3/auth/tokens";
        let (Ok(url), Ok(http)) = (self.keystone.join("auth/tokens"), self.http().await) else {
            return;
        };
        let token = session.token.secret.expose_secret();
        let sent = http
            .client
            .delete(url)
            .header("x-auth-token", token)
            .header("x-subject-token", token)
            .send();
        match tokio::time::timeout(LOGOUT_TIMEOUT, sent).await {
            Ok(Ok(r)) if r.status().is_success() || r.status() == StatusCode::NOT_FOUND => {}
            Ok(Ok(r)) => {
                tracing::warn!(controller = %self.id, call, status = %r.status(), "Keystone refused to revoke qfence's token");
            }
            Ok(Err(e)) => {
                let e = http::map_error(&self.id, call, &e, false);
                tracing::warn!(controller = %self.id, error = %e, "Could not revoke qfence's Keystone token");
            }
            Err(_) => {
                tracing::warn!(controller = %self.id, call, "Revoking qfence's Keystone token timed out");
            }
        }
    }

    /// `POST /v3/auth/tokens`.
    async fn login(&self) -> Result<Session, DriverError> {
        let call = "POST /v3/auth/tokens";
        let url = self
            .keystone
            .join("auth/tokens")
            .map_err(|e| self.err(ErrorKind::Protocol, call, e.to_string(), false))?;
        let body = keystone::login_body(&self.auth, &self.secret);
        let resp = self
            .http()
            .await?
            .client
            .post(url)
            .json(&body)
            .send()
            .await
            .map_err(|e| http::map_error(&self.id, call, &e, false))?;
        drop(body);
        let status = resp.status();
        let subject = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = http::read_body(&self.id, call, resp, false).await?;
        if status == StatusCode::UNAUTHORIZED {
            let why = match &self.auth {
                NovaAuth::Password {
                    username, project, ..
                } => format!(
                    "Keystone refused user {username:?} for project {project:?} (401): wrong \
                     password, or no role in that project"
                ),
                NovaAuth::ApplicationCredential { id } => format!(
                    "Keystone refused application credential {id:?} (401): wrong secret, \
                     expired or deleted"
                ),
            };
            return Err(self.err(ErrorKind::Auth, call, why, false));
        }
        if !status.is_success() {
            return Err(map_status(&self.id, call, status, &bytes, false));
        }
        let token = keystone::parse_token(subject.as_deref(), &bytes)
            .map_err(|e| self.err(ErrorKind::Protocol, call, e, false))?;
        let find =
            |ty| keystone::endpoint(&token.catalog, ty, self.interface, self.region.as_deref());
        let (compute, region) =
            find("compute").map_err(|e| self.err(ErrorKind::Rejected, call, e, false))?;
        let image = find("image").map(|(u, _)| u);
        tracing::debug!(controller = %self.id, expires_at = ?token.expires_at, "Got a Keystone token");
        Ok(Session {
            token,
            compute,
            region,
            image,
        })
    }

    /// The compute endpoint's microversion range (`GET` on its version document), read once.
    pub(crate) async fn versions(&self) -> Result<VersionRange, DriverError> {
        if let Some(v) = *self.versions.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(v);
        }
        let a = self
            .request(Method::GET, Api::Compute, "", &[], None, None)
            .await?;
        let call = "GET / (versions)";
        let doc = a.json();
        let v = doc.get("version").unwrap_or(&Value::Null);
        let field = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .and_then(Microversion::parse)
        };
        let range = match (field("min_version"), field("version")) {
            (Some(min), Some(max)) => VersionRange { min, max },
            _ => {
                return Err(self.err(
                    ErrorKind::Unsupported,
                    call,
                    format!(
                        "the compute endpoint offers no microversions (is it v2.1?): {}",
                        brief(&a.body)
                    ),
                    false,
                ));
            }
        };
        *self.versions.lock().unwrap_or_else(|e| e.into_inner()) = Some(range);
        Ok(range)
    }

    /// `wanted` if the server offers it, else an `Unsupported` error naming the call.
    pub(crate) async fn need(
        &self,
        call: &str,
        wanted: Microversion,
    ) -> Result<Microversion, DriverError> {
        let range = self.versions().await?;
        if range.contains(wanted) {
            Ok(wanted)
        } else {
            Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!("needs compute microversion {wanted}; the server offers {range}"),
                false,
            ))
        }
    }

    /// The first of `wanted` the server offers, else an `Unsupported` error naming the call.
    pub(crate) async fn best(
        &self,
        call: &str,
        wanted: &[Microversion],
    ) -> Result<Microversion, DriverError> {
        let range = self.versions().await?;
        range.choose(wanted).ok_or_else(|| {
            self.err(
                ErrorKind::Unsupported,
                call,
                format!("the server offers microversions {range}, none of those it needs"),
                false,
            )
        })
    }

    /// One API request, authenticated; `path` is relative to the API's endpoint (`""` for the
    /// endpoint's own document). Renews the token once on 401; resends a read answered 5xx
    /// or lost in transit, up to [`READ_ATTEMPTS`]. Every other failure is an error of the
    /// driver contract's kind, `state_unknown` when a write may have been applied.
    pub(crate) async fn request(
        &self,
        method: Method,
        api: Api,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        microversion: Option<Microversion>,
    ) -> Result<Answer, DriverError> {
        let write = method != Method::GET;
        let call = format!("{method} /{}", path.trim_start_matches('/'));
        let mut refused: Option<Arc<Session>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let session = self.session(refused.as_ref()).await?;
            let base = match api {
                Api::Compute => &session.compute,
                Api::Image => session
                    .image
                    .as_ref()
                    .map_err(|e| self.err(ErrorKind::Unsupported, &call, e.clone(), false))?,
            };
            let mut url = join(base, path);
            if !query.is_empty() {
                url.query_pairs_mut()
                    .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
            }
            let mut req = self
                .http()
                .await?
                .client
                .request(method.clone(), url)
                .header("x-auth-token", session.token.secret.expose_secret())
                .header("accept", "application/json");
            if let Some(mv) = microversion {
                req = req.header("openstack-api-version", format!("compute {mv}"));
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) if !write && !e.is_timeout() && attempt < READ_ATTEMPTS => {
                    // A pooled connection the server closed: a read is safe to send again.
                    pause(attempt).await;
                    continue;
                }
                Err(e) => return Err(http::map_error(&self.id, &call, &e, write)),
            };
            let status = resp.status();
            let bytes = http::read_body(&self.id, &call, resp, write).await?;
            if status.is_success() {
                return Ok(Answer { body: bytes });
            }
            if status == StatusCode::UNAUTHORIZED && refused.is_none() {
                // Revoked, or expired earlier than it said: log in once more.
                refused = Some(session);
                continue;
            }
            if status.is_server_error() && !write && attempt < READ_ATTEMPTS {
                pause(attempt).await;
                continue;
            }
            return Err(map_status(&self.id, &call, status, &bytes, write));
        }
    }

    /// The Keystone URL logged in to.
    pub(crate) fn keystone(&self) -> &url::Url {
        &self.keystone
    }
}

/// Waits a little before resending a read (100 ms, 200 ms).
async fn pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(100) * attempt).await;
}

/// `base` + `path`, keeping the base's path (`https://n:8774/v2.1` + `os-services`).
fn join(base: &url::Url, path: &str) -> url::Url {
    let mut url = base.clone();
    let mut p = url.path().trim_end_matches('/').to_owned();
    if !path.is_empty() {
        p.push('/');
        p.push_str(path.trim_start_matches('/'));
    } else {
        p.push('/');
    }
    url.set_path(&p);
    url
}

/// The message of an OpenStack error body: Nova's `{"badRequest": {"message": ...}}` (any
/// key), Keystone's `{"error": {"message": ...}}`, or the text itself.
pub(crate) fn message(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(o) = v.as_object() {
        for inner in o.values() {
            if let Some(m) = inner.get("message").and_then(Value::as_str) {
                return m.trim().to_owned();
            }
        }
        if let Some(m) = o.get("message").and_then(Value::as_str) {
            return m.trim().to_owned();
        }
    }
    brief(body)
}

/// The start of a body, for messages.
pub(crate) fn brief(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s = s.trim();
    if s.chars().count() > 200 {
        format!("{}...", s.chars().take(200).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Maps an error answer onto the contract's kinds. A refused request (4xx) changed nothing;
/// after a 5xx to a write nobody can say what happened.
pub(crate) fn map_status(
    id: &ControllerId,
    call: &str,
    status: StatusCode,
    body: &[u8],
    write: bool,
) -> DriverError {
    let msg = format!("HTTP {}: {}", status.as_u16(), message(body));
    let kind = match status.as_u16() {
        401 => ErrorKind::Auth,
        // 400 bad request or conflicting state (409), 403 policy, 404 no such thing, 413/429
        // over a limit: the target answered and refused.
        400 | 403 | 404 | 409 | 413 | 429 => ErrorKind::Rejected,
        // The microversion asked for is outside the server's range.
        406 => ErrorKind::Unsupported,
        501 => ErrorKind::Unsupported,
        502..=504 => ErrorKind::Unreachable,
        _ => ErrorKind::Protocol,
    };
    DriverError::new(kind, id, call, msg, write && status.is_server_error())
}

/// When the call's deadline passes, for a poll loop.
pub(crate) fn time_left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_onto_the_contract_kinds() {
        let id = ControllerId::new("nova").unwrap();
        let e = |code: u16, write: bool| {
            map_status(
                &id,
                "POST /servers/x/action",
                StatusCode::from_u16(code).unwrap(),
                br#"{"conflictingRequest": {"code": 409, "message": "Cannot 'evacuate' instance x while it is in vm_state paused"}}"#,
                write,
            )
        };
        let c = e(409, true);
        assert_eq!((c.kind, c.state_unknown), (ErrorKind::Rejected, false));
        assert!(c.message.contains("vm_state paused"), "{}", c.message);
        assert_eq!(e(401, false).kind, ErrorKind::Auth);
        assert_eq!(e(403, false).kind, ErrorKind::Rejected);
        assert_eq!(e(406, false).kind, ErrorKind::Unsupported);
        let s = e(503, true);
        assert_eq!((s.kind, s.state_unknown), (ErrorKind::Unreachable, true));
        let s = e(500, false);
        assert_eq!((s.kind, s.state_unknown), (ErrorKind::Protocol, false));
        assert_eq!(
            message(br#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#),
            "The request you have made requires authentication."
        );
        assert_eq!(message(b"<html>oops</html>"), "<html>oops</html>");
    }

    #[test]
    fn paths_join_under_the_endpoint() {
        let base = url::Url::parse("https://n:8774/v2.1").unwrap();
        assert_eq!(
            join(&base, "os-services").as_str(),
            "https://n:8774/v2.1/os-services"
        );
        assert_eq!(join(&base, "").as_str(), "https://n:8774/v2.1/");
        let base = url::Url::parse("https://n/compute/v2.1/").unwrap();
        assert_eq!(
            join(&base, "/servers/detail").as_str(),
            "https://n/compute/v2.1/servers/detail"
        );
    }
}
