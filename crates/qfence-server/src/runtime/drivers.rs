//! The drivers this orchestrator calls itself, behind the cluster's [`CallExecutor`].
//!
//! A controller call travels as JSON (it may be forwarded to another orchestrator, which runs
//! it through its own `LocalDrivers`): [`WireCall`] says which driver method, capability,
//! resource and site, and how long it may take; the answer is a [`WireResult`], a reading or a
//! driver error with its kind, so the leader can tell "refused" (FAILED) from "state unknown".
//! A registration check ([`Verb::Register`]) travels the same way, so it runs where routing
//! says a fence would; its answer is the registration report as JSON ([`WireReport`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qfence_cluster::forward::{BoxFuture, CallExecutor};
use qfence_cluster::state::ControllerRecord;
use qfence_controllers::driver::{CallContext, Driver, DriverError, Reading, Target};
use qfence_controllers::registration::{self, Registration};
use qfence_controllers::{AnyDriver, SecretStore};
use qfence_model::config::ControllerConfig;
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::RuntimeError;
use super::effective::ConfigCell;

/// Checks one controller runs at once from this orchestrator. A burst of hundreds of
/// concurrent calls only opens hundreds of TLS connections (and, on a BMC, sessions) that then
/// time out; queued calls wait for their turn instead.
pub const CHECKS_PER_CONTROLLER: usize = 8;
/// Calls that may change a target (perform, undo, renew) one controller runs at once; kept
/// apart from checks so a fence never waits behind a queue of routine reads.
pub const CHANGES_PER_CONTROLLER: usize = 8;
/// The same for a BMC (Redfish, IPMI, fence agents): BMCs have few sessions (eight is common,
/// and the lab's), so together they leave one for an operator or another orchestrator.
pub const BMC_CHECKS: usize = 3;
/// See [`BMC_CHECKS`].
pub const BMC_CHANGES: usize = 4;
/// Changes at once on a Proxmox VE API. A VM start or stop holds its turn while its task runs
/// on the node (a forked worker there, not a busy API), polled every 50 ms and then every
/// 250 ms: eight at once made 1,000 plans' VM starts at one site queue for most of a failover.
pub const PROXMOX_CHANGES: usize = 32;
/// How long a check may wait for its turn before it is sent; its own timeout starts when it
/// is sent. A queued check is not a reading: the decision core waits for a check on its way
/// rather than read a site as lost because this orchestrator is busy (a change, by contrast,
/// waits within its own deadline).
pub const CHECK_QUEUE_LIMIT: Duration = Duration::from_secs(60);

/// What a shared check's waiters receive.
type Shared = Result<WireResult, String>;
/// Who waits for a check's answer.
type Waiters = Arc<Mutex<Vec<oneshot::Sender<Shared>>>>;

/// One controller's lane: bounded concurrency, and identical checks coalesced.
#[derive(Debug)]
struct Lane {
    checks: Semaphore,
    changes: Semaphore,
    /// Bumped when a call that may change a target starts and when it ends (a call that
    /// shares another's sends nothing, so it bumps nothing).
    epoch: AtomicU64,
    /// The joinable check in flight for each reading, with the epoch it started in.
    in_flight: Mutex<HashMap<String, (u64, Waiters)>>,
    /// Counts the changes led on this lane (joined ones are not counted).
    changes_led: AtomicU64,
    /// The joinable change in flight (queued or sent) for each identical call, with the count
    /// of changes led when it was.
    changes_in_flight: Mutex<HashMap<String, (u64, Waiters)>>,
}

impl Default for Lane {
    fn default() -> Self {
        Self::new(CHECKS_PER_CONTROLLER, CHANGES_PER_CONTROLLER)
    }
}

