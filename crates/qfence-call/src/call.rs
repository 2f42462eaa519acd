//! The call: which driver method, on what, for how long.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::{ControllerId, ControllerType, SiteId};
use serde::{Deserialize, Serialize};

/// Which driver method a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// Reads whether the capability's condition holds (`Driver::check`).
    Check,
    /// Makes the condition hold and reads it back (`Driver::perform`).
    Perform,
    /// Undoes the capability and reads it back (`Driver::undo`).
    Undo,
    /// Renews a dead-man switch (`Driver::renew`).
    Renew,
    /// The registration check of the whole controller (the target's capability and resource
    /// are empty); answered with [`Answer::Report`](crate::Answer::Report).
    Register,
    /// The driver's discovery (capability and resource are empty); answered with
    /// [`Answer::Discovered`](crate::Answer::Discovered).
    Discover,
    /// The driver's read-only check of one binding (`check_binding`); answered with
    /// [`Answer::Problems`](crate::Answer::Problems), empty when fine.
    CheckBinding,
}

impl Verb {
    /// Whether the call may change its target (so it takes a turn among the changes, and
    /// readings that began before it are not believed after it).
    pub fn changes(self) -> bool {
        matches!(self, Verb::Perform | Verb::Undo | Verb::Renew)
    }
}

/// What one binding's capability acts on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Target {
    /// The capability's name (`power.off`).
    pub capability: String,
    /// The resource the binding names (`pve-dc1-01/101`).
    pub resource: String,
    /// The binding's capability parameters.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// The site the action is for: the binding's site, or for a service binding the site that
    /// should own it.
    pub site: SiteId,
}

impl Target {
    /// The target of `binding` at `site`.
    pub fn of(binding: &qfence_model::config::Binding, site: SiteId) -> Self {
        Self {
            capability: binding.capability.clone(),
            resource: binding.resource.clone(),
            params: binding.params.clone(),
            site,
        }
    }

    /// A target of the whole controller (registration, discovery): no capability, no
    /// resource.
    pub fn controller(site: SiteId) -> Self {
        Self {
            capability: String::new(),
            resource: String::new(),
            params: BTreeMap::new(),
            site,
        }
    }

    /// A binding parameter of this target's capability, read through the catalog's
    /// declaration of it (`qfence_model::catalog::Params`). Drivers read parameters only
    /// through this, so every parameter a driver reads is one configuration validation
    /// checked. Reading an undeclared one is a bug: it panics in debug builds (tests), and
    /// in release reads nothing, as validation lets no undeclared parameter through.
    pub fn param(&self, ty: ControllerType, name: &str) -> Option<&str> {
        let declared = ty
            .capability(&self.capability)
            .and_then(|c| c.params.get(name))
            .is_some();
        debug_assert!(
            declared,
            "a {ty} driver reads param {name:?} of {}, which the catalog does not declare",
            self.capability
        );
        if !declared {
            return None;
        }
        self.params.get(name).map(String::as_str)
    }
}

/// The checks the driver contract names before every fence (docs/specs/controller.md §4):
/// the controller still answers with the identity its registration pinned (not a BMC
/// replaced, or an address now pointing at another host's), and the binding's own check
/// passes (the VM is on the node the binding names). A failed check is a refusal with the
/// reason, never a fence of the wrong thing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PreFence {
    /// The identity the controller's latest test read; `None` when no test read one (only the
    /// binding is checked then).
    pub identity: Option<String>,
}

