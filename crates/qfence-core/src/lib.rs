//! qfence-core: every decision qfence takes about a plan, as a pure function.
//!
//! # The model
//!
//! A plan is owned by one site at a time, at a *generation* that grows by one with every change
//! of owner. Each cycle, the runtime takes a [`Snapshot`]: the validated plan, its replicated
//! [`PlanState`] (owner, generation, phase, fence evidence, operators' intents), the latest
//! [`Observation`] of every binding with when it was read, the results of finished commands,
//! what is still in flight, the leadership (leader or not, term, lease) and `now`. [`decide()`]
//! turns it into a [`Decision`]: an ordered list of [`Command`]s, each carrying plan,
//! generation, term and an operation id, the state to write first (a compare-and-set), and one
//! sentence saying why.
//!
//! Nothing here does I/O, reads a clock or draws a random number: time is a value in the
//! snapshot, and results come back as observations in the next one. So a new leader continues
//! a failover where the old one stopped (the step is in the replicated state), and tests assert
//! on exact command lists.
//!
//! A site is FENCED only when every required fence reads FENCED, fresh, from an independent
//! read-back, or evidence stands for it at this generation (an operator's confirmation, an
//! expired dead-man switch). UNKNOWN is never FENCED. See `docs/specs/decision-core.md` and
//! `docs/specs/invariants.md`.
//!
//! - [`decide()`]: steady state (health, recovery, failover triggers, fence watch, shield,
//!   dead-man) and transitions (failover, planned switchover) step by step.
//! - [`rules`]: verdicts, in one place.
//! - [`dry_run`]: the whole ordered action list of a move, without doing it.
//! - [`maintenance`]: an orchestrator taken out for maintenance, step by step.

pub mod decide;
mod definitive;
pub mod dry_run;
pub mod error;
pub mod instance_ha;
pub mod maintenance;
pub mod reason;
pub mod rules;
pub mod schedule;
pub mod state;
pub mod types;

pub use decide::{Decision, FailoverOrder, Snapshot, decide, decide_with, failover_order};
pub use error::CoreError;
pub use reason::{Note, Reason};
pub use rules::{Rules, SiteVerdict};
pub use state::{
    Evidence, EvidenceKind, Intent, IntentKind, Phase, PlanState, PlanStateChange, Stage,
    StoredPlanState, Transition, TransitionKind,
};
pub use types::{
    Action, BindingKey, BindingPos, Command, Leadership, Millis, Observation, Observed, OpId,
    OpResult, Outcome,
};