impl Lane {
    fn new(checks: usize, changes: usize) -> Self {
        Self {
            checks: Semaphore::new(checks),
            changes: Semaphore::new(changes),
            epoch: AtomicU64::new(0),
            in_flight: Mutex::new(HashMap::new()),
            changes_led: AtomicU64::new(0),
            changes_in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The lane of a controller of type `kind`.
    fn for_type(kind: qfence_model::catalog::ControllerType) -> Self {
        use qfence_model::catalog::ControllerType as T;
        match kind {
            T::Redfish | T::Ipmi | T::FenceAgent => Self::new(BMC_CHECKS, BMC_CHANGES),
            T::Proxmox => Self::new(CHECKS_PER_CONTROLLER, PROXMOX_CHANGES),
            _ => Self::default(),
        }
    }

    /// Joins the check in flight for `key` if it started in this epoch (no call that may
    /// change a target has started or ended since); otherwise this check leads (and later
    /// ones may join it). A check that joins while a change runs shares a reading that also
    /// began during that change, which is what its own reading would have been; a check
    /// issued after a change ended (a fence's read-back) never shares one from before.
    fn join_or_lead(&self, key: String) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        self.join_or_lead_in(false, key, &|| self.epoch.load(Ordering::SeqCst))
    }

    /// Joins the identical change (same verb, capability, resource, parameters and site)
    /// queued or running, if no other change has been led on this lane since it was: a
    /// thousand plans fencing one host send one `power.off`, and each still verifies it with
    /// its own read-back. A change led after it (an undo, another target) ends the sharing,
    /// so a joined answer never comes from a call ordered before a change the caller follows.
    fn join_or_lead_change(&self, key: String) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        self.join_or_lead_in(true, key, &|| {
            self.changes_led.fetch_add(1, Ordering::SeqCst) + 1
        })
    }

    /// Joins the flight for `key` (a change's or a check's) if it carries the stamp now in
    /// force; otherwise leads a new one, stamped by `lead` (which a change's leader moves on).
    fn join_or_lead_in(
        &self,
        change: bool,
        key: String,
        lead: &dyn Fn() -> u64,
    ) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        let (map, now) = if change {
            (&self.changes_in_flight, &self.changes_led)
        } else {
            (&self.in_flight, &self.epoch)
        };
        let mut flights = map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((stamp, waiters)) = flights.get(&key)
            && *stamp == now.load(Ordering::SeqCst)
        {
            let (tx, rx) = oneshot::channel();
            waiters.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
            return Ok(rx);
        }
        // A flight from before keeps its own waiters; it just cannot be joined.
        let waiters = Waiters::default();
        flights.insert(key.clone(), (lead(), waiters.clone()));
        Err(Leading {
            lane: self,
            key,
            waiters,
            change,
        })
    }
}

/// Marks a changing call for its lifetime.
struct Changing<'a>(&'a Lane);

impl<'a> Changing<'a> {
    fn start(lane: &'a Lane) -> Self {
        lane.epoch.fetch_add(1, Ordering::SeqCst);
        Self(lane)
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// The check that others may join: when it ends (or is dropped), its waiters get its answer
/// (or a closed channel, which reads UNKNOWN).
struct Leading<'a> {
    lane: &'a Lane,
    key: String,
    waiters: Waiters,
    /// A change (its flight is in `changes_in_flight`), not a check.
    change: bool,
}

impl Leading<'_> {
    fn finish(self, answer: &Shared) {
        for w in self.take() {
            let _ = w.send(answer.clone());
        }
    }

    fn take(&self) -> Vec<oneshot::Sender<Shared>> {
        {
            let map = if self.change {
                &self.lane.changes_in_flight
            } else {
                &self.lane.in_flight
            };
            let mut flights = map.lock().unwrap_or_else(|p| p.into_inner());
            if flights
                .get(&self.key)
                .is_some_and(|(_, w)| Arc::ptr_eq(w, &self.waiters))
            {
                flights.remove(&self.key);
            }
        }
        std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        // Abandoned (cancelled): the waiters' receivers see a closed channel.
        drop(self.take());
    }
}

/// Which driver method a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Check,
    Perform,
    Undo,
    Renew,
    /// The registration check of the whole controller (capability and resource are empty);
    /// answered with a [`WireReport`], not a [`WireResult`].
    Register,
    /// The driver's discovery (capability and resource are empty); answered with the list of
    /// resources found ([`WireResource`]s), not a [`WireResult`].
    Discover,
    /// The driver's read-only check of one binding (`check_binding`); answered with its
    /// problems (a list of sentences, empty when fine), not a [`WireResult`].
    CheckBinding,
}

/// One controller call as it travels between orchestrators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCall {
    pub verb: Verb,
    pub capability: String,
    pub resource: String,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub site: SiteId,
    /// How long the call may take, from when the executing orchestrator starts it.
    pub timeout_ms: u64,
    /// With `register`: the identities of the registered controllers (from the replicated
    /// state), so a second controller of the same system is warned of wherever it runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub known: BTreeMap<ControllerId, String>,
    /// With `perform` of a fence: the checks the executing orchestrator runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_fence: Option<PreFence>,
    /// An absolute deadline (Unix milliseconds, the executing orchestrator's clock) after
    /// which the call must not act: a dead-man renewal's `not_after`. The executing side
    /// refuses a call that arrives after it and cuts the call's own timeout to it, so a
    /// forward delayed in transit or in a queue can never act late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after_unix_ms: Option<u64>,
}

