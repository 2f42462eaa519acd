//! What the API shows of Instance HA: each cloud's hosts with their state, the evacuations and
//! the last decision. The hosts being processed come from the replicated state (any
//! orchestrator can answer); the hosts Nova reported and the last sentence from the leader's
//! own loop (a follower says it is not the leader).

use qfence_core::Millis;
use qfence_core::instance_ha::{CloudState, EvacState, HostPhase, LockState, NovaView, ServerId};
use qfence_model::config::HostName;
use qfence_model::{CloudId, Term};
use serde::{Deserialize, Serialize};

/// A cloud as this orchestrator's loop last saw it.
#[derive(Debug, Clone, Default)]
pub struct CloudRuntime {
    /// Whether this orchestrator's loop decides (it leads).
    pub leading: bool,
    pub term: Option<Term>,
    pub last_decision: Option<String>,
    pub decided_at: Option<Millis>,
    /// The last poll of Nova.
    pub view: Option<NovaView>,
    pub nova_reachable: bool,
    /// The state as last decided on (or written).
    pub state: Option<CloudState>,
}

/// `GET /instance-ha`: every cloud.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceHaStatus {
    pub clouds: Vec<CloudStatus>,
}

/// One cloud: its last decision, its hosts and its evacuations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CloudStatus {
    pub cloud: String,
    /// The Nova controller.
    pub nova: String,
    /// `disabled: true` in its configuration: failures are recorded, nothing else is done.
    #[serde(default)]
    pub disabled: bool,
    /// Whether the answering orchestrator runs this cloud's decisions (it leads); a follower
    /// shows the replicated hosts only.
    pub leading: bool,
    /// The last decision's sentence ("fencing decision: ...").
    pub last_decision: Option<String>,
    /// When it was decided, Unix ms.
    pub decided_at_ms: Option<u64>,
    /// Whether the last poll of Nova answered.
    pub nova_reachable: bool,
    /// Hosts Nova reports, and hosts being processed.
    pub hosts: Vec<HostStatus>,
    pub evacuations: Vec<EvacuationStatus>,
    /// Gates announced closed (`threshold`, `heartbeat-cliff`, ...).
    pub gates_closed: Vec<String>,
}

/// One compute host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostStatus {
    pub cloud: String,
    pub host: String,
    /// `up`, `failed`, `disabled`, or the phase of its incident (`fencing`, `evacuating`,
    /// `left disabled`, `halted`...).
    pub state: String,
    /// Its incident's number while it is being processed.
    pub incident: Option<u64>,
    /// Since when it is in this state, Unix ms: its incident's phase was entered, or it was
    /// first seen failed. `None` for a host that is up or disabled.
    #[serde(default)]
    pub since_ms: Option<u64>,
    pub site: Option<String>,
    /// Nova's word on its service: `up`/`down`, `enabled`/`disabled`, forced down.
    pub service: Option<String>,
    pub forced_down: Option<bool>,
    /// When its fence was proven by read-back, Unix ms.
    pub fenced_at_ms: Option<u64>,
    /// Why it halted or was left disabled.
    pub why: Option<String>,
}

/// One server's evacuation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvacuationStatus {
    pub cloud: String,
    /// The host it is evacuated from.
    pub host: String,
    pub incident: u64,
    pub server: String,
    /// The server's name, as the last poll of Nova read it.
    #[serde(default)]
    pub server_name: Option<String>,
    /// The host it went to, when Nova says: its migration's destination, or where the last
    /// poll found it once it left `host`.
    #[serde(default)]
    pub to_host: Option<String>,
    /// `pending`, `requested`, `following`, `done`, `unsuccessful`.
    pub state: String,
    /// Evacuate requests sent (the attempts).
    pub requests: u32,
    pub failures: u32,
    /// qfence's lock on it: `unlocked`, `locking`, `locked`, `unlocking`, `skipped`.
    pub lock: String,
}

