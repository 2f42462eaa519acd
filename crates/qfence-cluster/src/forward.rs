//! Executing controller calls, here or at another orchestrator.
//!
//! The cluster does not know how to talk to a BMC or a hypervisor: the runtime hands it a
//! [`CallExecutor`] that runs one controller call locally (the real one wraps the drivers).
//! The leader routes each call ([`routing`](crate::routing)). A call is a typed
//! [`Call`] and its answer a typed [`Answer`] the whole way: a local call is handed to the
//! executor as it is, with no serialisation; a forwarded one is serialised into a
//! [`SignedCall`](crate::signing::SignedCall) (the only place its bytes matter) and its
//! answer comes back as a [`ForwardReply`].
//! What the leader finally gets is a [`CallOutcome`]; anything but `Done` means the caller
//! must treat the binding as UNKNOWN.

use std::future::Future;
use std::pin::Pin;

use qfence_call::{Answer, Call, Reading};
use qfence_model::ids::{ControllerId, OrchestratorId};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::signing::Refusal;

/// A boxed future, so executors can be shared as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs one controller call at this orchestrator.
///
/// The executor must stop when `cancel` fires (leadership was lost, or the caller gave up) and
/// report that as an error: a cancelled call's effect is unknown.
pub trait CallExecutor: Send + Sync + 'static {
    fn execute<'a>(
        &'a self,
        controller: &'a ControllerId,
        call: &'a Call,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>>;
}

/// The answer to a forwarded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum ForwardReply {
    /// Verified and executed.
    Done { result: Answer },
    /// Refused before anything ran.
    Refused { refusal: Refusal },
    /// Verified but could not run, or failed while running; its effect is unknown.
    Failed { error: String },
}

/// What the leader learns from one controller call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The call ran at `by` and returned `result`.
    Done { by: OrchestratorId, result: Answer },
    /// `by` refused the call; nothing ran there. The reason is recorded in the event log.
    Refused {
        by: OrchestratorId,
        refusal: Refusal,
    },
    /// The call's effect is not known: no orchestrator may call the controller right now, the
    /// transport failed, or the call failed or was cancelled. Report the binding as UNKNOWN.
    Unknown {
        controller: ControllerId,
        reason: String,
    },
}

/// An executor that answers every call with what it was asked and does nothing: for tests and
/// the forwarding benchmark. The answer is a reading that holds, whose detail echoes the
/// controller, the verb, the capability and the resource.
#[derive(Debug, Default, Clone)]
pub struct NoopExecutor;

impl CallExecutor for NoopExecutor {
    fn execute<'a>(
        &'a self,
        controller: &'a ControllerId,
        call: &'a Call,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err("cancelled".into());
            }
            Ok(Answer::Reading(Ok(Reading {
                holds: true,
                detail: format!(
                    "echo: {} {:?} {} {}",
                    controller, call.verb, call.target.capability, call.target.resource
                ),
                at: std::time::UNIX_EPOCH,
                by: OrchestratorId::new("noop").expect("a valid name"),
                definitive: false,
            })))
        })
    }
}

/// An executor for a process without controller drivers: every call fails, so the leader
/// reports UNKNOWN. The safe default for a cluster-only node.
#[derive(Debug, Default, Clone)]
pub struct NoDriversExecutor;

impl CallExecutor for NoDriversExecutor {
    fn execute<'a>(
        &'a self,
        controller: &'a ControllerId,
        _call: &'a Call,
        _cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            Err(format!(
                "this process has no controller drivers; {controller} was not called"
            ))
        })
    }
}

/// Runs, at the leader, an API write a follower forwarded (see ADR 0024).
///
/// The cluster does not know the API's writes: the runtime hands it a handler that reads the
/// write (its own typed enum, serialised only for the wire), runs it as the caller it names and
/// answers with its serialised result. The cluster has already checked that `from` is a member
/// and presented that member's certificate.
pub trait WriteHandler: Send + Sync + 'static {
    fn handle<'a>(
        &'a self,
        from: &'a OrchestratorId,
        write: serde_json::Value,
    ) -> BoxFuture<'a, serde_json::Value>;
}

/// An API write on its way from a follower to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardedWrite {
    /// The follower that sends it: its certificate must be issued for this name.
    pub from: OrchestratorId,
    pub write: serde_json::Value,
}
