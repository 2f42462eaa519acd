//! The driver contract. See `docs/specs/controller.md` for the MUST/SHOULD rules.
//!
//! The values a call carries and answers with (the target, the reading, the error) live in
//! `qfence-call`, shared with the runtime and the cluster; they are re-exported here under
//! the names the drivers use.

use std::fmt;
use std::future::Future;

pub use qfence_call::{
    CapabilityGrade, Discovered, DriverError, ErrorKind, Identity, Probe, Reading, Target,
    fence_verdict,
};
use qfence_model::catalog::SecretUse;
use qfence_model::config::ControllerConfig;
use qfence_model::{ControllerId, ControllerType, OrchestratorId};
use secrecy::SecretString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What every call carries: when it must be done by, how to cancel it, and who makes it (for
/// evidence).
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The call fails with [`ErrorKind::Timeout`] if not done by then.
    pub deadline: Instant,
    /// Cancelled when the leadership or operation that started the call ends.
    pub cancel: CancellationToken,
    /// The orchestrator making the call, recorded in evidence.
    pub orchestrator: OrchestratorId,
}

impl CallContext {
    /// A context that expires `timeout` from now, with a fresh cancellation token.
    pub fn with_timeout(orchestrator: OrchestratorId, timeout: std::time::Duration) -> Self {
        Self {
            deadline: Instant::now() + timeout,
            cancel: CancellationToken::new(),
            orchestrator,
        }
    }

    /// A reading taken now by this context's orchestrator: what every driver's reads return
    /// (a driver that knows the reading is definitive sets that afterwards).
    pub fn reading(&self, holds: bool, detail: String) -> Reading {
        Reading {
            holds,
            detail,
            at: qfence_model::time::wall_clock(),
            by: self.orchestrator.clone(),
            definitive: false,
        }
    }

    /// Runs `fut` under this context's deadline and cancellation, naming `call` in the error.
    pub async fn run<T>(
        &self,
        controller: &ControllerId,
        call: &str,
        fut: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        // Checked before the call starts: a timer whose deadline has passed is only seen
        // as elapsed on a later poll, and a call that finishes on its first poll would act
        // past its deadline.
        if self.cancel.is_cancelled() {
            return Err(DriverError::new(
                ErrorKind::Cancelled,
                controller,
                call,
                "cancelled",
                false,
            ));
        }
        if Instant::now() >= self.deadline {
            return Err(DriverError::new(
                ErrorKind::Timeout,
                controller,
                call,
                "deadline passed before the call started",
                false,
            ));
        }
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(DriverError::new(
                ErrorKind::Cancelled, controller, call, "cancelled", true)),
            () = tokio::time::sleep_until(self.deadline) => Err(DriverError::new(
                ErrorKind::Timeout, controller, call, "deadline passed", true)),
            r = fut => r,
        }
    }
}

/// The driver contract. Implementations are built without I/O from a validated controller
/// configuration and a resolved secret; every method honours the context's deadline and
/// cancellation, and no task it starts outlives the call.
pub trait Driver: Send + Sync + fmt::Debug {
    /// The controller type this driver serves.
    fn controller_type(&self) -> ControllerType;

    /// The controller's name, for errors and evidence.
    fn id(&self) -> &ControllerId;

    /// Reads identity and grades every capability, without side effects. Never fences to test
    /// a permission.
    fn probe(&self, ctx: &CallContext) -> impl Future<Output = Result<Probe, DriverError>> + Send;

    /// Lists the resources each capability can act on.
    fn discover(
        &self,
        ctx: &CallContext,
    ) -> impl Future<Output = Result<Vec<Discovered>, DriverError>> + Send;

    /// Checks what a binding needs from the bound resource (it exists, the VM is on the named
    /// node), without side effects. Returns the problems found; empty means fine. Runs when a
    /// binding names the resource and, the cheap part, before every fence.
    fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Vec<String>, DriverError>> + Send;