/// The checks the driver contract names before every fence (docs/specs/controller.md §4):
/// the controller still answers with the identity its registration pinned (not a BMC
/// replaced, or an address now pointing at another host's), and the binding's own check
/// passes (the VM is on the node the binding names). A failed check is a refusal with the
/// reason, never a fence of the wrong thing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreFence {
    /// The identity the controller's latest test read; `None` when no test read one (only the
    /// binding is checked then).
    pub identity: Option<String>,
}

impl WireCall {
    /// The registration check of a controller at `site`, within `timeout`.
    pub fn register(site: SiteId, timeout: Duration) -> Self {
        Self {
            verb: Verb::Register,
            capability: String::new(),
            resource: String::new(),
            params: BTreeMap::new(),
            site,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            known: BTreeMap::new(),
            pre_fence: None,
            not_after_unix_ms: None,
        }
    }

    /// The read-only check of `binding` at `site`, within `timeout`.
    pub fn check_binding(
        binding: &qfence_model::config::Binding,
        site: SiteId,
        timeout: Duration,
    ) -> Self {
        Self {
            verb: Verb::CheckBinding,
            capability: binding.capability.clone(),
            resource: binding.resource.clone(),
            params: binding.params.clone(),
            ..Self::register(site, timeout)
        }
    }

    /// How long the call may still take at `now` (Unix milliseconds): its timeout, cut to
    /// its absolute deadline; `Err` says why it must not run at all.
    pub fn time_left(&self, now: u64) -> Result<Duration, String> {
        let timeout = Duration::from_millis(self.timeout_ms);
        match self.not_after_unix_ms {
            None => Ok(timeout),
            Some(not_after) if now >= not_after => Err(format!(
                "not run: it arrived {} ms after its deadline (not after {})",
                now - not_after,
                qfence_core::Millis(not_after)
            )),
            Some(not_after) => Ok(timeout.min(Duration::from_millis(not_after - now))),
        }
    }

    /// The discovery of a controller at `site`, within `timeout`.
    pub fn discover(site: SiteId, timeout: Duration) -> Self {
        Self {
            verb: Verb::Discover,
            ..Self::register(site, timeout)
        }
    }
}

/// A discovered resource as it travels (`qfence_controllers::driver::Discovered`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireResource {
    pub capability: String,
    pub resource: String,
    pub description: String,
}

/// The registration report as it comes back (the fields the API shows; the report is sent
/// whole, see `qfence_controllers::registration::Report`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireReport {
    /// The orchestrator that ran the check.
    pub orchestrator: OrchestratorId,
    pub steps: Vec<WireStep>,
    pub identity: Option<WireIdentity>,
    pub grades: Vec<WireGrade>,
    /// Absent from an orchestrator of an older build.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One registration step as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireStep {
    pub number: u8,
    pub name: String,
    /// `ok`, `warning`, `failed` or `skipped`.
    pub status: String,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The identity a registration read, as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireIdentity {
    pub id: String,
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
}

/// One capability's grade as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireGrade {
    pub capability: String,
    pub grade: qfence_model::Grade,
    pub reason: String,
}

impl WireReport {
    /// Whether every step passed (a warning passes), as `Report::passed`.
    pub fn passed(&self) -> bool {
        self.steps
            .iter()
            .all(|s| s.status == "ok" || s.status == "warning")
    }
}

/// A reading as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireReading {
    pub holds: bool,
    pub detail: String,
    pub at_unix_ms: u64,
    pub by: String,
    /// See [`Reading::definitive`]; absent from an older orchestrator's answer.
    #[serde(default)]
    pub definitive: bool,
}

/// A driver error as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// The driver error's kind (`timeout`, `unreachable`, `rejected`...).
    pub kind: String,
    pub message: String,
    pub state_unknown: bool,
}

/// The answer to a [`WireCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireResult {
    Reading(WireReading),
    Error(WireError),
}

