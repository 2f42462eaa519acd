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

/// The caller with the privilege, or the 401/403 answer. Defined before the modules that use it.
macro_rules! authorized {
    ($shared:expr, $headers:expr, $privilege:expr) => {
        match authorize(&$shared, &$headers, $privilege) {
            Ok(caller) => caller,
            Err(response) => return response,
        }
    };
}

mod accounts;
mod server;
mod systems;
mod tasks;

use accounts::*;
use server::*;
use systems::*;
use tasks::*;

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
