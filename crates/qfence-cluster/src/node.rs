//! One orchestrator's membership in the cluster: Raft, storage, the HTTPS endpoint, leadership
//! and forwarded calls.
//!
//! [`ClusterNode::start`] opens the node's redb file, starts Raft and serves the cluster
//! endpoint (mutual TLS). A fresh single orchestrator calls [`ClusterNode::initialize`] and is a
//! one-voter cluster; another orchestrator calls [`ClusterNode::join`] with the address of any
//! member, and the leader adds it as a voter (a witness too: it votes, it owns no plans and
//! makes no controller calls).
//!
//! Leadership: a node is leader for a term; [`ClusterNode::leadership`] succeeds only while its
//! lease is valid and returns a cancellation token for that term. The token is cancelled as
//! soon as the node stops being leader of that term or its lease lapses, so everything started
//! under it stops. A node id is derived from the orchestrator's name (FNV-1a), so a node keeps
//! its id across restarts without any allocation protocol.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::async_runtime::WatchReceiver;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{ChangeMembers, LinearizerOption, RaftMetrics, ServerState, SnapshotPolicy};
use qfence_call::Call;
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
use qfence_model::time::now_unix_ms;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::ClusterError;
use crate::forward::{CallExecutor, CallOutcome, ForwardReply};
use crate::network::{Liveness, Network, SnapshotBody};
use crate::routing::{self, Candidate, Placement, Route};
use crate::signing::{self, Envelope, NodeKey, NonceCache, SignedCall, VerifyContext};
use crate::state::{
    ClusterState, Command, EventDraft, OrchestratorRecord, OrchestratorStatus, Request, Response,
};
use crate::store::{self, Raft, StateReader};
use crate::tls::{NodeTls, TlsListener};
use crate::types::{Member, NodeId, TypeConfig};

/// The file, inside the data directory, holding the node's Ed25519 key (PKCS#8).
pub const NODE_KEY_FILE: &str = "node-key.pk8";
/// The node's redb database, inside the data directory.
pub const DB_FILE: &str = "raft.redb";

/// Timers.
#[derive(Debug, Clone)]
pub struct Timing {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Deadline of one RPC between orchestrators.
    pub rpc_timeout: Duration,
    /// How long a forwarded call stays valid.
    pub call_lifetime: Duration,
}

impl Timing {
    /// For real sites: tolerant of WAN latency.
    pub fn standard() -> Self {
        Self {
            heartbeat_ms: 250,
            election_min_ms: 1_000,
            election_max_ms: 2_000,
            rpc_timeout: Duration::from_secs(2),
            call_lifetime: Duration::from_secs(30),
        }
    }

    /// For loopback tests: quick elections.
    pub fn fast() -> Self {
        Self {
            heartbeat_ms: 100,
            election_min_ms: 500,
            election_max_ms: 1_000,
            rpc_timeout: Duration::from_secs(1),
            call_lifetime: Duration::from_secs(5),
        }
    }

    /// A lease check: a quorum acknowledgement within the leader lease, or a fresh one (a
    /// heartbeat round is sent at once) within `election_min_ms`.
    fn lease(&self) -> LinearizerOption {
        LinearizerOption::new(None, true)
            .with_wait_timeout(Duration::from_millis(self.election_min_ms))
    }

    fn liveness_window(&self) -> Duration {
        Duration::from_millis(self.election_max_ms.max(4 * self.heartbeat_ms))
    }
}

/// How to start a node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub name: OrchestratorId,
    pub site: SiteId,
    pub witness: bool,
    /// Where to listen.
    pub listen: SocketAddr,
    /// `host:port` the others use to reach this node; defaults to the bound address.
    pub advertise: Option<String>,
    /// Holds the database and the node key.
    pub data_dir: PathBuf,
    pub tls: NodeTls,
    pub timing: Timing,
    /// Serve `/admin/write` and `/admin/call`: any holder of a cluster certificate may then
    /// propose commands and calls. For operator tooling and tests; off by default.
    pub admin_api: bool,
}

