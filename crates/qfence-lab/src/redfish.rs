//! A Redfish BMC simulator (DMTF Redfish over HTTPS), for the lab and for fault tests.
//!
//! Model: one BMC manages one or more [`System`]s (hosts). Each system has a power state
//! that only changes through the `ComputerSystem.Reset` action (or the lab, through
//! [`BmcHandle::set_power`]). A reset is accepted at once (204) and applied after the BMC's
//! `power_delay`, passing through `PoweringOff`/`PoweringOn`, as real BMCs do: a client must
//! read `PowerState` back to know the host is off. Each system also drives a *power line*
//! ([`BmcHandle::power_line`]), a `watch` channel that says whether the host is powered:
//! the Proxmox simulator follows it, so powering `pve-dc1-01` off takes that node offline
//! and stops its VMs.
//!
//! Authentication follows the specification: the service root is open; everything else
//! takes HTTP Basic or a session token (`POST /redfish/v1/SessionService/Sessions` answers
//! 201 with `X-Auth-Token` and `Location`; `DELETE` the session to log out). Accounts have
//! one of the three standard roles; the privilege for each operation follows the DMTF
//! default map (reset needs `ConfigureComponents`), and when `publish_privilege_map` is set
//! the service publishes that map under `AccountService.PrivilegeMap`, so a driver can grade
//! its privilege check "proven" instead of "inferred".
//!
//! Protocol faults are fields of [`BmcState`]: `power_delay` (a slow BMC),
//! `already_in_state` (iDRAC's 409 or iLO's 400 for a reset that changes nothing),
//! `reset_reply` (202 with a task monitor instead of 204) and `max_sessions`; the
//! connection and HTTP faults are in [`Faults`]. Errors use the Redfish body
//! `{"error": {"code", "message", "@Message.ExtendedInfo": [..]}}`.

// Helpers return the ready HTTP answer as their error: it is built once, on a cold path.
#![allow(clippy::result_large_err)]
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::faults::{self, Faults};
use crate::tls::{self, LabError, Server, TlsIdentity};

/// The `PowerState` of a system, as Redfish spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerState {
    /// Powered on.
    On,
    /// Powered off: the only state that counts as fenced.
    Off,
    /// Between a power-on request and `On`.
    PoweringOn,
    /// Between a power-off request and `Off`; the host still runs.
    PoweringOff,
}

impl PowerState {
    /// The Redfish string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "On",
            Self::Off => "Off",
            Self::PoweringOn => "PoweringOn",
            Self::PoweringOff => "PoweringOff",
        }
    }

    /// Whether the host is running: true until the power actually goes.
    pub fn powered(self) -> bool {
        matches!(self, Self::On | Self::PoweringOff)
    }
}

/// One host the BMC manages (a `ComputerSystem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// The member id in `/redfish/v1/Systems/{id}` (in the lab: the host name).
    pub id: String,
    /// The host's SMBIOS UUID, which a driver compares with the node's own.
    pub uuid: String,
    /// `Name`.
    pub name: String,
    /// `SerialNumber`.
    pub serial_number: String,
    /// `HostName`.
    pub host_name: String,
    /// The current power state.
    pub power: PowerState,
}

impl System {
    /// A powered-on host whose id, name and host name are all `id`.
    pub fn new(id: &str, uuid: &str) -> Self {
        Self {
            id: id.to_owned(),
            uuid: uuid.to_owned(),
            name: id.to_owned(),
            serial_number: format!("SIM-{}", uuid.get(..8).unwrap_or(uuid).to_uppercase()),
            host_name: id.to_owned(),
            power: PowerState::On,
        }
    }
}

/// The three standard Redfish roles (their privileges cannot be changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every privilege.
    Administrator,
    /// `Login`, `ConfigureSelf`, `ConfigureComponents`: may reset systems.
    Operator,
    /// `Login`, `ConfigureSelf`: may only read.
    ReadOnly,
}

impl Role {
    /// The role id.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Administrator => "Administrator",
            Self::Operator => "Operator",
            Self::ReadOnly => "ReadOnly",
        }
    }

    /// `AssignedPrivileges`.
    pub fn privileges(self) -> &'static [&'static str] {
        match self {
            Self::Administrator => &[
                "Login",
                "ConfigureManager",
                "ConfigureUsers",
                "ConfigureComponents",
                "ConfigureSelf",
            ],
            Self::Operator => &["Login", "ConfigureSelf", "ConfigureComponents"],
            Self::ReadOnly => &["Login", "ConfigureSelf"],
        }
    }

    fn has(self, privilege: &str) -> bool {
        self.privileges().contains(&privilege)
    }

    const ALL: [Role; 3] = [Role::Administrator, Role::Operator, Role::ReadOnly];

    fn by_id(id: &str) -> Option<Role> {
        Self::ALL.into_iter().find(|r| r.as_str() == id)
    }
}

