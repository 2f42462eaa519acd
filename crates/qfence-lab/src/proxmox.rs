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

// ---------------------------------------------------------------------------------------
// Replication

async fn replicate_forever(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        replicate_due(&shared, Instant::now());
    }
}

/// Runs every job whose time has come. A sync takes no simulated time; its `duration` is
/// a plausible constant.
fn replicate_due(shared: &Shared, now: Instant) {
    let mut state = shared.lock();
    let mut due = shared.due.lock().unwrap_or_else(|p| p.into_inner());
    let mut flaps = shared
        .flap_position
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let epoch = shared.clock.epoch_at(now);
    let nodes: BTreeMap<String, bool> = state
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.online()))
        .collect();
    let remote = state.remote_nodes.clone();
    let placement: BTreeMap<u32, String> =
        state.vms.iter().map(|v| (v.vmid, v.node.clone())).collect();
    for job in state.replication.iter_mut().filter(|j| !j.disable) {
        let when = *due.entry(job.id.clone()).or_insert(now);
        if now < when {
            continue;
        }
        let Some(source) = placement.get(&job.guest) else {
            continue;
        };
        // A dead source node runs nothing and records nothing.
        if !nodes.get(source).copied().unwrap_or(false) {
            continue;
        }
        let target_up = nodes
            .get(&job.target)
            .or_else(|| remote.get(&job.target))
            .copied()
            .unwrap_or(false);
        let flapping_fails = job.flapping.is_some_and(|f| {
            let position = flaps.entry(job.id.clone()).or_insert(0);
            let cycle = (f.fail + f.succeed).max(1);
            let fails = *position % cycle < f.fail;
            *position += 1;
            fails
        });
        job.status.last_try = epoch;
        let error = if !target_up || !job.link_up {
            Some(format!(
                "command '/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias={t}' root@{t} -- pvesr prepare-local-job {id} --scan local-lvm --last_sync {last}' failed: exit code 255",
                t = job.target,
                id = job.id,
                last = job.status.last_sync
            ))
        } else if flapping_fails {
            Some(format!(
                "command 'zfs recv -F -- rpool/data/vm-{g}-disk-0' failed: exit code 1",
                g = job.guest
            ))
        } else {
            None
        };
        match error {
            None => {
                job.status.last_sync = epoch;
                job.status.duration = 1.52;
                job.status.fail_count = 0;
                job.status.error = None;
                due.insert(job.id.clone(), now + job.interval);
            }
            Some(error) => {
                job.status.fail_count += 1;
                job.status.error = Some(error);
                // PVE retries after 5 min × fail_count, at most 30 min; here one interval
                // stands for 5 min.
                let backoff = job.interval * job.status.fail_count.min(6);
                due.insert(job.id.clone(), now + backoff);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP

type Shr = State<Arc<Shared>>;

fn router(shared: Arc<Shared>, faults: Faults) -> Router {
    let api = Router::new()
        .route("/api2/json/version", get(version))
        .route("/api2/json/access/ticket", post(create_ticket))
        .route("/api2/json/access/permissions", get(permissions))
        .route("/api2/json/cluster/status", get(cluster_status))
        .route("/api2/json/cluster/resources", get(cluster_resources))
        .route("/api2/json/cluster/replication", get(replication_config))
        .route(
            "/api2/json/cluster/replication/{id}",
            get(replication_config_one),
        )
        .route("/api2/json/cluster/ha/resources", get(ha_resources))
        .route("/api2/json/cluster/ha/resources/{sid}", get(ha_resource))
        .route("/api2/json/cluster/ha/status/current", get(ha_status))
        .route("/api2/json/nodes", get(nodes))
        .route("/api2/json/nodes/{node}/status", get(node_status))
        .route("/api2/json/nodes/{node}/qemu", get(node_vms))
        .route(
            "/api2/json/nodes/{node}/qemu/{vmid}/status/current",
            get(vm_current),
        )
        .route("/api2/json/nodes/{node}/qemu/{vmid}/config", get(vm_config))
        .route(
            "/api2/json/nodes/{node}/qemu/{vmid}/status/{action}",
            post(vm_action),
        )
        .route("/api2/json/nodes/{node}/tasks", get(tasks))
        .route(
            "/api2/json/nodes/{node}/tasks/{upid}/status",
            get(task_status),
        )
        .route("/api2/json/nodes/{node}/tasks/{upid}/log", get(task_log))
        .route(
            "/api2/json/nodes/{node}/replication",
            get(replication_status_list),
        )
        .route(
            "/api2/json/nodes/{node}/replication/{id}/status",
            get(replication_status_one),
        )
        .route(
            "/api2/json/nodes/{node}/replication/{id}/schedule_now",
            post(replication_schedule_now),
        )
        .fallback(|method: Method, uri: Uri| async move {
            let path = uri.path().strip_prefix("/api2/json").unwrap_or(uri.path());
            pve_error(
                StatusCode::NOT_IMPLEMENTED,
                &format!("Method '{method} {path}' not implemented"),
            )
        })
        .with_state(shared);
    Router::new()
        .fallback_service(api)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            faults::http_faults(faults.clone(), storm_error, req, next)
        }))
}

fn storm_error(status: StatusCode) -> Response {
    pve_error(status, "proxy loop detected or server error")
}

fn data(value: Value) -> Response {
    (StatusCode::OK, axum::Json(json!({"data": value}))).into_response()
}

/// PVE's error answer. The message also travels in the HTTP reason phrase on real PVE;
/// here it is only in the body, as newer PVE versions also send it.
fn pve_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"data": null, "message": format!("{message}\n")})),
    )
        .into_response()
}

