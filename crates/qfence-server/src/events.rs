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
use utoipa::{IntoParams, ToSchema};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What the hash input starts with: names the encoding, so a later version cannot be confused
/// with this one.
pub const DOMAIN: &[u8] = b"qfence-event-v1\n";

/// What a record is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    #[schema(value_type = Value)]
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

/// The canonical encoding a record's hash is computed over: [`DOMAIN`], then a JSON object of
/// every field but `hash`, keys in byte order, no whitespace, absent values as `null`, objects
/// inside `data` with their keys in byte order too. See `docs/specs/event-log.md`.
pub fn canonical_bytes(e: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(DOMAIN);
    out.push(b'{');
    let opt_str = |v: &Option<String>| match v {
        Some(s) => serde_json::Value::String(s.clone()),
        None => serde_json::Value::Null,
    };
    let opt_num = |v: Option<u64>| match v {
        Some(n) => serde_json::Value::from(n),
        None => serde_json::Value::Null,
    };
    // Keys in byte order, by hand: the order is part of the format.
    let fields: [(&str, serde_json::Value); 11] = [
        ("actor", serde_json::Value::String(e.actor.clone())),
        ("data", e.data.clone()),
        ("generation", opt_num(e.generation)),
        (
            "kind",
            serde_json::Value::String(e.kind.as_str().to_owned()),
        ),
        ("message", serde_json::Value::String(e.message.clone())),
        ("plan", opt_str(&e.plan)),
        ("prev", serde_json::Value::String(e.prev.clone())),
        ("seq", serde_json::Value::from(e.seq)),
        ("site", opt_str(&e.site)),
        ("term", opt_num(e.term)),
        ("time_ms", serde_json::Value::from(e.time_ms)),
    ];
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(k, &mut out);
        out.push(b':');
        write_canonical(v, &mut out);
    }
    out.push(b'}');
    out
}

/// SHA-256 of [`canonical_bytes`], lower-case hex.
pub fn hash_of(e: &Event) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, &canonical_bytes(e)).as_ref())
}

fn write_canonical(v: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value as J;
    match v {
        J::Null => out.extend_from_slice(b"null"),
        J::Bool(true) => out.extend_from_slice(b"true"),
        J::Bool(false) => out.extend_from_slice(b"false"),
        // serde_json writes integers in decimal and other numbers in their shortest form that
        // reads back to the same f64: deterministic for a given value.
        J::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        J::String(s) => write_string(s, out),
        J::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        J::Object(map) => {
            // Sorted here, whatever order the map keeps (serde_json's preserve_order feature
            // may be on somewhere in the build).
            let mut entries: Vec<(&String, &J)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
    }
}

/// A JSON string: `"` and `\` escaped with a backslash, \b \f \n \r \t by name, other
/// characters below U+0020 as `\u00xx` (lower-case hex), everything else as UTF-8.
fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
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

/// Where records are kept. Appends are durable when `append` returns.
pub trait EventStore: Send + fmt::Debug {
    /// Appends one sealed record.
    fn append(&mut self, event: &Event) -> Result<(), EventLogError>;
    /// Every record, in order, as stored (for verification on open).
    fn load(&self) -> Result<Vec<Record>, EventLogError>;
    /// A name for messages.
    fn describe(&self) -> String;
    /// Makes every appended record durable (a store that syncs each append has nothing to do).
    fn sync(&mut self) -> Result<(), EventLogError> {
        Ok(())
    }
}

/// How long an appended record may wait for the disk: records written within this window share
/// one `fdatasync`. Syncing each record serialised a failover of thousands of plans behind the
/// disk; the runtime also syncs at the end of every tick and when it stops, so the window
/// bounds what a power loss can take (a cut end, which `qfence events verify` reports).
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// One stored line, parsed or not.
#[derive(Debug, Clone)]
pub enum Record {
    /// A record that parsed.
    Event(Box<Event>),
    /// A line that did not: its 1-based line number and why.
    Malformed { line: u64, error: String },
}

/// Records in memory. For tests, and for a node before its log is replicated.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    pub events: Vec<Event>,
}

