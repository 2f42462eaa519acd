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

use std::collections::BTreeMap;

use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use qfence_model::config::{Issue, keys, plan_api};
use qfence_model::{ControllerId, ControllerType};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::editor::{
    FieldIssues, Opt, base_config, forbidden, number_or_text, parse_params, script_json,
};
use super::{FormSession, Session, page};
use crate::api::AppState;
use crate::backend::{BackendError, CheckedController};
use crate::dto::{ControllerTest, ControllerView, GradeDto};

/// The registration and list routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/controllers", get(list))
        .route("/controllers/new", get(start).post(step))
        .route("/controllers/{controller}/test", post(test))
}

/// The steps' titles.
const STEPS: [&str; 4] = [
    "Type and connection",
    "Credentials",
    "Connectivity test",
    "Capabilities",
];

/// Every field of the form: its name and the step it is typed at (0 for the ones the
/// server fills).
const FIELDS: &[(&str, u8)] = &[
    ("name", 1),
    ("type", 1),
    ("site", 1),
    ("reach", 1),
    ("timeout_seconds", 1),
    ("endpoint", 1),
    ("username", 1),
    ("auth", 1),
    ("cipher_suite", 1),
    ("token_id", 1),
    ("vdom", 1),
    ("agent", 1),
    ("options", 1),
    ("level", 1),
    ("project", 1),
    ("user_domain", 1),
    ("project_domain", 1),
    ("application_credential_id", 1),
    ("interface", 1),
    ("region", 1),
    ("tls_mode", 1),
    ("tls_ca_file", 1),
    ("tls_pin", 1),
    ("secret", 2),
    ("pin_fingerprint", 3),
    ("probed_fingerprint", 0),
];

/// The per-type fields: name, label, placeholder. Which types have each is the model's
/// [`keys::controller_type`].
const TYPE_FIELDS: &[(&str, &str, &str)] = &[
    ("endpoint", "Endpoint", "https://bmc.example:443"),
    ("username", "Username", "qfence"),
    ("auth", "Authentication", "session (default) or basic"),
    ("cipher_suite", "Cipher suite", "17 (default), 3, 8 or 12"),
    ("token_id", "API token id", "qfence@pve!fence"),
    ("vdom", "VDOM", "root (optional)"),
    ("agent", "Fence agent", "fence_ipmilan"),
    (
        "options",
        "Agent options",
        "ip=10.0.0.5, username=admin (no password)",
    ),
    (
        "level",
        "Fence level",
        "compute (default), network or application",
    ),
    ("project", "Keystone project", "admin"),
    ("user_domain", "Keystone user domain", "Default (default)"),
    (
        "project_domain",
        "Keystone project domain",
        "Default (default)",
    ),
    (
        "application_credential_id",
        "Application credential id",
        "instead of username and project (optional)",
    ),
    (
        "interface",
        "Endpoint interface",
        "public (default), internal or admin",
    ),
    ("region", "Region", "RegionOne (optional)"),
];

