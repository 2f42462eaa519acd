//! A plan's page: its status (live), the plan drawn as in the guide's diagram, the history of
//! its failovers from the event log, the dry run, and the operator actions — switchover,
//! failover, confirm fenced — each with a confirmation step that shows what the dry run says
//! would happen and carries the generation the operator saw (a moved plan is refused). The
//! actions are a live part too: the ones the plan's state offers, with its generation.

use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use qfence_model::{PlanId, SiteId};

use super::actions::{Confirmed, Offer, PlanAction};
use super::diagram::{self, Diagram};
use super::timeline::{self, MoveChart};
use super::{FormSession, Session, encode, error_page, fmt_ms, page};
use crate::api::AppState;
use qfence_runtime::auth::Caller;
use qfence_runtime::backend::BackendError;
use qfence_runtime::dto::{DryRun, DryRunResult, LeaderInfo, PlanStatus, PlanView};
use qfence_runtime::events::{Event, EventKind};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/plans/{plan}", get(plan_page))
        .route("/plans/{plan}/actions", post(action))
}

/// A failover-history row.
#[derive(Debug, Clone)]
pub(crate) struct HistoryRow {
    pub time: String,
    pub kind: &'static str,
    pub actor: String,
    pub generation: String,
    pub message: String,
}

/// The plan's status panel, actions, timeline and history: rendered in the page and, by
/// themselves, for the live updates.
#[derive(Debug)]
pub(crate) struct PlanLive {
    pub plan: String,
    /// Whether the caller may act: the actions part offers forms, or says who may.
    pub operator: bool,
    pub status: Option<PlanStatus>,
    pub history: Vec<HistoryRow>,
    /// The plan's moves, drawn (newest first).
    pub timeline: Vec<MoveChart>,
    /// Who leads, as this orchestrator sees it: each orchestrator keeps its own event log, so
    /// the history here is what this one recorded.
    pub leader: LeaderInfo,
}

/// The status panel alone.
#[derive(Template)]
#[template(path = "console/plan_status.html")]
pub(crate) struct PlanStatusPart<'a> {
    pub plan: &'a str,
    pub status: &'a Option<PlanStatus>,
}

/// The action area alone: the forms of the actions the plan's status offers, each carrying
/// its generation, and why the others are not offered.
#[derive(Template)]
#[template(path = "console/plan_actions.html")]
pub(super) struct PlanActionsPart<'a> {
    plan: &'a str,
    status: &'a Option<PlanStatus>,
    operator: bool,
    offers: Vec<Offer>,
}

impl<'a> PlanActionsPart<'a> {
    fn new(plan: &'a str, status: &'a Option<PlanStatus>, operator: bool) -> Self {
        let offers = status
            .iter()
            .flat_map(|st| PlanAction::ALL.into_iter().filter_map(|a| a.offer(st)))
            .collect();
        Self {
            plan,
            status,
            operator,
            offers,
        }
    }

    fn offer(&self, op: &str) -> Option<&Offer> {
        self.offers.iter().find(|o| o.action.as_str() == op)
    }

    /// What the actions depend on, for the page to tell an update from the same part again.
    fn state(&self) -> String {
        self.status
            .as_ref()
            .map(|st| {
                let maintenance: Vec<&str> = st
                    .sites
                    .iter()
                    .filter(|s| s.maintenance)
                    .map(|s| s.site.as_str())
                    .collect();
                format!(
                    "{} {} {} {} [{}]",
                    st.generation,
                    st.owner,
                    st.paused,
                    st.phase,
                    maintenance.join(",")
                )
            })
            .unwrap_or_default()
    }
}

/// The moves' timelines alone.
#[derive(Template)]
#[template(path = "console/plan_timeline.html")]
pub(crate) struct PlanTimelinePart<'a> {
    pub moves: &'a [MoveChart],
    pub leader: &'a LeaderInfo,
}

/// The history table alone.
#[derive(Template)]
#[template(path = "console/plan_history.html")]
pub(crate) struct PlanHistoryPart<'a> {
    pub history: &'a [HistoryRow],
    pub leader: &'a LeaderInfo,
}

impl PlanLive {
    /// Loads what the live part shows, for a caller who may act (`operator`) or not.
    pub async fn load(s: &AppState, plan: &str, operator: bool) -> Result<Self, BackendError> {
        let all = s.backend.status().await?;
        let status = all.plans.into_iter().find(|p| p.plan == plan);
        let records = crate::records::of_plan(s.backend.as_ref(), plan).await?;
        let history = history(&records);
        let moves = qfence_runtime::timeline::timeline(plan, &records);
        Ok(Self {
            plan: plan.to_owned(),
            operator,
            status,
            history,
            timeline: timeline::charts(&moves, qfence_model::time::now_unix_ms()),
            leader: all.leader,
        })
    }

