//! Where a controller call made for the API runs: here, or forwarded through the cluster
//! to an orchestrator allowed to call the controller.

use super::*;

/// How long a registration check may take at the orchestrator that runs it.
pub(super) const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);

impl RuntimeBackend {
    /// Runs the registration check of `name` where routing says its calls run, so what it
    /// proves is the path a fence will take (issue 4, item 3), and says how it got there.
    ///
    /// The rule is [`routing::route`] seen from the orchestrator that received the request:
    /// it runs the check itself when its site is the controller's own or in its reach, and
    /// otherwise forwards it to an orchestrator at an allowed site, preferring the
    /// controller's own site. So `bmc-dc1` (dc1, reach dc2) asked at dc2-a runs at dc2-a:
    /// reach is what lets dc2's leader fence dc1's host once dc1 is lost, which is when that
    /// fence matters, so that is the path worth proving. Only the leader can sign a forward:
    /// the leader sends the check through [`ClusterNode::call`] exactly like an executor
    /// call (signed, with its term, refused from a deposed leader); a follower whose own site
    /// is not allowed answers `not_leader` naming the leader, and never runs the check
    /// from the wrong site.
    ///
    /// [`ClusterNode::call`]: qfence_cluster::node::ClusterNode::call
    pub(super) async fn route_registration(
        &self,
        name: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
    ) -> Result<(Report, String), BackendError> {
        let known = self.inner.registered().identities().clone();
        let mut call = Call::register(config.site.clone(), REGISTRATION_TIMEOUT);
        call.known = known.clone();
        let (value, how) = self
            .route_call(name, config, call, "registration check", || async {
                let config = self.cfg();
                let report = registration::register(Registration {
                    config: &config,
                    controller: name,
                    orchestrator: &self.inner.me,
                    secrets: &self.secrets,
                    known: &known,
                    timeout: REGISTRATION_TIMEOUT,
                })
                .await;
                Ok(Answer::Report(Box::new(report)))
            })
            .await?;
        let Answer::Report(report) = value else {
            return Err(BackendError::Unavailable(format!(
                "the registration check of {name} came back as {}",
                value.kind()
            )));
        };
        Ok((*report, how))
    }

    /// Runs `call` on controller `name` where routing says (see [`Self::route_registration`]
    /// for the rule): through the cluster on the leader, or `local` here on a follower whose
    /// site may call the controller. Returns the answer and how it got there.
    pub(super) async fn route_call<F, Fut>(
        &self,
        name: &ControllerId,
        config: &qfence_model::config::ControllerConfig,
        call: Call,
        what: &str,
        local: F,
    ) -> Result<(Answer, String), BackendError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Answer, String>>,
    {
        let inner = &self.inner;
        if inner.node.leadership().await.is_ok() {
            // A forwarded hop needs its round trip on top of the check's own deadline.
            let outer = REGISTRATION_TIMEOUT + Duration::from_secs(5);
            let outcome = tokio::time::timeout(outer, inner.node.call(name, None, &call))
                .await
                .map_err(|_| {
                    BackendError::Unavailable(format!(
                        "the {what} of {name} did not answer within {outer:?}"
                    ))
                })?;
            return match outcome {
                CallOutcome::Done { by, result } => {
                    let how = if by == inner.me {
                        "here: this leader's site may call it".to_owned()
                    } else {
                        inner.metrics.forwarded(Direction::Sent);
                        format!("forwarded by the leader {} to {by}", inner.me)
                    };
                    Ok((result, how))
                }
                CallOutcome::Refused { by, refusal } => {
                    inner.metrics.forward_refusal(&format!("{refusal:?}"));
                    Err(BackendError::Unavailable(format!(
                        "{by} refused the {what} of {name}: {refusal:?}"
                    )))
                }
                CallOutcome::Unknown { reason, .. } => Err(BackendError::Unavailable(format!(
                    "the {what} of {name} was not run: {reason}"
                ))),
            };
        }
        match routing::route(
            &Placement::from(config),
            &inner.node.candidates(),
            &inner.me,
        ) {
            Route::Local => {
                let value = local().await.map_err(|e| {
                    BackendError::Unavailable(format!("the {what} of {name} failed here: {e}"))
                })?;
                Ok((value, "here: this site may call it".to_owned()))
            }
            Route::Forward { .. } | Route::Unreachable { .. } => Err(BackendError::NotLeader {
                leader: Some(self.leader_info().await),
            }),
        }
    }
}