/// A BMC account (`ManagerAccount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// `UserName`.
    pub user_name: String,
    /// The password (the lab's own test credential).
    pub password: String,
    /// `RoleId`.
    pub role: Role,
}

impl Account {
    /// An account.
    pub fn new(user_name: &str, password: &str, role: Role) -> Self {
        Self {
            user_name: user_name.to_owned(),
            password: password.to_owned(),
            role,
        }
    }
}

/// An open session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The member id under `/redfish/v1/SessionService/Sessions/`.
    pub id: String,
    /// The `X-Auth-Token`.
    pub token: String,
    /// Whose session it is.
    pub user_name: String,
}

/// How the BMC answers a reset that would not change the power state (`ForceOff` on an
/// off host, `On` on an on host, `ForceRestart` on an off host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AlreadyInState {
    /// Accept it (204) and do nothing, as the specification intends.
    #[default]
    Accept,
    /// 409 Conflict, as Dell iDRAC answers.
    Conflict409,
    /// 400 with `InvalidOperationForSystemState`, as HPE iLO answers.
    BadRequest400,
}

/// Everything the simulated BMC knows. Read it with [`BmcHandle::snapshot`], change it with
/// [`BmcHandle::update`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcState {
    /// The service root's `UUID` (identifies the Redfish service, not a host).
    pub service_uuid: String,
    /// The manager's id under `/redfish/v1/Managers/`.
    pub manager_id: String,
    /// The systems, in collection order.
    pub systems: Vec<System>,
    /// The accounts, in collection order (member ids are 1, 2, ...).
    pub accounts: Vec<Account>,
    /// Open sessions.
    pub sessions: Vec<Session>,
    /// How many sessions may be open at once (real BMCs have low limits).
    pub max_sessions: usize,
    /// How long a reset takes to reach its final power state. Fault "slow BMC": seconds.
    pub power_delay: Duration,
    /// Fault: the answer to a reset that changes nothing.
    pub already_in_state: AlreadyInState,
    /// Publish the privilege map under `AccountService.PrivilegeMap`.
    pub publish_privilege_map: bool,
    /// How an accepted reset is answered: 204, or 202 with a task monitor.
    pub reset_reply: ResetReply,
}

/// How the BMC answers an accepted reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResetReply {
    /// 204 No Content (sushy-tools, many BMCs).
    #[default]
    NoContent,
    /// 202 Accepted with `Location` = a task monitor that answers 202 while the power
    /// change is under way and 204 once it is done (iDRAC-style asynchronous actions).
    TaskMonitor,
}

impl BmcState {
    /// A BMC with these systems and accounts and lab defaults: 0.3 s power changes, eight
    /// sessions, no faults, privilege map published.
    pub fn new(systems: Vec<System>, accounts: Vec<Account>) -> Self {
        Self {
            service_uuid: "92384634-2938-2342-8820-489239905423".to_owned(),
            manager_id: "bmc".to_owned(),
            systems,
            accounts,
            sessions: Vec::new(),
            max_sessions: 8,
            power_delay: Duration::from_millis(300),
            already_in_state: AlreadyInState::Accept,
            publish_privilege_map: true,
            reset_reply: ResetReply::NoContent,
        }
    }

    /// The system with this id.
    pub fn system(&self, id: &str) -> Option<&System> {
        self.systems.iter().find(|s| s.id == id)
    }

    fn validate(&self) -> Result<(), LabError> {
        let mut seen = std::collections::BTreeSet::new();
        for system in &self.systems {
            if !seen.insert(system.id.as_str()) {
                return Err(LabError::InvalidState(format!(
                    "system id {:?} appears twice",
                    system.id
                )));
            }
        }
        let mut users = std::collections::BTreeSet::new();
        for account in &self.accounts {
            if !users.insert(account.user_name.as_str()) {
                return Err(LabError::InvalidState(format!(
                    "account {:?} appears twice",
                    account.user_name
                )));
            }
        }
        Ok(())
    }
}

struct Shared {
    state: Mutex<BmcState>,
    /// One per system, fixed at start: whether the host is powered.
    lines: BTreeMap<String, watch::Sender<bool>>,
    /// Per system: bumped by every reset, so a newer reset supersedes a pending one.
    generations: Mutex<BTreeMap<String, u64>>,
    /// (system, generation) of every reset whose last step was applied.
    completed: Mutex<std::collections::BTreeSet<(String, u64)>>,
    /// Reset tasks handed out with 202: task id → (system, generation).
    tasks: Mutex<BTreeMap<String, (String, u64)>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BmcState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pushes every system's power to its line (no-op for unchanged lines).
    fn sync_lines(&self) {
        let state = self.lock();
        for system in &state.systems {
            if let Some(line) = self.lines.get(&system.id) {
                let powered = system.power.powered();
                line.send_if_modified(|p| std::mem::replace(p, powered) != powered);
            }
        }
    }