fn forbidden(path: &str, privilege: &str) -> Response {
    pve_error(
        StatusCode::FORBIDDEN,
        &format!("Permission check failed ({path}, {privilege})"),
    )
}

fn no_route() -> Response {
    pve_error(
        StatusCode::from_u16(595).unwrap_or(StatusCode::BAD_GATEWAY),
        "No route to host",
    )
}

/// Who is calling.
#[derive(Debug, Clone)]
enum Principal {
    User(String),
    Token { userid: String, name: String },
}

impl Principal {
    /// As PVE writes it in task UPIDs and `userid` parameters.
    fn id(&self) -> String {
        match self {
            Self::User(u) => u.clone(),
            Self::Token { userid, name } => format!("{userid}!{name}"),
        }
    }

    fn userid(&self) -> &str {
        match self {
            Self::User(u) | Self::Token { userid: u, .. } => u,
        }
    }
}

fn authenticate(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    let unauthorized = |m: &str| pve_error(StatusCode::UNAUTHORIZED, m);
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(token) = value.strip_prefix("PVEAPIToken=")
    {
        let (full, secret) = token
            .split_once('=')
            .ok_or_else(|| unauthorized("authentication failure"))?;
        let (userid, name) = full
            .split_once('!')
            .ok_or_else(|| unauthorized("authentication failure"))?;
        let state = shared.lock();
        let known = state
            .tokens
            .iter()
            .any(|t| t.userid == userid && t.name == name && t.secret == secret);
        if !known {
            return Err(unauthorized("authentication failure"));
        }
        return Ok(Principal::Token {
            userid: userid.to_owned(),
            name: name.to_owned(),
        });
    }
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == "PVEAuthCookie")
        .map(|(_, v)| percent_decode(v));
    let Some(ticket) = cookie else {
        return Err(unauthorized("No ticket"));
    };
    let found = shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&ticket)
        .cloned();
    let Some(found) = found.filter(|t| t.expires > shared.clock.now()) else {
        return Err(unauthorized("permission denied - invalid PVE ticket"));
    };
    if *method != Method::GET && *method != Method::HEAD {
        let csrf = headers
            .get("CSRFPreventionToken")
            .and_then(|v| v.to_str().ok());
        if csrf != Some(found.csrf.as_str()) {
            return Err(unauthorized("Permission denied - invalid csrf token"));
        }
    }
    Ok(Principal::User(found.userid))
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

macro_rules! authenticated {
    ($shared:expr, $method:expr, $headers:expr) => {
        match authenticate(&$shared, &$method, &$headers) {
            Ok(principal) => principal,
            Err(response) => return response,
        }
    };
}

/// Every privilege PVE 9 knows (what `root@pam` holds).
const ALL_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Group.Allocate",
    "Mapping.Audit",
    "Mapping.Modify",
    "Mapping.Use",
    "Permissions.Modify",
    "Pool.Allocate",
    "Pool.Audit",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "SDN.Allocate",
    "SDN.Audit",
    "SDN.Use",
    "Sys.AccessNetwork",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Incoming",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "User.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Replicate",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

/// Privileges from `acl` that apply on `path`, with their propagate flag.
fn acl_privileges(acl: &[Acl], path: &str) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for entry in acl {
        let prefix = if entry.path == "/" {
            "/".to_owned()
        } else {
            format!("{}/", entry.path)
        };
        let applies = entry.path == path || (entry.propagate && path.starts_with(&prefix));
        if applies {
            for p in &entry.privileges {
                let flag = out.entry(p.clone()).or_insert(false);
                *flag |= entry.propagate;
            }
        }
    }
    out
}

/// The privileges `who` has on `path` (name → propagate), as `/access/permissions` shows.
/// More specific ACL entries add to inherited ones (real PVE lets them replace; the
/// simulator's ACLs do not rely on that).
fn effective(state: &PveState, who: &Principal, path: &str) -> BTreeMap<String, bool> {
    if who.userid() == "root@pam" && matches!(who, Principal::User(_)) {
        return ALL_PRIVILEGES
            .iter()
            .map(|p| ((*p).to_owned(), true))
            .collect();
    }
    let user_privs = if who.userid() == "root@pam" {
        ALL_PRIVILEGES
            .iter()
            .map(|p| ((*p).to_owned(), true))
            .collect()
    } else {
        state
            .users
            .iter()
            .find(|u| u.userid == who.userid())
            .map(|u| acl_privileges(&u.acl, path))
            .unwrap_or_default()
    };
    match who {
        Principal::User(_) => user_privs,
        Principal::Token { userid, name } => {
            let Some(token) = state
                .tokens
                .iter()
                .find(|t| &t.userid == userid && &t.name == name)
            else {
                return BTreeMap::new();
            };
            if !token.privsep {
                return user_privs;
            }
            let own = acl_privileges(&token.acl, path);
            user_privs
                .into_iter()
                .filter_map(|(p, prop)| own.get(&p).map(|tprop| (p, prop && *tprop)))
                .collect()
        }
    }
}

fn allowed(state: &PveState, who: &Principal, path: &str, privilege: &str) -> bool {
    effective(state, who, path).contains_key(privilege)
}

/// The node a request names: 500 for an unknown one (PVE cannot resolve it), 595 for an
/// offline one (the proxied call cannot reach it).
fn reach_node(state: &PveState, node: &str) -> Result<(), Response> {
    match state.node(node) {
        None => Err(pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
            ),
        )),
        Some(n) if !n.online() => Err(no_route()),
        Some(_) => Ok(()),
    }
}

/// POST parameters: query string, then a form or JSON body.
fn parameters(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
            for (k, v) in map {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(k, text);
            }
        }
    } else {
        out.extend(url::form_urlencoded::parse(body).into_owned());
    }
    out
}

