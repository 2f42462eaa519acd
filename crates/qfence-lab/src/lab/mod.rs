//! `qfence lab`: the whole demo lab on loopback, in one foreground process.
//!
//! # The model
//!
//! Two datacenters and a witness. The lab process runs the five simulators in-process
//! ([`Sims`]: BMCs `bmc-dc1`/`bmc-dc2`, Proxmox VE clusters `pve-dc1`/`pve-dc2` with VM 101
//! and replication job 101-1, FortiGate `fgt-edge` with `vip-erp-db`), writes the lab
//! directory (configuration, a 0600 secret directory, a token file, an `env` file), and
//! starts three orchestrators as real `qfence serve` child processes, one per site, each on
//! its own loopback address (dc1-a on 127.0.0.1, dc2-a on 127.0.0.2, witness-a on
//! 127.0.0.3), forming one cluster: dc1-a creates it (`qfence cluster init`), the others get
//! a certificate from its CA (`qfence cluster issue`) and join (`qfence cluster join`)
//! before serving.
//!
//! A small control endpoint (plain HTTP on 127.0.0.1, bearer token in `DIR/control.json`)
//! lets `qfence lab fail|heal|fault` act on the running lab:
//! - **fail SITE**: the site's orchestrator is frozen (SIGSTOP: its cluster peers and API
//!   clients time out, as across a cut link) and the site's Proxmox API refuses connections.
//!   The site's BMC stays reachable (its `reach` says the other site can power it off) and
//!   the FortiGate, the edge device, stays reachable too.
//! - **heal SITE**: undoes both. A fenced site comes back fenced: its host stays off.
//!
//! Every orchestrator's controller traffic leaves from 127.0.0.1 (the drivers do not bind a
//! source address), so a cut is per simulator, not per caller: while a site's orchestrator
//! is frozen nobody else should reach its Proxmox API anyway.

mod control;
mod orchestrators;
mod sims;

pub use control::{ControlFile, FaultRequest, LabState, OrchestratorView};
pub use orchestrators::{Orchestrator, Orchestrators, Topology};
pub use sims::{
    BMC_PASSWORD, FGT_KEY, PVE_TOKEN, Sims, TIMINGS, VIP, VIP_DC1, VIP_DC2, hex_sha256,
};

use std::path::{Path, PathBuf};

use crate::LabError;

/// How to start the lab.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The lab directory (created; an existing lab's files are replaced).
    pub dir: PathBuf,
    /// The `qfence` executable to run the orchestrators with.
    pub exe: PathBuf,
}

/// The tokens of the lab's API users.
#[derive(Debug, Clone)]
pub struct LabTokens {
    /// Reads status, plans and events.
    pub viewer: String,
    /// May also switch over, fail over, confirm, pause.
    pub operator: String,
    /// Everything.
    pub admin: String,
}

/// A running lab.
pub struct Lab {
    /// The simulators.
    pub sims: std::sync::Arc<Sims>,
    /// The orchestrators.
    pub orchestrators: std::sync::Arc<Orchestrators>,
    /// The API users' tokens.
    pub tokens: LabTokens,
    /// `http://127.0.0.1:PORT` of the control endpoint.
    pub control_url: String,
    /// The lab directory.
    pub dir: PathBuf,
    control: control::ControlServer,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("dir", &self.dir)
            .field("control_url", &self.control_url)
            .finish_non_exhaustive()
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LabError + '_ {
    move |source| LabError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `text` to `path` readable by the owner only.
pub(crate) fn write_private(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(io_err(path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
    }
    Ok(())
}

/// 32 random bytes as hex: a token nobody can guess.
pub(crate) fn random_token(prefix: &str) -> Result<String, LabError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| LabError::Tls("the system random generator failed".into()))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}-{hex}"))
}

impl Lab {
    /// Starts the simulators, writes the lab directory, starts the three orchestrators and
    /// waits until each serves its API, then opens the control endpoint.
    pub async fn start(o: LabOptions) -> Result<Self, LabError> {
        let dir = o.dir.clone();
        if dir.exists() {
            // A previous lab's orchestrator data would hold another cluster: start clean.
            for sub in ["dc1-a", "dc2-a", "witness-a", "secrets", "logs"] {
                let p = dir.join(sub);
                if p.exists() {
                    std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
                }
            }
        }
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let sims = Sims::start().await?;
        let topology = Topology::pick()?;
        let config = sims.config_text(&topology.cluster_addresses());
        let config_path = dir.join("lab.yaml");
        std::fs::write(&config_path, &config).map_err(io_err(&config_path))?;

        let secrets = dir.join("secrets");
        std::fs::create_dir_all(&secrets).map_err(io_err(&secrets))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err(&secrets))?;
        }
        for (name, value) in [
            ("lab-redfish", BMC_PASSWORD),
            ("lab-proxmox", PVE_TOKEN),
            ("lab-fortigate", FGT_KEY),
        ] {
            write_private(&secrets.join(name), value)?;
        }

        let tokens = LabTokens {
            viewer: random_token("viewer")?,
            operator: random_token("operator")?,
            admin: random_token("admin")?,
        };
        let token_file = dir.join("tokens");
        let lines = [
            ("viewer", "lab-viewer", &tokens.viewer),
            ("operator", "lab-operator", &tokens.operator),
            ("admin", "lab-admin", &tokens.admin),
        ]
        .iter()
        .map(|(role, name, t)| format!("{role} {name} sha256:{}\n", hex_sha256(t.as_bytes())))
        .collect::<String>();
        write_private(&token_file, &lines)?;

        let orchestrators =
            Orchestrators::start(&o.exe, &dir, &topology, &config_path, &token_file, &secrets)
                .await?;

        // The env file points at dc2-a's API: it survives `lab fail dc1`, the demo's story.
        let api = orchestrators
            .get("dc2-a")
            .ok_or_else(|| LabError::Orchestrator {
                name: "dc2-a".into(),
                reason: "not started".into(),
            })?;
        let env = format!(
            "# qfence lab: `. {}` and the qfence commands need no flags.\n\
             export QFENCE_API={}\nexport QFENCE_TOKEN={}\nexport QFENCE_API_PIN=sha256:{}\n",
            dir.join("env").display(),
            api.api_url(),
            tokens.operator,
            api.pin
        );
        write_private(&dir.join("env"), &env)?;

        let sims = std::sync::Arc::new(sims);
        let orchestrators = std::sync::Arc::new(orchestrators);
        let control =
            control::ControlServer::start(sims.clone(), orchestrators.clone(), &dir).await?;
        Ok(Self {
            control_url: control.url(),
            sims,
            orchestrators,
            tokens,
            dir,
            control,
        })
    }

    /// Stops the orchestrators (SIGTERM, then SIGKILL), the control endpoint and the
    /// simulators.
    pub async fn stop(self) {
        self.control.stop().await;
        self.orchestrators.stop_all().await;
        if let Ok(sims) = std::sync::Arc::try_unwrap(self.sims) {
            sims.stop().await;
        }
    }
}
