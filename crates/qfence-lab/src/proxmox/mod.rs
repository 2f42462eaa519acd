//! A Proxmox VE API simulator (`/api2/json` over HTTPS), for the lab and for fault tests.
//!
//! Model: one simulator is one cluster's API, answered by its `api_node`. The cluster has
//! [`Node`]s (online while powered and reachable), QEMU [`Vm`]s placed on nodes, users and
//! API tokens with ACLs, storage replication jobs, and tasks. Every answer uses the
//! `{"data": ...}` envelope; errors are `{"data": null, "message": "...\n"}` with the PVE
//! status codes (401, 403 `Permission check failed (PATH, PRIV)`, 500 for a failed action,
//! 501 for an unknown path, **595** for a request naming an offline node).
//!
//! Power actions (`POST .../status/{start,stop,shutdown,reset,reboot}`) return a UPID at
//! once; the task runs for `task_duration` and only then changes the VM, as on a real node:
//! a client must poll `/nodes/{node}/tasks/{upid}/status` (`running` → `stopped`,
//! `exitstatus` `OK`) and read `status/current` back.
//!
//! Replication jobs run on their own: every `interval` while the guest's node is online, a
//! sync is tried; it succeeds when the target is reachable, the link is up and no flapping
//! fault says otherwise. The status endpoints report what PVE's replication state file
//! holds (`last_sync`, `last_try`, `duration`, `fail_count`, `error`, `next_sync`), and,
//! as on PVE, it is read through the guest's node: once that node is down, it is 595.
//!
//! HA-managed guests ([`Vm::ha`]) go through the HA stack: a power request queues an
//! `hastart`/`hastop` task that ends `OK` at once, and the VM changes `ha_delay` later.
//!
//! Host power comes from outside: [`PveHandle::attach_power`] follows a BMC's power line
//! ([`crate::redfish::BmcHandle::power_line`]). A node that loses power goes offline and
//! its VMs stop; if it is the node answering the API, the whole API goes dark (connections
//! refused) until power returns.

// Helpers return the ready HTTP answer as their error: it is built once, on a cold path.
#![allow(clippy::result_large_err)]
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::faults::{self, Faults};
use crate::tls::{self, LabError, Server, TlsIdentity};

mod access;
mod cluster;
mod replication;
mod server;
mod tasks;
#[cfg(test)]
mod tests;
mod vms;

use access::*;
use cluster::*;
use replication::*;
use server::*;
use tasks::*;
use vms::*;

/// A cluster node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node name.
    pub name: String,
    /// Corosync node id.
    pub nodeid: u32,
    /// The node's cluster address (shown only; nothing connects to it).
    pub ip: String,
    /// The host has power (follows the BMC when attached).
    pub powered: bool,
    /// The node is reachable from the API node (false: cut off by the network).
    pub reachable: bool,
}

impl Node {
    /// A powered, reachable node.
    pub fn new(name: &str, nodeid: u32, ip: &str) -> Self {
        Self {
            name: name.to_owned(),
            nodeid,
            ip: ip.to_owned(),
            powered: true,
            reachable: true,
        }
    }

    /// Online as corosync sees it: powered and reachable.
    pub fn online(&self) -> bool {
        self.powered && self.reachable
    }
}

/// Whether a VM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmStatus {
    /// `running`.
    Running,
    /// `stopped`.
    Stopped,
}

impl VmStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
        }
    }
}

/// A QEMU guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The VM id.
    pub vmid: u32,
    /// Its name.
    pub name: String,
    /// The node its configuration lives on.
    pub node: String,
    /// Running or stopped.
    pub status: VmStatus,
    /// A configuration lock (`backup`, `migrate`, ...): power actions fail while set,
    /// except with `skiplock` from `root@pam`.
    pub lock: Option<String>,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Memory in bytes.
    pub maxmem: u64,
    /// When it was last started (epoch seconds), for `uptime`.
    pub started_at: Option<u64>,
    /// Its QEMU process id while running.
    pub pid: Option<u32>,
    /// Set when `vm:ID` is an HA resource: power requests then go through the HA stack.
    pub ha: Option<HaService>,
}