async fn version(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    authenticated!(shared, method, headers);
    let state = shared.lock();
    data(json!({
        "version": state.version,
        "release": state.release,
        "repoid": "5a1f3e2b",
        "console": "xtermjs",
    }))
}

async fn create_ticket(State(shared): Shr, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let params = parameters(&uri, &headers, &body);
    let failure = || pve_error(StatusCode::UNAUTHORIZED, "authentication failure");
    let (Some(username), Some(password)) = (params.get("username"), params.get("password")) else {
        return pve_error(StatusCode::BAD_REQUEST, "Parameter verification failed.");
    };
    let userid = match params.get("realm") {
        Some(realm) if !username.contains('@') => format!("{username}@{realm}"),
        _ => username.clone(),
    };
    let now = shared.clock.now();
    // A valid ticket works as the password (renewal).
    let renewing = shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(password)
        .is_some_and(|t| t.userid == userid && t.expires > now);
    let password_ok = shared
        .lock()
        .users
        .iter()
        .any(|u| u.userid == userid && u.password.as_deref() == Some(password.as_str()));
    if !renewing && !password_ok {
        return failure();
    }
    let ticket = format!("PVE:{userid}:{now:08X}::{}", random_token(32));
    let csrf = format!("{now:08X}:{}", random_token(20));
    shared
        .tickets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            ticket.clone(),
            Ticket {
                userid: userid.clone(),
                csrf: csrf.clone(),
                expires: now + 2 * 3600,
            },
        );
    data(json!({
        "ticket": ticket,
        "CSRFPreventionToken": csrf,
        "username": userid,
        "cap": {},
    }))
}

fn random_token(bytes: usize) -> String {
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut buf = vec![0u8; bytes];
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}

async fn permissions(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    // Whose permissions: one's own, or (for a user) one of its tokens; others need
    // Sys.Audit on /access.
    let subject = match query.get("userid") {
        None => caller.clone(),
        Some(id) if *id == caller.id() => caller.clone(),
        Some(id) => {
            let parsed = match id.split_once('!') {
                Some((u, n)) => Principal::Token {
                    userid: u.to_owned(),
                    name: n.to_owned(),
                },
                None => Principal::User(id.clone()),
            };
            let own_token = matches!(caller, Principal::User(_))
                && matches!(&parsed, Principal::Token { userid, .. } if userid == caller.userid());
            if !own_token && !allowed(&state, &caller, "/access", "Sys.Audit") {
                return forbidden("/access", "Sys.Audit");
            }
            parsed
        }
    };
    let paths: Vec<String> = match query.get("path") {
        Some(p) => vec![p.clone()],
        None => {
            let mut paths: BTreeSet<String> = BTreeSet::from(["/".to_owned()]);
            if let Some(u) = state.users.iter().find(|u| u.userid == subject.userid()) {
                paths.extend(u.acl.iter().map(|a| a.path.clone()));
            }
            if let Principal::Token { userid, name } = &subject
                && let Some(t) = state
                    .tokens
                    .iter()
                    .find(|t| &t.userid == userid && &t.name == name)
            {
                paths.extend(t.acl.iter().map(|a| a.path.clone()));
            }
            paths.into_iter().collect()
        }
    };
    let mut out = Map::new();
    for path in paths {
        let privs = effective(&state, &subject, &path);
        if privs.is_empty() && !query.contains_key("path") {
            continue;
        }
        let entry: Map<String, Value> = privs
            .into_iter()
            .map(|(p, prop)| (p, json!(u8::from(prop))))
            .collect();
        out.insert(path, Value::Object(entry));
    }
    data(Value::Object(out))
}

async fn cluster_status(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let online = state.nodes.iter().filter(|n| n.online()).count();
    let mut out = vec![json!({
        "type": "cluster",
        "id": "cluster",
        "name": state.cluster_name,
        "nodes": state.nodes.len(),
        "quorate": u8::from(state.quorate()),
        "version": state.nodes.len(),
        "online": online,
    })];
    for node in &state.nodes {
        out.push(json!({
            "type": "node",
            "id": format!("node/{}", node.name),
            "name": node.name,
            "nodeid": node.nodeid,
            "ip": node.ip,
            "online": u8::from(node.online()),
            "local": u8::from(node.name == state.api_node),
            "level": "",
        }));
    }
    data(Value::Array(out))
}

/// Usage counters PVE reports for a guest; plausible constants, zero when stopped.
fn add_usage(entry: &mut Value, vm: &Vm) {
    let running = vm.status == VmStatus::Running;
    let counters = [
        ("cpu", json!(if running { 0.02 } else { 0.0 })),
        ("mem", json!(if running { vm.maxmem / 4 } else { 0 })),
        ("disk", json!(0)),
        ("maxdisk", json!(34_359_738_368_u64)),
        ("diskread", json!(0)),
        ("diskwrite", json!(0)),
        ("netin", json!(0)),
        ("netout", json!(0)),
    ];
    if let Some(obj) = entry.as_object_mut() {
        for (key, value) in counters {
            obj.insert(key.to_owned(), value);
        }
    }
}

fn uptime(shared: &Shared, vm: &Vm) -> u64 {
    match (vm.status, vm.started_at) {
        (VmStatus::Running, Some(t)) => shared.clock.now().saturating_sub(t),
        _ => 0,
    }
}

