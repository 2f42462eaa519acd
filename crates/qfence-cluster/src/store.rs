//! Durable storage: the Raft log, the vote and the state machine in one redb file per node.
//!
//! Tables:
//! - `log`: log index → JSON of the entry;
//! - `meta`: `vote`, `committed`, `purged` → JSON;
//! - `sm`: `applied` → JSON of [`SmImage`] without its keyed rows and events (the last applied
//!   log id, membership, orchestrators, node keys, event counter), `snapshot` → JSON of the last
//!   built or installed snapshot;
//! - `plans`, `statuses`, `controllers`, `controller_tests`: id → JSON of that row;
//! - `events`: event sequence number → JSON of the event.
//!
//! The keyed rows and the events are written incrementally: an applied batch rewrites only the
//! rows its commands touched ([`Dirty`]), so a batch costs the same with 5 plans or 5,000.
//!
//! The log and the vote are the source of truth: every write to them commits with immediate
//! durability before openraft is told the I/O is done, so an acknowledged entry survives a
//! crash of the process. The applied state is committed without waiting for the disk: after a
//! crash it may be a little behind, and openraft re-applies the missing entries from the log.
//! Snapshots (and the applied state at that point) are written durably, because the log before
//! a snapshot may be purged.
//!
//! A snapshot is the portable JSON of [`SmImage`]: readable by a human, by `jq`, and by a
//! later build (it carries [`STATE_FORMAT`](crate::state::STATE_FORMAT)).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, RwLock};

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, IOFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{EntryPayload, RaftLogReader, RaftSnapshotBuilder};
use qfence_model::ids::Term;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ClusterError;
use crate::state::{ClusterState, Dirty, Response};
use crate::types::{Entry, LogId, SnapshotMeta, StoredMembership, TypeConfig, Vote};

/// A Raft handle with qfence's state machine. Declared here, beside the state machine, so
/// the type configuration in [`crate::types`] does not depend back on the store.
pub type Raft = openraft::Raft<TypeConfig, StateMachineStore>;

const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const SM: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("sm");
const EVENTS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("events");
const PLANS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("plans");
const STATUSES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("statuses");
const CONTROLLERS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("controllers");
const CONTROLLER_TESTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("controller_tests");
const ROWS: [TableDefinition<'_, &str, &[u8]>; 4] =
    [PLANS, STATUSES, CONTROLLERS, CONTROLLER_TESTS];

/// The state machine with the Raft bookkeeping needed to restart from it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SmImage {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub state: ClusterState,
}

/// A snapshot as stored and sent: its metadata and the JSON of an [`SmImage`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn to_json<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(io_err)
}

fn from_json<T: DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    serde_json::from_slice(b).map_err(io_err)
}

/// Opens (or creates) a node's database and returns its log store and state machine.
pub fn open(path: &Path) -> Result<(LogStore, StateMachineStore), ClusterError> {
    let storage = |e: Box<dyn std::error::Error + Send + Sync>| ClusterError::Storage {
        path: path.display().to_string(),
        source: e,
    };
    let db = Database::create(path).map_err(|e| storage(e.into()))?;
    // Create the tables so readers never see them missing.
    let tx = db.begin_write().map_err(|e| storage(e.into()))?;
    {
        tx.open_table(LOG).map_err(|e| storage(e.into()))?;
        tx.open_table(META).map_err(|e| storage(e.into()))?;
        tx.open_table(SM).map_err(|e| storage(e.into()))?;
        tx.open_table(EVENTS).map_err(|e| storage(e.into()))?;
        for table in ROWS {
            tx.open_table(table).map_err(|e| storage(e.into()))?;
        }
    }
    tx.commit().map_err(|e| storage(e.into()))?;
    let db = Arc::new(db);
    let image = load_image(&db).map_err(|e| storage(e.into()))?;
    let shared = Arc::new(RwLock::new(image));
    Ok((
        LogStore { db: db.clone() },
        StateMachineStore { db, shared },
    ))
}