/// The stable Raft node id of an orchestrator (64-bit FNV-1a of its name, never 0).
pub fn node_id_for(name: &OrchestratorId) -> NodeId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Leadership of one term, valid while `token` is not cancelled.
#[derive(Debug, Clone)]
pub struct Leadership {
    pub term: Term,
    pub token: CancellationToken,
}

/// A request to join the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub member: Member,
    pub public_key_hex: String,
}

/// One member as `status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberStatus {
    pub name: OrchestratorId,
    pub site: SiteId,
    pub address: String,
    pub witness: bool,
    pub voter: bool,
    /// As seen by this node when it is the leader; `None` otherwise.
    pub live: Option<bool>,
}

/// What `qfence cluster status` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub name: OrchestratorId,
    pub site: SiteId,
    pub role: String,
    pub term: Term,
    pub leader: Option<OrchestratorId>,
    pub last_applied: Option<u64>,
    pub members: Vec<MemberStatus>,
    pub plans: usize,
    pub controllers: usize,
}

struct Inner {
    id: NodeId,
    member: Member,
    raft: Raft,
    reader: StateReader,
    key: NodeKey,
    client: reqwest::Client,
    liveness: Liveness,
    nonces: Mutex<NonceCache>,
    executor: Arc<dyn CallExecutor>,
    shutdown: CancellationToken,
    leadership: Mutex<Option<Leadership>>,
    /// Membership changes one at a time: openraft refuses a change while another is in progress.
    join_lock: tokio::sync::Mutex<()>,
    timing: Timing,
}

/// A running orchestrator node.
#[derive(Clone)]
pub struct ClusterNode {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("member", &self.inner.member)
            .finish_non_exhaustive()
    }
}

