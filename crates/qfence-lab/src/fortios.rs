//! A FortiOS REST API simulator (FortiGate), following Fortinet's public REST API documents.
//!
//! What it models, and why: no independent FortiOS emulator exists, so this one follows the
//! documented behaviour a fencing driver depends on, not qfence's driver:
//!
//! - Authentication by `Authorization: Bearer <api-key>` only. The `access_token` query form
//!   answers 401, as on FortiOS 7.4.5 and later where it is disabled by default.
//! - Every answer is the JSON envelope (`http_method`, `status`, `http_status`, `vdom`, `path`,
//!   `name`, `serial`, `version`, `build`, and `results` for reads). Writes add `mkey`,
//!   `revision`, `old_revision` and `revision_changed`; failures add `error` (a negative code)
//!   and `cli_error`.
//! - The `vdom` query parameter selects the VDOM (default `root`). An unknown VDOM is 404; a
//!   VDOM the API user may not use is 403.
//! - Access profiles: `fwgrp` governs firewall objects (policies and VIPs), `sysgrp` the
//!   system objects (`system/api-user`, `system/accprofile`, `system/settings`). Too little
//!   access is 403.
//! - `PUT` on one object changes only the fields sent and is committed when it returns.
//!   A bad value is 424 (failed dependency); an unknown object 404.
//!
//! Endpoints: `monitor/system/status`, `monitor/system/ha-checksums`, `cmdb/firewall/policy[/{id}]`,
//! `cmdb/firewall/vip[/{name}]`, `cmdb/system/settings`, `cmdb/system/api-user[/{name}]`,
//! `cmdb/system/accprofile[/{name}]`.
//!
//! HA: `monitor/system/ha-checksums` lists this unit and `ha_peers`; a peer shows the previous
//! configuration's checksum until `ha_sync_delay_ms` after a change.
//!
//! Faults ([`FortiSim`]): latency on every request, the next N writes failing with a chosen
//! status, writes that answer success but change nothing (a lying device that only a
//! read-back catches), and shutdown (unreachable).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::{LabError, LabTls};

/// How much of a permission group an access profile grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    None,
    Read,
    ReadWrite,
}

impl Access {
    fn as_str(self) -> &'static str {
        match self {
            Access::None => "none",
            Access::Read => "read",
            Access::ReadWrite => "read-write",
        }
    }
}

/// An access profile (`system/accprofile`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccProfile {
    /// Firewall objects: policies, addresses, VIPs.
    pub fwgrp: Access,
    /// System configuration, including API users and access profiles.
    pub sysgrp: Access,
}

/// A REST API administrator (`system/api-user`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiUser {
    /// The api-user's name.
    pub name: String,
    /// Its access profile, by name.
    pub accprofile: String,
    /// The VDOMs it may use.
    pub vdoms: Vec<String>,
}

/// A firewall policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub name: String,
    /// `true` for `status: enable`.
    pub enabled: bool,
    /// `accept` or `deny`.
    pub action: String,
    /// The per-policy `firewall-session-dirty` (`check-all` or `check-new`).
    pub session_dirty: String,
}

/// A virtual IP (`firewall/vip`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vip {
    /// The external address.
    pub extip: String,
    /// The mapped (internal) addresses or ranges.
    pub mappedip: Vec<String>,
    pub extintf: String,
    /// `true` for `status: enable`.
    pub enabled: bool,
}

/// One VDOM's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vdom {
    pub policies: BTreeMap<u32, Policy>,
    pub vips: BTreeMap<String, Vip>,
    /// `system settings / firewall-session-dirty`: `check-all`, `check-new` or
    /// `check-policy-option`.
    pub session_dirty: String,
}

impl Default for Vdom {
    fn default() -> Self {
        Self {
            policies: BTreeMap::new(),
            vips: BTreeMap::new(),
            session_dirty: "check-all".to_owned(),
        }
    }
}

