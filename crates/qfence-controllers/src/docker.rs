//! Docker Engine driver (bollard; a unix socket, or TCP with mutual TLS).
//!
//! The model: a container is the unit a site runs. `container.stop` fences it (compute level:
//! the process is gone), `container.start` brings it back (switchover, recovery), and
//! `container.health` reads its HEALTHCHECK. Every action is checked by inspecting the
//! container afterwards: a fence holds when `State.Running` is false and the container is not
//! restarting; an answer of 304 ("already stopped/started") is confirmed the same way.
//!
//! The fence uses `stop` with no grace period (`t=0`: the stop signal then SIGKILL at once),
//! because a stop, unlike a kill, marks the container as stopped by hand, so the daemon's
//! restart policy does not start it again.
//!
//! `container.start` on a running container whose HEALTHCHECK says unhealthy restarts it:
//! that is the recovery restart. On a running healthy container it does nothing.
//!
//! Identity is the engine ID from `/info` (Docker says its format is not stable: a change is
//! a warning, not proof of another host). Docker has no authorization model: reaching the
//! daemon is full control, unless an authorization plugin is listed.
//!
//! Endpoints: `unix:///path/to/docker.sock`, or `https://host:2376` with
//! `tls: {ca_file: DIR/ca.pem}` and the client certificate and key in `DIR/cert.pem` and
//! `DIR/key.pem` (Docker's own `DOCKER_CERT_PATH` layout).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerInspectResponse, HealthStatusEnum};
use bollard::query_parameters::{
    ListContainersOptions, RestartContainerOptions, StartContainerOptions, StopContainerOptions,
};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, ControllerType, Grade};
use secrecy::SecretString;
use tokio::sync::OnceCell;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, unsupported,
};

const STOP: &str = "container.stop";
const START: &str = "container.start";
const HEALTH: &str = "container.health";

/// How the daemon is reached.
#[derive(Debug, Clone)]
enum Endpoint {
    Unix(String),
    Tls { addr: String, cert_dir: PathBuf },
}

/// The Docker Engine driver.
#[derive(Debug)]
pub struct DockerDriver {
    id: ControllerId,
    endpoint: Endpoint,
    timeout: Duration,
    client: OnceCell<Docker>,
}

/// Builds the driver. No I/O: the daemon is connected to on first use. The secret is unused
/// (Docker authenticates by socket access or client certificate).
impl Build for DockerDriver {
    const TYPE: ControllerType = ControllerType::Docker;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        _secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let bad = |msg: String| DriverError::new(ErrorKind::Unsupported, &id, "build", msg, false);
        let ControllerKind::Docker { endpoint } = &config.kind else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let endpoint = match endpoint.scheme() {
            "unix" => Endpoint::Unix(endpoint.path().to_owned()),
            "https" | "tcp" => {
                let TlsTrust::CaFile(ca) = &config.tls else {
                    return Err(bad(
                        "a TCP Docker endpoint needs mutual TLS: set tls.ca_file to DIR/ca.pem, \
                     with cert.pem and key.pem beside it"
                            .to_owned(),
                    ));
                };
                let cert_dir = PathBuf::from(ca)
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_default();
                let host = endpoint.host_str().unwrap_or("localhost");
                let port = endpoint.port().unwrap_or(2376);
                Endpoint::Tls {
                    addr: format!("https://{host}:{port}"),
                    cert_dir,
                }
            }
            other => {
                return Err(bad(format!(
                    "endpoint scheme {other:?}: use unix:///var/run/docker.sock or https://host:2376 \
                 (plain TCP gives anyone root on the host, so it is refused)"
                )));
            }
        };
        Ok(DockerDriver {
            id,
            endpoint,
            timeout: config.timeout,
            client: OnceCell::new(),
        })
    }
}

impl DockerDriver {
    /// Maps a bollard error; `write` says whether the request may have changed something.
    fn map(&self, call: &str, e: BollardError, write: bool) -> DriverError {
        match e {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => {
                let kind = match status_code {
                    401 | 403 => ErrorKind::Auth,
                    400..=499 => ErrorKind::Rejected,
                    _ => ErrorKind::Rejected,
                };
                let unknown = write && status_code >= 500;
                self.err(
                    kind,
                    call,
                    format!("HTTP {status_code}: {message}"),
                    unknown,
                )
            }
            BollardError::RequestTimeoutError => {
                self.err(ErrorKind::Timeout, call, "request timed out", write)
            }
            BollardError::JsonDataError { .. } | BollardError::JsonSerdeError { .. } => {
                self.err(ErrorKind::Protocol, call, e.to_string(), false)
            }
            BollardError::APIVersionParseError {} => {
                self.err(ErrorKind::Protocol, call, e.to_string(), false)
            }
            other => self.err(ErrorKind::Unreachable, call, other.to_string(), write),
        }
    }

