//! The openraft type configuration.
//!
//! Node ids are small integers assigned when an orchestrator joins; the [`Member`] record in
//! the Raft membership carries its name, site and address, so routing and the network layer
//! read them from the membership every node already agrees on.
//!
//! The leader id is openraft's *standard* mode (one leader per term), not the default
//! *advanced* mode (several candidates may share a term): a forwarded call names its term and
//! the receiver must be able to say who the one leader of that term is.

use qfence_model::ids::{OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};

use crate::state::{Request, Response};

/// A Raft node id.
pub type NodeId = u64;

/// What the Raft membership records about each orchestrator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: OrchestratorId,
    pub site: SiteId,
    /// `host:port` of its cluster endpoint (HTTPS, mutual TLS).
    pub address: String,
    /// A witness votes but owns no plans and makes no controller calls.
    pub witness: bool,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{} ({})", self.name, self.site, self.address)
    }
}

openraft::declare_raft_types!(
    /// qfence's Raft types.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Member,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, NodeId>,
);

/// A log id.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A vote.
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// The stored membership.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