/// The simulated FortiGate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FortiState {
    pub hostname: String,
    pub serial: String,
    pub model_name: String,
    /// `v7.4.5`.
    pub version: String,
    pub build: u32,
    pub vdoms: BTreeMap<String, Vdom>,
    pub profiles: BTreeMap<String, AccProfile>,
    /// API users by their key.
    pub keys: BTreeMap<String, ApiUser>,
    /// The configuration revision, bumped by every write that changes something.
    pub revision: u64,
    /// FGCP cluster members besides this unit (their serials); empty when standalone.
    pub ha_peers: Vec<String>,
    /// How long a peer takes to receive a configuration change (milliseconds).
    pub ha_sync_delay_ms: u64,
}

impl FortiState {
    /// A small device: VDOM `root` with policies 1 (`dc1-to-db`) and 2 (`dc2-to-db`), both
    /// enabled, and VIP `erp-vip` mapped to 10.1.1.5; profiles `super_admin` (all read-write),
    /// `fw_only` (firewall read-write, system none) and `fw_read` (firewall read); one key per
    /// profile: `admin-key`, `fw-key`, `ro-key`.
    pub fn example() -> Self {
        let mut root = Vdom::default();
        for (id, name) in [(1, "dc1-to-db"), (2, "dc2-to-db")] {
            root.policies.insert(
                id,
                Policy {
                    name: name.to_owned(),
                    enabled: true,
                    action: "accept".to_owned(),
                    session_dirty: "check-all".to_owned(),
                },
            );
        }
        root.vips.insert(
            "erp-vip".to_owned(),
            Vip {
                extip: "192.0.2.10".to_owned(),
                mappedip: vec!["10.1.1.5".to_owned()],
                extintf: "port1".to_owned(),
                enabled: true,
            },
        );
        let profile = |fw, sys| AccProfile {
            fwgrp: fw,
            sysgrp: sys,
        };
        let user = |name: &str, prof: &str| ApiUser {
            name: name.to_owned(),
            accprofile: prof.to_owned(),
            vdoms: vec!["root".to_owned()],
        };
        Self {
            hostname: "fgt-lab".to_owned(),
            serial: "FGVM02TM00000001".to_owned(),
            model_name: "FortiGate-VM64".to_owned(),
            version: "v7.4.5".to_owned(),
            build: 2702,
            vdoms: BTreeMap::from([("root".to_owned(), root)]),
            profiles: BTreeMap::from([
                (
                    "super_admin".to_owned(),
                    profile(Access::ReadWrite, Access::ReadWrite),
                ),
                (
                    "fw_only".to_owned(),
                    profile(Access::ReadWrite, Access::None),
                ),
                ("fw_read".to_owned(), profile(Access::Read, Access::None)),
            ]),
            keys: BTreeMap::from([
                ("admin-key".to_owned(), user("qfence-admin", "super_admin")),
                ("fw-key".to_owned(), user("qfence-fw", "fw_only")),
                ("ro-key".to_owned(), user("qfence-ro", "fw_read")),
            ]),
            revision: 1,
            ha_peers: Vec::new(),
            ha_sync_delay_ms: 0,
        }
    }

    fn revision_str(rev: u64) -> String {
        format!("{rev:032x}")
    }
}