/// The types that have the per-type field `key`, as the template reads them: `"redfish ipmi"`.
fn types_with(key: &str) -> String {
    keys::types_with(key)
        .map(ControllerType::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What each type is, in a line (shown next to the type).
fn type_hint(t: ControllerType) -> &'static str {
    match t {
        ControllerType::Redfish => {
            "A BMC over Redfish (HTTPS). The secret holds the account's password."
        }
        ControllerType::Ipmi => {
            "A BMC over IPMI LAN (RMCP+, UDP 623). The secret holds the account's password."
        }
        ControllerType::Proxmox => {
            "A Proxmox VE cluster's API. With a token id, the secret holds the token's UUID; \
             with a username (ticket login), the password."
        }
        ControllerType::Fortigate => "A FortiGate's REST API. The secret holds the API key.",
        ControllerType::Docker => {
            "A Docker Engine (unix socket or HTTPS with TLS). No secret needed."
        }
        ControllerType::Postgres => "A PostgreSQL server. The secret holds the role's password.",
        ControllerType::FenceAgent => {
            "An installed Pacemaker fence agent. The secret is passed as password= at call time."
        }
        ControllerType::Nova => "OpenStack Nova through Keystone v3 (Instance HA).",
        ControllerType::Agent => {
            "The host agents (qfence agent) of its site. Not built yet: every call is refused \
             with \"no agent connected\". No secret."
        }
    }
}

/// Everything typed so far: field name → values (only `reach` has several).
#[derive(Debug, Clone, Default)]
pub(super) struct ControllerForm {
    values: BTreeMap<String, Vec<String>>,
}

impl ControllerForm {
    fn from_fields(fields: &[(String, String)]) -> Self {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in fields {
            if FIELDS.iter().any(|(f, _)| f == k) {
                values.entry(k.clone()).or_default().push(v.clone());
            }
        }
        ControllerForm { values }
    }

    fn get(&self, k: &str) -> String {
        self.values
            .get(k)
            .and_then(|v| v.iter().rev().find(|s| !s.is_empty()).or(v.last()))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }

    fn set(&mut self, k: &str, v: impl Into<String>) {
        self.values.insert(k.to_owned(), vec![v.into()]);
    }

    fn reach(&self) -> Vec<String> {
        self.values
            .get("reach")
            .map(|v| v.iter().filter(|s| !s.is_empty()).cloned().collect())
            .unwrap_or_default()
    }

    fn pinned(&self) -> bool {
        self.get("pin_fingerprint") == "true" && !self.get("probed_fingerprint").is_empty()
    }

    /// The fields not typed at `step`, as hidden inputs: they travel with the form.
    fn hidden(&self, step: u8) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (f, s) in FIELDS {
            if *s == step {
                continue;
            }
            for v in self.values.get(*f).into_iter().flatten() {
                out.push(((*f).to_owned(), v.clone()));
            }
        }
        out
    }

    /// The controller as the file writes it under `controllers.NAME`, and the problems that
    /// stop the form from saying it (agent options that are not `key=value`). Empty fields are
    /// left out so validation says what is missing in its own words; fields of other types
    /// than the chosen one are kept in the form but not sent.
    fn to_spec(&self) -> (Value, FieldIssues) {
        let mut issues = FieldIssues::default();
        let mut m = Map::new();
        let ty = self.get("type");
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_owned(), v);
        };
        if !ty.is_empty() {
            put("type", json!(ty));
        }
        let site = self.get("site");
        if !site.is_empty() {
            put("site", json!(site));
        }
        let reach = self.reach();
        if !reach.is_empty() {
            put("reach", json!(reach));
        }
        let secret = self.get("secret");
        if !secret.is_empty() {
            put("secret", json!(secret));
        }
        let timeout = self.get("timeout_seconds");
        if !timeout.is_empty() {
            put("timeout_seconds", number_or_text(&timeout));
        }
        let typed = ty.parse::<ControllerType>().ok();
        for (f, _, _) in TYPE_FIELDS {
            if !typed.is_some_and(|t| keys::controller_type(t).contains(f)) {
                continue;
            }
            let v = self.get(f);
            if v.is_empty() {
                continue;
            }
            match *f {
                "cipher_suite" => put(f, number_or_text(&v)),
                "options" => match parse_params(&v) {
                    Ok(o) => put(f, Value::Object(o)),
                    Err(e) => issues.add(Some("options".into()), e),
                },
                _ => put(f, json!(v)),
            }
        }
        let tls = if self.pinned() {
            Some(json!({"pin": self.get("probed_fingerprint")}))
        } else {
            match self.get("tls_mode").as_str() {
                "insecure" => Some(json!({"insecure": true})),
                "ca_file" => Some(json!({"ca_file": self.get("tls_ca_file")})),
                "pin" => Some(json!({"pin": self.get("tls_pin")})),
                _ => None,
            }
        };
        if let Some(t) = tls {
            put("tls", t);
        }
        (Value::Object(m), issues)
    }
}

/// Why a secret reference looks like the secret itself, if it does. Validation accepts any
/// valid name; a name that is a UUID (a Proxmox token's secret) or a long mix of upper case,
/// lower case and digits (an API key, a password) is far more likely a pasted credential than
/// the name of one, and a credential must never be stored in the configuration.
pub(super) fn looks_inline(secret: &str) -> Option<&'static str> {
    let s = secret.trim();
    let uuid = s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if uuid {
        return Some(
            "this looks like a token's secret (a UUID), not the name of a secret: store it in \
             each orchestrator's secret store and write its name here; it was not kept",
        );
    }
    let mixed = s.len() >= 20
        && s.chars().any(|c| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().any(|c| c.is_ascii_digit())
        && !s.contains(['-', '_', '.']);
    if mixed {
        return Some(
            "this looks like a credential (a long mix of letters and digits), not the name of a \
             secret: store it in each orchestrator's secret store and write its name here; it \
             was not kept",
        );
    }
    None
}

