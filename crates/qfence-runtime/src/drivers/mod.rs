//! The drivers this orchestrator calls itself, behind the cluster's [`CallExecutor`].
//!
//! A controller call is a [`qfence_call::Call`] and its answer a [`qfence_call::Answer`]
//! here as everywhere: the cluster hands a call routed here (this orchestrator's own, or one
//! forwarded by the leader and already decoded from its signed envelope) to
//! [`DriverExecutor`], which runs it through [`LocalDrivers`] and answers with a reading or a
//! driver error with its kind, so the leader can tell "refused" (FAILED) from "state unknown".
//! A registration check ([`Verb::Register`]), a discovery and a binding's check travel the
//! same way, so they run where routing says a fence would.
//!
//! Each controller has a lane (`lanes`) that bounds its calls and shares identical ones; a
//! fence runs the contract's pre-fence checks first (`pre_fence`).

mod lanes;
mod pre_fence;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_call::{Answer, Call, Report, Verb};
use qfence_cluster::forward::{BoxFuture, CallExecutor};
use qfence_controllers::driver::{
    CallContext, Discovered, Driver, DriverError, ErrorKind, Reading,
};
use qfence_controllers::registration::{self, Registration};
use qfence_controllers::{AnyDriver, SecretStore};
use qfence_model::config::ControllerConfig;
use qfence_model::{ControllerId, OrchestratorId};
use tokio_util::sync::CancellationToken;

use self::lanes::{Changing, Lane, wait_turn};
use self::pre_fence::pre_fence;
use crate::RuntimeError;
use crate::effective::ConfigCell;

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