/// The HA state of an HA-managed guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaService {
    /// The requested state (`/cluster/ha/resources` `state`): `started` or `stopped`.
    pub requested: String,
    /// The CRM's service state: `started`, `stopped`, `request_stop`, `fence`, ...
    pub crm_state: String,
}

impl HaService {
    /// An HA resource requested `started` and running.
    pub fn started() -> Self {
        Self {
            requested: "started".to_owned(),
            crm_state: "started".to_owned(),
        }
    }
}

impl Vm {
    /// A VM with 2 CPUs and 2 GiB.
    pub fn new(vmid: u32, name: &str, node: &str, status: VmStatus) -> Self {
        Self {
            vmid,
            name: name.to_owned(),
            node: node.to_owned(),
            status,
            lock: None,
            cpus: 2,
            maxmem: 2 << 30,
            started_at: None,
            pid: None,
            ha: None,
        }
    }
}

/// One ACL entry: privileges on a path, inherited by sub-paths when `propagate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// `/`, `/vms`, `/vms/101`, `/nodes/pve1`, ...
    pub path: String,
    /// Privilege names (`VM.PowerMgmt`, `VM.Audit`, `Sys.Audit`, ...).
    pub privileges: Vec<String>,
    /// Whether sub-paths inherit it.
    pub propagate: bool,
}

impl Acl {
    /// An entry.
    pub fn new(path: &str, privileges: &[&str], propagate: bool) -> Self {
        Self {
            path: path.to_owned(),
            privileges: privileges.iter().map(|p| (*p).to_owned()).collect(),
            propagate,
        }
    }
}

/// A user (`root@pam` has every privilege whatever its ACL says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `name@realm`.
    pub userid: String,
    /// The password for ticket login; `None`: tokens only.
    pub password: Option<String>,
    /// The user's ACL.
    pub acl: Vec<Acl>,
}

/// An API token `USERID!NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The owning user.
    pub userid: String,
    /// The token name (after `!`).
    pub name: String,
    /// The secret (a UUID on real PVE).
    pub secret: String,
    /// Privilege separation: effective rights are the user's intersected with `acl`.
    pub privsep: bool,
    /// The token's own ACL (used only with `privsep`).
    pub acl: Vec<Acl>,
}

impl ApiToken {
    /// `USERID!NAME`.
    pub fn full_id(&self) -> String {
        format!("{}!{}", self.userid, self.name)
    }
}

/// Fault: replication attempts fail `fail` times, then succeed `succeed` times, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flapping {
    /// Failed attempts per cycle.
    pub fail: u32,
    /// Successful attempts per cycle.
    pub succeed: u32,
}

/// What PVE's replication state file holds for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationStatus {
    /// Start of the last successful sync, epoch seconds; 0 = never.
    pub last_sync: u64,
    /// Start of the last attempt, epoch seconds; 0 = never.
    pub last_try: u64,
    /// How long the last sync took, seconds.
    pub duration: f64,
    /// Failed attempts since the last success.
    pub fail_count: u32,
    /// The last error, while failing.
    pub error: Option<String>,
}

/// A storage replication job (`GUEST-JOBNUM`, for example `101-1`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationJob {
    /// `101-1`.
    pub id: String,
    /// The guest's VM id.
    pub guest: u32,
    /// The target node (a node of this cluster or of [`PveState::remote_nodes`]).
    pub target: String,
    /// The calendar schedule shown (real PVE default: `*/15`); timing uses `interval`.
    pub schedule: String,
    /// How often the simulator syncs.
    pub interval: Duration,
    /// `disable`.
    pub disable: bool,
    /// The replication link works (the lab cuts it when a site is failed).
    pub link_up: bool,
    /// Fault: flapping replication.
    pub flapping: Option<Flapping>,
    /// What the state file says.
    pub status: ReplicationStatus,
}

impl ReplicationJob {
    /// A never-synced job syncing every `interval`.
    pub fn new(id: &str, guest: u32, target: &str, interval: Duration) -> Self {
        Self {
            id: id.to_owned(),
            guest,
            target: target.to_owned(),
            schedule: "*/15".to_owned(),
            interval,
            disable: false,
            link_up: true,
            flapping: None,
            status: ReplicationStatus {
                last_sync: 0,
                last_try: 0,
                duration: 0.0,
                fail_count: 0,
                error: None,
            },
        }
    }