    fn set_power(&self, id: &str, power: PowerState) {
        {
            let mut state = self.lock();
            if let Some(system) = state.systems.iter_mut().find(|s| s.id == id) {
                system.power = power;
            }
        }
        self.sync_lines();
    }

    fn next_generation(&self, id: &str) -> u64 {
        let mut generations = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        let generation = generations.entry(id.to_owned()).or_default();
        *generation += 1;
        *generation
    }

    fn complete(&self, id: &str, generation: u64) {
        self.completed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((id.to_owned(), generation));
    }

    /// `Running`, `Completed`, or `Cancelled` (superseded by a newer reset first).
    fn task_state(&self, id: &str, generation: u64) -> &'static str {
        let done = self
            .completed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(id.to_owned(), generation));
        if done {
            "Completed"
        } else if self.is_current(id, generation) {
            "Running"
        } else {
            "Cancelled"
        }
    }

    fn is_current(&self, id: &str, generation: u64) -> bool {
        let generations = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        generations.get(id) == Some(&generation)
    }
}

/// A running BMC simulator.
#[derive(Debug)]
pub struct BmcHandle {
    server: Server,
    fingerprint: String,
    shared: Arc<Shared>,
    faults: Faults,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Starts a BMC simulator on `addr` (port 0 picks a free port) serving HTTPS with `tls`.
pub async fn start(
    addr: SocketAddr,
    tls: TlsIdentity,
    state: BmcState,
) -> Result<BmcHandle, LabError> {
    state.validate()?;
    let lines = state
        .systems
        .iter()
        .map(|s| (s.id.clone(), watch::channel(s.power.powered()).0))
        .collect();
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        lines,
        generations: Mutex::new(BTreeMap::new()),
        completed: Mutex::new(std::collections::BTreeSet::new()),
        tasks: Mutex::new(BTreeMap::new()),
    });
    let faults = Faults::new();
    let server = tls::serve(
        addr,
        &tls,
        faults.clone(),
        router(shared.clone(), faults.clone()),
    )
    .await?;
    tracing::info!(addr = %server.addr, fingerprint = tls.fingerprint(), "Redfish simulator started");
    Ok(BmcHandle {
        server,
        fingerprint: tls.fingerprint().to_owned(),
        shared,
        faults,
    })
}

impl BmcHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// `https://ADDR`, the base URL a driver is configured with.
    pub fn base_url(&self) -> String {
        tls::loopback_url(self.server.addr)
    }

    /// SHA-256 of the published certificate (lower-case hex), for `tls: {pin: ...}`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The connection and HTTP faults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> BmcState {
        self.shared.lock().clone()
    }

    /// Changes the state (protocol faults, accounts, power). Systems cannot be added or
    /// removed once started: their power lines are fixed.
    pub fn update<R>(&self, change: impl FnOnce(&mut BmcState) -> R) -> R {
        let result = change(&mut self.shared.lock());
        self.shared.sync_lines();
        result
    }

    /// Sets a system's power at once, cancelling any pending reset (the lab's hand on the
    /// power switch). Returns false for an unknown system.
    pub fn set_power(&self, system_id: &str, power: PowerState) -> bool {
        if self.shared.lock().system(system_id).is_none() {
            return false;
        }
        self.shared.next_generation(system_id);
        self.shared.set_power(system_id, power);
        true
    }

    /// Follows whether this system's host is powered (true while `On` or `PoweringOff`).
    pub fn power_line(&self, system_id: &str) -> Option<watch::Receiver<bool>> {
        self.shared.lines.get(system_id).map(|l| l.subscribe())
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

// ---------------------------------------------------------------------------------------
// HTTP

const RESET_TYPES: [&str; 8] = [
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "ForceOn",
    "PowerCycle",
    "Nmi",
];

type Shr = State<Arc<Shared>>;

fn router(shared: Arc<Shared>, faults: Faults) -> Router {
    let api = Router::new()
        .route(
            "/redfish",
            get(|| async { json_ok(json!({"v1": "/redfish/v1/"})) }),
        )
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{id}", get(system))
        .route(
            "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .route(
            "/redfish/v1/Systems/{id}/ResetActionInfo",
            get(reset_action_info),
        )
        .route("/redfish/v1/Chassis", get(chassis_collection))
        .route("/redfish/v1/Chassis/{id}", get(chassis))
        .route("/redfish/v1/Managers", get(managers))
        .route("/redfish/v1/Managers/{id}", get(manager))
        .route("/redfish/v1/SessionService", get(session_service))
        .route(
            "/redfish/v1/SessionService/Sessions",
            get(sessions).post(create_session),
        )
        .route(
            "/redfish/v1/SessionService/Sessions/{id}",
            get(session).delete(delete_session),
        )
        .route("/redfish/v1/AccountService", get(account_service))
        .route("/redfish/v1/AccountService/Accounts", get(accounts))
        .route("/redfish/v1/AccountService/Accounts/{id}", get(account))
        .route("/redfish/v1/AccountService/Roles", get(roles))
        .route("/redfish/v1/AccountService/Roles/{id}", get(role))
        .route(
            "/redfish/v1/AccountService/PrivilegeMap",
            get(privilege_map),
        )
        .route("/redfish/v1/TaskService", get(task_service))
        .route("/redfish/v1/TaskService/Tasks", get(task_collection))
        .route("/redfish/v1/TaskService/Tasks/{id}", get(task))
        .route(
            "/redfish/v1/TaskService/TaskMonitors/{id}",
            get(task_monitor),
        )
        .fallback(|| async {
            rf_error(
                StatusCode::NOT_FOUND,
                "Base.1.8.ResourceMissingAtURI",
                "The resource at the URI was not found.",
            )
        })
        .method_not_allowed_fallback(|| async {
            rf_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Base.1.8.OperationNotAllowed",
                "The HTTP method is not allowed on this resource.",
            )
        })
        .with_state(shared);
    // Outer router: the layers run before routing, so a trailing slash is stripped first.
    Router::new()
        .fallback_service(api)
        .layer(middleware::map_response(odata_version))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            faults::http_faults(faults.clone(), storm_error, req, next)
        }))
        .layer(middleware::map_request(strip_trailing_slash))
}

