//! The overview: every plan, built to stay readable with thousands. At the top, the plans
//! counted by phase and the standby sites by verdict, and how many plans have alarms; then
//! the filters (owner, phase, alarms, name) and one page of the plans that match, with its
//! pager. The live part (`/live/overview?SAME-QUERY`) renders the same counts, rows and pager
//! with the same filters.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Session, encode, error_page, page, verdict_class};
use crate::api::AppState;
use qfence_runtime::auth::Caller;
use qfence_runtime::dto::{PlanStatus, SiteRole, StatusResponse, VerdictDto};

/// Plans per page.
pub(crate) const PAGE: usize = 50;

/// Something about a plan an operator must look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Alarm {
    /// The site it is about; absent for the plan as a whole.
    pub site: Option<String>,
    pub text: String,
}

/// A plan's alarms, from its status: a move halted for an operator; in steady state, each
/// standby site (not in maintenance) not proven fenced (during a move, its own halt is the
/// alarm: the target is unfenced on purpose); each binding to a capability that cannot work.
pub(crate) fn alarms(p: &PlanStatus) -> Vec<Alarm> {
    let mut out = Vec::new();
    if let Some(h) = &p.halted {
        out.push(Alarm {
            site: None,
            text: format!("halted, waiting for an operator: {h}"),
        });
    }
    if p.phase == "steady" {
        for s in &p.sites {
            if s.role == SiteRole::Standby && !s.maintenance && s.verdict != VerdictDto::Fenced {
                out.push(Alarm {
                    site: Some(s.site.clone()),
                    text: format!(
                        "{} not proven fenced ({})",
                        s.site,
                        verdict_class(&s.verdict).to_uppercase()
                    ),
                });
            }
        }
    }
    for u in &p.unworkable {
        out.push(Alarm {
            site: u.site.clone(),
            text: u.to_string(),
        });
    }
    out
}

/// The filters, as typed (kept whole for the form and the links).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct OverviewQuery {
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub phase: String,
    /// `yes`: only plans with alarms; `no`: only plans without.
    #[serde(default)]
    pub alarms: String,
    /// A part of the plan's name.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub page: String,
}

impl OverviewQuery {
    fn matches(&self, p: &PlanStatus) -> bool {
        fn want(f: &str) -> Option<&str> {
            Some(f.trim()).filter(|f| !f.is_empty())
        }
        want(&self.owner).is_none_or(|o| p.owner == o)
            && want(&self.phase).is_none_or(|ph| p.phase == ph)
            && want(&self.name).is_none_or(|n| p.plan.contains(n))
            && match self.alarms.as_str() {
                "yes" => !alarms(p).is_empty(),
                "no" => alarms(p).is_empty(),
                _ => true,
            }
    }