impl From<Result<Reading, DriverError>> for WireResult {
    fn from(r: Result<Reading, DriverError>) -> Self {
        match r {
            Ok(r) => WireResult::Reading(WireReading {
                holds: r.holds,
                detail: r.detail,
                at_unix_ms: r
                    .at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                by: r.by.to_string(),
                definitive: r.definitive,
            }),
            Err(e) => WireResult::Error(WireError {
                kind: serde_json::to_value(e.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                message: e.to_string(),
                state_unknown: e.state_unknown,
            }),
        }
    }
}

/// The drivers of every controller this orchestrator may call ([`AnyDriver`]), built from the
/// effective configuration and this orchestrator's own secret stores. The file's controllers
/// are built at start; one registered through the API is built when first called, and built
/// again when its settings change. A controller whose driver cannot be built (missing
/// secret, type not in this build) is kept with its reason: calls to it fail, so they read
/// UNKNOWN, and the rest keep working.
#[derive(Debug)]
pub struct LocalDrivers {
    me: OrchestratorId,
    /// Each controller's driver with the settings it was built from.
    drivers: Mutex<BTreeMap<ControllerId, BuiltDriver>>,
    /// What calls and registration checks run against: the effective configuration (a
    /// forwarded call refreshes it, so a controller registered a moment ago is known) and
    /// this orchestrator's own secret stores.
    config: Arc<ConfigCell>,
    /// Each controller's lane, made when it is first called.
    lanes: Mutex<BTreeMap<ControllerId, Arc<Lane>>>,
    secrets: SecretStore,
    /// Where the lanes' queue depth and latency go, once attached.
    metrics: std::sync::OnceLock<crate::Metrics>,
    /// What a call's absolute deadline is compared with: the system clock, as the engine's
    /// (orchestrators' clocks are assumed within the skew the core's margin covers).
    clock: super::Clock,
}

type BuiltDriver = (ControllerConfig, Result<Arc<AnyDriver>, String>);

fn build_one(
    id: &ControllerId,
    config: &ControllerConfig,
    secrets: &SecretStore,
) -> Result<Arc<AnyDriver>, String> {
    let secret = match &config.secret {
        Some(r) => Some(secrets.resolve(r).map_err(|e| e.to_string())?),
        None => None,
    };
    AnyDriver::build(id, config, secret)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

impl LocalDrivers {
    /// Builds the driver of every controller the configuration has now (no I/O but reading
    /// secrets and CA files).
    pub fn build(me: OrchestratorId, config: &Arc<ConfigCell>, secrets: &SecretStore) -> Self {
        let now = config.get();
        let drivers = now
            .config()
            .controllers
            .iter()
            .map(|(id, c)| (id.clone(), (c.clone(), build_one(id, c, secrets))))
            .collect();
        Self {
            me,
            drivers: Mutex::new(drivers),
            lanes: Mutex::new(BTreeMap::new()),
            config: config.clone(),
            secrets: secrets.clone(),
            metrics: std::sync::OnceLock::new(),
            clock: super::Clock::system(),
        }
    }

    /// Reports each lane's queue depth and latency to `metrics` from now on.
    pub fn attach_metrics(&self, metrics: crate::Metrics) {
        let _ = self.metrics.set(metrics);
    }

    /// Follows one call in `controller`'s `lane`, when metrics are attached.
    fn watch(
        &self,
        controller: &ControllerId,
        lane: crate::metrics::Lane,
    ) -> Option<crate::metrics::LaneWatch> {
        self.metrics
            .get()
            .map(|m| m.lane(controller.as_str(), lane))
    }

    /// Closes every driver (their Redfish sessions), at shutdown, after the operations
    /// have drained.
    pub async fn close(&self) {
        let built: Vec<Arc<AnyDriver>> = self
            .drivers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|(_, d)| d.as_ref().ok().cloned())
            .collect();
        futures_util::future::join_all(built.iter().map(|d| d.close())).await;
    }

    /// The controllers whose driver could not be built, and why (for the startup log).
    pub fn unavailable(&self) -> Vec<(ControllerId, String)> {
        self.drivers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(id, (_, d))| d.as_ref().err().map(|e| (id.clone(), e.clone())))
            .collect()
    }

    /// The driver of `id` as the effective configuration has it now, built if it is new or
    /// its settings changed.
    fn driver(&self, id: &ControllerId) -> Result<Arc<AnyDriver>, String> {
        // Every call comes here: the configuration as last built is an `Arc` clone, while a
        // refresh reads and compares the replicated API entries. The engine refreshes every
        // tick, so only a controller registered since (a forwarded call can be the first to
        // name it) needs a refresh here.
        let mut config = self.config.get();
        if config.controller(id.as_str()).is_none() {
            config = self.config.refresh();
        }
        let Some(cc) = config.controller(id.as_str()) else {
            return Err(format!("controller {id} is not configured here"));
        };
        let mut drivers = self.drivers.lock().unwrap_or_else(|p| p.into_inner());
        let built = match drivers.get(id) {
            Some((was, built)) if was == cc => built.clone(),
            _ => {
                let built = build_one(id, cc, &self.secrets);
                if let Err(e) = &built {
                    tracing::warn!(controller = %id, "No driver here: {e}");
                }
                drivers.insert(id.clone(), (cc.clone(), built.clone()));
                built
            }
        };
        built.map_err(|e| format!("controller {id} has no driver here: {e}"))
    }

