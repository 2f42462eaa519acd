//! Site-aware routing: who makes a controller call.
//!
//! A controller may be called only by an orchestrator at its own site or at a site in its
//! reach. The leader decides every action; [`route`] tells it where the call runs:
//!
//! - [`Route::Local`] when the leader itself is at an allowed site;
//! - [`Route::Forward`] to a live, active, non-witness orchestrator at an allowed site,
//!   preferring the controller's own site, then the reach sites in the order written, then the
//!   lowest name (so the choice is stable);
//! - [`Route::Unreachable`] when no such orchestrator is live. The caller reports the binding
//!   as UNKNOWN — never as done — and the decision core gets exactly that.
//!
//! Registration, validation, discovery and dry-run checks use the same function, so what they
//! prove is the path a fence will take.

use qfence_model::config::ControllerConfig;
use qfence_model::ids::{OrchestratorId, SiteId};
use serde::{Deserialize, Serialize};

use crate::state::ControllerRecord;

/// Where a controller may be called from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub site: SiteId,
    pub reach: Vec<SiteId>,
}

impl Placement {
    /// The allowed sites, own site first, then the reach in order, without repeats.
    pub fn allowed_sites(&self) -> Vec<&SiteId> {
        let mut out = vec![&self.site];
        for s in &self.reach {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

impl From<&ControllerConfig> for Placement {
    fn from(c: &ControllerConfig) -> Self {
        Self {
            site: c.site.clone(),
            reach: c.reach.clone(),
        }
    }
}

impl From<&ControllerRecord> for Placement {
    fn from(c: &ControllerRecord) -> Self {
        Self {
            site: c.site.clone(),
            reach: c.reach.clone(),
        }
    }
}

/// An orchestrator as routing sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: OrchestratorId,
    pub site: SiteId,
    /// Answering the leader lately (for the leader itself: always).
    pub live: bool,
    /// Witnesses vote but make no controller calls.
    pub witness: bool,
    /// Not in maintenance.
    pub active: bool,
}

/// Where a call runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "snake_case")]
pub enum Route {
    Local,
    Forward { to: OrchestratorId, site: SiteId },
    Unreachable { reason: String },
}

/// Decides where a call to a controller with `placement` runs, made by `me`.
pub fn route(placement: &Placement, candidates: &[Candidate], me: &OrchestratorId) -> Route {
    let allowed = placement.allowed_sites();
    let usable = |c: &&Candidate| c.live && c.active && !c.witness;
    if let Some(me) = candidates.iter().find(|c| &c.id == me)
        && usable(&me)
        && allowed.contains(&&me.site)
    {
        return Route::Local;
    }
    for site in &allowed {
        let mut at_site: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| &c.site == *site && &c.id != me)
            .filter(usable)
            .collect();
        at_site.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(c) = at_site.first() {
            return Route::Forward {
                to: c.id.clone(),
                site: c.site.clone(),
            };
        }
    }
    let sites: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
    Route::Unreachable {
        reason: format!(
            "no live orchestrator at {} (the sites allowed to call it)",
            sites.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(s: &str) -> SiteId {
        SiteId::new(s).unwrap()
    }

    fn id(s: &str) -> OrchestratorId {
        OrchestratorId::new(s).unwrap()
    }

    fn cand(name: &str, at: &str, live: bool) -> Candidate {
        Candidate {
            id: id(name),
            site: site(at),
            live,
            witness: at == "witness",
            active: true,
        }
    }

    fn three(dc1_live: bool) -> Vec<Candidate> {
        vec![
            cand("o1", "dc1", dc1_live),
            cand("o2", "dc2", true),
            cand("ow", "witness", true),
        ]
    }

    fn dc1_only() -> Placement {
        Placement {
            site: site("dc1"),
            reach: vec![],
        }
    }

    #[test]
    fn a_leader_at_the_controllers_site_calls_it_itself() {
        assert_eq!(route(&dc1_only(), &three(true), &id("o1")), Route::Local);
    }

    #[test]
    fn a_leader_elsewhere_forwards_to_the_controllers_site() {
        assert_eq!(
            route(&dc1_only(), &three(true), &id("o2")),
            Route::Forward {
                to: id("o1"),
                site: site("dc1")
            }
        );
        assert_eq!(
            route(&dc1_only(), &three(true), &id("ow")),
            Route::Forward {
                to: id("o1"),
                site: site("dc1")
            }
        );
    }

    #[test]
    fn a_lost_site_makes_its_own_controllers_unreachable() {
        let r = route(&dc1_only(), &three(false), &id("o2"));
        assert!(matches!(r, Route::Unreachable { .. }), "{r:?}");
    }

    #[test]
    fn a_controller_in_reach_of_another_site_still_answers() {
        let bmc = Placement {
            site: site("dc1"),
            reach: vec![site("dc2")],
        };
        // The leader at dc2 calls it itself, whether dc1 is up or not.
        assert_eq!(route(&bmc, &three(false), &id("o2")), Route::Local);
        // The witness prefers dc1 while it is up, then dc2.
        assert_eq!(
            route(&bmc, &three(true), &id("ow")),
            Route::Forward {
                to: id("o1"),
                site: site("dc1")
            }
        );
        assert_eq!(
            route(&bmc, &three(false), &id("ow")),
            Route::Forward {
                to: id("o2"),
                site: site("dc2")
            }
        );
    }

    #[test]
    fn witnesses_and_orchestrators_in_maintenance_make_no_calls() {
        let at_witness = Placement {
            site: site("witness"),
            reach: vec![],
        };
        assert!(matches!(
            route(&at_witness, &three(true), &id("ow")),
            Route::Unreachable { .. }
        ));
        let mut c = three(true);
        c[0].active = false;
        assert!(matches!(
            route(&dc1_only(), &c, &id("o2")),
            Route::Unreachable { .. }
        ));
    }

    #[test]
    fn the_choice_within_a_site_is_stable() {
        let mut c = three(true);
        c.push(cand("o0", "dc1", true));
        assert_eq!(
            route(&dc1_only(), &c, &id("o2")),
            Route::Forward {
                to: id("o0"),
                site: site("dc1")
            }
        );
    }
}
