//! The OpenStack Nova driver: the compute API of one cloud region, through Keystone v3.
//!
//! The model, before the API. A Nova controller is one region's compute endpoint, found in
//! the service catalog of a Keystone token (`endpoint` is Keystone; `interface` and `region`
//! pick the catalog entry). The token comes from a password scoped to a project or from an
//! application credential (what operators are told to give services); it is shared by every
//! call, reused until shortly before it expires, and made again once when Nova answers 401
//! (revoked early). Keystone and Nova are reached through one HTTPS client with the
//! controller's TLS trust: a pin must match both certificates (one front end), a CA file
//! covers both.
//!
//! What Nova is for in qfence is Instance HA: reading compute services (up/down, enabled,
//! forced down, heartbeat), fencing a failed host at the application level (force it down,
//! disable it with a reason), and evacuating its servers, each followed through its migration
//! record to `done`, `error` or `failed`. That is the typed API of [`NovaDriver`]
//! ([`api`]: plain types in and out, [`types`]). The binding-level capabilities of the
//! catalog (`host.force_down`, `host.disable`, `host.status`, `server.evacuate`,
//! `server.lock`) are the same calls behind the [`crate::Driver`] trait ([`driver`]).
//!
//! Nova cannot power a host off: `host.force_down` is an application-level fence that never
//! proves a host stopped; a compute host's fence is a Redfish, IPMI or fence-agent binding.
//! An evacuation whose outcome cannot be read is UNKNOWN, never done.
//!
//! Every call sends the lowest microversion that has what it needs ([`microversion`] says
//! which and why); the server's range is read once from the compute endpoint's version
//! document.

pub mod api;
mod client;
mod driver;
mod keystone;
pub mod microversion;
mod probe;
pub mod types;

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType};
use secrecy::SecretString;

pub use api::MigrationFilter;
pub use microversion::{Microversion, VersionRange};
pub use types::{
    Aggregate, ComputeService, EvacuateRequest, Evacuation, EvacuationProgress, Flavor, Image,
    Migration, MigrationStatus, MigrationType, Server, ServerFlavor, ServerStatus, ServiceState,
    ServiceStatus,
};

use crate::driver::{Build, DriverError, required_secret};
use client::Client;

/// The Nova driver. Holds the password or application credential secret; never prints it.
#[derive(Debug)]
pub struct NovaDriver {
    id: ControllerId,
    client: Client,
}

impl NovaDriver {
    fn client_keystone(&self) -> String {
        self.client.keystone().to_string()
    }

    fn auth_method(&self) -> &'static str {
        match self.client.auth {
            qfence_model::config::NovaAuth::Password { .. } => "password",
            qfence_model::config::NovaAuth::ApplicationCredential { .. } => {
                "application credential"
            }
        }
    }

    /// The certificate fingerprint the last TLS connection showed (Keystone's or Nova's).
    pub fn seen_fingerprint(&self) -> Option<String> {
        self.client.http.get().and_then(|h| h.seen.get())
    }
}

/// Builds the driver. No I/O. The secret is the user's password or the application
/// credential's secret.
impl Build for NovaDriver {
    const TYPE: ControllerType = ControllerType::Nova;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Nova {
            endpoint,
            auth,
            interface,
            region,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let secret = required_secret(&id, Self::TYPE, secret)?;
        // `https://keystone:5000` and `https://keystone:5000/v3` both mean Keystone v3.
        let mut keystone = endpoint.clone();
        let path = keystone.path().trim_end_matches('/').to_owned();
        let path = if path.ends_with("/v3") {
            format!("{path}/")
        } else {
            format!("{path}/v3/")
        };
        keystone.set_path(&path);
        Ok(NovaDriver {
            client: Client::new(
                id.clone(),
                keystone,
                auth.clone(),
                secret,
                *interface,
                region.clone(),
                config.tls.clone(),
            ),
            id,
        })
    }
}