    /// The lane of `id`, sized for its type and made on its first call (a controller
    /// registered through the API has none before).
    fn lane(&self, id: &ControllerId, kind: qfence_model::catalog::ControllerType) -> Arc<Lane> {
        self.lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.clone())
            .or_insert_with(|| Arc::new(Lane::for_type(kind)))
            .clone()
    }

    /// Runs one call here, in the controller's lane: at most [`CHECKS_PER_CONTROLLER`] checks
    /// and [`CHANGES_PER_CONTROLLER`] other calls at once, waiting for a turn within the
    /// call's own deadline.
    ///
    /// A check identical to one in flight (same capability, resource, parameters and site:
    /// many plans reading one host's power) shares its answer instead of asking again, but
    /// only if no call that may change a target has started or ended on this controller since
    /// that check started: a reading that began before a fence, an undo or a renewal ended is
    /// never taken as evidence after it.
    pub async fn run(
        &self,
        controller: &ControllerId,
        call: &WireCall,
        cancel: CancellationToken,
    ) -> Result<WireResult, String> {
        // A call past its absolute deadline is refused before anything is sent: its effect
        // would come after what the leader relies on (a dead-man renewal's `not_after`).
        let left = call.time_left(self.clock.now().0)?;
        let d = self.driver(controller)?;
        let deadline = tokio::time::Instant::now() + left;
        let lane = self.lane(controller, d.controller_type());
        let key = format!(
            "{:?}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
            call.verb, call.capability, call.resource, call.params, call.site
        );
        if call.verb != Verb::Check {
            // Identical performs and undos share one call; a renewal keeps its own.
            let leading = if matches!(call.verb, Verb::Perform | Verb::Undo) {
                match lane.join_or_lead_change(key) {
                    Ok(rx) => {
                        let unknown = |message: &str| {
                            WireResult::Error(WireError {
                                kind: "cancelled".into(),
                                message: message.into(),
                                state_unknown: true,
                            })
                        };
                        return Ok(tokio::select! {
                            () = cancel.cancelled() => unknown("cancelled while sharing an identical call already sent or queued"),
                            r = rx => match r {
                                Ok(Ok(answer)) => answer,
                                // A change's leader always answers; a closed channel means it
                                // was dropped while running.
                                Ok(Err(_)) | Err(_) => unknown("the identical call this one shared was abandoned; it may have been sent"),
                            },
                        });
                    }
                    Err(leading) => Some(leading),
                }
            } else {
                None
            };
            // Only a call that sends marks the lane as changing.
            let changing = Changing::start(&lane);
            let mut watch = self.watch(controller, crate::metrics::Lane::Changes);
            let turn = wait_turn(&lane.changes, deadline, call, &cancel).await;
            let answer = match turn {
                Ok(_turn) => {
                    if let Some(w) = watch.as_mut() {
                        w.running();
                    }
                    self.call_driver(&d, call, deadline, cancel).await
                }
                // Nothing was sent: the target is as it was, so this is a refusal.
                Err(message) => WireResult::Error(WireError {
                    kind: "timeout".into(),
                    message,
                    state_unknown: false,
                }),
            };
            if let Some(w) = watch {
                w.answered(!matches!(answer, WireResult::Error(_)));
            }
            // The change has ended before anyone learns its answer: a read-back issued on
            // that answer must not share a reading that began before the end.
            drop(changing);
            if let Some(leading) = leading {
                leading.finish(&Ok(answer.clone()));
            }
            return Ok(answer);
        }
        let leading = match lane.join_or_lead(key) {
            Ok(rx) => {
                return tokio::select! {
                    () = cancel.cancelled() => Err("cancelled: leadership was lost or the caller gave up".into()),
                        // The check joined ends within its own queue limit and deadline.
                    r = rx => r.unwrap_or_else(|_| Err("the identical check this one joined was abandoned".into())),
                };
            }
            Err(leading) => leading,
        };
        let queued_until = tokio::time::Instant::now() + CHECK_QUEUE_LIMIT;
        let mut watch = self.watch(controller, crate::metrics::Lane::Checks);
        // A check the driver answers from a shared listing costs the controller nothing of
        // its own (one listing per node is in flight, however many wait): rationing it would
        // only make thousands of plans' checks queue behind each other's waits.
        let turn = if d.reads_in_bulk(&call.capability) {
            Ok(None)
        } else {
            wait_turn(&lane.checks, queued_until, call, &cancel)
                .await
                .map(Some)
        };
        let answer = match turn {
            Ok(_turn) => {
                if let Some(w) = watch.as_mut() {
                    w.running();
                }
                let deadline = tokio::time::Instant::now() + Duration::from_millis(call.timeout_ms);
                Ok(self.call_driver(&d, call, deadline, cancel).await)
            }
            Err(e) => Err(e),
        };
        if let Some(w) = watch {
            w.answered(matches!(answer, Ok(WireResult::Reading(_))));
        }
        leading.finish(&answer);
        answer
    }

    async fn call_driver(
        &self,
        d: &AnyDriver,
        call: &WireCall,
        deadline: tokio::time::Instant,
        cancel: CancellationToken,
    ) -> WireResult {
        let ctx = CallContext {
            deadline,
            cancel,
            orchestrator: self.me.clone(),
        };
        let target = Target {
            capability: call.capability.clone(),
            resource: call.resource.clone(),
            params: call.params.clone(),
            site: call.site.clone(),
        };
        let result = match call.verb {
            Verb::Check => d.check(&ctx, &target).await,
            Verb::Perform => {
                let mut ctx = ctx;
                if let Some(pf) = &call.pre_fence {
                    // The checks have a budget of their own (the executor waits for both): the
                    // fence keeps the whole time it had.
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    let checks = CallContext {
                        deadline: tokio::time::Instant::now() + left,
                        ..ctx.clone()
                    };
                    if let Err(refusal) = pre_fence(d, &checks, &target, pf).await {
                        return WireResult::Error(refusal);
                    }
                    ctx.deadline = tokio::time::Instant::now() + left;
                }
                d.perform(&ctx, &target).await
            }
            Verb::Undo => d.undo(&ctx, &target).await,
            Verb::Renew => d.renew(&ctx, &target).await,
            Verb::Register | Verb::Discover | Verb::CheckBinding => {
                return WireResult::Error(WireError {
                    kind: "rejected".into(),
                    message: "a registration check or discovery is not a driver call".into(),
                    state_unknown: false,
                });
            }
        };
        result.into()
    }

    /// Runs the registration check of `controller` here, as this orchestrator, giving up
    /// when `cancel` fires. `known` are the registered controllers' identities.
    pub async fn register(
        &self,
        controller: &ControllerId,
        known: &BTreeMap<ControllerId, String>,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> Result<registration::Report, String> {
        let config = self.config.refresh();
        let check = registration::register(Registration {
            config: &config,
            controller,
            orchestrator: &self.me,
            secrets: &self.secrets,
            known,
            timeout,
        });
        tokio::select! {
            () = cancel.cancelled() => Err("cancelled: leadership was lost or the caller gave up".into()),
            report = check => Ok(report),
        }
    }

    /// Lists what `controller`'s capabilities can act on, from here, giving up when `cancel`
    /// fires.
    pub async fn discover(
        &self,
        controller: &ControllerId,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> Result<Vec<qfence_controllers::driver::Discovered>, String> {
        let known = BTreeMap::new();
        let config = self.config.refresh();
        let found = registration::discover(Registration {
            config: &config,
            controller,
            orchestrator: &self.me,
            secrets: &self.secrets,
            known: &known,
            timeout,
        });
        tokio::select! {
            () = cancel.cancelled() => Err("cancelled: leadership was lost or the caller gave up".into()),
            found = found => found,
        }
    }

    /// The read-only check of one binding of `controller` (`call` names it), here, giving up
    /// when `cancel` fires: the binding's problems, empty when fine.
    pub async fn check_binding(
        &self,
        controller: &ControllerId,
        call: &WireCall,
        cancel: CancellationToken,
    ) -> Result<Vec<String>, String> {
        let d = self.driver(controller)?;
        let ctx = CallContext {
            deadline: tokio::time::Instant::now() + Duration::from_millis(call.timeout_ms),
            cancel,
            orchestrator: self.me.clone(),
        };
        let target = Target {
            capability: call.capability.clone(),
            resource: call.resource.clone(),
            params: call.params.clone(),
            site: call.site.clone(),
        };
        d.check_binding(&ctx, &target)
            .await
            .map_err(|e| e.to_string())
    }

    /// Probes a controller here (no side effects on its targets).
    pub async fn probe(
        &self,
        controller: &ControllerId,
        timeout: Duration,
    ) -> Result<qfence_controllers::Probe, RuntimeError> {
        let d = self.driver(controller).map_err(RuntimeError::Driver)?;
        let ctx = CallContext::with_timeout(self.me.clone(), timeout);
        d.probe(&ctx)
            .await
            .map_err(|e| RuntimeError::Driver(e.to_string()))
    }
}

/// The pre-fence checks of `pf` on `target`, within the fence's own deadline. `Err` is the
/// refusal to answer instead of fencing: `rejected` (nothing sent, the target as it was) when
/// a check found a mismatch, state unknown when a check could not be made.
async fn pre_fence(
    d: &AnyDriver,
    ctx: &CallContext,
    target: &Target,
    pf: &PreFence,
) -> Result<(), WireError> {
    let refused = |message: String| WireError {
        kind: "rejected".into(),
        message,
        state_unknown: false,
    };
    let unverified = |e: DriverError| WireError {
        kind: "pre_fence".into(),
        message: format!("not fenced: the pre-fence check could not be made: {e}"),
        state_unknown: true,
    };
    if let Some(pinned) = &pf.identity {
        let probe = d.probe(ctx).await.map_err(unverified)?;
        if probe.identity.id != *pinned {
            return Err(refused(format!(
                "not fenced: the pre-fence check found controller {} answering as {}, not as {pinned} \
                 pinned by its latest test: fencing through it could stop another system (test \
                 the controller again once the device is known to be the right one)",
                d.id(),
                probe.identity.id
            )));
        }
    }
    let problems = d.check_binding(ctx, target).await.map_err(unverified)?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(refused(format!(
            "not fenced: the pre-fence check of {} {} found: {}",
            target.capability,
            target.resource,
            problems.join("; ")
        )))
    }
}

