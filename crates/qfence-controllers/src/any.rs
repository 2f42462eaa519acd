//! [`AnyDriver`]: the driver for a controller configuration, whatever its type.
//!
//! The decision core and the runtime hold controllers of every type side by side; this enum
//! builds the right driver from a [`ControllerConfig`] and a resolved secret (no I/O but
//! reading a CA file) and dispatches the [`Driver`] trait to it. Every type has a driver; the
//! Nova driver's typed API (for Instance HA) is reached through [`AnyDriver::Nova`].

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType};

use secrecy::SecretString;

use crate::docker::DockerDriver;
use crate::driver::{CallContext, Discovered, Driver, DriverError, Probe, Reading, Target};
use crate::error::Error;
use crate::fence_agent::FenceAgentDriver;
use crate::fortigate::FortigateDriver;
use crate::ipmi::IpmiDriver;
use crate::nova::NovaDriver;
use crate::postgres::PostgresDriver;
use crate::proxmox::ProxmoxDriver;
use crate::redfish::RedfishDriver;
use crate::secrets::Secret;

/// Why an `agent` controller has no driver: the host agent does not exist yet (issue 16).
pub const NO_AGENT: &str = "no agent connected: the host agent (qfence agent) is not built yet, \
                            so nothing can run unit.health, unit.restart or unit.mask";

/// A driver of any type (every type but `agent`, refused at build with [`NO_AGENT`]).
#[derive(Debug)]
pub enum AnyDriver {
    Redfish(RedfishDriver),
    FenceAgent(FenceAgentDriver),
    Ipmi(IpmiDriver),
    // Boxed: its per-node listings and caches make it the largest by far.
    Proxmox(Box<ProxmoxDriver>),
    /// Boxed: the tokio-postgres configuration makes it several times larger than the rest.
    Postgres(Box<PostgresDriver>),
    Docker(DockerDriver),
    Fortigate(FortigateDriver),
    Nova(NovaDriver),
}

/// A driver's own build error (a `DriverError` from a `build` function), as a build error of
/// this crate: the message already names what is wrong with the configuration.
fn build_error(id: &ControllerId) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::Build {
        controller: id.to_string(),
        reason: e.message,
    }
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
            ControllerKind::Ipmi { .. } => {
                let secret = secret.ok_or_else(|| needs_secret("ipmi"))?;
                IpmiDriver::build(id.clone(), config, secret_string(secret))
                    .map(AnyDriver::Ipmi)
                    .map_err(build_error(id))
            }
            ControllerKind::Proxmox { .. } => {
                let secret = secret.ok_or_else(|| needs_secret("proxmox"))?;
                crate::proxmox::build(id.clone(), config, Some(secret_string(secret)))
                    .map(|d| AnyDriver::Proxmox(Box::new(d)))
                    .map_err(build_error(id))
            }
            ControllerKind::Postgres { .. } => {
                // Without a secret the role logs in by what pg_hba.conf allows (peer, trust).
                crate::postgres::build(id.clone(), config, secret.map(secret_string))
                    .map(|d| AnyDriver::Postgres(Box::new(d)))
                    .map_err(build_error(id))
            }
            ControllerKind::Docker { .. } => {
                // Docker authenticates by socket access or client certificate: no secret.
                crate::docker::build(id.clone(), config, None)
                    .map(AnyDriver::Docker)
                    .map_err(build_error(id))
            }
            ControllerKind::Fortigate { .. } => {
                let secret = secret.ok_or_else(|| needs_secret("fortigate"))?;
                crate::fortigate::build(id.clone(), config, Some(secret_string(secret)))
                    .map(AnyDriver::Fortigate)
                    .map_err(build_error(id))
            }
            ControllerKind::Nova { .. } => {
                let secret = secret.ok_or_else(|| needs_secret("nova"))?;
                crate::nova::build(id.clone(), config, Some(secret_string(secret)))
                    .map(AnyDriver::Nova)
                    .map_err(build_error(id))
            }
            // Refused, not stubbed: a stub answering "healthy" or "masked" would be a lie.
            ControllerKind::Agent => Err(Error::Build {
                controller: id.to_string(),
                reason: NO_AGENT.to_owned(),
            }),
        }
    }
}

fn secret_string(secret: Secret) -> SecretString {
    SecretString::from(secret.expose().to_owned())
}

