//! Controller registration in the seed's four steps (`/controllers/new`, admin), and the
//! controllers list (`/controllers`) with a test button.
//!
//! 1. Type and connection (the fields of that type), site and reach.
//! 2. Credentials, as a reference to a secret: never a secret value.
//! 3. A connectivity test from a site allowed to call the controller
//!    ([`Backend::probe_controller`](crate::Backend)): identity, facts, warnings and the TLS
//!    certificate's fingerprint, which can be pinned.
//! 4. Each capability with its grade (a failed one is not advertised), then Register.
//!
//! One screen per step; everything typed travels along as hidden fields, so the server keeps
//! no draft and Back loses nothing. Each step validates the controller with the API's
//! validation ([`plan_api::check_controller`]) and shows the issues of the fields seen so far
//! next to them; an issue of an earlier step takes the user back to that step.

mod form;
mod list;
mod page;
#[cfg(test)]
mod tests;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use qfence_model::ControllerId;

use super::editor::{FieldIssues, forbidden};
use super::{FormSession, Session, page};
use crate::api::AppState;
use crate::backend::BackendError;
use form::{ControllerForm, looks_inline, place, validate, without_password};
use list::{list, test};
use page::{ProbeView, context, register_page};

/// The registration and list routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/controllers", get(list))
        .route("/controllers/new", get(start).post(step))
        .route("/controllers/{controller}/test", post(test))
}

/// The steps' titles.
pub(super) const STEPS: [&str; 4] = [
    "Type and connection",
    "Credentials",
    "Connectivity test",
    "Capabilities",
];

// ---- handlers ----