fn load_image(db: &Database) -> io::Result<SmImage> {
    let mut image: SmImage = read_key(db, SM, "applied")?.unwrap_or_default();
    // A database written before the rows had their own tables keeps them inside `applied`.
    let whole = !(image.state.plans.is_empty()
        && image.state.statuses.is_empty()
        && image.state.controllers.is_empty()
        && image.state.controller_tests.is_empty());
    {
        let tx = db.begin_read().map_err(io_err)?;
        let t = tx.open_table(EVENTS).map_err(io_err)?;
        image.state.events.clear();
        for item in t.iter().map_err(io_err)? {
            let (_, v) = item.map_err(io_err)?;
            image.state.events.push_back(from_json(v.value())?);
        }
        let state = &mut image.state;
        read_rows(&tx, PLANS, &mut state.plans)?;
        read_rows(&tx, STATUSES, &mut state.statuses)?;
        read_rows(&tx, CONTROLLERS, &mut state.controllers)?;
        read_rows(&tx, CONTROLLER_TESTS, &mut state.controller_tests)?;
    }
    if whole {
        save_image(db, &mut image, Save::Full)?;
    }
    Ok(image)
}

/// Reads a table of rows stored as JSON of `(key, value)` into `map`.
fn read_rows<K: Ord + DeserializeOwned, V: DeserializeOwned>(
    tx: &redb::ReadTransaction,
    table: TableDefinition<'_, &str, &[u8]>,
    map: &mut BTreeMap<K, V>,
) -> io::Result<()> {
    let t = tx.open_table(table).map_err(io_err)?;
    for item in t.iter().map_err(io_err)? {
        let (_, v) = item.map_err(io_err)?;
        let (k, v): (K, V) = from_json(v.value())?;
        map.insert(k, v);
    }
    Ok(())
}

/// Writes the rows of `keys` from `map` (a key no longer in `map` is deleted), or all of them
/// (after deleting every stored row) when `keys` is `None`.
fn write_rows<K: Ord + Serialize + std::borrow::Borrow<str>, V: Serialize>(
    tx: &redb::WriteTransaction,
    table: TableDefinition<'_, &str, &[u8]>,
    map: &BTreeMap<K, V>,
    keys: Option<&BTreeSet<K>>,
) -> io::Result<()> {
    let mut t = tx.open_table(table).map_err(io_err)?;
    match keys {
        Some(keys) => {
            for k in keys {
                match map.get::<K>(k) {
                    Some(v) => {
                        t.insert(k.borrow(), to_json(&(k, v))?.as_slice())
                            .map_err(io_err)?;
                    }
                    None => {
                        t.remove(k.borrow()).map_err(io_err)?;
                    }
                }
            }
        }
        None => {
            t.retain(|_, _| false).map_err(io_err)?;
            for (k, v) in map {
                t.insert(k.borrow(), to_json(&(k, v))?.as_slice())
                    .map_err(io_err)?;
            }
        }
    }
    Ok(())
}

/// What [`save_image`] writes.
enum Save<'a> {
    /// Everything, durably (a snapshot built or installed, a database migrated).
    Full,
    /// After an applied batch, without waiting for the disk: the small `applied` row, the
    /// keyed rows in `dirty`, and the events from sequence number `new_from` on.
    Batch { dirty: &'a Dirty, new_from: u64 },
}

