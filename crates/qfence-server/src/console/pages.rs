//! The event log, paged and filtered, and the orchestrators of the cluster.

use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::{Session, encode, error_page, fmt_ms, page};
use crate::api::AppState;
use qfence_runtime::auth::Caller;
use qfence_runtime::dto::OrchestratorView;
use qfence_runtime::events::{DEFAULT_PAGE, EventKind, EventPage, EventQuery, MAX_PAGE};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/events", get(events))
        .route("/orchestrators", get(orchestrators))
}

const KINDS: [EventKind; 7] = [
    EventKind::Decision,
    EventKind::Command,
    EventKind::Result,
    EventKind::Operator,
    EventKind::Alarm,
    EventKind::Config,
    EventKind::Leadership,
];

/// The filter form, as typed: kept whole, so a rejected value is shown back with its error.
#[derive(Debug, Clone, Default, Deserialize)]
struct EventsForm {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    plan: String,
    #[serde(default)]
    site: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    limit: String,
}

/// An event as a row.
#[derive(Debug, Clone)]
struct Row {
    seq: u64,
    time: String,
    kind: &'static str,
    plan: String,
    site: String,
    generation: String,
    actor: String,
    message: String,
}

#[derive(Template)]
#[template(path = "console/events.html")]
struct EventsPage {
    who: Option<Caller>,
    title: String,
    form: EventsForm,
    kinds: Vec<&'static str>,
    /// Problems with the filter: (field, message).
    errors: Vec<(String, String)>,
    rows: Vec<Row>,
    page: Option<EventPage>,
    /// Links: the next page, and the log's newest records.
    next: Option<String>,
    newest: Option<String>,
    first: String,
}

impl EventsPage {
    fn error_for(&self, field: &str) -> Option<String> {
        self.errors
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, m)| m.clone())
    }
}

/// The query string for the filters with `after`.
fn link(f: &EventsForm, after: Option<u64>) -> String {
    let mut parts = Vec::new();
    for (k, v) in [
        ("kind", &f.kind),
        ("plan", &f.plan),
        ("site", &f.site),
        ("limit", &f.limit),
    ] {
        if !v.is_empty() {
            parts.push(format!("{k}={}", encode(v)));
        }
    }
    if let Some(a) = after {
        parts.push(format!("after={a}"));
    }
    format!("/events?{}", parts.join("&"))
}

async fn events(
    session: Session,
    State(s): State<AppState>,
    Query(form): Query<EventsForm>,
) -> Response {
    let mut errors = Vec::new();
    let kind = match form.kind.as_str() {
        "" => None,
        k => match KINDS.iter().find(|x| x.as_str() == k) {
            Some(x) => Some(*x),
            None => {
                errors.push((
                    "kind".to_owned(),
                    format!(
                        "{k:?} is not a kind of record: {}",
                        KINDS.map(EventKind::as_str).join(", ")
                    ),
                ));
                None
            }
        },
    };
    let number = |field: &str, v: &str, errors: &mut Vec<(String, String)>| -> Option<u64> {
        if v.trim().is_empty() {
            return None;
        }
        match v.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.push((field.to_owned(), format!("{v:?} is not a whole number")));
                None
            }
        }
    };
    let after = number("after", &form.after, &mut errors);
    let limit = number("limit", &form.limit, &mut errors);
    if let Some(l) = limit
        && !(1..=u64::from(MAX_PAGE)).contains(&l)
    {
        errors.push((
            "limit".to_owned(),
            format!("{l} records per page is out of range: 1 to {MAX_PAGE}"),
        ));
    }
    let trimmed = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
    let mut t = EventsPage {
        who: Some(session.caller.clone()),
        title: "Events".into(),
        form: form.clone(),
        kinds: KINDS.iter().map(|k| k.as_str()).collect(),
        errors,
        rows: Vec::new(),
        page: None,
        next: None,
        newest: None,
        first: link(&form, None),
    };
    if !t.errors.is_empty() {
        return (StatusCode::UNPROCESSABLE_ENTITY, page(&t)).into_response();
    }
    let limit = limit.map(|l| l as u32).unwrap_or(DEFAULT_PAGE);
    let q = EventQuery {
        after,
        limit: Some(limit),
        kind,
        plan: trimmed(&form.plan),
        site: trimmed(&form.site),
    };
    let p = match s.backend.events(&q).await {
        Ok(p) => p,
        Err(e) => return error_page(Some(&session), &e),
    };
    t.rows = p
        .events
        .iter()
        .map(|e| Row {
            seq: e.seq,
            time: fmt_ms(e.time_ms),
            kind: e.kind.as_str(),
            plan: e.plan.clone().unwrap_or_default(),
            site: e.site.clone().unwrap_or_default(),
            generation: e.generation.map(|g| g.to_string()).unwrap_or_default(),
            actor: e.actor.clone(),
            message: e.message.clone(),
        })
        .collect();
    t.next = p.next_after.map(|n| link(&form, Some(n)));
    // The newest records: the page that ends at the log's head (unfiltered, exact; filtered,
    // the records of that stretch of the log that match).
    t.newest = Some(link(
        &form,
        Some(p.head_seq.saturating_sub(u64::from(limit))),
    ));
    t.page = Some(p);
    page(&t)
}

#[derive(Template)]
#[template(path = "console/orchestrators.html")]
struct OrchestratorsPage {
    who: Option<Caller>,
    title: String,
    list: Vec<OrchestratorView>,
}

impl OrchestratorsPage {
    fn seen(&self, o: &OrchestratorView) -> String {
        o.last_seen_ms.map(fmt_ms).unwrap_or_else(|| "never".into())
    }
}

async fn orchestrators(session: Session, State(s): State<AppState>) -> Response {
    match s.backend.orchestrators().await {
        Ok(list) => page(&OrchestratorsPage {
            who: Some(session.caller),
            title: "Orchestrators".into(),
            list,
        }),
        Err(e) => error_page(Some(&session), &e),
    }
}