/// `scheme://user:password@host...` without `:password`, when the URL carries one.
fn without_password(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}@{host}{tail}"))
}

/// The form field an issue's path names (`controllers.NAME.tls.pin` is `tls`), if any.
fn field_of(path: &str, name: &str) -> Option<String> {
    let rest = path.strip_prefix(&format!("controllers.{name}."))?;
    let head = rest.split(['.', '[']).next().unwrap_or(rest);
    match head {
        "tls" => Some("tls".into()),
        h if FIELDS.iter().any(|(f, _)| *f == h) => Some(h.to_owned()),
        _ => None,
    }
}

/// The step a field is typed at (issues about the whole entry: step 1).
fn step_of(field: &str) -> u8 {
    match field {
        "tls" => 1,
        f => FIELDS
            .iter()
            .find(|(n, _)| *n == f)
            .map_or(1, |(_, s)| (*s).max(1)),
    }
}

/// Validation's issues up to `upto` (later steps' are not the user's concern yet), placed
/// on their fields. Returns the earliest step with an issue.
fn place(into: &mut FieldIssues, issues: &[Issue], name: &str, upto: u8) -> Option<u8> {
    let mut earliest: Option<u8> = None;
    for i in issues {
        let field = field_of(&i.path, name);
        let step = field.as_deref().map_or(1, step_of);
        if step > upto {
            continue;
        }
        if !i.is_error() {
            // Warnings are shown at the test and the capabilities (step 3 and 4), not as
            // refusals.
            continue;
        }
        earliest = Some(earliest.map_or(step, |e: u8| e.min(step)));
        match field {
            Some(f) => into.add(Some(f), i.message.clone()),
            None if i.path.is_empty() => into.add(None, i.message.clone()),
            None => into.add(None, format!("{}: {}", i.path, i.message)),
        }
    }
    earliest
}

// ---- what the pages show ----

/// A probe's result, as shown at steps 3 and 4 and after a test.
#[derive(Debug, Clone, Default)]
pub(super) struct ProbeView {
    pub reachable: bool,
    pub identity: Option<String>,
    pub message: String,
    pub fingerprint: Option<String>,
    pub facts: Vec<(String, String)>,
    pub warnings: Vec<String>,
    pub steps: Vec<StepView>,
    pub grades: Vec<GradeView>,
}

#[derive(Debug, Clone)]
pub(super) struct StepView {
    pub number: u8,
    pub name: String,
    pub status: String,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone)]
pub(super) struct GradeView {
    pub capability: String,
    pub grade: &'static str,
    pub detail: String,
    /// A failed capability is not advertised: no plan can bind it.
    pub advertised: bool,
}

fn grade_name(g: &GradeDto) -> &'static str {
    match g {
        GradeDto::Proven => "proven",
        GradeDto::Inferred => "inferred",
        GradeDto::Unverifiable => "unverifiable",
        GradeDto::Failed => "failed",
    }
}

fn grades(list: &[crate::dto::CapabilityGrade]) -> Vec<GradeView> {
    list.iter()
        .map(|g| GradeView {
            capability: g.capability.clone(),
            grade: grade_name(&g.grade),
            detail: g.detail.clone(),
            advertised: g.grade != GradeDto::Failed,
        })
        .collect()
}

impl From<&ControllerTest> for ProbeView {
    fn from(t: &ControllerTest) -> Self {
        ProbeView {
            reachable: t.reachable,
            identity: t.identity.clone(),
            message: t.message.clone(),
            fingerprint: t.tls_fingerprint.clone().or_else(|| {
                // A certificate the configured trust refuses is the first test's usual case
                // (a BMC's self-signed certificate); the TLS layer then names what it was
                // shown only in the connectivity step's note ("it shows sha256:HEX, which can
                // be pinned"). Offer that one to pin; the next test proves it.
                t.steps
                    .iter()
                    .flat_map(|s| s.notes.iter())
                    .find_map(|n| shown_fingerprint(n))
            }),
            facts: t
                .facts
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            warnings: t.warnings.clone(),
            steps: t
                .steps
                .iter()
                .map(|st| StepView {
                    number: st.number,
                    name: st.name.clone(),
                    status: st.status.clone(),
                    notes: st.notes.clone(),
                })
                .collect(),
            grades: grades(&t.grades),
        }
    }
}