async fn cluster_resources(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    let kind = query.get("type").map(String::as_str);
    let mut out = Vec::new();
    if kind.is_none() || kind == Some("node") {
        for node in &state.nodes {
            out.push(json!({
                "id": format!("node/{}", node.name),
                "type": "node",
                "node": node.name,
                "status": if node.online() { "online" } else { "offline" },
                "level": "",
                "maxcpu": 8,
                "maxmem": 34_359_738_368_u64,
            }));
        }
    }
    if kind.is_none() || kind == Some("vm") {
        for vm in &state.vms {
            // Entries the caller may not audit are silently left out, as on PVE.
            if !allowed(&state, &caller, &format!("/vms/{}", vm.vmid), "VM.Audit") {
                continue;
            }
            let node_online = state.node(&vm.node).is_some_and(Node::online);
            let status = if node_online {
                vm.status.as_str()
            } else {
                "unknown"
            };
            let mut entry = json!({
                "id": format!("qemu/{}", vm.vmid),
                "type": "qemu",
                "vmid": vm.vmid,
                "node": vm.node,
                "name": vm.name,
                "status": status,
                "template": 0,
                "maxcpu": vm.cpus,
                "maxmem": vm.maxmem,
                "uptime": uptime(&shared, vm),
            });
            add_usage(&mut entry, vm);
            if let Some(lock) = &vm.lock {
                entry["lock"] = json!(lock);
            }
            if let Some(ha) = &vm.ha {
                entry["hastate"] = json!(ha.crm_state);
            }
            out.push(entry);
        }
    }
    data(Value::Array(out))
}

async fn nodes(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    authenticated!(shared, method, headers);
    let state = shared.lock();
    let out: Vec<Value> = state
        .nodes
        .iter()
        .map(|n| {
            if n.online() {
                json!({"node": n.name, "id": format!("node/{}", n.name), "type": "node", "status": "online", "level": "", "maxcpu": 8, "maxmem": 34_359_738_368_u64, "uptime": 86_400})
            } else {
                json!({"node": n.name, "id": format!("node/{}", n.name), "type": "node", "status": "offline"})
            }
        })
        .collect();
    data(Value::Array(out))
}

async fn node_status(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    if !allowed(&state, &caller, &format!("/nodes/{node}"), "Sys.Audit") {
        return forbidden(&format!("/nodes/{node}"), "Sys.Audit");
    }
    data(json!({
        "uptime": 86_400,
        "pveversion": format!("pve-manager/{}/5a1f3e2b", state.version),
        "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2 (2025-07-22T10:04Z) x86_64",
        "cpu": 0.03,
        "memory": {"total": 34_359_738_368_u64, "used": 4_294_967_296_u64, "free": 30_064_771_072_u64},
    }))
}

async fn node_vms(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(node): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    // `full=1` adds what asking each VM's QEMU gives, qmpstatus among it, as PVE's does.
    let full = query.get("full").is_some_and(|f| f == "1");
    shared
        .reads
        .listings
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let out: Vec<Value> = state
        .vms
        .iter()
        .filter(|v| v.node == node)
        .filter(|v| allowed(&state, &caller, &format!("/vms/{}", v.vmid), "VM.Audit"))
        .map(|v| {
            let mut entry = json!({
                "vmid": v.vmid,
                "name": v.name,
                "status": v.status.as_str(),
                "cpus": v.cpus,
                "maxmem": v.maxmem,
                "uptime": uptime(&shared, v),
            });
            if let Some(pid) = v.pid {
                entry["pid"] = json!(pid);
            }
            if let Some(lock) = &v.lock {
                entry["lock"] = json!(lock);
            }
            if full && v.status == VmStatus::Running {
                entry["qmpstatus"] = json!(v.status.as_str());
            }
            entry
        })
        .collect();
    data(Value::Array(out))
}

/// The VM `vmid` on `node`, as PVE finds it: by its configuration file on that node.
fn vm_on<'a>(state: &'a PveState, node: &str, vmid: &str) -> Result<&'a Vm, Response> {
    let missing = || {
        pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
        )
    };
    let id: u32 = vmid
        .parse()
        .map_err(|_| pve_error(StatusCode::BAD_REQUEST, "Parameter verification failed."))?;
    state
        .vms
        .iter()
        .find(|v| v.vmid == id && v.node == node)
        .ok_or_else(missing)
}

async fn vm_current(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, vmid)): Path<(String, String)>,
) -> Response {
    shared
        .reads
        .status_current
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let path = format!("/vms/{vmid}");
    if !allowed(&state, &caller, &path, "VM.Audit") {
        return forbidden(&path, "VM.Audit");
    }
    let vm = match vm_on(&state, &node, &vmid) {
        Ok(vm) => vm,
        Err(r) => return r,
    };
    let mut out = json!({
        "vmid": vm.vmid,
        "name": vm.name,
        "status": vm.status.as_str(),
        "qmpstatus": vm.status.as_str(),
        "cpus": vm.cpus,
        "maxmem": vm.maxmem,
        "uptime": uptime(&shared, vm),
        "ha": match &vm.ha {
            Some(ha) => json!({"managed": 1, "state": ha.crm_state}),
            None => json!({"managed": 0}),
        },
        "agent": 0,
    });
    add_usage(&mut out, vm);
    if let Some(pid) = vm.pid {
        out["pid"] = json!(pid);
    }
    if let Some(lock) = &vm.lock {
        out["lock"] = json!(lock);
    }
    data(out)
}

