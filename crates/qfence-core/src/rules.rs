//! The verdict rules: how readings and evidence make a site FENCED, FAILED or UNKNOWN.
//!
//! They live in one place, behind [`Rules`], so the simulation can plant a deliberate bug in a
//! copy (see [`Mutation`]) and show that its invariants catch it.

use std::collections::BTreeMap;

use qfence_model::config::ValidatedConfig;
use qfence_model::config::{PlanConfig, StandbyPosture};
use qfence_model::{BindingId, FenceLevel, Role, SiteId, Verdict};
use serde::{Deserialize, Serialize};

use crate::state::{EvidenceKind, PlanState};
use crate::types::{BindingKey, Millis, Observation, Observed};

/// A deliberate bug, for the simulation's own test. Shipped code never sets one.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mutation {
    /// The real rules.
    #[default]
    None,
    /// Treat an UNKNOWN reading (unreachable, timed out, stale) as FENCED.
    UnknownIsFenced,
    /// Forget which sites are in maintenance when choosing a failover target.
    MaintenanceIgnored,
    /// Keep a dead-man switch counted armed (and its chain of proof) after a renewal failed,
    /// was refused or read back not running: the old "armed once, armed forever".
    DeadManArmedSticky,
    /// Accept an abort at every stage, the switchover and after included.
    AbortAfterSwitchover,
    /// Point the service at the owner once, at the end of a move, and never keep it there.
    ServiceNotKept,
    /// The simulated executor acts on an arm or renewal after its `not_after` (a forwarded
    /// call delayed past its deadline). The core does not read it: the runtime's side.
    ActsAfterNotAfter,
    /// A planned switchover counts a site's resource as stopped once its resource-level
    /// fences ran, whatever their read-back says.
    SwitchoverTrustsTheStop,
    /// A hot standby's reading (in recovery, not writable, following the owner) counts as
    /// the site's fence in every verdict, a failover's proof included.
    HotStandbyIsAFence,
    /// Forget which old owners still wait to rejoin: one may be chosen as a failover target
    /// or switched over to, its diverged copy promoted.
    RejoinIgnored,
}

/// The rules `decide` applies. [`Rules::default`] is the only one production uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    #[doc(hidden)]
    pub mutation: Mutation,
}

/// One required fence's reading, as it counts toward a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceReading {
    pub binding: BindingKey,
    /// The capability (`power.off`).
    pub capability: String,
    pub verdict: Verdict,
    /// When it was read; `None` if never.
    pub at: Option<Millis>,
}

/// Why a site has its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Basis {
    /// The required fences' readings.
    Readings,
    /// Recorded evidence (operator confirmation or an expired dead-man switch).
    Evidence(EvidenceKind),
    /// The site has no required fence and no evidence: nothing can prove it stopped.
    NothingToProve,
    /// Every resource-level fence of the site reads FENCED ([`Rules::resource_verdict`]): its
    /// resource is proven stopped, its host may run. What a planned switchover stands on for
    /// the sites it gives up, and what a standby left so reads; never proof in a failover.
    ResourceStopped,
    /// A hot plan's standby: every `standby` binding of the site reads holding, fresh, since
    /// the owner became the owner ([`Rules::hot_standby_verdict`]). Its copy runs, safe as a
    /// standby; `detail` is what the readings say ("standby, replicating from ..., lag 0
    /// bytes"). Shown and no alarm; never proof in a failover.
    HotStandby { detail: String },
    /// A hot plan's standby whose `standby` reading does not hold: `detail` says why (it is
    /// writable, not in recovery, or follows another server). FAILED, and an alarm.
    NotAStandby { detail: String },
}

/// A site's verdict, with its basis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteVerdict {
    pub site: SiteId,
    pub verdict: Verdict,
    pub basis: Basis,
    pub readings: Vec<FenceReading>,
}

/// What a list of readings adds up to, in one pass: the fold every verdict rule starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tally {
    /// No reading at all: nothing to prove with.
    Empty,
    /// One reads FAILED, whatever the others read.
    Failed,
    /// Every one reads FENCED.
    Fenced,
    /// Some read UNKNOWN, none FAILED.
    Unknown,
}

impl Tally {
    fn of(readings: &[FenceReading]) -> Self {
        readings
            .iter()
            .fold(Tally::Empty, |t, r| match (t, r.verdict) {
                (Tally::Failed, _) | (_, Verdict::Failed) => Tally::Failed,
                (Tally::Empty | Tally::Fenced, Verdict::Fenced) => Tally::Fenced,
                (Tally::Empty | Tally::Fenced | Tally::Unknown, _) => Tally::Unknown,
            })
    }
}

