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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{LinearizerOption, RaftMetrics};
use qfence_call::Call;
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::ClusterError;
use crate::forward::{CallExecutor, CallOutcome, ForwardReply, WriteHandler};
use crate::network::Liveness;
use crate::routing::Candidate;
use crate::signing::{NodeKey, NonceCache, SignedCall};
use crate::state::{ClusterState, Command, Response};
use crate::store::{Raft, StateReader};
use crate::tls::NodeTls;
use crate::types::{Member, NodeId, TypeConfig};

mod admin;
mod calls;
mod forwarded;
mod leadership;
mod membership;
mod rpc;
mod start;
mod writes;

pub use admin::AdminClient;
pub use rpc::CallRequest;

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
    /// Runs the API writes followers forward; installed by the runtime once its API exists.
    writes: Mutex<Option<Arc<dyn WriteHandler>>>,
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

impl ClusterNode {
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

    /// Installs what runs the API writes followers forward here (the last one installed wins).
    pub fn set_write_handler(&self, handler: Arc<dyn WriteHandler>) {
        self.inner.set_write_handler(handler);
    }

    /// Sends an API write to the leader this node knows, over the cluster's mutual TLS, and
    /// returns the leader's answer. `NotLeader` when no other node is known as leader.
    pub async fn forward_write(
        &self,
        write: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, ClusterError> {
        self.inner.forward_write(write, timeout).await
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

/// Posts `body` as JSON to a member's cluster route at `url` and reads its answer, which the
/// routes send as `Result<T, String>`: a transport failure, an answer that does not decode and
/// the member's own refusal are each [`ClusterError::Peer`], named `peer`.
async fn post_to_member<B, T>(
    client: &reqwest::Client,
    peer: &str,
    url: String,
    timeout: Duration,
    body: &B,
) -> Result<T, ClusterError>
where
    B: Serialize + ?Sized,
    T: serde::de::DeserializeOwned,
{
    let err = |message: String| ClusterError::Peer {
        peer: peer.to_owned(),
        message,
    };
    let reply: Result<T, String> = client
        .post(url)
        .timeout(timeout)
        .json(body)
        .send()
        .await
        .map_err(|e| err(e.to_string()))?
        .json()
        .await
        .map_err(|e| err(e.to_string()))?;
    reply.map_err(err)
}