/// What a driver call came to: its reading, or its error with its kind.
pub type Read = Result<Reading, DriverError>;

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
    clock: crate::Clock,
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
            clock: crate::Clock::system(),
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

    /// The driver of Nova controller `id`, for Instance HA's typed calls (which are not
    /// [`Call`]s: they run on this orchestrator, outside the lanes).
    pub fn nova(&self, id: &ControllerId) -> Result<Arc<AnyDriver>, String> {
        let d = self.driver(id)?;
        match &*d {
            AnyDriver::Nova(_) => Ok(d),
            _ => Err(format!("controller {id} is not a Nova controller")),
        }
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
        call: &Call,
        cancel: CancellationToken,
    ) -> Result<Read, String> {
        // A call past its absolute deadline is refused before anything is sent: its effect
        // would come after what the leader relies on (a dead-man renewal's `not_after`).
        let left = call.time_left(self.clock.now().0)?;
        let d = self.driver(controller)?;
        let deadline = tokio::time::Instant::now() + left;
        let lane = self.lane(controller, d.controller_type());
        let t = &call.target;
        let key = format!(
            "{:?}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
            call.verb, t.capability, t.resource, t.params, t.site
        );
        if call.verb != Verb::Check {
            return Ok(self
                .run_change(controller, &d, &lane, key, call, deadline, cancel)
                .await);
        }
        self.run_check(controller, &d, &lane, key, call, cancel)
            .await
    }

    /// A call that may change its target (perform, undo, renew), in the lane's changes.
    #[allow(clippy::too_many_arguments)]
    async fn run_change(
        &self,
        controller: &ControllerId,
        d: &AnyDriver,
        lane: &Lane,
        key: String,
        call: &Call,
        deadline: tokio::time::Instant,
        cancel: CancellationToken,
    ) -> Read {
        // Identical performs and undos share one call; a renewal keeps its own.
        let leading = if matches!(call.verb, Verb::Perform | Verb::Undo) {
            match lane.join_or_lead_change(key) {
                Ok(rx) => {
                    let unknown = |message: &str| {
                        Err(DriverError::new(
                            ErrorKind::Cancelled,
                            controller,
                            format!("{:?} {}", call.verb, call.target.capability),
                            message,
                            true,
                        ))
                    };
                    return tokio::select! {
                        () = cancel.cancelled() => unknown("cancelled while sharing an identical call already sent or queued"),
                        r = rx => match r {
                            Ok(Ok(answer)) => answer,
                            // A change's leader always answers; a closed channel means it
                            // was dropped while running.
                            Ok(Err(_)) | Err(_) => unknown("the identical call this one shared was abandoned; it may have been sent"),
                        },
                    };
                }
                Err(leading) => Some(leading),
            }
        } else {
            None
        };
        // Only a call that sends marks the lane as changing.
        let changing = Changing::start(lane);
        let mut watch = self.watch(controller, crate::metrics::Lane::Changes);
        let turn = wait_turn(&lane.changes, deadline, call.timeout, &cancel).await;
        let answer = match turn {
            Ok(_turn) => {
                if let Some(w) = watch.as_mut() {
                    w.running();
                }
                self.call_driver(d, call, deadline, cancel).await
            }
            // Nothing was sent: the target is as it was, so this is a refusal.
            Err(message) => Err(DriverError::new(
                ErrorKind::Timeout,
                controller,
                format!("{:?} {}", call.verb, call.target.capability),
                message,
                false,
            )),
        };
        if let Some(w) = watch {
            w.answered(answer.is_ok());
        }
        // The change has ended before anyone learns its answer: a read-back issued on
        // that answer must not share a reading that began before the end.
        drop(changing);
        if let Some(leading) = leading {
            leading.finish(&Ok(answer.clone()));
        }
        answer
    }

    /// A check, in the lane's checks, sharing an identical one's answer when it may.
    async fn run_check(
        &self,
        controller: &ControllerId,
        d: &AnyDriver,
        lane: &Lane,
        key: String,
        call: &Call,
        cancel: CancellationToken,
    ) -> Result<Read, String> {
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
        let turn = if d.reads_in_bulk(&call.target.capability) {
            Ok(None)
        } else {
            wait_turn(&lane.checks, queued_until, call.timeout, &cancel)
                .await
                .map(Some)
        };
        let answer = match turn {
            Ok(_turn) => {
                if let Some(w) = watch.as_mut() {
                    w.running();
                }
                let deadline = tokio::time::Instant::now() + call.timeout;
                Ok(self.call_driver(d, call, deadline, cancel).await)
            }
            Err(e) => Err(e),
        };
        if let Some(w) = watch {
            w.answered(matches!(answer, Ok(Ok(_))));
        }
        leading.finish(&answer);
        answer
    }

    async fn call_driver(
        &self,
        d: &AnyDriver,
        call: &Call,
        deadline: tokio::time::Instant,
        cancel: CancellationToken,
    ) -> Read {
        let ctx = CallContext {
            deadline,
            cancel,
            orchestrator: self.me.clone(),
        };
        let target = &call.target;
        match call.verb {
            Verb::Check => d.check(&ctx, target).await,
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
                    pre_fence(d, &checks, target, pf).await?;
                    ctx.deadline = tokio::time::Instant::now() + left;
                }
                d.perform(&ctx, target).await
            }
            Verb::Undo => d.undo(&ctx, target).await,
            Verb::Renew => d.renew(&ctx, target).await,
            Verb::Register | Verb::Discover | Verb::CheckBinding => Err(DriverError::new(
                ErrorKind::Rejected,
                d.id(),
                format!("{:?}", call.verb),
                "a registration check or discovery is not a driver call",
                false,
            )),
        }
    }

    /// Runs the registration check of `controller` here, as this orchestrator, giving up
    /// when `cancel` fires. `known` are the registered controllers' identities.
    pub async fn register(
        &self,
        controller: &ControllerId,
        known: &BTreeMap<ControllerId, String>,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> Result<Report, String> {
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
    ) -> Result<Vec<Discovered>, String> {
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
        call: &Call,
        cancel: CancellationToken,
    ) -> Result<Vec<String>, String> {
        let d = self.driver(controller)?;
        let ctx = CallContext {
            deadline: tokio::time::Instant::now() + call.timeout,
            cancel,
            orchestrator: self.me.clone(),
        };
        d.check_binding(&ctx, &call.target)
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

/// The cluster's executor over [`LocalDrivers`]: what this orchestrator runs for a call routed
/// here, its own or forwarded by the leader.
#[derive(Debug, Clone)]
pub struct DriverExecutor(pub Arc<LocalDrivers>);

impl CallExecutor for DriverExecutor {
    fn execute<'a>(
        &'a self,
        id: &'a ControllerId,
        call: &'a Call,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            Ok(match call.verb {
                Verb::Register => {
                    let report = self.0.register(id, &call.known, call.timeout, cancel);
                    Answer::Report(Box::new(report.await?))
                }
                Verb::CheckBinding => {
                    Answer::Problems(self.0.check_binding(id, call, cancel).await?)
                }
                Verb::Discover => {
                    Answer::Discovered(self.0.discover(id, call.timeout, cancel).await?)
                }
                Verb::Check | Verb::Perform | Verb::Undo | Verb::Renew => {
                    Answer::Reading(self.0.run(id, call, cancel).await?)
                }
            })
        })
    }
}