#[derive(Debug, Default)]
struct Faults {
    latency: Duration,
    fail_writes: u32,
    fail_status: u16,
    ignore_writes: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<FortiState>,
    faults: Mutex<Faults>,
    /// Requests that changed (or tried to change) something.
    writes: Mutex<u64>,
    /// `monitor/system/ha-checksums` requests answered.
    ha_reads: Mutex<u64>,
    /// The last configuration change and the revision before it, for HA peers' lag.
    last_change: Mutex<Option<(tokio::time::Instant, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the state half-written in a way tests care
    // about; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running simulator. Dropping it stops the server.
#[derive(Debug)]
pub struct FortiSim {
    addr: SocketAddr,
    tls: bool,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FortiSim {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT` (or `http://` without TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// A copy of the current state.
    pub fn state(&self) -> FortiState {
        lock(&self.shared.state).clone()
    }

    /// Changes the state directly (what an operator at the console would do).
    pub fn edit<R>(&self, f: impl FnOnce(&mut FortiState) -> R) -> R {
        f(&mut lock(&self.shared.state))
    }

    /// How many write requests (PUT/POST/DELETE) arrived, applied or not.
    pub fn writes(&self) -> u64 {
        *lock(&self.shared.writes)
    }

    /// How many HA checksum readings were answered.
    pub fn ha_reads(&self) -> u64 {
        *lock(&self.shared.ha_reads)
    }

    /// Delays every answer by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.shared.faults).latency = latency;
    }

    /// Makes the next `n` writes fail with HTTP `status` (500, 424, ...), changing nothing.
    pub fn fail_next_writes(&self, n: u32, status: u16) {
        let mut f = lock(&self.shared.faults);
        f.fail_writes = n;
        f.fail_status = status;
    }

    /// When on, writes answer success but change nothing.
    pub fn set_ignore_writes(&self, on: bool) {
        lock(&self.shared.faults).ignore_writes = on;
    }

    /// Stops the server and waits until the port is closed.
    pub async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for FortiSim {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts a simulator on `addr` (port 0 picks a free one), serving HTTPS when `tls` is given.
pub async fn start(
    addr: SocketAddr,
    tls: Option<LabTls>,
    state: FortiState,
) -> Result<FortiSim, LabError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| LabError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| LabError::Bind { addr, source })?;
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        faults: Mutex::new(Faults::default()),
        writes: Mutex::new(0),
        ha_reads: Mutex::new(0),
        last_change: Mutex::new(None),
    });
    let app = router(shared.clone());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let is_tls = tls.is_some();
    let task = match tls {
        None => tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stop_rx.await;
                })
                .await;
        }),
        Some(tls) => {
            let listener = TlsListener::new(listener, tls);
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            })
        }
    };
    Ok(FortiSim {
        addr: local,
        tls: is_tls,
        shared,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// Accepts TCP connections and hands over those whose TLS handshake finished, so one slow
/// client cannot hold up the others.
struct TlsListener {
    local: SocketAddr,
    rx: mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        SocketAddr,
    )>,
    _accept: AbortOnDrop,
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl TlsListener {
    fn new(listener: TcpListener, tls: LabTls) -> Self {
        let local = listener
            .local_addr()
            .expect("bound listener has an address");
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config);
        let (tx, rx) = mpsc::channel(16);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let hs = tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp));
                    if let Ok(Ok(stream)) = hs.await {
                        let _ = tx.send((stream, peer)).await;
                    }
                });
            }
        });
        Self {
            local,
            rx,
            _accept: AbortOnDrop(accept),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/v2/monitor/system/status", get(system_status))
        .route("/api/v2/monitor/system/ha-checksums", get(ha_checksums))
        .route("/api/v2/cmdb/{path}/{name}", get(cmdb_list))
        .route(
            "/api/v2/cmdb/{path}/{name}/{mkey}",
            get(cmdb_get).put(cmdb_put),
        )
        .fallback(not_found)
        .with_state(shared)
}

/// The request as the handlers need it.
struct Req {
    method: Method,
    path: String,
    name: String,
    vdom: String,
    user: Option<ApiUser>,
    profile: Option<AccProfile>,
}

/// An answer in the FortiOS envelope.
fn envelope(
    st: &FortiState,
    req: &Req,
    status: StatusCode,
    extra: serde_json::Map<String, Value>,
) -> Response {
    let mut body = serde_json::Map::new();
    body.insert("http_method".into(), json!(req.method.as_str()));
    body.insert(
        "status".into(),
        json!(if status.is_success() {
            "success"
        } else {
            "error"
        }),
    );
    body.insert("http_status".into(), json!(status.as_u16()));
    body.insert("vdom".into(), json!(req.vdom));
    body.insert("path".into(), json!(req.path));
    body.insert("name".into(), json!(req.name));
    body.insert("serial".into(), json!(st.serial));
    body.insert("version".into(), json!(st.version));
    body.insert("build".into(), json!(st.build));
    body.extend(extra);
    (status, axum::Json(Value::Object(body))).into_response()
}

