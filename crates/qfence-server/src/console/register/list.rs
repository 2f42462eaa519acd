//! The controllers list and its test button.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use qfence_model::ControllerId;
use serde::Deserialize;

use super::page::{GradeView, ProbeView, grades};
use crate::api::AppState;
use crate::console::editor::forbidden;
use crate::console::{FormSession, Session, page};
use qfence_runtime::backend::BackendError;
use qfence_runtime::dto::ControllerView;

/// A controller's row.
#[derive(Debug, Clone)]
pub(super) struct ControllerRow {
    pub view: ControllerView,
    pub grades: Vec<GradeView>,
    pub tested: String,
}

#[derive(Template)]
#[template(path = "console/register_list.html")]
pub(super) struct ListPage {
    pub who: Option<qfence_runtime::auth::Caller>,
    pub title: String,
    pub admin: bool,
    pub rows: Vec<ControllerRow>,
    pub registered: Option<String>,
}

#[derive(Template)]
#[template(path = "console/register_test.html")]
pub(super) struct TestPage {
    pub who: Option<qfence_runtime::auth::Caller>,
    pub title: String,
    pub controller: String,
    pub probe: ProbeView,
}

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    registered: Option<String>,
}

pub(super) async fn list(
    session: Session,
    State(s): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Response {
    match s.backend.controllers().await {
        Ok(list) => page(&ListPage {
            who: Some(session.caller.clone()),
            title: "Controllers".into(),
            admin: session.admin(),
            rows: list
                .into_iter()
                .map(|v| ControllerRow {
                    grades: grades(&v.grades),
                    tested: v.tested_at_ms.map_or("never".into(), |ms| utc(ms / 1000)),
                    view: v,
                })
                .collect(),
            registered: q.registered,
        }),
        Err(e) => crate::console::error_page(Some(&session), &e),
    }
}

pub(super) async fn test(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Response {
    if !session.admin() {
        return forbidden(&session, "Testing a controller");
    }
    let Ok(id) = ControllerId::new(name.as_str()) else {
        return crate::console::error_page(
            Some(&session),
            &BackendError::NotFound {
                what: "controller",
                name,
            },
        );
    };
    match s.backend.test_controller(&session.caller, &id).await {
        Ok(t) => page(&TestPage {
            who: Some(session.caller.clone()),
            title: format!("Test of {name}"),
            controller: name,
            probe: ProbeView::from(&t),
        }),
        Err(e) => crate::console::error_page(Some(&session), &e),
    }
}

/// Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub(super) fn utc(epoch: u64) -> String {
    format!(
        "{} UTC",
        qfence_model::time::utc(epoch.saturating_mul(1000))
    )
}
