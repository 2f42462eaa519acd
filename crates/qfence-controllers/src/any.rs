//! [`AnyDriver`]: the driver for a controller configuration, whatever its type.
//!
//! The decision core and the runtime hold controllers of every type side by side; this enum
//! builds the right driver from a [`ControllerConfig`] and a resolved secret (no I/O but
//! reading a CA file) and dispatches the [`Driver`] trait to it. Every type has a driver; the
//! Nova driver's typed API (for Instance HA) is reached through [`AnyDriver::Nova`].

use qfence_model::catalog::SecretUse;
use qfence_model::config::ControllerConfig;
use qfence_model::{ControllerId, ControllerType};

use secrecy::SecretString;

use crate::docker::DockerDriver;
use crate::driver::{
    Build, CallContext, Discovered, Driver, DriverError, Probe, Reading, Target, missing_secret,
};
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
    /// Whether the type needs one, may use one or ignores it is the catalog's word
    /// ([`ControllerType::secret`]); every driver is built the same way ([`Build`]).
    pub fn build(
        id: &ControllerId,
        config: &ControllerConfig,
        secret: Option<Secret>,
    ) -> Result<Self, Error> {
        let ty = config.controller_type();
        let secret = match ty.secret() {
            SecretUse::Required | SecretUse::Optional => secret.map(SecretString::from),
            SecretUse::Unused | SecretUse::Refused => None,
        };
        if ty.secret() == SecretUse::Required && secret.is_none() {
            return Err(build_error(id)(missing_secret(id, ty)));
        }
        let id = id.clone();
        let built = match ty {
            ControllerType::Redfish => {
                RedfishDriver::build(id.clone(), config, secret).map(AnyDriver::Redfish)
            }
            ControllerType::FenceAgent => {
                FenceAgentDriver::build(id.clone(), config, secret).map(AnyDriver::FenceAgent)
            }
            ControllerType::Ipmi => {
                IpmiDriver::build(id.clone(), config, secret).map(AnyDriver::Ipmi)
            }
            ControllerType::Proxmox => ProxmoxDriver::build(id.clone(), config, secret)
                .map(|d| AnyDriver::Proxmox(Box::new(d))),
            ControllerType::Postgres => PostgresDriver::build(id.clone(), config, secret)
                .map(|d| AnyDriver::Postgres(Box::new(d))),
            ControllerType::Docker => {
                DockerDriver::build(id.clone(), config, secret).map(AnyDriver::Docker)
            }
            ControllerType::Fortigate => {
                FortigateDriver::build(id.clone(), config, secret).map(AnyDriver::Fortigate)
            }
            ControllerType::Nova => {
                NovaDriver::build(id.clone(), config, secret).map(AnyDriver::Nova)
            }
            // Refused, not stubbed: a stub answering "healthy" or "masked" would be a lie.
            ControllerType::Agent => {
                return Err(Error::Build {
                    controller: id.to_string(),
                    reason: NO_AGENT.to_owned(),
                });
            }
        };
        built.map_err(build_error(&id))
    }
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

    use qfence_model::config::{
        ControllerKind, NovaAuth, NovaInterface, ProxmoxAuth, RedfishAuth, TlsTrust,
    };
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
            // The catalog says it, for the build and validation alike.
            assert_eq!(needs, ty.secret() == SecretUse::Required, "{ty}");
        }
    }
}
