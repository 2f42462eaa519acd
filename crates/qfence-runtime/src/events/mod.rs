//! The event log: an append-only, hash-chained record of every decision, command, result and
//! operator action.
//!
//! Each [`Event`] carries `prev`, the hash of the record before it (64 zeros for the first),
//! and `hash`, SHA-256 over its canonical encoding ([`canonical_bytes`], defined normatively
//! in `docs/specs/event-log.md`). Changing any field of any record, deleting one, reordering
//! them or cutting the file mid-record breaks the chain, and [`verify`] names the first broken
//! link with its sequence number and why. Cutting records off the *end* leaves a valid, shorter
//! chain: only a head hash kept elsewhere ([`VerifyOptions::expect_head`]) detects that.
//!
//! Storage is behind [`EventStore`]: [`JsonlStore`] is the offline form (one JSON record per
//! line, flushed and synced per append), [`MemoryStore`] is for tests; the cluster will
//! replicate the same records. [`EventLog`] seals new records onto the chain, keeps them in
//! memory for queries, and refuses to open a store whose chain is broken.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod chain;
mod store;
#[cfg(test)]
mod tests;
mod verify;

pub use chain::*;
pub use store::*;
pub use verify::*;

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What the hash input starts with: names the encoding, so a later version cannot be confused
/// with this one.
pub const DOMAIN: &[u8] = b"qfence-event-v1\n";

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A decision of the core, with its one-sentence reason.
    Decision,
    /// A command sent to a controller.
    Command,
    /// A command's result (a verdict, a reading).
    Result,
    /// Something an operator did through the API or the console.
    Operator,
    /// A condition an operator must look at.
    Alarm,
    /// A change of configuration: a plan or controller created, staged, applied, deleted.
    Config,
    /// A change of leadership.
    Leadership,
}

impl EventKind {
    /// The kind as written in records.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Decision => "decision",
            EventKind::Command => "command",
            EventKind::Result => "result",
            EventKind::Operator => "operator",
            EventKind::Alarm => "alarm",
            EventKind::Config => "config",
            EventKind::Leadership => "leadership",
        }
    }
}

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Position in the log: 1 for the first record, then one more for each.
    pub seq: u64,
    /// When it was recorded, in milliseconds since the Unix epoch (UTC).
    pub time_ms: u64,
    /// What it is about.
    pub kind: EventKind,
    /// The plan it concerns, if any.
    pub plan: Option<String>,
    /// The site it concerns, if any.
    pub site: Option<String>,
    /// The leadership term it was decided or done in, if any.
    pub term: Option<u64>,
    /// The plan generation it applies to, if any.
    pub generation: Option<u64>,
    /// Who: an orchestrator's name, or `token:NAME` for an API caller.
    pub actor: String,
    /// One sentence, for people.
    pub message: String,
    /// Details, for machines. Any JSON value.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub data: serde_json::Value,
    /// The previous record's hash; [`GENESIS`] for the first.
    pub prev: String,
    /// SHA-256 of the canonical encoding, lower-case hex.
    pub hash: String,
}

/// A record before it is sealed onto the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub plan: Option<String>,
    pub site: Option<String>,
    pub term: Option<u64>,
    pub generation: Option<u64>,
    pub actor: String,
    pub message: String,
    pub data: serde_json::Value,
}

impl NewEvent {
    /// A record of `kind` by `actor`, about nothing in particular yet.
    pub fn new(kind: EventKind, actor: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            plan: None,
            site: None,
            term: None,
            generation: None,
            actor: actor.into(),
            message: message.into(),
            data: serde_json::Value::Null,
        }
    }

    /// About `plan`.
    pub fn plan(mut self, plan: impl Into<String>) -> Self {
        self.plan = Some(plan.into());
        self
    }

    /// About `site`.
    pub fn site(mut self, site: impl Into<String>) -> Self {
        self.site = Some(site.into());
        self
    }

    /// In `term`.
    pub fn term(mut self, term: u64) -> Self {
        self.term = Some(term);
        self
    }

    /// At `generation`.
    pub fn generation(mut self, generation: u64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// With details.
    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = data;
        self
    }

    /// Seals the record after `prev` (the previous record's seq and hash, `None` for the first).
    pub fn seal(self, prev: Option<(u64, &str)>, time_ms: u64) -> Event {
        let (seq, prev) = match prev {
            Some((seq, hash)) => (seq + 1, hash.to_owned()),
            None => (1, GENESIS.to_owned()),
        };
        let mut e = Event {
            seq,
            time_ms,
            kind: self.kind,
            plan: self.plan,
            site: self.site,
            term: self.term,
            generation: self.generation,
            actor: self.actor,
            message: self.message,
            data: self.data,
            prev,
            hash: String::new(),
        };
        e.hash = hash_of(&e);
        e
    }
}

