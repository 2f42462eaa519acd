//! Start-up: the node's key, its Raft instance on redb, the cluster endpoint, and the task
//! that keeps the leadership token in step with Raft.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::SnapshotPolicy;
use openraft::async_runtime::WatchReceiver;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::ClusterError;
use crate::forward::CallExecutor;
use crate::network::{Liveness, Network};
use crate::signing::{NodeKey, NonceCache};
use crate::store::{self, Raft};
use crate::tls::TlsListener;
use crate::types::Member;

use super::rpc::router;
use super::{ClusterNode, DB_FILE, Inner, NODE_KEY_FILE, NodeOptions, node_id_for, raft_err};

fn load_or_create_key(dir: &std::path::Path) -> Result<NodeKey, ClusterError> {
    let path = dir.join(NODE_KEY_FILE);
    let io = |source| ClusterError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.exists() {
        return NodeKey::from_pkcs8(&std::fs::read(&path).map_err(io)?);
    }
    let key = NodeKey::generate()?;
    std::fs::write(&path, key.pkcs8()).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok(key)
}

impl ClusterNode {
    /// Opens storage, starts Raft and serves the cluster endpoint. Spawns tasks; call from the
    /// runtime.
    pub async fn start(
        opts: NodeOptions,
        executor: Arc<dyn CallExecutor>,
    ) -> Result<Self, ClusterError> {
        crate::tls::install_crypto_provider();
        std::fs::create_dir_all(&opts.data_dir).map_err(|source| ClusterError::Io {
            path: opts.data_dir.display().to_string(),
            source,
        })?;
        let key = load_or_create_key(&opts.data_dir)?;
        let listener = TcpListener::bind(opts.listen)
            .await
            .map_err(|source| ClusterError::Io {
                path: opts.listen.to_string(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| ClusterError::Io {
            path: opts.listen.to_string(),
            source,
        })?;
        let member = Member {
            name: opts.name.clone(),
            site: opts.site.clone(),
            address: opts.advertise.clone().unwrap_or_else(|| local.to_string()),
            witness: opts.witness,
        };
        let id = node_id_for(&opts.name);

        let (log, sm) = store::open(&opts.data_dir.join(DB_FILE))?;
        let reader = sm.reader();
        let client = opts.tls.http_client(opts.timing.rpc_timeout)?;
        let liveness = Liveness::default();
        let config = openraft::Config {
            cluster_name: "qfence".into(),
            heartbeat_interval: opts.timing.heartbeat_ms,
            election_timeout_min: opts.timing.election_min_ms,
            election_timeout_max: opts.timing.election_max_ms,
            enable_pre_vote: Some(true),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(5_000),
            max_in_snapshot_log_to_keep: 1_000,
            // A snapshot travels whole (JSON of the state); give it time on a slow WAN link.
            install_snapshot_timeout: 30_000,
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let raft = Raft::new(
            id,
            Arc::new(config),
            Network::new(client.clone(), liveness.clone()),
            log,
            sm,
        )
        .await
        .map_err(raft_err)?;

        let shutdown = CancellationToken::new();
        let inner = Arc::new(Inner {
            id,
            member,
            raft,
            reader,
            key,
            client,
            liveness,
            nonces: Mutex::new(NonceCache::default()),
            executor,
            writes: Mutex::new(None),
            shutdown: shutdown.clone(),
            leadership: Mutex::new(None),
            join_lock: tokio::sync::Mutex::new(()),
            timing: opts.timing,
        });

        let tls_listener = TlsListener::new(listener, opts.tls.server_config()?, shutdown.clone())?;
        let app = router(inner.clone(), opts.admin_api);
        let serve_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let r = axum::serve(
                tls_listener,
                app.into_make_service_with_connect_info::<crate::tls::Peer>(),
            )
            .with_graceful_shutdown(serve_shutdown.cancelled_owned())
            .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "The cluster endpoint stopped");
            }
        });
        tokio::spawn(watch_leadership(inner.clone()));
        tracing::info!(
            orchestrator = %inner.member.name, site = %inner.member.site,
            address = %inner.member.address, node_id = id,
            "Started the cluster node"
        );
        Ok(Self { inner })
    }
}

pub(super) async fn watch_leadership(inner: Arc<Inner>) {
    let mut metrics = inner.raft.metrics();
    let mut lease_check =
        tokio::time::interval(Duration::from_millis(inner.timing.heartbeat_ms * 2));
    loop {
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            r = metrics.changed() => if r.is_err() { return },
            _ = lease_check.tick() => {
                // A leader cut off from its quorum keeps its Raft state for a while; its lease
                // lapses first, and so does everything it started.
                if inner.raft.is_leader()
                    && inner.raft.ensure_linearizable(inner.timing.lease()).await.is_err()
                    && let Some(l) = inner.leadership.lock().unwrap_or_else(|p| p.into_inner()).take()
                {
                    tracing::warn!(orchestrator = %inner.member.name, term = %l.term, "Leader lease lapsed; cancelling what it started");
                    l.token.cancel();
                }
                continue;
            }
        }
        let m = metrics.borrow_watched().clone();
        inner.sync_leadership(&m);
    }
}
