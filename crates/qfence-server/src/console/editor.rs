//! The plan editor: `/plans/new` and `/plans/{plan}/edit` (admin).
//!
//! The form is the plan's structure (owner, priority, timings, each site's bindings, the
//! service bindings), posted as flat fields (`b:dc1:2:capability`), so it works without
//! JavaScript. The server is the authority: it rebuilds the plan as the configuration file
//! writes it under `plans.NAME`, validates it with the API's validation
//! ([`plan_api::check_plan`] against [`Backend::config_source`](crate::Backend)), and shows
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

use std::collections::BTreeMap;

use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use qfence_model::config::{Issue, ValidatedConfig, keys, load_str, plan_api};
use qfence_model::{ControllerType, PlanId, Role};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ErrorPage, FormSession, Session, page};
use crate::api::AppState;
use crate::backend::{BackendError, CheckedPlan};

/// The editor's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/plans/new", get(new_form).post(create))
        .route("/plans/{plan}/edit", get(edit_form).post(save))
        .route("/console-forms.js", get(script))
        .route("/console-forms.css", get(style))
}

const SCRIPT: &str = include_str!("../../assets/console-forms.js");
const STYLE: &str = include_str!("../../assets/console-forms.css");

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

// ---- the form's model ----

/// The plan-level number fields: key in the file, label, what leaving it empty means.
const TIMINGS: &[(&str, &str, &str)] = &[
    ("interval_seconds", "Interval (s)", "2"),
    (
        "freshness_seconds",
        "Freshness (s)",
        "6, or 3 × a longer interval",
    ),
    (
        "recovery_after_seconds",
        "Recovery after (s)",
        "4, or 2 × a longer interval",
    ),
    ("max_recoveries", "Max recoveries", "1"),
    (
        "failover_after_seconds",
        "Failover after (s)",
        "8, or 4 × a longer interval",
    ),
    (
        "failover_after_definitive",
        "Failover after definitive readings",
        "off",
    ),
    (
        "fence_timeout_seconds",
        "Fence timeout (s)",
        "6, or 3 × a longer interval",
    ),
    ("max_retries", "Max retries", "2"),
];

/// The plan-level yes/no fields: key, label, default.
const SWITCHES: &[(&str, &str, &str)] = &[
    ("auto_failover", "Automatic failover", "yes"),
    ("unfence_on_promote", "Unfence on promote", "no"),
];

const SERVICE: &str = "service";

/// One binding row, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Row {
    /// The prefix of its fields' names: `b:GROUP:INDEX`.
    pub key: String,
    pub controller: String,
    pub capability: String,
    pub resource: String,
    pub role: String,
    pub required: bool,
    /// `key=value, key=value`.
    pub params: String,
}

impl Row {
    /// Whether nothing was typed in it (a role the form pre-set does not count).
    fn is_blank_in(&self, group: &str) -> bool {
        self.controller.trim().is_empty()
            && self.capability.trim().is_empty()
            && self.resource.trim().is_empty()
            && (self.role.trim().is_empty() || self.role == default_role(group))
            && self.params.trim().is_empty()
            && !self.required
    }
}

/// A site's instance, or the service bindings.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Group {
    /// The site's name, or `service`.
    pub name: String,
    pub rows: Vec<Row>,
}

impl Group {
    pub fn is_service(&self) -> bool {
        self.name == SERVICE
    }
}

/// Everything the form holds, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct PlanForm {
    pub name: String,
    pub owner: String,
    /// Comma-separated site names.
    pub priority: String,
    /// By key of [`TIMINGS`].
    pub timings: BTreeMap<String, String>,
    /// By key of [`SWITCHES`]: `""` (default), `"true"` or `"false"`.
    pub switches: BTreeMap<String, String>,
    /// The sites' instances in name order, then the service bindings.
    pub groups: Vec<Group>,
    /// A group that asked for one more blank row ("Add a binding" without the script).
    pub extra_blank: Option<String>,
    /// The JSON text view as posted (shown again only when it could not be loaded).
    pub raw: Option<String>,
}

