//! The replicated Instance HA state of one cloud: each host's incident and how far it got,
//! which hosts were seen failed, the heartbeat history the cliff gate compares with, and which
//! gates were announced closed.
//!
//! It is written only through [`CloudStateChange`], a compare-and-set on the generation (the
//! last incident number handed out) and the revision, so a deposed leader's late write is
//! refused and a new leader continues each host where its record says.

use std::collections::{BTreeMap, BTreeSet};

use qfence_model::config::HostName;
use qfence_model::{Generation, SiteId, Term};
use serde::{Deserialize, Serialize};

use super::gates::Trip;
use super::snapshot::ServerId;
use super::types::DisableReason;
use crate::error::CoreError;
use crate::types::{Millis, OpId};

/// The stored form: versioned, so a newer qfence can read an older leader's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "v")]
pub enum StoredCloudState {
    #[serde(rename = "1")]
    V1(CloudState),
}

impl StoredCloudState {
    /// The state, whatever version it was stored as.
    pub fn into_current(self) -> CloudState {
        match self {
            StoredCloudState::V1(s) => s,
        }
    }
}

impl From<CloudState> for StoredCloudState {
    fn from(s: CloudState) -> Self {
        StoredCloudState::V1(s)
    }
}

/// One cloud's replicated Instance HA state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudState {
    /// The last incident number handed out; grows by one with every host taken on.
    pub generation: Generation,
    /// Grows by one with every write; the other half of the compare-and-set.
    pub revision: u64,
    /// The hosts being processed, one incident each.
    pub hosts: BTreeMap<HostName, HostRecord>,
    /// Hosts seen failed and not (or not yet) taken on, since when: what `disabled: true`
    /// records, and when a kdump wait began.
    pub failed: BTreeMap<HostName, Millis>,
    /// The hosts up at the poll before: the heartbeat cliff compares with it.
    pub last_up: BTreeSet<HostName>,
    /// A heartbeat cliff seen, holding fencing back until it expires.
    pub cliff: Option<Cliff>,
    /// Gates announced closed (an event each way).
    pub tripped: BTreeSet<Trip>,
    /// Failed hosts announced as having no fence.
    pub unfenceable: BTreeSet<HostName>,
    /// Servers whose leftover qfence lock was released, and when (so a stale view does not
    /// release them again before the next poll).
    pub released: BTreeMap<ServerId, Millis>,
}

/// A sudden loss of most heartbeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cliff {
    pub since: Millis,
    /// Hosts up at the poll before and failed at once.
    pub lost: usize,
    /// Hosts up at the poll before.
    pub of: usize,
}

/// One host's incident: from the moment it is taken on to the moment it is back in service
/// (or an operator brings it back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    /// The incident's number (the cloud's generation when it began); commands carry it.
    pub incident: Generation,
    /// When the failure was first seen.
    pub detected: Millis,
    pub site: SiteId,
    pub phase: HostPhase,
    /// When the phase was (re-)entered: readings older than this do not count for it.
    pub phase_since: Millis,
    /// The term that issued `pending`: a new leader re-enters the phase.
    pub term: Term,
    /// Host-level operations issued and not yet judged.
    #[serde(with = "crate::state::pairs")]
    pub pending: BTreeMap<Step, OpId>,
    /// Host-level steps of this phase that ended done.
    pub done: BTreeSet<Step>,
    pub fence: FenceTrack,
    /// fence_kdump messages were seen from it before its fence.
    pub kdump: bool,
    /// The reserved host enabled for it.
    pub reserved: Option<HostName>,
    /// Whether a reserved host was looked for (once per incident).
    pub reserve_tried: bool,
    /// The disable reason written into Nova (so its write is recognised in a view).
    pub disable_reason: Option<DisableReason>,
    /// Its servers being evacuated, by id.
    pub servers: BTreeMap<ServerId, Evacuation>,
    /// A failed step is retried no earlier than this.
    pub retry_at: Option<Millis>,
    /// Power-on attempts so far.
    pub power_attempts: u32,
}

impl HostRecord {
    /// Whether the fence was proven in this incident.
    pub fn fenced(&self) -> bool {
        self.fence.proven.is_some()
    }
}

/// How the host's fence has gone in this incident.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceTrack {
    /// When its first fence command was issued.
    pub started: Option<Millis>,
    /// When its latest fence command was issued: only readings taken since prove it off.
    pub last_at: Option<Millis>,
    /// The poll (its read time) of the latest fence command: the per-cycle cap counts them.
    pub last_poll: Option<Millis>,
    /// Fence commands so far.
    pub attempts: u32,
    /// When the read-back proved it off (`None` until then). Once set, it is never fenced
    /// again in this incident.
    pub proven: Option<Millis>,
}

