//! The values `decide` reads and writes: time, binding keys, observations, leadership,
//! commands and operation ids.

use std::fmt;
use std::time::Duration;

use qfence_model::config::{Binding, PlanConfig};
use qfence_model::{BindingId, Generation, PlanId, SiteId, Term};
use serde::{Deserialize, Serialize};

/// A point in time: milliseconds since the Unix epoch, as read by the leader's clock and passed
/// in. The core never reads a clock itself.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// This time plus a duration (saturating).
    #[must_use]
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(ms(d)))
    }

    /// How long after `earlier` this is (zero when it is not after).
    pub fn since(self, earlier: Millis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in whole milliseconds.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl fmt::Display for Millis {
    /// `HH:MM:SS` of the UTC day: what an operator compares with their logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = (self.0 / 1000) % 86_400;
        write!(f, "{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    }
}

/// Which binding of a plan: one of a site's bindings, or one of the plan's service bindings
/// (`site: None`), named by its stable id ([`Binding::stable_id`]), never by its position, so
/// a reading or a result filed under a key stays with its binding whatever is added, removed
/// or moved around it in the list.
///
/// `at`, where the binding stood when the key was made, is only what `Display` shows
/// (`dc1[0]`, as the configuration's paths name it, which an operator can find in the file):
/// equality, order and hash ignore it, and a lookup uses it only as a first guess.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "StoredKey")]
pub struct BindingKey {
    /// The instance's site, or `None` for a service binding.
    pub site: Option<SiteId>,
    /// The binding's stable id within its list.
    pub id: BindingId,
    /// Position in the list when the key was made: for display only.
    pub at: usize,
}

/// A key as stored, including one a build before ids wrote (`{site, index}`, in a transition's
/// `pending` and `fenced`).
#[derive(Deserialize)]
struct StoredKey {
    site: Option<SiteId>,
    id: Option<BindingId>,
    #[serde(default, alias = "index")]
    at: usize,
}

impl From<StoredKey> for BindingKey {
    /// A positional key cannot be resolved without the configuration it was made from, so
    /// it becomes one that names no binding (no derived id has a dot): its operation is
    /// issued again by the leader that re-enters the step, and an abort leaves its fence as
    /// it is, for an operator to undo.
    fn from(k: StoredKey) -> Self {
        let id = k
            .id
            .unwrap_or_else(|| BindingId::new(format!("position.{}", k.at)).expect("a valid name"));
        Self {
            site: k.site,
            id,
            at: k.at,
        }
    }
}

impl BindingKey {
    /// The key of `binding`, at position `at` of `site`'s list (`None`: the service list).
    pub fn new(site: Option<&SiteId>, at: usize, binding: &Binding) -> Self {
        Self {
            site: site.cloned(),
            id: binding.stable_id(),
            at,
        }
    }

    /// The key of the binding at `pos` in `plan` as configured now, if there is one there:
    /// for an operator's `dc1[0]` and for tests.
    pub fn at(plan: &PlanConfig, pos: &BindingPos) -> Option<Self> {
        let list = match &pos.site {
            Some(site) => plan.instance(site)?,
            None => plan.service.as_slice(),
        };
        Some(Self::new(
            pos.site.as_ref(),
            pos.index,
            list.get(pos.index)?,
        ))
    }

    /// The key of `site`'s binding at `index` in `plan` (panics if there is none: for tests).
    pub fn site_at(plan: &PlanConfig, site: &SiteId, index: usize) -> Self {
        Self::at(plan, &BindingPos::site(site, index))
            .unwrap_or_else(|| panic!("{site} has no binding [{index}]"))
    }

    /// The key of the service binding at `index` in `plan` (panics if there is none: for
    /// tests).
    pub fn service_at(plan: &PlanConfig, index: usize) -> Self {
        Self::at(plan, &BindingPos::service(index))
            .unwrap_or_else(|| panic!("the plan has no service binding [{index}]"))
    }

    /// Where the key was made in the configuration (site, then position): to list keys
    /// in the configuration's order, as an operator reads the file, rather than by id.
    pub fn place(&self) -> (Option<&SiteId>, usize) {
        (self.site.as_ref(), self.at)
    }

    fn identity(&self) -> (&Option<SiteId>, &BindingId) {
        (&self.site, &self.id)
    }
}

impl PartialEq for BindingKey {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for BindingKey {}

impl PartialOrd for BindingKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BindingKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl std::hash::Hash for BindingKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl fmt::Display for BindingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        BindingPos {
            site: self.site.clone(),
            index: self.at,
        }
        .fmt(f)
    }
}

/// A binding as an operator names it: by its position in a site's (or the service's) list of
/// the configuration in force, `dc1[0]` or `service[0]`. Only [`BindingKey::at`] turns it into
/// a key; nothing is filed under a position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BindingPos {
    /// The instance's site, or `None` for a service binding.
    pub site: Option<SiteId>,
    /// Position in the instance's (or the service's) binding list.
    pub index: usize,
}

