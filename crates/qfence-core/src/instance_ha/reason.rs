//! The one sentence of each Instance HA cycle, as InstanceHA logs one "Fencing decision" line:
//! "fencing decision: overcloud: compute-2 failed (down, last report 14:02:07); fencing
//! compute-2 (power.off on bmc-compute-2, attempt 1 of 3)".
//!
//! A decision carries its clauses as [`Note`]s, data; the sentence is their `Display`, and
//! whether a cycle was routine is [`Sentence::is_routine`], never a reading of the text.

use std::fmt;

use qfence_model::config::{HostName, NoFence};
use qfence_model::{CloudId, Term};
use serde::Serialize;

use super::gates::{Closed, FailWhy};
use super::snapshot::ServerId;
use super::state::LeftWhy;
use crate::types::Millis;

/// One clause of a cycle's sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "note", rename_all = "kebab-case")]
pub enum Note {
    UnknownCloud,
    NotLeader {
        term: Term,
    },
    LeaseExpired {
        term: Term,
        at: Millis,
    },
    /// The cloud at a glance.
    Summary {
        hosts: usize,
        reporting: usize,
        failed: usize,
        incidents: usize,
    },
    /// The observer cannot trust its view: nothing is done.
    Blind {
        why: String,
    },
    /// `disabled: true`: failures recorded.
    Disabled {
        failed: Vec<HostName>,
    },
    /// A failure seen for the first time.
    HostFailed {
        host: HostName,
        why: String,
    },
    /// Failed hosts a gate keeps from their fence (or their evacuation).
    Blocked {
        hosts: Vec<HostName>,
        why: String,
    },
    /// Failed hosts waiting for the next cycle: the per-cycle cap is reached.
    Deferred {
        hosts: Vec<HostName>,
        cap: u32,
    },
    NoFence {
        host: HostName,
        why: String,
    },
    CameBack {
        host: HostName,
    },
    KdumpWaiting {
        host: HostName,
        until: Millis,
        seen: bool,
    },
    FenceStarted {
        host: HostName,
        capability: String,
        controller: String,
        attempt: u32,
        of: u32,
    },
    Verifying {
        host: HostName,
    },
    Fenced {
        host: HostName,
        at: Millis,
    },
    FenceRetry {
        host: HostName,
        read: String,
        at: Millis,
    },
    FenceNotProven {
        host: HostName,
        attempts: u32,
    },
    Isolating {
        host: HostName,
        what: String,
    },
    Reserved {
        host: HostName,
        spare: HostName,
    },
    NoReserved {
        host: HostName,
    },
    Evacuating {
        host: HostName,
        issued: usize,
        running: usize,
        done: usize,
        left: usize,
    },
    /// Evacuations from the host wait for a fresh read-back of its fence.
    WaitingProof {
        host: HostName,
    },
    EvacuationFailed {
        host: HostName,
        server: ServerId,
        failures: u32,
        of: u32,
    },
    GaveUp {
        host: HostName,
        server: ServerId,
    },
    PoweredOnWhileEvacuated {
        host: HostName,
    },
    Evacuated {
        host: HostName,
        done: usize,
        unsuccessful: usize,
    },
    LeftDisabled {
        host: HostName,
        why: LeftWhy,
    },
    PoweringOn {
        host: HostName,
        attempt: u32,
    },
    Enabling {
        host: HostName,
        what: String,
    },
    Recovered {
        host: HostName,
    },
    ReturnedByOperator {
        host: HostName,
    },
    Resumed {
        host: HostName,
        phase: String,
        term: Term,
    },
    Adopted {
        host: HostName,
    },
    LocksReleased {
        servers: usize,
    },
    /// A host's step is waiting (for an operation, an operator, a retry time).
    Waiting {
        host: HostName,
        what: String,
    },
}

impl Note {
    pub(crate) fn blocked(hosts: Vec<HostName>, gate: &Closed) -> Note {
        Note::Blocked {
            hosts,
            why: gate.to_string(),
        }
    }

    pub(crate) fn failed(host: HostName, why: &FailWhy) -> Note {
        let why = match why {
            FailWhy::Down { last: Some(t) } => format!("down, last report {t}"),
            FailWhy::Down { last: None } => "down, never reported".to_owned(),
            FailWhy::Stale { last: Some(t) } => format!("no report since {t}"),
            FailWhy::Stale { last: None } => "never reported".to_owned(),
        };
        Note::HostFailed { host, why }
    }

    pub(crate) fn no_fence(host: HostName, why: &NoFence) -> Note {
        Note::NoFence {
            host,
            why: why.to_string(),
        }
    }

