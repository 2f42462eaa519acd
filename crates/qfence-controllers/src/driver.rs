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
use qfence_model::{ControllerId, ControllerType, OrchestratorId};
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
    /// read-back. `Unsupported` for capabilities without an undo.
    fn undo(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send;

    /// Renews a dead-man switch. `Unsupported` for every other capability.
    fn renew(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> impl Future<Output = Result<Reading, DriverError>> + Send;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use qfence_model::{ControllerType, SiteId};

    use super::Target;

    /// Every driver's source, to find its parameter reads.
    const SOURCES: &[(&str, &str)] = &[
        ("redfish.rs", include_str!("redfish.rs")),
        ("fence_agent.rs", include_str!("fence_agent.rs")),
        ("ipmi/driver.rs", include_str!("ipmi/driver.rs")),
        ("proxmox.rs", include_str!("proxmox.rs")),
        ("postgres.rs", include_str!("postgres.rs")),
        ("docker.rs", include_str!("docker.rs")),
        ("fortigate/mod.rs", include_str!("fortigate/mod.rs")),
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
                    let decl = format!("const {arg}: &str = \"");
                    let at = src
                        .find(&decl)
                        .unwrap_or_else(|| panic!("{file}: constant {arg} not found"));
                    let value = &src[at + decl.len()..];
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