async fn strip_trailing_slash(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_owned(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

async fn odata_version(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert("OData-Version", HeaderValue::from_static("4.0"));
    response
}

fn storm_error(status: StatusCode) -> Response {
    rf_error(
        status,
        "Base.1.8.InternalError",
        "The request failed due to an internal service error.  The service is still operational.",
    )
}

fn json_ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// A Redfish error body with one extended-info message.
fn rf_error(status: StatusCode, message_id: &str, message: &str) -> Response {
    let body = json!({
        "error": {
            "code": "Base.1.8.GeneralError",
            "message": message,
            "@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": message_id,
                "Message": message,
                "Severity": "Critical",
                "Resolution": "None.",
            }],
        }
    });
    (status, axum::Json(body)).into_response()
}

/// Who is calling.
#[derive(Debug, Clone)]
struct Caller {
    user_name: String,
    role: Role,
}

fn unauthorized(message_id: &str, message: &str) -> Response {
    let mut response = rf_error(StatusCode::UNAUTHORIZED, message_id, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"qfence lab BMC\""),
    );
    response
}

fn forbidden() -> Response {
    rf_error(
        StatusCode::FORBIDDEN,
        "Base.1.8.InsufficientPrivilege",
        "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
    )
}

fn not_found(kind: &str, id: &str) -> Response {
    rf_error(
        StatusCode::NOT_FOUND,
        "Base.1.8.ResourceNotFound",
        &format!("The requested resource of type {kind} named '{id}' was not found."),
    )
}

/// Authenticates with `X-Auth-Token` or Basic, then checks one privilege.
fn authorize(shared: &Shared, headers: &HeaderMap, privilege: &str) -> Result<Caller, Response> {
    let state = shared.lock();
    let caller = if let Some(token) = headers.get("X-Auth-Token") {
        let token = token.to_str().unwrap_or_default();
        let session = state
            .sessions
            .iter()
            .find(|s| s.token == token)
            .ok_or_else(|| {
                unauthorized(
                    "Base.1.8.NoValidSession",
                    "There is no valid session established with the implementation.",
                )
            })?;
        let account = state
            .accounts
            .iter()
            .find(|a| a.user_name == session.user_name)
            .ok_or_else(|| {
                unauthorized(
                    "Base.1.8.NoValidSession",
                    "There is no valid session established with the implementation.",
                )
            })?;
        Caller {
            user_name: account.user_name.clone(),
            role: account.role,
        }
    } else {
        let denied = || {
            unauthorized(
                "Base.1.8.AccessDenied",
                "While attempting to establish a connection to the resource, the service denied access.",
            )
        };
        let (user, password) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_basic)
            .ok_or_else(denied)?;
        let account = state
            .accounts
            .iter()
            .find(|a| a.user_name == user && a.password == password)
            .ok_or_else(denied)?;
        Caller {
            user_name: account.user_name.clone(),
            role: account.role,
        }
    };
    if caller.role.has(privilege) {
        Ok(caller)
    } else {
        Err(forbidden())
    }
}

