//! Proxmox VE driver (`/api2/json`, API token or ticket).
//!
//! The model: the controller is a PVE cluster's API; any node answers for all and proxies to
//! the node that owns a guest. A guest is bound as `node/vmid`.
//!
//! - `vm.stop` fences: `POST .../status/stop` (stop, not shutdown: the plug is pulled), follow
//!   the UPID task until it ends, then read `status/current` until it says `stopped`. For an
//!   HA-managed VM the stop only queues an HA request (`hastop` ends when queued) and PVE HA
//!   sets the resource's requested state to `stopped`; the status read-back is what proves
//!   the fence, and the reading says it went through the HA stack. A VM on a node that does
//!   not answer cannot be proven stopped through the API: that is an error (UNKNOWN), for a
//!   node-level fence to settle.
//! - `vm.start` and `vm.status` are the same calls the other way round, and a read.
//! - `replication.lag` reads a storage replication job (`101-1`): age of the last successful
//!   sync and the fail count (limits `max_age_seconds`, default 1200, and `max_fail_count`,
//!   default 0). The status lives only on the guest's source node, so every good read is
//!   cached and, once that node stops answering (595-597, refused, or silent for half of the
//!   call's time), the reading is made from the cache: the age keeps growing with the clock
//!   (now - last_sync), so a cached sample stops holding once it is too old, and the detail
//!   says "cached, read at ...". No cache: the error stands (UNKNOWN, never ready). The
//!   cache lives in this driver instance, so it is warm only if this orchestrator read the
//!   job while the source answered.
//! - Identity is the cluster name from `/cluster/status`; the facts carry node online state
//!   and quorum.
//! - Privileges come from `GET /access/permissions` asked as the token (or user) itself:
//!   PVE's own computation, privilege separation included, hence proven.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qfence_model::config::{ControllerConfig, ControllerKind, ProxmoxAuth, TlsTrust};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target, required_secret, unsupported,
};
use crate::http::{self, HttpClient};

const STOP: &str = "vm.stop";
const START: &str = "vm.start";
const STATUS: &str = "vm.status";
const LAG: &str = "replication.lag";

/// Whether a check of `capability` is answered from a node's shared listing (VMs, jobs).
pub fn reads_in_bulk(capability: &str) -> bool {
    matches!(capability, STOP | START | STATUS | LAG)
}

const DEFAULT_MAX_AGE_SECONDS: u64 = 1200;
const DEFAULT_MAX_FAIL_COUNT: u64 = 0;
/// How often a task and the VM status are polled.
const POLL: Duration = Duration::from_millis(50);
/// How often a task still running after a second is polled.
const SLOW_POLL: Duration = Duration::from_millis(250);
/// Tickets live two hours; renew well before.
const TICKET_LIFETIME: Duration = Duration::from_secs(90 * 60);

/// The Proxmox VE driver. Holds the token secret or password; never prints it.
pub struct ProxmoxDriver(Arc<Inner>);