    fn jobnum(&self) -> u64 {
        self.id
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }
}

/// A worker task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The UPID.
    pub upid: String,
    /// The node it runs on.
    pub node: String,
    /// `qmstop`, `qmstart`, ...
    pub kind: String,
    /// The object (`101`).
    pub id: String,
    /// Who started it (`root@pam`, `root@pam!qfence`).
    pub user: String,
    /// Worker pid.
    pub pid: u32,
    /// Worker process start (clock ticks).
    pub pstart: u32,
    /// Start, epoch seconds.
    pub starttime: u64,
    /// End, epoch seconds, once stopped.
    pub endtime: Option<u64>,
    /// `OK`, or an error message, once stopped.
    pub exitstatus: Option<String>,
    /// Log lines.
    pub log: Vec<String>,
}

/// Everything the simulated cluster knows. Read it with [`PveHandle::snapshot`], change it
/// with [`PveHandle::update`].
#[derive(Debug, Clone, PartialEq)]
pub struct PveState {
    /// The cluster name in `/cluster/status`.
    pub cluster_name: String,
    /// `/version` `version`.
    pub version: String,
    /// `/version` `release`.
    pub release: String,
    /// The node answering the API (`local: 1`).
    pub api_node: String,
    /// Nodes, in node-id order.
    pub nodes: Vec<Node>,
    /// Replication targets outside this cluster, and whether each is reachable.
    pub remote_nodes: BTreeMap<String, bool>,
    /// Guests.
    pub vms: Vec<Vm>,
    /// Users.
    pub users: Vec<User>,
    /// API tokens.
    pub tokens: Vec<ApiToken>,
    /// Replication jobs.
    pub replication: Vec<ReplicationJob>,
    /// How long a power task runs before it takes effect.
    pub task_duration: Duration,
    /// How long the HA stack takes to act on a queued `hastart`/`hastop` request.
    pub ha_delay: Duration,
    /// Every task started, oldest first.
    pub tasks: Vec<Task>,
}

impl PveState {
    /// A one-node cluster, the node answering the API, with `root@pam` (password
    /// `root_password`) and no guests.
    pub fn single_node(cluster: &str, node: &str, root_password: &str) -> Self {
        Self {
            cluster_name: cluster.to_owned(),
            version: "9.0.10".to_owned(),
            release: "9.0".to_owned(),
            api_node: node.to_owned(),
            nodes: vec![Node::new(node, 1, "10.0.0.1")],
            remote_nodes: BTreeMap::new(),
            vms: Vec::new(),
            users: vec![User {
                userid: "root@pam".to_owned(),
                password: Some(root_password.to_owned()),
                acl: Vec::new(),
            }],
            tokens: Vec::new(),
            replication: Vec::new(),
            task_duration: Duration::from_millis(300),
            ha_delay: Duration::from_secs(1),
            tasks: Vec::new(),
        }
    }

    /// The node with this name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The VM with this id.
    pub fn vm(&self, vmid: u32) -> Option<&Vm> {
        self.vms.iter().find(|v| v.vmid == vmid)
    }

    /// The replication job with this id.
    pub fn job(&self, id: &str) -> Option<&ReplicationJob> {
        self.replication.iter().find(|j| j.id == id)
    }

    /// Whether the cluster has quorum: more than half of the nodes online.
    pub fn quorate(&self) -> bool {
        let online = self.nodes.iter().filter(|n| n.online()).count();
        online * 2 > self.nodes.len()
    }

