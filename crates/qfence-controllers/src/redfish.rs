//! The Redfish driver: `power.off` (fence), its undo `power.on`, and `power.status` (health).
//!
//! How a fence goes (see `docs/specs/controller.md` and the Redfish notes in it):
//! 1. Read the system, chosen by the binding's resource: its `Id`, `UUID`, `Name` or
//!    `HostName`, matched exactly, never "the last member of the collection". Every read
//!    checks again that the resource it got is that system.
//! 2. Already `Off` is success: the read is the proof.
//! 3. `POST` `ForceOff` to the action target the system advertises (never a guessed URI),
//!    refusing if `ForceOff` is not among its allowed reset types.
//! 4. A 400 or 409 is answered by reading `PowerState` (iDRAC answers 409 when already off):
//!    `Off` is FENCED, anything else is a refusal. 401/403 are not retried; 5xx and lost
//!    answers are retried a few times within the deadline.
//! 5. Poll `PowerState` until it reads `Off` (only `Off` counts; `PoweringOff` does not),
//!    tolerating failed reads (BMCs stumble right after a reset) until the deadline.
//!
//! Authentication is HTTP basic, or one session (`X-Auth-Token`) per driver, shared by every
//! call: BMCs have few session slots (often 4 to 16) and a fencer that makes one per call runs
//! out of them as soon as many plans fence at once (the 1,000-plan benchmark: every power
//! read-back answered 503 "simultaneous sessions exceeding the limit"). The session is made on
//! first need, by one task at a time while the others wait for it; that task is not the
//! caller's, so a caller that reaches its deadline mid-login never leaves a session the BMC
//! made unknown: the task records it. A 401 on a session means it expired or was deleted: it
//! is forgotten, a new one is made and the request is sent once more. The session is deleted
//! by [`RedfishDriver::close`], or best-effort when the driver is dropped. A service without a
//! `SessionService` (404/405) falls back to basic authentication, with a warning.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use qfence_model::config::TlsTrust;
use qfence_model::config::{ControllerConfig, ControllerKind, RedfishAuth};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde_json::Value;
use tokio::time::Instant;

use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target, required_secret,
};
use crate::error::Error;
use crate::http::{self, HttpClient};
use crate::secrets::Secret;

const SYSTEMS: &str = "/redfish/v1/Systems";
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
const POWER_OFF: &str = "power.off";
const POWER_STATUS: &str = "power.status";
/// How long a session delete may take.
const LOGOUT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long making a session may take. It runs in its own task, not under a caller's
/// deadline: callers wait for it only as long as their own deadline allows.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a request answered with 5xx or lost in transit is sent.
const ATTEMPTS: u32 = 3;

/// A Redfish BMC.
#[derive(Debug)]
pub struct RedfishDriver {
    id: ControllerId,
    base: url::Url,
    username: String,
    auth: RedfishAuth,
    secret: Option<Secret>,
    http: HttpClient,
    /// Resource → the system's URI, found once and checked on every read.
    systems: Mutex<BTreeMap<String, String>>,
    /// Set once the service showed it has no sessions.
    no_sessions: Arc<AtomicBool>,
    /// Where the service makes sessions, once read from its root.
    sessions: Arc<Mutex<Option<String>>>,
    /// The driver's one session, shared with the task that makes it.
    session: Arc<SessionCache>,
    poll_interval: Duration,
}

/// How a call authenticates: `Session` means with the driver's session, whichever it is
/// when each request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    None,
    Basic,
    Session,
}

/// What one request carries.
#[derive(Clone, Copy)]
enum Cred<'a> {
    None,
    Basic,
    Token(&'a Secret),
}

/// What [`RedfishDriver::session`] returns: the session, `None` without sessions.
type SessionFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<Option<Arc<Session>>, DriverError>> + Send + 'a>>;

/// A session the BMC made for this driver.
#[derive(Debug)]
struct Session {
    token: Secret,
    /// Its path, to delete it by.
    location: String,
}

/// The driver's session: the one in use, and the lock held by whoever is making one.
#[derive(Debug)]
struct SessionCache {
    current: Mutex<Option<Arc<Session>>>,
    /// Held by the task making a session (one at a time); others wait on it, then take what
    /// it made.
    making: Arc<tokio::sync::Mutex<()>>,
    /// How many makings ended, and the error of the last one if it failed: a caller that
    /// waited through a failed making takes its error instead of trying again at once (a
    /// thousand waiters must not each POST in turn to a BMC that just refused).
    outcome: Mutex<(u64, Option<DriverError>)>,
    /// To delete the session when the driver goes.
    http: reqwest::Client,
    base: url::Url,
    id: ControllerId,
}

impl SessionCache {
    fn current(&self) -> Option<Arc<Session>> {
        self.current.lock().ok().and_then(|g| g.clone())
    }

    fn endings(&self) -> u64 {
        self.outcome.lock().map(|g| g.0).unwrap_or(0)
    }

    /// The error of a making that ended after `seen`, if the last one failed.
    fn failed_since(&self, seen: u64) -> Option<DriverError> {
        let g = self.outcome.lock().ok()?;
        if g.0 > seen { g.1.clone() } else { None }
    }

    fn record(&self, made: &Result<Option<Arc<Session>>, DriverError>) {
        if let Ok(Some(s)) = made
            && let Ok(mut g) = self.current.lock()
        {
            *g = Some(s.clone());
        }
        if let Ok(mut g) = self.outcome.lock() {
            g.0 += 1;
            g.1 = made.as_ref().err().cloned();
        }
    }

