//! Where records are kept: the store trait, in memory and as JSON lines on disk.

use super::*;

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
            synced_at: qfence_model::time::monotonic_now(),
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
        self.synced_at = qfence_model::time::monotonic_now();
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
