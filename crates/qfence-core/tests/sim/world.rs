//! The simulated world and the runtime that acts on it: hosts and their fences, which site
//! runs a primary copy of the resource, where the VIP points, each site's watchdog, and an
//! executor that honours `not_after`, reads every arm and renewal back, and is sometimes
//! slow, refused, or delayed past a call's deadline.
//!
//! What the world does on its own (a BMC reset disarming a watchdog, someone setting another
//! countdown, someone moving the VIP by hand) is drawn from its own random stream, so the
//! schedules of the older invariants keep their shape.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use qfence_core::rules::{Mutation, binding, fence_level};
use qfence_core::{Action, BindingKey, Command, Millis, Observation, Observed, OpResult, Outcome};
use qfence_model::{FenceLevel, Role, SiteId};

use super::{Sim, binding_timeout};

pub(super) struct Pending {
    pub cmd: Command,
    pub ready_at: Millis,
    pub lost: bool,
    /// Handed to the orchestrator at the target's site before it was cut off, and held up
    /// there: it reaches its controller whatever the leader can reach by the time it runs.
    pub forwarded: bool,
}

/// A site's hardware watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dog {
    /// Not running: never set, or disarmed (a BMC reset, `ipmitool mc watchdog off`).
    Off,
    /// Counting down; it powers the host off at `expires`. `ours`: with the countdown qfence
    /// set (someone may have set a longer one).
    Running { expires: Millis, ours: bool },
    /// It powered the host off then.
    Fired(Millis),
}

/// The imagined world the commands act on.
pub(super) struct World {
    /// Fence bindings: whether the resource is really stopped.
    pub stopped: BTreeMap<BindingKey, bool>,
    pub healthy: BTreeMap<SiteId, bool>,
    pub ready: BTreeMap<SiteId, bool>,
    pub lost: BTreeSet<SiteId>,
    pub shield_up: BTreeMap<BindingKey, bool>,
    /// Each site's watchdog.
    pub dog: BTreeMap<SiteId, Dog>,
    /// Sites whose watchdog someone disarmed or re-set since the last read-back the runtime
    /// reported: a change nobody could have seen yet.
    pub tamper_unseen: BTreeSet<SiteId>,
    /// Sites running a primary copy of the resource: promoted (or restarted in place) and
    /// not stopped since. A host powered on does not start it by itself.
    pub primary: BTreeSet<SiteId>,
    /// Where the VIP points.
    pub vip: Option<SiteId>,
    /// Sites an operator confirmed fenced while their copy ran (the simulated operators
    /// confirm at random, like a mistaken `stonith_admin --confirm`): what follows from it is
    /// theirs, not qfence's. Forgotten once the copy stops.
    pub confirmed_running: BTreeSet<SiteId>,
    /// Percent of calls that time out.
    pub flaky: u64,
}

impl World {
    /// The world of a plan owned by `owner`: its copy runs there, and the VIP (if the plan
    /// has a service binding) points there.
    pub fn new(owner: &SiteId, vip: bool) -> Self {
        Self {
            stopped: BTreeMap::new(),
            healthy: BTreeMap::new(),
            ready: BTreeMap::new(),
            lost: BTreeSet::new(),
            shield_up: BTreeMap::new(),
            dog: BTreeMap::new(),
            tamper_unseen: BTreeSet::new(),
            primary: [owner.clone()].into(),
            vip: vip.then(|| owner.clone()),
            confirmed_running: BTreeSet::new(),
            flaky: 0,
        }
    }

    fn dog(&self, s: &SiteId) -> Dog {
        self.dog.get(s).copied().unwrap_or(Dog::Off)
    }
}