    /// The live parts, rendered: (element id, HTML).
    pub fn render_parts(&self) -> Result<Vec<(&'static str, String)>, askama::Error> {
        Ok(vec![
            (
                "plan-status-live",
                PlanStatusPart {
                    plan: &self.plan,
                    status: &self.status,
                }
                .render()?,
            ),
            (
                "plan-actions",
                PlanActionsPart::new(&self.plan, &self.status, self.operator).render()?,
            ),
            (
                "plan-history",
                PlanHistoryPart {
                    history: &self.history,
                    leader: &self.leader,
                }
                .render()?,
            ),
            (
                "plan-timeline",
                PlanTimelinePart {
                    moves: &self.timeline,
                    leader: &self.leader,
                }
                .render()?,
            ),
        ])
    }
}

/// The records of the plan's log that tell its failovers: operator requests, decisions that
/// changed its state, committed changes of owner, alarms. Newest first, at most 30.
fn history(records: &[Event]) -> Vec<HistoryRow> {
    records
        .iter()
        .rev()
        .filter(|e| tells_a_failover(e))
        .take(30)
        .map(|e| HistoryRow {
            time: fmt_ms(e.time_ms),
            kind: e.kind.as_str(),
            actor: e.actor.clone(),
            generation: e.generation.map(|g| g.to_string()).unwrap_or_default(),
            message: e.message.clone(),
        })
        .collect()
}

fn tells_a_failover(e: &Event) -> bool {
    match e.kind {
        EventKind::Operator | EventKind::Alarm => true,
        EventKind::Decision => {
            e.data.get("state_change").and_then(|v| v.as_bool()) == Some(true)
                || e.message.contains(" committed: owner ")
        }
        _ => false,
    }
}

#[derive(Template)]
#[template(path = "console/plan.html")]
struct PlanPage {
    who: Option<Caller>,
    title: String,
    live: PlanLive,
    /// The live parts rendered (what the live updates replace).
    status_html: String,
    actions_html: String,
    history_html: String,
    timeline_html: String,
    view: PlanView,
    diagram: Diagram,
    /// The sites of the plan, in the order written.
    sites: Vec<String>,
    notice: Option<String>,
    dry: Option<DryRunResult>,
    dry_error: Option<String>,
    /// What the dry-run form last asked, kept.
    dry_action: String,
    dry_target: String,
    staged_json: Option<String>,
}

impl PlanPage {
    fn selected(&self, what: &str, value: &str) -> bool {
        match what {
            "action" => self.dry_action == value,
            _ => self.dry_target == value,
        }
    }
}

/// The plan as the configuration writes it (instances, service, bindings). A backend whose
/// plan view is a summary (plans from the configuration file) has it in its configuration
/// source, validated the same way as the file.
async fn plan_spec(s: &AppState, id: &PlanId, view: &PlanView) -> serde_json::Value {
    if view.spec.get("instances").is_some() {
        return view.spec.clone();
    }
    let Ok(text) = s.backend.config_source().await else {
        return view.spec.clone();
    };
    match qfence_model::config::load_str(&text, "the configuration in force") {
        Ok(loaded) => loaded
            .config
            .config()
            .plans
            .get(id)
            .and_then(|p| serde_json::to_value(p).ok())
            .unwrap_or_else(|| view.spec.clone()),
        Err(_) => view.spec.clone(),
    }
}

#[derive(Debug, Deserialize)]
struct PlanQuery {
    notice: Option<String>,
    /// A dry run: `cycle`, `apply_staged`, `switchover`, `failover`.
    dry: Option<String>,
    target: Option<String>,
}

fn dry_request(action: &str, target: Option<&str>) -> Result<DryRun, String> {
    let target = target.filter(|t| !t.is_empty()).map(str::to_owned);
    match action {
        "cycle" => Ok(DryRun::Cycle),
        "apply_staged" => Ok(DryRun::ApplyStaged),
        "switchover" => target
            .map(|target| DryRun::Switchover { target })
            .ok_or_else(|| "a switchover needs a target site".to_owned()),
        "failover" => Ok(DryRun::Failover { target }),
        other => Err(format!(
            "{other:?} is not a dry run: cycle, apply_staged, switchover, failover"
        )),
    }
}