impl SiteVerdict {
    /// The verdict `readings` give `site`: FAILED when one reads FAILED; FENCED on `proven`
    /// when there are some and all read FENCED, or else on `evidence` when there is some;
    /// UNKNOWN otherwise (on [`Basis::NothingToProve`] when there is no reading at all).
    fn judged(
        site: &SiteId,
        readings: Vec<FenceReading>,
        proven: Basis,
        evidence: Option<Basis>,
    ) -> Self {
        let (verdict, basis) = match (Tally::of(&readings), evidence) {
            (Tally::Failed, _) => (Verdict::Failed, Basis::Readings),
            (Tally::Fenced, _) => (Verdict::Fenced, proven),
            (_, Some(e)) => (Verdict::Fenced, e),
            (Tally::Empty, None) => (Verdict::Unknown, Basis::NothingToProve),
            (Tally::Unknown, None) => (Verdict::Unknown, Basis::Readings),
        };
        Self {
            site: site.clone(),
            verdict,
            basis,
            readings,
        }
    }

    /// What a status shows beside the verdict when its basis is not a fence's reading:
    /// "resource stopped", what a hot standby's readings say ("standby, replicating from
    /// 10.0.1.5:5432, lag 0 bytes"), "not a standby: 10.0.2.5:5432 is writable: ...".
    pub fn posture(&self) -> Option<String> {
        match &self.basis {
            Basis::ResourceStopped if self.verdict == Verdict::Fenced => {
                Some("resource stopped".to_owned())
            }
            Basis::HotStandby { detail } if detail.is_empty() => Some("standby".to_owned()),
            Basis::HotStandby { detail } => Some(detail.clone()),
            Basis::NotAStandby { detail } if detail.is_empty() => Some("not a standby".to_owned()),
            Basis::NotAStandby { detail } => Some(format!("not a standby: {detail}")),
            _ => None,
        }
    }
}

/// The fence level of a binding's capability, if it is a fence.
pub fn fence_level(
    config: &ValidatedConfig,
    plan: &PlanConfig,
    key: &BindingKey,
) -> Option<FenceLevel> {
    let b = binding(plan, key)?;
    let controller = config.controller(b.controller.as_str())?;
    let cap = controller.controller_type().capability(&b.capability)?;
    controller.fence_level(cap)
}

/// The capability that undoes a fence binding (`power.on` for `power.off`), if any.
pub fn unfence_capability(
    config: &ValidatedConfig,
    plan: &PlanConfig,
    key: &BindingKey,
) -> Option<&'static str> {
    let b = binding(plan, key)?;
    let controller = config.controller(b.controller.as_str())?;
    controller
        .controller_type()
        .capability(&b.capability)?
        .unfence
}

/// A binding of the plan by key: the one in the key's list with the key's id, wherever it
/// stands now (`None` once no binding there has that id: it was removed or changed).
pub fn binding<'a>(
    plan: &'a PlanConfig,
    key: &BindingKey,
) -> Option<&'a qfence_model::config::Binding> {
    let list = match &key.site {
        Some(site) => plan.instance(site)?,
        None => plan.service.as_slice(),
    };
    // The position the key was made at is the likely place; the id decides.
    list.get(key.at)
        .into_iter()
        .chain(list)
        .find(|b| is(b, &key.id))
}

/// Whether `b`'s stable id is `id`, without building it when it is configured (a lookup
/// runs for every key a decision reads).
fn is(b: &qfence_model::config::Binding, id: &BindingId) -> bool {
    match &b.id {
        Some(configured) => configured == id,
        None => b.stable_id() == *id,
    }
}

/// The keys of `site`'s bindings in `role`, in order.
pub fn keys(plan: &PlanConfig, site: &SiteId, role: Role) -> Vec<BindingKey> {
    plan.bindings(site, role)
        .map(|(i, b)| BindingKey::new(Some(site), i, b))
        .collect()
}

/// The keys of the plan's service bindings, in order.
pub fn service_keys(plan: &PlanConfig) -> Vec<BindingKey> {
    plan.service
        .iter()
        .enumerate()
        .map(|(i, b)| BindingKey::new(None, i, b))
        .collect()
}

/// The fences that count toward `site`'s verdict: required, and not application-level (a
/// demoted primary never proves its site stopped).
pub fn proving_fences(
    config: &ValidatedConfig,
    plan: &PlanConfig,
    site: &SiteId,
) -> Vec<BindingKey> {
    plan.bindings(site, Role::Fence)
        .filter(|(_, b)| b.required)
        .map(|(i, b)| BindingKey::new(Some(site), i, b))
        .filter(|k| fence_level(config, plan, k) != Some(FenceLevel::Application))
        .collect()
}

