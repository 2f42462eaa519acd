//! The read-only views: the status (the leader's own, a follower's from what the leader
//! published), secret references, the event log and the orchestrators.

use super::*;

pub(super) async fn status(b: &RuntimeBackend) -> Result<StatusResponse, BackendError> {
    let leader = b.leader_info().await;
    let now = b.inner.clock.now();
    // A follower reads nothing itself: it shows what the leader last published.
    let published = (!leader.is_self).then(|| b.inner.node.read(|s| s.statuses.clone()));
    let mut plans = Vec::new();
    let config = b.cfg();
    let registered = b.inner.registered();
    for (id, cfg) in config.plans() {
        let state = b.state(id)?;
        let (verdicts, last_reason) = match &published {
            None => {
                let view = b.inner.runtime().get(id).cloned().unwrap_or_default();
                let verdicts = site_verdicts(&config, cfg, &state, &view, now);
                (verdicts, view.last_reason.unwrap_or_default())
            }
            Some(all) => match all.get(id) {
                Some(p) => (p.status.sites.clone(), follower_reason(p, leader.term)),
                None => (
                    cfg.sites()
                        .map(|site| SiteVerdict {
                            site: site.clone(),
                            verdict: Verdict::Unknown,
                            checked_at_ms: None,
                            posture: None,
                        })
                        .collect(),
                    format!(
                        "no status published by a leader yet (this is {}, a follower in term {})",
                        b.inner.me, leader.term
                    ),
                ),
            },
        };
        let sites = cfg
            .sites()
            .map(|site| {
                let v = verdicts.iter().find(|v| v.site == *site);
                SiteStatus {
                    site: site.to_string(),
                    role: if *site == state.owner {
                        SiteRole::Owner
                    } else {
                        SiteRole::Standby
                    },
                    // A site the record does not name was not seen: UNKNOWN, never FENCED.
                    verdict: v.map_or(Verdict::Unknown, |v| v.verdict).into(),
                    checked_at_ms: v.and_then(|v| v.checked_at_ms),
                    posture: v.and_then(|v| v.posture.clone()),
                    maintenance: state.in_maintenance(site),
                }
            })
            .collect();
        plans.push(PlanStatus {
            plan: id.to_string(),
            owner: state.owner.to_string(),
            generation: state.generation.0,
            paused: state.paused,
            phase: phase_name(&state),
            halted: state.transition().and_then(|t| t.halted.clone()),
            last_reason,
            sites,
            unworkable: registered.unworkable(id, cfg),
        });
    }
    Ok(StatusResponse { leader, plans })
}

pub(super) async fn secrets(b: &RuntimeBackend) -> Result<Vec<SecretRefView>, BackendError> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, c) in &b.cfg().config().controllers {
        if let Some(s) = &c.secret {
            by.entry(s.as_str().to_owned())
                .or_default()
                .push(id.to_string());
        }
    }
    Ok(by
        .into_iter()
        .map(|(name, used_by)| SecretRefView { name, used_by })
        .collect())
}

pub(super) async fn events(
    b: &RuntimeBackend,
    query: &EventQuery,
) -> Result<EventPage, BackendError> {
    Ok(b.inner
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .query(query))
}

pub(super) async fn orchestrators(
    b: &RuntimeBackend,
) -> Result<Vec<OrchestratorView>, BackendError> {
    let status = b.inner.node.status();
    Ok(status
        .members
        .into_iter()
        .map(|m| OrchestratorView {
            leader: status.leader.as_ref() == Some(&m.name),
            name: m.name.to_string(),
            site: m.site.to_string(),
            address: m.address,
            reachable: m.live.unwrap_or(m.name == status.name),
            last_seen_ms: None,
        })
        .collect())
}
