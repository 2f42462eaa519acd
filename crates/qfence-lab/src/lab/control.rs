//! The lab's control endpoint: plain HTTP on 127.0.0.1, one bearer token, for
//! `qfence lab fail|heal|fault|fail-host|heal-host|state`.
//!
//! `GET /state`, `POST /fail/{site}`, `POST /heal/{site}`, `POST /fault` (a
//! [`FaultRequest`]), `POST /fail-host/{host}`, `POST /heal-host/{host}`; each answers the
//! [`LabState`] after the change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{Cloud, CloudHostView, Orchestrators, Sims, random_token, write_private};
use crate::LabError;
use crate::faults::Cut;
use crate::proxmox::{Flapping, PveHandle};
use crate::redfish::{AlreadyInState, BmcHandle};

/// `DIR/control.json`: where the control endpoint is and its token (mode 0600).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlFile {
    pub url: String,
    pub token: String,
}

impl ControlFile {
    /// The file's path in a lab directory.
    pub fn path(dir: &Path) -> std::path::PathBuf {
        dir.join("control.json")
    }
}

/// `POST /fault`: switch a demo fault on or off at a site's simulator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRequest {
    /// `slow-bmc` (power changes take 5 s), `already-off-409` (iDRAC's 409 for a reset
    /// that changes nothing), `wrong-certificate` (the Proxmox API presents another
    /// certificate), `flapping-replication` (job 101-1 fails 3 times, then succeeds 3).
    pub name: String,
    /// `dc1` or `dc2`.
    pub site: String,
    /// On (true) or off.
    pub on: bool,
}

/// What the lab looks like now.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LabState {
    /// Sites cut off by `lab fail`.
    pub failed: Vec<String>,
    /// Where `vip-erp-db` points (`10.1.1.5` = dc1, `10.2.1.5` = dc2).
    pub vip: Vec<String>,
    /// Host power at each BMC: `pve-dc1-01 -> Off`.
    pub power: BTreeMap<String, String>,
    /// VM 101 at each Proxmox cluster: `pve-dc1 -> running`.
    pub vm101: BTreeMap<String, String>,
    /// The orchestrators.
    pub orchestrators: Vec<OrchestratorView>,
    /// Demo faults switched on, as `NAME@SITE`.
    pub faults: Vec<String>,
    /// The cloud's compute hosts (none when the lab runs without its cloud).
    #[serde(default)]
    pub cloud: Vec<CloudHostView>,
}

/// One orchestrator in [`LabState`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OrchestratorView {
    pub name: String,
    pub site: String,
    pub api: String,
    /// `sha256:HEX` of its API certificate.
    pub pin: String,
    pub frozen: bool,
}

struct Shared {
    sims: Arc<Sims>,
    orchestrators: Arc<Orchestrators>,
    cloud: Option<Arc<Cloud>>,
    token: String,
    failed: Mutex<BTreeSet<String>>,
    faults: Mutex<BTreeSet<String>>,
}

type Reply = Result<Json<LabState>, (StatusCode, String)>;

fn bad(status: StatusCode, m: impl Into<String>) -> (StatusCode, String) {
    (status, m.into())
}

