//! The runtime's part, done by hand, for the decision tests: a bench that decides, writes the
//! state and runs the commands against a world of readings.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_core::{
    Action, BindingKey, Decision, Intent, IntentKind, Leadership, Millis, Observation, Observed,
    OpId, OpResult, Outcome, PlanState, Rules, Snapshot, Stage, decide_with,
};
use qfence_model::config::{PlanConfig, ValidatedConfig};
use qfence_model::{Generation, PlanId, Term};

use crate::sim::fixtures::{self, site};

/// 14:02:00 UTC on some day, so sentences read like a log.
pub const T0: Millis = Millis(1_699_970_520_000);

/// The key of `s`'s binding `i` (the bench's configurations name bindings by place).
pub fn k(s: &str, i: usize) -> BindingKey {
    fixtures::placed(Some(s), i)
}

/// The key of service binding `i`.
pub fn svc(i: usize) -> BindingKey {
    fixtures::placed(None, i)
}

pub fn acts(d: &Decision) -> Vec<Action> {
    d.commands.iter().map(|c| c.action.clone()).collect()
}

pub fn check(s: &str, i: usize) -> Action {
    Action::check(k(s, i))
}

/// A service binding's check: does it point at `owner`?
pub fn check_svc(i: usize, owner: &str) -> Action {
    Action::Check {
        binding: svc(i),
        points_at: Some(site(owner)),
    }
}

pub fn fence(s: &str, i: usize) -> Action {
    Action::Fence { binding: k(s, i) }
}

/// A test bench: the runtime's part, done by hand. `world` says what a check reads (default
/// holds), `fail` what an action ends as (default done).
pub struct Bench {
    pub cfg: ValidatedConfig,
    pub plan: PlanId,
    pub state: PlanState,
    pub obs: BTreeMap<BindingKey, Observation>,
    pub results: BTreeMap<OpId, OpResult>,
    pub in_flight: BTreeMap<OpId, BindingKey>,
    pub term: Term,
    pub lease_until: Option<Millis>,
    pub leader: bool,
    pub now: Millis,
    pub world: BTreeMap<BindingKey, Observed>,
    pub fail: BTreeMap<BindingKey, Outcome>,
    /// What a check of the binding says, in words (none when absent).
    pub detail: BTreeMap<BindingKey, String>,
    /// The rules decided with: the real ones unless a test plants a bug to contrast.
    pub rules: Rules,
}

impl Bench {
    pub fn new(name: &str, plan: PlanConfig) -> Self {
        let cfg = fixtures::config_with(vec![(name, plan)]);
        let state = PlanState::initial(cfg.plan(name).unwrap());
        Self {
            cfg,
            plan: fixtures::plan_id(name),
            state,
            obs: BTreeMap::new(),
            results: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            term: Term(2),
            lease_until: None,
            leader: true,
            now: T0,
            world: BTreeMap::new(),
            fail: BTreeMap::new(),
            detail: BTreeMap::new(),
            rules: Rules::default(),
        }
    }

    pub fn lab() -> Self {
        Self::new("erp-db", fixtures::erp_plan())
    }

    pub fn full() -> Self {
        Self::new("erp-db", fixtures::erp_plan_full())
    }

    pub fn pg() -> Self {
        Self::new("pg", fixtures::pg_plan())
    }

    pub fn plan(&self) -> &PlanConfig {
        self.cfg.plan(self.plan.as_str()).unwrap()
    }

    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            config: &self.cfg,
            plan: self.plan.clone(),
            state: &self.state,
            observations: &self.obs,
            results: &self.results,
            in_flight: &self.in_flight,
            leadership: Leadership {
                leader: self.leader,
                term: self.term,
                lease_until: self
                    .lease_until
                    .unwrap_or(self.now.plus(Duration::from_secs(2))),
            },
            now: self.now,
        }
    }

    /// Decides and writes the state change, as the runtime would; runs nothing.
    pub fn decide(&mut self) -> Decision {
        let d = decide_with(&self.snapshot(), &self.rules);
        if let Some(ch) = &d.state_change {
            self.state = self.state.apply(ch).expect("the bench is the only writer");
        }
        d
    }

    /// Runs the decision's commands against the bench's world.
    pub fn run(&mut self, d: &Decision) {
        for c in &d.commands {
            let Some(b) = c.action.binding().cloned() else {
                continue;
            };
            let read_back = matches!(
                c.action,
                Action::Check { .. } | Action::ArmDeadMan { .. } | Action::RenewDeadMan { .. }
            );
            let v = self.world.get(&b).copied().unwrap_or(Observed::Holds);
            if read_back {
                let mut o = Observation::new(v, self.now);
                o.detail = self.detail.get(&b).cloned().unwrap_or_default();
                self.obs.insert(b.clone(), o);
            }
            let outcome = match c.action {
                Action::Check { .. } => Outcome::Done,
                // An arm or renewal is Done only when its read-back holds.
                Action::ArmDeadMan { .. } | Action::RenewDeadMan { .. } if v != Observed::Holds => {
                    self.fail.get(&b).copied().unwrap_or(Outcome::Failed)
                }
                _ => self.fail.get(&b).copied().unwrap_or(Outcome::Done),
            };
            self.results.insert(
                c.op.clone(),
                OpResult {
                    binding: Some(b),
                    outcome,
                    at: self.now,
                },
            );
        }
    }

    /// One second later: decide, write, run.
    pub fn step(&mut self) -> Decision {
        self.tick(1);
        let d = self.decide();
        self.run(&d);
        d
    }

    pub fn tick(&mut self, secs: u64) {
        self.now = self.now.plus(Duration::from_secs(secs));
    }

    pub fn read(&mut self, s: &str, i: usize, v: Observed) {
        self.obs.insert(k(s, i), Observation::new(v, self.now));
    }

    pub fn intent(&mut self, kind: IntentKind) {
        let generation = self.state.generation;
        self.intent_at(kind, generation);
    }

    pub fn intent_at(&mut self, kind: IntentKind, generation: Generation) {
        self.state.intents.push(Intent {
            kind,
            generation,
            by: "alice".into(),
            why: "test".into(),
            at: self.now,
        });
    }

    pub fn stage(&self) -> Option<Stage> {
        self.state.transition().map(|t| t.stage)
    }
}