async fn plan_page(
    session: Session,
    State(s): State<AppState>,
    Path(plan): Path<String>,
    Query(q): Query<PlanQuery>,
) -> Response {
    let id = match PlanId::new(&plan) {
        Ok(id) => id,
        Err(e) => {
            return error_page(
                Some(&session),
                &BackendError::Invalid {
                    message: format!("{plan:?} is not a plan name: {e}"),
                    issues: vec![],
                },
            );
        }
    };
    let view = match s.backend.plan(&id).await {
        Ok(v) => v,
        Err(e) => return error_page(Some(&session), &e),
    };
    let live = match PlanLive::load(&s, &plan, session.operator()).await {
        Ok(l) => l,
        Err(e) => return error_page(Some(&session), &e),
    };
    let controllers = s.backend.controllers().await.unwrap_or_default();
    let spec = plan_spec(&s, &id, &view).await;
    let diagram = diagram::layout(&plan, &spec, live.status.as_ref(), &controllers);
    let sites: Vec<String> = match spec.get("instances").and_then(|i| i.as_object()) {
        Some(o) => o.keys().cloned().collect(),
        None => live
            .status
            .iter()
            .flat_map(|st| st.sites.iter().map(|x| x.site.clone()))
            .collect(),
    };
    let (mut dry, mut dry_error) = (None, None);
    if let Some(action) = q.dry.as_deref() {
        match dry_request(action, q.target.as_deref()) {
            Ok(what) => match s.backend.dry_run(&id, &what).await {
                Ok(r) => dry = Some(r),
                Err(e) => dry_error = Some(e.to_string()),
            },
            Err(e) => dry_error = Some(e),
        }
    }
    let staged_json = view
        .staged
        .as_ref()
        .and_then(|st| serde_json::to_string_pretty(&st.spec).ok());
    let (status_html, actions_html, history_html, timeline_html) = match live.render_parts() {
        Ok(parts) => {
            let part = |id: &str| {
                parts
                    .iter()
                    .find(|(i, _)| *i == id)
                    .map(|(_, h)| h.clone())
                    .unwrap_or_default()
            };
            (
                part("plan-status-live"),
                part("plan-actions"),
                part("plan-history"),
                part("plan-timeline"),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "A console template failed to render: this is a bug");
            return super::error_page(
                Some(&session),
                &BackendError::Unavailable("the page could not be rendered".into()),
            );
        }
    };
    page(&PlanPage {
        status_html,
        actions_html,
        history_html,
        timeline_html,
        who: Some(session.caller),
        title: plan.clone(),
        live,
        view,
        diagram,
        sites,
        notice: q.notice,
        dry,
        dry_error,
        dry_action: q.dry.unwrap_or_else(|| "cycle".into()),
        dry_target: q.target.unwrap_or_default(),
        staged_json,
    })
}

/// The actions form, as posted: first without `confirmed` (the confirmation step), then with.
#[derive(Debug, Clone, Deserialize)]
struct ActionForm {
    /// A [`PlanAction`]'s form value.
    op: String,
    /// The target (switchover, failover) or the site vouched for (confirm fenced).
    #[serde(default)]
    site: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    expected_generation: String,
    /// With `maintenance`: `on` takes the site into maintenance, `off` out of it.
    #[serde(default)]
    enabled: String,
    confirmed: Option<String>,
}

#[derive(Template)]
#[template(path = "console/confirm.html")]
struct ConfirmPage {
    who: Option<Caller>,
    title: String,
    plan: String,
    form: ActionForm,
    action: PlanAction,
    /// What is asked, in words: "Switch erp-db over to dc2".
    question: String,
    /// The confirm button's text.
    button: String,
    /// What the operator takes on by confirming, when it is more than the dry run shows.
    warning: Option<String>,
    /// What the dry run says would happen (switchover, failover).
    dry: Option<DryRunResult>,
    dry_error: Option<String>,
    /// A field's problem: (field, message).
    field_error: Option<(String, String)>,
    /// The backend's refusal of the confirmed action.
    error: Option<String>,
    danger: bool,
}

impl ConfirmPage {
    fn error_for(&self, field: &str) -> Option<String> {
        self.field_error
            .as_ref()
            .filter(|(f, _)| f == field)
            .map(|(_, m)| m.clone())
    }
}