macro_rules! dispatch {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            AnyDriver::Redfish($d) => $e,
            AnyDriver::FenceAgent($d) => $e,
            AnyDriver::Ipmi($d) => $e,
            AnyDriver::Proxmox($d) => $e,
            AnyDriver::Postgres($d) => $e,
            AnyDriver::Docker($d) => $e,
            AnyDriver::Fortigate($d) => $e,
            AnyDriver::Nova($d) => $e,
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

    async fn check_many(
        &self,
        ctx: &CallContext,
        targets: &[Target],
    ) -> Vec<Result<Reading, DriverError>> {
        dispatch!(self, d => d.check_many(ctx, targets).await)
    }

    fn reads_in_bulk(&self, capability: &str) -> bool {
        dispatch!(self, d => d.reads_in_bulk(capability))
    }

    async fn close(&self) {
        dispatch!(self, d => d.close().await)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use qfence_model::config::{NovaAuth, NovaInterface, ProxmoxAuth, RedfishAuth, TlsTrust};
    use qfence_model::{FenceLevel, SiteId};

    use super::*;

    fn config(kind: ControllerKind) -> ControllerConfig {
        ControllerConfig {
            site: SiteId::new("dc1").unwrap(),
            reach: vec![],
            secret: None,
            tls: TlsTrust::SystemRoots,
            timeout: Duration::from_secs(5),
            kind,
        }
    }

    fn url(s: &str) -> url::Url {
        s.parse().unwrap()
    }

    /// One configuration of every type, as validation would pass it.
    fn every_kind() -> Vec<ControllerKind> {
        vec![
            ControllerKind::Redfish {
                endpoint: url("https://192.0.2.1"),
                username: "qfence".into(),
                auth: RedfishAuth::Session,
            },
            ControllerKind::Ipmi {
                endpoint: "192.0.2.2:623".into(),
                username: "qfence".into(),
                cipher_suite: 17,
            },
            ControllerKind::Proxmox {
                endpoint: url("https://192.0.2.3:8006"),
                auth: ProxmoxAuth::Token {
                    token_id: "qfence@pve!fence".into(),
                },
            },
            ControllerKind::Fortigate {
                endpoint: url("https://192.0.2.4"),
                vdom: None,
            },
            ControllerKind::Docker {
                endpoint: url("unix:///var/run/docker.sock"),
            },
            ControllerKind::Postgres {
                endpoint: url("postgresql://192.0.2.5:5432/app"),
                username: "qfence".into(),
            },
            ControllerKind::FenceAgent {
                agent: "fence_dummy".into(),
                options: BTreeMap::new(),
                level: FenceLevel::Compute,
            },
            ControllerKind::Nova {
                endpoint: url("https://192.0.2.6:5000/v3"),
                auth: NovaAuth::ApplicationCredential { id: "ac".into() },
                interface: NovaInterface::Public,
                region: None,
            },
        ]
    }

    /// Every type builds (without I/O: the addresses are unroutable documentation ones) into
    /// the driver of its own type, which never prints its secret.
    #[test]
    fn every_type_builds_its_own_driver() {
        let id = ControllerId::new("c").unwrap();
        let mut built = Vec::new();
        for kind in every_kind() {
            let ty = kind.controller_type();
            let r = AnyDriver::build(&id, &config(kind), Some(Secret::new("s3cret".into())));
            let d = r.unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(d.controller_type(), ty);
            assert_eq!(d.id(), &id);
            assert!(
                !format!("{d:?}").contains("s3cret"),
                "{ty} prints its secret"
            );
            built.push(ty);
        }
        // Every type but `agent`, which has no driver yet.
        assert_eq!(built.len(), ControllerType::ALL.len() - 1);
    }

    #[test]
    fn an_agent_controller_is_refused_clearly_until_the_agent_exists() {
        let id = ControllerId::new("agents-dc1").unwrap();
        let e = AnyDriver::build(&id, &config(ControllerKind::Agent), None).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("agents-dc1"), "{msg}");
        assert!(msg.contains("no agent connected"), "{msg}");
    }

    #[test]
    fn types_that_authenticate_with_a_secret_need_one() {
        let id = ControllerId::new("c").unwrap();
        for kind in every_kind() {
            let ty = kind.controller_type();
            let r = AnyDriver::build(&id, &config(kind), None);
            let needs = matches!(
                ty,
                ControllerType::Redfish
                    | ControllerType::Ipmi
                    | ControllerType::Proxmox
                    | ControllerType::Fortigate
                    | ControllerType::Nova
            );
            assert_eq!(r.is_err(), needs, "{ty}: {r:?}");
        }
    }
}
