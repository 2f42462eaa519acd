//! Outgoing controller calls: routing decides here or where, and a forwarded call is signed
//! by the leader, sent, and a refusal recorded in the event log.

use qfence_call::Call;
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId};
use qfence_model::time::now_unix_ms;

use crate::error::ClusterError;
use crate::forward::{CallOutcome, ForwardReply};
use crate::routing::{self, Candidate, Placement, Route};
use crate::signing::{self, Envelope, SignedCall};
use crate::state::{Command, EventDraft, OrchestratorStatus};

use super::{Inner, Leadership};

impl Inner {
    pub(super) fn candidates(&self) -> Vec<Candidate> {
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
    pub(super) fn sign(
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

    pub(super) async fn send_signed(
        &self,
        to: &OrchestratorId,
        call: &SignedCall,
    ) -> Result<ForwardReply, ClusterError> {
        let address = self.address_of(to).ok_or_else(|| ClusterError::Peer {
            peer: to.to_string(),
            message: "not a member".into(),
        })?;
        super::post_to_member(
            &self.client,
            to.as_str(),
            format!("https://{address}/cluster/forward"),
            self.timing.call_lifetime,
            call,
        )
        .await
    }

    pub(super) async fn record_refusal(
        &self,
        to: &OrchestratorId,
        e: &Envelope,
        refusal: &signing::Refusal,
    ) {
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

    pub(super) async fn call(
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
        // Where it may be called from, read in place (its settings are not copied per call).
        let Some(placement) = self
            .reader
            .read(|i| i.state.controllers.get(controller).map(Placement::from))
        else {
            return unknown(format!("controller {controller} is not registered"));
        };
        let route = routing::route(&placement, &self.candidates(), &self.member.name);
        match route {
            Route::Local => {
                let token = leadership.token.child_token();
                // Handed over as it is: a local call is never serialised.
                match self.executor.execute(controller, call, token).await {
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
}
