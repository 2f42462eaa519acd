//! Server-sent events for the live parts of the overview, a plan's page and the Instance HA
//! page.
//!
//! Each stream polls the backend once a second and sends the part of the page that changed,
//! rendered by the same template as the page (`overview_rows.html`; a plan's status, actions,
//! timeline and history; `instance_ha_clouds.html`), as an event named after the element it
//! replaces; `console.js` swaps it in. A plan's actions are rendered by the same rules as at the first render
//! (`PlanAction::offer`), so its forms carry the generation the operator sees. Polling the
//! backend's status keeps one source of truth: what the API's `/status` answers is what the
//! console shows. A stream ends when the server shuts down (the API's shutdown token) or the
//! session's token is withdrawn; the browser's `EventSource` reconnects by itself.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;

use super::instance_ha::{self, CloudsPart};
use super::overview::{OverviewQuery, OverviewRows, page_number};
use super::plans::PlanLive;
use super::{SESSION_COOKIE, Session, cookie};
use crate::api::AppState;

/// How often a stream looks for changes.
pub(crate) const POLL: Duration = Duration::from_secs(1);

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/live/overview", get(overview))
        .route("/live/plans/{plan}", get(plan))
        .route("/live/instance-ha", get(instance_ha))
}

/// What a stream renders each poll: the element ids it replaces and their HTML, or an error
/// to show in the live indicator.
type Render = std::pin::Pin<
    Box<dyn Future<Output = Result<Vec<(&'static str, String)>, String>> + Send + 'static>,
>;

fn stream(
    s: AppState,
    token: String,
    render: impl Fn(AppState) -> Render + Send + 'static,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let stop = s.live_stop.clone();
    // State: what each target last showed, events rendered but not sent yet, first poll.
    type Last = HashMap<&'static str, String>;
    let init: (AppState, String, _, Last, VecDeque<Event>, bool) =
        (s, token, render, Last::new(), VecDeque::new(), true);
    futures_util::stream::unfold(
        init,
        move |(s, token, render, mut last, mut queue, mut first)| {
            let stop = stop.clone();
            async move {
                loop {
                    if let Some(ev) = queue.pop_front() {
                        return Some((Ok(ev), (s, token, render, last, queue, first)));
                    }
                    if !first {
                        tokio::select! {
                            () = stop.cancelled() => return None,
                            () = tokio::time::sleep(POLL) => {}
                        }
                    }
                    first = false;
                    // A withdrawn token ends the stream (the page's next load signs in again).
                    s.tokens.authenticate(&token)?;
                    let parts = match render(s.clone()).await {
                        Ok(parts) => parts,
                        Err(message) => vec![("live-error", message)],
                    };
                    for (target, html) in parts {
                        // Only what changed is sent.
                        if last.get(target) != Some(&html) {
                            queue.push_back(Event::default().event(target).data(html.clone()));
                            last.insert(target, html);
                        }
                    }
                }
            }
        },
    )
}

fn sse(
    s: AppState,
    token: String,
    render: impl Fn(AppState) -> Render + Send + 'static,
) -> Response {
    Sse::new(stream(s, token, render))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The session's token (the extractor checked it already).
fn token(parts: &axum::http::HeaderMap) -> String {
    cookie(parts, SESSION_COOKIE).unwrap_or_default()
}

async fn overview(
    _session: Session,
    headers: axum::http::HeaderMap,
    State(s): State<AppState>,
    Query(q): Query<OverviewQuery>,
) -> Response {
    // The page's own filters and page: the part follows what the page shows.
    let page = page_number(&q).unwrap_or(1);
    sse(s, token(&headers), move |s| {
        let q = q.clone();
        Box::pin(async move {
            let status = s.backend.status().await.map_err(|e| e.to_string())?;
            let html = OverviewRows::new(status, &q, page)
                .render()
                .map_err(|e| format!("rendering failed: {e}"))?;
            Ok(vec![("overview-body", html)])
        })
    })
}

async fn plan(
    session: Session,
    headers: axum::http::HeaderMap,
    State(s): State<AppState>,
    Path(plan): Path<String>,
) -> Response {
    // The actions part is the caller's: forms for an operator, a hint for a viewer.
    let operator = session.operator();
    sse(s, token(&headers), move |s| {
        let plan = plan.clone();
        Box::pin(async move {
            let live = PlanLive::load(&s, &plan, operator)
                .await
                .map_err(|e| e.to_string())?;
            live.render_parts()
                .map_err(|e| format!("rendering failed: {e}"))
        })
    })
}

async fn instance_ha(
    _session: Session,
    headers: axum::http::HeaderMap,
    State(s): State<AppState>,
) -> Response {
    sse(s, token(&headers), |s| {
        Box::pin(async move {
            let html = CloudsPart::load(&s).await.map_err(|e| e.to_string())?;
            Ok(vec![(instance_ha::PART, html)])
        })
    })
}