    /// The query string with `page` (none when every filter is empty and `page` is 1).
    pub fn link(&self, page: usize) -> String {
        let mut parts = Vec::new();
        for (k, v) in [
            ("owner", &self.owner),
            ("phase", &self.phase),
            ("alarms", &self.alarms),
            ("name", &self.name),
        ] {
            if !v.trim().is_empty() {
                parts.push(format!("{k}={}", encode(v.trim())));
            }
        }
        if page > 1 {
            parts.push(format!("page={page}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// A plan as a row.
#[derive(Debug, Clone)]
pub(crate) struct PlanRow {
    pub p: PlanStatus,
    pub alarms: Vec<Alarm>,
}

/// The overview's live part: the counts, one page of rows, the pager.
#[derive(Template)]
#[template(path = "console/overview_rows.html")]
pub(crate) struct OverviewRows {
    pub status_leader: qfence_runtime::dto::LeaderInfo,
    pub total: usize,
    /// (phase, plans), most first.
    pub phases: Vec<(String, usize)>,
    /// (verdict, standby sites): FENCED, FAILED, UNKNOWN.
    pub verdicts: Vec<(&'static str, usize)>,
    pub with_alarms: usize,
    pub matching: usize,
    pub rows: Vec<PlanRow>,
    pub page: usize,
    pub pages: usize,
    pub prev: Option<String>,
    pub next: Option<String>,
    pub first_shown: usize,
    pub last_shown: usize,
    pub query: OverviewQuery,
}

impl OverviewRows {
    /// The rows of `status` that `q` lets through, page `page` (1-based; past the end, the last).
    pub fn new(status: StatusResponse, q: &OverviewQuery, page: usize) -> Self {
        let total = status.plans.len();
        let mut phases: BTreeMap<String, usize> = BTreeMap::new();
        let mut verdicts = [("FENCED", 0), ("FAILED", 0), ("UNKNOWN", 0)];
        let mut with_alarms = 0;
        for p in &status.plans {
            *phases.entry(p.phase.clone()).or_default() += 1;
            for s in p.sites.iter().filter(|s| s.role == SiteRole::Standby) {
                let i = match s.verdict {
                    VerdictDto::Fenced => 0,
                    VerdictDto::Failed => 1,
                    VerdictDto::Unknown => 2,
                };
                verdicts[i].1 += 1;
            }
            if !alarms(p).is_empty() {
                with_alarms += 1;
            }
        }
        let mut phases: Vec<(String, usize)> = phases.into_iter().collect();
        phases.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let matched: Vec<PlanStatus> = status.plans.into_iter().filter(|p| q.matches(p)).collect();
        let matching = matched.len();
        let pages = matching.div_ceil(PAGE).max(1);
        let page = page.clamp(1, pages);
        let rows: Vec<PlanRow> = matched
            .into_iter()
            .skip((page - 1) * PAGE)
            .take(PAGE)
            .map(|p| PlanRow {
                alarms: alarms(&p),
                p,
            })
            .collect();
        let first_shown = if rows.is_empty() {
            0
        } else {
            (page - 1) * PAGE + 1
        };
        Self {
            status_leader: status.leader,
            total,
            phases,
            verdicts: verdicts.to_vec(),
            with_alarms,
            matching,
            first_shown,
            last_shown: (page - 1) * PAGE + rows.len(),
            rows,
            page,
            pages,
            prev: (page > 1).then(|| format!("/{}", q.link(page - 1))),
            next: (page < pages).then(|| format!("/{}", q.link(page + 1))),
            query: q.clone(),
        }
    }

    /// A link to the overview with one filter set (the others kept, back to page 1).
    fn with(&self, key: &str, value: &str) -> String {
        let mut q = self.query.clone();
        match key {
            "phase" => q.phase = value.to_owned(),
            "alarms" => q.alarms = value.to_owned(),
            _ => {}
        }
        format!("/{}", q.link(1))
    }
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    who: Option<Caller>,
    title: String,
    rows_html: String,
    query: OverviewQuery,
    /// The owners and phases to offer in the filters.
    owners: Vec<String>,
    phases: Vec<String>,
    page_error: Option<String>,
    live: String,
}

/// The page number asked for: 1 when none; an error for the form when not a number.
pub(crate) fn page_number(q: &OverviewQuery) -> Result<usize, String> {
    match q.page.trim() {
        "" => Ok(1),
        p => p
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{p:?} is not a page number (1, 2, ...)")),
    }
}

pub(super) async fn overview(
    session: Session,
    State(s): State<AppState>,
    Query(q): Query<OverviewQuery>,
) -> Response {
    let status = match s.backend.status().await {
        Ok(status) => status,
        Err(e) => return error_page(Some(&session), &e),
    };
    let (page_no, page_error) = match page_number(&q) {
        Ok(n) => (n, None),
        Err(e) => (1, Some(e)),
    };
    let mut owners: Vec<String> = status
        .plans
        .iter()
        .flat_map(|p| p.sites.iter().map(|s| s.site.clone()))
        .collect();
    owners.sort();
    owners.dedup();
    let mut phases: Vec<String> = status.plans.iter().map(|p| p.phase.clone()).collect();
    phases.sort();
    phases.dedup();
    let rows = OverviewRows::new(status, &q, page_no);
    let rows_html = match rows.render() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "A console template failed to render: this is a bug");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the overview could not be rendered",
            )
                .into_response();
        }
    };
    let t = OverviewPage {
        who: Some(session.caller),
        title: "Overview".into(),
        rows_html,
        live: format!("/live/overview{}", q.link(page_no)),
        query: q,
        owners,
        phases,
        page_error,
    };
    let status = if t.page_error.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    (status, page(&t)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use qfence_runtime::dto::{LeaderInfo, SiteStatus};

    fn plan(i: usize, owner: &str, phase: &str, standby: VerdictDto) -> PlanStatus {
        let site = |s: &str, role, verdict| SiteStatus {
            site: s.into(),
            role,
            verdict,
            checked_at_ms: None,
            posture: None,
            maintenance: false,
        };
        let other = if owner == "dc1" { "dc2" } else { "dc1" };
        PlanStatus {
            plan: format!("p{i:05}"),
            owner: owner.into(),
            generation: 1,
            paused: false,
            phase: phase.into(),
            halted: None,
            last_reason: String::new(),
            sites: vec![
                site(owner, SiteRole::Owner, VerdictDto::Unknown),
                site(other, SiteRole::Standby, standby),
            ],
            unworkable: vec![],
        }
    }

    fn status(plans: Vec<PlanStatus>) -> StatusResponse {
        StatusResponse {
            leader: LeaderInfo {
                term: 1,
                leader: Some("dc1-a".into()),
                address: None,
                is_self: true,
                orchestrator: "dc1-a".into(),
            },
            plans,
        }
    }

    #[test]
    fn counts_cover_every_plan_and_filters_and_pages_cut_the_rows() {
        let mut plans: Vec<PlanStatus> = (0..120)
            .map(|i| plan(i, "dc1", "steady", VerdictDto::Fenced))
            .collect();
        plans[7] = plan(7, "dc2", "steady", VerdictDto::Unknown);
        plans[9] = plan(9, "dc1", "fences", VerdictDto::Fenced);
        let all = OverviewRows::new(status(plans.clone()), &OverviewQuery::default(), 3);
        assert_eq!(
            (all.total, all.matching, all.pages, all.page),
            (120, 120, 3, 3)
        );
        assert_eq!((all.first_shown, all.last_shown), (101, 120));
        assert_eq!(
            all.phases,
            vec![("steady".into(), 119), ("fences".into(), 1)]
        );
        assert_eq!(
            all.verdicts,
            vec![("FENCED", 119), ("FAILED", 0), ("UNKNOWN", 1)]
        );
        assert_eq!(all.with_alarms, 1);
        assert_eq!(all.next, None);
        assert_eq!(all.prev.as_deref(), Some("/?page=2"));

        let q = OverviewQuery {
            alarms: "yes".into(),
            ..Default::default()
        };
        let alarmed = OverviewRows::new(status(plans.clone()), &q, 1);
        assert_eq!(alarmed.matching, 1);
        assert_eq!(alarmed.rows[0].p.plan, "p00007");
        assert_eq!(
            alarmed.rows[0].alarms[0].text,
            "dc1 not proven fenced (UNKNOWN)"
        );

        let q = OverviewQuery {
            owner: "dc1".into(),
            phase: "steady".into(),
            name: "p0001".into(),
            ..Default::default()
        };
        let some = OverviewRows::new(status(plans), &q, 1);
        assert_eq!(some.matching, 10, "p00010 to p00019");
        assert_eq!(
            q.link(2),
            "?owner=dc1&phase=steady&name=p0001&page=2",
            "links keep the filters"
        );
    }

    #[test]
    fn a_page_must_be_a_number_from_one() {
        let q = |p: &str| OverviewQuery {
            page: p.into(),
            ..Default::default()
        };
        assert_eq!(page_number(&q("")), Ok(1));
        assert_eq!(page_number(&q("4")), Ok(4));
        assert!(page_number(&q("0")).is_err());
        assert!(
            page_number(&q("two"))
                .unwrap_err()
                .contains("not a page number")
        );
    }
}
