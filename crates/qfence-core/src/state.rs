//! The replicated, persisted state of one plan: who owns it at which generation, what
//! multi-step operation is under way and how far it got, what evidence of fencing was recorded,
//! and the operators' requests not yet acted on.
//!
//! It is written only through [`PlanStateChange`], a compare-and-set on the generation and the
//! revision, so a deposed leader's late write is refused. A new leader reads it and continues
//! the operation where the old one stopped.

use std::collections::{BTreeMap, BTreeSet};

use qfence_model::config::PlanConfig;
use qfence_model::{Generation, SiteId, Term};
use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::types::{BindingKey, Millis, OpId};

/// The stored form: versioned, so a newer qfence can read an older leader's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "v")]
pub enum StoredPlanState {
    #[serde(rename = "1")]
    V1(PlanState),
}

impl From<PlanState> for StoredPlanState {
    fn from(s: PlanState) -> Self {
        StoredPlanState::V1(s)
    }
}

impl StoredPlanState {
    /// The state, whatever version it was stored as.
    pub fn into_current(self) -> PlanState {
        match self {
            StoredPlanState::V1(s) => s,
        }
    }
}

/// One plan's replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanState {
    /// The site that owns the plan at this generation.
    pub owner: SiteId,
    /// Grows by one with every change of owner.
    pub generation: Generation,
    /// When the owner was committed (zero for the configured first owner).
    pub owner_since: Millis,
    /// Grows by one with every write of this state; the other half of the compare-and-set.
    pub revision: u64,
    /// What the plan is doing.
    pub phase: Phase,
    /// Paused by an operator: no automatic recovery or failover, transitions hold. Checks and
    /// dead-man renewals go on (not renewing would power the owner off).
    pub paused: bool,
    /// How the owner's health has gone.
    pub health: HealthTrack,
    /// Evidence that counts as FENCED without a read-back: operator confirmations and expired
    /// dead-man switches. Each is bound to a site and a generation.
    pub evidence: Vec<Evidence>,
    /// When renewals of each site's dead-man switch stopped (the site lost the plan then).
    pub renewals_stopped: BTreeMap<SiteId, Millis>,
    /// The owner whose dead-man switches read armed now: the latest arm or renewal of every
    /// one of its dead-man bindings since `owner_since` was Done with a read-back showing the
    /// timer running with qfence's countdown. Any FAILED, UNKNOWN or not-running answer takes
    /// the site out at once (with an alarm), and the next decision arms or renews again.
    pub dead_man_armed: BTreeSet<SiteId>,
    /// The site's chain of proof for its dead-man switches: when a verified arm or renewal
    /// last showed every switch running with qfence's countdown, while no answer since showed
    /// one stopped, refused or set to another countdown (an UNKNOWN answer does not break
    /// it: a renewal cannot stop a running switch). Written when the chain starts, when
    /// `dead_man_armed` changes and when renewals stop; removed when the chain breaks. Only a
    /// site with a chain can be proven stopped by its switch expiring.
    #[serde(default)]
    pub dead_man_verified: BTreeMap<SiteId, Millis>,
    /// Sites whose dead-man trouble (not armed, not confirmed) an alarm was raised for; cleared
    /// once the switch reads armed again.
    #[serde(default)]
    pub dead_man_alarmed: BTreeSet<SiteId>,
    /// Sites an alarm is raised for (not confirmed fenced while not owning the plan).
    pub alarmed: BTreeSet<SiteId>,
    /// Operators' requests, oldest first, not yet acted on.
    pub intents: Vec<Intent>,
    /// Sites an operator put in maintenance (like a Pacemaker standby node or a Proxmox HA
    /// node in maintenance): never chosen as a failover or switchover target; their checks
    /// run and are shown but raise no alarm. Never the owner, nor the target of the move
    /// under way. Absent from states written before it existed: none.
    #[serde(default)]
    pub maintenance: BTreeSet<SiteId>,
    /// Sites whose `rejoin` bindings are still to run: set at the commit of a planned
    /// switchover that did not escalate, to the sites it gave up with their resource proven
    /// stopped (hosts on); each taken out when its rejoin is issued, once, in steady state.
    /// Never the owner; a failover sets none (ADR 0023).
    #[serde(default)]
    pub rejoin: BTreeSet<SiteId>,
    /// Old owners given up by a commit whose copy is not yet proven a replica of the owner:
    /// each site a transition gave up that has `rejoin` bindings. A failover's (or an
    /// escalated switchover's) stays fenced until an operator lets it rejoin
    /// ([`IntentKind::Rejoin`]) or, with `rejoin: auto`, once its host reads up again; a
    /// site leaves when a rejoin of it is done (read back a replica of the owner). Never the
    /// owner; never chosen as a failover target while here (its copy may have diverged).
    #[serde(default)]
    pub awaiting_rejoin: BTreeMap<SiteId, AwaitingRejoin>,
}