/// Waits for a turn in `slots` until the call's deadline or its cancellation (nothing has
/// been sent to the controller when it gives up).
async fn wait_turn<'a>(
    slots: &'a Semaphore,
    deadline: tokio::time::Instant,
    call: &WireCall,
    cancel: &CancellationToken,
) -> Result<tokio::sync::SemaphorePermit<'a>, String> {
    tokio::select! {
        () = cancel.cancelled() => Err("cancelled: leadership was lost or the caller gave up".into()),
        r = tokio::time::timeout_at(deadline, slots.acquire()) => match r {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err("the controller's call slots are closed".into()),
            Err(_) => Err(format!(
                "not sent: no free call slot for this controller within {} ms",
                call.timeout_ms
            )),
        },
    }
}

/// The cluster's executor over [`LocalDrivers`]: what this orchestrator runs for a call routed
/// here, its own or forwarded by the leader.
#[derive(Debug, Clone)]
pub struct DriverExecutor(pub Arc<LocalDrivers>);

impl CallExecutor for DriverExecutor {
    fn execute<'a>(
        &'a self,
        controller: &'a ControllerRecord,
        call: &'a serde_json::Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let call: WireCall = serde_json::from_value(call.clone())
                .map_err(|e| format!("not a qfence controller call: {e}"))?;
            if call.verb == Verb::Register {
                let timeout = Duration::from_millis(call.timeout_ms);
                let report = self
                    .0
                    .register(&controller.id, &call.known, timeout, cancel)
                    .await?;
                return serde_json::to_value(report).map_err(|e| e.to_string());
            }
            if call.verb == Verb::CheckBinding {
                let problems = self.0.check_binding(&controller.id, &call, cancel).await?;
                return serde_json::to_value(problems).map_err(|e| e.to_string());
            }
            if call.verb == Verb::Discover {
                let timeout = Duration::from_millis(call.timeout_ms);
                let found = self.0.discover(&controller.id, timeout, cancel).await?;
                return serde_json::to_value(found).map_err(|e| e.to_string());
            }
            let result = self.0.run(&controller.id, &call, cancel).await?;
            serde_json::to_value(result).map_err(|e| e.to_string())
        })
    }
}

