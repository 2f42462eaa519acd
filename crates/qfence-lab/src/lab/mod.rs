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

mod cloud;
mod control;
mod orchestrators;
mod sims;

pub use cloud::{
    CLOUD, Cloud, CloudHostView, CloudShape, CloudYaml, LAB_CLOUD, NOVA_SECRET, host_name,
};
pub use control::{ControlFile, FaultRequest, LabState, OrchestratorView};
pub use orchestrators::{Orchestrator, Orchestrators, Topology};
pub use sims::{
    BMC_PASSWORD, FGT_KEY, LabConfig, PVE_TOKEN, PveVm, SECRETS, Scenario, ScenarioPlan, Sims,
    TIMINGS, VIP, VIP_DC1, VIP_DC2, hex_sha256, pve_state, scaled_plan_name,
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
    /// Also run the small cloud Instance HA watches (`qfence lab --cloud`). Off by default:
    /// its Nova polls cost the erp-db failover about 0.8 s on a 2-core machine.
    pub cloud: bool,
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
    /// The small cloud Instance HA watches, if the lab runs it.
    pub cloud: Option<std::sync::Arc<Cloud>>,
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
        let cloud = match o.cloud {
            true => Some(Cloud::start(&CloudShape::lab()).await?),
            false => None,
        };
        let topology = Topology::pick()?;
        let mut config = sims.config_text(&topology.cluster_addresses());
        if let Some(cloud) = &cloud {
            config = cloud.add_to(&config, &LAB_CLOUD);
        }
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
        for (name, value) in SECRETS {
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
        let cloud = cloud.map(std::sync::Arc::new);
        let control =
            control::ControlServer::start(sims.clone(), orchestrators.clone(), cloud.clone(), &dir)
                .await?;
        Ok(Self {
            control_url: control.url(),
            sims,
            orchestrators,
            cloud,
            tokens,
            dir,
            control,
        })
    }

    /// Stops the orchestrators (SIGTERM, then SIGKILL), the control endpoint and the
    /// simulators.
    pub async fn stop(self) {
        self.control.stop().await;
        // A stale control file would send `lab fail` to a port nobody answers on.
        let _ = std::fs::remove_file(ControlFile::path(&self.dir));
        self.orchestrators.stop_all().await;
        if let Ok(sims) = std::sync::Arc::try_unwrap(self.sims) {
            sims.stop().await;
        }
        if let Some(Ok(cloud)) = self.cloud.map(std::sync::Arc::try_unwrap) {
            cloud.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use super::control::ControlServer;
    use super::*;
    use crate::faults::Cut;
    use crate::redfish::{AlreadyInState, PowerState};

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[tokio::test]
    async fn the_lab_configuration_pins_every_simulator_and_validates() {
        let sims = Sims::start().await.expect("simulators start");
        let cloud = Cloud::start(&CloudShape::lab())
            .await
            .expect("the cloud starts");
        let text = sims.config_text(&[
            ("dc1-a", addr("127.0.0.1:17401")),
            ("dc2-a", addr("127.0.0.2:17402")),
            ("witness-a", addr("127.0.0.3:17403")),
        ]);
        let text = cloud.add_to(&text, &LAB_CLOUD);
        assert!(
            !text.contains("insecure"),
            "no simulator is trusted blindly"
        );
        for pin in [
            sims.bmc1.fingerprint(),
            sims.bmc2.fingerprint(),
            sims.pve1.fingerprint(),
            sims.pve2.fingerprint(),
            sims.fgt_pin.as_str(),
            cloud.nova.fingerprint(),
            cloud.bmc.fingerprint(),
        ] {
            assert!(
                text.contains(&format!("pin: \"sha256:{pin}\"")),
                "{pin} pinned"
            );
        }
        assert!(text.contains(&format!("endpoint: {}", sims.pve1.base_url())));
        assert!(text.contains("address: \"127.0.0.2:17402\""));
        assert!(text.contains("failover_after_seconds: 6"));
        let config = match qfence_model::config::load_str(&text, "lab.yaml") {
            Ok(c) => c,
            Err(issues) => panic!("the lab configuration validates: {issues:#?}\n{text}"),
        };
        let cloud_config = config
            .config
            .config()
            .instance_ha
            .values()
            .next()
            .expect("a cloud");
        assert_eq!(cloud_config.hosts.len(), 4, "every host has its fence");
        assert!(text.contains("compute-3: {controller: bmc-compute, capability: power.off, resource: compute-3, site: dc2}"));
        assert!(text.contains(&format!("endpoint: {}", cloud.nova.keystone_url())));
        cloud.stop().await;
        sims.stop().await;
    }

    /// The control endpoint over fresh simulators (and `cloud`) in a temp dir named `name`:
    /// the endpoint, its control file, a client, the simulators and the dir.
    async fn control_endpoint(
        name: &str,
        cloud: Option<Arc<Cloud>>,
    ) -> (
        ControlServer,
        ControlFile,
        reqwest::Client,
        Arc<Sims>,
        std::path::PathBuf,
    ) {
        let dir = std::env::temp_dir().join(format!("qfence-lab-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let sims = Arc::new(Sims::start().await.expect("simulators start"));
        let orchestrators = Arc::new(Orchestrators { list: Vec::new() });
        let server = ControlServer::start(sims.clone(), orchestrators, cloud, &dir)
            .await
            .expect("the control endpoint starts");
        let file: ControlFile = serde_json::from_str(
            &std::fs::read_to_string(ControlFile::path(&dir)).expect("control.json"),
        )
        .expect("control.json parses");
        // reqwest is built without a default crypto provider (ring is the project's choice).
        let _ = rustls::crypto::ring::default_provider().install_default();
        (server, file, reqwest::Client::new(), sims, dir)
    }

    #[tokio::test]
    async fn the_control_endpoint_wants_its_token_and_switches_cuts_and_faults() {
        let (server, file, client, sims, dir) = control_endpoint("control", None).await;

        let refused = client
            .get(format!("{}/state", file.url))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("an answer");
        assert_eq!(refused.status(), 401);

        let state: LabState = client
            .post(format!("{}/fail/dc1", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("a lab state");
        assert_eq!(state.failed, ["dc1"]);
        assert_eq!(sims.pve1.faults().snapshot().unreachable, Some(Cut::Refuse));
        assert_eq!(sims.pve2.faults().snapshot().unreachable, None);
        assert!(
            sims.bmc1.faults().snapshot().unreachable.is_none(),
            "the BMC stays reachable"
        );

        let state: LabState = client
            .post(format!("{}/heal/dc1", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("a lab state");
        assert!(state.failed.is_empty());
        assert_eq!(sims.pve1.faults().snapshot().unreachable, None);

        let on = client
            .post(format!("{}/fault", file.url))
            .bearer_auth(&file.token)
            .json(&FaultRequest {
                name: "already-off-409".into(),
                site: "dc2".into(),
                on: true,
            })
            .send()
            .await
            .expect("an answer");
        assert_eq!(on.status(), 200);
        assert_eq!(
            sims.bmc2.snapshot().already_in_state,
            AlreadyInState::Conflict409
        );
        let unknown = client
            .post(format!("{}/fault", file.url))
            .bearer_auth(&file.token)
            .json(&FaultRequest {
                name: "gremlins".into(),
                site: "dc1".into(),
                on: true,
            })
            .send()
            .await
            .expect("an answer");
        assert_eq!(unknown.status(), 400);
        assert!(
            unknown
                .text()
                .await
                .unwrap_or_default()
                .contains("slow-bmc")
        );

        server.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn fail_host_silences_a_powered_host_and_heal_host_or_its_power_line_restarts_it() {
        let cloud = Arc::new(
            Cloud::start(&CloudShape::lab())
                .await
                .expect("the cloud starts"),
        );
        let (server, file, client, _sims, dir) =
            control_endpoint("fail-host", Some(cloud.clone())).await;
        let state: LabState = client
            .post(format!("{}/fail-host/compute-2", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("a lab state");
        let host = |state: &LabState, name: &str| {
            state
                .cloud
                .iter()
                .find(|h| h.host == name)
                .cloned()
                .expect("a host")
        };
        let dead = host(&state, "compute-2");
        assert!(!dead.reporting, "its nova-compute stopped: {dead:?}");
        assert_eq!(dead.power, "On", "a dead host is still powered");
        assert!(host(&state, "compute-1").reporting);
        let unknown = client
            .post(format!("{}/fail-host/compute-9", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer");
        assert_eq!(unknown.status(), 400);
        assert!(
            unknown
                .text()
                .await
                .unwrap_or_default()
                .contains("compute-1, compute-2, compute-3, compute-4")
        );

        // Powered off at its BMC, a host cannot be brought back by hand; powered on, it can.
        cloud.bmc.set_power("compute-2", PowerState::Off);
        let refused = client
            .post(format!("{}/heal-host/compute-2", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer");
        assert_eq!(refused.status(), 400);
        cloud.bmc.set_power("compute-2", PowerState::On);
        let state = eventually_reporting(&client, &file, "compute-2").await;
        assert!(
            host(&state, "compute-2").reporting,
            "the power line restarted it"
        );
        cloud.fail_host("compute-2").expect("a known host");
        let state: LabState = client
            .post(format!("{}/heal-host/compute-2", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("a lab state");
        assert!(
            host(&state, "compute-2").reporting,
            "heal-host restarted it"
        );

        server.stop().await;
        if let Ok(cloud) = Arc::try_unwrap(cloud) {
            cloud.stop().await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn without_its_cloud_the_lab_refuses_fail_host_and_says_how_to_start_it() {
        let (server, file, client, _sims, dir) = control_endpoint("nocloud", None).await;
        let refused = client
            .post(format!("{}/fail-host/compute-2", file.url))
            .bearer_auth(&file.token)
            .send()
            .await
            .expect("an answer");
        assert_eq!(refused.status(), 409);
        assert!(
            refused
                .text()
                .await
                .unwrap_or_default()
                .contains("qfence lab --cloud")
        );
        server.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The lab's state once `host` reports again (its power line is followed by a task).
    async fn eventually_reporting(
        client: &reqwest::Client,
        file: &ControlFile,
        host: &str,
    ) -> LabState {
        for _ in 0..50 {
            let state: LabState = client
                .get(format!("{}/state", file.url))
                .bearer_auth(&file.token)
                .send()
                .await
                .expect("an answer")
                .json()
                .await
                .expect("a lab state");
            if state.cloud.iter().any(|h| h.host == host && h.reporting) {
                return state;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("{host} never reported again");
    }
}