/// An old owner whose copy is still to rejoin (see [`PlanState::awaiting_rejoin`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitingRejoin {
    /// When it was given up (the commit): readings and results before it say nothing of the
    /// copy left behind.
    pub since: Millis,
    /// Rejoins issued for it since: `rejoin: auto` tries once, an operator may ask again.
    pub attempts: u32,
}

impl PlanState {
    /// The state of a plan the cluster sees for the first time: owned by its configured owner,
    /// generation 1.
    pub fn initial(plan: &PlanConfig) -> Self {
        Self {
            owner: plan.owner.clone(),
            generation: Generation(1),
            owner_since: Millis(0),
            revision: 0,
            phase: Phase::Steady,
            paused: false,
            health: HealthTrack::default(),
            evidence: Vec::new(),
            renewals_stopped: BTreeMap::new(),
            dead_man_armed: BTreeSet::new(),
            dead_man_verified: BTreeMap::new(),
            dead_man_alarmed: BTreeSet::new(),
            alarmed: BTreeSet::new(),
            intents: Vec::new(),
            maintenance: BTreeSet::new(),
            rejoin: BTreeSet::new(),
            awaiting_rejoin: BTreeMap::new(),
        }
    }

    /// Whether `site` is in maintenance.
    pub fn in_maintenance(&self, site: &SiteId) -> bool {
        self.maintenance.contains(site)
    }