fn parse_basic(value: &str) -> Option<(String, String)> {
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

macro_rules! authorized {
    ($shared:expr, $headers:expr, $privilege:expr) => {
        match authorize(&$shared, &$headers, $privilege) {
            Ok(caller) => caller,
            Err(response) => return response,
        }
    };
}

fn link(path: &str) -> Value {
    json!({"@odata.id": path})
}

fn collection(path: &str, odata_type: &str, name: &str, members: Vec<String>) -> Response {
    let members: Vec<Value> = members.iter().map(|m| link(m)).collect();
    json_ok(json!({
        "@odata.id": path,
        "@odata.type": odata_type,
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members,
    }))
}

async fn service_root(State(shared): Shr) -> Response {
    let state = shared.lock();
    json_ok(json!({
        "@odata.id": "/redfish/v1",
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": state.service_uuid,
        "Vendor": "qfence lab",
        "Product": "qfence lab BMC simulator",
        "Systems": link("/redfish/v1/Systems"),
        "Chassis": link("/redfish/v1/Chassis"),
        "Managers": link("/redfish/v1/Managers"),
        "SessionService": link("/redfish/v1/SessionService"),
        "AccountService": link("/redfish/v1/AccountService"),
        "TaskService": link("/redfish/v1/TaskService"),
        "Links": {"Sessions": link("/redfish/v1/SessionService/Sessions")},
    }))
}

async fn systems(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = shared
        .lock()
        .systems
        .iter()
        .map(|s| format!("/redfish/v1/Systems/{}", s.id))
        .collect();
    collection(
        "/redfish/v1/Systems",
        "#ComputerSystemCollection.ComputerSystemCollection",
        "Computer System Collection",
        members,
    )
}

fn system_body(state: &BmcState, system: &System) -> Value {
    let base = format!("/redfish/v1/Systems/{}", system.id);
    let health_state = if system.power == PowerState::Off {
        "StandbyOffline"
    } else {
        "Enabled"
    };
    json!({
        "@odata.id": base,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": system.id,
        "Name": system.name,
        "UUID": system.uuid,
        "SerialNumber": system.serial_number,
        "HostName": system.host_name,
        "Manufacturer": "qfence lab",
        "Model": "Simulated host",
        "SystemType": "Physical",
        "PowerState": system.power.as_str(),
        "PowerRestorePolicy": "LastState",
        "Status": {"State": health_state, "Health": "OK"},
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{base}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": RESET_TYPES,
                "@Redfish.ActionInfo": format!("{base}/ResetActionInfo"),
            }
        },
        "Links": {
            "Chassis": [link(&format!("/redfish/v1/Chassis/{}", system.id))],
            "ManagedBy": [link(&format!("/redfish/v1/Managers/{}", state.manager_id))],
        },
    })
}

async fn system(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    match state.system(&id) {
        Some(system) => json_ok(system_body(&state, system)),
        None => not_found("ComputerSystem", &id),
    }
}

async fn reset_action_info(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    authorized!(shared, headers, "Login");
    if shared.lock().system(&id).is_none() {
        return not_found("ComputerSystem", &id);
    }
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Systems/{id}/ResetActionInfo"),
        "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": RESET_TYPES,
        }],
    }))
}

/// What a reset does, as a list of power states reached one `power_delay` apart.
fn reset_steps(reset_type: &str, current: PowerState) -> Vec<PowerState> {
    use PowerState::{Off, On};
    let on = current.powered();
    match reset_type {
        "ForceOff" | "GracefulShutdown" => vec![Off],
        "On" | "ForceOn" => vec![On],
        // A restart of an off host powers it on; PowerCycle of an off host powers it on too
        // (DMTF), which is why it is no fence primitive.
        "ForceRestart" | "GracefulRestart" | "PowerCycle" if on => vec![Off, On],
        "ForceRestart" | "GracefulRestart" | "PowerCycle" => vec![On],
        _ => vec![],
    }
}

/// Whether `reset_type` would leave the power as it is (the case vendors answer 409/400).
fn changes_nothing(reset_type: &str, current: PowerState) -> bool {
    match reset_type {
        "ForceOff" | "GracefulShutdown" => current == PowerState::Off,
        "On" | "ForceOn" => current == PowerState::On,
        "ForceRestart" | "GracefulRestart" => current == PowerState::Off,
        _ => false,
    }
}