    /// Forgets `s` if it is still the current session (the BMC no longer knows it).
    fn forget(&self, s: &Arc<Session>) {
        if let Ok(mut g) = self.current.lock()
            && g.as_ref().is_some_and(|c| Arc::ptr_eq(c, s))
        {
            *g = None;
        }
    }

    fn take(&self) -> Option<Arc<Session>> {
        self.current.lock().ok().and_then(|mut g| g.take())
    }
}

impl Drop for SessionCache {
    /// Best-effort: deletes the session from a task on the current runtime, if there is one.
    /// [`RedfishDriver::close`] is the way that waits for it.
    fn drop(&mut self) {
        let Some(s) = self.current.get_mut().ok().and_then(Option::take) else {
            return;
        };
        let (Ok(rt), Ok(url)) = (
            tokio::runtime::Handle::try_current(),
            self.base.join(&s.location),
        ) else {
            tracing::warn!(controller = %self.id, session = %s.location,
                "The Redfish driver went without a runtime to delete its session; the BMC will expire it");
            return;
        };
        let req = self
            .http
            .delete(url)
            .timeout(LOGOUT_TIMEOUT)
            .header("X-Auth-Token", s.token.expose())
            .header("OData-Version", "4.0");
        let id = self.id.clone();
        rt.spawn(async move {
            match req.send().await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(controller = %id, session = %s.location, status = %r.status(),
                    "The Redfish service refused to delete qfence's session")
                }
                Err(e) => tracing::warn!(controller = %id, session = %s.location, error = %e,
                    "Could not delete qfence's Redfish session"),
            }
        });
    }
}

/// What qfence reads of a `ComputerSystem`.
#[derive(Debug, Clone)]
struct System {
    uri: String,
    id: String,
    uuid: String,
    name: String,
    host_name: String,
    power: String,
    reset_target: Option<String>,
    /// `None` when the service does not list them.
    allowed: Option<Vec<String>>,
}

impl System {
    fn from_json(uri: &str, v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let action = v.pointer("/Actions/#ComputerSystem.Reset");
        Self {
            uri: uri.to_owned(),
            id: s("Id"),
            uuid: s("UUID"),
            name: s("Name"),
            host_name: s("HostName"),
            power: s("PowerState"),
            reset_target: action
                .and_then(|a| a.get("target"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            allowed: action
                .and_then(|a| a.get("ResetType@Redfish.AllowableValues"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                }),
        }
    }

    /// Whether this is the system the resource names. Exact matches only (UUIDs ignore case).
    fn is(&self, resource: &str) -> bool {
        (!self.id.is_empty() && self.id == resource)
            || (!self.uuid.is_empty() && self.uuid.eq_ignore_ascii_case(resource))
            || (!self.name.is_empty() && self.name == resource)
            || (!self.host_name.is_empty() && self.host_name == resource)
    }

    fn allows(&self, reset: &str) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.iter().any(|x| x == reset))
    }

    fn describe(&self) -> String {
        format!(
            "PowerState={} (system {} \"{}\", UUID {})",
            if self.power.is_empty() {
                "(missing)"
            } else {
                &self.power
            },
            self.id,
            self.name,
            self.uuid
        )
    }
}

fn is_safe_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s != "."
        && s != ".."
}

impl RedfishDriver {
    /// Builds the driver. No I/O but reading a CA file.
    pub fn new(
        id: ControllerId,
        endpoint: &url::Url,
        username: &str,
        auth: RedfishAuth,
        tls: &TlsTrust,
        secret: Option<Secret>,
    ) -> Result<Self, Error> {
        let build = |reason: String| Error::Build {
            controller: id.to_string(),
            reason,
        };
        if endpoint.scheme() != "https" {
            return Err(build(format!(
                "endpoint {endpoint} must be https: Redfish credentials never travel in clear"
            )));
        }
        if endpoint.host_str().is_none() {
            return Err(build(format!("endpoint {endpoint} has no host")));
        }
        let mut base = endpoint.clone();
        base.set_path("/");
        base.set_query(None);
        base.set_fragment(None);
        let http = http::build_client(&id, tls)?;
        let session = Arc::new(SessionCache {
            current: Mutex::new(None),
            making: Arc::new(tokio::sync::Mutex::new(())),
            outcome: Mutex::new((0, None)),
            http: http.client.clone(),
            base: base.clone(),
            id: id.clone(),
        });
        Ok(Self {
            id,
            base,
            username: username.to_owned(),
            auth,
            secret,
            http,
            systems: Mutex::new(BTreeMap::new()),
            no_sessions: Arc::new(AtomicBool::new(false)),
            sessions: Arc::new(Mutex::new(None)),
            session,
            poll_interval: Duration::from_millis(500),
        })
    }

    /// Another handle on this driver's connection and session, for the task that makes the
    /// session (it must outlive a caller that gives up).
    fn share(&self) -> Self {
        Self {
            id: self.id.clone(),
            base: self.base.clone(),
            username: self.username.clone(),
            auth: self.auth,
            secret: self.secret.clone(),
            http: self.http.clone(),
            systems: Mutex::new(BTreeMap::new()),
            no_sessions: self.no_sessions.clone(),
            sessions: self.sessions.clone(),
            session: self.session.clone(),
            poll_interval: self.poll_interval,
        }
    }

    /// Whether the driver holds a session now (for tests and diagnostics).
    pub fn has_session(&self) -> bool {
        self.session.current().is_some()
    }

    /// The certificate fingerprint the target showed last, if any.
    pub fn seen_fingerprint(&self) -> Option<String> {
        self.http.seen.get()
    }

