//! A Nova + Keystone simulator (OpenStack compute API v2.1 and Keystone v3 over HTTPS), for
//! the lab and for what a real fake cloud cannot do cheaply: a thousand servers on twenty
//! hosts, hosts whose heartbeats stop, evacuations that are slow, fail, or fail every time,
//! API latency and 5xx storms.
//!
//! One HTTPS listener serves both, path-routed as many deployments do: Keystone under `/v3`,
//! Nova under `/compute/v2.1`, Glance's image reads under `/image/v2`; the token's catalog
//! points there. The behaviour follows the public API references (status codes, the
//! microversion header, the migration record's states), not qfence's driver; the
//! fidelity test (`qfence-controllers/tests/it/nova_fidelity.rs`) drives it and a real Nova
//! 34 with the same openstacksdk script and compares the answers.
//!
//! - [`keystone`]: tokens for passwords and application credentials, the catalog.
//! - [`compute`]: services, servers and their actions, migrations, flavors, aggregates.
//! - [`state`]: the cloud and its protocol faults (heartbeats, evacuation behaviour).
//! - Connection and HTTP faults are the shared [`crate::faults::Faults`].
//!
//! Not modelled: cells, networks, volumes, live and cold migration, quotas, notifications,
//! policy files (the default policy, roughly), token revocation lists beyond
//! [`NovaHandle::revoke_tokens`].

mod compute;
mod keystone;
pub mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post, put};
use tokio::task::JoinHandle;

pub use state::{
    Aggregate, AppCredential, EvacuationBehaviour, Flavor, Host, Image, Migration, MigrationStatus,
    NovaState, Server, User, VmState,
};

use crate::faults::{self, Faults};
use crate::tls::{self, LabError, Server as TlsServer, TlsIdentity};

/// What a token stands for.
#[derive(Debug, Clone)]
pub(crate) struct TokenInfo {
    pub(crate) user: String,
    pub(crate) project_name: String,
    pub(crate) project_id: String,
    pub(crate) roles: Vec<String>,
    pub(crate) expires: SystemTime,
}

pub(crate) struct Shared {
    state: Mutex<NovaState>,
    tokens: Mutex<BTreeMap<String, TokenInfo>>,
    ids: AtomicU64,
    logins: AtomicU64,
    base: OnceLock<String>,
    /// Evacuations finishing in the background, aborted at shutdown.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, NovaState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `https://127.0.0.1:PORT`, this simulator's address for the catalog.
    fn base(&self) -> String {
        self.base.get().cloned().unwrap_or_default()
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn new_token(&self, info: TokenInfo) -> String {
        self.logins.fetch_add(1, Ordering::Relaxed);
        let token = format!(
            "gAAAA-sim-{:016x}",
            self.next_id().wrapping_mul(0x9e37_79b9_7f4a_7c15)
        );
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), info);
        token
    }

    fn token(&self, token: &str) -> Option<TokenInfo> {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned()
    }

    fn track(&self, task: JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
}

/// A running Nova + Keystone simulator.
#[derive(Debug)]
pub struct NovaHandle {
    server: TlsServer,
    fingerprint: String,
    shared: Arc<Shared>,
    faults: Faults,
    _tasks: AbortTasks,
}

/// Aborts the background evacuations when the handle goes.
#[derive(Debug)]
struct AbortTasks(Arc<Shared>);

impl Drop for AbortTasks {
    fn drop(&mut self) {
        for t in self
            .0
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// Starts the simulator on `addr` (port 0 picks a free one), serving HTTPS with `tls`.
pub async fn start(
    addr: SocketAddr,
    tls: TlsIdentity,
    state: NovaState,
) -> Result<NovaHandle, LabError> {
    state.validate()?;
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        tokens: Mutex::new(BTreeMap::new()),
        ids: AtomicU64::new(0),
        logins: AtomicU64::new(0),
        base: OnceLock::new(),
        tasks: Mutex::new(Vec::new()),
    });
    let faults = Faults::new();
    let server = tls::serve(
        addr,
        &tls,
        faults.clone(),
        router(shared.clone(), faults.clone()),
    )
    .await?;
    let _ = shared.base.set(tls::loopback_url(server.addr));
    tracing::info!(addr = %server.addr, fingerprint = tls.fingerprint(), "Nova simulator started");
    Ok(NovaHandle {
        server,
        fingerprint: tls.fingerprint().to_owned(),
        _tasks: AbortTasks(shared.clone()),
        shared,
        faults,
    })
}

impl NovaHandle {
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// `https://ADDR`.
    pub fn base_url(&self) -> String {
        tls::loopback_url(self.server.addr)
    }

    /// Keystone v3, what a Nova controller's `endpoint` names: `https://ADDR/v3`.
    pub fn keystone_url(&self) -> String {
        format!("{}/v3", self.base_url())
    }

    /// Nova's endpoint, as the catalog gives it.
    pub fn compute_url(&self) -> String {
        format!("{}/compute/v2.1", self.base_url())
    }

    /// SHA-256 of the certificate (lower-case hex), for `tls: {pin: ...}`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The connection and HTTP faults (unreachable, wrong certificate, latency, 5xx storms).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    pub fn snapshot(&self) -> NovaState {
        self.shared.lock().clone()
    }

    /// Changes the state (hosts, servers, protocol faults).
    pub fn update<R>(&self, change: impl FnOnce(&mut NovaState) -> R) -> R {
        change(&mut self.shared.lock())
    }

    /// Fault: every token issued so far is revoked (the next use of one is a 401).
    pub fn revoke_tokens(&self) {
        self.shared
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// How many tokens were issued (logins).
    pub fn logins(&self) -> usize {
        self.shared.logins.load(Ordering::Relaxed) as usize
    }

    /// Stops the server (and the evacuations still running) and waits for it.
    pub async fn shutdown(self) {
        drop(self._tasks);
        self.server.shutdown().await;
    }
}

fn router(shared: Arc<Shared>, faults: Faults) -> Router {
    let api = Router::new()
        .route("/v3", get(keystone::version))
        .route("/v3/auth/tokens", post(keystone::issue))
        .route("/compute", get(compute::versions))
        .route("/compute/v2.1", get(compute::version))
        .route("/compute/v2.1/os-services", get(compute::services))
        .route(
            "/compute/v2.1/os-services/{id}",
            put(compute::update_service),
        )
        .route(
            "/compute/v2.1/servers",
            get(compute::servers_brief).post(compute::server_create),
        )
        .route("/compute/v2.1/servers/detail", get(compute::servers_detail))
        .route(
            "/compute/v2.1/servers/{id}",
            get(compute::server_show).delete(compute::server_delete),
        )
        .route(
            "/compute/v2.1/servers/{id}/action",
            post(compute::server_action),
        )
        .route("/compute/v2.1/os-migrations", get(compute::migrations))
        .route("/compute/v2.1/flavors/detail", get(compute::flavors))
        .route("/compute/v2.1/flavors/{id}", get(compute::flavor))
        .route("/compute/v2.1/os-aggregates", get(compute::aggregates))
        .route("/image", get(compute::image_versions))
        .route("/image/v2/images/{id}", get(compute::image))
        .fallback(|| async {
            compute::fault(StatusCode::NOT_FOUND, "The resource could not be found.")
        })
        .with_state(shared);
    Router::new()
        .fallback_service(api)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            faults::http_faults(faults.clone(), storm_error, req, next)
        }))
        .layer(middleware::map_request(strip_trailing_slash))
}

async fn strip_trailing_slash(mut req: Request) -> Request {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_owned(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

fn storm_error(status: StatusCode) -> Response {
    compute::fault(
        status,
        "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
    )
}
