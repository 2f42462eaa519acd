//! The [`Driver`] trait over the typed API: the catalog's binding-level capabilities. This
//! is glue only; what each capability reads and does is in `api.rs`.
//!
//! | capability | check holds when | perform | undo |
//! |---|---|---|---|
//! | `host.force_down` | the service is forced down | force down | clear forced-down |
//! | `host.disable` | the service is disabled | disable with `reason` | enable |
//! | `host.status` | up, enabled, not forced down | - | - |
//! | `server.evacuate` | `ACTIVE`, no task, on a host that is up and not forced down | evacuate, follow the record to done, read back | - |
//! | `server.lock` | the server is locked | lock with `reason` | unlock |

use qfence_model::{ControllerId, ControllerType};

use super::NovaDriver;
use super::api::unknown_after_write;
use super::types::{EvacuateRequest, EvacuationProgress, ServiceState, ServiceStatus};
use crate::driver::{
    Build, CallContext, ControllerErrors, Discovered, Driver, DriverError, ErrorKind, Probe,
    Reading, Target, unsupported,
};

pub(crate) const FORCE_DOWN: &str = "host.force_down";
pub(crate) const DISABLE: &str = "host.disable";
pub(crate) const STATUS: &str = "host.status";
pub(crate) const EVACUATE: &str = "server.evacuate";
pub(crate) const LOCK: &str = "server.lock";
const REASON: &str = "reason";
const DEFAULT_REASON: &str = "qfence";

/// Said with every forced-down reading, so no operator mistakes it for a power fence.
const NOT_A_POWER_FENCE: &str =
    "(an application-level fence: Nova stops using the host, which may still run)";

impl NovaDriver {
    fn reason<'a>(&self, target: &'a Target) -> &'a str {
        target
            .param(ControllerType::Nova, REASON)
            .unwrap_or(DEFAULT_REASON)
    }

    /// The reading of a host capability from its service, read now.
    async fn read_host(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let s = self.service_now(&target.resource).await?;
        let (holds, note) = match target.capability.as_str() {
            FORCE_DOWN => (s.forced_down, format!(" {NOT_A_POWER_FENCE}")),
            DISABLE => (s.status == ServiceStatus::Disabled, String::new()),
            _ => (
                s.state == ServiceState::Up && s.status == ServiceStatus::Enabled && !s.forced_down,
                String::new(),
            ),
        };
        Ok(ctx.reading(holds, format!("{}{note}", s.describe())))
    }

    async fn read_server(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let s = self.server_now(&target.resource).await?;
        if target.capability == LOCK {
            return Ok(ctx.reading(s.locked, s.describe()));
        }
        let (holds, svc) = self.placed_well(&s).await?;
        let mut detail = s.describe();
        if let Some(svc) = svc {
            detail.push_str(&format!("; host {}", svc.describe()));
        }
        Ok(ctx.reading(holds, detail))
    }

    async fn set_host(
        &self,
        ctx: &CallContext,
        target: &Target,
        on: bool,
    ) -> Result<Reading, DriverError> {
        let host = &target.resource;
        let before = self.read_host(ctx, target).await?;
        if before.holds == on {
            return Ok(before);
        }
        let change = match (target.capability.as_str(), on) {
            (FORCE_DOWN, _) => serde_json::json!({"forced_down": on}),
            (_, true) => {
                serde_json::json!({"status": "disabled", "disabled_reason": self.reason(target)})
            }
            (_, false) => serde_json::json!({"status": "enabled"}),
        };
        self.update_service_now(host, change).await?;
        let after = self
            .read_host(ctx, target)
            .await
            .map_err(unknown_after_write)?;
        if after.holds != on {
            return Err(self.client.err(
                ErrorKind::Protocol,
                &target.capability,
                format!("Nova accepted the change but reads back {}", after.detail),
                true,
            ));
        }
        Ok(after)
    }

    async fn set_lock(
        &self,
        ctx: &CallContext,
        target: &Target,
        on: bool,
    ) -> Result<Reading, DriverError> {
        let before = self.read_server(ctx, target).await?;
        if before.holds == on {
            return Ok(before);
        }
        let s = if on {
            self.lock_now(&target.resource, self.reason(target)).await?
        } else {
            self.unlock_now(&target.resource).await?
        };
        if s.locked != on {
            return Err(self.client.err(
                ErrorKind::Protocol,
                &target.capability,
                format!("Nova accepted the change but reads back {}", s.describe()),
                true,
            ));
        }
        Ok(ctx.reading(on, s.describe()))
    }

    /// Evacuates a server whose host failed and follows it to its end; already well placed
    /// is success. The deadline passing first is a timeout, the state unknown.
    async fn recover_server(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let before = self.read_server(ctx, target).await?;
        if before.holds {
            return Ok(before);
        }
        let e = self
            .evacuate_now(&target.resource, &EvacuateRequest::default())
            .await?;
        loop {
            match self.progress_now(&e).await? {
                EvacuationProgress::Running(_) => {
                    let wait = super::api::FOLLOW_POLL.min(super::client::time_left(ctx.deadline));
                    tokio::time::sleep(wait).await;
                }
                EvacuationProgress::Failed { migration, server } => {
                    return Err(self.client.err(
                        ErrorKind::Rejected,
                        EVACUATE,
                        format!(
                            "the evacuation from {} failed: migration {} {}; {}",
                            e.source,
                            migration.id,
                            migration.status,
                            server.describe()
                        ),
                        false,
                    ));
                }
                EvacuationProgress::Done { migration, server } => {
                    let mut r = self
                        .read_server(ctx, target)
                        .await
                        .map_err(unknown_after_write)?;
                    r.detail = format!(
                        "evacuated from {} (migration {} {}): {}",
                        e.source, migration.id, migration.status, r.detail
                    );
                    debug_assert_eq!(server.id, target.resource);
                    return Ok(r);
                }
            }
        }
    }
}