    /// This state with `site` taken in (`on`) or out of maintenance, or why not: the owner
    /// cannot go into maintenance (switch over first), nor the target of the move under way
    /// (abort it first). Taking a site out, or asking for what already holds, is always
    /// accepted. The revision is left to the write.
    pub fn with_maintenance(
        &self,
        plan: &PlanConfig,
        plan_name: &str,
        site: &SiteId,
        on: bool,
    ) -> Result<PlanState, CoreError> {
        if !plan.instances.contains_key(site) {
            return Err(CoreError::UnknownSite {
                plan: plan_name.to_owned(),
                site: site.to_string(),
                sites: plan
                    .sites()
                    .map(SiteId::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut next = self.clone();
        if !on {
            next.maintenance.remove(site);
            return Ok(next);
        }
        if self.maintenance.contains(site) {
            return Ok(next);
        }
        if *site == self.owner {
            return Err(CoreError::MaintenanceRefused(format!(
                "{site} owns {plan_name}: switch over to another site before putting it in \
                 maintenance"
            )));
        }
        if let Some(t) = self.transition()
            && t.target == *site
        {
            return Err(CoreError::MaintenanceRefused(format!(
                "{site} is the target of {plan_name}'s move under way: abort it or let it \
                 finish before putting {site} in maintenance"
            )));
        }
        next.maintenance.insert(site.clone());
        Ok(next)
    }

    /// The transition under way, if any.
    pub fn transition(&self) -> Option<&Transition> {
        match &self.phase {
            Phase::Steady => None,
            Phase::Transition(t) => Some(t),
        }
    }

    /// Applies a change if it was decided on this very state (generation and revision match).
    /// This is the compare-and-set the cluster runs; a deposed leader's change is refused.
    pub fn apply(&self, change: &PlanStateChange) -> Result<PlanState, CoreError> {
        if change.expect_generation != self.generation || change.expect_revision != self.revision {
            return Err(CoreError::Stale {
                expected_generation: change.expect_generation,
                expected_revision: change.expect_revision,
                generation: self.generation,
                revision: self.revision,
            });
        }
        if change.next.generation < self.generation
            || change.next.generation.0 > self.generation.0 + 1
        {
            return Err(CoreError::GenerationJump {
                from: self.generation,
                to: change.next.generation,
            });
        }
        Ok(change.next.clone())
    }
}

/// A write of the plan's state, as a compare-and-set on (generation, revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStateChange {
    pub expect_generation: Generation,
    pub expect_revision: u64,
    /// The whole next state (its revision is `expect_revision + 1`).
    pub next: PlanState,
}

/// How the owner's health has gone since it was last good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthTrack {
    /// Since when it has been bad or unreadable; `None` while good.
    pub bad_since: Option<Millis>,
    /// Restarts in place since it was last good.
    pub recoveries: u32,
    /// When the last restart was started.
    pub last_recovery: Option<Millis>,
    /// Whether the "would fail over but auto_failover is off" alarm was raised.
    pub alarmed: bool,
    /// Consecutive definitive unhealthy readings (see `failover_after_definitive`).
    #[serde(default)]
    pub definitive: u32,
    /// The stamp of the last reading counted: each reading counts once, however many
    /// decisions see it.
    #[serde(default)]
    pub definitive_at: Option<Millis>,
}

/// What the plan is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
// One per plan, held in the plan's state: boxing the transition would save a few hundred bytes
// a plan and cost every match a deref.
#[allow(clippy::large_enum_variant)]
pub enum Phase {
    /// Owned by `owner`; health and fence watch run.
    Steady,
    /// Moving to another site, step by step.
    Transition(Transition),
}

/// Why a transition started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TransitionKind {
    /// qfence's own: health stayed bad, or the owner site was lost.
    Failover { cause: String },
    /// An operator's failover to a named site.
    OperatorFailover { by: String, why: String },
    /// A planned switchover: the target's readiness is checked before anything is touched,
    /// and the sites given up stop the resource through their resource-level fences (see
    /// [`crate::rules::resource_fences`]), escalating to the required ones only when that
    /// proof does not come.
    Switchover { by: String, why: String },
}

/// The steps of a transition, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Planned switchover only: the target's readiness, before the owner is touched.
    Preflight,
    /// Application-level (secondary) fences at the sites given up, while they may be up.
    AppFences,
    /// Every other fence of every site but the target.
    Fences,
    /// Read back every required fence of every site but the target.
    Verify,
    /// The target's readiness.
    Readiness,
    /// The target's own fences undone (`unfence_on_promote`).
    Unfence,
    /// The application promoted at the target.
    Switchover,
    /// The new owner committed: generation + 1.
    Commit,
    /// Service bindings pointed at the new owner.
    Service,
}

impl Stage {
    /// The stage's name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Preflight => "preflight",
            Stage::AppFences => "application fences",
            Stage::Fences => "fences",
            Stage::Verify => "verify",
            Stage::Readiness => "readiness",
            Stage::Unfence => "unfence",
            Stage::Switchover => "switchover",
            Stage::Commit => "commit",
            Stage::Service => "service",
        }
    }
}