async fn reset(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    authorized!(shared, headers, "ConfigureComponents");
    let (current, delay, already, reply) = {
        let state = shared.lock();
        let Some(system) = state.system(&id) else {
            return not_found("ComputerSystem", &id);
        };
        (
            system.power,
            state.power_delay,
            state.already_in_state,
            state.reset_reply,
        )
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.MalformedJSON",
            "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        );
    };
    let Some(reset_type) = request.get("ResetType").and_then(Value::as_str) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
        );
    };
    if !RESET_TYPES.contains(&reset_type) {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterValueNotInList",
            &format!(
                "The value '{reset_type}' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."
            ),
        );
    }
    if changes_nothing(reset_type, current) {
        let off = current == PowerState::Off;
        match already {
            AlreadyInState::Accept => return StatusCode::NO_CONTENT.into_response(),
            AlreadyInState::Conflict409 => {
                let (id, text) = if off {
                    ("IDRAC.2.8.PSU501", "Server is already powered OFF.")
                } else {
                    ("IDRAC.2.8.PSU502", "Server is already powered ON.")
                };
                return rf_error(StatusCode::CONFLICT, id, text);
            }
            AlreadyInState::BadRequest400 => {
                let text = if off { "Power is off." } else { "Power is on." };
                return rf_error(
                    StatusCode::BAD_REQUEST,
                    "iLO.2.14.InvalidOperationForSystemState",
                    text,
                );
            }
        }
    }
    let steps = reset_steps(reset_type, current);
    tracing::debug!(system = %id, reset_type, ?steps, "Simulated BMC accepted a reset");
    let generation = schedule_power(&shared, &id, steps, delay);
    if reply == ResetReply::NoContent {
        return StatusCode::NO_CONTENT.into_response();
    }
    let task_id = random_hex(6);
    shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(task_id.clone(), (id.clone(), generation));
    let body = task_body(&shared, &task_id).unwrap_or(Value::Null);
    let mut response = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("/redfish/v1/TaskService/TaskMonitors/{task_id}"))
    {
        headers.insert(header::LOCATION, v);
    }
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Applies `steps` one `delay` apart, showing the transitional state in between; a newer
/// reset of the same system supersedes what is left.
fn schedule_power(shared: &Arc<Shared>, id: &str, steps: Vec<PowerState>, delay: Duration) -> u64 {
    let generation = shared.next_generation(id);
    if steps.is_empty() || delay.is_zero() {
        for step in steps {
            shared.set_power(id, step);
        }
        shared.complete(id, generation);
        return generation;
    }
    let transitional = |to: PowerState| {
        if to == PowerState::Off {
            PowerState::PoweringOff
        } else {
            PowerState::PoweringOn
        }
    };
    shared.set_power(id, transitional(steps[0]));
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        let last = steps.len() - 1;
        for (i, step) in steps.iter().enumerate() {
            tokio::time::sleep(delay).await;
            if !shared.is_current(&id, generation) {
                return;
            }
            shared.set_power(&id, *step);
            if i < last {
                shared.set_power(&id, transitional(steps[i + 1]));
            }
        }
        shared.complete(&id, generation);
    });
    generation
}

fn task_body(shared: &Shared, task_id: &str) -> Option<Value> {
    let (system, generation) = shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(task_id)
        .cloned()?;
    let state = shared.task_state(&system, generation);
    let (status, percent) = match state {
        "Completed" => ("OK", 100),
        "Cancelled" => ("Warning", 100),
        _ => ("OK", 50),
    };
    Some(json!({
        "@odata.id": format!("/redfish/v1/TaskService/Tasks/{task_id}"),
        "@odata.type": "#Task.v1_7_4.Task",
        "Id": task_id,
        "Name": format!("Reset {system}"),
        "TaskState": state,
        "TaskStatus": status,
        "PercentComplete": percent,
        "TaskMonitor": format!("/redfish/v1/TaskService/TaskMonitors/{task_id}"),
        "Messages": [],
    }))
}

async fn task_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    json_ok(json!({
        "@odata.id": "/redfish/v1/TaskService",
        "@odata.type": "#TaskService.v1_2_1.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": true,
        "Tasks": link("/redfish/v1/TaskService/Tasks"),
    }))
}

async fn task_collection(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = shared
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .map(|id| format!("/redfish/v1/TaskService/Tasks/{id}"))
        .collect();
    collection(
        "/redfish/v1/TaskService/Tasks",
        "#TaskCollection.TaskCollection",
        "Task Collection",
        members,
    )
}

async fn task(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    match task_body(&shared, &id) {
        Some(body) => json_ok(body),
        None => not_found("Task", &id),
    }
}

/// A task monitor: 202 (with the task) while running, then the final answer of the
/// operation itself: 204 for a completed reset.
async fn task_monitor(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let Some(body) = task_body(&shared, &id) else {
        return not_found("TaskMonitor", &id);
    };
    match body["TaskState"].as_str() {
        Some("Running") => {
            let mut response = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        Some("Completed") => StatusCode::NO_CONTENT.into_response(),
        _ => json_ok(body),
    }
}

async fn chassis_collection(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = shared
        .lock()
        .systems
        .iter()
        .map(|s| format!("/redfish/v1/Chassis/{}", s.id))
        .collect();
    collection(
        "/redfish/v1/Chassis",
        "#ChassisCollection.ChassisCollection",
        "Chassis Collection",
        members,
    )
}

async fn chassis(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    let Some(system) = state.system(&id) else {
        return not_found("Chassis", &id);
    };
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Chassis/{id}"),
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": id,
        "Name": format!("{} chassis", system.name),
        "ChassisType": "RackMount",
        "PowerState": system.power.as_str(),
        "Links": {
            "ComputerSystems": [link(&format!("/redfish/v1/Systems/{id}"))],
            "ManagedBy": [link(&format!("/redfish/v1/Managers/{}", state.manager_id))],
        },
    }))
}