    fn validate(&self) -> Result<(), LabError> {
        let bad = |m: String| Err(LabError::InvalidState(m));
        if self.node(&self.api_node).is_none() {
            return bad(format!("api_node {:?} is not a node", self.api_node));
        }
        let mut names = BTreeSet::new();
        for node in &self.nodes {
            if !names.insert(node.name.as_str()) {
                return bad(format!("node {:?} appears twice", node.name));
            }
        }
        let mut ids = BTreeSet::new();
        for vm in &self.vms {
            if !ids.insert(vm.vmid) {
                return bad(format!("VM {} appears twice", vm.vmid));
            }
            if self.node(&vm.node).is_none() {
                return bad(format!("VM {} is on unknown node {:?}", vm.vmid, vm.node));
            }
        }
        for job in &self.replication {
            let Some(vm) = self.vm(job.guest) else {
                return bad(format!(
                    "replication job {} names unknown guest {}",
                    job.id, job.guest
                ));
            };
            if !job.id.starts_with(&format!("{}-", job.guest)) {
                return bad(format!(
                    "replication job id {} must be GUEST-JOBNUM",
                    job.id
                ));
            }
            if job.target == vm.node {
                return bad(format!(
                    "replication job {} targets its own source node",
                    job.id
                ));
            }
            if job.interval.is_zero() {
                return bad(format!("replication job {} has a zero interval", job.id));
            }
        }
        Ok(())
    }
}

/// Wall-clock epoch seconds, advanced with tokio's clock so paused-time tests work.
#[derive(Debug)]
struct Clock {
    epoch_at_start: Duration,
    start: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            epoch_at_start: Duration::from_millis(qfence_model::time::now_unix_ms()),
            start: Instant::now(),
        }
    }

    fn epoch_at(&self, at: Instant) -> u64 {
        (self.epoch_at_start + at.saturating_duration_since(self.start)).as_secs()
    }

    fn now(&self) -> u64 {
        self.epoch_at(Instant::now())
    }
}

#[derive(Debug, Clone)]
struct Ticket {
    userid: String,
    csrf: String,
    expires: u64,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<PveState>,
    tickets: Mutex<BTreeMap<String, Ticket>>,
    /// Per replication job: when the next attempt is due.
    due: Mutex<BTreeMap<String, Instant>>,
    /// Per replication job: attempts made in the current flapping cycle.
    flap_position: Mutex<BTreeMap<String, u32>>,
    next_pid: Mutex<u32>,
    clock: Clock,
    faults: Faults,
    /// Requests answered so far, per kind: see [`PveHandle::reads`].
    reads: VmReads,
}

/// How many listings and single reads of VMs and replication jobs the simulator has answered
/// (counted as they arrive, whatever the answer): lets a test or a benchmark see how a client
/// reads.
#[derive(Debug, Default)]
pub struct VmReads {
    /// `GET /nodes/{node}/qemu`.
    pub listings: std::sync::atomic::AtomicU64,
    /// `GET /nodes/{node}/qemu/{vmid}/status/current`.
    pub status_current: std::sync::atomic::AtomicU64,
    /// `GET /nodes/{node}/replication`.
    pub job_listings: std::sync::atomic::AtomicU64,
    /// `GET /nodes/{node}/replication/{id}/status`.
    pub job_status: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PveState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies what follows from power: an unpowered node's VMs are stopped; an unpowered
    /// API node takes the API down.
    fn reconcile(&self) {
        let api_down = {
            let mut state = self.lock();
            let dead: BTreeSet<String> = state
                .nodes
                .iter()
                .filter(|n| !n.powered)
                .map(|n| n.name.clone())
                .collect();
            for vm in state.vms.iter_mut().filter(|v| dead.contains(&v.node)) {
                if let Some(ha) = vm.ha.as_mut()
                    && ha.requested == "started"
                {
                    // The CRM waits for the lost node to be fenced before recovering.
                    ha.crm_state = "fence".to_owned();
                }
                if vm.status == VmStatus::Running {
                    tracing::debug!(vmid = vm.vmid, node = %vm.node, "Simulated VM died with its host");
                }
                vm.status = VmStatus::Stopped;
                vm.pid = None;
                vm.started_at = None;
            }
            // A running VM has a QEMU process: give the ones set running by hand a pid.
            let now = self.clock.now();
            for vm in state
                .vms
                .iter_mut()
                .filter(|v| v.status == VmStatus::Running)
            {
                if vm.pid.is_none() {
                    vm.pid = Some(self.next_pid() + 10_000);
                }
                vm.started_at.get_or_insert(now);
            }
            let api_node = state.api_node.clone();
            state.node(&api_node).is_none_or(|n| !n.powered)
        };
        self.faults.set_host_down(api_down);
    }

