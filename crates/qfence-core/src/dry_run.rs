//! The dry run: the whole ordered action list of a failover or switchover, without doing it.
//!
//! It does not restate the rules: it drives [`decide`] itself against an imagined world in
//! which every command is done and every check reads as assumed (by default, every fence
//! FENCED and every readiness check passing), so what it prints is what a real move would do,
//! step by step, including where it would stop.

use std::collections::BTreeMap;

use qfence_model::config::{PlanConfig, ValidatedConfig};
use qfence_model::{PlanId, SiteId, Term};
use serde::Serialize;

use crate::decide::{Snapshot, decide};
use crate::error::CoreError;
use crate::rules;
use crate::state::{Intent, IntentKind, Phase, PlanState};
use crate::types::{
    Action, BindingKey, BindingPos, Command, Leadership, Millis, Observation, Observed, OpId, OpResult,
    Outcome,
};

/// Which kind of move to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoveKind {
    /// Fail over now (the owner may be gone).
    Failover,
    /// Planned switchover: the target's readiness is checked before the owner is touched.
    Switchover,
}

/// One step of the dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunStep {
    /// 1-based position.
    pub n: usize,
    /// The transition step it belongs to (`fences`, `verify`, ...).
    pub stage: String,
    /// `check`, `fence`, `unfence`, `switchover`, `service`, `commit`, ...
    pub action: String,
    /// The instance's site, or `None` for service bindings and the commit.
    pub site: Option<SiteId>,
    pub controller: Option<String>,
    pub capability: Option<String>,
    pub resource: Option<String>,
    /// The sites whose orchestrators may run it (the controller's site, then its reach).
    pub run_from: Vec<SiteId>,
    /// Anything else worth saying (the service's site, the new generation).
    pub detail: String,
}

/// The dry run's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRun {
    pub plan: PlanId,
    pub kind: MoveKind,
    pub from: SiteId,
    pub to: SiteId,
    pub steps: Vec<DryRunStep>,
    /// The readings assumed other than "holds", as `dc1[0]=unknown`.
    pub assumed: Vec<String>,
    /// Whether the move would complete under the assumptions.
    pub completes: bool,
    /// The last decision's sentence: where it ends, or why it stops.
    pub outcome: String,
}

const MAX_ROUNDS: usize = 64;

fn reading_word(v: Observed) -> &'static str {
    match v {
        Observed::Holds => "holds",
        Observed::NotHeld => "not-held",
        Observed::Unknown => "unknown",
    }
}

/// Parses one assumption, `BINDING=READING`: `dc1[0]=unknown` says dc1's first binding reads
/// UNKNOWN (its BMC does not answer).
pub fn parse_assumption(s: &str) -> Result<(BindingPos, Observed), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: write BINDING=READING, e.g. dc1[0]=unknown"))?;
    Ok((k.trim().parse()?, v.trim().parse()?))
}