impl EventStore for MemoryStore {
    fn append(&mut self, event: &Event) -> Result<(), EventLogError> {
        self.events.push(event.clone());
        Ok(())
    }

    fn load(&self) -> Result<Vec<Record>, EventLogError> {
        Ok(self
            .events
            .iter()
            .map(|e| Record::Event(Box::new(e.clone())))
            .collect())
    }

    fn describe(&self) -> String {
        "(in memory)".to_owned()
    }
}

/// Records as JSON lines in a file: the offline form, and what `qfence events verify` reads.
#[derive(Debug)]
pub struct JsonlStore {
    path: PathBuf,
    file: File,
    /// When the file was last synced.
    synced_at: std::time::Instant,
    /// Whether records were written since.
    unsynced: bool,
}

impl JsonlStore {
    /// Opens (creating if needed) the file for appending.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, EventLogError> {
        let path = path.into();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| EventLogError::Open {
                path: path.clone(),
                source,
            })?;
        Ok(Self {
            path,
            file,
            synced_at: std::time::Instant::now(),
            unsynced: false,
        })
    }
}

impl Drop for JsonlStore {
    fn drop(&mut self) {
        // The last window's records, whatever stops the process short of a crash.
        let _ = self.sync();
    }
}

/// What [`repair_torn_tail`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// How many bytes were cut off the end.
    pub bytes: u64,
}

/// Cuts a torn last record off a JSON-lines log: a final line without its line feed that does
/// not parse, which is what a crash during an append leaves. Nothing else is touched: a broken
/// record anywhere else stays, and the log still refuses to open. The caller should record an
/// alarm saying so. Returns `None` when the tail is whole.
pub fn repair_torn_tail(path: &Path) -> Result<Option<TornTail>, EventLogError> {
    let err = |source| EventLogError::Write {
        path: path.to_owned(),
        source,
    };
    let bytes = std::fs::read(path).map_err(err)?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(None);
    }
    let start = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if serde_json::from_slice::<Event>(&bytes[start..]).is_ok() {
        // A whole record that only lacks its line feed: complete it instead.
        let mut f = OpenOptions::new().append(true).open(path).map_err(err)?;
        f.write_all(b"\n").map_err(err)?;
        f.sync_data().map_err(err)?;
        return Ok(None);
    }
    let f = OpenOptions::new().write(true).open(path).map_err(err)?;
    f.set_len(start as u64).map_err(err)?;
    f.sync_data().map_err(err)?;
    Ok(Some(TornTail {
        bytes: (bytes.len() - start) as u64,
    }))
}