impl Driver for NovaDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", self.probe_now()).await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            let mut out = Vec::new();
            for s in self.services_now(None).await? {
                for cap in [FORCE_DOWN, DISABLE, STATUS] {
                    out.push(Discovered {
                        capability: cap.to_owned(),
                        resource: s.host.clone(),
                        description: format!("compute host {}", s.describe()),
                    });
                }
            }
            for s in self.list_servers(None).await? {
                for cap in [EVACUATE, LOCK] {
                    out.push(Discovered {
                        capability: cap.to_owned(),
                        resource: s.id.clone(),
                        description: s.describe(),
                    });
                }
            }
            Ok(out)
        })
        .await
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        ctx.run(&self.id, "check_binding", async {
            let mut problems = Vec::new();
            let missing = |e: &DriverError| e.kind == ErrorKind::Rejected;
            match target.capability.as_str() {
                FORCE_DOWN | DISABLE | STATUS => match self.service_now(&target.resource).await {
                    Ok(_) => {}
                    Err(e) if missing(&e) => problems.push(e.message),
                    Err(e) => return Err(e),
                },
                EVACUATE | LOCK => match self.server_now(&target.resource).await {
                    Ok(s) if s.host.is_none() && target.capability == EVACUATE => problems.push(
                        format!("{}: its host is not shown to this credential", s.describe()),
                    ),
                    Ok(_) => {}
                    Err(e) if missing(&e) => {
                        problems.push(format!("server {}: {}", target.resource, e.message))
                    }
                    Err(e) => return Err(e),
                },
                _ => return Err(unsupported(self, "the capability", target)),
            }
            Ok(problems)
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", async {
            match target.capability.as_str() {
                FORCE_DOWN | DISABLE | STATUS => self.read_host(ctx, target).await,
                EVACUATE | LOCK => self.read_server(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                FORCE_DOWN | DISABLE => self.set_host(ctx, target, true).await,
                LOCK => self.set_lock(ctx, target, true).await,
                EVACUATE => self.recover_server(ctx, target).await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "undo", async {
            match target.capability.as_str() {
                FORCE_DOWN | DISABLE => self.set_host(ctx, target, false).await,
                LOCK => self.set_lock(ctx, target, false).await,
                _ => Err(unsupported(self, "undo", target)),
            }
        })
        .await
    }

    /// Revokes the Keystone token the driver holds.
    async fn close(&self) {
        self.client.logout().await;
    }
}
