//! What an Instance HA decision asks the runtime to do: a closed list of typed commands, each
//! executable with one Nova call or one call of the host's fence binding.

use std::fmt;

use qfence_model::config::{Binding, HostName};
use qfence_model::{CloudId, Generation, Term};
use serde::{Deserialize, Serialize};

use super::snapshot::ServerId;
use crate::types::{Millis, OpId};

/// What a command acts on. The runtime runs one operation per target at a time, and so does
/// the core: it never issues a second command on a target with one in flight.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "target", content = "name", rename_all = "kebab-case")]
pub enum Target {
    /// A host's fence binding (its BMC or fence agent).
    Fence(HostName),
    /// A host's `nova-compute` service.
    Service(HostName),
    /// A server (lock, unlock, evacuate).
    Server(ServerId),
    /// A server's migration records (a read).
    Migrations(ServerId),
}

/// The reason qfence writes into a service's `disabled_reason`, with when: Nova's record of
/// what qfence did to the host, for operators and for a qfence that lost its own state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DisableReason {
    /// Fenced and being evacuated; `kdump` when the host was seen dumping its kernel first.
    Evacuating {
        since: Millis,
        incident: Generation,
        kdump: bool,
    },
    /// Given up: an evacuation failed too often, or the host came back on while evacuated.
    Failed { at: Millis, incident: Generation },
    /// Evacuated, and left disabled (`leave_disabled`, or an unsuccessful evacuation).
    Evacuated { at: Millis, incident: Generation },
}

impl DisableReason {
    /// Every reason qfence writes starts so; nothing else does.
    pub const PREFIX: &'static str = "qfence instance-ha";

    /// Whether a `disabled_reason` read from Nova is one qfence wrote.
    pub fn is_ours(reason: &str) -> bool {
        reason.starts_with(Self::PREFIX)
    }

    /// Whether a `disabled_reason` read from Nova is qfence's "evacuating": a host qfence
    /// fenced and was evacuating, which a qfence without its state adopts again.
    pub fn marks_evacuating(reason: &str) -> bool {
        reason
            .strip_prefix(Self::PREFIX)
            .is_some_and(|r| r.starts_with(": evacuating since"))
    }
}

impl fmt::Display for DisableReason {
    /// `qfence instance-ha: evacuating since 2023-11-14T14:02:07Z (incident 7, kdump)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = Self::PREFIX;
        match self {
            DisableReason::Evacuating {
                since,
                incident,
                kdump,
            } => {
                let k = if *kdump { ", kdump" } else { "" };
                write!(
                    f,
                    "{p}: evacuating since {} (incident {incident}{k})",
                    utc(*since)
                )
            }
            DisableReason::Failed { at, incident } => write!(
                f,
                "{p}: evacuation FAILED at {} (incident {incident}): see qfence's events",
                utc(*at)
            ),
            DisableReason::Evacuated { at, incident } => write!(
                f,
                "{p}: evacuated at {}, left disabled (incident {incident})",
                utc(*at)
            ),
        }
    }
}

/// The lock reason qfence sets on a server while it evacuates it (microversion 2.73).
pub const LOCK_REASON: &str = "qfence-instance-ha-evacuation";

/// `2023-11-14T14:02:07Z`: the UTC date and time of a point in time.
pub fn utc(t: Millis) -> String {
    qfence_model::time::utc_rfc3339(t.0)
}

/// How much an event matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    /// An operator must act.
    Alarm,
}

