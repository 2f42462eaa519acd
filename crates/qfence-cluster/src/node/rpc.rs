//! The cluster endpoint's routes: Raft's RPCs, join and forward from members, status, and the
//! admin routes for operator and test tooling.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use qfence_call::Call;
use qfence_model::ids::{ControllerId, Generation, PlanId};
use serde::{Deserialize, Serialize};

use crate::forward::{CallOutcome, ForwardReply, ForwardedWrite};
use crate::network::SnapshotBody;
use crate::signing::SignedCall;
use crate::state::{Command, Response};
use crate::types::TypeConfig;

use super::{Inner, JoinRequest, StatusReport};

/// Largest append-entries body accepted (only from peers holding a cluster certificate).
const APPEND_BODY_LIMIT: usize = 64 << 20;
/// Largest snapshot accepted: the whole replicated state as JSON.
const SNAPSHOT_BODY_LIMIT: usize = 1 << 30;

type Shared = State<Arc<Inner>>;
type Reply<T> = Json<Result<T, String>>;

pub(super) fn router(inner: Arc<Inner>, admin_api: bool) -> Router {
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
        .route("/cluster/write", post(write))
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

async fn write(
    State(s): Shared,
    ConnectInfo(peer): ConnectInfo<crate::tls::Peer>,
    Json(w): Json<ForwardedWrite>,
) -> Reply<serde_json::Value> {
    Json(s.handle_write(&peer, w).await)
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