async fn vm_config(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, vmid)): Path<(String, String)>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let path = format!("/vms/{vmid}");
    if !allowed(&state, &caller, &path, "VM.Audit") {
        return forbidden(&path, "VM.Audit");
    }
    let vm = match vm_on(&state, &node, &vmid) {
        Ok(vm) => vm,
        Err(r) => return r,
    };
    let text = format!("{}:{}:{}", vm.vmid, vm.name, vm.node);
    let digest = crate::tls::sha256_fingerprint(text.as_bytes());
    let mut out = json!({
        "name": vm.name,
        "cores": vm.cpus,
        "sockets": 1,
        // PVE sends memory as a property string.
        "memory": (vm.maxmem >> 20).to_string(),
        "smbios1": format!("uuid={:08x}-0000-4000-8000-{:012x}", vm.vmid, vm.vmid),
        "digest": digest.get(..40).unwrap_or(&digest),
    });
    if let Some(lock) = &vm.lock {
        out["lock"] = json!(lock);
    }
    data(out)
}

/// What a power task does when it finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Start,
    Stop,
    Restart,
    Nothing,
}

async fn vm_action(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    Path((node, vmid, action)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let params = parameters(&uri, &headers, &body);
    let (vm, task_duration) = {
        let state = shared.lock();
        if let Err(r) = reach_node(&state, &node) {
            return r;
        }
        let path = format!("/vms/{vmid}");
        if !allowed(&state, &caller, &path, "VM.PowerMgmt") {
            return forbidden(&path, "VM.PowerMgmt");
        }
        // pmxcfs is read-only without quorum: the VM's config cannot be locked.
        if !state.quorate() {
            return pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cluster not ready - no quorum?",
            );
        }
        match vm_on(&state, &node, &vmid) {
            Ok(vm) => (vm.clone(), state.task_duration),
            Err(r) => return r,
        }
    };
    let kind = match action.as_str() {
        "start" => "qmstart",
        "stop" => "qmstop",
        "shutdown" => "qmshutdown",
        "reset" => "qmreset",
        "reboot" => "qmreboot",
        _ => {
            return pve_error(
                StatusCode::NOT_IMPLEMENTED,
                &format!("Method 'POST /nodes/{node}/qemu/{vmid}/status/{action}' not implemented"),
            );
        }
    };
    let skiplock = params.get("skiplock").is_some_and(|v| v == "1");
    if skiplock && caller.id() != "root@pam" {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "data": null,
                "errors": {"skiplock": "Only root may use this option."},
                "message": "Parameter verification failed.\n",
            })),
        )
            .into_response();
    }
    let running = vm.status == VmStatus::Running;
    if vm.ha.is_some() && matches!(action.as_str(), "start" | "stop" | "shutdown") {
        return ha_request(&shared, &node, &vmid, vm.vmid, action == "start", &caller);
    }
    // Checked before the worker starts, as PVE does.
    if matches!(action.as_str(), "shutdown" | "reset" | "reboot") && !running {
        return pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("VM {vmid} not running"),
        );
    }
    // Checked inside the worker: the task fails.
    let failure = match (&vm.lock, skiplock) {
        (Some(lock), false) => Some(format!("VM is locked ({lock})")),
        _ if action == "start" && running => Some(format!("VM {vmid} already running")),
        _ => None,
    };
    let effect = match action.as_str() {
        _ if failure.is_some() => Effect::Nothing,
        "start" => Effect::Start,
        "stop" | "shutdown" if running => Effect::Stop,
        "reset" | "reboot" => Effect::Restart,
        _ => Effect::Nothing,
    };
    let task = new_task(&shared, &node, kind, &vmid, &caller);
    let upid = task.upid.clone();
    shared.lock().tasks.push(task);
    tracing::debug!(%upid, ?effect, "Simulated PVE task started");
    if task_duration.is_zero() {
        finish_task(&shared, &upid, vm.vmid, effect, failure);
    } else {
        let shared = shared.clone();
        let done = upid.clone();
        tokio::spawn(async move {
            tokio::time::sleep(task_duration).await;
            finish_task(&shared, &done, vm.vmid, effect, failure);
        });
    }
    data(json!(upid))
}

/// An HA-managed guest: the request is queued for the HA stack in an `hastart`/`hastop`
/// task that ends OK at once; the VM changes `ha_delay` later. `OK` only means "queued".
fn ha_request(
    shared: &Arc<Shared>,
    node: &str,
    vmid: &str,
    id: u32,
    start: bool,
    caller: &Principal,
) -> Response {
    let kind = if start { "hastart" } else { "hastop" };
    let task = new_task(shared, node, kind, vmid, caller);
    let upid = task.upid.clone();
    let delay = {
        let mut state = shared.lock();
        state.tasks.push(task);
        if let Some(ha) = state
            .vms
            .iter_mut()
            .find(|v| v.vmid == id)
            .and_then(|v| v.ha.as_mut())
        {
            ha.requested = if start { "started" } else { "stopped" }.to_owned();
            if !start && ha.crm_state == "started" {
                ha.crm_state = "request_stop".to_owned();
            }
        }
        state.ha_delay
    };
    finish_task(shared, &upid, id, Effect::Nothing, None);
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let mut state = shared.lock();
        let Some(vm) = state.vms.iter().find(|v| v.vmid == id).cloned() else {
            return;
        };
        if !state.node(&vm.node).is_some_and(Node::online) {
            return;
        }
        let pid = if start {
            Some(shared.next_pid() + 10_000)
        } else {
            None
        };
        let now = shared.clock.now();
        if let Some(vm) = state.vms.iter_mut().find(|v| v.vmid == id) {
            let wanted = vm.ha.as_ref().map(|h| h.requested == "started");
            if wanted != Some(start) {
                return; // a newer request changed its mind
            }
            if start && vm.status != VmStatus::Running {
                vm.status = VmStatus::Running;
                vm.pid = pid;
                vm.started_at = Some(now);
            } else if !start {
                vm.status = VmStatus::Stopped;
                vm.pid = None;
                vm.started_at = None;
            }
            if let Some(ha) = vm.ha.as_mut() {
                ha.crm_state = if start { "started" } else { "stopped" }.to_owned();
            }
        }
    });
    data(json!(upid))
}