/// The `sha256:HEX` a TLS refusal says the target showed, if the note says one.
fn shown_fingerprint(note: &str) -> Option<String> {
    let at = note.find("it shows sha256:")? + "it shows ".len();
    let hex: String = note[at + "sha256:".len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (hex.len() == 64).then(|| format!("sha256:{hex}"))
}

impl ProbeView {
    /// The backend's sentence without the steps' summary when the steps are listed anyway.
    pub fn headline(&self) -> &str {
        if self.steps.is_empty() {
            return &self.message;
        }
        match self.message.find(" 1. ") {
            Some(i) => &self.message[..i],
            None => &self.message,
        }
    }
}

/// One per-type field, as drawn.
#[derive(Debug, Clone)]
pub(super) struct TypeField {
    pub key: String,
    pub label: String,
    pub types: String,
    pub placeholder: String,
    pub value: String,
    pub errors: Vec<String>,
}

/// The registration page, at one step.
#[derive(Template)]
#[template(path = "console/register.html")]
pub(super) struct RegisterPage {
    pub who: Option<crate::auth::Caller>,
    pub title: String,
    pub step: u8,
    pub steps: Vec<(u8, &'static str)>,
    pub name: String,
    pub types: Vec<Opt>,
    pub type_hint: String,
    pub sites: Vec<Opt>,
    pub reach: Vec<(String, bool)>,
    pub timeout_seconds: String,
    pub type_fields: Vec<TypeField>,
    pub tls_modes: Vec<Opt>,
    pub tls_ca_file: String,
    pub tls_pin: String,
    pub pinned: bool,
    pub secret: String,
    pub hidden: Vec<(String, String)>,
    pub issues: FieldIssues,
    pub banner: Option<String>,
    pub probe: Option<ProbeView>,
    /// Warnings validation had about the controller.
    pub validation_warnings: Vec<String>,
    /// The controller as it will be registered (JSON), for the last steps.
    pub spec: String,
    pub data: String,
}

fn options_of(values: &[(String, String)], current: &str, blank: &str) -> Vec<Opt> {
    let mut out = vec![Opt {
        value: String::new(),
        label: blank.to_owned(),
        selected: current.is_empty(),
    }];
    for (v, l) in values {
        out.push(Opt {
            value: v.clone(),
            label: l.clone(),
            selected: v == current,
        });
    }
    if !current.is_empty() && !values.iter().any(|(v, _)| v == current) {
        out.push(Opt {
            value: current.to_owned(),
            label: format!("{current} (not known)"),
            selected: true,
        });
    }
    out
}

struct Context {
    sites: Vec<String>,
    controllers: Vec<String>,
    base: String,
}

async fn context(s: &AppState, session: &Session) -> Result<Context, Response> {
    let base = s
        .backend
        .config_source()
        .await
        .map_err(|e| super::error_page(Some(session), &e))?;
    let cfg = base_config(&base).map_err(|e| super::error_page(Some(session), &e))?;
    let c = cfg.config();
    Ok(Context {
        sites: c
            .sites
            .iter()
            .filter(|(_, s)| !s.witness)
            .map(|(id, _)| id.as_str().to_owned())
            .collect(),
        controllers: c
            .controllers
            .keys()
            .map(|id| id.as_str().to_owned())
            .collect(),
        base,
    })
}

#[allow(clippy::too_many_arguments)]
fn register_page(
    session: &Session,
    ctx: &Context,
    form: &ControllerForm,
    step: u8,
    issues: FieldIssues,
    probe: Option<ProbeView>,
    validation_warnings: Vec<String>,
) -> RegisterPage {
    let ty = form.get("type");
    let types: Vec<(String, String)> = ControllerType::ALL
        .iter()
        .map(|t| (t.as_str().to_owned(), t.as_str().to_owned()))
        .collect();
    let sites: Vec<(String, String)> = ctx.sites.iter().map(|s| (s.clone(), s.clone())).collect();
    let reach = form.reach();
    let (spec, _) = form.to_spec();
    let banner = if issues.is_empty() {
        None
    } else {
        Some(format!(
            "{} to fix before going on. Each is shown next to its field.",
            super::editor::issues_count(issues.count())
        ))
    };
    let data = json!({
        "types": ControllerType::ALL
            .iter()
            .map(|t| (t.as_str().to_owned(), json!(type_hint(*t))))
            .collect::<Map<String, Value>>(),
    });
    RegisterPage {
        who: Some(session.caller.clone()),
        title: "Register a controller".into(),
        step,
        steps: STEPS
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u8 + 1, *t))
            .collect(),
        name: form.get("name"),
        types: options_of(&types, &ty, "— type —"),
        type_hint: ty
            .parse::<ControllerType>()
            .map(type_hint)
            .unwrap_or("")
            .to_owned(),
        sites: options_of(&sites, &form.get("site"), "— site —"),
        reach: ctx
            .sites
            .iter()
            .map(|s| (s.clone(), reach.contains(s)))
            .collect(),
        timeout_seconds: form.get("timeout_seconds"),
        type_fields: TYPE_FIELDS
            .iter()
            .map(|(k, l, p)| TypeField {
                key: (*k).into(),
                label: (*l).into(),
                types: types_with(k),
                placeholder: (*p).into(),
                value: form.get(k),
                errors: issues.get(k),
            })
            .collect(),
        tls_modes: {
            let cur = form.get("tls_mode");
            [
                ("", "the system's root certificates"),
                ("pin", "pin a certificate fingerprint"),
                ("ca_file", "a CA file"),
                ("insecure", "accept any certificate (labs only)"),
            ]
            .iter()
            .map(|(v, l)| Opt {
                value: (*v).into(),
                label: (*l).into(),
                selected: cur == *v,
            })
            .collect()
        },
        tls_ca_file: form.get("tls_ca_file"),
        tls_pin: form.get("tls_pin"),
        pinned: form.pinned(),
        secret: form.get("secret"),
        hidden: form.hidden(step),
        issues,
        banner,
        probe,
        validation_warnings,
        spec: serde_json::to_string_pretty(&spec).unwrap_or_default(),
        data: script_json(&data),
    }
}

