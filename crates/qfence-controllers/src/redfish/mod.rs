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
use std::time::Duration;

use qfence_model::config::TlsTrust;
use qfence_model::config::{ControllerConfig, ControllerKind, RedfishAuth};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::SecretString;
use serde_json::Value;
use tokio::time::Instant;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, required_secret,
};
use crate::error::Error;
use crate::http::{self, HttpClient};
use crate::secrets::Secret;

mod client;
mod driver;
mod listing;
mod probe;
mod session;
use client::*;
use listing::*;

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
}