/// Writes the applied state as `save` says, and removes the events that fell out of the log.
fn save_image(db: &Database, image: &mut SmImage, save: Save<'_>) -> io::Result<()> {
    // The `applied` row is the image without its keyed rows and events: take them out to
    // serialise the rest, then put them back.
    let state = &mut image.state;
    let parts = (
        std::mem::take(&mut state.events),
        std::mem::take(&mut state.plans),
        std::mem::take(&mut state.statuses),
        std::mem::take(&mut state.controllers),
        std::mem::take(&mut state.controller_tests),
    );
    let bytes = to_json(&*image);
    let state = &mut image.state;
    (
        state.events,
        state.plans,
        state.statuses,
        state.controllers,
        state.controller_tests,
    ) = parts;
    let bytes = bytes?;
    let state = &image.state;
    let mut tx = db.begin_write().map_err(io_err)?;
    let (dirty, new_from) = match save {
        Save::Full => (None, 0),
        Save::Batch { dirty, new_from } => {
            tx.set_durability(redb::Durability::None).map_err(io_err)?;
            (Some(dirty), new_from)
        }
    };
    {
        let mut sm = tx.open_table(SM).map_err(io_err)?;
        sm.insert("applied", bytes.as_slice()).map_err(io_err)?;
        write_rows(&tx, PLANS, &state.plans, dirty.map(|d| &d.plans))?;
        write_rows(&tx, STATUSES, &state.statuses, dirty.map(|d| &d.statuses))?;
        write_rows(
            &tx,
            CONTROLLERS,
            &state.controllers,
            dirty.map(|d| &d.controllers),
        )?;
        write_rows(
            &tx,
            CONTROLLER_TESTS,
            &state.controller_tests,
            dirty.map(|d| &d.controller_tests),
        )?;
        let mut t = tx.open_table(EVENTS).map_err(io_err)?;
        let oldest = state.events.front().map_or(u64::MAX, |e| e.seq);
        t.retain_in(..oldest, |_, _| false).map_err(io_err)?;
        for e in state.events.iter().filter(|e| e.seq >= new_from) {
            t.insert(e.seq, to_json(e)?.as_slice()).map_err(io_err)?;
        }
        if dirty.is_none() {
            // A full save: drop anything beyond the image too.
            t.retain_in(state.next_event_seq.., |_, _| false)
                .map_err(io_err)?;
        }
    }
    tx.commit().map_err(io_err)
}

fn read_key<T: DeserializeOwned>(
    db: &Database,
    table: TableDefinition<'_, &str, &[u8]>,
    key: &str,
) -> io::Result<Option<T>> {
    let tx = db.begin_read().map_err(io_err)?;
    let t = tx.open_table(table).map_err(io_err)?;
    match t.get(key).map_err(io_err)? {
        Some(v) => Ok(Some(from_json(v.value())?)),
        None => Ok(None),
    }
}

fn write_key<T: Serialize>(
    db: &Database,
    table: TableDefinition<'_, &str, &[u8]>,
    key: &str,
    value: &T,
) -> io::Result<()> {
    let bytes = to_json(value)?;
    let tx = db.begin_write().map_err(io_err)?;
    {
        let mut t = tx.open_table(table).map_err(io_err)?;
        t.insert(key, bytes.as_slice()).map_err(io_err)?;
    }
    tx.commit().map_err(io_err)
}

