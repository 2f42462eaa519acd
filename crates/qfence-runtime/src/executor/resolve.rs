//! Resolving a command's binding, once, when the executor takes the command.

use qfence_call::{Call, PreFence, Target, Verb};
use qfence_core::rules;
use qfence_core::{Action, BindingKey, Command, Millis};
use qfence_model::config::PlanConfig;
use qfence_model::{CapabilitySpec, ControllerId, FenceLevel, Role, SiteId};

use super::Executor;

/// A command's binding, resolved once when the executor takes the command: the call it makes
/// and what its result is filed under. It travels with the call to the driver and back with
/// the answer; nothing about the binding is looked up again.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The controller the binding names.
    pub controller: ControllerId,
    /// The capability's declaration in the catalog.
    pub spec: &'static CapabilitySpec,
    /// The binding's role: a fence's check feeds the fence metric.
    pub role: Role,
    /// The fence level of a fence binding's capability (`None` for other capabilities).
    pub level: Option<FenceLevel>,
    /// The call: verb, target (capability, resource, params, site), timeout, absolute
    /// deadline and pre-fence checks.
    pub call: Call,
}

impl Executor {
    /// Resolves `command`'s binding `key` in the configuration in force now (a plan changed
    /// through the API since the command was decided is at a newer generation, which the
    /// call refuses). `Err` says why there is nothing to call: the result is UNKNOWN.
    pub(super) fn resolve(&self, command: &Command, key: &BindingKey) -> Result<Resolved, String> {
        let config = self.inner.config();
        let Some(plan) = config.plan(command.plan.as_str()) else {
            return Err(format!("plan {} is not configured", command.plan));
        };
        let Some(binding) = rules::binding(plan, key) else {
            return Err(format!("plan {} has no binding {key}", command.plan));
        };
        let Some(controller) = config.controller(binding.controller.as_str()) else {
            return Err(format!(
                "controller {} is not configured",
                binding.controller
            ));
        };
        let Some(spec) = controller.controller_type().capability(&binding.capability) else {
            return Err(format!(
                "{} is not a capability of controller {}",
                binding.capability, binding.controller
            ));
        };
        let mut timeout = controller.timeout.min(plan.fence_timeout);
        let (verb, not_after) = verb_of(&command.action);
        if let Some(not_after) = not_after {
            // Never act after `not_after`: a later leader's proof that the switch fired rests
            // on it. The deadline travels with the call, absolute, so the orchestrator that
            // runs it enforces it too, however late it arrives.
            let left = not_after.since(self.inner.clock.now());
            if left.is_zero() {
                return Err(format!(
                    "{} not started: past {not_after}",
                    command.action.name()
                ));
            }
            timeout = timeout.min(left);
        }
        let site = self.site_of(command, key, plan);
        let mut call = Call::new(verb, Target::of(binding, site), timeout);
        call.not_after_unix_ms = not_after.map(|t| t.0);
        call.pre_fence = self.pre_fence(&command.action, &binding.controller);
        Ok(Resolved {
            controller: binding.controller.clone(),
            spec,
            role: binding.role,
            level: controller.fence_level(spec),
            call,
        })
    }

    /// The site the action is for: the service action's, the site a service binding's
    /// check must find it pointing at or a hot standby's check must find it following (the
    /// owner the decision saw), or the binding's own.
    fn site_of(&self, command: &Command, key: &BindingKey, plan: &PlanConfig) -> SiteId {
        match &command.action {
            Action::Service { site, .. }
            | Action::Check {
                points_at: Some(site),
                ..
            } => site.clone(),
            _ => key.site.clone().unwrap_or_else(|| plan.owner.clone()),
        }
    }

    /// The checks a fence must pass first (see [`PreFence`]), for a fence only: the identity
    /// the controller's latest test pinned, checked by the orchestrator that calls it.
    fn pre_fence(&self, action: &Action, controller: &ControllerId) -> Option<PreFence> {
        matches!(action, Action::Fence { .. }).then(|| PreFence {
            identity: self
                .inner
                .registered()
                .identity(controller)
                .map(str::to_owned),
        })
    }
}

/// The driver method an action runs, and its absolute deadline if it has one.
fn verb_of(action: &Action) -> (Verb, Option<Millis>) {
    match action {
        Action::Check { .. } => (Verb::Check, None),
        // The driver contract undoes a fence through `undo` of the fence's own capability
        // (the catalog's `unfence` names what that does, such as power.on).
        // Disarming a dead-man switch is its capability's undo, read back the same way.
        Action::Unfence { .. } | Action::LowerShield { .. } | Action::DisarmDeadMan { .. } => {
            (Verb::Undo, None)
        }
        // Arming sets the countdown from the binding and starts the timer (the driver's
        // perform); renewing restarts the countdown.
        Action::ArmDeadMan { not_after, .. } => (Verb::Perform, Some(*not_after)),
        Action::RenewDeadMan { not_after, .. } => (Verb::Renew, Some(*not_after)),
        _ => (Verb::Perform, None),
    }
}
