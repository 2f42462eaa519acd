//! The drivers this orchestrator calls itself, behind the cluster's [`CallExecutor`].
//!
//! A controller call travels as JSON (it may be forwarded to another orchestrator, which runs
//! it through its own `LocalDrivers`): [`WireCall`] says which driver method, capability,
//! resource and site, and how long it may take; the answer is a [`WireResult`], a reading or a
//! driver error with its kind, so the leader can tell "refused" (FAILED) from "state unknown".
//! A registration check ([`Verb::Register`]) travels the same way, so it runs where routing
//! says a fence would; its answer is the registration report as JSON ([`WireReport`]).

use std::collections::BTreeMap;
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
use tokio_util::sync::CancellationToken;

use super::RuntimeError;
use super::effective::ConfigCell;

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
    /// The call's deadline, relative to when the executing orchestrator starts it.
    pub timeout_ms: u64,
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
    secrets: SecretStore,
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
            config: config.clone(),
            secrets: secrets.clone(),
        }
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
        let config = self.config.refresh();
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

    /// Runs one call here.
    pub async fn run(
        &self,
        controller: &ControllerId,
        call: &WireCall,
        cancel: CancellationToken,
    ) -> Result<WireResult, String> {
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
        let result = match call.verb {
            Verb::Check => d.check(&ctx, &target).await,
            Verb::Perform => d.perform(&ctx, &target).await,
            Verb::Undo => d.undo(&ctx, &target).await,
            Verb::Renew => d.renew(&ctx, &target).await,
            Verb::Register | Verb::Discover => {
                return Err("a registration check or discovery is not a driver call".into());
            }
        };
        Ok(result.into())
    }

    /// Runs the registration check of `controller` here, as this orchestrator, giving up
    /// when `cancel` fires.
    pub async fn register(
        &self,
        controller: &ControllerId,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> Result<registration::Report, String> {
        let known = BTreeMap::new();
        let config = self.config.refresh();
        let check = registration::register(Registration {
            config: &config,
            controller,
            orchestrator: &self.me,
            secrets: &self.secrets,
            known: &known,
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
        controller: &'a ControllerRecord,
        call: &'a serde_json::Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let call: WireCall = serde_json::from_value(call.clone())
                .map_err(|e| format!("not a qfence controller call: {e}"))?;
            if call.verb == Verb::Register {
                let timeout = Duration::from_millis(call.timeout_ms);
                let report = self.0.register(&controller.id, timeout, cancel).await?;
                return serde_json::to_value(report).map_err(|e| e.to_string());
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