fn raft_err(e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Raft(e.to_string())
}

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

    /// The Raft node id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// This orchestrator's name.
    pub fn name(&self) -> &OrchestratorId {
        &self.inner.member.name
    }

    /// This orchestrator's membership record.
    pub fn member(&self) -> &Member {
        &self.inner.member
    }

    /// The Raft handle (metrics, triggers).
    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// A copy of the applied replicated state. It copies every plan, status and event: to
    /// read a few fields, [`ClusterNode::read`] is far cheaper.
    pub fn state(&self) -> ClusterState {
        self.inner.reader.state()
    }

    /// Runs `f` on the applied replicated state without copying it. `f` holds the state
    /// machine's read lock, so applying waits for it: keep it short, and never await in it.
    pub fn read<T>(&self, f: impl FnOnce(&ClusterState) -> T) -> T {
        self.inner.reader.read(|image| f(&image.state))
    }

    /// The current Raft metrics.
    pub fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.inner.raft.metrics().borrow_watched().clone()
    }

    /// How long ago a quorum last acknowledged this node as leader (`None` unless leader).
    pub fn since_quorum_ack(&self) -> Option<Duration> {
        use openraft::Instant as _;
        self.metrics().last_quorum_acked.map(|at| at.elapsed())
    }

    /// The newest term this node knows.
    pub fn term(&self) -> Term {
        Term(self.metrics().current_term)
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<OrchestratorId> {
        let m = self.metrics();
        let id = m.current_leader?;
        m.membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.name.clone())
    }

    /// Makes this node a one-voter cluster (the embedded default) and publishes its key. Does
    /// nothing to a node that is already initialised.
    pub async fn initialize(&self) -> Result<(), ClusterError> {
        let raft = &self.inner.raft;
        if !raft.is_initialized().await.map_err(raft_err)? {
            let members = BTreeMap::from([(self.inner.id, self.inner.member.clone())]);
            raft.initialize(members).await.map_err(raft_err)?;
        }
        self.wait_for_leader(Duration::from_secs(10)).await?;
        if self.inner.raft.is_leader() {
            self.inner
                .add_records(&self.inner.member, &self.inner.key.public_key_hex())
                .await?;
        }
        Ok(())
    }

    /// Whether this node belongs to a cluster already (it was initialised, or joined one and
    /// received its membership).
    pub async fn is_initialized(&self) -> Result<bool, ClusterError> {
        self.inner.raft.is_initialized().await.map_err(raft_err)
    }

    /// Joins the cluster through any member at `seed` (`host:port`).
    pub async fn join(&self, seed: &str) -> Result<(), ClusterError> {
        let request = JoinRequest {
            member: self.inner.member.clone(),
            public_key_hex: self.inner.key.public_key_hex(),
        };
        let peer = |message: String| ClusterError::Peer {
            peer: seed.to_owned(),
            message,
        };
        let reply: Result<(), String> = self
            .inner
            .client
            .post(format!("https://{seed}/cluster/join"))
            .timeout(Duration::from_secs(30))
            .json(&request)
            .send()
            .await
            .map_err(|e| peer(e.to_string()))?
            .json()
            .await
            .map_err(|e| peer(e.to_string()))?;
        reply.map_err(peer)
    }

    /// Waits until some node is known as leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<OrchestratorId, ClusterError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ClusterError::NotLeader { leader: None });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Leadership of the current term, if this node is leader and holds a valid lease.
    pub async fn leadership(&self) -> Result<Leadership, ClusterError> {
        self.inner.leadership().await
    }

    /// Proposes a command; only the leader can. Returns once it is committed and applied.
    pub async fn write(&self, command: Command) -> Result<Response, ClusterError> {
        self.inner.write(command).await
    }

    /// Asks the leader to hand leadership to `to`.
    pub async fn transfer_leadership(&self, to: &OrchestratorId) -> Result<(), ClusterError> {
        self.inner
            .raft
            .trigger()
            .transfer_leader(node_id_for(to))
            .await
            .map_err(raft_err)
    }

    /// This node's view of the cluster.
    pub fn status(&self) -> StatusReport {
        self.inner.status()
    }

    /// Makes a controller call on behalf of a plan (or of no plan), from wherever routing says.
    /// Only the leader may; anything but [`CallOutcome::Done`] means UNKNOWN to the caller.
    pub async fn call(
        &self,
        controller: &ControllerId,
        plan: Option<(PlanId, Generation)>,
        call: &Call,
    ) -> CallOutcome {
        self.inner.call(controller, plan, call).await
    }

    /// Signs a forwarded call as the current leader (without sending it).
    pub async fn sign_call(
        &self,
        controller: &ControllerId,
        plan: Option<(PlanId, Generation)>,
        call: &Call,
    ) -> Result<SignedCall, ClusterError> {
        let leadership = self.leadership().await?;
        self.inner.sign(&leadership, controller, plan, call)
    }

    /// Sends a signed call to orchestrator `to`; a refusal is recorded in the event log (when
    /// this node can still write).
    pub async fn send_signed(
        &self,
        to: &OrchestratorId,
        call: &SignedCall,
    ) -> Result<ForwardReply, ClusterError> {
        let reply = self.inner.send_signed(to, call).await?;
        if let ForwardReply::Refused { refusal } = &reply {
            self.inner.record_refusal(to, &call.envelope, refusal).await;
        }
        Ok(reply)
    }

    /// Which orchestrators routing may choose from, as this node sees them.
    pub fn candidates(&self) -> Vec<Candidate> {
        self.inner.candidates()
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        if let Some(l) = self
            .inner
            .leadership
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            l.token.cancel();
        }
        let _ = self.inner.raft.shutdown().await;
    }
}

