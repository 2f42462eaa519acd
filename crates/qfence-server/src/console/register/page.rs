//! What the registration pages show: a probe's result, the grades, and the page of a step.

use askama::Template;
use axum::response::Response;
use qfence_model::ControllerType;
use serde_json::{Map, Value, json};

use super::STEPS;
use super::form::*;
use crate::api::AppState;
use crate::console::Session;
use crate::console::editor::{FieldIssues, Opt, base_config, script_json};
use qfence_runtime::dto::{ControllerTest, GradeDto};

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

pub(super) fn grade_name(g: &GradeDto) -> &'static str {
    match g {
        GradeDto::Proven => "proven",
        GradeDto::Inferred => "inferred",
        GradeDto::Unverifiable => "unverifiable",
        GradeDto::Failed => "failed",
    }
}

pub(super) fn grades(list: &[qfence_runtime::dto::CapabilityGrade]) -> Vec<GradeView> {
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
pub(super) fn shown_fingerprint(note: &str) -> Option<String> {
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
    pub who: Option<qfence_runtime::auth::Caller>,
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

pub(super) fn options_of(values: &[(String, String)], current: &str, blank: &str) -> Vec<Opt> {
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

/// What every step needs from the configuration: the sites that may call a controller,
/// the names taken, and the configuration text to validate against.
pub(super) struct Context {
    pub(super) sites: Vec<String>,
    pub(super) controllers: Vec<String>,
    pub(super) base: String,
}

pub(super) async fn context(s: &AppState, session: &Session) -> Result<Context, Response> {
    let base = s
        .backend
        .config_source()
        .await
        .map_err(|e| crate::console::error_page(Some(session), &e))?;
    let cfg = base_config(&base).map_err(|e| crate::console::error_page(Some(session), &e))?;
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
pub(super) fn register_page(
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
            crate::console::editor::issues_count(issues.count())
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