/// The resource-level fences of `site`: its fences that do not count toward its verdict (not
/// required, or application-level: `vm.stop`, `container.stop`, `db.demote`). They stop the
/// resource, not the site, and their read-back proves the resource stopped while the site is
/// up and answering: what a planned switchover stands on (see [`Rules::resource_verdict`]).
pub fn resource_fences(
    config: &ValidatedConfig,
    plan: &PlanConfig,
    site: &SiteId,
) -> Vec<BindingKey> {
    let proving = proving_fences(config, plan, site);
    keys(plan, site, Role::Fence)
        .into_iter()
        .filter(|k| !proving.contains(k))
        .collect()
}

impl Rules {
    /// What one reading counts as: FENCED only for a reading that holds, is no older than
    /// `freshness` and was taken no earlier than `since`.
    pub fn reading_verdict(
        &self,
        obs: Option<&Observation>,
        now: Millis,
        freshness: std::time::Duration,
        since: Option<Millis>,
    ) -> Verdict {
        let v = match obs {
            None => Verdict::Unknown,
            Some(o) if now.since(o.at) > freshness => Verdict::Unknown,
            Some(o) if since.is_some_and(|s| o.at < s) => Verdict::Unknown,
            Some(o) => match o.value {
                Observed::Holds => Verdict::Fenced,
                Observed::NotHeld => Verdict::Failed,
                Observed::Unknown => Verdict::Unknown,
            },
        };
        match (self.mutation, v) {
            (Mutation::UnknownIsFenced, Verdict::Unknown) => Verdict::Fenced,
            _ => v,
        }
    }

    /// A site's verdict: FAILED when a required fence reads FAILED; FENCED when every required
    /// fence reads FENCED, or evidence for the site at this generation stands; otherwise
    /// UNKNOWN. Secondary fences never count, and UNKNOWN is never FENCED.
    ///
    /// `transition_started`: during a transition, evidence carried from an earlier one does
    /// not count (a confirmation is for one failover); evidence this transition recorded and
    /// its commit carried does.
    #[allow(clippy::too_many_arguments)]
    pub fn site_verdict(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        state: &PlanState,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
        since: Option<Millis>,
        transition_started: Option<Millis>,
    ) -> SiteVerdict {
        let readings = self.readings(config, plan, observations, site, now, since);
        let evidence = state
            .evidence
            .iter()
            .rev()
            .filter(|e| &e.site == site && e.generation == state.generation)
            .find(|e| !e.carried || transition_started.is_none_or(|t| e.at >= t));
        if self.mutation == Mutation::HotStandbyIsAFence {
            let h = self.hot_standby_verdict(plan, state, observations, site, now);
            if h.verdict == Verdict::Fenced {
                return h;
            }
        }
        let evidence = evidence.map(|e| Basis::Evidence(e.kind.clone()));
        SiteVerdict::judged(site, readings, Basis::Readings, evidence)
    }

    /// Whether `site`'s resource is proven stopped by its resource-level fences
    /// ([`resource_fences`]): FENCED, basis [`Basis::ResourceStopped`], when the site has at
    /// least one and every one reads FENCED ([`Rules::reading_verdict`]: fresh, no earlier
    /// than `since`); FAILED when one reads FAILED (the resource runs); UNKNOWN otherwise.
    /// The readings are the resource fences'. It says nothing of the host: a planned
    /// switchover and the fence watch of a standby use it; a failover never does.
    #[allow(clippy::too_many_arguments)]
    pub fn resource_verdict(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
        since: Option<Millis>,
    ) -> SiteVerdict {
        let mut readings = self.readings_of(
            plan,
            observations,
            resource_fences(config, plan, site),
            now,
            since,
        );
        if self.mutation == Mutation::SwitchoverTrustsTheStop {
            for r in &mut readings {
                r.verdict = Verdict::Fenced;
            }
        }
        SiteVerdict::judged(site, readings, Basis::ResourceStopped, None)
    }

    /// The verdict of a site that does not own the plan, as the fence watch and a status show
    /// it: [`Rules::site_verdict`], or, when that is not FENCED, [`Rules::resource_verdict`]
    /// once it is (a standby whose resource is proven stopped is safe; a planned switchover
    /// leaves the old owner so, its host on). Only display and alarms use it: a move's proof
    /// is judged by `decide` itself, and a failover's only by [`Rules::site_verdict`].
    #[allow(clippy::too_many_arguments)]
    pub fn standby_verdict(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        state: &PlanState,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
        transition_started: Option<Millis>,
    ) -> SiteVerdict {
        let v = self.site_verdict(
            config,
            plan,
            state,
            observations,
            site,
            now,
            None,
            transition_started,
        );
        self.safe_standby(config, plan, state, observations, site, now, v)
    }

