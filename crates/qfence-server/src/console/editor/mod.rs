//! The plan editor: `/plans/new` and `/plans/{plan}/edit` (admin).
//!
//! The form is the plan's structure (owner, priority, timings, each site's bindings, the
//! service bindings), posted as flat fields (`b:dc1:2:capability`), so it works without
//! JavaScript. The server is the authority: it rebuilds the plan as the configuration file
//! writes it under `plans.NAME`, validates it with the API's validation
//! ([`plan_api::check_plan`] against [`Backend::config_source`](qfence_runtime::Backend)), and shows
//! each issue next to the field its path names, with every value the user typed kept.
//!
//! A small script (`/console-forms.js`) narrows the choices in the browser from data the page
//! embeds as JSON: a controller offers only its type's capabilities, a capability only the
//! roles it may take, and the resource field offers what the controller discovered. Without
//! the script the same narrowing happens on the server when the form is refreshed.
//!
//! Editing stages the change and applies it with the generation the form was loaded at
//! (compare-and-set): a plan that moved on meanwhile is shown as stale, with its current
//! generation and the user's text kept.

mod form;
mod handlers;
#[cfg(test)]
mod tests;
mod view;

use std::collections::BTreeMap;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use qfence_model::PlanId;
use qfence_model::config::{Issue, ValidatedConfig, load_str};
use serde_json::Value;

use super::{ErrorPage, Session, page};
use crate::api::AppState;
use qfence_runtime::backend::BackendError;

use form::{SERVICE, SWITCHES, TIMINGS};
pub(super) use form::{number_or_text, parse_params};
use handlers::{create, edit_form, new_form, save};
pub(super) use view::Opt;

/// The editor's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/plans/new", get(new_form).post(create))
        .route("/plans/{plan}/edit", get(edit_form).post(save))
        .route("/console-forms.js", get(script))
        .route("/console-forms.css", get(style))
}

const SCRIPT: &str = include_str!("../../../assets/console-forms.js");
const STYLE: &str = include_str!("../../../assets/console-forms.css");

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        STYLE,
    )
        .into_response()
}

// ---- shared by the editor and registration ----

/// The plan named in an editor's path, if the session may edit plans and the name is one;
/// else the page that says why.
fn editable_plan(session: &Session, plan: &str) -> Result<PlanId, Box<Response>> {
    if !session.admin() {
        return Err(Box::new(forbidden(session, "Editing a plan")));
    }
    PlanId::new(plan).map_err(|_| {
        Box::new(super::error_page(
            Some(session),
            &BackendError::NotFound {
                what: "plan",
                name: plan.to_owned(),
            },
        ))
    })
}

/// A page refusing a caller whose role may not use it.
pub(super) fn forbidden(session: &Session, what: &str) -> Response {
    let t = ErrorPage {
        who: Some(session.caller.clone()),
        title: "Not allowed".into(),
        message: format!(
            "{what} needs an admin token; yours ({}) is {}",
            session.caller.name, session.caller.access
        ),
    };
    (StatusCode::FORBIDDEN, page(&t)).into_response()
}

/// Issues sorted onto the fields they are about: `key → messages`, plus those that name no
/// field of the form (shown at the top).
#[derive(Debug, Default, Clone)]
pub(super) struct FieldIssues {
    pub fields: BTreeMap<String, Vec<String>>,
    pub general: Vec<String>,
}

impl FieldIssues {
    pub fn add(&mut self, key: Option<String>, message: impl Into<String>) {
        match key {
            Some(k) => self.fields.entry(k).or_default().push(message.into()),
            None => self.general.push(message.into()),
        }
    }

    /// The messages of field `key` (a template shows them under the field).
    pub fn get(&self, key: &str) -> Vec<String> {
        self.fields.get(key).cloned().unwrap_or_default()
    }

    /// Whether field `key` has a problem (a template marks it `aria-invalid`).
    pub fn bad(&self, key: &str) -> bool {
        self.fields.contains_key(key)
    }

    /// [`Self::get`] for field `field` of binding row `row`.
    pub fn row_errs(&self, row: &str, field: &str) -> Vec<String> {
        self.get(&format!("{row}:{field}"))
    }