impl BindingPos {
    /// A site's binding.
    pub fn site(site: &SiteId, index: usize) -> Self {
        Self {
            site: Some(site.clone()),
            index,
        }
    }

    /// A service binding.
    pub fn service(index: usize) -> Self {
        Self { site: None, index }
    }
}

impl fmt::Display for BindingPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.site {
            Some(s) => write!(f, "{s}[{}]", self.index),
            None => write!(f, "service[{}]", self.index),
        }
    }
}

impl std::str::FromStr for BindingPos {
    type Err = String;

    /// `dc1[0]` (a site's first binding) or `service[0]`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?} is not a binding: write SITE[INDEX] or service[INDEX], e.g. dc1[0]");
        let (name, rest) = s.split_once('[').ok_or_else(bad)?;
        let index = rest
            .strip_suffix(']')
            .and_then(|i| i.parse::<usize>().ok())
            .ok_or_else(bad)?;
        if name == "service" {
            return Ok(Self::service(index));
        }
        let site = SiteId::new(name).map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Self::site(&site, index))
    }
}

pub use qfence_call::Observed;

/// The latest check of one binding, with when it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub value: Observed,
    /// When it was read (the reader's clock, bounded skew assumed; see the decision-core spec).
    pub at: Millis,
    /// What was read, in words an operator can check ("PowerState=Off").
    pub detail: String,
    /// For a reading that does not hold: whether it is the target's own word (the server
    /// refused the connection while its host answered), not a reading that may merely be
    /// lost or late. Never true for `Unknown`.
    #[serde(default)]
    pub definitive: bool,
}

impl Observation {
    /// An observation without detail.
    pub fn new(value: Observed, at: Millis) -> Self {
        Self {
            value,
            at,
            detail: String::new(),
            definitive: false,
        }
    }

    /// A definitive unhealthy reading without detail.
    pub fn definitive(at: Millis) -> Self {
        Self {
            definitive: true,
            ..Self::new(Observed::NotHeld, at)
        }
    }
}

/// How an executed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The target accepted and did it (for a check: the reading was recorded).
    Done,
    /// The target refused or the action did not take.
    Failed,
    /// No answer: timeout, unreachable, cancelled. Never success.
    Unknown,
}

/// The result of one executed command, as the runtime reports it in the next snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpResult {
    /// The binding the command acted on.
    pub binding: Option<BindingKey>,
    pub outcome: Outcome,
    /// When it finished.
    pub at: Millis,
}

/// Whether this orchestrator leads, in which term, and until when its lease holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leadership {
    pub leader: bool,
    pub term: Term,
    /// The lease is valid strictly before this time.
    pub lease_until: Millis,
}

impl Leadership {
    /// Whether it may decide at `now`: it leads and its lease has not run out.
    pub fn valid_at(&self, now: Millis) -> bool {
        self.leader && now < self.lease_until
    }
}

/// An operation's id: unique per plan, generation, term, state revision, decision time and
/// position in the decision. The runtime reports results by it and keeps one operation per
/// binding at a time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpId(pub String);