/// A scalar of the plan's JSON as the text a field shows.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl PlanForm {
    /// The form showing a plan's spec (`plans.NAME` as the file writes it), with one group per
    /// site of `sites` and of the plan.
    pub fn from_spec(name: &str, spec: &Value, sites: &[String]) -> Self {
        let mut f = PlanForm {
            name: name.to_owned(),
            owner: spec.get("owner").map(text_of).unwrap_or_default(),
            priority: match spec.get("priority") {
                Some(Value::Array(a)) => a.iter().map(text_of).collect::<Vec<_>>().join(", "),
                Some(v) => text_of(v),
                None => String::new(),
            },
            ..Default::default()
        };
        for (k, _, _) in TIMINGS {
            if let Some(v) = spec.get(*k) {
                f.timings.insert((*k).to_owned(), text_of(v));
            }
        }
        for (k, _, _) in SWITCHES {
            if let Some(v) = spec.get(*k) {
                f.switches.insert((*k).to_owned(), text_of(v));
            }
        }
        let rows_of = |group: &str, v: Option<&Value>| -> Vec<Row> {
            let Some(Value::Array(items)) = v else {
                return Vec::new();
            };
            items
                .iter()
                .map(|b| Row {
                    key: String::new(),
                    controller: b.get("controller").map(text_of).unwrap_or_default(),
                    capability: b.get("capability").map(text_of).unwrap_or_default(),
                    resource: b.get("resource").map(text_of).unwrap_or_default(),
                    role: b
                        .get("role")
                        .map(text_of)
                        .unwrap_or_else(|| default_role(group)),
                    required: b.get("required").and_then(Value::as_bool).unwrap_or(false),
                    params: match b.get("params") {
                        Some(Value::Object(m)) => m
                            .iter()
                            .map(|(k, v)| format!("{k}={}", text_of(v)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        _ => String::new(),
                    },
                })
                .collect()
        };
        let instances = spec.get("instances").and_then(Value::as_object);
        let mut names: Vec<String> = sites.to_vec();
        if let Some(m) = instances {
            for k in m.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
        names.sort();
        for site in names {
            let rows = rows_of(&site, instances.and_then(|m| m.get(&site)));
            f.groups.push(Group { name: site, rows });
        }
        f.groups.push(Group {
            name: SERVICE.into(),
            rows: rows_of(SERVICE, spec.get("service")),
        });
        f.renumber();
        f
    }

    /// The form as posted. `sites` are the configuration's sites (a group for each even if
    /// the post has none). Returns the form and the action the button asked for.
    pub fn from_fields(fields: &[(String, String)], sites: &[String]) -> (Self, Action) {
        let mut f = PlanForm::default();
        let mut action = Action::Save;
        let mut rows: BTreeMap<(String, u32), Row> = BTreeMap::new();
        let mut groups: Vec<String> = sites.to_vec();
        for (k, v) in fields {
            match k.as_str() {
                "name" => f.name = v.trim().to_owned(),
                "owner" => f.owner = v.trim().to_owned(),
                "priority" => f.priority = v.clone(),
                "action" => action = Action::parse(v),
                "raw" => f.raw = Some(v.clone()),
                _ if TIMINGS.iter().any(|(t, _, _)| t == k) => {
                    f.timings.insert(k.clone(), v.clone());
                }
                _ if SWITCHES.iter().any(|(t, _, _)| t == k) => {
                    f.switches.insert(k.clone(), v.clone());
                }
                _ => {
                    // b:GROUP:INDEX:FIELD
                    let mut parts = k.splitn(4, ':');
                    let (Some("b"), Some(group), Some(idx), Some(field)) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let Ok(idx) = idx.parse::<u32>() else {
                        continue;
                    };
                    if !groups.iter().any(|g| g == group) && group != SERVICE {
                        groups.push(group.to_owned());
                    }
                    let row = rows.entry((group.to_owned(), idx)).or_default();
                    match field {
                        "controller" => row.controller = v.trim().to_owned(),
                        "capability" => row.capability = v.trim().to_owned(),
                        "resource" => row.resource = v.clone(),
                        "role" => row.role = v.trim().to_owned(),
                        "required" => row.required = v == "true" || v == "on",
                        "params" => row.params = v.clone(),
                        _ => {}
                    }
                }
            }
        }
        match &action {
            Action::Remove(g, i) => {
                rows.remove(&(g.clone(), *i));
            }
            Action::Add(g) => f.extra_blank = Some(g.clone()),
            _ => {}
        }
        groups.sort();
        groups.push(SERVICE.into());
        for g in groups {
            let rows: Vec<Row> = rows
                .iter()
                .filter(|((rg, _), r)| *rg == g && !r.is_blank_in(&g))
                .map(|(_, r)| r.clone())
                .collect();
            f.groups.push(Group { name: g, rows });
        }
        f.renumber();
        (f, action)
    }

    /// Gives every row the key of its position: issue paths index the bindings as sent, and
    /// blank rows are not sent.
    fn renumber(&mut self) {
        for g in &mut self.groups {
            for (i, r) in g.rows.iter_mut().enumerate() {
                r.key = format!("b:{}:{i}", g.name);
            }
        }
    }

    /// Appends one blank row to each group, for the next binding (two to the group that
    /// asked for one more).
    fn with_blank_rows(mut self) -> Self {
        for g in &mut self.groups {
            let n = if self.extra_blank.as_deref() == Some(g.name.as_str()) {
                2
            } else {
                1
            };
            for _ in 0..n {
                let i = g.rows.len();
                g.rows.push(Row {
                    key: format!("b:{}:{i}", g.name),
                    role: default_role(&g.name),
                    ..Default::default()
                });
            }
        }
        self
    }

    /// The plan as the file writes it under `plans.NAME`, plus the problems that stop the form
    /// from even saying it (a `params` field that is not `key=value` pairs). Empty fields are
    /// left out, so validation reports what is missing in its own words.
    pub fn to_spec(&self) -> (Value, FieldIssues) {
        let mut issues = FieldIssues::default();
        let mut spec = Map::new();
        if !self.owner.is_empty() {
            spec.insert("owner".into(), json!(self.owner));
        }
        let priority: Vec<Value> = self
            .priority
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| json!(s))
            .collect();
        if !priority.is_empty() {
            spec.insert("priority".into(), Value::Array(priority));
        }
        for (k, _, _) in TIMINGS {
            if let Some(v) = self
                .timings
                .get(*k)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
            {
                spec.insert((*k).to_owned(), number_or_text(v));
            }
        }
        for (k, _, _) in SWITCHES {
            match self.switches.get(*k).map(String::as_str) {
                Some("true") => {
                    spec.insert((*k).to_owned(), json!(true));
                }
                Some("false") => {
                    spec.insert((*k).to_owned(), json!(false));
                }
                _ => {}
            }
        }
        let mut instances = Map::new();
        let mut service = Vec::new();
        for g in &self.groups {
            let bindings: Vec<Value> = g
                .rows
                .iter()
                .filter(|r| !r.is_blank_in(&g.name))
                .map(|r| {
                    let mut b = Map::new();
                    for (k, v) in [
                        ("controller", &r.controller),
                        ("capability", &r.capability),
                        ("resource", &r.resource),
                        ("role", &r.role),
                    ] {
                        if !v.trim().is_empty() {
                            b.insert(k.into(), json!(v));
                        }
                    }
                    if r.required {
                        b.insert("required".into(), json!(true));
                    }
                    match parse_params(&r.params) {
                        Ok(p) if p.is_empty() => {}
                        Ok(p) => {
                            b.insert("params".into(), Value::Object(p));
                        }
                        Err(m) => issues.add(Some(format!("{}:params", r.key)), m),
                    }
                    Value::Object(b)
                })
                .collect();
            if g.is_service() {
                service = bindings;
            } else if !bindings.is_empty() {
                instances.insert(g.name.clone(), Value::Array(bindings));
            }
        }
        spec.insert("instances".into(), Value::Object(instances));
        if !service.is_empty() {
            spec.insert("service".into(), Value::Array(service));
        }
        (Value::Object(spec), issues)
    }
}

fn default_role(group: &str) -> String {
    if group == SERVICE {
        "service".into()
    } else {
        String::new()
    }
}

/// Fills `form` from its JSON text view (the plan as `plans.NAME` writes it). Anything the
/// form could not show is refused rather than dropped: the text is kept with the reason at
/// the text view, and the form is left as it was.
pub(super) fn load_raw(form: &mut PlanForm, sites: &[String], issues: &mut FieldIssues) {
    let text = form.raw.clone().unwrap_or_default();
    let refuse = |issues: &mut FieldIssues, m: String| {
        issues.add(Some("raw".into()), format!("{m}; nothing was loaded"));
    };
    let spec = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return refuse(
                issues,
                "expected a JSON object: the plan as `plans.NAME` writes it".into(),
            );
        }
        Err(e) => return refuse(issues, format!("not valid JSON: {e}")),
    };
    let unknown = unplaceable(&spec);
    if !unknown.is_empty() {
        return refuse(
            issues,
            format!("the form has no place for {}", unknown.join(", ")),
        );
    }
    let name = form.name.clone();
    *form = PlanForm::from_spec(&name, &Value::Object(spec), sites);
}

