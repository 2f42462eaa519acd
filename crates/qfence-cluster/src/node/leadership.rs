//! Leadership and this node's view: who leads, the token of the term this node leads (valid
//! only under a lease), writes through Raft, and the status report.

use std::collections::BTreeSet;

use openraft::async_runtime::WatchReceiver;
use openraft::{RaftMetrics, ServerState};
use qfence_model::ids::{OrchestratorId, Term};

use crate::error::ClusterError;
use crate::state::{Command, Request, Response};
use crate::types::{NodeId, TypeConfig};

use super::{Inner, Leadership, MemberStatus, StatusReport};

impl Inner {
    pub(super) fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.raft.metrics().borrow_watched().clone()
    }

    pub(super) fn name_of(
        &self,
        m: &RaftMetrics<TypeConfig>,
        id: NodeId,
    ) -> Option<OrchestratorId> {
        m.membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.name.clone())
    }

    pub(super) fn address_of(&self, name: &OrchestratorId) -> Option<String> {
        let m = self.metrics();
        m.membership_config
            .membership()
            .nodes()
            .find(|(_, n)| &n.name == name)
            .map(|(_, n)| n.address.clone())
    }

    /// Keeps the leadership token in step with what Raft reports: a new token per term led,
    /// cancelled as soon as that leadership ends.
    pub(super) fn sync_leadership(&self, m: &RaftMetrics<TypeConfig>) {
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

    pub(super) async fn leadership(&self) -> Result<Leadership, ClusterError> {
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

    pub(super) async fn write(&self, command: Command) -> Result<Response, ClusterError> {
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

    pub(super) fn status(&self) -> StatusReport {
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