impl OpId {
    pub(crate) fn new(
        plan: &PlanId,
        generation: Generation,
        term: Term,
        revision: u64,
        now: Millis,
        n: usize,
    ) -> Self {
        Self(format!(
            "{plan}/g{generation}/t{term}/r{revision}/{}/{n}",
            now.0
        ))
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a command asks the runtime to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Read the binding's state (fence check, health, readiness, shield status) and record it
    /// as an observation. A service binding's check asks whether the service points at
    /// `points_at` (the owner, as the decision saw it); so does a hot standby's `standby`
    /// check (does it follow the owner?); other site bindings' have none.
    Check {
        binding: BindingKey,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        points_at: Option<SiteId>,
    },
    /// Run the fence. Idempotent: an already stopped resource is success. Proves nothing by
    /// itself; a later `Check` is the proof.
    Fence { binding: BindingKey },
    /// Undo the fence at the site being promoted (`unfence_on_promote`).
    Unfence { binding: BindingKey },
    /// Restart the copy in place.
    Recover { binding: BindingKey },
    /// Promote the application at the new owner.
    Switchover { binding: BindingKey },
    /// Point the service at `site` (a VIP).
    Service { binding: BindingKey, site: SiteId },
    /// Turn a site's stopped copy into a replica of the owner (`db.rejoin`). Issued once, in
    /// steady state, at a site a committed planned switchover stopped; never at the owner.
    Rejoin { binding: BindingKey },
    /// Raise the shield at the owner site.
    RaiseShield { binding: BindingKey },
    /// Lower it once every other site is confirmed fenced.
    LowerShield { binding: BindingKey },
    /// Arm the owner's dead-man switch: set its countdown from the binding's
    /// `timeout_seconds` and start the timer (the driver's `perform`). Issued when a site
    /// becomes the owner and whenever the switch reads not running or its last arm or renewal
    /// failed. Like [`Action::RenewDeadMan`]: never acted on after `not_after`, read back
    /// afterwards and reported as the binding's observation (Holds = running with qfence's
    /// countdown), Done only when the call succeeded and the read-back holds.
    ArmDeadMan {
        binding: BindingKey,
        not_after: Millis,
    },
    /// Renew the owner's armed dead-man switch (the driver's `renew`). The executor must not
    /// act after `not_after`: that bound is what lets a later leader prove the switch has
    /// fired. Read back like [`Action::ArmDeadMan`]; Done only when the read-back holds.
    RenewDeadMan {
        binding: BindingKey,
        not_after: Millis,
    },
    /// Stop a former owner's dead-man switch (the driver's `undo`), issued with the commit of
    /// a planned switchover that left that site's host running: without it the switch would
    /// power the host off one countdown after the last renewal. Read back independently: Done
    /// only when the switch reads not running.
    DisarmDeadMan { binding: BindingKey },
    /// Tell an operator: a site that should be fenced is not, or qfence would act but may not.
    Alarm {
        site: Option<SiteId>,
        detail: String,
    },
}

impl Action {
    /// A site binding's check.
    pub fn check(binding: BindingKey) -> Self {
        Action::Check {
            binding,
            points_at: None,
        }
    }

    /// The binding acted on, if any.
    pub fn binding(&self) -> Option<&BindingKey> {
        match self {
            Action::Check { binding, .. }
            | Action::Fence { binding }
            | Action::Unfence { binding }
            | Action::Recover { binding }
            | Action::Switchover { binding }
            | Action::Service { binding, .. }
            | Action::Rejoin { binding }
            | Action::RaiseShield { binding }
            | Action::LowerShield { binding }
            | Action::ArmDeadMan { binding, .. }
            | Action::RenewDeadMan { binding, .. }
            | Action::DisarmDeadMan { binding } => Some(binding),
            Action::Alarm { .. } => None,
        }
    }

    /// The action's short name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Check { .. } => "check",
            Action::Fence { .. } => "fence",
            Action::Unfence { .. } => "unfence",
            Action::Recover { .. } => "recover",
            Action::Switchover { .. } => "switchover",
            Action::Service { .. } => "service",
            Action::Rejoin { .. } => "rejoin",
            Action::RaiseShield { .. } => "raise-shield",
            Action::LowerShield { .. } => "lower-shield",
            Action::ArmDeadMan { .. } => "arm-dead-man",
            Action::RenewDeadMan { .. } => "renew-dead-man",
            Action::DisarmDeadMan { .. } => "disarm-dead-man",
            Action::Alarm { .. } => "alarm",
        }
    }
}

