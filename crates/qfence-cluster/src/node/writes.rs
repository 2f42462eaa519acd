//! API writes forwarded from a follower to the leader: the sending side (one hop, to the
//! leader this node knows) and the receiving side (a member's certificate, then the handler).

use std::sync::Arc;
use std::time::Duration;

use crate::error::ClusterError;
use crate::forward::{ForwardedWrite, WriteHandler};
use crate::tls::Peer;

use super::Inner;

impl Inner {
    /// The handler the runtime installed, if any.
    fn write_handler(&self) -> Option<Arc<dyn WriteHandler>> {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn set_write_handler(&self, handler: Arc<dyn WriteHandler>) {
        *self.writes.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Sends `write` to the leader this node knows and returns its answer.
    pub(super) async fn forward_write(
        &self,
        write: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, ClusterError> {
        let m = self.metrics();
        let leader = m
            .current_leader
            .filter(|id| *id != self.id)
            .and_then(|id| m.membership_config.membership().get_node(&id).cloned())
            .ok_or(ClusterError::NotLeader { leader: None })?;
        let body = ForwardedWrite {
            from: self.member.name.clone(),
            write,
        };
        super::post_to_member(
            &self.client,
            leader.name.as_str(),
            format!("https://{}/cluster/write", leader.address),
            timeout,
            &body,
        )
        .await
    }

    /// Runs a write a member forwarded, if this node is the leader. Never forwarded again: a
    /// write that meets a second follower (leadership moved meanwhile) is refused, not passed
    /// round.
    pub(super) async fn handle_write(
        &self,
        peer: &Peer,
        w: ForwardedWrite,
    ) -> Result<serde_json::Value, String> {
        // A holder of a cluster certificate that is not a member (operator tooling) may not
        // speak for an API caller: only a member's API authenticated one.
        let member = self
            .metrics()
            .membership_config
            .membership()
            .nodes()
            .any(|(_, n)| n.name == w.from && n.name != self.member.name);
        if !member || !peer.is_named(w.from.as_str()) {
            tracing::warn!(peer = %peer.addr, orchestrator = %w.from, "Refused a forwarded write: not from a member with its certificate");
            return Err(format!(
                "a forwarded write is accepted only from another member presenting its own \
                 certificate, not from {}",
                w.from
            ));
        }
        if !self.raft.is_leader() {
            return Err(ClusterError::NotLeader { leader: None }.to_string());
        }
        let Some(handler) = self.write_handler() else {
            return Err(format!(
                "{} takes no forwarded writes (no API runs here)",
                self.member.name
            ));
        };
        Ok(handler.handle(&w.from, w.write).await)
    }
}