    /// A non-owner's shown verdict from its [`Rules::site_verdict`] `v`: `v` when FENCED;
    /// else, in a hot plan, [`Rules::hot_standby_verdict`] when it is not UNKNOWN (a replica
    /// that runs as it should, or one that answers writable or following another server:
    /// that reason is the alarm's, even when its clients are refused); else
    /// [`Rules::resource_verdict`] when FENCED (a switchover's old owner, stopped: its
    /// standby check finds no server); else `v`. Display and alarms only: a failover's proof
    /// is `site_verdict` alone.
    #[allow(clippy::too_many_arguments)]
    pub fn safe_standby(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        state: &PlanState,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
        v: SiteVerdict,
    ) -> SiteVerdict {
        if v.verdict == Verdict::Fenced {
            return v;
        }
        let hot = (plan.standby == StandbyPosture::Hot)
            .then(|| self.hot_standby_verdict(plan, state, observations, site, now));
        if let Some(h) = hot.filter(|h| h.verdict != Verdict::Unknown) {
            return h;
        }
        let r = self.resource_verdict(config, plan, observations, site, now, None);
        if r.verdict == Verdict::Fenced { r } else { v }
    }

    /// Whether `site` is safe as a hot standby: FENCED, basis [`Basis::HotStandby`], when it
    /// has `standby` bindings and every one reads holding, fresh, taken since the owner became
    /// the owner (a reading that it follows the old owner says nothing now); FAILED, basis
    /// [`Basis::NotAStandby`], when one reads not holding; UNKNOWN otherwise. It says the
    /// copy runs as a replica, not that anything stopped: never proof in a failover.
    pub fn hot_standby_verdict(
        &self,
        plan: &PlanConfig,
        state: &PlanState,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
    ) -> SiteVerdict {
        let keys = keys(plan, site, Role::Standby);
        let details = |want: Observed| {
            keys.iter()
                .filter_map(|k| observations.get(k))
                .filter(|o| o.value == want && !o.detail.is_empty())
                .map(|o| o.detail.clone())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let readings = self.readings_of(
            plan,
            observations,
            keys.clone(),
            now,
            Some(state.owner_since),
        );
        let (verdict, basis) = match Tally::of(&readings) {
            Tally::Empty => (Verdict::Unknown, Basis::NothingToProve),
            Tally::Failed => {
                let detail = details(Observed::NotHeld);
                (Verdict::Failed, Basis::NotAStandby { detail })
            }
            Tally::Fenced => {
                let detail = details(Observed::Holds);
                (Verdict::Fenced, Basis::HotStandby { detail })
            }
            Tally::Unknown => (Verdict::Unknown, Basis::Readings),
        };
        SiteVerdict {
            site: site.clone(),
            verdict,
            basis,
            readings,
        }
    }

    /// The readings of `site`'s proving fences, each judged by [`Rules::reading_verdict`].
    fn readings(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
        since: Option<Millis>,
    ) -> Vec<FenceReading> {
        self.readings_of(
            plan,
            observations,
            proving_fences(config, plan, site),
            now,
            since,
        )
    }

    fn readings_of(
        &self,
        plan: &PlanConfig,
        observations: &BTreeMap<BindingKey, Observation>,
        keys: Vec<BindingKey>,
        now: Millis,
        since: Option<Millis>,
    ) -> Vec<FenceReading> {
        keys.into_iter()
            .map(|k| {
                let obs = observations.get(&k);
                FenceReading {
                    capability: binding(plan, &k)
                        .map(|b| b.capability.clone())
                        .unwrap_or_default(),
                    verdict: self.reading_verdict(obs, now, plan.freshness, since),
                    at: obs.map(|o| o.at),
                    binding: k,
                }
            })
            .collect()
    }

    /// The verdict shown for `site` when nothing else judged it: [`Rules::standby_verdict`]
    /// for a site that does not own the plan, or that a transition is taking it from (it is the
    /// site being fenced); for the owner, only readings taken since it became the owner, and
    /// no evidence. A reading taken before it was unfenced and promoted says FENCED of a host
    /// that now runs the service: it no longer describes the site. The owner's fences are not
    /// re-checked in steady state, so it reads UNKNOWN once those readings age out, FAILED
    /// ("not fenced") while a fresh one shows its host on.
    #[allow(clippy::too_many_arguments)]
    pub fn shown_verdict(
        &self,
        config: &ValidatedConfig,
        plan: &PlanConfig,
        state: &PlanState,
        observations: &BTreeMap<BindingKey, Observation>,
        site: &SiteId,
        now: Millis,
    ) -> SiteVerdict {
        let transition = state.transition();
        let serving = *site == state.owner && transition.is_none_or(|t| t.target == *site);
        if !serving {
            return self.standby_verdict(
                config,
                plan,
                state,
                observations,
                site,
                now,
                transition.map(|t| t.started),
            );
        }
        let readings = self.readings(
            config,
            plan,
            observations,
            site,
            now,
            Some(state.owner_since),
        );
        SiteVerdict::judged(site, readings, Basis::Readings, None)
    }
}