impl EventStore for JsonlStore {
    fn append(&mut self, event: &Event) -> Result<(), EventLogError> {
        let mut line = serde_json::to_vec(event).expect("an event serialises");
        line.push(b'\n');
        let err = |source| EventLogError::Write {
            path: self.path.clone(),
            source,
        };
        // One write per record: a crash leaves at most a cut last line, which verification
        // reports. The sync is shared by the records of one window (SYNC_EVERY).
        self.file.write_all(&line).map_err(err)?;
        self.unsynced = true;
        if self.synced_at.elapsed() >= SYNC_EVERY {
            self.sync()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), EventLogError> {
        if self.unsynced {
            self.file
                .sync_data()
                .map_err(|source| EventLogError::Write {
                    path: self.path.clone(),
                    source,
                })?;
            self.unsynced = false;
        }
        self.synced_at = std::time::Instant::now();
        Ok(())
    }

    fn load(&self) -> Result<Vec<Record>, EventLogError> {
        read_jsonl(&self.path)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// Reads a JSON-lines event file. Blank lines are skipped; a line that is not a record is
/// kept as [`Record::Malformed`], so verification can say where.
pub fn read_jsonl(path: &Path) -> Result<Vec<Record>, EventLogError> {
    let file = File::open(path).map_err(|source| EventLogError::Open {
        path: path.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line.map_err(|source| EventLogError::Open {
            path: path.to_owned(),
            source,
        })?;
        let n = i as u64 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.push(match serde_json::from_slice::<Event>(&line) {
            Ok(e) => Record::Event(Box::new(e)),
            Err(e) => Record::Malformed {
                line: n,
                error: e.to_string(),
            },
        });
    }
    Ok(out)
}

/// What verification checks beyond the links.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Accept a chain that starts after seq 1 (an exported page): its first `prev` is then
    /// taken on trust.
    pub allow_partial: bool,
    /// The hash the last record must have (kept elsewhere): detects records cut off the end.
    pub expect_head: Option<String>,
}

/// A chain that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// How many records.
    pub count: u64,
    /// The first and last seq (0 when empty).
    pub first_seq: u64,
    pub last_seq: u64,
    /// The last record's hash ([`GENESIS`] when empty).
    pub head: String,
}

/// The first broken link: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}{reason}", self.at())]
pub struct BrokenLink {
    /// The seq of the record where the chain breaks, when that record could be read.
    pub seq: Option<u64>,
    /// Its position in the input (1-based record index, or line for a file).
    pub position: u64,
    pub reason: Break,
}

impl BrokenLink {
    fn at(&self) -> String {
        match self.seq {
            Some(seq) => format!("at seq {seq} (record {}): ", self.position),
            None => format!("at record {}: ", self.position),
        }
    }
}

/// Why a link is broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Break {
    /// The record is not a record (a cut or corrupted line).
    Malformed { error: String },
    /// The record's content does not hash to its `hash`: a field was changed.
    HashMismatch { recorded: String, computed: String },
    /// The record's `prev` is not the previous record's hash: a record before it was changed
    /// (and re-hashed), or replaced.
    PrevMismatch { expected: String, found: String },
    /// Records are missing between the previous record and this one.
    SeqGap { expected: u64, found: u64 },
    /// The record is out of order.
    Reordered { previous: u64, found: u64 },
    /// The first record is not seq 1 with the genesis `prev`.
    BadStart { found: u64 },
    /// The last record's hash is not the expected head: records were cut off the end.
    HeadMismatch { expected: String, found: String },
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Break::Malformed { error } => write!(f, "not a valid record: {error}"),
            Break::HashMismatch { recorded, computed } => write!(
                f,
                "hash mismatch: the record's content hashes to {computed}, but it says {recorded} (a field was changed)"
            ),
            Break::PrevMismatch { expected, found } => write!(
                f,
                "prev mismatch: prev is {found}, but the previous record's hash is {expected} (the previous record was changed or replaced)"
            ),
            Break::SeqGap { expected, found } => write!(
                f,
                "seq gap: expected seq {expected}, found {found} (records were deleted)"
            ),
            Break::Reordered { previous, found } => {
                write!(f, "reordered: seq {found} comes after seq {previous}")
            }
            Break::BadStart { found } => write!(
                f,
                "the log starts at seq {found}, not at seq 1 with the genesis prev (records were deleted from the start)"
            ),
            Break::HeadMismatch { expected, found } => write!(
                f,
                "head mismatch: the last record's hash is {found}, expected {expected} (records were cut off the end)"
            ),
        }
    }
}