/// One controller call, here or forwarded to another orchestrator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub verb: Verb,
    /// Flattened on the wire: a call reads as it did before it had a `Target`.
    #[serde(flatten)]
    pub target: Target,
    /// How long the call may take, from when the executing orchestrator starts it.
    #[serde(rename = "timeout_ms", with = "millis")]
    pub timeout: Duration,
    /// An absolute deadline (Unix milliseconds, the executing orchestrator's clock) after
    /// which the call must not act: a dead-man arm's or renewal's `not_after`. The executing
    /// side refuses a call that arrives after it and cuts the call's own timeout to it, so a
    /// forward delayed in transit or in a queue can never act late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after_unix_ms: Option<u64>,
    /// With `register`: the identities of the registered controllers (from the replicated
    /// state), so a second controller of the same system is warned of wherever it runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub known: BTreeMap<ControllerId, String>,
    /// With `perform` of a fence: the checks the executing orchestrator runs first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_fence: Option<PreFence>,
}

impl Call {
    /// A call of `verb` on `target` within `timeout`, with no absolute deadline.
    pub fn new(verb: Verb, target: Target, timeout: Duration) -> Self {
        Self {
            verb,
            target,
            timeout,
            not_after_unix_ms: None,
            known: BTreeMap::new(),
            pre_fence: None,
        }
    }

    /// The registration check of a controller at `site`, within `timeout`.
    pub fn register(site: SiteId, timeout: Duration) -> Self {
        Self::new(Verb::Register, Target::controller(site), timeout)
    }

    /// The discovery of a controller at `site`, within `timeout`.
    pub fn discover(site: SiteId, timeout: Duration) -> Self {
        Self::new(Verb::Discover, Target::controller(site), timeout)
    }

    /// The read-only check of `binding` at `site`, within `timeout`.
    pub fn check_binding(
        binding: &qfence_model::config::Binding,
        site: SiteId,
        timeout: Duration,
    ) -> Self {
        Self::new(Verb::CheckBinding, Target::of(binding, site), timeout)
    }

    /// The same call with another verb (an undo's read-back is a check of the same target).
    #[must_use]
    pub fn with_verb(&self, verb: Verb) -> Self {
        Self {
            verb,
            pre_fence: None,
            ..self.clone()
        }
    }

    /// How long the call may still take at `now` (Unix milliseconds): its timeout, cut to
    /// its absolute deadline; `Err` says why it must not run at all.
    pub fn time_left(&self, now: u64) -> Result<Duration, String> {
        match self.not_after_unix_ms {
            None => Ok(self.timeout),
            Some(not_after) if now >= not_after => Err(format!(
                "not run: it arrived {} ms after its deadline (not after {})",
                now - not_after,
                qfence_model::time::utc_clock(not_after)
            )),
            Some(not_after) => Ok(self.timeout.min(Duration::from_millis(not_after - now))),
        }
    }
}

/// A duration as whole milliseconds on the wire.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> SiteId {
        SiteId::new("dc1").unwrap()
    }

    #[test]
    fn a_call_past_its_absolute_deadline_is_refused_and_one_before_it_is_cut_to_it() {
        let mut call = Call::register(site(), Duration::from_secs(10));
        assert_eq!(call.time_left(5_000), Ok(Duration::from_secs(10)));
        call.not_after_unix_ms = Some(7_000);
        assert_eq!(call.time_left(5_000), Ok(Duration::from_secs(2)));
        assert_eq!(call.time_left(6_999), Ok(Duration::from_millis(1)));
        let late = call.time_left(7_250).unwrap_err();
        assert!(late.contains("250 ms after its deadline"), "{late}");
        assert!(call.time_left(7_000).is_err());
    }

    #[test]
    fn a_call_without_a_deadline_reads_as_none_on_the_wire() {
        // An old orchestrator's call without the field reads as no deadline.
        let old = serde_json::json!({"verb": "renew", "capability": "watchdog",
            "resource": "h", "site": "dc1", "timeout_ms": 3000});
        let old: Call = serde_json::from_value(old).unwrap();
        assert_eq!(old.not_after_unix_ms, None);
        assert_eq!(old.timeout, Duration::from_secs(3));
        let back: Call = serde_json::from_value(serde_json::to_value(&old).unwrap()).unwrap();
        assert_eq!(back, old);
    }
}