async fn managers(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let id = shared.lock().manager_id.clone();
    collection(
        "/redfish/v1/Managers",
        "#ManagerCollection.ManagerCollection",
        "Manager Collection",
        vec![format!("/redfish/v1/Managers/{id}")],
    )
}

async fn manager(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let state = shared.lock();
    if id != state.manager_id {
        return not_found("Manager", &id);
    }
    let servers: Vec<Value> = state
        .systems
        .iter()
        .map(|s| link(&format!("/redfish/v1/Systems/{}", s.id)))
        .collect();
    let chassis: Vec<Value> = state
        .systems
        .iter()
        .map(|s| link(&format!("/redfish/v1/Chassis/{}", s.id)))
        .collect();
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/Managers/{id}"),
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": id,
        "Name": "qfence lab BMC",
        "ManagerType": "BMC",
        "UUID": state.service_uuid,
        "FirmwareVersion": "1.0.0-sim",
        "Status": {"State": "Enabled", "Health": "OK"},
        "Links": {"ManagerForServers": servers, "ManagerForChassis": chassis},
    }))
}

async fn session_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    json_ok(json!({
        "@odata.id": "/redfish/v1/SessionService",
        "@odata.type": "#SessionService.v1_1_9.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": true,
        "SessionTimeout": 1800,
        "Sessions": link("/redfish/v1/SessionService/Sessions"),
    }))
}

async fn sessions(State(shared): Shr, headers: HeaderMap) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let members = shared
        .lock()
        .sessions
        .iter()
        .filter(|s| caller.role.has("ConfigureManager") || s.user_name == caller.user_name)
        .map(|s| format!("/redfish/v1/SessionService/Sessions/{}", s.id))
        .collect();
    collection(
        "/redfish/v1/SessionService/Sessions",
        "#SessionCollection.SessionCollection",
        "Session Collection",
        members,
    )
}

fn session_body(session: &Session, role: Role) -> Value {
    json!({
        "@odata.id": format!("/redfish/v1/SessionService/Sessions/{}", session.id),
        "@odata.type": "#Session.v1_7_0.Session",
        "Id": session.id,
        "Name": "User Session",
        "UserName": session.user_name,
        "Roles": [role.as_str()],
    })
}

fn random_hex(bytes: usize) -> String {
    use ring::rand::SecureRandom as _;
    let mut buf = vec![0u8; bytes];
    // SystemRandom only fails if the OS has no randomness; a fixed fallback is fine for a
    // simulator (it would only make tokens guessable in a lab).
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

async fn create_session(State(shared): Shr, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            return rf_error(
                StatusCode::BAD_REQUEST,
                "Base.1.8.MalformedJSON",
                "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
            );
        }
    };
    let user = request.get("UserName").and_then(Value::as_str);
    let password = request.get("Password").and_then(Value::as_str);
    let (Some(user), Some(password)) = (user, password) else {
        return rf_error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyMissing",
            "The property UserName or Password is a required property and must be included in the request.",
        );
    };
    let mut state = shared.lock();
    let Some(account) = state
        .accounts
        .iter()
        .find(|a| a.user_name == user && a.password == password)
        .cloned()
    else {
        return unauthorized(
            "Base.1.8.AccessDenied",
            "While attempting to establish a connection to the resource, the service denied access.",
        );
    };
    if state.sessions.len() >= state.max_sessions {
        return rf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Base.1.8.SessionLimitExceeded",
            "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
        );
    }
    let session = Session {
        id: random_hex(8),
        token: random_hex(16),
        user_name: account.user_name.clone(),
    };
    let body = session_body(&session, account.role);
    let location = format!("/redfish/v1/SessionService/Sessions/{}", session.id);
    let token = session.token.clone();
    state.sessions.push(session);
    let mut response = (StatusCode::CREATED, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&token) {
        headers.insert("X-Auth-Token", v);
    }
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, v);
    }
    response
}

/// A session is visible to its owner and to accounts with `ConfigureManager`.
fn session_for<'a>(
    state: &'a BmcState,
    caller: &Caller,
    id: &str,
) -> Result<&'a Session, Response> {
    let session = state
        .sessions
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| not_found("Session", id))?;
    if session.user_name == caller.user_name || caller.role.has("ConfigureManager") {
        Ok(session)
    } else {
        Err(forbidden())
    }
}