    /// [`Self::bad`] for field `field` of binding row `row`.
    pub fn row_bad(&self, row: &str, field: &str) -> bool {
        self.bad(&format!("{row}:{field}"))
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.general.is_empty()
    }

    /// How many problems there are; warnings shown with them do not count.
    pub fn count(&self) -> usize {
        self.fields
            .values()
            .chain(std::iter::once(&self.general))
            .flatten()
            .filter(|m| !m.starts_with("warning: "))
            .count()
    }
}

/// The configuration in force, for the choices a form offers. The backend's text must load:
/// it is what every plan is validated against.
pub(super) fn base_config(text: &str) -> Result<ValidatedConfig, BackendError> {
    load_str(text, "the configuration in force")
        .map(|l| l.config)
        .map_err(|issues| BackendError::Unavailable(format!(
            "the configuration in force does not load ({} issue(s), first: {}); the console cannot offer choices from it",
            issues.len(),
            issues.first().map(ToString::to_string).unwrap_or_default()
        )))
}

/// "1 issue", "3 issues".
pub(super) fn issues_count(n: usize) -> String {
    if n == 1 {
        "1 issue".into()
    } else {
        format!("{n} issues")
    }
}

/// JSON for a `<script type="application/json">`: `<` escaped so the text cannot close the
/// element.
pub(super) fn script_json(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The form field an issue's path names: `plans.NAME.instances.dc1[2].capability` is
/// `b:dc1:2:capability`, `plans.NAME.fence_timeout_seconds` is `fence_timeout_seconds`.
/// `None` for a path outside the plan or naming nothing the form shows.
pub(super) fn field_of(path: &str, plan: &str) -> Option<String> {
    let prefix = format!("plans.{plan}");
    let rest = path.strip_prefix(&prefix)?;
    let rest = match rest.strip_prefix('.') {
        Some(r) => r,
        None if rest.is_empty() => return None,
        None => return None,
    };
    // The first segment up to '.' or '['.
    let cut = rest.find(['.', '[']).unwrap_or(rest.len());
    let (head, tail) = rest.split_at(cut);
    match head {
        "owner" => Some("owner".into()),
        "priority" => Some("priority".into()),
        "instances" => {
            let Some(t) = tail.strip_prefix('.') else {
                return Some("instances".into());
            };
            let cut = t.find('[').unwrap_or(t.len());
            let (site, rest) = t.split_at(cut);
            binding_field(site, rest)
        }
        "service" => binding_field(SERVICE, tail),
        k if TIMINGS.iter().any(|(t, _, _)| *t == k) => Some(k.to_owned()),
        k if SWITCHES.iter().any(|(t, _, _)| *t == k) => Some(k.to_owned()),
        _ => None,
    }
}

/// `[2].capability` within a group → `b:GROUP:2:capability`; `[2]` → the row; `` → the group.
fn binding_field(group: &str, rest: &str) -> Option<String> {
    let Some(r) = rest.strip_prefix('[') else {
        return Some(format!("group:{group}"));
    };
    let (idx, after) = r.split_once(']')?;
    let idx: u32 = idx.parse().ok()?;
    let row = format!("b:{group}:{idx}");
    let Some(field) = after.strip_prefix('.') else {
        return Some(row);
    };
    let name = field.split(['.', '[']).next().unwrap_or(field);
    match name {
        "controller" | "capability" | "resource" | "role" | "required" | "params" => {
            Some(format!("{row}:{name}"))
        }
        _ => Some(row),
    }
}

/// Sorts validation's issues onto the form's fields (errors and warnings alike; a warning's
/// message says it is one).
pub(super) fn place_issues(into: &mut FieldIssues, issues: &[Issue], plan: &str) {
    for i in issues {
        let msg = if i.is_error() {
            i.message.clone()
        } else {
            format!("warning: {}", i.message)
        };
        match field_of(&i.path, plan) {
            Some(k) => into.add(Some(k), msg),
            None if i.path.is_empty() => into.add(None, msg),
            None => into.add(None, format!("{}: {msg}", i.path)),
        }
    }
}