async fn action(
    FormSession(session): FormSession,
    State(s): State<AppState>,
    Path(plan): Path<String>,
    axum::Form(form): axum::Form<ActionForm>,
) -> Response {
    let action = match PlanAction::parse(&form.op) {
        Ok(action) => action,
        Err(message) => {
            let e = BackendError::Invalid {
                message,
                issues: vec![],
            };
            return error_page(Some(&session), &e);
        }
    };
    if !session.operator() {
        let e = BackendError::Refused(format!(
            "your role ({}) may not {}: that needs an operator or admin token",
            session.caller.access,
            action.label()
        ));
        return (StatusCode::FORBIDDEN, error_page(Some(&session), &e)).into_response();
    }
    let id = match PlanId::new(&plan) {
        Ok(id) => id,
        Err(e) => {
            return error_page(
                Some(&session),
                &BackendError::NotFound {
                    what: "plan",
                    name: format!("{plan} ({e})"),
                },
            );
        }
    };
    let words = action.wording(&plan, &form.site, &form.enabled);
    let mut confirm = ConfirmPage {
        who: Some(session.caller.clone()),
        title: format!("Confirm: {plan}"),
        plan: plan.clone(),
        form: form.clone(),
        action,
        question: words.question,
        button: words.button,
        warning: words.warning,
        dry: None,
        dry_error: None,
        field_error: None,
        error: None,
        danger: action.danger(),
    };

    // The form's own checks, each next to its field, before anything is asked of the backend.
    let (generation, site) = check_fields(action, &form, &mut confirm);
    let Some(generation) = generation else {
        return (StatusCode::UNPROCESSABLE_ENTITY, page(&confirm)).into_response();
    };
    if confirm.field_error.is_some() {
        return (StatusCode::UNPROCESSABLE_ENTITY, page(&confirm)).into_response();
    }

    // What would happen: shown on the confirmation step (and again if the backend refuses).
    if let Some(what) = action.dry_run(&form.site, site.as_ref()) {
        match s.backend.dry_run(&id, &what).await {
            Ok(r) => confirm.dry = Some(r),
            Err(e) => confirm.dry_error = Some(e.to_string()),
        }
    }
    if form.confirmed.as_deref() != Some("yes") {
        return page(&confirm);
    }

    let confirmed = Confirmed {
        caller: &session.caller,
        plan: &id,
        site,
        expected_generation: generation,
        reason: Some(form.reason.trim().to_owned()).filter(|r| !r.is_empty()),
        enabled: form.enabled == "on",
    };
    match action.perform(s.backend.as_ref(), confirmed).await {
        Ok(accepted) => {
            let notice = format!(
                "{} accepted at generation {}: {}",
                accepted.operation, accepted.generation, accepted.reason
            );
            Redirect::to(&format!(
                "/plans/{}?notice={}",
                encode(&plan),
                encode(&notice)
            ))
            .into_response()
        }
        Err(e) => {
            let status = match &e {
                BackendError::NotFound { .. } => StatusCode::NOT_FOUND,
                BackendError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                BackendError::NotLeader { .. } | BackendError::Unavailable(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::CONFLICT,
            };
            confirm.error = Some(e.to_string());
            (status, page(&confirm)).into_response()
        }
    }
}

/// The generation and the site the form carries, each problem put next to its field on
/// `confirm` (the last one found wins, as the page shows one).
fn check_fields(
    action: PlanAction,
    form: &ActionForm,
    confirm: &mut ConfirmPage,
) -> (Option<u64>, Option<SiteId>) {
    let generation = match form.expected_generation.trim().parse::<u64>() {
        Ok(g) => Some(g),
        Err(_) => {
            confirm.field_error = Some((
                "expected_generation".into(),
                format!(
                    "{:?} is not a generation (a whole number): reload the plan's page",
                    form.expected_generation
                ),
            ));
            None
        }
    };
    let site = if form.site.is_empty() && action.site_optional() {
        None
    } else {
        match SiteId::new(&form.site) {
            Ok(site) => Some(site),
            Err(e) => {
                confirm.field_error = Some(("site".into(), format!("pick a site ({e})")));
                None
            }
        }
    };
    if action.takes_enabled() && !matches!(form.enabled.as_str(), "on" | "off") {
        confirm.field_error = Some((
            "enabled".into(),
            format!("{:?} is neither on nor off", form.enabled),
        ));
    }
    if action == PlanAction::ConfirmFenced && form.reason.trim().is_empty() {
        confirm.field_error = Some((
            "reason".into(),
            "say how you know the site is stopped: it goes to the event log".into(),
        ));
    }
    (generation, site)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_runs_are_read_from_the_query() {
        assert_eq!(dry_request("cycle", None), Ok(DryRun::Cycle));
        assert_eq!(
            dry_request("switchover", Some("dc2")),
            Ok(DryRun::Switchover {
                target: "dc2".into()
            })
        );
        assert!(dry_request("switchover", Some("")).is_err());
        assert_eq!(
            dry_request("failover", Some("")),
            Ok(DryRun::Failover { target: None })
        );
        assert!(dry_request("explode", None).unwrap_err().contains("cycle"));
    }
}