    /// Whether the clause is part of a quiet cycle.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            Note::Summary {
                failed: 0,
                incidents: 0,
                ..
            } | Note::NotLeader { .. }
        )
    }
}

fn names(hosts: &[HostName]) -> String {
    hosts
        .iter()
        .map(HostName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One method per phase of a host's failure, so each reads on its own; this match stays
        // exhaustive, so a new note must be placed in one.
        match self {
            Note::UnknownCloud
            | Note::NotLeader { .. }
            | Note::LeaseExpired { .. }
            | Note::Summary { .. }
            | Note::Blind { .. }
            | Note::Disabled { .. }
            | Note::HostFailed { .. }
            | Note::Blocked { .. }
            | Note::Deferred { .. }
            | Note::NoFence { .. }
            | Note::CameBack { .. } => self.fmt_detect(f),
            Note::KdumpWaiting { .. }
            | Note::FenceStarted { .. }
            | Note::Verifying { .. }
            | Note::Fenced { .. }
            | Note::FenceRetry { .. }
            | Note::FenceNotProven { .. }
            | Note::Isolating { .. } => self.fmt_fence(f),
            Note::Reserved { .. }
            | Note::NoReserved { .. }
            | Note::Evacuating { .. }
            | Note::WaitingProof { .. }
            | Note::EvacuationFailed { .. }
            | Note::GaveUp { .. }
            | Note::PoweredOnWhileEvacuated { .. }
            | Note::Evacuated { .. } => self.fmt_evacuate(f),
            Note::LeftDisabled { .. }
            | Note::PoweringOn { .. }
            | Note::Enabling { .. }
            | Note::Recovered { .. }
            | Note::ReturnedByOperator { .. }
            | Note::Resumed { .. }
            | Note::Adopted { .. }
            | Note::LocksReleased { .. }
            | Note::Waiting { .. } => self.fmt_restore(f),
        }
    }
}

