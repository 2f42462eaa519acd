//! [`AnyDriver`]: the driver for a controller configuration, whatever its type.
//!
//! The decision core and the runtime hold controllers of every type side by side; this enum
//! builds the right driver from a [`ControllerConfig`] and a resolved secret (no I/O but
//! reading a CA file) and dispatches the [`Driver`] trait to it. A type whose driver is not in
//! this build is refused at build time with [`Error::NoDriver`].

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType};

use crate::driver::{CallContext, Discovered, Driver, DriverError, Probe, Reading, Target};
use crate::error::Error;
use crate::fence_agent::FenceAgentDriver;
use crate::redfish::RedfishDriver;
use crate::secrets::Secret;

/// A driver of any type.
#[derive(Debug)]
pub enum AnyDriver {
    Redfish(RedfishDriver),
    FenceAgent(FenceAgentDriver),
}

impl AnyDriver {
    /// Builds the driver for `config`, with its secret already resolved by this orchestrator.
    pub fn build(
        id: &ControllerId,
        config: &ControllerConfig,
        secret: Option<Secret>,
    ) -> Result<Self, Error> {
        let needs_secret = |what: &str| Error::Build {
            controller: id.to_string(),
            reason: format!("a {what} controller needs a secret (secret: NAME)"),
        };
        match &config.kind {
            ControllerKind::Redfish {
                endpoint,
                username,
                auth,
            } => {
                let secret = secret.ok_or_else(|| needs_secret("redfish"))?;
                Ok(AnyDriver::Redfish(RedfishDriver::new(
                    id.clone(),
                    endpoint,
                    username,
                    *auth,
                    &config.tls,
                    Some(secret),
                )?))
            }
            ControllerKind::FenceAgent {
                agent,
                options,
                level,
            } => Ok(AnyDriver::FenceAgent(FenceAgentDriver::new(
                id.clone(),
                agent,
                options,
                *level,
                secret,
            )?)),
            other => Err(Error::NoDriver {
                controller: id.to_string(),
                kind: other.controller_type().to_string(),
            }),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            AnyDriver::Redfish($d) => $e,
            AnyDriver::FenceAgent($d) => $e,
        }
    };
}

impl Driver for AnyDriver {
    fn controller_type(&self) -> ControllerType {
        dispatch!(self, d => d.controller_type())
    }

    fn id(&self) -> &ControllerId {
        dispatch!(self, d => d.id())
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        dispatch!(self, d => d.probe(ctx).await)
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        dispatch!(self, d => d.discover(ctx).await)
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        dispatch!(self, d => d.check_binding(ctx, target).await)
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        dispatch!(self, d => d.check(ctx, target).await)
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        dispatch!(self, d => d.perform(ctx, target).await)
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        dispatch!(self, d => d.undo(ctx, target).await)
    }

    async fn renew(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        dispatch!(self, d => d.renew(ctx, target).await)
    }
}