/// What in a plan's JSON the form has no place for (keys, and lists or bindings of the wrong
/// shape), so that nothing is silently dropped on the way into the form.
pub(super) fn unplaceable(spec: &Map<String, Value>) -> Vec<String> {
    let mut unknown: Vec<String> = spec
        .keys()
        .filter(|k| !keys::PLAN.contains(&k.as_str()))
        .map(|k| format!("{k:?}"))
        .collect();
    let groups = spec
        .get("instances")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter().map(|(k, v)| (format!("instances.{k}"), v)))
        .chain(spec.get("service").map(|v| ("service".to_owned(), v)));
    for (at, list) in groups {
        let Some(list) = list.as_array() else {
            unknown.push(format!("{at} (not a list)"));
            continue;
        };
        for (i, b) in list.iter().enumerate() {
            match b.as_object() {
                Some(b) => unknown.extend(
                    b.keys()
                        .filter(|k| !keys::BINDING.contains(&k.as_str()))
                        .map(|k| format!("{at}[{i}].{k}")),
                ),
                None => unknown.push(format!("{at}[{i}] (not a mapping)")),
            }
        }
    }
    unknown
}

/// `120` and `0.5` as numbers, anything else as typed (validation says what it expected).
pub(super) fn number_or_text(v: &str) -> Value {
    if let Ok(i) = v.parse::<i64>() {
        json!(i)
    } else if let Ok(f) = v.parse::<f64>()
        && f.is_finite()
    {
        json!(f)
    } else {
        json!(v)
    }
}