fn new_task(shared: &Shared, node: &str, kind: &str, id: &str, caller: &Principal) -> Task {
    let pid = shared.next_pid();
    let pstart = pid.wrapping_mul(7) + 4000;
    let starttime = shared.clock.now();
    let user = caller.id();
    Task {
        upid: format!("UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{id}:{user}:"),
        node: node.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        user,
        pid,
        pstart,
        starttime,
        endtime: None,
        exitstatus: None,
        log: Vec::new(),
    }
}

fn finish_task(shared: &Shared, upid: &str, vmid: u32, effect: Effect, failure: Option<String>) {
    let now = shared.clock.now();
    let mut state = shared.lock();
    let node = state
        .tasks
        .iter()
        .find(|t| t.upid == upid)
        .map(|t| t.node.clone())
        .unwrap_or_default();
    // A worker on a node that lost power never reports back properly.
    let node_alive = state.node(&node).is_some_and(|n| n.powered);
    let outcome = if !node_alive {
        Err("unexpected status".to_owned())
    } else if let Some(message) = failure {
        Err(message)
    } else {
        Ok(())
    };
    if outcome.is_ok() {
        let next_pid = if effect == Effect::Nothing {
            None
        } else {
            Some(shared.next_pid() + 10_000)
        };
        if let Some(vm) = state.vms.iter_mut().find(|v| v.vmid == vmid) {
            match effect {
                Effect::Start | Effect::Restart => {
                    vm.status = VmStatus::Running;
                    vm.pid = next_pid;
                    vm.started_at = Some(now);
                }
                Effect::Stop => {
                    vm.status = VmStatus::Stopped;
                    vm.pid = None;
                    vm.started_at = None;
                }
                Effect::Nothing => {}
            }
        }
    }
    if let Some(task) = state.tasks.iter_mut().find(|t| t.upid == upid) {
        task.endtime = Some(now);
        match outcome {
            Ok(()) => {
                task.exitstatus = Some("OK".to_owned());
                task.log.push("TASK OK".to_owned());
            }
            Err(message) => {
                task.log.push(format!("TASK ERROR: {message}"));
                task.exitstatus = Some(message);
            }
        }
    }
}

fn task_body(task: &Task) -> Value {
    let mut out = json!({
        "upid": task.upid,
        "node": task.node,
        "pid": task.pid,
        "pstart": task.pstart,
        "starttime": task.starttime,
        "type": task.kind,
        "id": task.id,
        "user": task.user,
        "status": if task.exitstatus.is_some() { "stopped" } else { "running" },
    });
    if let Some((_, token)) = task.user.split_once('!') {
        out["tokenid"] = json!(token);
    }
    if let Some(exit) = &task.exitstatus {
        out["exitstatus"] = json!(exit);
    }
    out
}

/// The task, if the caller may see it: its owner, or `Sys.Audit` on the node.
fn visible_task<'a>(
    state: &'a PveState,
    caller: &Principal,
    node: &str,
    upid: &str,
) -> Result<&'a Task, Response> {
    let task = state
        .tasks
        .iter()
        .find(|t| t.upid == upid && t.node == node)
        .ok_or_else(|| {
            pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unable to parse worker upid '{upid}'"),
            )
        })?;
    let owner = task.user == caller.id() || task.user == caller.userid();
    if !owner && !allowed(state, caller, &format!("/nodes/{node}"), "Sys.Audit") {
        return Err(forbidden(&format!("/nodes/{node}"), "Sys.Audit"));
    }
    Ok(task)
}

async fn tasks(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let audit = allowed(&state, &caller, &format!("/nodes/{node}"), "Sys.Audit");
    let out: Vec<Value> = state
        .tasks
        .iter()
        .rev()
        .filter(|t| t.node == node && (audit || t.user == caller.id()))
        .map(|t| {
            let mut entry = task_body(t);
            if let Some(obj) = entry.as_object_mut() {
                // The list has `status` = the exit status once ended, and `endtime`.
                obj.remove("exitstatus");
                match (&t.exitstatus, t.endtime) {
                    (Some(exit), Some(end)) => {
                        obj.insert("status".into(), json!(exit));
                        obj.insert("endtime".into(), json!(end));
                    }
                    _ => {
                        obj.remove("status");
                    }
                }
            }
            entry
        })
        .collect();
    data(Value::Array(out))
}

async fn task_status(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, upid)): Path<(String, String)>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    match visible_task(&state, &caller, &node, &upid) {
        Ok(task) => data(task_body(task)),
        Err(r) => r,
    }
}

async fn task_log(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, upid)): Path<(String, String)>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    match visible_task(&state, &caller, &node, &upid) {
        Ok(task) => data(Value::Array(
            task.log
                .iter()
                .enumerate()
                .map(|(i, line)| json!({"n": i + 1, "t": line}))
                .collect(),
        )),
        Err(r) => r,
    }
}

/// A job's configuration; `source` is the node its guest lives on (looked up by the caller,
/// which for a listing of thousands of jobs looks each up in a map, not in the VM list).
fn job_config(source: Option<&str>, job: &ReplicationJob) -> Value {
    let mut out = json!({
        "id": job.id,
        "type": "local",
        "guest": job.guest,
        "jobnum": job.jobnum(),
        "target": job.target,
        "schedule": job.schedule,
    });
    if let Some(node) = source {
        out["source"] = json!(node);
    }
    if job.disable {
        out["disable"] = json!(1);
    }
    out
}

