//! The sites page: for each site, its orchestrators (the leader marked, whether the leader
//! hears from each), the plans it owns, the plans it stands by for, and its alarms (a standby
//! not proven fenced, a binding that cannot work, a move halted at it).

use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;

use super::overview::alarms;
use super::{Session, error_page, fmt_ms, page};
use crate::api::AppState;
use qfence_runtime::auth::Caller;
use qfence_runtime::dto::{OrchestratorView, SiteRole, StatusResponse};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/sites", get(sites))
}

/// One site, as the page shows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SiteCard {
    pub name: String,
    pub orchestrators: Vec<OrchestratorView>,
    /// The plans it owns.
    pub owns: Vec<String>,
    /// How many plans it stands by for.
    pub standby: usize,
    /// (plan, alarm).
    pub alarms: Vec<(String, String)>,
}

/// Every site named by an orchestrator or a plan, in name order.
pub(crate) fn cards(status: &StatusResponse, orchestrators: &[OrchestratorView]) -> Vec<SiteCard> {
    type Cards = std::collections::BTreeMap<String, SiteCard>;
    fn card<'a>(cards: &'a mut Cards, name: &str) -> &'a mut SiteCard {
        cards.entry(name.to_owned()).or_insert_with(|| SiteCard {
            name: name.to_owned(),
            ..Default::default()
        })
    }
    let mut cards = Cards::new();
    for o in orchestrators {
        card(&mut cards, &o.site).orchestrators.push(o.clone());
    }
    for p in &status.plans {
        for s in &p.sites {
            let c = card(&mut cards, &s.site);
            match s.role {
                SiteRole::Owner => c.owns.push(p.plan.clone()),
                SiteRole::Standby => c.standby += 1,
            }
        }
        for a in alarms(p) {
            // A plan-wide alarm (a halted move) is its owner's to see.
            let site = a.site.as_deref().unwrap_or(&p.owner);
            card(&mut cards, site).alarms.push((p.plan.clone(), a.text));
        }
    }
    cards.into_values().collect()
}

#[derive(Template)]
#[template(path = "console/sites.html")]
struct SitesPage {
    who: Option<Caller>,
    title: String,
    cards: Vec<SiteCard>,
}

impl SitesPage {
    fn seen(&self, o: &OrchestratorView) -> String {
        o.last_seen_ms.map(fmt_ms).unwrap_or_else(|| "never".into())
    }
}

async fn sites(session: Session, State(s): State<AppState>) -> Response {
    let status = match s.backend.status().await {
        Ok(st) => st,
        Err(e) => return error_page(Some(&session), &e),
    };
    let orchestrators = match s.backend.orchestrators().await {
        Ok(o) => o,
        Err(e) => return error_page(Some(&session), &e),
    };
    page(&SitesPage {
        who: Some(session.caller),
        title: "Sites".into(),
        cards: cards(&status, &orchestrators),
    })
}
