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
use std::time::Duration;

use qfence_model::config::{ControllerConfig, ControllerKind, ProxmoxAuth, TlsTrust};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, required_secret, unsupported,
};
use crate::http::{self, HttpClient};

mod client;
mod driver;
mod listing;
mod probe;
mod replication;
use client::*;
use listing::*;

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

/// Epoch seconds as `YYYY-MM-DDTHH:MM:SSZ`, so a cached reading says when it was taken.
fn utc(epoch: u64) -> String {
    qfence_model::time::utc_rfc3339(epoch.saturating_mul(1000))
}

fn loose_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// Now, in seconds since the Unix epoch (Proxmox's replication times are in seconds).
fn now_epoch() -> u64 {
    qfence_model::time::now_unix_ms() / 1000
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

impl Inner {
    /// Itself, shared (always there while `&self` is).
    fn shared(&self) -> Arc<Inner> {
        self.me.upgrade().expect("a driver outlives its calls")
    }
}

impl ControllerErrors for Inner {
    fn controller_id(&self) -> &ControllerId {
        &self.id
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