/// Validates the form up to `upto`: the checked controller when nothing stops it, and the
/// issues placed on their fields with the earliest step that has one.
fn validate(
    ctx: &Context,
    form: &ControllerForm,
    upto: u8,
) -> (
    Option<CheckedController>,
    FieldIssues,
    Option<u8>,
    Vec<String>,
) {
    let (spec, mut issues) = form.to_spec();
    let mut earliest = if issues.is_empty() { None } else { Some(1) };
    let name = form.get("name");
    let id = match ControllerId::new(name.as_str()) {
        Ok(id) if ctx.controllers.contains(&name) => {
            issues.add(
                Some("name".into()),
                format!("controller {name:?} already exists; pick another name"),
            );
            earliest = Some(1);
            Some(id)
        }
        Ok(id) => Some(id),
        Err(e) => {
            let m = if name.is_empty() {
                "missing: the controller needs a name".to_owned()
            } else {
                format!("{name:?} is not a controller name: {e}")
            };
            issues.add(Some("name".into()), m);
            earliest = Some(1);
            None
        }
    };
    let checked_name = id
        .as_ref()
        .map_or("new-controller".to_owned(), |i| i.as_str().to_owned());
    let mut warnings = Vec::new();
    let checked = match plan_api::check_controller(&ctx.base, &checked_name, &spec) {
        Ok(c) => {
            warnings = c
                .warnings
                .iter()
                .map(|w| format!("{}: {}", w.path, w.message))
                .collect();
            Some(c)
        }
        Err(found) => {
            if let Some(e) = place(&mut issues, &found, &checked_name, upto) {
                earliest = Some(earliest.map_or(e, |x| x.min(e)));
            }
            None
        }
    };
    let ok = match (checked, id) {
        (Some(c), Some(id)) if issues.is_empty() => Some(CheckedController {
            name: id,
            spec,
            config: c.value,
            warnings: c.warnings,
        }),
        _ => None,
    };
    (ok, issues, earliest, warnings)
}

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

// ---- the list and the test button ----

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
    pub who: Option<crate::auth::Caller>,
    pub title: String,
    pub admin: bool,
    pub rows: Vec<ControllerRow>,
    pub registered: Option<String>,
}

#[derive(Template)]
#[template(path = "console/register_test.html")]
pub(super) struct TestPage {
    pub who: Option<crate::auth::Caller>,
    pub title: String,
    pub controller: String,
    pub probe: ProbeView,
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    registered: Option<String>,
}

async fn list(session: Session, State(s): State<AppState>, Query(q): Query<ListQuery>) -> Response {
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
        Err(e) => super::error_page(Some(&session), &e),
    }
}