fn error(st: &FortiState, req: &Req, status: StatusCode, code: i64, cli: &str) -> Response {
    let mut extra = serde_json::Map::new();
    extra.insert("error".into(), json!(code));
    if !cli.is_empty() {
        extra.insert("cli_error".into(), json!(cli));
    }
    envelope(st, req, status, extra)
}

/// Authenticates and applies latency. `Err` is the answer to send instead.
async fn admit(
    shared: &Shared,
    method: Method,
    path: &str,
    name: &str,
    headers: &HeaderMap,
    query: &BTreeMap<String, String>,
) -> Result<Req, Response> {
    let latency = lock(&shared.faults).latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let st = lock(&shared.state);
    let mut req = Req {
        method,
        path: path.to_owned(),
        name: name.to_owned(),
        vdom: query
            .get("vdom")
            .cloned()
            .unwrap_or_else(|| "root".to_owned()),
        user: None,
        profile: None,
    };
    // The key in the URL is refused even when valid (FortiOS 7.4.5+ default).
    if query.contains_key("access_token") {
        return Err(unauthorized());
    }
    let key = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(user) = key.and_then(|k| st.keys.get(k)) else {
        return Err(unauthorized());
    };
    if !st.vdoms.contains_key(&req.vdom) {
        return Err(error(
            &st,
            &req,
            StatusCode::NOT_FOUND,
            -3,
            "vdom not found",
        ));
    }
    if !user.vdoms.contains(&req.vdom) {
        return Err(error(&st, &req, StatusCode::FORBIDDEN, -37, ""));
    }
    req.profile = st.profiles.get(&user.accprofile).cloned();
    req.user = Some(user.clone());
    Ok(req)
}

/// FortiOS answers 401 with an HTML page, not the envelope.
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("content-type", "text/html")],
        "<html><body>401 Unauthorized</body></html>",
    )
        .into_response()
}

fn group_of(path: &str) -> Option<fn(&AccProfile) -> Access> {
    match path {
        "firewall" => Some(|p| p.fwgrp),
        "system" => Some(|p| p.sysgrp),
        _ => None,
    }
}

fn allowed(req: &Req, write: bool) -> bool {
    let (Some(profile), Some(group)) = (&req.profile, group_of(&req.path)) else {
        return false;
    };
    match group(profile) {
        Access::None => false,
        Access::Read => !write,
        Access::ReadWrite => true,
    }
}

fn policy_json(id: u32, p: &Policy) -> Value {
    json!({
        "policyid": id,
        "q_origin_key": id,
        "name": p.name,
        "uuid": format!("00000000-0000-0000-0000-{id:012}"),
        "status": if p.enabled { "enable" } else { "disable" },
        "action": p.action,
        "srcintf": [{"name": "port2"}],
        "dstintf": [{"name": "port3"}],
        "srcaddr": [{"name": "all"}],
        "dstaddr": [{"name": "all"}],
        "service": [{"name": "ALL"}],
        "schedule": "always",
        "nat": "disable",
        "firewall-session-dirty": p.session_dirty,
    })
}

fn vip_json(name: &str, v: &Vip) -> Value {
    json!({
        "name": name,
        "q_origin_key": name,
        "type": "static-nat",
        "extip": v.extip,
        "extintf": v.extintf,
        "mappedip": v.mappedip.iter().map(|r| json!({"range": r})).collect::<Vec<_>>(),
        "portforward": "disable",
        "status": if v.enabled { "enable" } else { "disable" },
    })
}

