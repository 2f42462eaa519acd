//! What the API shows of Instance HA: each cloud's hosts with their state, the evacuations and
//! the last decision. The hosts being processed come from the replicated state (any
//! orchestrator can answer); the hosts Nova reported and the last sentence from the leader's
//! own loop (a follower says it is not the leader).

use qfence_core::Millis;
use qfence_core::instance_ha::{CloudState, EvacState, HostPhase, LockState, NovaView};
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
    /// `pending`, `requested`, `following`, `done`, `unsuccessful`.
    pub state: String,
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

/// The status of `cloud` from its replicated state and, on the leader, its loop's view.
pub fn cloud_status(
    cloud: &CloudId,
    nova: &str,
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