async fn start(session: Session, State(s): State<AppState>) -> Response {
    if !session.admin() {
        return forbidden(&session, "Registering a controller");
    }
    let ctx = match context(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    page(&register_page(
        &session,
        &ctx,
        &ControllerForm::default(),
        1,
        FieldIssues::default(),
        None,
        Vec::new(),
    ))
}

async fn step(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    axum::Form(fields): axum::Form<Vec<(String, String)>>,
) -> Response {
    if !session.admin() {
        return forbidden(&session, "Registering a controller");
    }
    let ctx = match context(&s, &session).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut form = ControllerForm::from_fields(&fields);
    let at: u8 = fields
        .iter()
        .find(|(k, _)| k == "step")
        .and_then(|(_, v)| v.parse().ok())
        .filter(|s| (1..=4).contains(s))
        .unwrap_or(1);
    // The pin box is a checkbox: absent when unticked at step 3.
    if at == 3 && !fields.iter().any(|(k, _)| k == "pin_fingerprint") {
        form.set("pin_fingerprint", "");
    }
    let action = fields
        .iter()
        .rev()
        .find(|(k, _)| k == "action")
        .map(|(_, v)| v.as_str())
        .unwrap_or("next");
    let show = |form: &ControllerForm,
                step: u8,
                issues: FieldIssues,
                probe: Option<ProbeView>,
                warnings: Vec<String>,
                status: StatusCode| {
        (
            status,
            page(&register_page(
                &session, &ctx, form, step, issues, probe, warnings,
            )),
        )
            .into_response()
    };
    // A secret that looks inline is never kept, not even in the page sent back; nor is a
    // password written into the endpoint (validation refuses it and says why).
    let inline = looks_inline(&form.get("secret"));
    if inline.is_some() {
        form.set("secret", "");
    }
    let had_password = match without_password(&form.get("endpoint")) {
        Some(clean) => {
            form.set("endpoint", clean);
            true
        }
        None => false,
    };
    let target = match action {
        // Step 3 is the test's result (and its pin box): back to it runs the test again.
        "back" if at == 4 => 3,
        "back" => {
            let to = at.saturating_sub(1).max(1);
            return show(
                &form,
                to,
                FieldIssues::default(),
                None,
                Vec::new(),
                StatusCode::OK,
            );
        }
        // Step 1 without the script: show the chosen type's fields.
        "refresh" => {
            return show(
                &form,
                at,
                FieldIssues::default(),
                None,
                Vec::new(),
                StatusCode::OK,
            );
        }
        "retest" => at,
        "register" => 5,
        _ => at + 1,
    };
    if let Some(why) = inline {
        let mut issues = FieldIssues::default();
        issues.add(Some("secret".into()), why);
        return show(
            &form,
            2,
            issues,
            None,
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
        );
    }
    if had_password {
        let (_, mut issues, _, _) = validate(&ctx, &form, at.min(4));
        issues.add(
            Some("endpoint".into()),
            "inline credentials are refused: the password written into the endpoint was \
             removed and not kept; name a secret at step 2",
        );
        return show(
            &form,
            1,
            issues,
            None,
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
        );
    }
    // Validate what was typed so far: the fields of the steps before the target.
    let upto = at.min(4);
    let (checked, issues, earliest, warnings) = validate(&ctx, &form, upto);
    if !issues.is_empty() {
        return show(
            &form,
            earliest.unwrap_or(at).min(at),
            issues,
            None,
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
        );
    }
    if target == 2 {
        return show(
            &form,
            2,
            FieldIssues::default(),
            None,
            Vec::new(),
            StatusCode::OK,
        );
    }
    let Some(checked) = checked else {
        // Every step's fields were checked above; this is a bug, said as one.
        let mut issues = FieldIssues::default();
        issues.add(
            None,
            "the controller did not validate, but no issue named a field",
        );
        return show(
            &form,
            1,
            issues,
            None,
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
        );
    };
    match target {
        3 | 4 => {
            // The test runs from a site allowed to call the controller; a failure is shown,
            // not a refusal: its steps say what went wrong.
            match s.backend.probe_controller(&session.caller, checked).await {
                Ok(t) => {
                    let probe = ProbeView::from(&t);
                    let before = form.get("probed_fingerprint");
                    let mut issues = FieldIssues::default();
                    let mut step = target;
                    if let Some(fp) = &probe.fingerprint {
                        // A pin is only ever the certificate the user saw: a different one
                        // than the last test's unticks the box and goes back to compare.
                        if form.pinned() && !before.is_empty() && before != *fp {
                            form.set("pin_fingerprint", "");
                            issues.add(
                                None,
                                format!(
                                    "the certificate changed since the last test (it was {before}, \
                                     it is {fp}): compare the new one with the device's before \
                                     pinning it"
                                ),
                            );
                            step = 3;
                        }
                        form.set("probed_fingerprint", fp.clone());
                    }
                    show(&form, step, issues, Some(probe), warnings, StatusCode::OK)
                }
                Err(e) => {
                    let mut issues = FieldIssues::default();
                    issues.add(None, format!("the connectivity test could not run: {e}"));
                    show(&form, 3, issues, None, warnings, status_of(&e))
                }
            }
        }
        _ => match s
            .backend
            .register_controller(&session.caller, checked)
            .await
        {
            Ok(v) => {
                // Registering records the controller, not the grades the user just saw: test
                // it once as registered (read-only, like step 4) so the list shows its grades.
                // A test that fails or hangs leaves the list saying "not tested".
                if let Ok(id) = ControllerId::new(v.name.as_str()) {
                    let t = s.backend.test_controller(&session.caller, &id);
                    match tokio::time::timeout(std::time::Duration::from_secs(15), t).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(controller = %v.name, error = %e, "The first test of a registered controller failed");
                        }
                        Err(_) => {
                            tracing::warn!(controller = %v.name, "The first test of a registered controller did not finish in 15 s");
                        }
                    }
                }
                Redirect::to(&format!("/controllers?registered={}", v.name)).into_response()
            }
            Err(e) => {
                let mut issues = FieldIssues::default();
                let status = status_of(&e);
                let back = match &e {
                    BackendError::Conflict(m) => {
                        issues.add(Some("name".into()), m.clone());
                        1
                    }
                    BackendError::Invalid {
                        message,
                        issues: found,
                    } => {
                        issues.add(None, message.clone());
                        let name = form.get("name");
                        place(&mut issues, found, &name, 4).unwrap_or(4)
                    }
                    _ => {
                        issues.add(
                            None,
                            format!("{e}; nothing was registered, everything typed is kept"),
                        );
                        4
                    }
                };
                show(&form, back, issues, None, warnings, status)
            }
        },
    }
}

fn status_of(e: &BackendError) -> StatusCode {
    match e {
        BackendError::NotFound { .. } => StatusCode::NOT_FOUND,
        BackendError::StaleGeneration { .. }
        | BackendError::Conflict(_)
        | BackendError::Refused(_)
        | BackendError::CapabilityFailed { .. }
        | BackendError::BindingCheckFailed { .. } => StatusCode::CONFLICT,
        BackendError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        BackendError::NotLeader { .. } | BackendError::Unavailable(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}