/// What an event says. Each is raised once, when it becomes true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum EventKind {
    /// A host's failure was seen.
    HostDown,
    /// A gate closed: nothing it covers is fenced or evacuated (the sentence has the figures).
    GateClosed {
        gate: super::gates::GateKind,
        detail: String,
    },
    /// The gate opened again.
    GateOpened {
        gate: super::gates::GateKind,
    },
    /// The host failed but has no fence: it is never evacuated.
    NoFence {
        why: String,
    },
    /// fence_kdump messages from the host: its fence waits for the dump.
    Kdump,
    FencingStarted {
        attempt: u32,
    },
    /// The fence was read back: the host is off.
    Fenced {
        detail: String,
    },
    /// The fence could not be proven after every attempt: nothing is evacuated.
    FenceNotProven {
        detail: String,
    },
    ReservedHostEnabled {
        spare: HostName,
    },
    NoReservedHost,
    EvacuationStarted {
        servers: usize,
    },
    /// One server's evacuation failed (`failures` of `of`).
    EvacuationFailed {
        server: ServerId,
        failures: u32,
        of: u32,
    },
    /// Smart evacuation gave up on the host: what the operator must do.
    SmartEvacuationFailed {
        server: ServerId,
        steps: Vec<String>,
    },
    /// Every server was evacuated (`unsuccessful` of them not).
    Evacuated {
        done: usize,
        unsuccessful: usize,
    },
    /// Left disabled and forced down, and why.
    LeftDisabled {
        why: String,
    },
    /// The fence read the host powered on while its servers were being evacuated.
    PoweredOnWhileEvacuated,
    PoweredOn,
    /// Back in service: enabled, reporting, forced-down cleared.
    Recovered,
    /// An operator brought a host qfence had left disabled back into service.
    ReturnedByOperator,
    /// A new leader took over a host half done.
    Resumed {
        phase: String,
    },
}

impl EventKind {
    /// How much it matters.
    pub fn severity(&self) -> Severity {
        match self {
            EventKind::GateClosed { .. }
            | EventKind::NoFence { .. }
            | EventKind::FenceNotProven { .. }
            | EventKind::SmartEvacuationFailed { .. }
            | EventKind::PoweredOnWhileEvacuated => Severity::Alarm,
            EventKind::HostDown
            | EventKind::NoReservedHost
            | EventKind::EvacuationFailed { .. }
            | EventKind::LeftDisabled { .. } => Severity::Warning,
            _ => Severity::Info,
        }
    }
}

/// An event for the event log (and an alarm when its severity says so).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub host: Option<HostName>,
    pub kind: EventKind,
}

/// The five steps the seed lists for a host smart evacuation gave up on.
pub fn operator_steps(host: &HostName, server: &ServerId) -> Vec<String> {
    vec![
        format!("find out why server {server} could not be evacuated"),
        format!("evacuate every other server still on {host}"),
        format!("set {host}'s forced-down flag to false"),
        format!("enable {host}'s compute service"),
        format!("make sure {host} restarted successfully"),
    ]
}

/// What a command asks the runtime to do. (Serialised for the event log and the API; a
/// command is made only by a decision, so it is never read back.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Run the host's fence (its binding's perform). Proves nothing by itself.
    Fence { host: HostName, binding: Binding },
    /// Read the fence back (its binding's check), recorded as the host's fence reading.
    CheckFence { host: HostName, binding: Binding },
    /// Power the host back on (its binding's undo).
    PowerOn { host: HostName, binding: Binding },
    /// `PUT /os-services/{id}` status disabled, with the reason.
    Disable {
        host: HostName,
        reason: DisableReason,
    },
    /// `PUT /os-services/{id}` forced_down true.
    ForceDown { host: HostName },
    /// `PUT /os-services/{id}` status enabled.
    Enable { host: HostName },
    /// `PUT /os-services/{id}` forced_down false.
    ClearForcedDown { host: HostName },
    /// Enable a reserved host for a failed one (status enabled).
    EnableReserved { host: HostName, for_host: HostName },
    /// `POST /servers/{id}/action` lock, with the reason.
    Lock { server: ServerId, reason: String },
    /// `POST /servers/{id}/action` unlock.
    Unlock { server: ServerId },
    /// `POST /servers/{id}/action` evacuate, to `to` or wherever the scheduler places it.
    Evacuate {
        server: ServerId,
        from: HostName,
        to: Option<HostName>,
    },
    /// Read the server's evacuation migrations now (`GET /os-migrations?instance_uuid=`).
    FollowMigration { server: ServerId },
    /// Record an event (and raise an alarm for one of that severity).
    Event { event: Event },
}

