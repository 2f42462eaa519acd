//! Raft RPCs between orchestrators over HTTPS (mutual TLS).
//!
//! The client side implements openraft's `RaftNetworkV2` with reqwest; the server side is a set
//! of axum handlers mounted by [`node`](crate::node). Every body is JSON; a handler answers
//! `{"Ok": ...}` or `{"Err": "message"}`.
//!
//! The client also records when each peer last answered ([`Liveness`]): the leader's heartbeats
//! make that a cheap, current view of which orchestrators are reachable, which routing uses.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::AnyError;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::{Member, NodeId, SnapshotMeta, TypeConfig, Vote};

/// When each peer last answered an RPC.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    seen: Arc<Mutex<HashMap<NodeId, Instant>>>,
}

impl Liveness {
    fn mark(&self, node: NodeId) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node, qfence_model::time::monotonic_now());
    }

    /// Whether `node` answered within `window`.
    pub fn is_live(&self, node: NodeId, window: Duration) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .is_some_and(|t| t.elapsed() <= window)
    }
}

/// The body of a full-snapshot RPC.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotBody {
    pub vote: Vote,
    pub meta: SnapshotMeta,
    pub data: Vec<u8>,
}

/// Makes one client per peer.
#[derive(Debug, Clone)]
pub struct Network {
    client: reqwest::Client,
    liveness: Liveness,
}

impl Network {
    pub fn new(client: reqwest::Client, liveness: Liveness) -> Self {
        Self { client, liveness }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> PeerClient {
        PeerClient {
            target,
            base: format!("https://{}", node.address),
            client: self.client.clone(),
            liveness: self.liveness.clone(),
        }
    }
}

/// The RPC client for one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    base: String,
    client: reqwest::Client,
    liveness: Liveness,
}

enum CallError {
    Unreachable(reqwest::Error),
    Remote(String),
    Decode(reqwest::Error),
}

impl From<CallError> for RPCError<TypeConfig> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Decode(e) => RPCError::Network(NetworkError::new(&e)),
            CallError::Remote(m) => RPCError::Network(NetworkError::new(&AnyError::error(m))),
        }
    }
}

impl From<CallError> for StreamingError<TypeConfig> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(e) => StreamingError::Unreachable(Unreachable::new(&e)),
            CallError::Decode(e) => StreamingError::Network(NetworkError::new(&e)),
            CallError::Remote(m) => StreamingError::Network(NetworkError::new(&AnyError::error(m))),
        }
    }
}

impl PeerClient {
    async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(CallError::Unreachable)?;
        let result: Result<Resp, String> = response.json().await.map_err(CallError::Decode)?;
        self.liveness.mark(self.target);
        result.map_err(CallError::Remote)
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self.post("/raft/append", &rpc, option.hard_ttl()).await?)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self.post("/raft/vote", &rpc, option.hard_ttl()).await?)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self.post("/raft/pre-vote", &rpc, option.hard_ttl()).await?)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::type_config::alias::SnapshotOf<TypeConfig, Vec<u8>>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let body = SnapshotBody {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            r = self.post("/raft/snapshot", &body, option.hard_ttl()) => Ok(r?),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self
            .post("/raft/transfer-leader", &req, option.hard_ttl())
            .await?)
    }
}
