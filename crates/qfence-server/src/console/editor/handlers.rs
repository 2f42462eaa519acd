//! The editor's handlers: the new and edit forms, create, and save (stage and apply).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use qfence_model::PlanId;
use qfence_model::config::plan_api;
use serde::Deserialize;
use serde_json::json;

use crate::api::AppState;
use crate::console::{FormSession, Session, page};
use qfence_runtime::backend::{BackendError, CheckedPlan};

use super::form::*;
use super::view::*;
use super::*;

// ---- handlers ----

pub(super) async fn new_form(session: Session, State(s): State<AppState>) -> Response {
    if !session.admin() {
        return forbidden(&session, "Creating a plan");
    }
    let ch = match choices(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let form = PlanForm::from_spec("", &json!({}), &ch.sites);
    page(&editor_page(
        &session,
        None,
        &form,
        &ch,
        None,
        FieldIssues::default(),
    ))
}

#[derive(Debug, Deserialize)]
pub(super) struct EditQuery {
    /// `1`: load the staged change rather than the plan in force.
    staged: Option<String>,
}

pub(super) async fn edit_form(
    session: Session,
    State(s): State<AppState>,
    Path(plan): Path<String>,
    Query(q): Query<EditQuery>,
) -> Response {
    let id = match editable_plan(&session, &plan) {
        Ok(id) => id,
        Err(r) => return *r,
    };
    let view = match s.backend.plan(&id).await {
        Ok(v) => v,
        Err(e) => return crate::console::error_page(Some(&session), &e),
    };
    if view.source == qfence_runtime::dto::PlanSource::File {
        return crate::console::error_page(
            Some(&session),
            &BackendError::Conflict(format!(
                "plan {plan} comes from the configuration file: change it there (the console and \
                 the API change only the plans created through them)"
            )),
        );
    }
    let ch = match choices(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let use_staged = q.staged.as_deref() == Some("1") && view.staged.is_some();
    let spec = match (&view.staged, use_staged) {
        (Some(st), true) => &st.spec,
        _ => &view.spec,
    };
    // Saving replaces the plan with what the form holds: a spec the form cannot hold whole
    // (not in the file's shape) is refused here rather than shown with parts missing.
    let unknown = match spec.as_object() {
        Some(m) => unplaceable(m),
        None => vec!["the whole plan (not a mapping)".to_owned()],
    };
    if !unknown.is_empty() {
        return crate::console::error_page(
            Some(&session),
            &BackendError::Conflict(format!(
                "the backend returned plan {plan} in a shape the editor cannot hold whole (no \
                 place for {}); editing it here could drop parts of it, so the editor refuses. \
                 Change it in the configuration file, or through the API",
                unknown.join(", ")
            )),
        );
    }
    let form = PlanForm::from_spec(&plan, spec, &ch.sites);
    let mut p = editor_page(
        &session,
        Some(&plan),
        &form,
        &ch,
        Some(view.generation),
        FieldIssues::default(),
    );
    p.staged_note = view.staged.as_ref().map(|st| {
        if use_staged {
            format!(
                "Showing the change {} staged on generation {}. Saving stages this form and applies it.",
                st.staged_by, st.base_generation
            )
        } else {
            format!(
                "{} staged a change on generation {}; saving here replaces it.",
                st.staged_by, st.base_generation
            )
        }
    });
    page(&p)
}

type Fields = axum::Form<Vec<(String, String)>>;

pub(super) async fn create(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    axum::Form(fields): Fields,
) -> Response {
    if !session.admin() {
        return forbidden(&session, "Creating a plan");
    }
    let ch = match choices(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (mut form, action) = PlanForm::from_fields(&fields, &ch.sites);
    let mut loaded = FieldIssues::default();
    if action == Action::LoadRaw {
        load_raw(&mut form, &ch.sites, &mut loaded);
    }
    let show = |issues: FieldIssues, status: StatusCode| {
        let p = editor_page(&session, None, &form, &ch, None, issues);
        (status, page(&p)).into_response()
    };
    if matches!(
        action,
        Action::Refresh | Action::Remove(..) | Action::Add(_) | Action::LoadRaw
    ) {
        let status = if loaded.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        return show(loaded, status);
    }
    let (spec, mut issues) = form.to_spec();
    // A bad name is reported with the plan's other issues, found under a stand-in name.
    let (checked_name, id) = match PlanId::new(form.name.as_str()) {
        Ok(id) => (form.name.clone(), Some(id)),
        Err(e) => {
            let m = if form.name.is_empty() {
                "missing: the plan needs a name".to_owned()
            } else {
                format!("{:?} is not a plan name: {e}", form.name)
            };
            issues.add(Some("name".into()), m);
            ("new-plan".to_owned(), None)
        }
    };
    let base = match s.backend.config_source().await {
        Ok(b) => b,
        Err(e) => return crate::console::error_page(Some(&session), &e),
    };
    let checked = match plan_api::check_plan(&base, &checked_name, &spec) {
        Ok(c) => Some(c),
        Err(found) => {
            place_issues(&mut issues, &found, &checked_name);
            None
        }
    };
    let (Some(checked), Some(id), true) = (checked, id, issues.is_empty()) else {
        return show(issues, StatusCode::UNPROCESSABLE_ENTITY);
    };
    let plan = CheckedPlan {
        name: id.clone(),
        spec,
        config: checked.value,
        warnings: checked.warnings,
    };
    match s.backend.create_plan(&session.caller, plan).await {
        Ok(_) => Redirect::to(&format!("/plans/{}", id.as_str())).into_response(),
        Err(e) => {
            let mut issues = FieldIssues::default();
            let status = backend_issue(&mut issues, &e, &checked_name, Some("name"));
            show(issues, status)
        }
    }
}

/// Puts a backend refusal on the form: validation issues on their fields, a taken name on
/// `name_field`, anything else at the top. Returns the page's status.
pub(super) fn backend_issue(
    issues: &mut FieldIssues,
    e: &BackendError,
    plan: &str,
    name_field: Option<&str>,
) -> StatusCode {
    match e {
        BackendError::Invalid {
            message,
            issues: found,
        } => {
            issues.add(None, message.clone());
            place_issues(issues, found, plan);
            StatusCode::UNPROCESSABLE_ENTITY
        }
        // What registration found: a capability that cannot work, a resource the controller
        // does not have; each on the binding's field.
        BackendError::CapabilityFailed {
            message,
            issues: found,
        }
        | BackendError::BindingCheckFailed {
            message,
            issues: found,
        } => {
            issues.add(None, message.clone());
            place_issues(issues, found, plan);
            StatusCode::CONFLICT
        }
        BackendError::Conflict(m) => {
            issues.add(name_field.map(str::to_owned), m.clone());
            StatusCode::CONFLICT
        }
        BackendError::StaleGeneration { .. } | BackendError::Refused(_) => {
            issues.add(None, e.to_string());
            StatusCode::CONFLICT
        }
        BackendError::NotFound { .. } => {
            issues.add(None, e.to_string());
            StatusCode::NOT_FOUND
        }
        BackendError::NotLeader { .. } | BackendError::Unavailable(_) => {
            issues.add(
                None,
                format!("{e}; nothing was saved, your text is kept: try again"),
            );
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

pub(super) async fn save(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    Path(plan): Path<String>,
    axum::Form(fields): Fields,
) -> Response {
    let id = match editable_plan(&session, &plan) {
        Ok(id) => id,
        Err(r) => return *r,
    };
    let ch = match choices(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (mut form, action) = PlanForm::from_fields(&fields, &ch.sites);
    form.name = plan.clone();
    let mut loaded = FieldIssues::default();
    if action == Action::LoadRaw {
        load_raw(&mut form, &ch.sites, &mut loaded);
    }
    let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    // "Apply mine over generation N" after a stale save sends N here.
    let expected = field("override_generation")
        .or(field("expected_generation"))
        .and_then(|v| v.trim().parse::<u64>().ok());
    let show = |issues: FieldIssues, status: StatusCode, stale: Option<u64>| {
        let mut p = editor_page(&session, Some(&plan), &form, &ch, expected, issues);
        p.stale = stale;
        if let Some(cur) = stale {
            p.banner = Some(format!(
                "Plan {plan} changed while you edited it: it is at generation {cur}, your edit \
                 started from generation {}. Nothing was saved; your text is kept below.",
                expected.map_or("?".into(), |e| e.to_string())
            ));
        }
        (status, page(&p)).into_response()
    };
    if matches!(
        action,
        Action::Refresh | Action::Remove(..) | Action::Add(_) | Action::LoadRaw
    ) {
        let status = if loaded.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        return show(loaded, status, None);
    }
    let Some(expected) = expected else {
        let mut issues = FieldIssues::default();
        issues.add(
            None,
            "the form carries no expected generation; reload the plan and edit it again",
        );
        return show(issues, StatusCode::UNPROCESSABLE_ENTITY, None);
    };
    let (spec, mut issues) = form.to_spec();
    let base = match s.backend.config_source().await {
        Ok(b) => b,
        Err(e) => return crate::console::error_page(Some(&session), &e),
    };
    let checked = match plan_api::check_plan(&base, &plan, &spec) {
        Ok(c) => Some(c),
        Err(found) => {
            place_issues(&mut issues, &found, &plan);
            None
        }
    };
    let (Some(checked), true) = (checked, issues.is_empty()) else {
        return show(issues, StatusCode::UNPROCESSABLE_ENTITY, None);
    };
    // Refuse a stale edit before staging it: staging replaces what is staged, and an edit of
    // an older generation must not.
    match s.backend.plan(&id).await {
        Ok(v) if v.generation != expected => {
            return show(
                FieldIssues::default(),
                StatusCode::CONFLICT,
                Some(v.generation),
            );
        }
        Ok(_) => {}
        Err(e) => return crate::console::error_page(Some(&session), &e),
    }
    let staged = CheckedPlan {
        name: id.clone(),
        spec,
        config: checked.value,
        warnings: checked.warnings,
    };
    if let Err(e) = s.backend.stage_plan(&session.caller, staged).await {
        let mut issues = FieldIssues::default();
        let status = backend_issue(&mut issues, &e, &plan, None);
        return show(issues, status, None);
    }
    if action == Action::Stage {
        return Redirect::to(&format!("/plans/{plan}")).into_response();
    }
    match s.backend.apply_staged(&session.caller, &id, expected).await {
        Ok(_) => Redirect::to(&format!("/plans/{plan}")).into_response(),
        Err(BackendError::StaleGeneration { current, .. }) => {
            // Lost a race after staging: take back what this form staged, so nothing half-done
            // stays behind.
            if let Err(e) = s.backend.discard_staged(&session.caller, &id).await {
                tracing::warn!(plan = %plan, error = %e, "Could not discard a change staged by a stale edit");
            }
            show(FieldIssues::default(), StatusCode::CONFLICT, Some(current))
        }
        Err(e) => {
            let mut issues = FieldIssues::default();
            let status = backend_issue(&mut issues, &e, &plan, None);
            show(issues, status, None)
        }
    }
}
