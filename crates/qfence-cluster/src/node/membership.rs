//! Membership: a fresh node initialising a one-voter cluster, a node joining through any
//! member, and the leader adding it (one change at a time) with its key and record.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::ChangeMembers;

use crate::error::ClusterError;
use crate::state::{Command, OrchestratorRecord, OrchestratorStatus};
use crate::types::Member;

use super::{ClusterNode, Inner, JoinRequest, node_id_for, raft_err};

impl ClusterNode {
    /// Makes this node a one-voter cluster (the embedded default) and publishes its key. Does
    /// nothing to a node that is already initialised.
    pub async fn initialize(&self) -> Result<(), ClusterError> {
        let raft = &self.inner.raft;
        if !raft.is_initialized().await.map_err(raft_err)? {
            let members = BTreeMap::from([(self.inner.id, self.inner.member.clone())]);
            raft.initialize(members).await.map_err(raft_err)?;
        }
        // A loaded machine (a slow first fsync, a starved process) can take seconds to elect
        // even a lone voter, and a leader just elected can still refuse a write as "not the
        // leader": wait, and retry the records, for up to 30 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.wait_for_leader(left).await?;
            if !self.inner.raft.is_leader() {
                return Ok(());
            }
            match self
                .inner
                .add_records(&self.inner.member, &self.inner.key.public_key_hex())
                .await
            {
                Err(ClusterError::NotLeader { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                r => return r,
            }
        }
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
        super::post_to_member(
            &self.inner.client,
            seed,
            format!("https://{seed}/cluster/join"),
            Duration::from_secs(30),
            &request,
        )
        .await
    }
}

impl Inner {
    pub(super) async fn add_records(
        &self,
        member: &Member,
        key_hex: &str,
    ) -> Result<(), ClusterError> {
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

    pub(super) async fn add_member(&self, join: &JoinRequest) -> Result<(), ClusterError> {
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
}