/// Where a host is in its incident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case")]
pub enum HostPhase {
    /// `check_kdump`: waiting for fence_kdump messages, or for the dump to end.
    KdumpWait,
    /// Its fence is running (the binding's perform).
    Fencing,
    /// Its fence is being read back.
    Verifying,
    /// Proven off: being disabled with a reason and forced down, its reserved host enabled.
    Isolating,
    /// Its servers are being evacuated.
    Evacuating,
    /// Evacuated: being powered back on through its binding.
    PoweringOn,
    /// Powered on: being enabled, then its forced-down flag cleared once it reports again.
    Enabling,
    /// Done, but left disabled and forced down until an operator brings it back.
    LeftDisabled { why: LeftWhy },
    /// Stopped: an operator must act.
    Halted { why: Halt },
}

impl HostPhase {
    /// The phase's name as shown.
    pub fn as_str(&self) -> &'static str {
        match self {
            HostPhase::KdumpWait => "kdump wait",
            HostPhase::Fencing => "fencing",
            HostPhase::Verifying => "verifying",
            HostPhase::Isolating => "isolating",
            HostPhase::Evacuating => "evacuating",
            HostPhase::PoweringOn => "powering on",
            HostPhase::Enabling => "enabling",
            HostPhase::LeftDisabled { .. } => "left disabled",
            HostPhase::Halted { .. } => "halted",
        }
    }
}

/// Why a host is left disabled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeftWhy {
    /// `leave_disabled: true`.
    Asked,
    /// Some evacuations were unsuccessful and `force_enable` is false.
    Unsuccessful,
    /// It could not be powered back on.
    PowerOnFailed,
}

/// Why a host's incident stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "kebab-case")]
pub enum Halt {
    /// Its fence could not be proven: nothing of it is evacuated.
    FenceNotProven,
    /// Smart evacuation: one server failed `evacuation_retries` times.
    SmartEvacuationFailed { server: ServerId },
    /// The fence read it powered on while its servers were being evacuated.
    PoweredOnWhileEvacuated,
}

/// A host-level step with an operation pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Fence,
    Check,
    Disable,
    ForceDown,
    Reserve,
    PowerOn,
    Enable,
    ClearForcedDown,
}

/// One server's evacuation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evacuation {
    pub state: EvacState,
    /// Evacuate requests sent.
    pub requests: u32,
    /// Failures seen (refused, or the migration ended in error, or timed out).
    pub failures: u32,
    pub lock: LockState,
}

impl Evacuation {
    /// A server to evacuate, not yet touched.
    pub fn new() -> Self {
        Self {
            state: EvacState::Pending,
            requests: 0,
            failures: 0,
            lock: LockState::Unlocked,
        }
    }

    /// Whether it has ended (done, or given up).
    pub fn ended(&self) -> bool {
        matches!(self.state, EvacState::Done { .. } | EvacState::Unsuccessful)
    }
}

impl Default for Evacuation {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a server's evacuation is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum EvacState {
    /// To be evacuated (again, after a failure).
    Pending,
    /// The evacuate request is out. `after`: the highest migration id of the server seen
    /// before it, so an older attempt's record is never taken for this one's.
    Requested { op: OpId, at: Millis, after: u64 },
    /// Smart evacuation: accepted (or its answer lost), its migration followed.
    Following { since: Millis, after: u64 },
    /// Evacuated.
    Done { at: Millis },
    /// Not evacuated, and no longer tried.
    Unsuccessful,
}

/// qfence's lock on a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "lock", rename_all = "kebab-case")]
pub enum LockState {
    Unlocked,
    Locking {
        op: OpId,
    },
    Locked,
    Unlocking {
        op: OpId,
    },
    /// The lock was refused: evacuated without it.
    Skipped,
}

/// A write of the cloud's state, as a compare-and-set on (generation, revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudStateChange {
    pub expect_generation: Generation,
    pub expect_revision: u64,
    /// The whole next state (its revision is `expect_revision + 1`).
    pub next: CloudState,
}

impl CloudState {
    /// Applies a change if it was decided on this very state. This is the compare-and-set the
    /// cluster runs; a deposed leader's change is refused.
    pub fn apply(&self, change: &CloudStateChange) -> Result<CloudState, CoreError> {
        if change.expect_generation != self.generation || change.expect_revision != self.revision {
            return Err(CoreError::StaleCloud {
                expected_generation: change.expect_generation,
                expected_revision: change.expect_revision,
                generation: self.generation,
                revision: self.revision,
            });
        }
        if change.next.generation < self.generation {
            return Err(CoreError::GenerationJump {
                from: self.generation,
                to: change.next.generation,
            });
        }
        Ok(change.next.clone())
    }
}