/// The rows of the table a read names (only the row `only` names, when given), or FortiOS's
/// answer: -3 for no such table, then -37 when the profile may not read it.
#[allow(clippy::result_large_err)] // the error is the answer to send, as in admit's callers
fn readable_rows(
    st: &FortiState,
    req: &Req,
    only: Option<&str>,
) -> Result<Vec<(String, Value)>, Response> {
    let Some(rows) = table(st, req, only) else {
        return Err(error(st, req, StatusCode::NOT_FOUND, -3, ""));
    };
    if !allowed(req, false) {
        return Err(error(st, req, StatusCode::FORBIDDEN, -37, ""));
    }
    Ok(rows)
}

/// Every object of one table (or only the one `only` names), as JSON, keyed by its mkey. A
/// read of one object builds that object alone: at thousands of VIPs, building the whole
/// table for each single read made the simulator the benchmark's bottleneck.
fn table(st: &FortiState, req: &Req, only: Option<&str>) -> Option<Vec<(String, Value)>> {
    let vdom = st.vdoms.get(&req.vdom)?;
    let wanted = |k: &str| only.is_none_or(|o| o == k);
    let rows = match (req.path.as_str(), req.name.as_str()) {
        ("firewall", "policy") => {
            let one = only.map(|o| o.parse::<u32>().ok());
            vdom.policies
                .iter()
                .filter(|(id, _)| one.is_none_or(|o| o == Some(**id)))
                .map(|(id, p)| (id.to_string(), policy_json(*id, p)))
                .collect()
        }
        ("firewall", "vip") => match only {
            Some(name) => vdom
                .vips
                .get_key_value(name)
                .map(|(n, v)| (n.clone(), vip_json(n, v)))
                .into_iter()
                .collect(),
            None => vdom
                .vips
                .iter()
                .map(|(n, v)| (n.clone(), vip_json(n, v)))
                .collect(),
        },
        ("system", "settings") => vec![(
            String::new(),
            json!({"firewall-session-dirty": vdom.session_dirty}),
        )],
        ("system", "api-user") => st
            .keys
            .values()
            .filter(|u| wanted(&u.name))
            .map(|u| {
                let row = json!({
                    "name": u.name,
                    "accprofile": u.accprofile,
                    "vdom": u.vdoms.iter().map(|v| json!({"name": v})).collect::<Vec<_>>(),
                    "trusthost": [],
                });
                (u.name.clone(), row)
            })
            .collect(),
        ("system", "accprofile") => st
            .profiles
            .iter()
            .filter(|(n, _)| wanted(n))
            .map(|(n, p)| {
                let row = json!({
                    "name": n,
                    "scope": "vdom",
                    "fwgrp": p.fwgrp.as_str(),
                    "sysgrp": p.sysgrp.as_str(),
                });
                (n.clone(), row)
            })
            .collect(),
        _ => return None,
    };
    Some(rows)
}

async fn system_status(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let req = match admit(&shared, Method::GET, "system", "status", &headers, &query).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let st = lock(&shared.state);
    let mut extra = serde_json::Map::new();
    extra.insert(
        "results".into(),
        json!({
            "model_name": st.model_name,
            "model_number": "VM64",
            "model": "FGVM64",
            "hostname": st.hostname,
            "log_disk_status": "available",
        }),
    );
    envelope(&st, &req, StatusCode::OK, extra)
}