/// `key=value, key=value` (commas or new lines between pairs).
pub(super) fn parse_params(text: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for pair in text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.insert(k.trim().to_owned(), json!(v.trim()));
            }
            _ => {
                return Err(format!(
                    "expected key=value pairs separated by commas, found {pair:?}"
                ));
            }
        }
    }
    Ok(out)
}

/// What the posted form asks for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    /// Validate and save (create, or stage and apply).
    Save,
    /// Validate and stage only (edit).
    Stage,
    /// Show the form again with choices narrowed to what was picked (the no-script path).
    Refresh,
    /// Drop one binding row and show the form again.
    Remove(String, u32),
    /// Show the form again with one more blank row in a group.
    Add(String),
    /// Fill the form from the JSON text view.
    LoadRaw,
}

impl Action {
    fn parse(v: &str) -> Self {
        match v {
            "stage" => Action::Stage,
            "refresh" => Action::Refresh,
            "load_raw" => Action::LoadRaw,
            _ if v.starts_with("add:") => Action::Add(v["add:".len()..].to_owned()),
            _ => match v.strip_prefix("remove:").and_then(|r| r.rsplit_once(':')) {
                Some((g, i)) => match i.parse() {
                    Ok(i) => Action::Remove(g.to_owned(), i),
                    Err(_) => Action::Refresh,
                },
                None => Action::Save,
            },
        }
    }
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

// ---- what the page offers ----

/// One `<option>`.
#[derive(Debug, Clone)]
pub(super) struct Opt {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

fn opt(value: &str, label: impl Into<String>, current: &str) -> Opt {
    Opt {
        value: value.to_owned(),
        label: label.into(),
        selected: value == current,
    }
}

/// Options from `values`, with the current value kept even when it does not fit (marked),
/// so nothing typed is lost and the error next to it says why.
fn options(values: &[(String, String)], current: &str, blank: &str) -> Vec<Opt> {
    let mut out = vec![opt("", blank, current)];
    out.extend(values.iter().map(|(v, l)| opt(v, l.clone(), current)));
    if !current.is_empty() && !values.iter().any(|(v, _)| v == current) {
        out.push(opt(current, format!("{current} (does not fit)"), current));
    }
    out
}

/// A resource a controller discovered, offered in the resource field.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Offered {
    pub capability: String,
    pub resource: String,
    pub description: String,
}

/// What the form may offer: the configuration's sites and controllers, and what each
/// controller discovered.
pub(super) struct Choices {
    /// Sites that may hold an instance (not witnesses), in name order.
    pub sites: Vec<String>,
    /// Controller → its type, its site and reach.
    pub controllers: BTreeMap<String, (ControllerType, String)>,
    pub discovered: BTreeMap<String, Vec<Offered>>,
    /// Controller → the capabilities its latest test graded failed: never offered (the
    /// backend refuses a plan that binds one).
    pub failed: BTreeMap<String, Vec<String>>,
}

impl Choices {
    fn new(
        cfg: &ValidatedConfig,
        discovered: BTreeMap<String, Vec<Offered>>,
        failed: BTreeMap<String, Vec<String>>,
    ) -> Self {
        let c = cfg.config();
        Choices {
            failed,
            sites: c
                .sites
                .iter()
                .filter(|(_, s)| !s.witness)
                .map(|(id, _)| id.as_str().to_owned())
                .collect(),
            controllers: c
                .controllers
                .iter()
                .map(|(id, cc)| {
                    let reach: Vec<&str> = cc.reach.iter().map(|s| s.as_str()).collect();
                    let at = if reach.is_empty() {
                        format!("at {}", cc.site)
                    } else {
                        format!("at {}, reach {}", cc.site, reach.join(", "))
                    };
                    (id.as_str().to_owned(), (cc.controller_type(), at))
                })
                .collect(),
            discovered,
        }
    }