fn job_status(shared: &Shared, source: Option<&str>, job: &ReplicationJob) -> Value {
    let mut out = job_config(source, job);
    let s = &job.status;
    out["vmtype"] = json!("qemu");
    out["last_sync"] = json!(s.last_sync);
    out["last_try"] = json!(s.last_try);
    out["duration"] = json!(s.duration);
    out["fail_count"] = json!(s.fail_count);
    if let Some(error) = &s.error {
        out["error"] = json!(error);
    }
    if !job.disable {
        let due = shared
            .due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&job.id)
            .copied();
        if let Some(due) = due {
            out["next_sync"] = json!(shared.clock.epoch_at(due));
        }
    }
    out
}

async fn replication_config(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    let out: Vec<Value> = state
        .replication
        .iter()
        .filter(|j| allowed(&state, &caller, &format!("/vms/{}", j.guest), "VM.Audit"))
        .map(|j| job_config(state.vm(j.guest).map(|v| v.node.as_str()), j))
        .collect();
    data(Value::Array(out))
}

async fn replication_config_one(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    let Some(job) = state.job(&id) else {
        return pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("replication job '{id}' does not exist"),
        );
    };
    let path = format!("/vms/{}", job.guest);
    if !allowed(&state, &caller, &path, "VM.Audit") {
        return forbidden(&path, "VM.Audit");
    }
    data(job_config(
        state.vm(job.guest).map(|v| v.node.as_str()),
        job,
    ))
}

async fn replication_status_list(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(node): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    shared
        .reads
        .job_listings
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let guest: Option<u32> = query.get("guest").and_then(|g| g.parse().ok());
    // Only jobs whose guest lives on this node: the state file is local to it.
    let homes: std::collections::HashMap<u32, &str> = state
        .vms
        .iter()
        .map(|v| (v.vmid, v.node.as_str()))
        .collect();
    let out: Vec<Value> = state
        .replication
        .iter()
        .filter(|j| homes.get(&j.guest) == Some(&node.as_str()))
        .filter(|j| guest.is_none_or(|g| g == j.guest))
        .filter(|j| allowed(&state, &caller, &format!("/vms/{}", j.guest), "VM.Audit"))
        .map(|j| job_status(&shared, Some(node.as_str()), j))
        .collect();
    data(Value::Array(out))
}

fn local_job<'a>(
    state: &'a PveState,
    node: &str,
    id: &str,
) -> Result<&'a ReplicationJob, Response> {
    state
        .job(id)
        .filter(|j| state.vm(j.guest).is_some_and(|v| v.node == node))
        .ok_or_else(|| {
            pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("no such replication job '{id}'"),
            )
        })
}

async fn replication_status_one(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, id)): Path<(String, String)>,
) -> Response {
    shared
        .reads
        .job_status
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let job = match local_job(&state, &node, &id) {
        Ok(job) => job,
        Err(r) => return r,
    };
    let path = format!("/vms/{}", job.guest);
    if !allowed(&state, &caller, &path, "VM.Audit") {
        return forbidden(&path, "VM.Audit");
    }
    data(job_status(&shared, Some(node.as_str()), job))
}

async fn replication_schedule_now(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path((node, id)): Path<(String, String)>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    {
        let state = shared.lock();
        if let Err(r) = reach_node(&state, &node) {
            return r;
        }
        let job = match local_job(&state, &node, &id) {
            Ok(job) => job,
            Err(r) => return r,
        };
        let path = format!("/vms/{}", job.guest);
        if !allowed(&state, &caller, &path, "VM.Replicate") {
            return forbidden(&path, "VM.Replicate");
        }
    }
    shared
        .due
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), Instant::now());
    let task = new_task(&shared, &node, "replicate", &id, &caller);
    let upid = task.upid.clone();
    let mut finished = task;
    finished.endtime = Some(finished.starttime);
    finished.exitstatus = Some("OK".to_owned());
    finished.log.push("TASK OK".to_owned());
    shared.lock().tasks.push(finished);
    data(json!(upid))
}

fn ha_resource_body(vm: &Vm, ha: &HaService) -> Value {
    json!({
        "sid": format!("vm:{}", vm.vmid),
        "type": "vm",
        "state": ha.requested,
        "max_restart": 1,
        "max_relocate": 1,
        "failback": 1,
        "digest": format!("{:040x}", u128::from(vm.vmid)),
    })
}

async fn ha_resources(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let out: Vec<Value> = state
        .vms
        .iter()
        .filter_map(|v| v.ha.as_ref().map(|ha| ha_resource_body(v, ha)))
        .collect();
    data(Value::Array(out))
}

async fn ha_resource(
    State(shared): Shr,
    method: Method,
    headers: HeaderMap,
    Path(sid): Path<String>,
) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let vmid = sid.strip_prefix("vm:").unwrap_or(&sid);
    let found = state
        .vms
        .iter()
        .find(|v| v.vmid.to_string() == vmid)
        .and_then(|v| v.ha.as_ref().map(|ha| ha_resource_body(v, ha)));
    match found {
        Some(body) => data(body),
        None => pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("no such resource '{sid}'"),
        ),
    }
}