async fn test(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Response {
    if !session.admin() {
        return forbidden(&session, "Testing a controller");
    }
    let Ok(id) = ControllerId::new(name.as_str()) else {
        return super::error_page(
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
        Err(e) => super::error_page(Some(&session), &e),
    }
}

/// Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(epoch: u64) -> String {
    format!(
        "{} UTC",
        qfence_model::time::utc(epoch.saturating_mul(1000))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_key_has_a_field() {
        let typed = ControllerType::ALL
            .into_iter()
            .flat_map(keys::controller_type);
        for k in keys::CONTROLLER.iter().chain(typed) {
            // `tls` is chosen by tls_mode and its own fields.
            let field = if *k == "tls" { "tls_mode" } else { k };
            assert!(FIELDS.iter().any(|(f, _)| *f == field), "no field for {k}");
            let per_type = TYPE_FIELDS.iter().any(|(f, _, _)| f == k);
            assert_eq!(
                per_type,
                !keys::CONTROLLER.contains(k) && *k != "tls",
                "{k}"
            );
        }
    }

    #[test]
    fn pasted_credentials_are_told_apart_from_names() {
        assert!(looks_inline("3f1c2d9e-8a7b-4c6d-9e0f-1a2b3c4d5e6f").is_some());
        assert!(looks_inline("Xk29fLq0Pz7RtY3mWn8Bv").is_some());
        assert!(looks_inline("lab-redfish").is_none());
        assert!(looks_inline("bmc_dc1.password-ref").is_none());
        assert!(looks_inline("").is_none());
    }

    #[test]
    fn issue_paths_name_fields_and_steps() {
        assert_eq!(
            field_of("controllers.bmc-x.secret", "bmc-x").as_deref(),
            Some("secret")
        );
        assert_eq!(
            field_of("controllers.bmc-x.tls.pin", "bmc-x").as_deref(),
            Some("tls")
        );
        assert_eq!(
            field_of("controllers.bmc-x.reach[1]", "bmc-x").as_deref(),
            Some("reach")
        );
        assert_eq!(field_of("controllers.bmc-x", "bmc-x"), None);
        assert_eq!(step_of("secret"), 2);
        assert_eq!(step_of("endpoint"), 1);
        assert_eq!(step_of("tls"), 1);
    }

    #[test]
    fn the_spec_has_only_the_chosen_types_fields() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let form = ControllerForm::from_fields(&[
            f("name", "bmc-x"),
            f("type", "redfish"),
            f("site", "dc1"),
            f("reach", "dc2"),
            f("endpoint", "https://127.0.0.1:9443"),
            f("username", "qfence"),
            f("token_id", "left@over!typed"),
            f("tls_mode", "insecure"),
            f("secret", "lab-redfish"),
        ]);
        let (spec, issues) = form.to_spec();
        assert!(issues.is_empty());
        assert_eq!(
            spec,
            json!({"type": "redfish", "site": "dc1", "reach": ["dc2"], "secret": "lab-redfish",
                   "endpoint": "https://127.0.0.1:9443", "username": "qfence",
                   "tls": {"insecure": true}})
        );
        // Hidden at step 2: everything but the secret, the left-over field included.
        let hidden = form.hidden(2);
        assert!(
            hidden
                .iter()
                .any(|(k, v)| k == "token_id" && v == "left@over!typed")
        );
        assert!(!hidden.iter().any(|(k, _)| k == "secret"));
    }

    #[test]
    fn a_ticked_pin_replaces_the_tls_choice() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let form = ControllerForm::from_fields(&[
            f("type", "redfish"),
            f("tls_mode", "insecure"),
            f("probed_fingerprint", "sha256:ab"),
            f("pin_fingerprint", "true"),
        ]);
        assert_eq!(form.to_spec().0["tls"], json!({"pin": "sha256:ab"}));
    }

    #[test]
    fn a_refused_certificate_is_offered_to_pin() {
        let hex = "efd3340406fdc63b214dac9252937feff14944e142bf5330675e0a99a4ea56ec";
        let note = format!(
            "certificate not trusted (invalid peer certificate: UnknownIssuer); it shows \
             sha256:{hex}, which can be pinned with tls: {{pin: \"sha256:{hex}\"}}"
        );
        assert_eq!(shown_fingerprint(&note), Some(format!("sha256:{hex}")));
        assert_eq!(shown_fingerprint("it shows sha256:abc"), None);
        assert_eq!(shown_fingerprint("connection refused"), None);
    }

    #[test]
    fn passwords_are_taken_out_of_endpoints() {
        assert_eq!(
            without_password("https://qfence:hunter2@127.0.0.1:9443/redfish").as_deref(),
            Some("https://qfence@127.0.0.1:9443/redfish")
        );
        assert_eq!(without_password("https://qfence@127.0.0.1:9443"), None);
        assert_eq!(without_password("https://127.0.0.1:9443"), None);
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }
}