impl std::ops::Deref for ProxmoxDriver {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// The driver's state, shared with the listings it runs in tasks of their own (reached
/// through [`ProxmoxDriver`]; nothing in it is public).
pub struct Inner {
    /// Itself, for a listing's task (which must not end with the call that started it).
    me: std::sync::Weak<Inner>,
    id: ControllerId,
    base: url::Url,
    auth: ProxmoxAuth,
    secret: SecretString,
    trust: TlsTrust,
    client: OnceCell<HttpClient>,
    ticket: tokio::sync::Mutex<Option<Ticket>>,
    /// The last good sample of each replication job, for when its source node is gone.
    replication: Mutex<HashMap<String, ReplicationSample>>,
    /// Where each guest lives (guest id → node), from a `cluster/resources` listing. A
    /// replication check asks its guest's node for the job's status; reading the whole
    /// listing for each job made a round of checks quadratic in the number of guests (5,000
    /// jobs, 5,000 listings of 5,000 guests). One listing serves every job until it is
    /// [`GUEST_NODES_TTL`] old or a job's node no longer answers for it.
    guests: Arc<SharedListing<HashMap<String, String>>>,
    /// VM readings batched per node: see [`ProxmoxDriver::listed_vm`].
    vm_lists: Lists<HashMap<u64, ListedVm>>,
    /// Replication job statuses batched per node, the same way (job id → its row).
    job_lists: Lists<HashMap<String, ListedJob>>,
}

/// Per node, its shared listing.
type Lists<T> = Mutex<HashMap<String, Arc<SharedListing<T>>>>;

/// One node's listing of something, shared by the checks that wait for it: a VM or job check
/// uses only a listing *sent after it began*, so a shared answer is as fresh as one of its
/// own. At most one listing is in flight; checks that arrive meanwhile wait for it to end,
/// then share the next, which one of them starts. A listing runs in a task of its own and
/// ends even if the check that started it gives up (its deadline passed): otherwise, with
/// thousands of checks waiting, each next starter has less time left than the listing takes,
/// and no listing ever completes.
struct SharedListing<T> {
    gate: Arc<tokio::sync::Mutex<()>>,
    /// The last listing: when it was sent, and what it said.
    latest: Mutex<Option<(tokio::time::Instant, Listed<T>)>>,
    /// The last listing that succeeded (for where guests live, better than nothing).
    last_ok: Mutex<Option<Arc<T>>>,
}

/// What a listing said.
type Listed<T> = Result<Arc<T>, DriverError>;

impl<T> Default for SharedListing<T> {
    fn default() -> Self {
        Self {
            gate: Arc::new(tokio::sync::Mutex::new(())),
            latest: Mutex::new(None),
            last_ok: Mutex::new(None),
        }
    }
}

impl<T: Send + Sync + 'static> SharedListing<T> {
    /// The listing of `node` in `lists`.
    fn of(lists: &Lists<T>, node: &str) -> Arc<Self> {
        lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.to_owned())
            .or_default()
            .clone()
    }

    /// A listing sent at or after `since` (any listing if `None`): one that is (or was) in
    /// flight, or a new one made by `fetch` in a task of its own. With when it was sent.
    async fn read<F>(
        self: &Arc<Self>,
        owner: &ControllerId,
        since: Option<tokio::time::Instant>,
        fetch: F,
    ) -> (tokio::time::Instant, Listed<T>)
    where
        F: std::future::Future<Output = Result<T, DriverError>> + Send + 'static,
    {
        let usable = || {
            let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
            latest
                .as_ref()
                .filter(|(sent, _)| since.is_none_or(|since| *sent >= since))
                .map(|(sent, listed)| (*sent, listed.clone()))
        };
        if let Some(found) = usable() {
            return found;
        }
        let turn = self.gate.clone().lock_owned().await;
        if let Some(found) = usable() {
            return found;
        }
        let me = self.clone();
        let task = tokio::spawn(async move {
            // The turn goes with the task: no second listing starts while this one runs.
            let _turn = turn;
            let sent = tokio::time::Instant::now();
            let listed = fetch.await.map(Arc::new);
            if let Ok(ok) = &listed {
                *me.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = Some(ok.clone());
            }
            *me.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some((sent, listed.clone()));
            (sent, listed)
        });
        let started = tokio::time::Instant::now();
        task.await.unwrap_or_else(|e| {
            let failed = format!("the listing's task failed: {e}");
            (
                started,
                Err(DriverError::new(
                    ErrorKind::Protocol,
                    owner,
                    "listing",
                    failed,
                    false,
                )),
            )
        })
    }

    /// The last listing that succeeded, if any.
    fn last_ok(&self) -> Option<Arc<T>> {
        self.last_ok
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The fields of a `cluster/resources` row that say where a guest lives.
#[derive(Debug, serde::Deserialize)]
struct ListedGuest {
    #[serde(default)]
    vmid: Value,
    #[serde(default)]
    node: Option<String>,
}

/// The fields of a replication job's status (a listing's row, or the job's own `status`) that
/// a reading needs; loose, as PVE's are, so any object reads.
#[derive(Debug, Clone, serde::Deserialize)]
struct ListedJob {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    last_sync: Value,
    #[serde(default)]
    fail_count: Value,
    #[serde(default)]
    error: Value,
}

impl ListedJob {
    /// The sample this status makes, read from `source` at `read_at`; `None` without a
    /// `last_sync`, which every real PVE status carries.
    fn sample(&self, source: &str, read_at: u64) -> Option<ReplicationSample> {
        Some(ReplicationSample {
            last_sync: loose_u64(&self.last_sync)?,
            fail_count: loose_u64(&self.fail_count).unwrap_or(0),
            error: self
                .error
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            source: source.to_owned(),
            read_at,
        })
    }
}

/// How long a listing of where guests live is trusted (a migrated guest's job status is
/// asked of its old node at most this long; that call fails and the listing is read again).
const GUEST_NODES_TTL: Duration = Duration::from_secs(30);

struct Ticket {
    ticket: SecretString,
    csrf: SecretString,
    at: tokio::time::Instant,
}

impl std::fmt::Debug for ProxmoxDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxmoxDriver")
            .field("id", &self.id)
            .field("base", &self.base.as_str())
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Builds the driver. No I/O. The secret is the token's UUID (token auth) or the password
/// (ticket auth).
impl Build for ProxmoxDriver {
    const TYPE: ControllerType = ControllerType::Proxmox;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Proxmox { endpoint, auth } = &config.kind else {
            return Err(DriverError::wrong_type(
                &id,
                config,
                ControllerType::Proxmox,
            ));
        };
        let secret = required_secret(&id, Self::TYPE, secret)?;
        // Accept `https://host:8006` and `https://host:8006/api2/json`.
        let mut base = endpoint.clone();
        let path = base
            .path()
            .trim_end_matches('/')
            .trim_end_matches("/api2/json")
            .to_owned();
        base.set_path(&format!("{path}/api2/json/"));
        Ok(ProxmoxDriver(Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            id,
            base,
            auth: auth.clone(),
            secret,
            trust: config.tls.clone(),
            client: OnceCell::new(),
            ticket: tokio::sync::Mutex::new(None),
            replication: Mutex::new(HashMap::new()),
            guests: Arc::default(),
            vm_lists: Mutex::new(HashMap::new()),
            job_lists: Mutex::new(HashMap::new()),
        })))
    }
}

/// One cached replication sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationSample {
    /// Epoch seconds of the last successful sync (0: never).
    pub last_sync: u64,
    pub fail_count: u64,
    /// The last error text, if any.
    pub error: Option<String>,
    /// The node the status was read from.
    pub source: String,
    /// When it was read (epoch seconds).
    pub read_at: u64,
}

/// Parses a replication job status (`/nodes/{node}/replication/{id}/status`). `None` when
/// it lacks `last_sync`, which every real PVE status carries.
pub fn parse_replication_status(
    status: &Value,
    source: &str,
    read_at: u64,
) -> Option<ReplicationSample> {
    status.as_object()?;
    ListedJob::deserialize(status).ok()?.sample(source, read_at)
}

/// Judges a sample against the limits at `now` (epoch seconds): whether it holds, and why.
pub fn assess_replication(
    job: &str,
    s: &ReplicationSample,
    now: u64,
    max_age: u64,
    max_fail: u64,
    cached: bool,
) -> (bool, String) {
    let mut detail = if s.last_sync == 0 {
        format!("job {job}: never synced")
    } else {
        let age = now.saturating_sub(s.last_sync);
        format!("job {job}: last sync {age} s ago (limit {max_age})")
    };
    detail.push_str(&format!(", fail_count {} (limit {max_fail})", s.fail_count));
    if let Some(e) = &s.error {
        detail.push_str(&format!(", last error: {e}"));
    }
    if cached {
        detail.push_str(&format!(
            "; cached, read at {} ({} s ago) from node {}, which does not answer now",
            utc(s.read_at),
            now.saturating_sub(s.read_at),
            s.source,
        ));
    }
    let holds =
        s.last_sync > 0 && now.saturating_sub(s.last_sync) <= max_age && s.fail_count <= max_fail;
    (holds, detail)
}