    fn err(
        &self,
        kind: ErrorKind,
        call: &str,
        msg: impl Into<String>,
        unknown: bool,
    ) -> DriverError {
        DriverError::new(kind, &self.id, call, msg, unknown)
    }

    fn url(&self, call: &str, path: &str) -> Result<url::Url, DriverError> {
        // Only paths: an @odata.id that names another host must not send us there.
        if !path.starts_with('/') || path.starts_with("//") {
            return Err(self.err(
                ErrorKind::Protocol,
                call,
                format!("the service pointed at {path:?}, which is not a path on this service"),
                false,
            ));
        }
        self.base.join(path).map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                call,
                format!("bad path {path:?}: {e}"),
                false,
            )
        })
    }

    /// Sends one request; reads at most [`http::MAX_BODY_BYTES`] of the answer. With the
    /// session, a 401 means the BMC no longer knows it (expired, deleted): a new one is made
    /// and the request sent once more (a 401 is refused before anything is done).
    async fn send(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), DriverError> {
        match auth {
            Auth::None => self.send_as(ctx, Cred::None, method, path, body).await,
            Auth::Basic => self.send_as(ctx, Cred::Basic, method, path, body).await,
            Auth::Session => {
                let mut renewed = false;
                loop {
                    let Some(s) = self.session().await? else {
                        return self.send_as(ctx, Cred::Basic, method, path, body).await;
                    };
                    let r = self
                        .send_as(ctx, Cred::Token(&s.token), method.clone(), path, body)
                        .await?;
                    if r.0 == StatusCode::UNAUTHORIZED && !renewed {
                        tracing::info!(controller = %self.id, session = %s.location,
                            "The Redfish session is no longer valid (401); making a new one");
                        self.session.forget(&s);
                        renewed = true;
                        continue;
                    }
                    return Ok(r);
                }
            }
        }
    }

    async fn send_as(
        &self,
        ctx: &CallContext,
        cred: Cred<'_>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), DriverError> {
        let call = format!("{method} {path}");
        let url = self.url(&call, path)?;
        let mut req = self
            .http
            .client
            .request(method.clone(), url)
            .timeout(http::remaining(ctx))
            .header("Accept", "application/json")
            .header("OData-Version", "4.0");
        if let Some(b) = body {
            req = req.json(b);
        }
        req = match cred {
            Cred::None => req,
            Cred::Basic => {
                let pw = self.secret.as_ref().map(Secret::expose);
                req.basic_auth(&self.username, pw)
            }
            Cred::Token(token) => req.header("X-Auth-Token", token.expose()),
        };
        let sent = method != Method::GET;
        let resp = req.send().await.map_err(|e| {
            let mut err = http::map_error(&self.id, &call, &e, sent);
            if e.is_connect()
                && let Some(fp) = self.http.seen.get()
                && !err.message.contains(&fp)
            {
                err.message.push_str(&format!(" (the server showed {fp})"));
            }
            err
        })?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = http::read_body(&self.id, &call, resp, sent).await?;
        Ok((status, headers, bytes))
    }

    fn parse(&self, call: &str, bytes: &[u8]) -> Result<Value, DriverError> {
        serde_json::from_slice(bytes).map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                call,
                format!("the answer is not valid JSON: {e}"),
                false,
            )
        })
    }

    /// GET a resource that must exist, retrying 5xx and transport errors a few times.
    async fn get(&self, ctx: &CallContext, auth: &Auth, path: &str) -> Result<Value, DriverError> {
        let call = format!("GET {path}");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.send(ctx, auth, Method::GET, path, None).await;
            let retry = match &r {
                Ok((s, _, _)) => s.is_server_error(),
                Err(e) => {
                    matches!(e.kind, ErrorKind::Unreachable | ErrorKind::Protocol)
                        && !e.message.contains("limit")
                        && !e.message.contains("certificate")
                        && !e.message.contains("redirect")
                }
            };
            if retry && attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                continue;
            }
            let (status, _, bytes) = r?;
            return match status.as_u16() {
                200..=299 => self.parse(&call, &bytes),
                401 | 403 => Err(self.err(
                    ErrorKind::Auth,
                    &call,
                    format!("the service answered {status}: {}", brief(&bytes)),
                    false,
                )),
                404 => Err(self.err(ErrorKind::Rejected, &call, "not found (404)", false)),
                s if s >= 500 => Err(self.err(
                    ErrorKind::Unreachable,
                    &call,
                    format!(
                        "the service answered {status} {attempt} times: {}",
                        brief(&bytes)
                    ),
                    false,
                )),
                _ => Err(self.err(
                    ErrorKind::Protocol,
                    &call,
                    format!("unexpected answer {status}: {}", brief(&bytes)),
                    false,
                )),
            };
        }
    }

    /// Sleeps before retry `attempt`; false when the deadline leaves no room for another try.
    async fn backoff(&self, ctx: &CallContext, attempt: u32) -> bool {
        let wait = Duration::from_millis(200 * u64::from(attempt));
        if Instant::now() + wait + Duration::from_millis(100) >= ctx.deadline {
            return false;
        }
        tokio::time::sleep(wait).await;
        true
    }

    /// How this call authenticates; with sessions, makes sure there is one first.
    async fn login(&self) -> Result<Auth, DriverError> {
        if self.auth == RedfishAuth::Basic || self.no_sessions.load(Ordering::Relaxed) {
            return Ok(Auth::Basic);
        }
        Ok(match self.session().await? {
            Some(_) => Auth::Session,
            None => Auth::Basic,
        })
    }

    /// The driver's session, made now if there is none; `None` when the service has no
    /// sessions. Waits (within the caller's deadline, as every call runs under it) for a
    /// making already under way rather than starting another.
    ///
    /// Boxed: making a session sends requests, which may need the session; the box breaks
    /// that cycle for the compiler's `Send` check.
    fn session(&self) -> SessionFuture<'_> {
        Box::pin(self.session_now())
    }

    async fn session_now(&self) -> Result<Option<Arc<Session>>, DriverError> {
        if let Some(s) = self.session.current() {
            return Ok(Some(s));
        }
        if self.no_sessions.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let seen = self.session.endings();
        let guard = self.session.making.clone().lock_owned().await;
        if let Some(s) = self.session.current() {
            return Ok(Some(s));
        }
        if self.no_sessions.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(e) = self.session.failed_since(seen) {
            return Err(e);
        }
        // The making runs in its own task holding the lock: if this caller is cancelled or
        // reaches its deadline, the task still records (or deletes) what the BMC made.
        let this = self.share();
        let task = tokio::spawn(async move {
            let _making = guard;
            let ctx = CallContext::with_timeout(
                qfence_model::OrchestratorId::new("login").expect("valid name"),
                LOGIN_TIMEOUT,
            );
            let made = ctx
                .run(&this.id, "login", this.make_session(&ctx))
                .await
                .map(|s| s.map(Arc::new));
            this.session.record(&made);
            made
        });
        task.await.map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                "login",
                format!("making a session failed: {e}"),
                true,
            )
        })?
    }

    /// POSTs a new session. `None` when the service has no sessions.
    async fn make_session(&self, ctx: &CallContext) -> Result<Option<Session>, DriverError> {
        let Some(sessions) = self.sessions_path(ctx).await? else {
            self.fall_back_to_basic();
            return Ok(None);
        };
        let call = format!("POST {sessions}");
        let password = self.secret.as_ref().map(Secret::expose).unwrap_or("");
        let body = serde_json::json!({"UserName": self.username, "Password": password});
        let (status, headers, bytes) = self
            .send_as(ctx, Cred::None, Method::POST, &sessions, Some(&body))
            .await?;
        drop(body);
        match status.as_u16() {
            200 | 201 if String::from_utf8_lossy(&bytes).contains("PasswordChangeRequired") => {
                // The session would only allow changing the password: a configuration error,
                // not something to retry. Delete what was made.
                if let Some(loc) = headers.get("Location").and_then(|v| v.to_str().ok())
                    && let Some(token) = headers.get("X-Auth-Token").and_then(|v| v.to_str().ok())
                {
                    let path = url::Url::parse(loc)
                        .map(|u| u.path().to_owned())
                        .unwrap_or_else(|_| loc.to_owned());
                    self.logout(&Session {
                        token: Secret::new(token.to_owned()),
                        location: path,
                    })
                    .await;
                }
                Err(self.err(
                    ErrorKind::Auth,
                    &call,
                    format!("the account {:?} must change its password before it can act (PasswordChangeRequired)", self.username),
                    false,
                ))
            }
            200 | 201 => {
                let token = headers
                    .get("X-Auth-Token")
                    .and_then(|v| v.to_str().ok())
                    .map(|t| Secret::new(t.to_owned()))
                    .ok_or_else(|| {
                        self.err(
                            ErrorKind::Protocol,
                            &call,
                            "session made without an X-Auth-Token",
                            false,
                        )
                    })?;
                let location = headers
                    .get("Location")
                    .and_then(|v| v.to_str().ok())
                    .map(|l| {
                        url::Url::parse(l)
                            .map(|u| u.path().to_owned())
                            .unwrap_or_else(|_| l.to_owned())
                    })
                    .or_else(|| {
                        serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
                            v.get("@odata.id")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        })
                    })
                    .ok_or_else(|| {
                        self.err(
                            ErrorKind::Protocol,
                            &call,
                            "session made without a Location to delete it by",
                            false,
                        )
                    })?;
                tracing::debug!(controller = %self.id, session = %location, "Made a Redfish session");
                Ok(Some(Session { token, location }))
            }
            404 | 405 => {
                self.fall_back_to_basic();
                Ok(None)
            }
            401 | 403 => Err(self.err(
                ErrorKind::Auth,
                &call,
                format!(
                    "the service refused the credentials of user {:?} ({status})",
                    self.username
                ),
                false,
            )),
            _ => Err(self.err(
                ErrorKind::Protocol,
                &call,
                format!("unexpected answer {status}: {}", brief(&bytes)),
                false,
            )),
        }
    }

    fn fall_back_to_basic(&self) {
        if !self.no_sessions.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                controller = %self.id,
                "The Redfish service has no SessionService; using basic authentication"
            );
        }
    }

    /// Where sessions are made, from the service root (which needs no authentication):
    /// `Links.Sessions`, or the standard path when only `SessionService` is shown. `None` when
    /// the service has no sessions.
    async fn sessions_path(&self, ctx: &CallContext) -> Result<Option<String>, DriverError> {
        if let Ok(g) = self.sessions.lock()
            && let Some(p) = g.as_ref()
        {
            return Ok(Some(p.clone()));
        }
        let root = self.get(ctx, &Auth::None, "/redfish/v1/").await?;
        let path = root
            .pointer("/Links/Sessions/@odata.id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| root.get("SessionService").map(|_| SESSIONS.to_owned()));
        if let (Some(p), Ok(mut g)) = (&path, self.sessions.lock()) {
            *g = Some(p.clone());
        }
        Ok(path)
    }

    /// Deletes a session, bounded by [`LOGOUT_TIMEOUT`].
    async fn logout(&self, s: &Session) {
        let location = &s.location;
        let ctx = CallContext::with_timeout(
            qfence_model::OrchestratorId::new("logout").expect("valid name"),
            LOGOUT_TIMEOUT,
        );
        let r = tokio::time::timeout(
            LOGOUT_TIMEOUT,
            self.send_as(&ctx, Cred::Token(&s.token), Method::DELETE, location, None),
        )
        .await;
        match r {
            Ok(Ok((s, _, _))) if s.is_success() => {}
            Ok(Ok((s, _, _))) => {
                tracing::warn!(controller = %self.id, session = %location, status = %s,
                "The Redfish service refused to delete qfence's session")
            }
            Ok(Err(e)) => tracing::warn!(controller = %self.id, session = %location, error = %e,
                "Could not delete qfence's Redfish session"),
            Err(_) => tracing::warn!(controller = %self.id, session = %location,
                "Deleting qfence's Redfish session timed out"),
        }
    }

    /// Runs `f` authenticated, under the call's deadline and cancellation. The session
    /// stays for the next call.
    async fn authed<T, F>(&self, ctx: &CallContext, call: &str, f: F) -> Result<T, DriverError>
    where
        F: AsyncFnOnce(&Auth) -> Result<T, DriverError>,
    {
        ctx.run(&self.id, call, async {
            let auth = self.login().await?;
            f(&auth).await
        })
        .await
    }

    async fn read_system(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        uri: &str,
    ) -> Result<System, DriverError> {
        let v = self.get(ctx, auth, uri).await?;
        // After a same-origin redirect (sushy: by name → by UUID) the body names itself.
        let uri = v.get("@odata.id").and_then(Value::as_str).unwrap_or(uri);
        Ok(System::from_json(uri, &v))
    }

    /// Every member of the systems collection.
    async fn list_systems(
        &self,
        ctx: &CallContext,
        auth: &Auth,
    ) -> Result<Vec<System>, DriverError> {
        let coll = self.get(ctx, auth, SYSTEMS).await?;
        let members = coll
            .get("Members")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Protocol,
                    &format!("GET {SYSTEMS}"),
                    "the systems collection has no Members",
                    false,
                )
            })?;
        let mut out = Vec::new();
        for m in members.iter().take(256) {
            let Some(uri) = m.get("@odata.id").and_then(Value::as_str) else {
                continue;
            };
            out.push(self.read_system(ctx, auth, uri).await?);
        }
        Ok(out)
    }

    /// The system a resource names, read now.
    async fn system(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
    ) -> Result<System, DriverError> {
        let cached = self
            .systems
            .lock()
            .ok()
            .and_then(|m| m.get(resource).cloned());
        let mut candidates = Vec::new();
        if let Some(uri) = cached {
            candidates.push(uri);
        }
        if is_safe_segment(resource) {
            candidates.push(format!("{SYSTEMS}/{resource}"));
        }
        for uri in candidates {
            match self.read_system(ctx, auth, &uri).await {
                Ok(s) if s.is(resource) => {
                    self.remember(resource, &s.uri);
                    return Ok(s);
                }
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::Rejected => {}
                Err(e) => return Err(e),
            }
        }
        let all = self.list_systems(ctx, auth).await?;
        let found: Vec<&System> = all.iter().filter(|s| s.is(resource)).collect();
        match found.as_slice() {
            [one] => {
                self.remember(resource, &one.uri);
                Ok((*one).clone())
            }
            [] => Err(self.err(
                ErrorKind::Rejected,
                call,
                format!(
                    "no system has the id, UUID or name {resource:?}; the service has: {}",
                    list_names(&all)
                ),
                false,
            )),
            many => Err(self.err(
                ErrorKind::Rejected,
                call,
                format!(
                    "{} systems match {resource:?} ({}); name one by its id or UUID",
                    many.len(),
                    many.iter()
                        .map(|s| s.uri.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                false,
            )),
        }
    }

    fn remember(&self, resource: &str, uri: &str) {
        if let Ok(mut m) = self.systems.lock() {
            m.insert(resource.to_owned(), uri.to_owned());
        }
    }

    fn reading(&self, ctx: &CallContext, holds: bool, detail: String) -> Reading {
        Reading {
            holds,
            detail,
            at: SystemTime::now(),
            by: ctx.orchestrator.clone(),
            definitive: false,
        }
    }

    fn check_capability(&self, call: &str, target: &Target) -> Result<(), DriverError> {
        match target.capability.as_str() {
            POWER_OFF | POWER_STATUS => Ok(()),
            other => Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!("redfish has no capability {other:?} (it has power.off, power.status)"),
                false,
            )),
        }
    }

    /// Sends a reset and reads the power state until it is `want`.
    async fn reset_and_wait(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
        resets: &[&str],
        want: &str,
    ) -> Result<System, DriverError> {
        let sys = self.system(ctx, auth, call, resource).await?;
        if sys.power == want {
            return Ok(sys);
        }
        let Some(reset) = resets.iter().find(|r| sys.allows(r)) else {
            return Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!(
                    "the system does not allow {} (it allows {})",
                    resets.join(" or "),
                    sys.allowed.clone().unwrap_or_default().join(", ")
                ),
                false,
            ));
        };
        let Some(target) = sys.reset_target.clone() else {
            return Err(self.err(
                ErrorKind::Unsupported,
                call,
                "the system advertises no #ComputerSystem.Reset action",
                false,
            ));
        };
        let body = serde_json::json!({ "ResetType": reset });
        let mut attempt = 0;
        let mut monitor = None;
        loop {
            attempt += 1;
            let r = self
                .send(ctx, auth, Method::POST, &target, Some(&body))
                .await;
            match r {
                Ok((s, headers, _)) if s.is_success() => {
                    // 202: a task monitor to watch for an early failure. The proof is still
                    // the power state.
                    if s == StatusCode::ACCEPTED {
                        monitor = headers
                            .get("Location")
                            .and_then(|v| v.to_str().ok())
                            .map(|l| {
                                url::Url::parse(l)
                                    .map(|u| u.path().to_owned())
                                    .unwrap_or_else(|_| l.to_owned())
                            });
                    }
                    break;
                }
                Ok((s, _, bytes)) if s == StatusCode::BAD_REQUEST || s == StatusCode::CONFLICT => {
                    // Never give up on a 400/409: read what the system is now.
                    let now = self.system(ctx, auth, call, resource).await?;
                    if now.power == want {
                        tracing::info!(controller = %self.id, resource, status = %s,
                            "The BMC refused {reset} but the system is already {want}");
                        return Ok(now);
                    }
                    // Some BMCs (Fujitsu) refuse On for a while right after ForceOff: an
                    // unfence retries, with backoff, within its deadline. A fence does not:
                    // its refusal is reported at once so the plan can act on it.
                    if want == "On"
                        && attempt < ATTEMPTS + 2
                        && self.backoff(ctx, attempt * 2).await
                    {
                        continue;
                    }
                    return Err(self.err(
                        ErrorKind::Rejected,
                        call,
                        format!(
                            "the service answered {s} to {reset} ({}) and the system reads {}",
                            brief(&bytes),
                            now.describe()
                        ),
                        false,
                    ));
                }
                Ok((s, _, bytes))
                    if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN =>
                {
                    return Err(self.err(
                        ErrorKind::Auth,
                        call,
                        format!("the service answered {s} to {reset}: {}", brief(&bytes)),
                        false,
                    ));
                }
                Ok((s, _, bytes)) if s.is_server_error() => {
                    if attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                        continue;
                    }
                    return Err(self.err(
                        ErrorKind::Unreachable,
                        call,
                        format!(
                            "the service answered {s} to {reset} {attempt} times: {}",
                            brief(&bytes)
                        ),
                        true,
                    ));
                }
                Ok((s, _, bytes)) => {
                    return Err(self.err(
                        ErrorKind::Protocol,
                        call,
                        format!("unexpected answer {s} to {reset}: {}", brief(&bytes)),
                        true,
                    ));
                }
                Err(e) => {
                    let permanent =
                        e.message.contains("certificate") || e.message.contains("redirect");
                    if !permanent && attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                        continue;
                    }
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
            }
        }
        self.wait_for(ctx, auth, call, resource, want, monitor)
            .await
    }

    /// Polls `PowerState` until it reads `want`, stopping just before the deadline with what
    /// it last read.
    async fn wait_for(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
        want: &str,
        mut monitor: Option<String>,
    ) -> Result<System, DriverError> {
        let started = Instant::now();
        let mut last = String::from("nothing read yet");
        loop {
            if let Some(m) = monitor.clone() {
                match self.send(ctx, auth, Method::GET, &m, None).await {
                    // Still running.
                    Ok((s, _, _)) if s == StatusCode::ACCEPTED => {}
                    Ok((s, _, bytes)) if s.is_client_error() || s.is_server_error() => {
                        // The task failed: one last read decides.
                        let now = self.system(ctx, auth, call, resource).await?;
                        if now.power == want {
                            return Ok(now);
                        }
                        return Err(self.err(
                            ErrorKind::Rejected,
                            call,
                            format!(
                                "the reset's task ended with {s} ({}) and the system reads {}",
                                brief(&bytes),
                                now.describe()
                            ),
                            false,
                        ));
                    }
                    // Done (or the monitor is gone): only the power state matters now.
                    _ => monitor = None,
                }
            }
            let left = ctx.deadline.saturating_duration_since(Instant::now());
            if left <= Duration::from_millis(50) {
                return Err(self.err(
                    ErrorKind::Timeout,
                    call,
                    format!(
                        "PowerState did not read {want} within {:.1} s; last read: {last}",
                        started.elapsed().as_secs_f64()
                    ),
                    true,
                ));
            }
            tokio::time::sleep(self.poll_interval.min(left - Duration::from_millis(50))).await;
            match self.system(ctx, auth, call, resource).await {
                Ok(s) if s.power == want => return Ok(s),
                Ok(s) => last = s.describe(),
                // A BMC may answer errors right after a reset; an error is never "off".
                Err(e) if e.kind == ErrorKind::Auth => {
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
    }

    /// The role the account has and whether it grants ConfigureComponents.
    async fn grade_fence(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        systems: &[System],
    ) -> CapabilityGrade {
        let grade = |grade, reason: String| CapabilityGrade {
            capability: POWER_OFF.to_owned(),
            grade,
            reason,
        };
        if systems.is_empty() {
            return grade(Grade::Failed, "the service lists no systems".into());
        }
        let no_force: Vec<&str> = systems
            .iter()
            .filter(|s| !s.allows("ForceOff") || s.reset_target.is_none())
            .map(|s| s.id.as_str())
            .collect();
        if no_force.len() == systems.len() {
            return grade(
                Grade::Failed,
                format!(
                    "no system advertises a Reset action allowing ForceOff ({})",
                    no_force.join(", ")
                ),
            );
        }
        let role = self.own_role(ctx, auth).await;
        let caveat = if no_force.is_empty() {
            String::new()
        } else {
            format!("; systems {} cannot be forced off", no_force.join(", "))
        };
        let needed = self.post_privileges(ctx, auth).await;
        match role {
            Ok((role, privs)) if !privs.is_empty() => {
                let holds = |set: &Vec<String>| set.iter().all(|p| privs.contains(p));
                let show = |sets: &[Vec<String>]| {
                    sets.iter()
                        .map(|s| s.join("+"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                };
                match needed {
                    Some(sets) if sets.iter().any(holds) => grade(
                        Grade::Proven,
                        format!(
                            "ForceOff is advertised, the service's own privilege map says resetting \
                             a system needs {}, and role {role} holds it{caveat}",
                            show(&sets)
                        ),
                    ),
                    Some(sets) => grade(
                        Grade::Failed,
                        format!(
                            "the service's privilege map says resetting a system needs {}; role \
                             {role} has {}",
                            show(&sets),
                            privs.join(", ")
                        ),
                    ),
                    None if privs.iter().any(|p| p == "ConfigureComponents") => grade(
                        Grade::Inferred,
                        format!(
                            "ForceOff is advertised and role {role} grants ConfigureComponents, \
                             which the DMTF default privilege map requires to reset a system \
                             (the service publishes no map of its own){caveat}"
                        ),
                    ),
                    None => grade(
                        Grade::Failed,
                        format!(
                            "role {role} lacks ConfigureComponents (it has {}), so resets will be refused",
                            privs.join(", ")
                        ),
                    ),
                }
            }
            Ok((role, _)) => grade(
                Grade::Unverifiable,
                format!("role {role} shows no privileges; the first fence is the proof{caveat}"),
            ),
            Err(why) => grade(
                Grade::Unverifiable,
                format!(
                    "ForceOff is advertised, but the service does not show this account's role \
                     ({why}); the first fence is the proof{caveat}"
                ),
            ),
        }
    }

    /// The privilege sets the service's own `PrivilegeMap` requires to POST to a
    /// `ComputerSystem` (any one set suffices). `None` when it publishes no map.
    async fn post_privileges(&self, ctx: &CallContext, auth: &Auth) -> Option<Vec<Vec<String>>> {
        let account = self
            .get(ctx, auth, "/redfish/v1/AccountService")
            .await
            .ok()?;
        let map_uri = account
            .pointer("/PrivilegeMap/@odata.id")?
            .as_str()?
            .to_owned();
        let map = self.get(ctx, auth, &map_uri).await.ok()?;
        let entry = map
            .get("Mappings")?
            .as_array()?
            .iter()
            .find(|m| m.get("Entity").and_then(Value::as_str) == Some("ComputerSystem"))?;
        let sets: Vec<Vec<String>> = entry
            .pointer("/OperationMap/POST")?
            .as_array()?
            .iter()
            .filter_map(|p| {
                p.get("Privilege")?.as_array().map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
            })
            .collect();
        (!sets.is_empty()).then_some(sets)
    }

    async fn own_role(
        &self,
        ctx: &CallContext,
        auth: &Auth,
    ) -> Result<(String, Vec<String>), String> {
        let accounts = self
            .get(ctx, auth, "/redfish/v1/AccountService/Accounts")
            .await
            .map_err(|e| e.message)?;
        let mut role_id = None;
        for m in accounts
            .get("Members")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(64)
        {
            let Some(uri) = m.get("@odata.id").and_then(Value::as_str) else {
                continue;
            };
            let Ok(acc) = self.get(ctx, auth, uri).await else {
                continue;
            };
            if acc.get("UserName").and_then(Value::as_str) == Some(self.username.as_str()) {
                role_id = acc.get("RoleId").and_then(Value::as_str).map(str::to_owned);
                break;
            }
        }
        let role = role_id.ok_or("its account is not visible")?;
        let privs = match self
            .get(
                ctx,
                auth,
                &format!("/redfish/v1/AccountService/Roles/{role}"),
            )
            .await
        {
            Ok(r) => r
                .get("AssignedPrivileges")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            // The standard roles' privileges are fixed by the specification.
            Err(_) => match role.as_str() {
                "Administrator" | "Operator" => vec!["Login".into(), "ConfigureComponents".into()],
                "ReadOnly" => vec!["Login".into(), "ConfigureSelf".into()],
                _ => vec![],
            },
        };
        Ok((role, privs))
    }
}

fn list_names(all: &[System]) -> String {
    if all.is_empty() {
        return "no systems".into();
    }
    all.iter()
        .map(|s| format!("{} (\"{}\", UUID {})", s.id, s.name, s.uuid))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A short, printable excerpt of an error body: the Redfish message when there is one.
fn brief(bytes: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes)
        && let Some(m) = v.pointer("/error/message").and_then(Value::as_str)
    {
        return m.chars().take(200).collect();
    }
    let s: String = String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    if s.is_empty() { "(no body)".into() } else { s }
}

impl Build for RedfishDriver {
    const TYPE: ControllerType = ControllerType::Redfish;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Redfish {
            endpoint,
            username,
            auth,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let secret = required_secret(&id, Self::TYPE, secret)?;
        RedfishDriver::new(
            id.clone(),
            endpoint,
            username,
            *auth,
            &config.tls,
            Some(secret.into()),
        )
        .map_err(|e| e.into_build_error(&id))
    }
}

impl Driver for RedfishDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::Redfish
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        let call = "probe";
        let root = ctx
            .run(&self.id, call, self.get(ctx, &Auth::None, "/redfish/v1/"))
            .await?;
        let mut warnings: Vec<String> = self.http.warning.iter().cloned().collect();
        let (systems, fence) = self
            .authed(ctx, call, async |auth: &Auth| {
                let systems = self.list_systems(ctx, auth).await?;
                let fence = self.grade_fence(ctx, auth, &systems).await;
                Ok((systems, fence))
            })
            .await?;
        if self.auth == RedfishAuth::Session && self.no_sessions.load(Ordering::Relaxed) {
            warnings.push(
                "the service has no SessionService; basic authentication was used (set auth: basic)"
                    .into(),
            );
        }
        let s = |k: &str| root.get(k).and_then(Value::as_str).map(str::to_owned);
        let host = format!(
            "{}:{}",
            self.base.host_str().unwrap_or(""),
            self.base.port_or_known_default().unwrap_or(443)
        );
        let id = match s("UUID") {
            Some(u) => format!("redfish-service:{}", u.to_ascii_lowercase()),
            None => {
                warnings.push("the service root has no UUID; identity is its address".into());
                format!("redfish-endpoint:{host}")
            }
        };
        let mut facts = BTreeMap::new();
        for (k, f) in [
            ("vendor", "Vendor"),
            ("product", "Product"),
            ("redfish_version", "RedfishVersion"),
        ] {
            if let Some(v) = s(f) {
                facts.insert(k.to_owned(), v);
            }
        }
        facts.insert("endpoint".into(), host);
        facts.insert("systems".into(), list_names(&systems));
        let uuids: Vec<String> = systems
            .iter()
            .map(|s| s.uuid.to_ascii_lowercase())
            .collect();
        facts.insert("system_uuids".into(), uuids.join(","));
        let status = if systems.is_empty() {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Failed,
                reason: "the service lists no systems".into(),
            }
        } else if systems.iter().all(|s| !s.power.is_empty()) {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Proven,
                reason: format!(
                    "read PowerState of {} system(s) with these credentials",
                    systems.len()
                ),
            }
        } else {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Failed,
                reason: "a system shows no PowerState".into(),
            }
        };
        Ok(Probe {
            identity: Identity {
                id,
                facts,
                tls_fingerprint: self.http.seen.get(),
            },
            grades: vec![fence, status],
            warnings,
        })
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        let systems = self
            .authed(ctx, "discover", async |auth: &Auth| {
                self.list_systems(ctx, auth).await
            })
            .await?;
        let mut out = Vec::new();
        for cap in [POWER_OFF, POWER_STATUS] {
            for s in &systems {
                out.push(Discovered {
                    capability: cap.into(),
                    resource: s.id.clone(),
                    description: format!(
                        "system {} \"{}\", UUID {}, PowerState {}{}",
                        s.id,
                        s.name,
                        s.uuid,
                        s.power,
                        if cap == POWER_OFF && !s.allows("ForceOff") {
                            " (ForceOff not allowed)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        Ok(out)
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        let call = format!("{} check-binding", target.capability);
        if let Err(e) = self.check_capability(&call, target) {
            return Ok(vec![e.message]);
        }
        self.authed(ctx, &call, async |auth: &Auth| {
            match self.system(ctx, auth, &call, &target.resource).await {
                Ok(s) => {
                    let mut problems = Vec::new();
                    if target.capability == POWER_OFF {
                        if !s.allows("ForceOff") {
                            problems.push(format!(
                                "system {} does not allow ForceOff (it allows {})",
                                s.id,
                                s.allowed.clone().unwrap_or_default().join(", ")
                            ));
                        }
                        if s.reset_target.is_none() {
                            problems.push(format!("system {} has no Reset action", s.id));
                        }
                    }
                    Ok(problems)
                }
                Err(e) if e.kind == ErrorKind::Rejected => Ok(vec![e.message]),
                Err(e) => Err(e),
            }
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = format!("{} check", target.capability);
        self.check_capability(&call, target)?;
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.system(ctx, auth, &call, &target.resource).await
            })
            .await?;
        let holds = if target.capability == POWER_OFF {
            s.power == "Off"
        } else {
            s.power == "On"
        };
        Ok(self.reading(ctx, holds, s.describe()))
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = target.capability.clone();
        self.check_capability(&call, target)?;
        if target.capability != POWER_OFF {
            return Err(self.err(
                ErrorKind::Unsupported,
                &call,
                "power.status only reads; it has no action",
                false,
            ));
        }
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.reset_and_wait(ctx, auth, &call, &target.resource, &["ForceOff"], "Off")
                    .await
            })
            .await?;
        tracing::info!(controller = %self.id, resource = %target.resource, "Fence verified by read-back: {}", s.describe());
        Ok(self.reading(ctx, true, s.describe()))
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.on".to_owned();
        self.check_capability(&call, target)?;
        if target.capability != POWER_OFF {
            return Err(crate::driver::unsupported(self, "undo", target));
        }
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.reset_and_wait(ctx, auth, &call, &target.resource, &["On", "ForceOn"], "On")
                    .await
            })
            .await?;
        Ok(self.reading(ctx, false, s.describe()))
    }

    /// Deletes the driver's Redfish session, if it has one.
    async fn close(&self) {
        if let Some(s) = self.session.take() {
            self.logout(&s).await;
        }
    }
}
