//! What the leader shows: each plan's status (the last decision's verdicts beside its
//! sentence), published into the replicated state when it changed or grew old, and fed to
//! the metrics.

use qfence_cluster::state::{
    Command as ClusterCommand, Response, STATUS_FORMAT, SiteVerdict, StatusDraft,
};
use qfence_core::{Millis, PlanState, Reason, Rules};
use qfence_model::config::ValidatedConfig;
use qfence_model::{PlanId, Verdict};
use tokio_util::sync::CancellationToken;

use super::{
    Engine, PUBLISH_BATCH, PUBLISH_DURING_TRANSITION, PUBLISH_TIMEOUT, PUBLISH_WHEN_STEADY,
};
use crate::effective::EffectiveConfig;
use crate::shared::PlanRuntime;

/// Each site's verdict and newest proving-fence check time: what the leader shows and
/// publishes beside the last sentence. They are the last decision's own verdicts, so the two
/// never disagree (judging again here, at another `now` or with another rule for the
/// owner, once showed "dc1 FENCED" beside "dc1 not fenced (...)"). Before this orchestrator
/// has decided the plan, there is no sentence to agree with: the core's
/// [`Rules::shown_verdict`] judges its observations now.
pub(crate) fn site_verdicts(
    config: &ValidatedConfig,
    plan: &qfence_model::config::PlanConfig,
    state: &PlanState,
    view: &PlanRuntime,
    now: Millis,
) -> Vec<SiteVerdict> {
    let rules = Rules::default();
    plan.sites()
        .map(|site| {
            let v = match view.last_sites.iter().find(|v| v.site == *site) {
                Some(v) => v.clone(),
                None if !view.last_sites.is_empty() => {
                    // The decision judged the plan without this site (its configuration
                    // changed since): it was not seen, UNKNOWN.
                    return SiteVerdict {
                        site: site.clone(),
                        verdict: Verdict::Unknown,
                        checked_at_ms: None,
                        posture: None,
                    };
                }
                None => rules.shown_verdict(config, plan, state, &view.observations, site, now),
            };
            SiteVerdict {
                site: site.clone(),
                verdict: v.verdict,
                checked_at_ms: v.readings.iter().filter_map(|r| r.at.map(|a| a.0)).max(),
                posture: v.posture(),
            }
        })
        .collect()
}

/// The sentence with every `HH:MM:SS` replaced by `--:--:--`, to tell a new sentence from the
/// same one at a later time.
pub fn without_times(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let is_time = i + 8 <= b.len()
            && b[i..i + 8].iter().enumerate().all(|(j, c)| {
                if j == 2 || j == 5 {
                    *c == b':'
                } else {
                    c.is_ascii_digit()
                }
            });
        if is_time {
            out.push_str("--:--:--");
            i += 8;
        } else {
            let ch = s[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// A status to publish, and what its publication will be remembered as.
pub(super) struct ToPublish {
    pub(super) status: StatusDraft,
    pub(super) gist: String,
    pub(super) token: CancellationToken,
}

impl Engine {
    /// The plan's status (the leader's verdicts and sentence) if it is due for publication:
    /// it changed, or the last publication is old (see [`PUBLISH_DURING_TRANSITION`],
    /// [`PUBLISH_WHEN_STEADY`]). "Changed" reads the reason's gist ([`Reason::gist`]): a
    /// steady plan's sentence alternates between "checking health (N checks); ..." and
    /// "no action: ..." as its checks go out and come back, which is not news.
    pub(super) fn status_to_publish(
        &self,
        config: &EffectiveConfig,
        plan: &PlanId,
        term: qfence_model::Term,
        reason: &Reason,
        state: &PlanState,
    ) -> Option<(StatusDraft, String)> {
        let inner = &self.inner;
        let cfg = config.plan(plan.as_str())?;
        let now = inner.clock.now();
        // Read in place under the runtime lock (no copy of the plan's readings and results).
        let (sites, last_published) = {
            let all = inner.runtime();
            let empty = PlanRuntime::default();
            let view = all.get(plan).unwrap_or(&empty);
            let sites = site_verdicts(config, cfg, state, view, now);
            (sites, view.last_published.clone())
        };
        // The same verdicts, beside the same sentence, go to the metrics, with what cannot
        // work (a binding to a capability graded failed) before it is needed.
        let unworkable = inner.registered().unworkable(plan, cfg);
        inner.metrics.plan(
            plan.as_str(),
            crate::gauges::plan(state, &sites, &unworkable),
        );
        let gist = format!(
            "{term} {} {}",
            sites
                .iter()
                .map(|s| format!("{}={}", s.site, s.verdict.as_str()))
                .collect::<Vec<_>>()
                .join(","),
            without_times(&reason.gist())
        );
        let every = if state.transition().is_some() {
            PUBLISH_DURING_TRANSITION
        } else {
            PUBLISH_WHEN_STEADY
        };
        if let Some((last, at)) = &last_published
            && *last == gist
            && now.since(*at) < every
        {
            return None;
        }
        let status = StatusDraft {
            format: STATUS_FORMAT,
            plan: plan.clone(),
            sites,
            reason: reason.to_string(),
            at_unix_ms: now.0,
            by: inner.me.clone(),
        };
        Some((status, gist))
    }

    /// Publishes statuses into the replicated state, [`PUBLISH_BATCH`] to a write, so any
    /// orchestrator can answer a status request. A failed write is logged and retried on the
    /// next tick; it never stops the cycle.
    pub(super) async fn publish(&self, all: Vec<ToPublish>) {
        let inner = &self.inner;
        let writes = all.chunks(PUBLISH_BATCH).map(|batch| async move {
            let token = batch[0].token.clone();
            let statuses = batch.iter().map(|p| p.status.clone()).collect();
            // A leader that has lost its quorum must not hang its cycle on a view: the write
            // is bounded and dropped with the leadership.
            let write = inner
                .node
                .write(ClusterCommand::PublishStatuses { statuses });
            let outcome = tokio::select! {
                () = token.cancelled() => return,
                r = tokio::time::timeout(PUBLISH_TIMEOUT, write) => r,
            };
            let Ok(outcome) = outcome else {
                tracing::warn!(plans = batch.len(), "Publishing the plans' statuses timed out");
                return;
            };
            match outcome {
                Ok(Response::Applied) => {
                    let mut all = inner.runtime();
                    for p in batch {
                        if let Some(entry) = all.get_mut(&p.status.plan) {
                            entry.last_published =
                                Some((p.gist.clone(), Millis(p.status.at_unix_ms)));
                        }
                    }
                }
                Ok(other) => {
                    tracing::warn!(plans = batch.len(), "The cluster refused the plans' statuses: {other:?}");
                }
                Err(e) => {
                    tracing::warn!(plans = batch.len(), error = %e, "Could not publish the plans' statuses");
                }
            }
        });
        futures_util::future::join_all(writes).await;
    }
}
