//! What the editor page offers: the choices (controllers, capabilities, roles, discovered
//! resources) and the page drawn from a form and its issues.

use std::collections::BTreeMap;

use askama::Template;
use axum::response::Response;
use qfence_model::config::ValidatedConfig;
use qfence_model::{ControllerType, Role};
use serde_json::{Map, Value, json};

use crate::api::AppState;
use crate::console::Session;

use super::form::*;
use super::*;

// ---- what the page offers ----

/// One `<option>`.
#[derive(Debug, Clone)]
pub(in crate::console) struct Opt {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

pub(super) fn opt(value: &str, label: impl Into<String>, current: &str) -> Opt {
    Opt {
        value: value.to_owned(),
        label: label.into(),
        selected: value == current,
    }
}

/// Options from `values`, with the current value kept even when it does not fit (marked),
/// so nothing typed is lost and the error next to it says why.
pub(super) fn options(values: &[(String, String)], current: &str, blank: &str) -> Vec<Opt> {
    let mut out = vec![opt("", blank, current)];
    out.extend(values.iter().map(|(v, l)| opt(v, l.clone(), current)));
    if !current.is_empty() && !values.iter().any(|(v, _)| v == current) {
        out.push(opt(current, format!("{current} (does not fit)"), current));
    }
    out
}

/// A resource a controller discovered, offered in the resource field.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::console) struct Offered {
    pub capability: String,
    pub resource: String,
    pub description: String,
}

/// What the form may offer: the configuration's sites and controllers, and what each
/// controller discovered.
pub(in crate::console) struct Choices {
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
    pub(super) fn new(
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
    pub(super) fn json(&self) -> Value {
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

    pub(super) fn capability_spec(
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
pub(in crate::console) struct RowView {
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
pub(in crate::console) struct GroupView {
    pub name: String,
    pub title: String,
    pub service: bool,
    pub rows: Vec<RowView>,
}

pub(super) fn row_view(row: &Row, service: bool, ch: &Choices) -> RowView {
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
pub(in crate::console) struct TimingView {
    pub key: String,
    pub label: String,
    pub value: String,
    pub default: String,
}

/// A yes/no field, as drawn.
#[derive(Debug, Clone)]
pub(in crate::console) struct SwitchView {
    pub key: String,
    pub label: String,
    pub options: Vec<Opt>,
}

/// The editor page.
#[derive(Template)]
#[template(path = "console/editor.html")]
pub(in crate::console) struct EditorPage {
    pub who: Option<qfence_runtime::auth::Caller>,
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

pub(super) fn editor_page(
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
pub(super) async fn discovered(
    s: &AppState,
    cfg: &ValidatedConfig,
) -> BTreeMap<String, Vec<Offered>> {
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

pub(super) const DISCOVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The configuration and choices, or the error page.
pub(super) async fn choices(s: &AppState, session: &Session) -> Result<Choices, Response> {
    let text = s
        .backend
        .config_source()
        .await
        .map_err(|e| crate::console::error_page(Some(session), &e))?;
    let cfg = base_config(&text).map_err(|e| crate::console::error_page(Some(session), &e))?;
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
                .filter(|g| g.grade == qfence_runtime::dto::GradeDto::Failed)
                .map(|g| g.capability)
                .collect();
            (c.name, caps)
        })
        .filter(|(_, caps)| !caps.is_empty())
        .collect();
    Ok(Choices::new(&cfg, found, failed))
}