    /// The data the script narrows choices from.
    fn json(&self) -> Value {
        let controllers: Map<String, Value> = self
            .controllers
            .iter()
            .map(|(n, (t, at))| {
                let failed = self.failed.get(n).cloned().unwrap_or_default();
                (
                    n.clone(),
                    json!({"type": t.as_str(), "at": at, "failed": failed}),
                )
            })
            .collect();
        let types: Map<String, Value> = ControllerType::ALL
            .iter()
            .map(|t| {
                let caps: Vec<Value> = t
                    .capabilities()
                    .iter()
                    .map(|c| {
                        json!({
                            "name": c.name,
                            "roles": c.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                            "level": c.level.map(|l| l.as_str()),
                            "resource": c.resource.describe(),
                            "params": c.params.names(),
                        })
                    })
                    .collect();
                (t.as_str().to_owned(), Value::Array(caps))
            })
            .collect();
        let discovered: Map<String, Value> = self
            .discovered
            .iter()
            .map(|(n, list)| {
                (
                    n.clone(),
                    Value::Array(
                        list.iter()
                            .map(|o| {
                                json!({"capability": o.capability, "resource": o.resource,
                                       "description": o.description})
                            })
                            .collect(),
                    ),
                )
            })
            .collect();
        json!({"controllers": controllers, "types": types, "discovered": discovered})
    }

    fn capability_spec(
        &self,
        controller: &str,
        capability: &str,
    ) -> Option<&'static qfence_model::CapabilitySpec> {
        self.controllers
            .get(controller)
            .and_then(|(t, _)| t.capability(capability))
    }
}

/// One row with its choices, ready to draw.
#[derive(Debug, Clone)]
pub(super) struct RowView {
    pub row: Row,
    pub controllers: Vec<Opt>,
    pub capabilities: Vec<Opt>,
    pub roles: Vec<Opt>,
    pub offered: Vec<Offered>,
    /// How the resource is written, for the placeholder.
    pub resource_hint: String,
    /// The capability's params, for the placeholder.
    pub params_hint: String,
    /// Whether `required` means something here (a fence that is not an application fence).
    pub may_require: bool,
}

#[derive(Debug, Clone)]
pub(super) struct GroupView {
    pub name: String,
    pub title: String,
    pub service: bool,
    pub rows: Vec<RowView>,
}