/// Privileges held on `path`, from a `/access/permissions` answer: those on the path itself,
/// and those on its ancestors that propagate.
pub fn privileges_on(perms: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(map) = perms.as_object() else {
        return out;
    };
    for (p, privs) in map {
        let exact = p == path;
        let ancestor = p == "/" || path.starts_with(&format!("{p}/"));
        if !exact && !ancestor {
            continue;
        }
        for (name, propagate) in privs.as_object().into_iter().flatten() {
            if exact || loose_u64(propagate).unwrap_or(1) == 1 {
                out.push(name.clone());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Epoch seconds as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian), so a
/// cached reading says when it was taken without a date crate.
fn utc(epoch: u64) -> String {
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
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn loose_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A VM reading in words, as `status/current` or a listing row gives it.
fn vm_words(node: &str, vmid: u32, status: &str, qmp: &str, lock: Option<&str>) -> String {
    let mut words = format!("VM {vmid} on {node}: status={status}");
    if !qmp.is_empty() {
        words.push_str(&format!(" qmpstatus={qmp}"));
    }
    if let Some(lock) = lock {
        words.push_str(&format!(" lock={lock}"));
    }
    words
}

/// `node/vmid`.
fn parse_node_vmid(resource: &str) -> Option<(&str, u32)> {
    let (node, vmid) = resource.split_once('/')?;
    let vmid = vmid.parse().ok()?;
    (!node.is_empty()).then_some((node, vmid))
}

/// A PVE answer's error text: the body's `message` (newer PVE) and per-parameter `errors`.
fn pve_message(status: StatusCode, body: &Value) -> String {
    let mut msg = body
        .get("message")
        .and_then(Value::as_str)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
    if let Some(errs) = body.get("errors").and_then(Value::as_object) {
        for (k, v) in errs {
            msg.push_str(&format!(
                "; {k}: {}",
                v.as_str().unwrap_or(&v.to_string()).trim()
            ));
        }
    }
    format!("HTTP {}: {msg}", status.as_u16())
}

struct Answer {
    data: Value,
    fingerprint: Option<String>,
}

/// A successful answer's body, unparsed: the caller picks the shape of `data` to read.
struct RawAnswer {
    body: Vec<u8>,
    fingerprint: Option<String>,
}

/// PVE's envelope, `{"data": ...}`; every other field is skipped without being built.
#[derive(serde::Deserialize)]
struct Envelope<T> {
    #[serde(default)]
    data: T,
}

/// The fields of a VM listing's row that a reading needs (a row has twenty more, which
/// are not built at all: a listing of thousands of VMs is read many times a second).
#[derive(Debug, Clone, serde::Deserialize)]
struct ListedVm {
    #[serde(default)]
    vmid: Value,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    qmpstatus: Option<String>,
    #[serde(default)]
    lock: Option<String>,
}

impl Inner {
    /// Itself, shared (always there while `&self` is).
    fn shared(&self) -> Arc<Inner> {
        self.me.upgrade().expect("a driver outlives its calls")
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

    /// The shared HTTPS client (TLS trust, same-origin redirects, no proxy), built on first
    /// use because it reads the CA file.
    async fn client(&self) -> Result<&HttpClient, DriverError> {
        self.client
            .get_or_try_init(|| async {
                http::build_client(&self.id, &self.trust)
                    .map_err(|e| self.err(ErrorKind::Unreachable, "tls", e.to_string(), false))
            })
            .await
    }

    /// The `Authorization` header or the ticket cookie and CSRF token.
    async fn auth_headers(
        &self,
        write: bool,
        renew: bool,
    ) -> Result<Vec<(&'static str, String)>, DriverError> {
        match &self.auth {
            ProxmoxAuth::Token { token_id } => Ok(vec![(
                "authorization",
                format!("PVEAPIToken={token_id}={}", self.secret.expose_secret()),
            )]),
            ProxmoxAuth::Ticket { username } => {
                let mut t = self.ticket.lock().await;
                let stale = t.as_ref().is_none_or(|t| t.at.elapsed() > TICKET_LIFETIME);
                if renew || stale {
                    *t = Some(self.login(username).await?);
                }
                let t = t.as_ref().expect("ticket set above");
                let mut h = vec![(
                    "cookie",
                    format!("PVEAuthCookie={}", t.ticket.expose_secret()),
                )];
                if write {
                    h.push(("csrfpreventiontoken", t.csrf.expose_secret().to_owned()));
                }
                Ok(h)
            }
        }
    }

    async fn login(&self, username: &str) -> Result<Ticket, DriverError> {
        let call = "POST /access/ticket";
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("username", username)
            .append_pair("password", self.secret.expose_secret())
            .finish();
        let url = self.url("access/ticket", &[])?;
        let resp = self
            .client()
            .await?
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| http::map_error(&self.id, call, &e, false))?;
        let status = resp.status();
        let bytes = http::read_body(&self.id, call, resp, false).await?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status == StatusCode::UNAUTHORIZED {
            return Err(self.err(ErrorKind::Auth, call, "login refused (401)", false));
        }
        if !status.is_success() {
            return Err(self.err(ErrorKind::Rejected, call, pve_message(status, &body), false));
        }
        let field = |k: &str| {
            body.pointer(&format!("/data/{k}"))
                .and_then(Value::as_str)
                .map(|s| SecretString::from(s.to_owned()))
                .ok_or_else(|| {
                    self.err(
                        ErrorKind::Protocol,
                        call,
                        format!("answer has no {k}"),
                        false,
                    )
                })
        };
        Ok(Ticket {
            ticket: field("ticket")?,
            csrf: field("CSRFPreventionToken")?,
            at: tokio::time::Instant::now(),
        })
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> Result<url::Url, DriverError> {
        let mut url = self
            .base
            .join(path)
            .map_err(|e| self.err(ErrorKind::Protocol, path, e.to_string(), false))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// One API call; `data` of the envelope on success.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        form: &[(&str, &str)],
    ) -> Result<Answer, DriverError> {
        let raw = self.call_raw(method, path, query, form).await?;
        Ok(Answer {
            data: serde_json::from_slice::<Envelope<Value>>(&raw.body)
                .map(|e| e.data)
                .unwrap_or(Value::Null),
            fingerprint: raw.fingerprint,
        })
    }

    /// [`Self::call`] without reading the body of a successful answer.
    async fn call_raw(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        form: &[(&str, &str)],
    ) -> Result<RawAnswer, DriverError> {
        let mut renewed = false;
        let mut resent = false;
        loop {
            let call = format!("{method} /{path}");
            let write = method != Method::GET;
            let client = self.client().await?;
            let mut req = client
                .client
                .request(method.clone(), self.url(path, query)?);
            for (k, v) in self.auth_headers(write, renewed).await? {
                req = req.header(k, v);
            }
            if write {
                let body = url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(form)
                    .finish();
                req = req
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(body);
            }
            let resp = match req.send().await {
                Ok(resp) => resp,
                // A pooled keep-alive connection whose server went away (a node that lost
                // power) fails without an answer; a read is safe to send once more, on a
                // new connection, which then says what the server is: refused, silent, or
                // back.
                Err(e) if !write && !resent && !e.is_timeout() && !e.is_connect() => {
                    resent = true;
                    continue;
                }
                Err(e) => return Err(http::map_error(&self.id, &call, &e, write)),
            };
            let status = resp.status();
            let fingerprint = client.seen.get();
            let bytes = http::read_body(&self.id, &call, resp, write).await?;
            if status.is_success() {
                return Ok(RawAnswer {
                    body: bytes.to_vec(),
                    fingerprint,
                });
            }
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            // A ticket may have been revoked or expired early: log in once more.
            if status == StatusCode::UNAUTHORIZED
                && matches!(self.auth, ProxmoxAuth::Ticket { .. })
                && !renewed
            {
                renewed = true;
                continue;
            }
            let msg = pve_message(status, &body);
            let kind = match status.as_u16() {
                401 => ErrorKind::Auth,
                // PVE's proxy (AnyEvent::HTTP's pseudo-statuses): the node that owns the
                // resource does not answer (595 connect, 596 request/headers, 597 body).
                595..=597 | 502 | 503 | 504 => ErrorKind::Unreachable,
                501 => ErrorKind::Protocol,
                _ => ErrorKind::Rejected,
            };
            // A refused write (4xx) changed nothing; after a 5xx nobody can say.
            let unknown = write && status.is_server_error();
            return Err(self.err(kind, &call, msg, unknown));
        }
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, DriverError> {
        Ok(self.call(Method::GET, path, query, &[]).await?.data)
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

    fn vm(&self, target: &Target) -> Result<(String, u32), DriverError> {
        parse_node_vmid(&target.resource)
            .map(|(n, v)| (n.to_owned(), v))
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Rejected,
                    &target.capability,
                    format!("{:?} is not node/vmid", target.resource),
                    false,
                )
            })
    }

    /// `status/current` of the VM on its node: (status, qmpstatus, HA-managed, words).
    async fn vm_status(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<(String, String, bool, String), DriverError> {
        let d = self
            .get(&format!("nodes/{node}/qemu/{vmid}/status/current"), &[])
            .await?;
        let status = d
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        let qmp = d
            .get("qmpstatus")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ha = d.pointer("/ha/managed").and_then(loose_u64).unwrap_or(0) == 1;
        let lock = d.get("lock").and_then(Value::as_str);
        let mut words = vm_words(node, vmid, &status, &qmp, lock);
        if ha {
            let st = d
                .pointer("/ha/state")
                .and_then(Value::as_str)
                .unwrap_or("?");
            words.push_str(&format!(" (HA-managed, ha state {st})"));
        }
        Ok((status, qmp, ha, words))
    }

    /// Follows a task to its end: `Ok(None)` for OK or warnings, `Ok(Some(exitstatus))` for an
    /// error the task reported.
    async fn follow(&self, upid: &str) -> Result<Option<String>, DriverError> {
        let node = upid
            .split(':')
            .nth(1)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Protocol,
                    "task",
                    format!("not a UPID: {upid}"),
                    true,
                )
            })?;
        let path = format!("nodes/{node}/tasks/{}/status", encode(upid));
        // Quick polls catch a quick task (a stop, a start) early; a long one is asked less
        // often, so many tasks followed at once do not flood the API.
        let started = tokio::time::Instant::now();
        loop {
            let d = self.get(&path, &[]).await.map_err(|mut e| {
                // The action was sent: whatever happens now, its effect is unknown.
                e.state_unknown = true;
                e
            })?;
            if d.get("status").and_then(Value::as_str) == Some("stopped") {
                let exit = d
                    .get("exitstatus")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                return Ok((exit != "OK" && !exit.starts_with("WARNINGS")).then_some(exit));
            }
            let pause = if started.elapsed() < Duration::from_secs(1) {
                POLL
            } else {
                SLOW_POLL
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Stops (`want = "stopped"`) or starts (`"running"`) a VM and reads it back until it is so.
    async fn power(
        &self,
        ctx: &CallContext,
        target: &Target,
        want: &str,
    ) -> Result<Reading, DriverError> {
        let (node, vmid) = self.vm(target)?;
        let (status, _, ha, words) = self.vm_status(&node, vmid).await?;
        if status == want {
            return Ok(self.reading(ctx, true, words));
        }
        let action = if want == "stopped" { "stop" } else { "start" };
        // overrule-shutdown aborts a pending shutdown task; PVE rejects it for HA resources.
        let form: &[(&str, &str)] = if action == "stop" && !ha {
            &[("overrule-shutdown", "1")]
        } else {
            &[]
        };
        let upid = self
            .call(
                Method::POST,
                &format!("nodes/{node}/qemu/{vmid}/status/{action}"),
                &[],
                form,
            )
            .await?
            .data;
        let upid = upid.as_str().ok_or_else(|| {
            self.err(
                ErrorKind::Protocol,
                action,
                format!("answer is not a UPID: {upid}"),
                true,
            )
        })?;
        let task_error = self.follow(upid).await?;
        // The task's end is not the proof (an HA request ends when queued): read the VM.
        loop {
            let (status, _, ha, words) = self.vm_status(&node, vmid).await.map_err(|mut e| {
                e.state_unknown = true;
                e
            })?;
            if status == want {
                let via = if ha {
                    "; through the HA stack (requested state now stopped or started)"
                } else {
                    ""
                };
                return Ok(self.reading(ctx, true, format!("{words}{via}")));
            }
            if let Some(exit) = &task_error {
                return Ok(self.reading(
                    ctx,
                    false,
                    format!("{words}; the {action} task failed: {exit}"),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The row of VM `vmid` in a listing of `node` (`GET /nodes/{node}/qemu?full=1`, which PVE
    /// answers from the live VM state, as it does `status/current`) that was sent after this
    /// call began: a reading as fresh as asking the VM alone. Checks of many VMs on one node
    /// share listings: while one is in flight, the checks that arrive wait for it to end and
    /// then for the next, which one of them sends. So 5,000 plans' VM checks cost a few
    /// listings per round, not 5,000 requests. `None`: the VM is not in the listing.
    async fn listed_vm(&self, node: &str, vmid: u32) -> Result<Option<ListedVm>, DriverError> {
        let arrived = tokio::time::Instant::now();
        let listing = SharedListing::of(&self.vm_lists, node);
        let (inner, path) = (self.shared(), format!("nodes/{node}/qemu"));
        let fetch = async move {
            let rows: Vec<ListedVm> = inner.list(&path, &[("full", "1")]).await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| Some((loose_u64(&r.vmid)?, r)))
                .collect())
        };
        let (_, listed) = listing.read(&self.id, Some(arrived), fetch).await;
        Ok(listed?.get(&u64::from(vmid)).cloned())
    }

    /// The status of replication job `job` from a listing of `node`'s jobs
    /// (`GET /nodes/{node}/replication`, the same fields as the job's own `status`) sent
    /// after this call began, shared as [`Self::listed_vm`] shares VM listings. `None`: the
    /// node has no such job (its guest lives elsewhere, or the job does not exist).
    async fn listed_job(&self, node: &str, job: &str) -> Result<Option<ListedJob>, DriverError> {
        let arrived = tokio::time::Instant::now();
        let listing = SharedListing::of(&self.job_lists, node);
        let (inner, path) = (self.shared(), format!("nodes/{node}/replication"));
        let fetch = async move {
            let rows: Vec<ListedJob> = inner.list(&path, &[]).await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| Some((r.id.as_str()?.to_owned(), r)))
                .collect())
        };
        let (_, listed) = listing.read(&self.id, Some(arrived), fetch).await;
        Ok(listed?.get(job).cloned())
    }

    /// A GET whose `data` is a list of `T`, parsed straight from the body.
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Vec<T>, DriverError> {
        let raw = self.call_raw(Method::GET, path, query, &[]).await?;
        serde_json::from_slice::<Envelope<Vec<T>>>(&raw.body)
            .map(|e| e.data)
            .map_err(|e| {
                self.err(
                    ErrorKind::Protocol,
                    &format!("GET /{path}"),
                    format!("not a list: {e}"),
                    false,
                )
            })
    }

    async fn read_vm(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let (node, vmid) = self.vm(target)?;
        let listed = self.listed_vm(&node, vmid).await?.and_then(|row| {
            let status = row.status?;
            let qmp = row.qmpstatus;
            // Whether a running VM is paused needs qmpstatus; without it, ask the VM.
            if target.capability == STATUS && status == "running" && qmp.is_none() {
                return None;
            }
            let qmp = qmp.unwrap_or_default();
            let words = vm_words(&node, vmid, &status, &qmp, row.lock.as_deref());
            Some((status, qmp, words))
        });
        // Not listed (missing, or not visible to this token): `status/current` says which.
        let (status, qmp, words) = match listed {
            Some(found) => found,
            None => {
                let (status, qmp, _, words) = self.vm_status(&node, vmid).await?;
                (status, qmp, words)
            }
        };
        let holds = match target.capability.as_str() {
            STOP => status == "stopped",
            START => status == "running",
            // A paused VM runs no service.
            _ => status == "running" && (qmp.is_empty() || qmp == "running"),
        };
        Ok(self.reading(ctx, holds, words))
    }

    /// The node the guest of a job lives on, from the cluster resources, and whether it came
    /// from an earlier listing: from a listing younger than [`GUEST_NODES_TTL`] that names the
    /// guest (unless `relist`), else from a new one. A listing that fails falls back on the
    /// last good one's answer, if it had one (the job's status call then says whether that
    /// node still answers for it).
    async fn guest_node(
        &self,
        vmid: &str,
        relist: bool,
    ) -> Result<Option<(String, bool)>, DriverError> {
        let now = tokio::time::Instant::now();
        let fetch = || {
            let inner = self.shared();
            async move {
                let rows: Vec<ListedGuest> =
                    inner.list("cluster/resources", &[("type", "vm")]).await?;
                Ok(rows
                    .into_iter()
                    .filter_map(|r| Some((loose_u64(&r.vmid)?.to_string(), r.node?)))
                    .collect::<HashMap<String, String>>())
            }
        };
        // `None` (any listing) while the process is younger than the TTL.
        let young = if relist {
            Some(now)
        } else {
            now.checked_sub(GUEST_NODES_TTL)
        };
        let (mut sent, mut listed) = self.guests.read(&self.id, young, fetch()).await;
        // A young listing without the guest: the guest may be new; list again once.
        if !relist
            && sent < now
            && let Ok(map) = &listed
            && !map.contains_key(vmid)
        {
            (sent, listed) = self.guests.read(&self.id, Some(now), fetch()).await;
        }
        match listed {
            Ok(map) => Ok(map.get(vmid).map(|n| (n.clone(), sent < now))),
            Err(e) => match self.guests.last_ok().and_then(|m| m.get(vmid).cloned()) {
                Some(node) => Ok(Some((node, true))),
                None => Err(e),
            },
        }
    }

    async fn read_replication(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let job = target.resource.as_str();
        let limit = |k: &str, d: u64| -> Result<u64, DriverError> {
            target.param(ControllerType::Proxmox, k).map_or(Ok(d), |v| {
                v.parse().map_err(|_| {
                    self.err(
                        ErrorKind::Rejected,
                        LAG,
                        format!("params.{k}: {v:?} is not a whole number"),
                        false,
                    )
                })
            })
        };
        let max_age = limit("max_age_seconds", DEFAULT_MAX_AGE_SECONDS)?;
        let max_fail = limit("max_fail_count", DEFAULT_MAX_FAIL_COUNT)?;
        let Some((vmid, _)) = job.split_once('-') else {
            return Err(self.err(
                ErrorKind::Rejected,
                LAG,
                format!("{job:?} is not a replication job id"),
                false,
            ));
        };
        let cached = self
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(job)
            .cloned();
        let fresh = async {
            let mut relist = false;
            loop {
                let node = match self.guest_node(vmid, relist).await? {
                    Some((n, remembered)) => {
                        // A refusal by a remembered node may only mean the guest moved.
                        relist = !relist && remembered;
                        n
                    }
                    None => {
                        return Err(self.err(
                            ErrorKind::Rejected,
                            LAG,
                            format!(
                                "guest {vmid} of job {job} is not visible (missing, or no VM.Audit)"
                            ),
                            false,
                        ));
                    }
                };
                // Not in the node's listing: the job's own status says why (and a refusal by
                // a remembered node may only mean the guest moved: list guests again).
                // The status, or (what was read instead) in words for the error.
                let sample = match self.listed_job(&node, job).await? {
                    Some(row) => row
                        .sample(&node, now_epoch())
                        .ok_or_else(|| format!("{row:?}")),
                    None => match self
                        .get(&format!("nodes/{node}/replication/{job}/status"), &[])
                        .await
                    {
                        Ok(d) => parse_replication_status(&d, &node, now_epoch())
                            .ok_or_else(|| d.to_string()),
                        Err(e) if e.kind == ErrorKind::Rejected && relist => continue,
                        Err(e) => return Err(e),
                    },
                };
                return sample.map_err(|shown| {
                    self.err(
                        ErrorKind::Protocol,
                        LAG,
                        format!("the status of job {job} on {node} has no last_sync: {shown}"),
                        false,
                    )
                });
            }
        };
        // With a cached sample in hand, a source that does not answer within half of the
        // remaining time is treated as gone: a powered-off host drops packets rather than
        // refusing, and waiting for the call's own deadline would leave no time for the
        // cache. Without one there is nothing better to wait for.
        let fresh = match &cached {
            Some(_) => {
                let now = tokio::time::Instant::now();
                let until = now + ctx.deadline.saturating_duration_since(now) / 2;
                tokio::time::timeout_at(until, fresh)
                    .await
                    .unwrap_or_else(|_| {
                        Err(self.err(
                            ErrorKind::Timeout,
                            LAG,
                            format!("the status of job {job} did not come in time"),
                            false,
                        ))
                    })
            }
            None => fresh.await,
        };
        let (sample, from_cache) = match fresh {
            Ok(s) => {
                self.replication
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(job.to_owned(), s.clone());
                (s, false)
            }
            // The source node is gone: its status cannot be read any more.
            Err(e) if matches!(e.kind, ErrorKind::Unreachable | ErrorKind::Timeout) => match cached
            {
                Some(s) => (s, true),
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let (holds, detail) =
            assess_replication(job, &sample, now_epoch(), max_age, max_fail, from_cache);
        Ok(self.reading(ctx, holds, detail))
    }

    async fn cluster(
        &self,
    ) -> Result<(Option<String>, bool, Vec<(String, bool)>, Option<String>), DriverError> {
        let a = self.call(Method::GET, "cluster/status", &[], &[]).await?;
        let mut name = None;
        let mut quorate = true;
        let mut nodes = Vec::new();
        for e in a.data.as_array().into_iter().flatten() {
            match e.get("type").and_then(Value::as_str) {
                Some("cluster") => {
                    name = e.get("name").and_then(Value::as_str).map(str::to_owned);
                    quorate = e.get("quorate").and_then(loose_u64) == Some(1);
                }
                Some("node") => {
                    let n = e
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned();
                    nodes.push((n, e.get("online").and_then(loose_u64) == Some(1)));
                }
                _ => {}
            }
        }
        Ok((name, quorate, nodes, a.fingerprint))
    }

    /// Who the credential is, for `/access/permissions?userid=`.
    fn auth_id(&self) -> String {
        match &self.auth {
            ProxmoxAuth::Token { token_id } => token_id.clone(),
            ProxmoxAuth::Ticket { username } => username.clone(),
        }
    }

    async fn grades(&self) -> Result<(Vec<CapabilityGrade>, Vec<String>), DriverError> {
        let mut warnings = Vec::new();
        // Asked as the credential itself: PVE's own answer, privsep intersection included.
        let own = match self.get("access/permissions", &[]).await {
            Ok(v) => v,
            Err(e) if e.kind == ErrorKind::Rejected => {
                let g = |c: &str| CapabilityGrade {
                    capability: c.to_owned(),
                    grade: Grade::Unverifiable,
                    reason: format!("the permission dump failed: {}", e.message),
                };
                return Ok((
                    [STOP, START, STATUS, LAG].into_iter().map(g).collect(),
                    warnings,
                ));
            }
            Err(e) => return Err(e),
        };
        // For a token: what its user holds, to point at privilege separation.
        let user = match &self.auth {
            ProxmoxAuth::Token { token_id } => {
                let user = token_id.split('!').next().unwrap_or(token_id);
                self.get("access/permissions", &[("userid", user)])
                    .await
                    .ok()
            }
            ProxmoxAuth::Ticket { .. } => None,
        };
        let mut grades = Vec::new();
        for (cap, privilege) in [
            (STOP, "VM.PowerMgmt"),
            (START, "VM.PowerMgmt"),
            (STATUS, "VM.Audit"),
            (LAG, "VM.Audit"),
        ] {
            let everywhere = privileges_on(&own, "/vms").iter().any(|p| p == privilege);
            let some: Vec<String> = own
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(p, privs)| p.starts_with("/vms/") && privs.get(privilege).is_some())
                .map(|(p, _)| p.trim_start_matches("/vms/").to_owned())
                .collect();
            let who = self.auth_id();
            let g = if everywhere {
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Proven,
                    reason: format!(
                        "/access/permissions as {who}: {privilege} on /vms, propagated"
                    ),
                }
            } else if !some.is_empty() {
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Inferred,
                    reason: format!(
                        "/access/permissions as {who}: {privilege} only on VMs {}; other VMs lack it",
                        some.join(", ")
                    ),
                }
            } else {
                let user_has = user
                    .as_ref()
                    .is_some_and(|u| privileges_on(u, "/vms").iter().any(|p| p == privilege));
                let why = if user_has {
                    " (its user has it: the token has privilege separation and needs its own ACL)"
                } else {
                    ""
                };
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Failed,
                    reason: format!("/access/permissions as {who}: no {privilege} on any VM{why}"),
                }
            };
            grades.push(g);
        }
        if !privileges_on(&own, "/").iter().any(|p| p == "Sys.Audit") {
            warnings.push("no Sys.Audit on /: cluster status and quorum cannot be read".to_owned());
        }
        if matches!(self.auth, ProxmoxAuth::Token { .. }) {
            warnings.push(
                "API tokens cannot use skiplock: a VM with a config lock may refuse vm.stop"
                    .to_owned(),
            );
        }
        Ok((grades, warnings))
    }
}

/// Percent-encodes a path segment (UPIDs hold colons and `@`, `!`).
fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

impl Driver for ProxmoxDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::Proxmox
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", async {
            let version = self.get("version", &[]).await?;
            let (name, quorate, nodes, fingerprint) = self.cluster().await?;
            let mut facts = BTreeMap::new();
            if let Some(v) = version.get("version").and_then(Value::as_str) {
                facts.insert("version".to_owned(), v.to_owned());
            }
            facts.insert("quorate".to_owned(), quorate.to_string());
            for (n, online) in &nodes {
                facts.insert(
                    format!("node.{n}"),
                    if *online { "online" } else { "offline" }.to_owned(),
                );
            }
            let (grades, mut warnings) = self.grades().await?;
            if !quorate {
                warnings.push(
                    "the answering node has no quorum: PVE refuses VM actions there".to_owned(),
                );
            }
            for (n, online) in &nodes {
                if !online {
                    warnings.push(format!("node {n} is offline"));
                }
            }
            let id = match name {
                Some(n) => n,
                None => {
                    let local = nodes.first().map_or("?", |(n, _)| n.as_str());
                    warnings
                        .push("not a cluster: identity is the standalone node's name".to_owned());
                    format!("standalone:{local}")
                }
            };
            if let Some(w) = &self.client().await?.warning {
                warnings.push(w.clone());
            }
            Ok(Probe {
                identity: Identity {
                    id,
                    facts,
                    tls_fingerprint: fingerprint,
                },
                grades,
                warnings,
            })
        })
        .await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            let mut out = Vec::new();
            let vms = self.get("cluster/resources", &[("type", "vm")]).await?;
            for v in vms.as_array().into_iter().flatten() {
                if v.get("type").and_then(Value::as_str) != Some("qemu")
                    || v.get("template").and_then(loose_u64) == Some(1)
                {
                    continue;
                }
                let (Some(node), Some(vmid)) = (
                    v.get("node").and_then(Value::as_str),
                    v.get("vmid").and_then(loose_u64),
                ) else {
                    continue;
                };
                let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
                let status = v.get("status").and_then(Value::as_str).unwrap_or("unknown");
                let ha = v
                    .get("hastate")
                    .and_then(Value::as_str)
                    .map(|h| format!(", HA {h}"))
                    .unwrap_or_default();
                let description = format!("VM {vmid} {name:?} on {node}, {status}{ha}");
                for cap in [STOP, START, STATUS] {
                    out.push(Discovered {
                        capability: cap.to_owned(),
                        resource: format!("{node}/{vmid}"),
                        description: description.clone(),
                    });
                }
            }
            let jobs = self.get("cluster/replication", &[]).await?;
            for j in jobs.as_array().into_iter().flatten() {
                let Some(id) = j.get("id").and_then(Value::as_str) else {
                    continue;
                };
                let target = j.get("target").and_then(Value::as_str).unwrap_or("?");
                let schedule = j.get("schedule").and_then(Value::as_str).unwrap_or("*/15");
                out.push(Discovered {
                    capability: LAG.to_owned(),
                    resource: id.to_owned(),
                    description: format!("replication job {id} to {target}, schedule {schedule}"),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        ctx.run(&self.id, "check_binding", async {
            let mut problems = Vec::new();
            let (_, quorate, nodes, _) = self.cluster().await?;
            if !quorate {
                problems.push("the answering node has no quorum".to_owned());
            }
            match target.capability.as_str() {
                STOP | START | STATUS => {
                    let Some((node, vmid)) = parse_node_vmid(&target.resource) else {
                        problems.push(format!("{:?} is not node/vmid", target.resource));
                        return Ok(problems);
                    };
                    match nodes.iter().find(|(n, _)| n == node) {
                        None => problems.push(format!("node {node} is not in the cluster")),
                        Some((_, false)) => problems.push(format!("node {node} is offline")),
                        Some(_) => {}
                    }
                    // A binding check wants where the guest is now, not where it was.
                    match self.guest_node(&vmid.to_string(), true).await?.map(|(n, _)| n) {
                        None => problems.push(format!(
                            "VM {vmid} is not visible (it does not exist, or the credential lacks VM.Audit on it)"
                        )),
                        Some(n) if n != node => problems.push(format!("VM {vmid} is on node {n}, not {node}")),
                        Some(_) => {}
                    }
                    // The credential's own privileges on this VM, as PVE computes them.
                    let need = if target.capability == STATUS { "VM.Audit" } else { "VM.PowerMgmt" };
                    let path = format!("/vms/{vmid}");
                    match self.get("access/permissions", &[("path", &path)]).await {
                        Ok(perms) if !privileges_on(&perms, &path).iter().any(|p| p == need) => {
                            problems.push(format!("{} lacks {need} on {path}", self.auth_id()));
                        }
                        Ok(_) => {}
                        Err(e) if e.kind == ErrorKind::Rejected => {
                            problems.push(format!("cannot read own permissions on {path}: {}", e.message));
                        }
                        Err(e) => return Err(e),
                    }
                }
                LAG => {
                    let jobs = self.get("cluster/replication", &[]).await?;
                    let known = jobs
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|j| j.get("id").and_then(Value::as_str) == Some(&target.resource));
                    if !known {
                        problems.push(format!("replication job {} does not exist (or is not visible)", target.resource));
                    }
                    for k in ["max_age_seconds", "max_fail_count"] {
                        if let Some(v) = target.param(ControllerType::Proxmox, k)
                            && v.parse::<u64>().is_err()
                        {
                            problems.push(format!("params.{k}: {v:?} is not a whole number"));
                        }
                    }
                }
                _ => return Err(unsupported(self, "the capability", target)),
            }
            Ok(problems)
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", async {
            match target.capability.as_str() {
                STOP | START | STATUS => self.read_vm(ctx, target).await,
                LAG => self.read_replication(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                STOP => self.power(ctx, target, "stopped").await,
                START => self.power(ctx, target, "running").await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "undo", async {
            match target.capability.as_str() {
                // The reading is of the fence's condition, which no longer holds once the
                // start is proven (contract §3.7).
                STOP => self
                    .power(ctx, target, "running")
                    .await
                    .map(crate::driver::Reading::negated),
                _ => Err(unsupported(self, "undo", target)),
            }
        })
        .await
    }

    /// All at once, so that the checks of one node share its listing in flight (one request
    /// for them all) rather than each waiting for a listing sent after it began.
    async fn check_many(
        &self,
        ctx: &CallContext,
        targets: &[Target],
    ) -> Vec<Result<Reading, DriverError>> {
        futures_util::future::join_all(targets.iter().map(|t| self.check(ctx, t))).await
    }

    fn reads_in_bulk(&self, capability: &str) -> bool {
        reads_in_bulk(capability)
    }

    /// Forgets the login ticket (Proxmox VE has no call that revokes one; it expires two
    /// hours after it was made). An API token is not a session: nothing to end.
    async fn close(&self) {
        self.ticket.lock().await.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replication_status_is_read_as_pve_writes_it() {
        // Field names and types as PVE's /nodes/{node}/replication/{id}/status returns them.
        let st = json!({"id": "101-1", "guest": 101, "target": "pve3", "type": "local",
                        "jobnum": 1, "last_sync": 1_700_000_000, "last_try": 1_700_000_000,
                        "duration": 2.5, "fail_count": 0, "next_sync": 1_700_000_900,
                        "schedule": "*/15", "vmtype": "qemu"});
        let s = parse_replication_status(&st, "pve2", 1_700_000_100).unwrap();
        assert_eq!(
            (s.last_sync, s.fail_count, s.error.as_deref()),
            (1_700_000_000, 0, None)
        );
        let (holds, detail) = assess_replication("101-1", &s, 1_700_000_100, 1200, 0, false);
        assert!(holds, "{detail}");
        assert!(detail.contains("last sync 100 s ago"), "{detail}");

        // Too old, failing, never synced: each alone refuses.
        let (holds, _) = assess_replication("101-1", &s, 1_700_002_000, 1200, 0, false);
        assert!(!holds);
        let failing =
            json!({"last_sync": "1700000000", "fail_count": "3", "error": "no space left"});
        let f = parse_replication_status(&failing, "pve2", 0).unwrap();
        let (holds, detail) = assess_replication("101-1", &f, 1_700_000_010, 1200, 0, false);
        assert!(!holds && detail.contains("no space left"), "{detail}");
        let never = parse_replication_status(&json!({"last_sync": 0}), "pve2", 0).unwrap();
        assert!(!assess_replication("101-1", &never, 10, 1200, 5, false).0);

        // fakepve's static answer has no last_sync: not a sample.
        assert!(parse_replication_status(&json!({}), "pve2", 0).is_none());
    }

    #[test]
    fn a_cached_sample_keeps_ageing_and_says_where_it_came_from() {
        let s = ReplicationSample {
            last_sync: 1000,
            fail_count: 0,
            error: None,
            source: "pve2".to_owned(),
            read_at: 1100,
        };
        let (holds, detail) = assess_replication("101-1", &s, 1300, 600, 0, true);
        assert!(holds);
        assert!(
            detail.contains("cached, read at 1970-01-01T00:18:20Z (200 s ago) from node pve2"),
            "{detail}"
        );
        assert!(
            !assess_replication("101-1", &s, 1700, 600, 0, true).0,
            "the window grows with time"
        );
    }

    #[test]
    fn cache_times_are_written_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_042_096), "2026-11-30T12:34:56Z");
    }

    #[test]
    fn privileges_follow_paths_and_propagation() {
        // Real PVE, asked with path=/vms/101 by a privsep token holding only its own ACL.
        let token = json!({"/vms/101": {"VM.PowerMgmt": 1, "VM.Audit": 1}});
        assert_eq!(
            privileges_on(&token, "/vms/101"),
            ["VM.Audit", "VM.PowerMgmt"]
        );
        assert!(privileges_on(&token, "/vms").is_empty());
        // A role on /vms without propagation covers /vms only.
        let np = json!({"/vms": {"VM.PowerMgmt": 0}});
        assert_eq!(privileges_on(&np, "/vms"), ["VM.PowerMgmt"]);
        assert!(privileges_on(&np, "/vms/101").is_empty());
        // root@pam (and fakepve): everything on /, propagated.
        let root = json!({"/": {"VM.PowerMgmt": 1, "Sys.Audit": 1}});
        assert!(privileges_on(&root, "/vms/101").contains(&"VM.PowerMgmt".to_owned()));
        assert!(privileges_on(&json!({"/vmsx": {"VM.Audit": 1}}), "/vms/1").is_empty());
    }

    #[test]
    fn resources_and_errors_parse() {
        assert_eq!(parse_node_vmid("pve1/101"), Some(("pve1", 101)));
        assert_eq!(parse_node_vmid("/101"), None);
        assert_eq!(parse_node_vmid("pve1"), None);
        let m = pve_message(
            StatusCode::from_u16(595).unwrap(),
            &json!({"data": null, "message": "No route to host\n"}),
        );
        assert_eq!(m, "HTTP 595: No route to host");
        let m = pve_message(
            StatusCode::BAD_REQUEST,
            &json!({"errors": {"vmid": "value must be >= 100"}}),
        );
        assert!(m.contains("vmid: value must be >= 100"), "{m}");
    }
}
