//! A plan's records from the backend's event log, and its moves' timeline from them: what the
//! API's `/api/v1/plans/{plan}/timeline` answers and the console's plan page draws and lists.

use qfence_runtime::backend::{Backend, BackendError};
use qfence_runtime::events::{Event, EventQuery, MAX_PAGE};
use qfence_runtime::timeline::{PlanTimeline, timeline};

/// How far back in the event log a plan's records are read, in records (of every plan).
pub(crate) const WINDOW: u64 = 20_000;

/// The plan's records among the log's last [`WINDOW`], oldest first.
pub(crate) async fn of_plan(backend: &dyn Backend, plan: &str) -> Result<Vec<Event>, BackendError> {
    let head = backend
        .events(&EventQuery {
            after: None,
            limit: Some(1),
            kind: None,
            plan: None,
            site: None,
        })
        .await?
        .head_seq;
    let mut records = Vec::new();
    let mut after = Some(head.saturating_sub(WINDOW)).filter(|a| *a > 0);
    // The log is paged, oldest first: read the window to its end (bounded).
    for _ in 0..(WINDOW / u64::from(MAX_PAGE) + 1) {
        let page = backend
            .events(&EventQuery {
                after,
                limit: Some(MAX_PAGE),
                kind: None,
                plan: Some(plan.to_owned()),
                site: None,
            })
            .await?;
        records.extend(page.events);
        match page.next_after {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    Ok(records)
}

/// The plan's moves, from its records among the log's last [`WINDOW`].
pub(crate) async fn plan_timeline(
    backend: &dyn Backend,
    plan: &str,
) -> Result<PlanTimeline, BackendError> {
    Ok(timeline(plan, &of_plan(backend, plan).await?))
}