impl Shared {
    fn authorised(&self, h: &HeaderMap) -> Result<(), (StatusCode, String)> {
        let want = format!("Bearer {}", self.token);
        let got = h
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // Digests compared, so the comparison's time says nothing about the token.
        if got
            .is_some_and(|g| super::hex_sha256(g.as_bytes()) == super::hex_sha256(want.as_bytes()))
        {
            Ok(())
        } else {
            Err(bad(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token (see the lab directory's control.json)",
            ))
        }
    }

    fn site(&self, site: &str) -> Result<(&BmcHandle, &PveHandle), (StatusCode, String)> {
        match site {
            "dc1" => Ok((&self.sims.bmc1, &self.sims.pve1)),
            "dc2" => Ok((&self.sims.bmc2, &self.sims.pve2)),
            other => Err(bad(
                StatusCode::BAD_REQUEST,
                format!("unknown site {other:?}; allowed: dc1, dc2, witness"),
            )),
        }
    }

    fn cloud(&self) -> Result<&Cloud, (StatusCode, String)> {
        self.cloud.as_deref().ok_or_else(|| {
            bad(
                StatusCode::CONFLICT,
                "the lab runs without its cloud: start it with `qfence lab --cloud`",
            )
        })
    }

    fn state(&self) -> LabState {
        let mut power = BTreeMap::new();
        for bmc in [&self.sims.bmc1, &self.sims.bmc2] {
            for s in bmc.snapshot().systems {
                power.insert(s.id.clone(), format!("{:?}", s.power));
            }
        }
        let mut vm101 = BTreeMap::new();
        for pve in [&self.sims.pve1, &self.sims.pve2] {
            let snap = pve.snapshot();
            let status = snap.vm(101).map_or("absent".to_owned(), |v| {
                format!("{:?}", v.status).to_lowercase()
            });
            vm101.insert(snap.cluster_name.clone(), status);
        }
        LabState {
            failed: lock(&self.failed).iter().cloned().collect(),
            vip: self.sims.vip(),
            power,
            vm101,
            orchestrators: self
                .orchestrators
                .list
                .iter()
                .map(|o| OrchestratorView {
                    name: o.name.clone(),
                    site: o.site.clone(),
                    api: o.api_url(),
                    pin: format!("sha256:{}", o.pin),
                    frozen: o.frozen(),
                })
                .collect(),
            faults: lock(&self.faults).iter().cloned().collect(),
            cloud: self.cloud.as_ref().map(|c| c.view()).unwrap_or_default(),
        }
    }

    fn cut(&self, site: &str, on: bool) -> Result<(), (StatusCode, String)> {
        if site != "witness" {
            let (_, pve) = self.site(site)?;
            pve.faults()
                .set_unreachable(if on { Some(Cut::Refuse) } else { None });
        }
        for o in self.orchestrators.at_site(site) {
            if o.frozen() != on {
                o.set_frozen(on)
                    .map_err(|e| bad(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            }
        }
        let mut failed = lock(&self.failed);
        if on {
            failed.insert(site.to_owned());
        } else {
            failed.remove(site);
        }
        Ok(())
    }

    fn fault(&self, f: &FaultRequest) -> Result<(), (StatusCode, String)> {
        let (bmc, pve) = self.site(&f.site)?;
        match f.name.as_str() {
            "slow-bmc" => bmc.update(|s| {
                s.power_delay = Duration::from_millis(if f.on { 5_000 } else { 300 });
            }),
            "already-off-409" => bmc.update(|s| {
                s.already_in_state = if f.on {
                    AlreadyInState::Conflict409
                } else {
                    AlreadyInState::Accept
                };
            }),
            "wrong-certificate" => pve.faults().set_wrong_certificate(f.on),
            "flapping-replication" => pve.update(|s| {
                for j in &mut s.replication {
                    j.flapping = f.on.then_some(Flapping {
                        fail: 3,
                        succeed: 3,
                    });
                }
            }),
            other => {
                return Err(bad(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown fault {other:?}; allowed: slow-bmc, already-off-409, \
                         wrong-certificate, flapping-replication"
                    ),
                ));
            }
        }
        let key = format!("{}@{}", f.name, f.site);
        let mut faults = lock(&self.faults);
        if f.on {
            faults.insert(key);
        } else {
            faults.remove(&key);
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn state(State(s): State<Arc<Shared>>, h: HeaderMap) -> Reply {
    s.authorised(&h)?;
    Ok(Json(s.state()))
}

async fn fail(State(s): State<Arc<Shared>>, h: HeaderMap, UrlPath(site): UrlPath<String>) -> Reply {
    s.authorised(&h)?;
    s.cut(&site, true)?;
    tracing::info!(site = %site, "Failed a site: its orchestrator frozen, its Proxmox API cut");
    Ok(Json(s.state()))
}

async fn heal(State(s): State<Arc<Shared>>, h: HeaderMap, UrlPath(site): UrlPath<String>) -> Reply {
    s.authorised(&h)?;
    s.cut(&site, false)?;
    tracing::info!(site = %site, "Healed a site");
    Ok(Json(s.state()))
}

async fn fault(State(s): State<Arc<Shared>>, h: HeaderMap, Json(f): Json<FaultRequest>) -> Reply {
    s.authorised(&h)?;
    s.fault(&f)?;
    Ok(Json(s.state()))
}

async fn fail_host(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    UrlPath(host): UrlPath<String>,
) -> Reply {
    s.authorised(&h)?;
    s.cloud()?
        .fail_host(&host)
        .map_err(|e| bad(StatusCode::BAD_REQUEST, e.to_string()))?;
    tracing::info!(host = %host, "Failed a compute host: its nova-compute stopped reporting");
    Ok(Json(s.state()))
}

async fn heal_host(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    UrlPath(host): UrlPath<String>,
) -> Reply {
    s.authorised(&h)?;
    s.cloud()?
        .heal_host(&host)
        .map_err(|e| bad(StatusCode::BAD_REQUEST, e.to_string()))?;
    tracing::info!(host = %host, "Healed a compute host: its nova-compute reports again");
    Ok(Json(s.state()))
}

/// The running control endpoint.
pub(super) struct ControlServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ControlServer {
    pub(super) async fn start(
        sims: Arc<Sims>,
        orchestrators: Arc<Orchestrators>,
        cloud: Option<Arc<Cloud>>,
        dir: &Path,
    ) -> Result<Self, LabError> {
        let token = random_token("lab")?;
        let shared = Arc::new(Shared {
            sims,
            orchestrators,
            cloud,
            token: token.clone(),
            failed: Mutex::new(BTreeSet::new()),
            faults: Mutex::new(BTreeSet::new()),
        });
        let app = Router::new()
            .route("/state", get(state))
            .route("/fail/{site}", post(fail))
            .route("/heal/{site}", post(heal))
            .route("/fault", post(fault))
            .route("/fail-host/{host}", post(fail_host))
            .route("/heal-host/{host}", post(heal_host))
            .with_state(shared);
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| LabError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| LabError::Bind { addr: bind, source })?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        let file = ControlFile {
            url: format!("http://{addr}"),
            token,
        };
        let text = serde_json::to_string_pretty(&file)
            .map_err(|e| LabError::InvalidState(e.to_string()))?;
        write_private(&ControlFile::path(dir), &text)?;
        Ok(Self {
            addr,
            stop: Some(tx),
            task,
        })
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(super) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = self.task.await;
    }
}