/// One command of a decision: what to do, and the plan, generation and term it was decided at.
/// An executor refuses it when it knows a newer term or generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub op: OpId,
    pub plan: PlanId,
    pub generation: Generation,
    pub term: Term,
    pub action: Action,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.action.name())?;
        match &self.action {
            Action::Service { binding, site } => write!(f, "{binding} -> {site}")?,
            Action::ArmDeadMan { binding, not_after }
            | Action::RenewDeadMan { binding, not_after } => {
                write!(f, "{binding} until {not_after}")?;
            }
            Action::Alarm { site, detail } => match site {
                Some(s) => write!(f, "{s}: {detail}")?,
                None => write!(f, "{detail}")?,
            },
            a => write!(
                f,
                "{}",
                a.binding().expect("every other action has a binding")
            )?,
        }
        write!(f, " (g{} t{})", self.generation, self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_positions_read_back_what_they_print() {
        for s in ["dc1[0]", "service[2]", "dc-3.b[11]"] {
            let k: BindingPos = s.parse().unwrap();
            assert_eq!(k.to_string(), s);
        }
        assert_eq!(
            "service[0]".parse::<BindingPos>(),
            Ok(BindingPos::service(0))
        );
        for bad in ["dc1", "dc1[]", "dc1[-1]", "[0]", "dc1[0", "d c[0]"] {
            assert!(bad.parse::<BindingPos>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_is_its_site_and_id_whatever_place_it_was_made_at() {
        let b = Binding {
            controller: qfence_model::ControllerId::new("bmc-dc1").unwrap(),
            capability: "power.off".into(),
            resource: "host".into(),
            role: qfence_model::Role::Fence,
            required: true,
            params: Default::default(),
            id: None,
        };
        let dc1 = SiteId::new("dc1").unwrap();
        let (first, third) = (
            BindingKey::new(Some(&dc1), 0, &b),
            BindingKey::new(Some(&dc1), 2, &b),
        );
        assert_eq!(first, third);
        assert_eq!(first.cmp(&third), std::cmp::Ordering::Equal);
        assert_eq!(
            (first.to_string(), third.to_string()),
            ("dc1[0]".into(), "dc1[2]".into())
        );
        assert_ne!(
            first,
            BindingKey::new(None, 0, &b),
            "a service binding is another key"
        );
        let other = Binding {
            resource: "other-host".into(),
            ..b.clone()
        };
        assert_ne!(first, BindingKey::new(Some(&dc1), 0, &other));
    }

    #[test]
    fn a_positional_key_from_an_older_build_decodes_and_names_no_binding() {
        let k: BindingKey = serde_json::from_str(r#"{"site":"dc1","index":2}"#).unwrap();
        assert_eq!(
            (k.to_string(), k.id.as_str()),
            ("dc1[2]".into(), "position.2")
        );
        let back: BindingKey = serde_json::from_str(&serde_json::to_string(&k).unwrap()).unwrap();
        assert_eq!((back.clone(), back.at), (k, 2));
    }

    #[test]
    fn times_print_as_the_utc_time_of_day() {
        assert_eq!(Millis(1_699_970_527_999).to_string(), "14:02:07");
        assert_eq!(Millis(0).to_string(), "00:00:00");
        assert_eq!(Millis(5).plus(Duration::from_millis(7)), Millis(12));
        assert_eq!(Millis(5).since(Millis(9)), Duration::ZERO);
    }

    #[test]
    fn a_lease_is_valid_strictly_before_its_end_and_only_for_a_leader() {
        let l = Leadership {
            leader: true,
            term: Term(3),
            lease_until: Millis(100),
        };
        assert!(l.valid_at(Millis(99)));
        assert!(!l.valid_at(Millis(100)));
        assert!(!Leadership { leader: false, ..l }.valid_at(Millis(1)));
    }
}