/// Checks a chain, record by record, and reports the first broken link.
pub fn verify(records: &[Record], opts: &VerifyOptions) -> Result<Verified, BrokenLink> {
    // Every seq present, to tell records out of order from records deleted.
    let present: std::collections::BTreeSet<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e.seq),
            Record::Malformed { .. } => None,
        })
        .collect();
    let mut prev: Option<&Event> = None;
    let mut first_seq = 0;
    for (i, r) in records.iter().enumerate() {
        let position = i as u64 + 1;
        let e = match r {
            Record::Event(e) => e,
            Record::Malformed { line, error } => {
                return Err(BrokenLink {
                    seq: prev.map(|p| p.seq + 1),
                    position: *line,
                    reason: Break::Malformed {
                        error: error.clone(),
                    },
                });
            }
        };
        let broken = |reason| BrokenLink {
            seq: Some(e.seq),
            position,
            reason,
        };
        let computed = hash_of(e);
        if computed != e.hash {
            return Err(broken(Break::HashMismatch {
                recorded: e.hash.clone(),
                computed,
            }));
        }
        match prev {
            None => {
                first_seq = e.seq;
                let genesis = e.seq == 1 && e.prev == GENESIS;
                if !genesis && !opts.allow_partial {
                    return Err(broken(Break::BadStart { found: e.seq }));
                }
                if e.seq == 1 && e.prev != GENESIS {
                    return Err(broken(Break::PrevMismatch {
                        expected: GENESIS.to_owned(),
                        found: e.prev.clone(),
                    }));
                }
            }
            Some(p) => {
                if e.seq <= p.seq {
                    return Err(broken(Break::Reordered {
                        previous: p.seq,
                        found: e.seq,
                    }));
                }
                if e.seq > p.seq + 1 {
                    // A missing seq that appears later means the order was changed.
                    if present.range(p.seq + 1..e.seq).next().is_some() {
                        return Err(broken(Break::Reordered {
                            previous: p.seq,
                            found: e.seq,
                        }));
                    }
                    return Err(broken(Break::SeqGap {
                        expected: p.seq + 1,
                        found: e.seq,
                    }));
                }
                if e.prev != p.hash {
                    return Err(broken(Break::PrevMismatch {
                        expected: p.hash.clone(),
                        found: e.prev.clone(),
                    }));
                }
            }
        }
        prev = Some(e);
    }
    let head = prev.map_or_else(|| GENESIS.to_owned(), |p| p.hash.clone());
    if let Some(expected) = &opts.expect_head
        && !expected.eq_ignore_ascii_case(&head)
    {
        return Err(BrokenLink {
            seq: prev.map(|p| p.seq),
            position: records.len() as u64,
            reason: Break::HeadMismatch {
                expected: expected.clone(),
                found: head,
            },
        });
    }
    Ok(Verified {
        count: records.len() as u64,
        first_seq,
        last_seq: prev.map_or(0, |p| p.seq),
        head,
    })
}