/// The Raft log and vote.
#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => Bound::Included(*e),
            Bound::Excluded(e) => Bound::Excluded(*e),
            Bound::Unbounded => Bound::Unbounded,
        };
        let tx = self.db.begin_read().map_err(io_err)?;
        let t = tx.open_table(LOG).map_err(io_err)?;
        let mut out = Vec::new();
        for item in t.range(start..).map_err(io_err)? {
            let (k, v) = item.map_err(io_err)?;
            let within = match end {
                Bound::Included(e) => k.value() <= e,
                Bound::Excluded(e) => k.value() < e,
                Bound::Unbounded => true,
            };
            if !within {
                break;
            }
            out.push(from_json(v.value())?);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        read_key(&self.db, META, "vote")
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let purged: Option<LogId> = read_key(&self.db, META, "purged")?;
        let tx = self.db.begin_read().map_err(io_err)?;
        let t = tx.open_table(LOG).map_err(io_err)?;
        let last = match t.last().map_err(io_err)? {
            Some((_, v)) => Some(from_json::<Entry>(v.value())?.log_id),
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        write_key(&self.db, META, "vote", vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        write_key(&self.db, META, "committed", &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(read_key::<Option<LogId>>(&self.db, META, "committed")?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let result = (|| {
            let tx = self.db.begin_write().map_err(io_err)?;
            {
                let mut t = tx.open_table(LOG).map_err(io_err)?;
                for entry in entries {
                    let bytes = to_json(&entry)?;
                    t.insert(entry.log_id.index, bytes.as_slice())
                        .map_err(io_err)?;
                }
            }
            tx.commit().map_err(io_err)
        })();
        match result {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io_err(&e)));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        let tx = self.db.begin_write().map_err(io_err)?;
        {
            let mut t = tx.open_table(LOG).map_err(io_err)?;
            t.retain_in(from.., |_, _| false).map_err(io_err)?;
        }
        tx.commit().map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let bytes = to_json(&Some(log_id))?;
        let tx = self.db.begin_write().map_err(io_err)?;
        {
            let mut meta = tx.open_table(META).map_err(io_err)?;
            meta.insert("purged", bytes.as_slice()).map_err(io_err)?;
            let mut t = tx.open_table(LOG).map_err(io_err)?;
            t.retain_in(..=log_id.index, |_, _| false).map_err(io_err)?;
        }
        tx.commit().map_err(io_err)
    }
}

/// The state machine. The current image is shared (read-only) with the rest of the node through
/// [`StateMachineStore::reader`].
#[derive(Debug, Clone)]
pub struct StateMachineStore {
    db: Arc<Database>,
    shared: Arc<RwLock<SmImage>>,
}

/// Read access to the applied state.
#[derive(Debug, Clone)]
pub struct StateReader {
    shared: Arc<RwLock<SmImage>>,
}

impl StateReader {
    /// Runs `f` on the applied state.
    pub fn read<T>(&self, f: impl FnOnce(&SmImage) -> T) -> T {
        let guard = self.shared.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    /// A copy of the applied cluster state.
    pub fn state(&self) -> ClusterState {
        self.read(|i| i.state.clone())
    }
}

impl StateMachineStore {
    /// A handle to read the applied state.
    pub fn reader(&self) -> StateReader {
        StateReader {
            shared: self.shared.clone(),
        }
    }

    fn image(&self) -> SmImage {
        self.shared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn build(&self) -> io::Result<StoredSnapshot> {
        let mut image = self.image();
        // The log up to here may now be purged: make the applied state durable first.
        save_image(&self.db, &mut image, Save::Full)?;
        let snap = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: image.last_applied,
                last_membership: image.membership.clone(),
            },
            data: to_json(&image)?,
        };
        write_key(&self.db, SM, "snapshot", &snap)?;
        Ok(snap)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<openraft::type_config::alias::SnapshotOf<TypeConfig, Vec<u8>>, io::Error> {
        let snap = self.build()?;
        Ok(openraft::Snapshot {
            meta: snap.meta,
            snapshot: snap.data,
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let image = self.image();
        Ok((image.last_applied, image.membership))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + Send,
    {
        // Entries reach the state machine only once committed, so publishing before the
        // (non-durable) save is safe: a restart re-applies them from the log.
        let mut batch = Vec::new();
        while let Some(item) = entries.next().await {
            batch.push(item?);
        }
        let mut guard = self.shared.write().unwrap_or_else(|p| p.into_inner());
        let image = &mut *guard;
        let new_from = image.state.next_event_seq;
        let mut dirty = Dirty::default();
        let mut replies = Vec::new();
        for (entry, responder) in batch {
            image.last_applied = Some(entry.log_id);
            let response = match &entry.payload {
                EntryPayload::Blank => Response::NoCommand,
                EntryPayload::Normal(request) => {
                    request.command.touches(&mut dirty);
                    image
                        .state
                        .apply_request(request, Term(entry.log_id.leader_id.term))
                }
                EntryPayload::Membership(m) => {
                    image.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    Response::NoCommand
                }
            };
            if let Some(r) = responder {
                replies.push((r, response));
            }
        }
        save_image(
            &self.db,
            image,
            Save::Batch {
                dirty: &dirty,
                new_from,
            },
        )?;
        drop(guard);
        for (r, response) in replies {
            r.send(response);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let mut image: SmImage = from_json(&snapshot)?;
        if image.state.format != crate::state::STATE_FORMAT {
            return Err(io_err(format!(
                "snapshot has state format {}, this build reads {}",
                image.state.format,
                crate::state::STATE_FORMAT
            )));
        }
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: snapshot,
        };
        write_key(&self.db, SM, "snapshot", &stored)?;
        save_image(&self.db, &mut image, Save::Full)?;
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = image;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<openraft::type_config::alias::SnapshotOf<TypeConfig, Vec<u8>>>, io::Error>
    {
        let stored: Option<StoredSnapshot> = read_key(&self.db, SM, "snapshot")?;
        Ok(stored.map(|s| openraft::Snapshot {
            meta: s.meta,
            snapshot: s.data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::entry::RaftEntry;
    use openraft::vote::RaftLeaderIdExt;

    fn entry(term: u64, index: u64) -> Entry {
        let log_id = openraft::LogId::new(
            openraft::impls::leader_id_std::LeaderId::<u64, u64>::new_committed(term, 1),
            index,
        );
        Entry::new_blank(log_id)
    }

    fn normal(term: u64, index: u64, command: crate::state::Command) -> Entry {
        Entry {
            log_id: entry(term, index).log_id,
            payload: EntryPayload::Normal(crate::state::Request::new(command)),
        }
    }

    #[tokio::test]
    async fn applied_state_and_events_survive_reopen_and_snapshots_restore_it() {
        use crate::state::{Command, EventDraft};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.redb");
        let event = |i: u64| Command::AppendEvent {
            event: EventDraft {
                at_unix_ms: i,
                plan: None,
                message: format!("event {i}"),
                fields: serde_json::json!({}),
            },
        };
        let applied = {
            let (_, mut sm) = open(&path).unwrap();
            let batch1: Vec<io::Result<EntryResponder<TypeConfig>>> = (1..=3)
                .map(|i| Ok((normal(2, i, event(i)), None)))
                .collect();
            sm.apply(futures_util::stream::iter(batch1)).await.unwrap();
            let batch2: Vec<io::Result<EntryResponder<TypeConfig>>> =
                vec![Ok((normal(2, 4, event(4)), None))];
            sm.apply(futures_util::stream::iter(batch2)).await.unwrap();
            sm.reader().state()
        };
        assert_eq!(applied.events.len(), 4);
        assert_eq!(applied.events[3].term.0, 2);

        let (_, mut sm) = open(&path).unwrap();
        assert_eq!(sm.reader().state(), applied);
        let (last, _) = sm.applied_state().await.unwrap();
        assert_eq!(last.unwrap().index, 4);

        let snap = sm.build_snapshot().await.unwrap();
        let other = dir.path().join("other.redb");
        let (_, mut fresh) = open(&other).unwrap();
        fresh
            .install_snapshot(&snap.meta, snap.snapshot)
            .await
            .unwrap();
        assert_eq!(fresh.reader().state(), applied);
        drop(fresh);
        let (_, reopened) = open(&other).unwrap();
        assert_eq!(reopened.reader().state(), applied);
    }

    fn plan_command(id: &str) -> crate::state::Command {
        crate::state::Command::CreatePlan {
            plan: qfence_model::ids::PlanId::new(id).unwrap(),
            config: serde_json::json!({"name": id}),
            initial_state: crate::state::PlanStateDoc {
                schema: 1,
                generation: qfence_model::ids::Generation(1),
                body: serde_json::json!({"owner": "dc1"}),
            },
        }
    }

    fn status_of(ids: &[&str]) -> crate::state::Command {
        crate::state::Command::PublishStatuses {
            statuses: ids
                .iter()
                .map(|id| crate::state::StatusDraft {
                    format: crate::state::STATUS_FORMAT,
                    plan: qfence_model::ids::PlanId::new(*id).unwrap(),
                    sites: vec![],
                    reason: format!("{id} is steady"),
                    at_unix_ms: 7,
                    by: qfence_model::ids::OrchestratorId::new("dc1-a").unwrap(),
                })
                .collect(),
        }
    }

    async fn apply_all(
        sm: &mut StateMachineStore,
        from: u64,
        commands: Vec<crate::state::Command>,
    ) {
        let batch: Vec<io::Result<EntryResponder<TypeConfig>>> = commands
            .into_iter()
            .zip(from..)
            .map(|(c, i)| Ok((normal(3, i, c), None)))
            .collect();
        sm.apply(futures_util::stream::iter(batch)).await.unwrap();
    }

    fn stored_keys(path: &Path, table: TableDefinition<'_, &str, &[u8]>) -> Vec<String> {
        let db = Database::open(path).unwrap();
        let tx = db.begin_read().unwrap();
        let t = tx.open_table(table).unwrap();
        t.iter()
            .unwrap()
            .map(|r| r.unwrap().0.value().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_batch_rewrites_only_the_rows_it_touched_and_removals_delete_them() {
        use crate::state::Command;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.redb");
        let applied = {
            let (_, mut sm) = open(&path).unwrap();
            apply_all(
                &mut sm,
                1,
                vec![plan_command("a"), plan_command("b"), plan_command("c")],
            )
            .await;
            apply_all(&mut sm, 4, vec![status_of(&["a", "b", "c"])]).await;
            // Row `c` edited behind the state machine's back: a batch that does not touch `c`
            // must leave the stored row alone (proof that only touched rows are written).
            sm.shared
                .write()
                .unwrap()
                .state
                .plans
                .get_mut("c")
                .unwrap()
                .config = serde_json::json!({"edited": "in memory only"});
            let remove = Command::RemovePlan {
                plan: qfence_model::ids::PlanId::new("a").unwrap(),
                expected_generation: qfence_model::ids::Generation(1),
            };
            apply_all(&mut sm, 5, vec![remove, status_of(&["b"])]).await;
            sm.reader().state()
        };
        assert_eq!(stored_keys(&path, PLANS), ["b", "c"]);
        assert_eq!(stored_keys(&path, STATUSES), ["b", "c"]);
        let (_, sm) = open(&path).unwrap();
        let reopened = sm.reader().state();
        assert_eq!(reopened.statuses, applied.statuses);
        assert_eq!(reopened.plans["b"], applied.plans["b"]);
        assert_eq!(
            reopened.plans["c"].config,
            serde_json::json!({"name": "c"}),
            "row c was rewritten by a batch that did not touch it"
        );
    }

    #[tokio::test]
    async fn a_database_with_rows_inside_the_applied_image_is_migrated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.redb");
        let applied = {
            let (_, mut sm) = open(&path).unwrap();
            apply_all(&mut sm, 1, vec![plan_command("a"), status_of(&["a"])]).await;
            sm.reader().state()
        };
        {
            // The layout of earlier builds: everything in `applied`, no row tables.
            let db = Database::open(&path).unwrap();
            let image = SmImage {
                last_applied: None,
                membership: StoredMembership::default(),
                state: applied.clone(),
            };
            write_key(&db, SM, "applied", &image).unwrap();
            let tx = db.begin_write().unwrap();
            for table in ROWS {
                tx.delete_table(table).unwrap();
            }
            tx.commit().unwrap();
        }
        let (_, sm) = open(&path).unwrap();
        assert_eq!(sm.reader().state(), applied);
        drop(sm);
        assert_eq!(stored_keys(&path, PLANS), ["a"]);
        let (_, sm) = open(&path).unwrap();
        assert_eq!(
            sm.reader().state(),
            applied,
            "the migrated layout reads back"
        );
    }

    #[tokio::test]
    async fn log_survives_reopen_and_truncates_and_purges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.redb");
        {
            let (mut log, _) = open(&path).unwrap();
            log.append((1..=5).map(|i| entry(1, i)), IOFlushed::noop())
                .await
                .unwrap();
            let vote = Vote::new(2, 7);
            log.save_vote(&vote).await.unwrap();
        }
        let (mut log, _) = open(&path).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 7)));
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.unwrap().index, 5);
        assert_eq!(log.try_get_log_entries(2..4).await.unwrap().len(), 2);

        log.truncate_after(Some(entry(1, 3).log_id)).await.unwrap();
        assert_eq!(
            log.get_log_state()
                .await
                .unwrap()
                .last_log_id
                .unwrap()
                .index,
            3
        );
        log.purge(entry(1, 2).log_id).await.unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.unwrap().index, 2);
        assert_eq!(state.last_log_id.unwrap().index, 3);
        let left: Vec<u64> = log
            .try_get_log_entries(..)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect();
        assert_eq!(left, vec![3]);
    }
}