async fn session(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let state = shared.lock();
    match session_for(&state, &caller, &id) {
        Ok(session) => {
            let role = state
                .accounts
                .iter()
                .find(|a| a.user_name == session.user_name)
                .map_or(Role::ReadOnly, |a| a.role);
            json_ok(session_body(session, role))
        }
        Err(response) => response,
    }
}

async fn delete_session(
    State(shared): Shr,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let mut state = shared.lock();
    if let Err(response) = session_for(&state, &caller, &id) {
        return response;
    }
    state.sessions.retain(|s| s.id != id);
    StatusCode::NO_CONTENT.into_response()
}

async fn account_service(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let mut body = json!({
        "@odata.id": "/redfish/v1/AccountService",
        "@odata.type": "#AccountService.v1_15_0.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": true,
        "Accounts": link("/redfish/v1/AccountService/Accounts"),
        "Roles": link("/redfish/v1/AccountService/Roles"),
    });
    if shared.lock().publish_privilege_map {
        body["PrivilegeMap"] = link("/redfish/v1/AccountService/PrivilegeMap");
    }
    json_ok(body)
}

async fn accounts(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let members = (1..=shared.lock().accounts.len())
        .map(|i| format!("/redfish/v1/AccountService/Accounts/{i}"))
        .collect();
    collection(
        "/redfish/v1/AccountService/Accounts",
        "#ManagerAccountCollection.ManagerAccountCollection",
        "Accounts Collection",
        members,
    )
}

async fn account(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let caller = authorized!(shared, headers, "Login");
    let state = shared.lock();
    let found = id
        .parse::<usize>()
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| state.accounts.get(i));
    let Some(account) = found else {
        return not_found("ManagerAccount", &id);
    };
    // A ManagerAccount needs ConfigureUsers, or ConfigureSelf for one's own.
    if account.user_name != caller.user_name && !caller.role.has("ConfigureUsers") {
        return forbidden();
    }
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/AccountService/Accounts/{id}"),
        "@odata.type": "#ManagerAccount.v1_12_0.ManagerAccount",
        "Id": id,
        "Name": "User Account",
        "UserName": account.user_name,
        "RoleId": account.role.as_str(),
        "Password": null,
        "Enabled": true,
        "Locked": false,
        "Links": {"Role": link(&format!("/redfish/v1/AccountService/Roles/{}", account.role.as_str()))},
    }))
}

async fn roles(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    collection(
        "/redfish/v1/AccountService/Roles",
        "#RoleCollection.RoleCollection",
        "Roles Collection",
        Role::ALL
            .iter()
            .map(|r| format!("/redfish/v1/AccountService/Roles/{}", r.as_str()))
            .collect(),
    )
}

async fn role(State(shared): Shr, Path(id): Path<String>, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    let Some(role) = Role::by_id(&id) else {
        return not_found("Role", &id);
    };
    json_ok(json!({
        "@odata.id": format!("/redfish/v1/AccountService/Roles/{id}"),
        "@odata.type": "#Role.v1_3_2.Role",
        "Id": id,
        "RoleId": id,
        "Name": format!("{id} Role"),
        "IsPredefined": true,
        "AssignedPrivileges": role.privileges(),
        "OemPrivileges": [],
    }))
}

async fn privilege_map(State(shared): Shr, headers: HeaderMap) -> Response {
    authorized!(shared, headers, "Login");
    if !shared.lock().publish_privilege_map {
        return not_found("PrivilegeRegistry", "PrivilegeMap");
    }
    // The DMTF default mapping, which this simulator enforces.
    let op = |p: &str| json!([{"Privilege": [p]}]);
    let map = |read: &str, write: &str| json!({"GET": op(read), "HEAD": op(read), "PATCH": op(write), "POST": op(write), "PUT": op(write), "DELETE": op(write)});
    json_ok(json!({
        "@odata.id": "/redfish/v1/AccountService/PrivilegeMap",
        "@odata.type": "#PrivilegeRegistry.v1_1_4.PrivilegeRegistry",
        "Id": "PrivilegeMap",
        "Name": "Privilege Map",
        "PrivilegesUsed": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureComponents", "ConfigureSelf"],
        "Mappings": [
            {"Entity": "ComputerSystem", "OperationMap": map("Login", "ConfigureComponents")},
            {"Entity": "Chassis", "OperationMap": map("Login", "ConfigureComponents")},
            {"Entity": "Manager", "OperationMap": map("Login", "ConfigureManager")},
            {"Entity": "ManagerAccount", "OperationMap": map("ConfigureSelf", "ConfigureUsers")},
            {"Entity": "Role", "OperationMap": map("Login", "ConfigureManager")},
            {"Entity": "Session", "OperationMap": map("ConfigureSelf", "ConfigureSelf")},
        ],
    }))
}
