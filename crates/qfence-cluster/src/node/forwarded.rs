//! Incoming forwarded calls: checked against what this node knows (term, leader, key,
//! generation, nonce) before anything runs, then run under a token a newer term cancels.

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use qfence_call::Call;
use qfence_model::ids::{Generation, OrchestratorId, Term};
use qfence_model::time::now_unix_ms;

use crate::forward::ForwardReply;
use crate::routing::Placement;
use crate::signing::{self, Envelope, SignedCall, VerifyContext};

use super::Inner;

impl Inner {
    /// What this node knows, for checking a forwarded call.
    pub(super) fn knowledge(
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

    pub(super) async fn handle_forward(&self, call: SignedCall) -> ForwardReply {
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
            tokio::spawn(async move { executor.execute(&record.id, &payload, call_token).await });
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
}
