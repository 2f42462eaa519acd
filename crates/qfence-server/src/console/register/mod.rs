//! Controller registration in the seed's four steps (`/controllers/new`, admin), and the
//! controllers list (`/controllers`) with a test button.
//!
//! 1. Type and connection (the fields of that type), site and reach.
//! 2. Credentials, as a reference to a secret: never a secret value.
//! 3. A connectivity test from a site allowed to call the controller
//!    ([`Backend::probe_controller`](qfence_runtime::Backend)): identity, facts, warnings and the TLS
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
use form::{ControllerForm, looks_inline, place, validate, without_password};
use list::{list, test};
use page::{Context, ProbeView, context, register_page};
use qfence_runtime::backend::{BackendError, CheckedController};

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

/// The page of a step, drawn for one request: the session and the configuration's context.
struct Screen<'a> {
    session: &'a Session,
    ctx: &'a Context,
}

impl Screen<'_> {
    /// Step `step` of `form` with `status`.
    fn show(
        &self,
        form: &ControllerForm,
        step: u8,
        issues: FieldIssues,
        probe: Option<ProbeView>,
        warnings: Vec<String>,
        status: StatusCode,
    ) -> Response {
        (
            status,
            page(&register_page(
                self.session,
                self.ctx,
                form,
                step,
                issues,
                probe,
                warnings,
            )),
        )
            .into_response()
    }

    /// Step `step` of `form`, nothing to say.
    fn plain(&self, form: &ControllerForm, step: u8) -> Response {
        self.show(
            form,
            step,
            FieldIssues::default(),
            None,
            Vec::new(),
            StatusCode::OK,
        )
    }

    /// Step `step` of `form` with the `issues` that stopped it.
    fn refused(&self, form: &ControllerForm, step: u8, issues: FieldIssues) -> Response {
        self.show(
            form,
            step,
            issues,
            None,
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
    }
}

/// What a posted step says: the form, the step it was posted from (1 to 4) and the action
/// (`next` unless a button said otherwise).
fn posted(fields: &[(String, String)]) -> (ControllerForm, u8, &str) {
    let mut form = ControllerForm::from_fields(fields);
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
    (form, at, action)
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
    let screen = Screen {
        session: &session,
        ctx: &ctx,
    };
    let (mut form, at, action) = posted(&fields);
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
        "back" => return screen.plain(&form, at.saturating_sub(1).max(1)),
        // Step 1 without the script: show the chosen type's fields.
        "refresh" => return screen.plain(&form, at),
        "retest" => at,
        "register" => 5,
        _ => at + 1,
    };
    if let Some(why) = inline {
        let mut issues = FieldIssues::default();
        issues.add(Some("secret".into()), why);
        return screen.refused(&form, 2, issues);
    }
    if had_password {
        let (_, mut issues, _, _) = validate(&ctx, &form, at.min(4));
        issues.add(
            Some("endpoint".into()),
            "inline credentials are refused: the password written into the endpoint was \
             removed and not kept; name a secret at step 2",
        );
        return screen.refused(&form, 1, issues);
    }
    // Validate what was typed so far: the fields of the steps before the target.
    let upto = at.min(4);
    let (checked, issues, earliest, warnings) = validate(&ctx, &form, upto);
    if !issues.is_empty() {
        return screen.refused(&form, earliest.unwrap_or(at).min(at), issues);
    }
    if target == 2 {
        return screen.plain(&form, 2);
    }
    let Some(checked) = checked else {
        // Every step's fields were checked above; this is a bug, said as one.
        let mut issues = FieldIssues::default();
        issues.add(
            None,
            "the controller did not validate, but no issue named a field",
        );
        return screen.refused(&form, 1, issues);
    };
    match target {
        3 | 4 => probe_step(&s, &screen, form, checked, target, warnings).await,
        _ => register_step(&s, &screen, &form, checked, warnings).await,
    }
}

/// Steps 3 and 4: the connectivity test runs from a site allowed to call the controller; a
/// failure is shown, not a refusal: its steps say what went wrong.
async fn probe_step(
    s: &AppState,
    screen: &Screen<'_>,
    mut form: ControllerForm,
    checked: CheckedController,
    target: u8,
    warnings: Vec<String>,
) -> Response {
    match s
        .backend
        .probe_controller(&screen.session.caller, checked)
        .await
    {
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
            screen.show(&form, step, issues, Some(probe), warnings, StatusCode::OK)
        }
        Err(e) => {
            let mut issues = FieldIssues::default();
            issues.add(None, format!("the connectivity test could not run: {e}"));
            screen.show(&form, 3, issues, None, warnings, status_of(&e))
        }
    }
}

/// Register: the controller is recorded, then tested once as registered; a refusal goes back
/// to the step its issue names, everything typed kept.
async fn register_step(
    s: &AppState,
    screen: &Screen<'_>,
    form: &ControllerForm,
    checked: CheckedController,
    warnings: Vec<String>,
) -> Response {
    let session = screen.session;
    match s
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
            screen.show(form, back, issues, None, warnings, status)
        }
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