fn row_view(row: &Row, service: bool, ch: &Choices) -> RowView {
    let ctrls: Vec<(String, String)> = ch
        .controllers
        .iter()
        .map(|(n, (t, at))| (n.clone(), format!("{n} ({t}, {at})")))
        .collect();
    let ty = ch.controllers.get(&row.controller).map(|(t, _)| *t);
    // Only the picked controller's capabilities; before one is picked, every capability
    // a registered controller has.
    let failed = ch.failed.get(&row.controller);
    let caps: Vec<(String, String)> = match ty {
        Some(t) => t
            .capabilities()
            .iter()
            .filter(|c| !failed.is_some_and(|f| f.iter().any(|n| n == c.name)))
            .map(|c| (c.name.to_owned(), c.name.to_owned()))
            .collect(),
        None => {
            let mut all: Vec<String> = ch
                .controllers
                .values()
                .flat_map(|(t, _)| t.capabilities().iter().map(|c| c.name.to_owned()))
                .collect();
            all.sort();
            all.dedup();
            all.into_iter().map(|c| (c.clone(), c)).collect()
        }
    };
    let spec = ch.capability_spec(&row.controller, &row.capability);
    let fits = |r: &Role| (*r == Role::Service) == service;
    let roles: Vec<(String, String)> = match spec {
        Some(s) => s
            .roles
            .iter()
            .filter(|r| fits(r))
            .copied()
            .collect::<Vec<_>>(),
        None => Role::ALL.iter().filter(|r| fits(r)).copied().collect(),
    }
    .into_iter()
    .map(|r| (r.as_str().to_owned(), r.as_str().to_owned()))
    .collect();
    let offered = ch
        .discovered
        .get(&row.controller)
        .map(|list| {
            list.iter()
                .filter(|o| o.capability.is_empty() || o.capability == row.capability)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let level = match (spec, ty) {
        (Some(s), Some(_)) => s.level,
        _ => None,
    };
    RowView {
        row: row.clone(),
        controllers: options(&ctrls, &row.controller, "— controller —"),
        capabilities: options(&caps, &row.capability, "— capability —"),
        roles: options(&roles, &row.role, "— role —"),
        offered,
        resource_hint: spec.map(|s| s.resource.describe()).unwrap_or("").to_owned(),
        params_hint: match spec {
            Some(s) if s.params.names() != "(none)" => format!("params: {}", s.params.names()),
            Some(_) => "no params".to_owned(),
            None => String::new(),
        },
        may_require: row.role.is_empty()
            || (row.role == "fence" && level != Some(qfence_model::FenceLevel::Application)),
    }
}

/// A number field, as drawn.
#[derive(Debug, Clone)]
pub(super) struct TimingView {
    pub key: String,
    pub label: String,
    pub value: String,
    pub default: String,
}

/// A yes/no field, as drawn.
#[derive(Debug, Clone)]
pub(super) struct SwitchView {
    pub key: String,
    pub label: String,
    pub options: Vec<Opt>,
}

/// The editor page.
#[derive(Template)]
#[template(path = "console/editor.html")]
pub(super) struct EditorPage {
    pub who: Option<crate::auth::Caller>,
    pub title: String,
    /// `None` for a new plan.
    pub plan: Option<String>,
    pub action: String,
    pub name: String,
    pub expected_generation: Option<u64>,
    /// Set when the plan moved on while the user edited: its generation now.
    pub stale: Option<u64>,
    /// A change someone staged that saving here replaces.
    pub staged_note: Option<String>,
    pub owners: Vec<Opt>,
    pub priority: String,
    pub timings: Vec<TimingView>,
    pub switches: Vec<SwitchView>,
    pub groups: Vec<GroupView>,
    pub issues: FieldIssues,
    /// The summary above the form.
    pub banner: Option<String>,
    pub data: String,
    /// The plan as it will be sent, for the raw view.
    pub raw: String,
}

fn editor_page(
    session: &Session,
    plan: Option<&str>,
    form: &PlanForm,
    ch: &Choices,
    expected_generation: Option<u64>,
    issues: FieldIssues,
) -> EditorPage {
    let form = form.clone().with_blank_rows();
    let issues_has_raw = issues.fields.contains_key("raw");
    let groups = form
        .groups
        .iter()
        .map(|g| GroupView {
            name: g.name.clone(),
            title: if g.is_service() {
                "Service bindings (follow the owner; last in a failover)".into()
            } else {
                format!("Instance at {}", g.name)
            },
            service: g.is_service(),
            rows: g
                .rows
                .iter()
                .map(|r| row_view(r, g.is_service(), ch))
                .collect(),
        })
        .collect();
    let sites: Vec<(String, String)> = ch.sites.iter().map(|s| (s.clone(), s.clone())).collect();
    let (spec, _) = form.to_spec();
    let banner = if issues.is_empty() {
        None
    } else {
        Some(format!(
            "{}; nothing was saved. Each is shown next to its field.",
            issues_count(issues.count())
        ))
    };
    EditorPage {
        who: Some(session.caller.clone()),
        title: match plan {
            Some(p) => format!("Edit plan {p}"),
            None => "New plan".into(),
        },
        plan: plan.map(str::to_owned),
        action: match plan {
            Some(p) => format!("/plans/{p}/edit"),
            None => "/plans/new".into(),
        },
        name: form.name.clone(),
        expected_generation,
        stale: None,
        staged_note: None,
        owners: options(&sites, &form.owner, "— owner site —"),
        priority: form.priority.clone(),
        timings: TIMINGS
            .iter()
            .map(|(k, l, d)| TimingView {
                key: (*k).into(),
                label: (*l).into(),
                value: form.timings.get(*k).cloned().unwrap_or_default(),
                default: (*d).into(),
            })
            .collect(),
        switches: SWITCHES
            .iter()
            .map(|(k, l, d)| {
                let cur = form.switches.get(*k).map(String::as_str).unwrap_or("");
                SwitchView {
                    key: (*k).into(),
                    label: (*l).into(),
                    options: vec![
                        opt("", format!("default ({d})"), cur),
                        opt("true", "yes", cur),
                        opt("false", "no", cur),
                    ],
                }
            })
            .collect(),
        groups,
        issues,
        banner,
        data: script_json(&ch.json()),
        // The text as typed when it could not be loaded; else the form as JSON.
        raw: match (&form.raw, issues_has_raw) {
            (Some(t), true) => t.clone(),
            _ => serde_json::to_string_pretty(&spec).unwrap_or_default(),
        },
    }
}

/// What each controller discovered, asked of all of them at once, each bounded: a controller
/// that does not answer in time offers nothing, and the form still works.
async fn discovered(s: &AppState, cfg: &ValidatedConfig) -> BTreeMap<String, Vec<Offered>> {
    let names: Vec<qfence_model::ControllerId> = cfg.config().controllers.keys().cloned().collect();
    let calls = names.iter().map(|n| async move {
        let r = tokio::time::timeout(DISCOVER_TIMEOUT, s.backend.discover(n)).await;
        let list = match r {
            Ok(Ok(list)) => list
                .into_iter()
                .map(|d| Offered {
                    capability: d.capability,
                    resource: d.resource,
                    description: d.description,
                })
                .collect(),
            Ok(Err(e)) => {
                tracing::debug!(controller = %n, error = %e, "Discovery failed; the editor offers nothing for it");
                Vec::new()
            }
            Err(_) => {
                tracing::debug!(controller = %n, "Discovery timed out; the editor offers nothing for it");
                Vec::new()
            }
        };
        (n.as_str().to_owned(), list)
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .filter(|(_, l)| !l.is_empty())
        .collect()
}

const DISCOVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The configuration and choices, or the error page.
async fn choices(s: &AppState, session: &Session) -> Result<Choices, Response> {
    let text = s
        .backend
        .config_source()
        .await
        .map_err(|e| super::error_page(Some(session), &e))?;
    let cfg = base_config(&text).map_err(|e| super::error_page(Some(session), &e))?;
    let found = discovered(s, &cfg).await;
    // A controller list that cannot be read offers everything; the backend still refuses.
    let failed = s
        .backend
        .controllers()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let caps: Vec<String> = c
                .grades
                .into_iter()
                .filter(|g| g.grade == crate::dto::GradeDto::Failed)
                .map(|g| g.capability)
                .collect();
            (c.name, caps)
        })
        .filter(|(_, caps)| !caps.is_empty())
        .collect();
    Ok(Choices::new(&cfg, found, failed))
}

// ---- handlers ----

async fn new_form(session: Session, State(s): State<AppState>) -> Response {
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
struct EditQuery {
    /// `1`: load the staged change rather than the plan in force.
    staged: Option<String>,
}

async fn edit_form(
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
        Err(e) => return super::error_page(Some(&session), &e),
    };
    if view.source == crate::dto::PlanSource::File {
        return super::error_page(
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
        return super::error_page(
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

async fn create(
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
        Err(e) => return super::error_page(Some(&session), &e),
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
fn backend_issue(
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

async fn save(
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
        Err(e) => return super::error_page(Some(&session), &e),
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
        Err(e) => return super::error_page(Some(&session), &e),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_key_has_a_place_in_the_form() {
        let rows: Vec<&str> = TIMINGS.iter().chain(SWITCHES).map(|(k, _, _)| *k).collect();
        for k in &rows {
            assert!(keys::PLAN.contains(k), "{k} is not a plan key");
        }
        for k in keys::PLAN {
            let placed =
                rows.contains(k) || ["owner", "priority", "instances", SERVICE].contains(k);
            assert!(placed, "the form has no place for {k}");
        }
    }

    #[test]
    fn issue_paths_name_fields() {
        let f = |p: &str| field_of(p, "erp-db");
        assert_eq!(
            f("plans.erp-db.instances.dc1[2].capability").as_deref(),
            Some("b:dc1:2:capability")
        );
        assert_eq!(
            f("plans.erp-db.instances.dc1[0].params.max_age_seconds").as_deref(),
            Some("b:dc1:0:params")
        );
        assert_eq!(
            f("plans.erp-db.instances.dc1[3]").as_deref(),
            Some("b:dc1:3")
        );
        assert_eq!(
            f("plans.erp-db.instances.dc2").as_deref(),
            Some("group:dc2")
        );
        assert_eq!(f("plans.erp-db.instances").as_deref(), Some("instances"));
        assert_eq!(
            f("plans.erp-db.service[0].role").as_deref(),
            Some("b:service:0:role")
        );
        assert_eq!(
            f("plans.erp-db.fence_timeout_seconds").as_deref(),
            Some("fence_timeout_seconds")
        );
        assert_eq!(f("plans.erp-db.priority[1]").as_deref(), Some("priority"));
        assert_eq!(f("plans.erp-db.owner").as_deref(), Some("owner"));
        assert_eq!(f("plans.erp-db"), None);
        assert_eq!(f("plans.erp-dbx.owner"), None);
        assert_eq!(f("controllers.bmc-dc1.site"), None);
    }

    #[test]
    fn the_lab_plan_survives_the_form() {
        let spec = crate::testing::erp_db_spec();
        let sites = vec!["dc1".to_owned(), "dc2".to_owned()];
        let form = PlanForm::from_spec("erp-db", &spec, &sites);
        let (back, issues) = form.to_spec();
        assert!(issues.is_empty());
        assert_eq!(back, spec);
    }

    #[test]
    fn posted_rows_are_compacted_in_order_and_blank_ones_dropped() {
        let fields: Vec<(String, String)> = [
            ("owner", "dc1"),
            ("b:dc1:5:controller", "pve-dc1"),
            ("b:dc1:5:capability", "vm.stop"),
            ("b:dc1:1:controller", "bmc-dc1"),
            ("b:dc1:2:controller", ""),
            ("b:service:0:role", ""),
            ("action", "save"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let (f, a) = PlanForm::from_fields(&fields, &["dc1".into(), "dc2".into()]);
        assert_eq!(a, Action::Save);
        let dc1 = &f.groups[0];
        assert_eq!(dc1.name, "dc1");
        assert_eq!(dc1.rows.len(), 2);
        assert_eq!(dc1.rows[0].controller, "bmc-dc1");
        assert_eq!(dc1.rows[0].key, "b:dc1:0");
        assert_eq!(dc1.rows[1].capability, "vm.stop");
        assert_eq!(f.groups.last().unwrap().name, "service");
        assert!(f.groups.last().unwrap().rows.is_empty());
    }

    #[test]
    fn a_spec_the_form_cannot_hold_is_named() {
        let spec = json!({"owner": "dc1", "sites": ["dc1"], "instances": {"dc1": [
            {"controller": "bmc-dc1", "capability": "power.off", "resource": "h", "role": "fence",
             "timeout": 3}]}});
        let found = unplaceable(spec.as_object().unwrap());
        assert_eq!(found, vec!["\"sites\"", "instances.dc1[0].timeout"]);
        let lab = crate::testing::erp_db_spec();
        assert!(unplaceable(lab.as_object().unwrap()).is_empty());
    }

    #[test]
    fn params_must_be_pairs() {
        assert_eq!(
            parse_params("dc1=10.1.1.5, dc2 = 10.2.1.5").unwrap().len(),
            2
        );
        assert!(parse_params("max_age_seconds 120").is_err());
        assert!(parse_params("").unwrap().is_empty());
    }

    #[test]
    fn embedded_json_cannot_close_its_script() {
        let s = script_json(&json!({"x": "</script><b>"}));
        assert!(!s.contains('<'));
        assert_eq!(
            serde_json::from_str::<Value>(&s).unwrap(),
            json!({"x": "</script><b>"})
        );
    }
}