impl Inner {
    fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.raft.metrics().borrow_watched().clone()
    }

    fn name_of(&self, m: &RaftMetrics<TypeConfig>, id: NodeId) -> Option<OrchestratorId> {
        m.membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.name.clone())
    }

    fn address_of(&self, name: &OrchestratorId) -> Option<String> {
        let m = self.metrics();
        m.membership_config
            .membership()
            .nodes()
            .find(|(_, n)| &n.name == name)
            .map(|(_, n)| n.address.clone())
    }

    /// Keeps the leadership token in step with what Raft reports: a new token per term led,
    /// cancelled as soon as that leadership ends.
    fn sync_leadership(&self, m: &RaftMetrics<TypeConfig>) {
        let leading = m.state == ServerState::Leader && m.current_leader == Some(self.id);
        let term = Term(m.current_term);
        let mut slot = self.leadership.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = slot.as_ref()
            && (!leading || l.term != term)
        {
            tracing::info!(orchestrator = %self.member.name, term = %l.term, "Lost leadership; cancelling what it started");
            l.token.cancel();
            *slot = None;
        }
        if leading && slot.is_none() {
            tracing::info!(orchestrator = %self.member.name, term = %term, "Became leader");
            *slot = Some(Leadership {
                term,
                token: self.shutdown.child_token(),
            });
        }
    }

    async fn leadership(&self) -> Result<Leadership, ClusterError> {
        let not_leader = |m: &RaftMetrics<TypeConfig>| ClusterError::NotLeader {
            leader: m
                .current_leader
                .and_then(|id| self.name_of(m, id))
                .map(|n| n.to_string()),
        };
        if let Err(e) = self.raft.ensure_linearizable(self.timing.lease()).await {
            // Not provably leader: whatever the old lease started must stop.
            if let Some(l) = self
                .leadership
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                l.token.cancel();
            }
            tracing::debug!(error = %e, "No valid leader lease");
            return Err(not_leader(&self.metrics()));
        }
        let m = self.metrics();
        self.sync_leadership(&m);
        self.leadership
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| not_leader(&m))
    }

    async fn write(&self, command: Command) -> Result<Response, ClusterError> {
        let kind = command.kind();
        match self.raft.client_write(Request::new(command)).await {
            Ok(r) => Ok(r.data),
            Err(e) => {
                if let Some(f) = e.forward_to_leader() {
                    return Err(ClusterError::NotLeader {
                        leader: f.leader_node.as_ref().map(|n| n.name.to_string()),
                    });
                }
                Err(ClusterError::Raft(format!("writing {kind}: {e}")))
            }
        }
    }

    async fn add_records(&self, member: &Member, key_hex: &str) -> Result<(), ClusterError> {
        self.write(Command::SetNodeKey {
            orchestrator: member.name.clone(),
            public_key_hex: key_hex.to_owned(),
        })
        .await?;
        self.write(Command::OrchestratorState {
            orchestrator: member.name.clone(),
            state: OrchestratorRecord {
                site: member.site.clone(),
                address: member.address.clone(),
                witness: member.witness,
                status: OrchestratorStatus::Active,
            },
        })
        .await?;
        Ok(())
    }

    async fn add_member(&self, join: &JoinRequest) -> Result<(), ClusterError> {
        let _one_at_a_time = self.join_lock.lock().await;
        let id = node_id_for(&join.member.name);
        let m = self.metrics();
        if let Some(existing) = m.membership_config.membership().get_node(&id)
            && existing.name != join.member.name
        {
            return Err(ClusterError::Raft(format!(
                "node id {id} of {} is taken by {}",
                join.member.name, existing.name
            )));
        }
        self.raft
            .add_learner(id, join.member.clone(), true)
            .await
            .map_err(raft_err)?;
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(raft_err)?;
        self.add_records(&join.member, &join.public_key_hex).await?;
        tracing::info!(orchestrator = %join.member.name, site = %join.member.site, "Added an orchestrator to the cluster");
        Ok(())
    }

    fn candidates(&self) -> Vec<Candidate> {
        let m = self.metrics();
        let window = self.timing.liveness_window();
        self.reader.read(|image| {
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, n)| Candidate {
                    id: n.name.clone(),
                    site: n.site.clone(),
                    live: *id == self.id || self.liveness.is_live(*id, window),
                    witness: n.witness,
                    active: image
                        .state
                        .orchestrators
                        .get(&n.name)
                        .is_none_or(|o| o.status == OrchestratorStatus::Active),
                })
                .collect()
        })
    }

    /// Signs `call` for a forward: the one place a call is serialised, into the envelope
    /// whose bytes the signature covers.
    fn sign(
        &self,
        leadership: &Leadership,
        controller: &ControllerId,
        plan: Option<(PlanId, Generation)>,
        call: &Call,
    ) -> Result<SignedCall, ClusterError> {
        let call = serde_json::to_value(call)?;
        let (plan, generation) = match plan {
            Some((p, g)) => (Some(p), g),
            None => (None, Generation(0)),
        };
        Ok(self.key.sign(Envelope {
            plan,
            generation,
            term: leadership.term,
            leader: self.member.name.clone(),
            nonce: signing::new_nonce()?,
            expires_at_unix_ms: now_unix_ms() + self.timing.call_lifetime.as_millis() as u64,
            controller: controller.clone(),
            call,
        }))
    }

    async fn send_signed(
        &self,
        to: &OrchestratorId,
        call: &SignedCall,
    ) -> Result<ForwardReply, ClusterError> {
        let address = self.address_of(to).ok_or_else(|| ClusterError::Peer {
            peer: to.to_string(),
            message: "not a member".into(),
        })?;
        let peer = |message: String| ClusterError::Peer {
            peer: to.to_string(),
            message,
        };
        let reply: Result<ForwardReply, String> = self
            .client
            .post(format!("https://{address}/cluster/forward"))
            .timeout(self.timing.call_lifetime)
            .json(call)
            .send()
            .await
            .map_err(|e| peer(e.to_string()))?
            .json()
            .await
            .map_err(|e| peer(e.to_string()))?;
        reply.map_err(peer)
    }

    async fn record_refusal(&self, to: &OrchestratorId, e: &Envelope, refusal: &signing::Refusal) {
        tracing::warn!(
            controller = %e.controller, orchestrator = %to, term = %e.term,
            generation = %e.generation, reason = %refusal, "A forwarded call was refused"
        );
        let event = EventDraft {
            at_unix_ms: now_unix_ms(),
            plan: e.plan.clone(),
            message: format!(
                "{to} refused a forwarded call to {}: {refusal}",
                e.controller
            ),
            fields: serde_json::json!({
                "orchestrator": to, "controller": e.controller, "term": e.term,
                "generation": e.generation, "refusal": refusal,
            }),
        };
        if let Err(e) = self.write(Command::AppendEvent { event }).await {
            tracing::warn!(error = %e, "Could not record an event");
        }
    }

    async fn call(
        &self,
        controller: &ControllerId,
        plan: Option<(PlanId, Generation)>,
        call: &Call,
    ) -> CallOutcome {
        let unknown = |reason: String| CallOutcome::Unknown {
            controller: controller.clone(),
            reason,
        };
        let leadership = match self.leadership().await {
            Ok(l) => l,
            Err(e) => return unknown(e.to_string()),
        };
        let Some(record) = self
            .reader
            .read(|i| i.state.controllers.get(controller).cloned())
        else {
            return unknown(format!("controller {controller} is not registered"));
        };
        let route = routing::route(
            &Placement::from(&record),
            &self.candidates(),
            &self.member.name,
        );
        match route {
            Route::Local => {
                let token = leadership.token.child_token();
                // Handed over as it is: a local call is never serialised.
                match self.executor.execute(&record, call, token).await {
                    Ok(result) => CallOutcome::Done {
                        by: self.member.name.clone(),
                        result,
                    },
                    Err(e) => unknown(format!("the call failed here: {e}")),
                }
            }
            Route::Forward { to, .. } => {
                let signed = match self.sign(&leadership, controller, plan, call) {
                    Ok(s) => s,
                    Err(e) => return unknown(e.to_string()),
                };
                let reply = tokio::select! {
                    () = leadership.token.cancelled() => {
                        return unknown(format!("leadership of term {} was lost during the call", leadership.term));
                    }
                    r = self.send_signed(&to, &signed) => r,
                };
                match reply {
                    Ok(ForwardReply::Done { result }) => CallOutcome::Done { by: to, result },
                    Ok(ForwardReply::Refused { refusal }) => {
                        self.record_refusal(&to, &signed.envelope, &refusal).await;
                        CallOutcome::Refused { by: to, refusal }
                    }
                    Ok(ForwardReply::Failed { error }) => {
                        unknown(format!("the call failed at {to}: {error}"))
                    }
                    Err(e) => unknown(e.to_string()),
                }
            }
            Route::Unreachable { reason } => unknown(reason),
        }
    }

    /// What this node knows, for checking a forwarded call.
    fn knowledge(
        &self,
        e: &Envelope,
    ) -> (
        Term,
        Option<OrchestratorId>,
        Option<Vec<u8>>,
        Option<Generation>,
    ) {
        let m = self.metrics();
        let leader = m.current_leader.and_then(|id| self.name_of(&m, id));
        let (key, generation) = self.reader.read(|i| {
            (
                i.state
                    .node_keys
                    .get(&e.leader)
                    .and_then(|k| hex::decode(k).ok()),
                e.plan.as_ref().and_then(|p| i.state.plan_generation(p)),
            )
        });
        (Term(m.current_term), leader, key, generation)
    }

    async fn handle_forward(&self, call: SignedCall) -> ForwardReply {
        let e = &call.envelope;
        // A follower may lag the leader by a heartbeat: give it a moment to learn the term and
        // apply the generation the call was decided at, rather than refusing a valid call.
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.timing.election_max_ms);
        let (term, leader, key, generation) = loop {
            let k = self.knowledge(e);
            let behind = e.term > k.0
                || (e.term == k.0 && k.1.is_none())
                || (e.plan.is_some() && k.3.is_none_or(|g| g < e.generation));
            if !behind || tokio::time::Instant::now() >= deadline {
                break k;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let ctx = VerifyContext {
            now_unix_ms: now_unix_ms(),
            known_term: term,
            leader_of_known_term: leader.as_ref(),
            signer_key: key.as_deref(),
            plan_generation: generation,
        };
        let verdict = {
            let mut nonces = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
            signing::verify(&call, &ctx, &mut nonces)
        };
        if let Err(refusal) = verdict {
            tracing::info!(leader = %e.leader, term = %e.term, controller = %e.controller, reason = %refusal, "Refused a forwarded call");
            return ForwardReply::Refused { refusal };
        }

        let Some(record) = self
            .reader
            .read(|i| i.state.controllers.get(&e.controller).cloned())
        else {
            return ForwardReply::Failed {
                error: format!("controller {} is not registered here", e.controller),
            };
        };
        if self.member.witness
            || !Placement::from(&record)
                .allowed_sites()
                .contains(&&self.member.site)
        {
            return ForwardReply::Failed {
                error: format!(
                    "{} at {} may not call controller {}",
                    self.member.name, self.member.site, e.controller
                ),
            };
        }

        // The call stops if a newer term appears while it runs: its leader was deposed.
        let token = self.shutdown.child_token();
        let mut metrics = self.raft.metrics();
        let watch_token = token.clone();
        let call_term = e.term.0;
        let watcher = tokio::spawn(async move {
            loop {
                if metrics.borrow_watched().current_term > call_term {
                    watch_token.cancel();
                    return;
                }
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        });
        // The call runs in a task of its own, cancelled (not dropped) when the caller goes away:
        // dropping it would skip the executor's own stop (a fence agent's process group, the
        // cancel flag a driver reports), and a caller that disconnects has given up, one of the
        // two reasons `cancel` fires.
        let caller_gone = token.clone().drop_guard();
        // Verified: now the call is read as one (a newer leader's extra fields, which the
        // signature covered, are dropped here).
        let payload: Call = match serde_json::from_value(e.call.clone()) {
            Ok(c) => c,
            Err(err) => {
                return ForwardReply::Failed {
                    error: format!("not a qfence controller call: {err}"),
                };
            }
        };
        let (executor, call_token) = (self.executor.clone(), token.clone());
        let task =
            tokio::spawn(async move { executor.execute(&record, &payload, call_token).await });
        let result = task
            .await
            .unwrap_or_else(|failed| Err(format!("the call's task failed: {failed}")));
        caller_gone.disarm();
        watcher.abort();
        match result {
            Ok(result) => ForwardReply::Done { result },
            Err(error) if token.is_cancelled() => ForwardReply::Failed {
                error: format!(
                    "cancelled: the leader of term {} was deposed ({error})",
                    e.term
                ),
            },
            Err(error) => ForwardReply::Failed { error },
        }
    }

    fn status(&self) -> StatusReport {
        let m = self.metrics();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let leading = m.state == ServerState::Leader;
        let window = self.timing.liveness_window();
        let members = membership
            .nodes()
            .map(|(id, n)| MemberStatus {
                name: n.name.clone(),
                site: n.site.clone(),
                address: n.address.clone(),
                witness: n.witness,
                voter: voters.contains(id),
                live: leading.then(|| *id == self.id || self.liveness.is_live(*id, window)),
            })
            .collect();
        let (plans, controllers) = self
            .reader
            .read(|i| (i.state.plans.len(), i.state.controllers.len()));
        StatusReport {
            name: self.member.name.clone(),
            site: self.member.site.clone(),
            role: format!("{:?}", m.state).to_lowercase(),
            term: Term(m.current_term),
            leader: m.current_leader.and_then(|id| self.name_of(&m, id)),
            last_applied: m.last_applied.map(|l| l.index),
            members,
            plans,
            controllers,
        }
    }
}

async fn watch_leadership(inner: Arc<Inner>) {
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

/// Largest append-entries body accepted (only from peers holding a cluster certificate).
const APPEND_BODY_LIMIT: usize = 64 << 20;
/// Largest snapshot accepted: the whole replicated state as JSON.
const SNAPSHOT_BODY_LIMIT: usize = 1 << 30;

type Shared = State<Arc<Inner>>;
type Reply<T> = Json<Result<T, String>>;

fn router(inner: Arc<Inner>, admin_api: bool) -> Router {
    let admin = Router::new()
        .route("/admin/write", post(admin_write))
        .route("/admin/call", post(admin_call));
    let router = if admin_api {
        Router::new().merge(admin)
    } else {
        Router::new()
    };
    router
        .route(
            "/raft/append",
            post(append).layer(DefaultBodyLimit::max(APPEND_BODY_LIMIT)),
        )
        .route("/raft/vote", post(vote))
        .route("/raft/pre-vote", post(pre_vote))
        .route(
            "/raft/snapshot",
            post(snapshot).layer(DefaultBodyLimit::max(SNAPSHOT_BODY_LIMIT)),
        )
        .route("/raft/transfer-leader", post(transfer_leader))
        .route("/cluster/join", post(join))
        .route("/cluster/forward", post(forward))
        .route("/cluster/status", get(status))
        .with_state(inner)
}

async fn append(
    State(s): Shared,
    Json(r): Json<AppendEntriesRequest<TypeConfig>>,
) -> Reply<AppendEntriesResponse<TypeConfig>> {
    Json(s.raft.append_entries(r).await.map_err(|e| e.to_string()))
}

async fn vote(
    State(s): Shared,
    Json(r): Json<VoteRequest<TypeConfig>>,
) -> Reply<VoteResponse<TypeConfig>> {
    Json(s.raft.vote(r).await.map_err(|e| e.to_string()))
}

async fn pre_vote(
    State(s): Shared,
    Json(r): Json<VoteRequest<TypeConfig>>,
) -> Reply<VoteResponse<TypeConfig>> {
    Json(s.raft.pre_vote(r).await.map_err(|e| e.to_string()))
}

async fn snapshot(
    State(s): Shared,
    Json(b): Json<SnapshotBody>,
) -> Reply<SnapshotResponse<TypeConfig>> {
    let snap = openraft::Snapshot {
        meta: b.meta,
        snapshot: b.data,
    };
    Json(
        s.raft
            .install_full_snapshot(b.vote, snap)
            .await
            .map_err(|e| e.to_string()),
    )
}

async fn transfer_leader(
    State(s): Shared,
    Json(r): Json<TransferLeaderRequest<TypeConfig>>,
) -> Reply<TransferLeaderResponse<TypeConfig>> {
    Json(
        s.raft
            .handle_transfer_leader(r)
            .await
            .map_err(|e| e.to_string()),
    )
}

async fn join(
    State(s): Shared,
    ConnectInfo(peer): ConnectInfo<crate::tls::Peer>,
    Json(r): Json<JoinRequest>,
) -> Reply<()> {
    // An orchestrator joins under the name its certificate was issued for; a member may pass
    // on a join it checked itself.
    let m = s.metrics();
    let by_member = m
        .membership_config
        .membership()
        .nodes()
        .any(|(_, n)| n.name != r.member.name && peer.is_named(n.name.as_str()));
    if !peer.is_named(r.member.name.as_str()) && !by_member {
        tracing::warn!(peer = %peer.addr, orchestrator = %r.member.name, "Refused a join: the certificate is not for that orchestrator");
        return Json(Err(format!(
            "the certificate presented is not for orchestrator {}",
            r.member.name
        )));
    }
    if s.raft.is_leader() {
        return Json(s.add_member(&r).await.map_err(|e| e.to_string()));
    }
    // Pass it to the leader: one hop, so a join can name any member.
    let Some(leader) = m
        .current_leader
        .and_then(|id| m.membership_config.membership().get_node(&id).cloned())
    else {
        return Json(Err("no leader is known; try again".into()));
    };
    let r = s
        .client
        .post(format!("https://{}/cluster/join", leader.address))
        .timeout(Duration::from_secs(30))
        .json(&r)
        .send()
        .await;
    match r {
        Ok(resp) => match resp.json::<Result<(), String>>().await {
            Ok(x) => Json(x),
            Err(e) => Json(Err(format!("leader {}: {e}", leader.name))),
        },
        Err(e) => Json(Err(format!("leader {}: {e}", leader.name))),
    }
}

async fn forward(State(s): Shared, Json(c): Json<SignedCall>) -> Reply<ForwardReply> {
    Json(Ok(s.handle_forward(c).await))
}

async fn status(State(s): Shared) -> Json<StatusReport> {
    Json(s.status())
}

/// A controller call asked for through the admin endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallRequest {
    pub controller: ControllerId,
    pub plan: Option<(PlanId, Generation)>,
    pub call: Call,
}

// Operator and test tooling holding a certificate from the cluster CA may propose commands and
// calls; members are trusted to the same degree (any of them may become leader).
async fn admin_write(State(s): Shared, Json(c): Json<Command>) -> Reply<Response> {
    Json(s.write(c).await.map_err(|e| e.to_string()))
}

async fn admin_call(State(s): Shared, Json(c): Json<CallRequest>) -> Reply<CallOutcome> {
    Json(Ok(s.call(&c.controller, c.plan, &c.call).await))
}

/// An mTLS client for a node's endpoint, for operator tools and tests.
#[derive(Debug, Clone)]
pub struct AdminClient {
    client: reqwest::Client,
}

impl AdminClient {
    /// A client presenting `tls`'s certificate.
    pub fn new(tls: &NodeTls, timeout: Duration) -> Result<Self, ClusterError> {
        crate::tls::install_crypto_provider();
        Ok(Self {
            client: tls.http_client(timeout)?,
        })
    }

    /// Like [`AdminClient::new`], resolving the given host names to fixed addresses (a harness
    /// outside the nodes' DNS, such as a test driving containers).
    pub fn with_resolve(
        tls: &NodeTls,
        timeout: Duration,
        resolve: &[(String, SocketAddr)],
    ) -> Result<Self, ClusterError> {
        crate::tls::install_crypto_provider();
        let mut builder = tls.http_client_builder(timeout)?;
        for (host, addr) in resolve {
            builder = builder.resolve(host, *addr);
        }
        Ok(Self {
            client: builder
                .build()
                .map_err(|e| ClusterError::Tls(e.to_string()))?,
        })
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        address: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClusterError> {
        let peer = |message: String| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        };
        req.send()
            .await
            .map_err(|e| peer(e.to_string()))?
            .json()
            .await
            .map_err(|e| peer(e.to_string()))
    }

    /// `GET /cluster/status` of the node at `address`.
    pub async fn status(&self, address: &str) -> Result<StatusReport, ClusterError> {
        let req = self.client.get(format!("https://{address}/cluster/status"));
        self.send(address, req).await
    }

    /// Proposes a command at the node at `address` (it must be the leader).
    pub async fn write(&self, address: &str, command: &Command) -> Result<Response, ClusterError> {
        let req = self
            .client
            .post(format!("https://{address}/admin/write"))
            .json(command);
        let r: Result<Response, String> = self.send(address, req).await?;
        r.map_err(|message| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        })
    }

    /// Asks the node at `address` (it must be the leader) to make a controller call.
    pub async fn call(
        &self,
        address: &str,
        call: &CallRequest,
    ) -> Result<CallOutcome, ClusterError> {
        let req = self
            .client
            .post(format!("https://{address}/admin/call"))
            .json(call);
        let r: Result<CallOutcome, String> = self.send(address, req).await?;
        r.map_err(|message| ClusterError::Peer {
            peer: address.to_owned(),
            message,
        })
    }
}