/// A transition under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub kind: TransitionKind,
    /// The owner when it started.
    pub from: SiteId,
    /// The site being promoted.
    pub target: SiteId,
    /// When the transition started.
    pub started: Millis,
    /// The step under way.
    pub stage: Stage,
    /// Where to go once `Verify` succeeds (a later stage sends it back to re-verify when its
    /// proof went stale).
    pub after_verify: Stage,
    /// When the step was (re-)entered: readings older than this do not count for it.
    pub stage_started: Millis,
    /// Retries of this step so far (bounded by `max_retries`).
    pub attempt: u32,
    /// A retry waits until then (one interval after the failure), so a busy BMC or a lagging
    /// replica gets time before the next attempt.
    #[serde(default)]
    pub retry_at: Option<Millis>,
    /// The term that issued `pending`: a new leader re-enters the step.
    pub term: Term,
    /// The operations issued for this step and not yet judged.
    #[serde(with = "pairs")]
    pub pending: BTreeMap<BindingKey, OpId>,
    /// Whether the step's commands were issued (a step may have none).
    pub entered: bool,
    /// Stopped, and why: it waits for an operator (retry, abort, confirm fenced).
    pub halted: Option<String>,
    /// Fences of the site given up that this transition issued while no fresh reading showed
    /// them holding already: what an abort before the switchover may undo. A fence that
    /// already held when the transition came to it is never undone by an abort.
    #[serde(default)]
    pub fenced: Vec<BindingKey>,
    /// A planned switchover whose resource-level proof did not come (a resource fence of a
    /// site given up read back not holding or UNKNOWN, or not within the fence timeout): from
    /// then on it fences and verifies the required fences, as a failover does. Always false
    /// for a failover, which never tries the resource-level proof.
    #[serde(default)]
    pub escalated: bool,
}

/// Evidence that a site is fenced without a read-back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub site: SiteId,
    /// The generation it holds at.
    pub generation: Generation,
    pub kind: EvidenceKind,
    /// When it was recorded.
    pub at: Millis,
    /// Carried into this generation by the commit of the transition that recorded it. It
    /// keeps standing for the new owner (its service step, the fence watch), but a later
    /// transition needs its own proof: a confirmation is for one failover.
    #[serde(default)]
    pub carried: bool,
}

/// Where fence evidence came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EvidenceKind {
    /// An operator said the site is down (like `stonith_admin --confirm`).
    OperatorConfirmed { by: String, why: String },
    /// The site's dead-man switch cannot have been renewed since `renewals_stopped`, for longer
    /// than its timeout plus the margin.
    DeadManExpired {
        renewals_stopped: Millis,
        fired_by: Millis,
        /// When a verified arm or renewal last showed the switch running with qfence's
        /// countdown (the chain's latest link); no answer since showed it stopped.
        #[serde(default)]
        last_verified: Millis,
    },
}

/// An operator's request, written to the replicated state by the API and consumed by the next
/// decision. `generation` is the one the operator saw: a request made against an older
/// generation is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub kind: IntentKind,
    pub generation: Generation,
    pub by: String,
    pub why: String,
    pub at: Millis,
}

/// What an operator asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "intent", rename_all = "kebab-case")]
pub enum IntentKind {
    /// Fail over to `to` now.
    Failover {
        to: SiteId,
    },
    /// Planned switchover to `to`: readiness first, then the owner is fenced in order.
    Switchover {
        to: SiteId,
    },
    /// Count `site` as fenced at this generation.
    ConfirmFenced {
        site: SiteId,
    },
    /// Stop automatic action.
    Pause,
    Resume,
    /// Retry a halted transition's step from scratch.
    Retry,
    /// Let `site`, an old owner waiting to rejoin, run its `rejoin` bindings now (pg_rewind
    /// or a re-clone, then a start as a replica of the owner). Refused unless the plan is
    /// steady and not paused, `site` awaits a rejoin, has `rejoin` bindings and its host does
    /// not read powered off (ADR 0023, "After a failover").
    Rejoin {
        site: SiteId,
    },
    /// Give up a transition before anything irreversible: back to steady at the old owner,
    /// undoing the fences this transition took there when that is safe. Refused from the
    /// switchover on (the move can only roll forward). See the decision-core spec's table.
    Abort,
}

/// A map whose keys are not strings, stored as a list of pairs (JSON objects need string keys).
/// The instance-HA state keeps its maps this way too.
pub(crate) mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        m: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}