    /// Reads whether the capability's condition holds. No side effects.
    fn check(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send;

    /// Makes the condition hold (fence, start, promote, own the VIP, raise the shield, arm the
    /// dead-man) and returns the read-back that proves it. Idempotent: when the condition already
    /// holds it returns that reading ("already off" is success).
    fn perform(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send;

    /// Undoes the capability (unfence, lower the shield, disarm the dead-man) and returns the
    /// read-back. By default (and for capabilities without an undo) `Unsupported`.
    fn undo(
        &self,
        _ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send {
        std::future::ready(Err(unsupported(self, "undo", target)))
    }

    /// Renews a dead-man switch. By default (and for every other capability) `Unsupported`.
    fn renew(
        &self,
        _ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send {
        std::future::ready(Err(unsupported(self, "renew", target)))
    }

    /// Reads many targets of this controller in one call: one result per target, in their
    /// order, each as [`Driver::check`] would give it (one target's failure fails only its
    /// own result). By default one `check` after another; a driver that answers checks from
    /// a shared listing reads them together, so that one request answers them all.
    fn check_many(
        &self,
        ctx: &CallContext,
        targets: &[Target],
    ) -> impl Future<Output = Vec<Result<Reading, DriverError>>> + Send {
        async move {
            let mut out = Vec::with_capacity(targets.len());
            for t in targets {
                out.push(self.check(ctx, t).await);
            }
            out
        }
    }

    /// Whether a check of `capability` is answered from a listing shared by many checks (one
    /// request to the target for all of them), so that the caller need not ration such checks
    /// as it rations requests. By default no.
    fn reads_in_bulk(&self, _capability: &str) -> bool {
        false
    }

    /// Ends what the driver keeps between calls at the target (a session, a ticket, a token),
    /// waiting a couple of seconds at most; the next call starts a new one. Never fails: what
    /// cannot be ended expires at the target. By default there is nothing to end.
    fn close(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// What fails in a controller's name: every driver, and the clients and shared state a driver
/// keeps apart (Nova's client, Proxmox's inner). One error helper for all of them.
pub trait ControllerErrors {
    /// The controller the errors name.
    fn controller_id(&self) -> &ControllerId;

    /// An error of `call` at this controller; `unknown` says whether the target's state is
    /// now unknown.
    fn err(
        &self,
        kind: ErrorKind,
        call: &str,
        msg: impl Into<String>,
        unknown: bool,
    ) -> DriverError {
        DriverError::new(kind, self.controller_id(), call, msg, unknown)
    }
}

impl<D: Driver> ControllerErrors for D {
    fn controller_id(&self) -> &ControllerId {
        self.id()
    }
}

/// One shape for building every driver: from its controller's validated configuration and the
/// secret this orchestrator resolved for it, without I/O (reading a CA file aside). A
/// configuration of another type gives [`DriverError::wrong_type`]; whether the type needs a
/// secret is the catalog's word ([`ControllerType::secret`]), and a missing one required
/// gives [`missing_secret`]. [`crate::AnyDriver::build`] picks the driver and passes the
/// secret only to types that use one.
pub trait Build: Driver + Sized {
    /// The controller type this driver serves.
    const TYPE: ControllerType;

    /// Builds the driver.
    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError>;
}

/// The secret a type the catalog says needs one was built with, or the error every driver
/// gives without it.
pub fn required_secret(
    id: &ControllerId,
    ty: ControllerType,
    secret: Option<SecretString>,
) -> Result<SecretString, DriverError> {
    debug_assert_eq!(ty.secret(), SecretUse::Required, "{ty} needs no secret");
    secret.ok_or_else(|| missing_secret(id, ty))
}

/// The build error of a controller whose type needs a secret and that has none.
pub fn missing_secret(id: &ControllerId, ty: ControllerType) -> DriverError {
    DriverError::new(
        ErrorKind::Auth,
        id,
        "build",
        format!("a {ty} controller needs a secret (secret: NAME)"),
        false,
    )
}

/// The error for a call `driver` does not offer for `target`'s capability: what the defaults
/// of [`Driver::undo`] and [`Driver::renew`] answer, and what drivers answer for capabilities
/// without that call.
pub fn unsupported<D: Driver + ?Sized>(driver: &D, call: &str, target: &Target) -> DriverError {
    let ty = driver.controller_type();
    DriverError::new(
        ErrorKind::Unsupported,
        driver.id(),
        target.capability.clone(),
        format!(
            "{call} is not offered for {:?} by a {ty} controller",
            target.capability
        ),
        false,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use qfence_model::{ControllerType, SiteId};

    use super::Target;

    /// Every driver's source, to find its parameter reads.
    const SOURCES: &[(&str, &str)] = &[
        ("redfish/mod.rs", include_str!("redfish/mod.rs")),
        ("redfish/client.rs", include_str!("redfish/client.rs")),
        ("redfish/session.rs", include_str!("redfish/session.rs")),
        ("redfish/listing.rs", include_str!("redfish/listing.rs")),
        ("redfish/driver.rs", include_str!("redfish/driver.rs")),
        ("redfish/probe.rs", include_str!("redfish/probe.rs")),
        ("fence_agent/mod.rs", include_str!("fence_agent/mod.rs")),
        (
            "fence_agent/metadata.rs",
            include_str!("fence_agent/metadata.rs"),
        ),
        (
            "fence_agent/process.rs",
            include_str!("fence_agent/process.rs"),
        ),
        (
            "fence_agent/driver.rs",
            include_str!("fence_agent/driver.rs"),
        ),
        ("ipmi/driver/mod.rs", include_str!("ipmi/driver/mod.rs")),
        (
            "ipmi/driver/client.rs",
            include_str!("ipmi/driver/client.rs"),
        ),
        ("ipmi/driver/power.rs", include_str!("ipmi/driver/power.rs")),
        (
            "ipmi/driver/watchdog.rs",
            include_str!("ipmi/driver/watchdog.rs"),
        ),
        ("ipmi/driver/probe.rs", include_str!("ipmi/driver/probe.rs")),
        ("proxmox/mod.rs", include_str!("proxmox/mod.rs")),
        ("proxmox/client.rs", include_str!("proxmox/client.rs")),
        ("proxmox/listing.rs", include_str!("proxmox/listing.rs")),
        (
            "proxmox/replication.rs",
            include_str!("proxmox/replication.rs"),
        ),
        ("proxmox/driver.rs", include_str!("proxmox/driver.rs")),
        ("proxmox/probe.rs", include_str!("proxmox/probe.rs")),
        ("postgres/mod.rs", include_str!("postgres/mod.rs")),
        ("postgres/client.rs", include_str!("postgres/client.rs")),
        ("postgres/reads.rs", include_str!("postgres/reads.rs")),
        ("postgres/roles.rs", include_str!("postgres/roles.rs")),
        ("postgres/probe.rs", include_str!("postgres/probe.rs")),
        ("postgres/driver.rs", include_str!("postgres/driver.rs")),
        ("docker.rs", include_str!("docker.rs")),
        ("fortigate/mod.rs", include_str!("fortigate/mod.rs")),
        ("fortigate/client.rs", include_str!("fortigate/client.rs")),
        ("fortigate/policy.rs", include_str!("fortigate/policy.rs")),
        ("fortigate/vip.rs", include_str!("fortigate/vip.rs")),
        ("fortigate/ha.rs", include_str!("fortigate/ha.rs")),
        ("fortigate/probe.rs", include_str!("fortigate/probe.rs")),
        ("fortigate/driver.rs", include_str!("fortigate/driver.rs")),
        ("nova/driver.rs", include_str!("nova/driver.rs")),
        ("nova/api.rs", include_str!("nova/api.rs")),
    ];

    fn target(capability: &str, params: &[(&str, &str)]) -> Target {
        Target {
            capability: capability.to_owned(),
            resource: "r".to_owned(),
            params: params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            site: SiteId::new("dc1").unwrap(),
        }
    }

    /// A driver that read a parameter straight from the map, or named one the catalog does not
    /// declare for its type, would read something validation never checked (or refuses).
    /// Names given as a variable are checked when the read runs (see
    /// `an_undeclared_param_read_is_caught`), by the driver's own tests.
    #[test]
    fn drivers_read_only_params_the_catalog_declares() {
        let mut reads = 0;
        for (file, src) in SOURCES {
            assert!(
                !src.contains(".params.get("),
                "{file} reads a binding parameter without Target::param"
            );
            for call in src.split(".param(ControllerType::").skip(1) {
                let (ty, rest) = call
                    .split_once(',')
                    .expect("a param call has two arguments");
                let ty = ControllerType::ALL
                    .into_iter()
                    .find(|t| format!("{t:?}") == ty.trim())
                    .unwrap_or_else(|| panic!("{file}: no controller type {ty}"));
                let arg = rest.trim_start().split(')').next().unwrap_or("").trim();
                let name = if let Some(lit) = arg.strip_prefix('"') {
                    lit.trim_end_matches('"').to_owned()
                } else if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                {
                    // A driver's constants may live in another file of its folder.
                    let decl = format!("const {arg}: &str = \"");
                    let value = SOURCES
                        .iter()
                        .find_map(|(_, s)| s.find(&decl).map(|at| &s[at + decl.len()..]))
                        .unwrap_or_else(|| panic!("{file}: constant {arg} not found"));
                    value[..value.find('"').unwrap()].to_owned()
                } else {
                    continue;
                };
                reads += 1;
                assert!(
                    ty.capabilities()
                        .iter()
                        .any(|c| c.params.get(&name).is_some()),
                    "{file} reads param {name:?}, which no {ty} capability declares in the catalog"
                );
            }
        }
        // IPMI's timeout_seconds, PostgreSQL's expect_role (twice).
        assert!(reads >= 3, "only {reads} literal param reads found");
    }

    #[test]
    fn declared_params_are_read() {
        let t = target("watchdog", &[("timeout_seconds", "30")]);
        assert_eq!(t.param(ControllerType::Ipmi, "timeout_seconds"), Some("30"));
        let t = target("vip.own", &[("dc1", "10.1.1.5")]);
        assert_eq!(t.param(ControllerType::Fortigate, "dc1"), Some("10.1.1.5"));
        assert_eq!(t.param(ControllerType::Fortigate, "dc2"), None);
    }

    #[test]
    #[should_panic(expected = "which the catalog does not declare")]
    fn an_undeclared_param_read_is_caught() {
        let t = target("power.off", &[("timeout_seconds", "30")]);
        let _ = t.param(ControllerType::Ipmi, "timeout_seconds");
    }
}