impl Note {
    /// Clauses about whether the cycle acts at all, and which hosts it finds failed.
    fn fmt_detect(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::UnknownCloud => f.write_str("the cloud is not in the configuration"),
            Note::NotLeader { term } => write!(f, "not the leader (term {term})"),
            Note::LeaseExpired { term, at } => {
                write!(f, "the leader's lease (term {term}) ran out at {at}")
            }
            Note::Summary {
                hosts,
                reporting,
                failed,
                incidents,
            } => {
                write!(
                    f,
                    "{hosts} compute host{}, {reporting} reporting",
                    plural(*hosts)
                )?;
                match (failed, incidents) {
                    (0, 0) => f.write_str(", none failed"),
                    (n, 0) => write!(f, ", {n} failed"),
                    (n, i) => write!(f, ", {n} failed, {i} being processed"),
                }
            }
            Note::Blind { why } => write!(f, "doing nothing: {why}"),
            Note::Disabled { failed } if failed.is_empty() => {
                f.write_str("Instance HA is disabled: failures are only recorded")
            }
            Note::Disabled { failed } => write!(
                f,
                "Instance HA is disabled: {} failure recorded, nothing done",
                names(failed)
            ),
            Note::HostFailed { host, why } => write!(f, "{host} failed ({why})"),
            Note::Blocked { hosts, why } => {
                write!(f, "not fencing or evacuating {}: {why}", names(hosts))
            }
            Note::Deferred { hosts, cap } => write!(
                f,
                "{} wait{} for the next cycle: {cap} fence{} started in this one \
             (max_hosts_per_cycle)",
                names(hosts),
                if hosts.len() == 1 { "s" } else { "" },
                plural(*cap as usize)
            ),
            Note::NoFence { host, why } => {
                write!(
                    f,
                    "{host} failed but has no fence ({why}): it is never evacuated"
                )
            }
            Note::CameBack { host } => {
                write!(
                    f,
                    "{host} reports again before its fence: nothing done to it"
                )
            }
            _ => unreachable!("Display sends only detect notes here"),
        }
    }

    /// Clauses about fencing a failed host and proving it off.
    fn fmt_fence(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::KdumpWaiting { host, until, seen } => {
                if *seen {
                    write!(
                        f,
                        "{host} is dumping its kernel (fence_kdump): fencing after {until}"
                    )
                } else {
                    write!(f, "waiting for {host}'s fence_kdump messages until {until}")
                }
            }
            Note::FenceStarted {
                host,
                capability,
                controller,
                attempt,
                of,
            } => write!(
                f,
                "fencing {host} ({capability} on {controller}, attempt {attempt} of {of})"
            ),
            Note::Verifying { host } => write!(f, "reading {host}'s fence back"),
            Note::Fenced { host, at } => write!(f, "{host} fenced (read back off at {at})"),
            Note::FenceRetry { host, read, at } => {
                write!(f, "{host}'s fence not proven ({read}): again at {at}")
            }
            Note::FenceNotProven { host, attempts } => write!(
                f,
                "{host}'s fence not proven after {attempts} attempt{}: it is not evacuated; an \
             operator must act",
                plural(*attempts as usize)
            ),
            Note::Isolating { host, what } => write!(f, "{host}: {what}"),
            _ => unreachable!("Display sends only fence notes here"),
        }
    }

    /// Clauses about moving a fenced host's servers elsewhere.
    fn fmt_evacuate(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Reserved { host, spare } => {
                write!(f, "enabling reserved host {spare} for {host}")
            }
            Note::NoReserved { host } => write!(f, "no reserved host is left for {host}"),
            Note::Evacuating {
                host,
                issued,
                running,
                done,
                left,
            } => {
                write!(f, "evacuating {host}: ")?;
                let mut parts = Vec::new();
                if *issued > 0 {
                    parts.push(format!("{issued} sent"));
                }
                if *running > 0 {
                    parts.push(format!("{running} under way"));
                }
                parts.push(format!("{done} done"));
                if *left > 0 {
                    parts.push(format!("{left} to go"));
                }
                f.write_str(&parts.join(", "))
            }
            Note::WaitingProof { host } => {
                write!(
                    f,
                    "evacuations from {host} wait for a fresh read-back of its fence"
                )
            }
            Note::EvacuationFailed {
                host,
                server,
                failures,
                of,
            } => write!(
                f,
                "evacuation of {server} from {host} failed ({failures} of {of})"
            ),
            Note::GaveUp { host, server } => write!(
                f,
                "{server} could not be evacuated from {host}: {host} is left disabled and \
             forced down for an operator"
            ),
            Note::PoweredOnWhileEvacuated { host } => write!(
                f,
                "{host}'s fence reads it powered on while its servers were evacuated: \
             evacuations stopped for an operator"
            ),
            Note::Evacuated {
                host,
                done,
                unsuccessful: 0,
            } => write!(f, "{host} evacuated ({done} server{})", plural(*done)),
            Note::Evacuated {
                host,
                done,
                unsuccessful,
            } => write!(
                f,
                "{host} evacuated but for {unsuccessful} server{} ({done} done)",
                plural(*unsuccessful)
            ),
            _ => unreachable!("Display sends only evacuate notes here"),
        }
    }

    /// Clauses about a host coming back into service, and about work a new leader adopts.
    fn fmt_restore(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::LeftDisabled { host, why } => {
                let why = match why {
                    LeftWhy::Asked => "leave_disabled",
                    LeftWhy::Unsuccessful => "some evacuations were unsuccessful",
                    LeftWhy::PowerOnFailed => "it could not be powered on",
                };
                write!(f, "{host} left disabled and forced down ({why})")
            }
            Note::PoweringOn { host, attempt } => {
                write!(f, "powering {host} back on (attempt {attempt})")
            }
            Note::Enabling { host, what } => write!(f, "{host}: {what}"),
            Note::Recovered { host } => write!(f, "{host} is back in service"),
            Note::ReturnedByOperator { host } => {
                write!(f, "{host} was brought back by an operator")
            }
            Note::Resumed { host, phase, term } => {
                write!(f, "new leader (term {term}) resumes {host} at {phase}")
            }
            Note::Adopted { host } => write!(
                f,
                "{host} is disabled by qfence with no record of it: reading its fence back"
            ),
            Note::LocksReleased { servers } => write!(
                f,
                "releasing {servers} leftover qfence lock{}",
                plural(*servers)
            ),
            Note::Waiting { host, what } => write!(f, "{host}: {what}"),
            _ => unreachable!("Display sends only restore notes here"),
        }
    }
}

/// A cycle's one sentence: its clauses in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sentence {
    pub cloud: CloudId,
    pub notes: Vec<Note>,
    /// Whether the decision issued a command or wrote the state.
    pub acted: bool,
}

impl Sentence {
    /// Whether the cycle was routine: nothing done, nothing failed.
    pub fn is_routine(&self) -> bool {
        !self.acted && self.notes.iter().all(Note::is_routine)
    }
}

impl fmt::Display for Sentence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fencing decision: ")?;
        if !self.acted {
            f.write_str("no action: ")?;
        }
        write!(f, "{}", self.cloud)?;
        for (i, n) in self.notes.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{n}")?;
        }
        Ok(())
    }
}
