//! The core's one error type.

use qfence_model::Generation;

/// What can go wrong around the core: a stale write, or a name that is not in the plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error(
        "stale write refused: decided at generation {expected_generation} revision \
         {expected_revision}, but the plan is at generation {generation} revision {revision}"
    )]
    Stale {
        expected_generation: Generation,
        expected_revision: u64,
        generation: Generation,
        revision: u64,
    },
    #[error("generation may only grow by one: {from} -> {to}")]
    GenerationJump { from: Generation, to: Generation },
    #[error("plan {0:?} is not in the configuration")]
    UnknownPlan(String),
    #[error("site {site:?} is not a site of plan {plan:?} (its sites: {sites})")]
    UnknownSite {
        plan: String,
        site: String,
        sites: String,
    },
    #[error("plan {plan:?} has no binding {binding}")]
    UnknownBinding { plan: String, binding: String },
    /// Why a site may not go into maintenance now, in one sentence.
    #[error("{0}")]
    MaintenanceRefused(String),
    #[error("site {site:?} already owns plan {plan:?}: choose another site")]
    AlreadyOwner { plan: String, site: String },
    #[error(
        "stale write refused: decided at generation {expected_generation} revision \
         {expected_revision}, but the cloud's Instance HA state is at generation {generation} \
         revision {revision}"
    )]
    StaleCloud {
        expected_generation: Generation,
        expected_revision: u64,
        generation: Generation,
        revision: u64,
    },
    #[error(
        "stale write refused: decided at maintenance revision {expected}, but the orchestrators' \
         maintenance state is at revision {revision}"
    )]
    StaleMaintenance { expected: u64, revision: u64 },
}