fn phase_why(p: &HostPhase) -> Option<String> {
    match p {
        HostPhase::LeftDisabled { why } => Some(format!("{why:?}").to_lowercase()),
        HostPhase::Halted { why } => Some(
            serde_json::to_value(why)
                .ok()
                .and_then(|v| v["why"].as_str().map(str::to_owned))
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

fn evac_state(e: &EvacState) -> &'static str {
    match e {
        EvacState::Pending => "pending",
        EvacState::Requested { .. } => "requested",
        EvacState::Following { .. } => "following",
        EvacState::Done { .. } => "done",
        EvacState::Unsuccessful => "unsuccessful",
    }
}

fn lock_state(l: &LockState) -> &'static str {
    match l {
        LockState::Unlocked => "unlocked",
        LockState::Locking { .. } => "locking",
        LockState::Locked => "locked",
        LockState::Unlocking { .. } => "unlocking",
        LockState::Skipped => "skipped",
    }
}

/// Where `server`, evacuated from `from`, went: the destination of its newest evacuation's
/// migration from `from`, else the host the view places it on when that is not `from`.
fn to_host(view: Option<&NovaView>, server: &ServerId, from: &HostName) -> Option<String> {
    let view = view?;
    let migrated = view
        .migrations
        .iter()
        .filter(|m| &m.server == server && &m.source == from && m.dest.is_some())
        .max_by_key(|m| m.id)
        .and_then(|m| m.dest.as_ref());
    let placed = view.server(server).map(|s| &s.host).filter(|h| *h != from);
    migrated.or(placed).map(ToString::to_string)
}

/// The status of `cloud` (its Nova controller, whether it is `disabled`) from its replicated
/// state and, on the leader, its loop's view.
pub fn cloud_status(
    cloud: &CloudId,
    (nova, disabled): (&str, bool),
    state: &CloudState,
    shown: Option<&CloudRuntime>,
) -> CloudStatus {
    let name = cloud.to_string();
    let leading = shown.is_some_and(|s| s.leading);
    let view = shown.filter(|s| s.leading).and_then(|s| s.view.as_ref());
    let mut hosts: Vec<HostStatus> = Vec::new();
    let computes = view.map(|v| v.computes.as_slice()).unwrap_or_default();
    for c in computes {
        let record = state.hosts.get(&c.host);
        let state_word = match record {
            Some(r) => r.phase.as_str().to_owned(),
            None if state.failed.contains_key(&c.host) => "failed".to_owned(),
            None if c.status == qfence_core::instance_ha::ServiceStatus::Disabled => {
                "disabled".to_owned()
            }
            None => "up".to_owned(),
        };
        let service = format!(
            "{}, {}",
            serde_json::to_value(c.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            serde_json::to_value(c.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        );
        hosts.push(HostStatus {
            cloud: name.clone(),
            host: c.host.to_string(),
            state: state_word,
            incident: record.map(|r| r.incident.0),
            since_ms: record
                .map(|r| r.phase_since)
                .or_else(|| state.failed.get(&c.host).copied())
                .map(|m| m.0),
            site: record.map(|r| r.site.to_string()),
            service: Some(service),
            forced_down: Some(c.forced_down),
            fenced_at_ms: record.and_then(|r| r.fence.proven).map(|m| m.0),
            why: record.and_then(|r| phase_why(&r.phase)),
        });
    }
    // Hosts being processed that the view does not show (a follower, or Nova unread).
    for (h, r) in &state.hosts {
        if hosts.iter().any(|x| x.host == h.as_str()) {
            continue;
        }
        hosts.push(HostStatus {
            cloud: name.clone(),
            host: h.to_string(),
            state: r.phase.as_str().to_owned(),
            incident: Some(r.incident.0),
            since_ms: Some(r.phase_since.0),
            site: Some(r.site.to_string()),
            service: None,
            forced_down: None,
            fenced_at_ms: r.fence.proven.map(|m| m.0),
            why: phase_why(&r.phase),
        });
    }
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    let evacuations = state
        .hosts
        .iter()
        .flat_map(|(h, r)| {
            let name = name.clone();
            r.servers.iter().map(move |(id, e)| EvacuationStatus {
                cloud: name.clone(),
                host: h.to_string(),
                incident: r.incident.0,
                server: id.to_string(),
                server_name: view.and_then(|v| v.server(id)).map(|s| s.name.clone()),
                to_host: to_host(view, id, h),
                state: evac_state(&e.state).to_owned(),
                requests: e.requests,
                failures: e.failures,
                lock: lock_state(&e.lock).to_owned(),
            })
        })
        .collect();
    CloudStatus {
        cloud: name,
        nova: nova.to_owned(),
        disabled,
        leading,
        last_decision: shown
            .filter(|s| s.leading)
            .and_then(|s| s.last_decision.clone()),
        decided_at_ms: shown
            .filter(|s| s.leading)
            .and_then(|s| s.decided_at)
            .map(|m| m.0),
        nova_reachable: shown.is_some_and(|s| s.leading && s.nova_reachable),
        hosts,
        evacuations,
        gates_closed: state
            .tripped
            .iter()
            .map(|t| t.gate.name().to_owned())
            .collect(),
    }
}