impl Action {
    /// What it acts on; `None` for an event.
    pub fn target(&self) -> Option<Target> {
        Some(match self {
            Action::Fence { host, .. }
            | Action::CheckFence { host, .. }
            | Action::PowerOn { host, .. } => Target::Fence(host.clone()),
            Action::Disable { host, .. }
            | Action::ForceDown { host }
            | Action::Enable { host }
            | Action::ClearForcedDown { host }
            | Action::EnableReserved { host, .. } => Target::Service(host.clone()),
            Action::Lock { server, .. }
            | Action::Unlock { server }
            | Action::Evacuate { server, .. } => Target::Server(server.clone()),
            Action::FollowMigration { server } => Target::Migrations(server.clone()),
            Action::Event { .. } => return None,
        })
    }

    /// The action's short name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Fence { .. } => "fence",
            Action::CheckFence { .. } => "check-fence",
            Action::PowerOn { .. } => "power-on",
            Action::Disable { .. } => "disable",
            Action::ForceDown { .. } => "force-down",
            Action::Enable { .. } => "enable",
            Action::ClearForcedDown { .. } => "clear-forced-down",
            Action::EnableReserved { .. } => "enable-reserved",
            Action::Lock { .. } => "lock",
            Action::Unlock { .. } => "unlock",
            Action::Evacuate { .. } => "evacuate",
            Action::FollowMigration { .. } => "follow-migration",
            Action::Event { .. } => "event",
        }
    }
}

/// One command: what to do, for which cloud and incident, decided in which term. An executor
/// refuses it when it knows a newer term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command {
    pub op: OpId,
    pub cloud: CloudId,
    /// The incident of the host it is for, if any.
    pub incident: Option<Generation>,
    pub term: Term,
    pub action: Action,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.action.name())?;
        match &self.action {
            Action::Fence { host, binding }
            | Action::CheckFence { host, binding }
            | Action::PowerOn { host, binding } => write!(
                f,
                "{host} ({} on {})",
                binding.capability, binding.controller
            )?,
            Action::Disable { host, reason } => write!(f, "{host}: {reason}")?,
            Action::ForceDown { host }
            | Action::Enable { host }
            | Action::ClearForcedDown { host } => {
                write!(f, "{host}")?;
            }
            Action::EnableReserved { host, for_host } => write!(f, "{host} for {for_host}")?,
            Action::Lock { server, .. }
            | Action::Unlock { server }
            | Action::FollowMigration { server } => write!(f, "{server}")?,
            Action::Evacuate { server, from, to } => match to {
                Some(to) => write!(f, "{server} from {from} to {to}")?,
                None => write!(f, "{server} from {from}")?,
            },
            Action::Event { event } => match &event.host {
                Some(h) => write!(f, "{h}: {:?}", event.kind)?,
                None => write!(f, "{:?}", event.kind)?,
            },
        }
        match self.incident {
            Some(i) => write!(f, " (incident {i}, t{})", self.term),
            None => write!(f, " (t{})", self.term),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(utc(Millis(1_699_970_527_999)), "2023-11-14T14:02:07Z");
        assert_eq!(utc(Millis(0)), "1970-01-01T00:00:00Z");
        assert_eq!(utc(Millis(951_782_400_000)), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn qfence_recognises_only_its_own_disable_reasons() {
        let r = DisableReason::Evacuating {
            since: Millis(1_699_970_527_000),
            incident: Generation(7),
            kdump: true,
        };
        assert_eq!(
            r.to_string(),
            "qfence instance-ha: evacuating since 2023-11-14T14:02:07Z (incident 7, kdump)"
        );
        assert!(DisableReason::is_ours(&r.to_string()));
        assert!(!DisableReason::is_ours("reserved for instance HA"));
    }
}