    fn next_pid(&self) -> u32 {
        let mut pid = self.next_pid.lock().unwrap_or_else(|p| p.into_inner());
        *pid += 1;
        *pid
    }
}

/// Aborts a background task when dropped.
#[derive(Debug)]
struct Background(JoinHandle<()>);

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running Proxmox VE simulator.
#[derive(Debug)]
pub struct PveHandle {
    server: Server,
    fingerprint: String,
    shared: Arc<Shared>,
    background: Mutex<Vec<Background>>,
}

/// Starts a Proxmox VE simulator on `addr` (port 0 picks a free port) serving HTTPS with
/// `tls`.
pub async fn start(
    addr: SocketAddr,
    tls: TlsIdentity,
    state: PveState,
) -> Result<PveHandle, LabError> {
    state.validate()?;
    let clock = Clock::new();
    let max_pid = state.tasks.iter().map(|t| t.pid).max().unwrap_or(1000);
    let now = Instant::now();
    let due = state
        .replication
        .iter()
        .map(|j| (j.id.clone(), now))
        .collect();
    let faults = Faults::new();
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        tickets: Mutex::new(BTreeMap::new()),
        due: Mutex::new(due),
        flap_position: Mutex::new(BTreeMap::new()),
        next_pid: Mutex::new(max_pid),
        clock,
        faults: faults.clone(),
        reads: VmReads::default(),
    });
    shared.reconcile();
    let server = tls::serve(addr, &tls, faults.clone(), router(shared.clone(), faults)).await?;
    let replicator = Background(tokio::spawn(replicate_forever(shared.clone())));
    tracing::info!(addr = %server.addr, fingerprint = tls.fingerprint(), "Proxmox VE simulator started");
    Ok(PveHandle {
        server,
        fingerprint: tls.fingerprint().to_owned(),
        shared,
        background: Mutex::new(vec![replicator]),
    })
}

impl PveHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// `https://ADDR`, the base URL a driver is configured with (the API is under
    /// `/api2/json`).
    pub fn base_url(&self) -> String {
        tls::loopback_url(self.server.addr)
    }

    /// SHA-256 of the published certificate (lower-case hex), for `tls: {pin: ...}`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The connection and HTTP faults.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The VM reads answered so far.
    pub fn reads(&self) -> &VmReads {
        &self.shared.reads
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> PveState {
        self.shared.lock().clone()
    }

    /// Changes the state (nodes' power and reachability, VMs, jobs, faults); what follows
    /// from power (VMs stopping, the API going dark) is applied afterwards.
    pub fn update<R>(&self, change: impl FnOnce(&mut PveState) -> R) -> R {
        let result = change(&mut self.shared.lock());
        self.shared.reconcile();
        result
    }

    /// Powers a node on or off (as its BMC would). Returns false for an unknown node.
    pub fn set_node_powered(&self, node: &str, powered: bool) -> bool {
        set_powered(&self.shared, node, powered)
    }

    /// Makes a node follow a host power line (for example
    /// [`crate::redfish::BmcHandle::power_line`]), now and until shutdown. For a name in
    /// [`PveState::remote_nodes`] it drives that target's reachability instead.
    pub fn attach_power(&self, node: &str, mut line: watch::Receiver<bool>) {
        let shared = self.shared.clone();
        let node = node.to_owned();
        let task = tokio::spawn(async move {
            loop {
                let powered = *line.borrow_and_update();
                if !set_powered(&shared, &node, powered) {
                    shared.lock().remote_nodes.insert(node.clone(), powered);
                }
                if line.changed().await.is_err() {
                    return;
                }
            }
        });
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Background(task));
    }

    /// Stops the server and its background tasks.
    pub async fn shutdown(self) {
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.server.shutdown().await;
    }
}

fn set_powered(shared: &Shared, node: &str, powered: bool) -> bool {
    let found = {
        let mut state = shared.lock();
        match state.nodes.iter_mut().find(|n| n.name == node) {
            Some(n) => {
                n.powered = powered;
                true
            }
            None => false,
        }
    };
    if found {
        tracing::debug!(node, powered, "Simulated PVE node power changed");
        shared.reconcile();
    }
    found
}