/// Per member: `serial_no`, `is_manage_master`, `is_root_master` and the checksums. A peer
/// shows the old configuration's checksum until `ha_sync_delay_ms` after the last change.
async fn ha_checksums(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let req = match admit(
        &shared,
        Method::GET,
        "system",
        "ha-checksums",
        &headers,
        &query,
    )
    .await
    {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    *lock(&shared.ha_reads) += 1;
    let st = lock(&shared.state);
    if !allowed(&req, false) {
        return error(&st, &req, StatusCode::FORBIDDEN, -37, "");
    }
    let sum = |rev: u64| format!("{:032x}", rev.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let peer_rev = match *lock(&shared.last_change) {
        Some((at, prev))
            if tokio::time::Instant::now().duration_since(at)
                < Duration::from_millis(st.ha_sync_delay_ms) =>
        {
            prev
        }
        _ => st.revision,
    };
    let member = |serial: &str, rev: u64, primary: bool| {
        json!({
            "serial_no": serial,
            "is_manage_master": u8::from(primary),
            "is_root_master": u8::from(primary),
            "checksum": {"global": sum(rev), "root": sum(rev), "all": sum(rev)},
        })
    };
    let mut results = vec![member(&st.serial, st.revision, true)];
    results.extend(st.ha_peers.iter().map(|p| member(p, peer_rev, false)));
    let mut extra = serde_json::Map::new();
    extra.insert("results".into(), Value::Array(results));
    envelope(&st, &req, StatusCode::OK, extra)
}

async fn cmdb_list(
    State(shared): State<Arc<Shared>>,
    Path((path, name)): Path<(String, String)>,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let req = match admit(&shared, Method::GET, &path, &name, &headers, &query).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let st = lock(&shared.state);
    let rows = match readable_rows(&st, &req, None) {
        Ok(rows) => rows,
        Err(resp) => return resp,
    };
    let mut extra = serde_json::Map::new();
    // Singleton tables (system settings) answer an object, lists an array.
    let results = if req.name == "settings" {
        rows.into_iter()
            .next()
            .map(|(_, v)| v)
            .unwrap_or(Value::Null)
    } else {
        Value::Array(rows.into_iter().map(|(_, v)| v).collect())
    };
    extra.insert("results".into(), results);
    envelope(&st, &req, StatusCode::OK, extra)
}

async fn cmdb_get(
    State(shared): State<Arc<Shared>>,
    Path((path, name, mkey)): Path<(String, String, String)>,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let req = match admit(&shared, Method::GET, &path, &name, &headers, &query).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let st = lock(&shared.state);
    let rows = match readable_rows(&st, &req, Some(&mkey)) {
        Ok(rows) => rows,
        Err(resp) => return resp,
    };
    let Some((_, row)) = rows.into_iter().find(|(k, _)| *k == mkey) else {
        return error(&st, &req, StatusCode::NOT_FOUND, -3, "");
    };
    let mut extra = serde_json::Map::new();
    extra.insert("results".into(), json!([row]));
    envelope(&st, &req, StatusCode::OK, extra)
}

fn enable_flag(v: &Value) -> Result<bool, String> {
    match v.as_str() {
        Some("enable") => Ok(true),
        Some("disable") => Ok(false),
        _ => Err(format!("invalid value for status: {v}")),
    }
}

/// Applies a PUT body to one object. `Ok(changed)`, or the CLI error for a bad field.
fn apply_put(
    vdom: &mut Vdom,
    name: &str,
    mkey: &str,
    body: &Value,
) -> Option<Result<bool, String>> {
    let obj = body.as_object()?;
    match name {
        "policy" => {
            let p = vdom.policies.get_mut(&mkey.parse::<u32>().ok()?)?;
            let mut next = p.clone();
            for (k, v) in obj {
                let r = match k.as_str() {
                    "status" => enable_flag(v).map(|e| next.enabled = e),
                    "name" => v
                        .as_str()
                        .map(|s| next.name = s.to_owned())
                        .ok_or_else(|| "invalid name".to_owned()),
                    "action" => match v.as_str() {
                        Some(a @ ("accept" | "deny")) => {
                            next.action = a.to_owned();
                            Ok(())
                        }
                        _ => Err(format!("invalid value for action: {v}")),
                    },
                    // Accepted and ignored: the simulator does not model it.
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    return Some(Err(e));
                }
            }
            let changed = next != *p;
            *p = next;
            Some(Ok(changed))
        }
        "vip" => {
            let v = vdom.vips.get_mut(mkey)?;
            let mut next = v.clone();
            for (k, val) in obj {
                let r = match k.as_str() {
                    "status" => enable_flag(val).map(|e| next.enabled = e),
                    "extip" => val
                        .as_str()
                        .filter(|s| s.parse::<std::net::IpAddr>().is_ok())
                        .map(|s| next.extip = s.to_owned())
                        .ok_or_else(|| format!("invalid value for extip: {val}")),
                    "mappedip" => val
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|r| {
                                    r.get("range")
                                        .and_then(Value::as_str)
                                        .filter(|s| valid_range(s))
                                        .map(str::to_owned)
                                })
                                .collect::<Option<Vec<_>>>()
                        })
                        .filter(|a| !a.is_empty())
                        .map(|a| next.mappedip = a)
                        .ok_or_else(|| format!("invalid value for mappedip: {val}")),
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    return Some(Err(e));
                }
            }
            let changed = next != *v;
            *v = next;
            Some(Ok(changed))
        }
        _ => None,
    }
}