async fn ha_status(State(shared): Shr, method: Method, headers: HeaderMap) -> Response {
    let caller = authenticated!(shared, method, headers);
    let state = shared.lock();
    if !allowed(&state, &caller, "/", "Sys.Audit") {
        return forbidden("/", "Sys.Audit");
    }
    let quorate = state.quorate();
    let mut out = vec![json!({
        "id": "quorum",
        "type": "quorum",
        "node": state.api_node,
        "quorate": u8::from(quorate),
        "status": if quorate { "OK" } else { "No quorum on node" },
    })];
    out.push(json!({
        "id": "master",
        "type": "master",
        "node": state.api_node,
        "status": format!("{} (active, {})", state.api_node, shared.clock.now()),
    }));
    for node in &state.nodes {
        let status = if node.online() {
            "active"
        } else {
            "old timestamp - dead?"
        };
        out.push(json!({
            "id": format!("lrm:{}", node.name),
            "type": "lrm",
            "node": node.name,
            "mode": "active",
            "status": format!("{} ({status}, {})", node.name, shared.clock.now()),
        }));
    }
    for vm in &state.vms {
        if let Some(ha) = &vm.ha {
            out.push(json!({
                "id": format!("service:vm:{}", vm.vmid),
                "type": "service",
                "sid": format!("vm:{}", vm.vmid),
                "node": vm.node,
                "state": ha.crm_state,
                "crm_state": ha.crm_state,
                "request_state": ha.requested,
                "status": format!("vm:{} ({}, {})", vm.vmid, vm.node, ha.crm_state),
            }));
        }
    }
    data(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster with VM 101 on n1 replicating to n2 every 10 s, driven by hand.
    fn shared(flapping: Option<Flapping>) -> Shared {
        let mut state = PveState::single_node("c", "n1", "pw");
        state.nodes.push(Node::new("n2", 2, "10.0.0.2"));
        state.vms.push(Vm::new(101, "db", "n1", VmStatus::Running));
        let mut job = ReplicationJob::new("101-1", 101, "n2", Duration::from_secs(10));
        job.flapping = flapping;
        state.replication.push(job);
        Shared {
            state: Mutex::new(state),
            tickets: Mutex::new(BTreeMap::new()),
            due: Mutex::new(BTreeMap::new()),
            flap_position: Mutex::new(BTreeMap::new()),
            next_pid: Mutex::new(1000),
            clock: Clock::new(),
            faults: Faults::new(),
            reads: VmReads::default(),
        }
    }

    fn status(s: &Shared) -> ReplicationStatus {
        s.lock().replication[0].status.clone()
    }

    #[test]
    fn a_job_syncs_once_per_interval_and_backs_off_while_failing() {
        let s = shared(None);
        let t0 = s.clock.start;
        replicate_due(&s, t0);
        let first = status(&s);
        assert_eq!(
            (first.fail_count, first.last_sync),
            (0, s.clock.epoch_at(t0))
        );

        // Not due again before the interval.
        replicate_due(&s, t0 + Duration::from_secs(9));
        assert_eq!(status(&s).last_try, first.last_try);

        // Target down: each failure pushes the next try further (1, 2, ... intervals).
        s.lock().nodes[1].reachable = false;
        replicate_due(&s, t0 + Duration::from_secs(10));
        assert_eq!(status(&s).fail_count, 1);
        replicate_due(&s, t0 + Duration::from_secs(19));
        assert_eq!(status(&s).fail_count, 1, "backoff: next try at 20 s");
        replicate_due(&s, t0 + Duration::from_secs(20));
        let failing = status(&s);
        assert_eq!(failing.fail_count, 2);
        assert_eq!(failing.last_sync, first.last_sync, "last_sync ages");
        assert!(failing.error.is_some());

        // Source node down: no attempt is made or recorded.
        s.lock().nodes[1].reachable = true;
        s.lock().nodes[0].powered = false;
        replicate_due(&s, t0 + Duration::from_secs(60));
        assert_eq!(status(&s).fail_count, 2);
        assert_eq!(status(&s).last_try, failing.last_try);

        s.lock().nodes[0].powered = true;
        replicate_due(&s, t0 + Duration::from_secs(61));
        let healed = status(&s);
        assert_eq!((healed.fail_count, healed.error.clone()), (0, None));
        assert_eq!(
            healed.last_sync,
            s.clock.epoch_at(t0 + Duration::from_secs(61))
        );
    }

    #[test]
    fn flapping_fails_then_succeeds_in_a_fixed_cycle() {
        let s = shared(Some(Flapping {
            fail: 2,
            succeed: 1,
        }));
        let t0 = s.clock.start;
        let mut counts = Vec::new();
        let mut at = t0;
        for _ in 0..6 {
            replicate_due(&s, at);
            counts.push(status(&s).fail_count);
            // Jump past any backoff.
            at += Duration::from_secs(100);
        }
        assert_eq!(counts, vec![1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn privsep_tokens_get_the_intersection_and_propagation_is_honoured() {
        let mut state = PveState::single_node("c", "n1", "pw");
        state.users.push(User {
            userid: "f@pve".into(),
            password: None,
            acl: vec![Acl::new("/vms", &["VM.Audit", "VM.PowerMgmt"], true)],
        });
        state.tokens.push(ApiToken {
            userid: "f@pve".into(),
            name: "t".into(),
            secret: "s".into(),
            privsep: true,
            acl: vec![Acl::new("/vms/101", &["VM.PowerMgmt", "Sys.Audit"], false)],
        });
        let token = Principal::Token {
            userid: "f@pve".into(),
            name: "t".into(),
        };
        let user = Principal::User("f@pve".into());
        assert!(allowed(&state, &user, "/vms/102", "VM.PowerMgmt"));
        assert!(allowed(&state, &token, "/vms/101", "VM.PowerMgmt"));
        assert!(
            !allowed(&state, &token, "/vms/101", "VM.Audit"),
            "not in the token's ACL"
        );
        assert!(
            !allowed(&state, &token, "/vms/101", "Sys.Audit"),
            "not in the user's ACL"
        );
        assert!(
            !allowed(&state, &token, "/vms/102", "VM.PowerMgmt"),
            "no propagation"
        );
        assert!(
            !allowed(&state, &user, "/", "VM.Audit"),
            "ACLs do not flow upwards"
        );
    }
}