/// Why the event log failed.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("cannot open event log {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot append to event log {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("event log {what} is broken: {broken}")]
    Broken { what: String, broken: BrokenLink },
}

/// Which records a query wants: after a seq (the paging cursor), of a kind, about a plan or
/// a site, at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct EventQuery {
    /// Only records with a seq greater than this (the previous page's `next_after`).
    pub after: Option<u64>,
    /// At most this many records (default 100, at most 1000).
    pub limit: Option<u32>,
    /// Only records of this kind.
    pub kind: Option<EventKind>,
    /// Only records about this plan.
    pub plan: Option<String>,
    /// Only records about this site.
    pub site: Option<String>,
}

/// The default page size.
pub const DEFAULT_PAGE: u32 = 100;
/// The largest page.
pub const MAX_PAGE: u32 = 1000;

/// One page of records, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Pass as `after` for the next page; absent when this page is the last.
    pub next_after: Option<u64>,
    /// The seq and hash of the log's last record, for anchoring an export.
    pub head_seq: u64,
    pub head_hash: String,
}

/// The log: a store, the records it holds (in memory, for queries), and the chain's head.
#[derive(Debug)]
pub struct EventLog<S: EventStore> {
    store: S,
    events: Vec<Event>,
}

impl<S: EventStore> EventLog<S> {
    /// Opens a store, verifying its whole chain first: a log that does not verify is not
    /// appended to (a new record would hide where it broke).
    pub fn open(store: S) -> Result<Self, EventLogError> {
        let records = store.load()?;
        verify(&records, &VerifyOptions::default()).map_err(|broken| EventLogError::Broken {
            what: store.describe(),
            broken,
        })?;
        let events = records
            .into_iter()
            .filter_map(|r| match r {
                Record::Event(e) => Some(*e),
                Record::Malformed { .. } => None,
            })
            .collect();
        Ok(Self { store, events })
    }

    /// Seals `new` onto the chain at `time_ms`, stores it, and returns it.
    pub fn append(&mut self, new: NewEvent, time_ms: u64) -> Result<Event, EventLogError> {
        let prev = self.events.last().map(|e| (e.seq, e.hash.as_str()));
        let event = new.seal(prev, time_ms);
        self.store.append(&event)?;
        self.events.push(event.clone());
        Ok(event)
    }

    /// Makes every record appended so far durable.
    pub fn sync(&mut self) -> Result<(), EventLogError> {
        self.store.sync()
    }

    /// The last record's seq and hash (0 and [`GENESIS`] when empty).
    pub fn head(&self) -> (u64, String) {
        self.events
            .last()
            .map_or((0, GENESIS.to_owned()), |e| (e.seq, e.hash.clone()))
    }

    /// Every record, oldest first.
    pub fn all(&self) -> &[Event] {
        &self.events
    }

    /// One page of the records `q` selects.
    pub fn query(&self, q: &EventQuery) -> EventPage {
        let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE) as usize;
        let after = q.after.unwrap_or(0);
        // Seqs are 1, 2, 3...: the first candidate is at index `after`.
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        let mut matched = self.events[start..].iter().filter(|e| {
            q.kind.is_none_or(|k| e.kind == k)
                && q.plan.as_ref().is_none_or(|p| e.plan.as_ref() == Some(p))
                && q.site.as_ref().is_none_or(|s| e.site.as_ref() == Some(s))
        });
        let events: Vec<Event> = matched.by_ref().take(limit).cloned().collect();
        let more = matched.next().is_some();
        let (head_seq, head_hash) = self.head();
        EventPage {
            next_after: if more {
                events.last().map(|e| e.seq)
            } else {
                None
            },
            events,
            head_seq,
            head_hash,
        }
    }

    /// The store, for tests.
    pub fn store(&self) -> &S {
        &self.store
    }
}