    async fn client(&self) -> Result<&Docker, DriverError> {
        self.client
            .get_or_try_init(|| async {
                // The call's deadline governs; bollard's own timeout is only a backstop.
                let secs = self.timeout.as_secs().max(300);
                let docker = match &self.endpoint {
                    Endpoint::Unix(path) => {
                        Docker::connect_with_unix(path, secs, bollard::API_DEFAULT_VERSION)
                    }
                    Endpoint::Tls { addr, cert_dir } => {
                        let _ = rustls::crypto::ring::default_provider().install_default();
                        Docker::connect_with_ssl(
                            addr,
                            &cert_dir.join("key.pem"),
                            &cert_dir.join("cert.pem"),
                            &cert_dir.join("ca.pem"),
                            secs,
                            bollard::API_DEFAULT_VERSION,
                        )
                    }
                }
                .map_err(|e| self.map("connect", e, false))?;
                // Speak the daemon's newest API version when it is older than ours.
                docker
                    .negotiate_version()
                    .await
                    .map_err(|e| self.map("GET /version", e, false))
            })
            .await
    }

    async fn inspect(&self, name: &str) -> Result<ContainerInspectResponse, DriverError> {
        let docker = self.client().await?;
        docker
            .inspect_container(name, None)
            .await
            .map_err(|e| self.map(&format!("GET /containers/{name}/json"), e, false))
    }

    /// Reads the container: `(running, restarting, words for the operator)`.
    async fn state(
        &self,
        name: &str,
    ) -> Result<(bool, bool, Option<HealthStatusEnum>, String), DriverError> {
        let c = self.inspect(name).await?;
        let s = c.state.unwrap_or_default();
        let running = s.running.unwrap_or(false);
        let restarting = s.restarting.unwrap_or(false);
        let status = s
            .status
            .map(|v| v.to_string())
            .unwrap_or_else(|| "?".to_owned());
        let health = s.health.as_ref().and_then(|h| h.status);
        let mut detail = format!("container {name}: Status={status} Running={running}");
        if restarting {
            detail.push_str(" Restarting=true");
        }
        if !running {
            if let Some(code) = s.exit_code {
                detail.push_str(&format!(" ExitCode={code}"));
            }
            if let Some(at) = s.finished_at.filter(|a| !a.starts_with("0001")) {
                detail.push_str(&format!(" FinishedAt={at}"));
            }
        }
        if let Some(h) = &s.health {
            detail.push_str(&format!(
                " Health={} FailingStreak={}",
                h.status.map(|v| v.to_string()).unwrap_or_default(),
                h.failing_streak.unwrap_or(0)
            ));
        }
        Ok((running, restarting, health, detail))
    }

    async fn read(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let (running, restarting, health, detail) = self.state(&target.resource).await?;
        let holds = match target.capability.as_str() {
            STOP => !running && !restarting,
            START => running,
            HEALTH => match health {
                Some(HealthStatusEnum::HEALTHY) => running,
                Some(
                    HealthStatusEnum::STARTING
                    | HealthStatusEnum::UNHEALTHY
                    | HealthStatusEnum::NONE
                    | HealthStatusEnum::EMPTY,
                ) => false,
                // No HEALTHCHECK: running is all there is to read, and the detail says so.
                None => running,
            },
            _ => return Err(unsupported(self, "the capability", target)),
        };
        let detail = if health.is_none() && target.capability == HEALTH {
            format!("{detail} (no HEALTHCHECK: running state only)")
        } else {
            detail
        };
        Ok(ctx.reading(holds, detail))
    }

    /// Treats 304 (already in that state) as success; the read-back decides.
    fn already(e: &BollardError) -> bool {
        matches!(
            e,
            BollardError::DockerResponseServerError {
                status_code: 304,
                ..
            }
        )
    }

    async fn stop(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let name = &target.resource;
        let (running, restarting, _, _) = self.state(name).await?;
        if running || restarting {
            let opts = StopContainerOptions {
                t: Some(0),
                signal: None,
            };
            match self.client().await?.stop_container(name, Some(opts)).await {
                Ok(()) => {}
                Err(e) if Self::already(&e) => {}
                Err(e) => return Err(self.map(&format!("POST /containers/{name}/stop"), e, true)),
            }
        }
        let t = Target {
            capability: STOP.to_owned(),
            ..target.clone()
        };
        self.read(ctx, &t).await
    }