/// Which records a query wants: after a seq (the paging cursor), of a kind, about a plan or
/// a site, at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(n: u64) -> Vec<Event> {
        let mut log = EventLog::open(MemoryStore::default()).unwrap();
        for i in 0..n {
            let kind =
                [EventKind::Decision, EventKind::Command, EventKind::Operator][i as usize % 3];
            log.append(
                NewEvent::new(kind, "dc1-a", format!("step {i}"))
                    .plan("erp-db")
                    .site(if i % 2 == 0 { "dc1" } else { "dc2" })
                    .term(3)
                    .generation(7 + i)
                    .data(json!({"z": i, "a": [1, "two", null], "n": {"y": true, "b": 1.5}})),
                1_700_000_000_000 + i,
            )
            .unwrap();
        }
        log.all().to_vec()
    }

    fn records(v: &[Event]) -> Vec<Record> {
        v.iter()
            .map(|e| Record::Event(Box::new(e.clone())))
            .collect()
    }

    fn check(v: &[Event]) -> Result<Verified, BrokenLink> {
        verify(&records(v), &VerifyOptions::default())
    }

    #[test]
    fn an_intact_chain_verifies_and_reports_its_head() {
        let v = chain(5);
        let ok = check(&v).unwrap();
        assert_eq!((ok.count, ok.first_seq, ok.last_seq), (5, 1, 5));
        assert_eq!(ok.head, v[4].hash);
        assert_eq!(v[0].prev, GENESIS);
        assert_eq!(v[3].prev, v[2].hash);
    }

    #[test]
    fn the_canonical_encoding_is_pinned() {
        // If this changes, every existing log stops verifying: bump DOMAIN instead.
        let e = NewEvent::new(EventKind::Operator, "token:alice", "Paused \"erp-db\"\n")
            .plan("erp-db")
            .data(json!({"b": 1, "a": [true, null, -2, 0.5], "é": "\u{1}"}))
            .seal(None, 1_700_000_000_000);
        let text = String::from_utf8(canonical_bytes(&e)).unwrap();
        assert_eq!(
            text,
            "qfence-event-v1\n{\"actor\":\"token:alice\",\"data\":{\"a\":[true,null,-2,0.5],\"b\":1,\"é\":\"\\u0001\"},\"generation\":null,\"kind\":\"operator\",\"message\":\"Paused \\\"erp-db\\\"\\n\",\"plan\":\"erp-db\",\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\",\"seq\":1,\"site\":null,\"term\":null,\"time_ms\":1700000000000}"
        );
        assert_eq!(e.hash.len(), 64);
    }

    #[test]
    fn tampering_with_any_field_is_a_hash_mismatch_at_that_record() {
        let base = chain(4);
        type Tamper = Box<dyn Fn(&mut Event)>;
        let tamperings: Vec<(&str, Tamper)> = vec![
            ("seq", Box::new(|e| e.seq += 10)),
            ("time_ms", Box::new(|e| e.time_ms += 1)),
            ("kind", Box::new(|e| e.kind = EventKind::Alarm)),
            ("plan", Box::new(|e| e.plan = Some("web".into()))),
            ("plan none", Box::new(|e| e.plan = None)),
            ("site", Box::new(|e| e.site = Some("dc9".into()))),
            ("term", Box::new(|e| e.term = Some(4))),
            ("generation", Box::new(|e| e.generation = None)),
            ("actor", Box::new(|e| e.actor = "mallory".into())),
            ("message", Box::new(|e| e.message.push('!'))),
            ("data", Box::new(|e| e.data["z"] = json!(99))),
            ("nested data", Box::new(|e| e.data["n"]["y"] = json!(false))),
            ("prev", Box::new(|e| e.prev = GENESIS.into())),
            ("hash", Box::new(|e| e.hash = GENESIS.into())),
        ];
        for (what, tamper) in tamperings {
            let mut v = base.clone();
            tamper(&mut v[2]);
            let err = check(&v).expect_err(what);
            assert_eq!(err.position, 3, "{what}: {err}");
            assert!(
                matches!(err.reason, Break::HashMismatch { .. }),
                "{what}: {err}"
            );
        }
    }

    #[test]
    fn a_changed_record_whose_hash_was_recomputed_breaks_the_next_link() {
        let mut v = chain(4);
        v[1].message = "rewritten".into();
        v[1].hash = hash_of(&v[1]);
        let err = check(&v).unwrap_err();
        assert_eq!(err.seq, Some(3));
        assert!(matches!(err.reason, Break::PrevMismatch { .. }), "{err}");
    }

    #[test]
    fn a_deleted_record_is_a_seq_gap() {
        let mut v = chain(5);
        v.remove(2);
        let err = check(&v).unwrap_err();
        assert_eq!(err.seq, Some(4));
        assert_eq!(
            err.reason,
            Break::SeqGap {
                expected: 3,
                found: 4
            }
        );
    }

    #[test]
    fn swapped_records_are_reported_as_reordered() {
        let mut v = chain(5);
        v.swap(1, 2);
        let err = check(&v).unwrap_err();
        assert_eq!(
            err.reason,
            Break::Reordered {
                previous: 1,
                found: 3
            }
        );
        let mut v = chain(5);
        v.swap(3, 4);
        let err = check(&v).unwrap_err();
        assert_eq!(
            err.reason,
            Break::Reordered {
                previous: 3,
                found: 5
            }
        );
    }

    #[test]
    fn deleting_the_first_record_is_a_bad_start_unless_partial_is_allowed() {
        let mut v = chain(3);
        v.remove(0);
        assert_eq!(check(&v).unwrap_err().reason, Break::BadStart { found: 2 });
        let opts = VerifyOptions {
            allow_partial: true,
            ..Default::default()
        };
        assert_eq!(verify(&records(&v), &opts).unwrap().first_seq, 2);
    }

    #[test]
    fn records_cut_off_the_end_are_caught_only_with_the_expected_head() {
        let full = chain(4);
        let head = full[3].hash.clone();
        let cut = &full[..3];
        assert!(check(cut).is_ok());
        let opts = VerifyOptions {
            expect_head: Some(head),
            ..Default::default()
        };
        assert!(matches!(
            verify(&records(cut), &opts).unwrap_err().reason,
            Break::HeadMismatch { .. }
        ));
        assert!(verify(&records(&full), &opts).is_ok());
    }

    #[test]
    fn a_file_cut_in_the_middle_of_a_record_is_malformed_at_that_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        for i in 0..4 {
            log.append(
                NewEvent::new(EventKind::Decision, "dc1-a", format!("d{i}")),
                i,
            )
            .unwrap();
        }
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).is_ok());
        let lines: Vec<&str> = text.lines().collect();
        let cut = format!(
            "{}\n{}\n{}\n{}\n",
            lines[0],
            &lines[1][..lines[1].len() / 2],
            lines[2],
            lines[3]
        );
        std::fs::write(&path, cut).unwrap();
        let err = verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).unwrap_err();
        assert_eq!(err.position, 2);
        assert!(matches!(err.reason, Break::Malformed { .. }), "{err}");
        // And a broken log is not opened for appending.
        assert!(matches!(
            EventLog::open(JsonlStore::open(&path).unwrap()),
            Err(EventLogError::Broken { .. })
        ));
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_the_log_reopens_but_a_torn_middle_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        for i in 0..3 {
            log.append(NewEvent::new(EventKind::Decision, "a", format!("d{i}")), i)
                .unwrap();
        }
        drop(log);
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(repair_torn_tail(&path).unwrap(), None);
        // A crash in the middle of the fourth append.
        let mut torn = whole.clone();
        torn.extend_from_slice(b"{\"seq\":4,\"time_ms\":3,\"ki");
        std::fs::write(&path, &torn).unwrap();
        assert!(EventLog::open(JsonlStore::open(&path).unwrap()).is_err());
        assert_eq!(
            repair_torn_tail(&path).unwrap(),
            Some(TornTail { bytes: 24 })
        );
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        assert_eq!(
            log.append(NewEvent::new(EventKind::Alarm, "a", "torn"), 4)
                .unwrap()
                .seq,
            4
        );
        drop(log);

        // A whole last record without its line feed is kept.
        let text = std::fs::read(&path).unwrap();
        std::fs::write(&path, &text[..text.len() - 1]).unwrap();
        assert_eq!(repair_torn_tail(&path).unwrap(), None);
        assert_eq!(std::fs::read(&path).unwrap(), text);

        // A cut record in the middle is not a torn tail.
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        let mut mid = Vec::new();
        mid.extend_from_slice(&lines[0][..10]);
        mid.push(b'\n');
        for l in &lines[1..] {
            mid.extend_from_slice(l);
            mid.push(b'\n');
        }
        mid.pop();
        std::fs::write(&path, &mid).unwrap();
        assert_eq!(repair_torn_tail(&path).unwrap(), None);
        assert!(EventLog::open(JsonlStore::open(&path).unwrap()).is_err());
    }

    #[test]
    fn a_reopened_file_log_continues_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        log.append(NewEvent::new(EventKind::Decision, "a", "one"), 1)
            .unwrap();
        drop(log);
        let mut log = EventLog::open(JsonlStore::open(&path).unwrap()).unwrap();
        let e = log
            .append(NewEvent::new(EventKind::Decision, "a", "two"), 2)
            .unwrap();
        assert_eq!(e.seq, 2);
        let ok = verify(&read_jsonl(&path).unwrap(), &VerifyOptions::default()).unwrap();
        assert_eq!(ok.last_seq, 2);
    }

    #[test]
    fn queries_page_by_seq_and_filter() {
        let mut log = EventLog::open(MemoryStore::default()).unwrap();
        for e in chain(10) {
            log.events.push(e);
        }
        let page = log.query(&EventQuery {
            limit: Some(3),
            ..Default::default()
        });
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(page.next_after, Some(3));
        let page = log.query(&EventQuery {
            after: Some(3),
            kind: Some(EventKind::Decision),
            ..Default::default()
        });
        // Decisions are seq 1, 4, 7, 10.
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [4, 7, 10]
        );
        assert_eq!(page.next_after, None);
        let page = log.query(&EventQuery {
            site: Some("dc2".into()),
            limit: Some(2),
            ..Default::default()
        });
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [2, 4]
        );
        assert_eq!(page.next_after, Some(4));
        assert_eq!(page.head_seq, 10);
    }
}