impl Sim<'_> {
    /// What happens to the world behind qfence's back.
    pub(super) fn world_events(&mut self, keep: bool) {
        let sites = self.sites();
        let r = &mut self.world_rng;
        let tamper = r.pct(2);
        let reset = r.pct(50);
        let at = r.pick(&sites).clone();
        let move_vip = r.pct(2);
        let to = r.pick(&sites).clone();
        if tamper && let Dog::Running { .. } = self.world.dog(&at) {
            let now = self.now;
            let dog = if reset {
                Dog::Off
            } else {
                // A longer countdown than qfence's: its "fired by now" would be premature.
                let k = BindingKey::site_at(self.plan, &at, 0);
                let t = self
                    .dead_man_timeout(&at)
                    .unwrap_or(binding_timeout(self.plan, &k));
                Dog::Running {
                    expires: now.plus(t * 3),
                    ours: false,
                }
            };
            self.world.dog.insert(at.clone(), dog);
            self.world.tamper_unseen.insert(at.clone());
            self.stats.tampers += 1;
            self.log(keep, || {
                format!("  world: {at}'s watchdog tampered with: {dog:?}")
            });
        }
        if move_vip && !self.plan.service.is_empty() && self.world.vip.as_ref() != Some(&to) {
            self.world.vip = Some(to.clone());
            self.watch.disturb(self.now);
            self.stats.vip_moves += 1;
            self.log(keep, || format!("  world: the VIP moved to {to} by hand"));
        }
    }

    /// `site` is cut off: the calls already handed to its orchestrator stay there, and half
    /// of them are held up well past their deadline (a stuck queue, a slow forward) before
    /// they run against its controllers, which that orchestrator still reaches.
    pub(super) fn hold_calls_at(&mut self, site: &SiteId) {
        for p in self.queue.iter_mut() {
            if p.cmd.action.binding().and_then(|b| b.site.as_ref()) == Some(site)
                && self.world_rng.pct(50)
            {
                p.forwarded = true;
                p.ready_at = p.ready_at.plus(Duration::from_millis(
                    30_000 + self.world_rng.below(120_000),
                ));
            }
        }
    }

    fn dead_man_timeout(&self, s: &SiteId) -> Option<Duration> {
        self.plan.instances[s]
            .iter()
            .enumerate()
            .find(|(_, b)| b.role == Role::DeadMan)
            .map(|(i, b)| binding_timeout(self.plan, &BindingKey::new(Some(s), i, b)))
    }

    pub(super) fn reachable(&mut self, k: &BindingKey) -> bool {
        let Some(b) = binding(self.plan, k) else {
            return false;
        };
        let c = self.config.controller(b.controller.as_str()).unwrap();
        let ok = c.allowed_sites().any(|s| !self.world.lost.contains(s));
        ok && !self.rng.pct(self.world.flaky)
    }

    fn read(&mut self, k: &BindingKey) -> Observed {
        if !self.reachable(k) {
            return Observed::Unknown;
        }
        let b = binding(self.plan, k).unwrap();
        let site = k.site.clone();
        let holds = match (b.role, &site) {
            (Role::Fence, _) => self.world.stopped[k],
            (Role::Shield, _) => self.world.shield_up[k],
            (Role::Health, Some(s)) => {
                self.world.healthy[s] && !self.site_down(s) && self.world.primary.contains(s)
            }
            (Role::Readiness, Some(s)) => self.world.ready[s],
            // A hot standby reads safe while its copy is not a primary (in recovery, not
            // writable). It says nothing of the host: a stopped copy reads so too.
            (Role::Standby, Some(s)) => !self.world.primary.contains(s),
            // A service binding holds while it points at the plan's current owner.
            (Role::Service, None) => self.world.vip.as_ref() == Some(&self.state.owner),
            _ => true,
        };
        if holds {
            Observed::Holds
        } else {
            Observed::NotHeld
        }
    }

    pub(super) fn site_down(&self, s: &SiteId) -> bool {
        self.world.stopped.iter().any(|(k, v)| {
            *v && k.site.as_ref() == Some(s) && binding(self.plan, k).is_some_and(|b| b.required)
        })
    }

    // ----- the runtime executes commands -----

    pub(super) fn execute(&mut self, keep: bool) {
        let mut later = std::collections::VecDeque::new();
        while let Some(p) = self.queue.pop_front() {
            if p.ready_at > self.now {
                later.push_back(p);
                continue;
            }
            if p.lost {
                if p.cmd.action.binding().is_some_and(|b| b.site.is_none()) {
                    self.watch.disturb(p.ready_at);
                }
                continue;
            }
            // The executor refuses a command from a deposed leader.
            let outcome = if p.cmd.term < self.term {
                Outcome::Unknown
            } else {
                self.apply(&p.cmd, p.ready_at, p.forwarded)
            };
            if outcome != Outcome::Done && p.cmd.action.binding().is_some_and(|b| b.site.is_none())
            {
                self.watch.disturb(p.ready_at);
            }
            let c = p.cmd.to_string();
            self.log(keep, || format!("  exec {c}: {outcome:?}"));
            self.results.insert(
                p.cmd.op.clone(),
                OpResult {
                    binding: p.cmd.action.binding().cloned(),
                    outcome,
                    at: p.ready_at,
                },
            );
        }
        self.queue = later;
        let horizon = Millis(self.now.0.saturating_sub(90_000));
        self.results.retain(|_, r| r.at >= horizon);
    }

    fn outcome(&mut self, k: &BindingKey) -> Outcome {
        if !self.reachable(k) {
            Outcome::Unknown
        } else if self.rng.pct(8) {
            Outcome::Failed
        } else {
            Outcome::Done
        }
    }

    /// Whether an action whose answer was lost took anyway (half the time).
    fn took(&mut self, o: Outcome) -> bool {
        o == Outcome::Done || o == Outcome::Unknown && self.rng.pct(50)
    }

    fn apply(&mut self, cmd: &Command, at: Millis, forwarded: bool) -> Outcome {
        match &cmd.action {
            Action::Check { binding, .. } => {
                let v = self.read(binding);
                if binding.site.is_none() && v == Observed::Unknown {
                    self.watch.disturb(at);
                }
                self.observations
                    .insert(binding.clone(), Observation::new(v, at));
                Outcome::Done
            }
            Action::Fence { binding } => {
                let o = self.outcome(binding);
                // A timed-out fence may or may not have taken.
                if self.took(o) {
                    self.world.stopped.insert(binding.clone(), true);
                    // Whatever the fence, the copy it stops no longer runs.
                    if let Some(s) = &binding.site {
                        self.world.primary.remove(s);
                    }
                }
                o
            }
            Action::Unfence { binding } => {
                let o = self.outcome(binding);
                if o == Outcome::Done {
                    self.world.stopped.insert(binding.clone(), false);
                }
                o
            }
            Action::Recover { binding } | Action::Switchover { binding } => {
                let o = self.outcome(binding);
                if let Some(s) = &binding.site
                    && self.took(o)
                {
                    if o == Outcome::Done {
                        self.world.healthy.insert(s.clone(), true);
                    }
                    if !self.site_down(s) {
                        self.world.primary.insert(s.clone());
                        // The copy runs again: the site's resource-level fences (`vm.stop`,
                        // `db.demote`) no longer hold; its power fences are untouched.
                        for (k, stopped) in self.world.stopped.iter_mut() {
                            if k.site.as_ref() == Some(s)
                                && qfence_core::rules::binding(self.plan, k).is_some_and(|b| {
                                    !b.required
                                        || fence_level(self.config, self.plan, k)
                                            == Some(FenceLevel::Application)
                                })
                            {
                                *stopped = false;
                            }
                        }
                    }
                }
                o
            }
            Action::Service { binding, site } => {
                let o = self.outcome(binding);
                if self.took(o) {
                    self.world.vip = Some(site.clone());
                }
                o
            }
            Action::RaiseShield { binding } | Action::LowerShield { binding } => {
                let o = self.outcome(binding);
                if o == Outcome::Done {
                    let up = matches!(cmd.action, Action::RaiseShield { .. });
                    self.world.shield_up.insert(binding.clone(), up);
                }
                o
            }
            Action::ArmDeadMan { binding, not_after }
            | Action::RenewDeadMan { binding, not_after } => {
                let arm = matches!(cmd.action, Action::ArmDeadMan { .. });
                self.dead_man_call(binding, *not_after, arm, at, forwarded)
            }
            Action::DisarmDeadMan { binding } => {
                let o = self.outcome(binding);
                if self.took(o)
                    && let Some(s) = &binding.site
                    && matches!(self.world.dog(s), Dog::Running { .. })
                {
                    self.world.dog.insert(s.clone(), Dog::Off);
                }
                o
            }
            // A rejoined copy is a replica: it takes no writes and is nobody's primary, so
            // the world does not change (the sim's plans bind no rejoin yet).
            Action::Rejoin { binding } => self.outcome(binding),
            Action::Alarm { .. } => Outcome::Done,
        }
    }

    /// An arm or renewal: never acted on after `not_after` (unless the planted bug says so),
    /// then read back; Done only when the read-back shows the timer running with qfence's
    /// countdown.
    fn dead_man_call(
        &mut self,
        k: &BindingKey,
        not_after: Millis,
        arm: bool,
        at: Millis,
        forwarded: bool,
    ) -> Outcome {
        let s = k.site.clone().expect("a dead-man binding is a site's");
        let late = at > not_after && self.rules.mutation != Mutation::ActsAfterNotAfter;
        let reached = !late && (forwarded && !self.rng.pct(self.world.flaky) || self.reachable(k));
        let refused = reached && self.rng.pct(8);
        let lost_answer = !late && !reached && !self.world.lost.contains(&s) && self.rng.pct(50);
        let timeout = binding_timeout(self.plan, k);
        if (reached && !refused) || lost_answer {
            let dog = match (arm, self.world.dog(&s)) {
                (true, _) | (false, Dog::Running { ours: true, .. }) => Dog::Running {
                    expires: at.plus(timeout),
                    ours: true,
                },
                // A reset restarts someone else's longer countdown; a stopped timer is not
                // renewed (the IPMI driver refuses).
                (false, Dog::Running { ours: false, .. }) => Dog::Running {
                    expires: at.plus(timeout * 3),
                    ours: false,
                },
                (false, d) => d,
            };
            self.world.dog.insert(s.clone(), dog);
        }
        if !reached {
            self.observations
                .insert(k.clone(), Observation::new(Observed::Unknown, at));
            return Outcome::Unknown;
        }
        // A read-back the runtime reports: whatever was tampered with is now seen.
        self.world.tamper_unseen.remove(&s);
        let holds = matches!(self.world.dog(&s), Dog::Running { ours: true, .. });
        let v = if holds {
            Observed::Holds
        } else {
            Observed::NotHeld
        };
        self.observations.insert(k.clone(), Observation::new(v, at));
        if refused || !holds {
            Outcome::Failed
        } else {
            Outcome::Done
        }
    }

    pub(super) fn fire_watchdogs(&mut self) {
        let due: Vec<(SiteId, Millis)> = self
            .world
            .dog
            .iter()
            .filter_map(|(s, d)| match d {
                Dog::Running { expires, .. } if *expires <= self.now => Some((s.clone(), *expires)),
                _ => None,
            })
            .collect();
        for (s, t) in due {
            self.world.dog.insert(s.clone(), Dog::Fired(t));
            self.world.primary.remove(&s);
            let keys: Vec<BindingKey> = self
                .world
                .stopped
                .keys()
                .filter(|k| k.site.as_ref() == Some(&s))
                .filter(|k| fence_level(self.config, self.plan, k) == Some(FenceLevel::Compute))
                .cloned()
                .collect();
            for k in keys {
                self.world.stopped.insert(k, true);
            }
        }
    }

    /// Whether `site`'s watchdog really fired (and was not set again since), or was disarmed
    /// or re-set by a change no read-back could have shown yet: the one thing qfence cannot
    /// know (see ADR 0014).
    pub(super) fn dog_fired_or_unseen(&self, site: &SiteId) -> bool {
        matches!(self.world.dog(site), Dog::Fired(t) if t <= self.now)
            || self.world.tamper_unseen.contains(site)
    }
}