/// Runs the move of `plan` to `to` in an imagined world. `assumed` overrides what a check
/// reads (by default every check holds: fences FENCED, readiness passing).
pub fn dry_run(
    config: &ValidatedConfig,
    plan_name: &str,
    assumed: &BTreeMap<BindingPos, Observed>,
    to: &str,
    kind: MoveKind,
) -> Result<DryRun, CoreError> {
    let (plan_id, plan, target, by_key) = resolve_move(config, plan_name, assumed, to)?;
    let mut state = PlanState::initial(plan);
    if state.owner == target {
        return Err(CoreError::AlreadyOwner {
            plan: plan_name.into(),
            site: to.into(),
        });
    }
    let from = state.owner.clone();
    let start = Millis(0);
    let intent_kind = match kind {
        MoveKind::Failover => IntentKind::Failover { to: target.clone() },
        MoveKind::Switchover => IntentKind::Switchover { to: target.clone() },
    };
    state.intents.push(Intent {
        kind: intent_kind,
        generation: state.generation,
        by: "dry-run".into(),
        why: "dry run".into(),
        at: start,
    });
    let mut world = World {
        assumed: &by_key,
        observations: BTreeMap::new(),
        results: BTreeMap::new(),
    };
    let mut steps = Vec::new();
    let mut now = start;
    let mut outcome = String::new();
    let mut completes = false;
    for _ in 0..MAX_ROUNDS {
        now = now.plus(std::time::Duration::from_secs(1));
        let in_flight = BTreeMap::new();
        let snap = Snapshot {
            config,
            plan: plan_id.clone(),
            state: &state,
            observations: &world.observations,
            results: &world.results,
            in_flight: &in_flight,
            leadership: Leadership {
                leader: true,
                term: Term(1),
                lease_until: now.plus(std::time::Duration::from_secs(3600)),
            },
            now,
        };
        let d = decide(&snap);
        outcome = d.reason.to_string();
        let before = state.clone();
        if let Some(change) = &d.state_change {
            state = state.apply(change).expect("the dry run is its only writer");
        }
        let stage = state
            .transition()
            .map(|t| t.stage.as_str().to_owned())
            .unwrap_or_else(|| "done".into());
        if state.generation != before.generation {
            steps.push(commit_step(steps.len() + 1, &before, &state));
        }
        for c in &d.commands {
            steps.push(command_step(steps.len() + 1, config, plan, &stage, c));
            world.done(c, now);
        }
        match &state.phase {
            Phase::Steady if state.generation != PlanState::initial(plan).generation => {
                completes = true;
                break;
            }
            Phase::Steady => break,
            Phase::Transition(t) if t.halted.is_some() => break,
            Phase::Transition(_) => {}
        }
    }
    Ok(DryRun {
        plan: plan_id,
        kind,
        from,
        to: target,
        steps,
        assumed: assumed
            .iter()
            .filter(|(_, v)| **v != Observed::Holds)
            .map(|(k, v)| format!("{k}={}", reading_word(*v)))
            .collect(),
        completes,
        outcome,
    })
}

/// The plan, the target site among its sites, and the assumed readings by key; every assumed
/// binding must be one of the plan's, so a typo is an error rather than an assumption silently
/// ignored.
fn resolve_move<'c>(
    config: &'c ValidatedConfig,
    plan_name: &str,
    assumed: &BTreeMap<BindingPos, Observed>,
    to: &str,
) -> Result<(PlanId, &'c PlanConfig, SiteId, BTreeMap<BindingKey, Observed>), CoreError> {
    let plan_id = PlanId::new(plan_name).map_err(|_| CoreError::UnknownPlan(plan_name.into()))?;
    let plan = config
        .plan(plan_name)
        .ok_or_else(|| CoreError::UnknownPlan(plan_name.into()))?;
    let sites = plan
        .sites()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let target = plan
        .sites()
        .find(|s| s.as_str() == to)
        .cloned()
        .ok_or_else(|| CoreError::UnknownSite {
            plan: plan_name.into(),
            site: to.into(),
            sites: sites.clone(),
        })?;
    // An operator names bindings by position in this configuration; the run files by key.
    let mut by_key = BTreeMap::new();
    for (pos, v) in assumed {
        let k = BindingKey::at(plan, pos).ok_or_else(|| CoreError::UnknownBinding {
            plan: plan_name.into(),
            binding: pos.to_string(),
        })?;
        by_key.insert(k, *v);
    }
    Ok((plan_id, plan, target, by_key))
}

/// The imagined world `decide` is run against: every command is done at once, and a check
/// reads as assumed (holds unless told otherwise).
struct World<'a> {
    assumed: &'a BTreeMap<BindingKey, Observed>,
    observations: BTreeMap<BindingKey, Observation>,
    results: BTreeMap<OpId, OpResult>,
}