    async fn start(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let name = &target.resource;
        let docker = self.client().await?;
        let (running, _, health, _) = self.state(name).await?;
        if !running {
            match docker
                .start_container(name, None::<StartContainerOptions>)
                .await
            {
                Ok(()) => {}
                Err(e) if Self::already(&e) => {}
                Err(e) => return Err(self.map(&format!("POST /containers/{name}/start"), e, true)),
            }
        } else if health == Some(HealthStatusEnum::UNHEALTHY) {
            // A graceful stop, but never one that outlasts half the time left.
            let left = ctx
                .deadline
                .saturating_duration_since(tokio::time::Instant::now());
            let grace = (left.as_secs() / 2).min(10);
            let opts = RestartContainerOptions {
                t: Some(i32::try_from(grace).unwrap_or(10)),
                signal: None,
            };
            docker
                .restart_container(name, Some(opts))
                .await
                .map_err(|e| self.map(&format!("POST /containers/{name}/restart"), e, true))?;
        }
        let t = Target {
            capability: START.to_owned(),
            ..target.clone()
        };
        self.read(ctx, &t).await
    }
}

impl Driver for DockerDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", async {
            let docker = self.client().await?;
            let info = docker
                .info()
                .await
                .map_err(|e| self.map("GET /info", e, false))?;
            let id =
                info.id.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                    self.err(ErrorKind::Protocol, "probe", "/info has no ID", false)
                })?;
            let mut facts = BTreeMap::new();
            for (k, v) in [
                ("name", info.name.clone()),
                ("server_version", info.server_version.clone()),
                ("operating_system", info.operating_system.clone()),
                ("api_version", Some(docker.client_version().to_string())),
            ] {
                if let Some(v) = v {
                    facts.insert(k.to_owned(), v);
                }
            }
            let authz = info
                .plugins
                .as_ref()
                .and_then(|p| p.authorization.clone())
                .unwrap_or_default();
            let (grade, reason) = if authz.is_empty() {
                (
                    Grade::Proven,
                    "the daemon answers directly and lists no authorization plugin: access is \
                     full control"
                        .to_owned(),
                )
            } else {
                (
                    Grade::Inferred,
                    format!(
                        "authorization plugins {} may refuse actions that reads do not show",
                        authz.join(", ")
                    ),
                )
            };
            let grades = [STOP, START, HEALTH]
                .into_iter()
                .map(|c| CapabilityGrade {
                    capability: c.to_owned(),
                    grade,
                    reason: reason.clone(),
                })
                .collect();
            let mut warnings = vec![
                "Docker's engine ID format is not stable; a changed ID is a warning, not proof \
                 of another host"
                    .to_owned(),
            ];
            if matches!(self.endpoint, Endpoint::Unix(_)) {
                warnings.push(
                    "a socket proxy in front of the daemon would look the same; point qfence at \
                     the daemon's own socket"
                        .to_owned(),
                );
            }
            Ok(Probe {
                identity: Identity {
                    id,
                    facts,
                    tls_fingerprint: None,
                },
                grades,
                warnings,
            })
        })
        .await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            let docker = self.client().await?;
            let opts = ListContainersOptions {
                all: true,
                ..Default::default()
            };
            let list = docker
                .list_containers(Some(opts))
                .await
                .map_err(|e| self.map("GET /containers/json", e, false))?;
            let mut out = Vec::new();
            for c in list {
                let Some(name) = c
                    .names
                    .as_ref()
                    .and_then(|n| n.first())
                    .map(|n| n.trim_start_matches('/').to_owned())
                else {
                    continue;
                };
                let description = format!(
                    "container {name} ({}; {})",
                    c.image.as_deref().unwrap_or("?"),
                    c.status.as_deref().unwrap_or("?")
                );
                for cap in [STOP, START, HEALTH] {
                    out.push(Discovered {
                        capability: cap.to_owned(),
                        resource: name.clone(),
                        description: description.clone(),
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
            if ![STOP, START, HEALTH].contains(&target.capability.as_str()) {
                return Err(unsupported(self, "the capability", target));
            }
            match self.inspect(&target.resource).await {
                Ok(_) => Ok(Vec::new()),
                Err(e) if e.message.starts_with("HTTP 404") => Ok(vec![format!(
                    "container {} does not exist",
                    target.resource
                )]),
                Err(e) => Err(e),
            }
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", self.read(ctx, target)).await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                STOP => self.stop(ctx, target).await,
                START => self.start(ctx, target).await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "undo", async {
            match target.capability.as_str() {
                // The reading is of the fence's condition, which no longer holds once the
                // start is proven (contract §3.7).
                STOP => self
                    .start(ctx, target)
                    .await
                    .map(crate::driver::Reading::negated),
                _ => Err(unsupported(self, "undo", target)),
            }
        })
        .await
    }
}