fn valid_range(s: &str) -> bool {
    match s.split_once('-') {
        Some((a, b)) => {
            a.parse::<std::net::IpAddr>().is_ok() && b.parse::<std::net::IpAddr>().is_ok()
        }
        None => s.parse::<std::net::IpAddr>().is_ok(),
    }
}

async fn cmdb_put(
    State(shared): State<Arc<Shared>>,
    Path((path, name, mkey)): Path<(String, String, String)>,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let req = match admit(&shared, Method::PUT, &path, &name, &headers, &query).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    *lock(&shared.writes) += 1;
    let (fail, ignore) = {
        let mut f = lock(&shared.faults);
        let fail = if f.fail_writes > 0 {
            f.fail_writes -= 1;
            Some(f.fail_status)
        } else {
            None
        };
        (fail, f.ignore_writes)
    };
    let mut st = lock(&shared.state);
    if !(path == "firewall" && (name == "policy" || name == "vip")) {
        return error(&st, &req, StatusCode::METHOD_NOT_ALLOWED, -1, "");
    }
    if !allowed(&req, true) {
        return error(&st, &req, StatusCode::FORBIDDEN, -37, "");
    }
    if let Some(code) = fail {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(&st, &req, status, -1, "injected failure");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(&st, &req, StatusCode::BAD_REQUEST, -1, "invalid JSON");
    };
    let old = st.revision;
    let mut work = st.vdoms.get(&req.vdom).cloned().unwrap_or_default();
    let changed = match apply_put(&mut work, &name, &mkey, &body) {
        None => return error(&st, &req, StatusCode::NOT_FOUND, -3, ""),
        Some(Err(cli)) => {
            return error(&st, &req, StatusCode::FAILED_DEPENDENCY, -651, &cli);
        }
        Some(Ok(changed)) => changed,
    };
    // A lying device reports the change it did not make.
    if changed && !ignore {
        st.vdoms.insert(req.vdom.clone(), work);
        // Peers keep the revision before the first change not yet synced.
        let mut last = lock(&shared.last_change);
        let now = tokio::time::Instant::now();
        let delay = Duration::from_millis(st.ha_sync_delay_ms);
        let prev = match *last {
            Some((at, prev)) if now.duration_since(at) < delay => prev,
            _ => st.revision,
        };
        *last = Some((now, prev));
        st.revision += 1;
    }
    let mut extra = serde_json::Map::new();
    extra.insert("mkey".into(), json!(mkey));
    extra.insert(
        "revision".into(),
        json!(FortiState::revision_str(st.revision)),
    );
    extra.insert("old_revision".into(), json!(FortiState::revision_str(old)));
    extra.insert("revision_changed".into(), json!(changed));
    envelope(&st, &req, StatusCode::OK, extra)
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [("content-type", "text/html")],
        "404 Not Found",
    )
        .into_response()
}