impl World<'_> {
    /// Records command `c` as done at `now`, with its check's assumed reading.
    fn done(&mut self, c: &Command, now: Millis) {
        let Some(k) = c.action.binding().cloned() else {
            return;
        };
        let value = self.assumed.get(&k).copied().unwrap_or(Observed::Holds);
        if matches!(c.action, Action::Check { .. }) {
            self.observations
                .insert(k.clone(), Observation::new(value, now));
        }
        self.results.insert(
            c.op.clone(),
            OpResult {
                binding: Some(k),
                outcome: Outcome::Done,
                at: now,
            },
        );
    }
}

/// The step a change of generation shows: the commit, a compare-and-set on the old one.
fn commit_step(n: usize, before: &PlanState, state: &PlanState) -> DryRunStep {
    DryRunStep {
        n,
        stage: "commit".into(),
        action: "commit".into(),
        site: Some(state.owner.clone()),
        controller: None,
        capability: None,
        resource: None,
        run_from: Vec::new(),
        detail: format!(
            "owner {} at generation {} (compare-and-set on generation {})",
            state.owner, state.generation, before.generation
        ),
    }
}

/// The step a command shows: what it calls (an unfence names the capability that undoes the
/// fence), and from which sites it may run.
fn command_step(
    n: usize,
    config: &ValidatedConfig,
    plan: &PlanConfig,
    stage: &str,
    c: &Command,
) -> DryRunStep {
    let key = c.action.binding().cloned();
    let b = key.as_ref().and_then(|k| rules::binding(plan, k));
    let controller = b.and_then(|b| config.controller(b.controller.as_str()));
    let detail = match &c.action {
        Action::Service { site, .. } => format!("point at {site}"),
        Action::Alarm { detail, .. } => detail.clone(),
        _ => String::new(),
    };
    DryRunStep {
        n,
        stage: stage.to_owned(),
        action: c.action.name().into(),
        site: key.as_ref().and_then(|k| k.site.clone()),
        controller: b.map(|b| b.controller.to_string()),
        capability: match (&c.action, &key) {
            (Action::Unfence { .. }, Some(k)) => {
                rules::unfence_capability(config, plan, k).map(str::to_owned)
            }
            _ => b.map(|b| b.capability.clone()),
        },
        resource: b.map(|b| b.resource.clone()),
        run_from: controller
            .map(|c| c.allowed_sites().cloned().collect())
            .unwrap_or_default(),
        detail,
    }
}

impl DryRun {
    /// The dry run as printable lines.
    pub fn lines(&self) -> Vec<String> {
        let kind = match self.kind {
            MoveKind::Failover => "failover",
            MoveKind::Switchover => "switchover",
        };
        let except = if self.assumed.is_empty() {
            String::new()
        } else {
            format!(", except {}", self.assumed.join(", "))
        };
        let mut out = vec![format!(
            "Dry run: {kind} of {} from {} to {} (assuming every command is done and every check holds{except})",
            self.plan, self.from, self.to
        )];
        for s in &self.steps {
            let what = match (&s.controller, &s.capability, &s.resource) {
                (Some(c), Some(cap), Some(r)) => format!("{c} {cap} {r}"),
                _ => String::new(),
            };
            let run_from = if s.run_from.is_empty() {
                String::new()
            } else {
                let v: Vec<&str> = s.run_from.iter().map(SiteId::as_str).collect();
                format!("run from: {}", v.join(", "))
            };
            let site = s.site.as_ref().map_or("-", SiteId::as_str);
            let rest: Vec<&str> = [what.as_str(), run_from.as_str(), s.detail.as_str()]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect();
            out.push(
                format!(
                    "{:>3}. {:<19} {:<11} {:<8} {}",
                    s.n,
                    s.stage,
                    s.action,
                    site,
                    rest.join("  ")
                )
                .trim_end()
                .to_owned(),
            );
        }
        out.push(format!(
            "{}: {}",
            if self.completes { "Completes" } else { "Stops" },
            self.outcome
        ));
        out
    }
}