/// Wall-clock milliseconds of a `SystemTime`.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(holds: bool) -> Shared {
        Ok(WireResult::Reading(WireReading {
            holds,
            detail: format!("holds={holds}"),
            at_unix_ms: 1,
            by: "dc1-a".into(),
            definitive: false,
        }))
    }

    #[test]
    fn a_call_past_its_absolute_deadline_is_refused_and_one_before_it_is_cut_to_it() {
        let mut call = WireCall::register(SiteId::new("dc1").unwrap(), Duration::from_secs(10));
        assert_eq!(call.time_left(5_000), Ok(Duration::from_secs(10)));
        call.not_after_unix_ms = Some(7_000);
        assert_eq!(call.time_left(5_000), Ok(Duration::from_secs(2)));
        assert_eq!(call.time_left(6_999), Ok(Duration::from_millis(1)));
        let late = call.time_left(7_250).unwrap_err();
        assert!(late.contains("250 ms after its deadline"), "{late}");
        assert!(call.time_left(7_000).is_err());
        // An old orchestrator's call without the field reads as no deadline.
        let old = serde_json::json!({"verb": "renew", "capability": "watchdog", "resource": "h",
            "site": "dc1", "timeout_ms": 3000});
        let old: WireCall = serde_json::from_value(old).unwrap();
        assert_eq!(old.not_after_unix_ms, None);
    }

    #[tokio::test]
    async fn identical_checks_share_one_answer() {
        let lane = Lane::default();
        let Err(first) = lane.join_or_lead("power".into()) else {
            panic!("the first check leads");
        };
        let Ok(second) = lane.join_or_lead("power".into()) else {
            panic!("an identical check joins");
        };
        let Err(other) = lane.join_or_lead("vm".into()) else {
            panic!("another reading leads its own");
        };
        first.finish(&reading(true));
        assert_eq!(second.await.unwrap(), reading(true));
        drop(other);
        // Once answered, the next check asks again.
        assert!(lane.join_or_lead("power".into()).is_err());
    }

    #[tokio::test]
    async fn a_check_never_joins_one_that_started_before_a_change_began_or_ended() {
        let lane = Lane::default();
        let Err(before) = lane.join_or_lead("power".into()) else {
            panic!("leads");
        };
        let Ok(early) = lane.join_or_lead("power".into()) else {
            panic!("joins");
        };
        let fence = Changing::start(&lane);
        // A change began: the flight from before it cannot be joined.
        let Err(during) = lane.join_or_lead("power".into()) else {
            panic!("a check after a change began must not join one from before it");
        };
        // Checks while the change runs share a reading that also began during it.
        let Ok(also_during) = lane.join_or_lead("power".into()) else {
            panic!("a check during a change joins one begun during it");
        };
        drop(fence);
        // The change ended: a read-back must not share a reading begun before the end.
        let Err(after) = lane.join_or_lead("power".into()) else {
            panic!("a check after a change ended must not join one from before its end");
        };
        let Ok(late) = lane.join_or_lead("power".into()) else {
            panic!("but later checks join the one after the change");
        };
        // Each flight answers its own waiters, even once replaced in the map.
        before.finish(&reading(false));
        during.finish(&reading(false));
        after.finish(&reading(true));
        assert_eq!(early.await.unwrap(), reading(false));
        assert_eq!(also_during.await.unwrap(), reading(false));
        assert_eq!(late.await.unwrap(), reading(true));
    }

    #[tokio::test]
    async fn identical_changes_share_one_call_until_another_change_is_led() {
        let lane = Lane::default();
        let Err(first) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("the first change leads");
        };
        let Ok(same) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("an identical change joins the one queued or sent");
        };
        // Another change led on the lane: the power.off from before it can no longer be
        // joined, since a caller after the undo must not take an answer ordered before it.
        let Err(undo) = lane.join_or_lead_change("undo power.off h1".into()) else {
            panic!("a different change leads its own");
        };
        let Err(again) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("a change after another change must not join one from before it");
        };
        let Ok(later) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("later identical changes join the newest one");
        };
        first.finish(&reading(true));
        again.finish(&reading(false));
        assert_eq!(same.await.unwrap(), reading(true));
        assert_eq!(later.await.unwrap(), reading(false));
        drop(undo);
        // Checks and changes keep separate flights.
        assert!(lane.join_or_lead("perform power.off h1".into()).is_err());
    }

    #[tokio::test]
    async fn an_abandoned_check_leaves_its_waiters_unknown_not_hanging() {
        let lane = Lane::default();
        let Err(leader) = lane.join_or_lead("power".into()) else {
            panic!("leads");
        };
        let Ok(waiter) = lane.join_or_lead("power".into()) else {
            panic!("joins");
        };
        drop(leader);
        assert!(
            waiter.await.is_err(),
            "a closed channel: the caller reads UNKNOWN"
        );
    }
}
