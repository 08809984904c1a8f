//! The node's storage: the Raft log and vote in files under `--data`, and the key-value state
//! machine in memory, rebuilt from the log on restart.
//!
//! * `DIR/log`: one JSON record a line, appended: `{"append":ENTRY}`, `{"truncate":INDEX}` (drop
//!   the entries from `INDEX` on), `{"purge":LOG_ID}` (drop those up to it). Recovery replays the
//!   records; a last line a crash cut short is cut off the file.
//! * `DIR/vote`: the vote, as JSON, replaced by writing `vote.tmp`, fsync, rename, fsync of `DIR`.
//!
//! The files are created once and their names made durable with an fsync of `DIR`. In the fixed
//! variant every append is fsynced before openraft is told it is flushed
//! ([`LogFlushed::log_io_completed`]); truncations are fsynced before they return. The buggy
//! variant fsyncs only an append that carries a membership change, and tells openraft every
//! append is flushed at once: the other entries it acknowledges are in the page cache only.
//!
//! The state machine is not persisted: openraft re-applies the committed log after a restart
//! (no snapshot is ever built: the snapshot policy is `Never` and the log is never purged; the
//! snapshot calls serialize the whole map, for completeness).
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Cursor, Seek, SeekFrom, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

use crate::{Response, TypeConfig, Variant};

type NodeId = u64;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    Append(Entry<TypeConfig>),
    Truncate(u64),
    Purge(LogId<NodeId>),
}

struct LogInner {
    dir: PathBuf,
    file: File,
    variant: Variant,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
}

/// The Raft log and vote (cheap to clone: the reader openraft asks for is a clone).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

fn io_err(e: io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

/// fsync of a directory, which makes the names in it durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl LogStore {
    /// Opens (or creates) the log under `dir`, replaying what survived.
    pub fn open(dir: &Path, variant: Variant) -> io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("log");
        let created = !path.exists();
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(&path)?;
        if created {
            file.sync_all()?;
            sync_dir(dir)?;
        }
        let mut entries = BTreeMap::new();
        let mut last_purged = None;
        let mut good = 0u64;
        let mut reader = BufReader::new(File::open(&path)?);
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line)?;
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            let Ok(record) = serde_json::from_str::<Record>(line.trim_end()) else { break };
            good += n as u64;
            match record {
                Record::Append(e) => {
                    entries.insert(e.log_id.index, e);
                }
                Record::Truncate(i) => {
                    entries.split_off(&i);
                }
                Record::Purge(id) => {
                    entries = entries.split_off(&(id.index + 1));
                    last_purged = Some(id);
                }
            }
        }
        if good != file.seek(SeekFrom::End(0))? {
            // A torn last record: cut it off so the next append starts on a clean line.
            file.set_len(good)?;
            file.sync_all()?;
        }
        let vote = match std::fs::read(dir.join("vote")) {
            Ok(bytes) => serde_json::from_slice(&bytes).ok(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let inner = LogInner { dir: dir.to_path_buf(), file, variant, entries, last_purged, vote };
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)) })
    }

    /// How many entries and whether a vote survived (for the start-up line).
    pub fn summary(&self) -> (usize, Option<Vote<NodeId>>) {
        let inner = self.inner.lock().unwrap();
        (inner.entries.len(), inner.vote)
    }
}

impl LogInner {
    fn write(&mut self, records: &[Record]) -> io::Result<()> {
        let mut buf = Vec::new();
        for r in records {
            serde_json::to_writer(&mut buf, r).map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.inner.lock().unwrap();
        let last = inner.entries.values().next_back().map(|e| e.log_id).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().unwrap();
        let tmp = inner.dir.join("vote.tmp");
        let res = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&serde_json::to_vec(vote).map_err(io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, inner.dir.join("vote"))?;
            sync_dir(&inner.dir)
        })();
        res.map_err(|e| StorageError::from(StorageIOError::write_vote(&e)))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().unwrap().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock().unwrap();
        let entries: Vec<_> = entries.into_iter().collect();
        let records: Vec<_> = entries.iter().cloned().map(Record::Append).collect();
        let membership = entries.iter().any(|e| matches!(e.payload, EntryPayload::Membership(_)));
        inner.write(&records).map_err(io_err)?;
        for e in entries {
            inner.entries.insert(e.log_id.index, e);
        }
        match inner.variant {
            Variant::Fixed => {
                let res = inner.file.sync_data();
                let failed = res.as_ref().err().map(|e| io::Error::new(e.kind(), e.to_string()));
                callback.log_io_completed(res);
                if let Some(e) = failed {
                    return Err(io_err(e));
                }
            }
            // THE PLANTED BUG: a shortcut that fsyncs only appends carrying a membership change
            // (the cluster's configuration must survive) and reports every other append flushed
            // at once. Those entries are only in the page cache, but openraft is told they are on
            // disk, so this node acknowledges them to the leader (or counts itself in the quorum
            // as the leader), and a kill throws them away.
            Variant::Buggy => {
                if membership {
                    inner.file.sync_data().map_err(io_err)?;
                }
                callback.log_io_completed(Ok(()));
            }
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().unwrap();
        inner.write(&[Record::Truncate(log_id.index)]).map_err(io_err)?;
        inner.file.sync_data().map_err(io_err)?;
        inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock().unwrap();
        inner.write(&[Record::Purge(log_id)]).map_err(io_err)?;
        inner.file.sync_data().map_err(io_err)?;
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        Ok(())
    }
}

/// The replicated map and how far it has applied the log.
#[derive(Default, Clone, Serialize, Deserialize)]
pub struct Data {
    /// The map.
    pub kv: BTreeMap<String, String>,
    /// The last entry applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, openraft::BasicNode>,
}

/// The last snapshot built or installed: its metadata and the serialized [`Data`].
type StoredSnapshot = (SnapshotMeta<NodeId, openraft::BasicNode>, Vec<u8>);

/// The state machine: shared with the node's request handlers, which read the map.
#[derive(Clone, Default)]
pub struct StateMachine {
    /// The state (held briefly, never across an await).
    pub data: Arc<Mutex<Data>>,
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let data = self.data.lock().unwrap().clone();
        let bytes = serde_json::to_vec(&data).map_err(|e| StorageIOError::read_state_machine(&e))?;
        let id = data.last_applied.map_or("none".to_string(), |l| format!("{}-{}", l.leader_id, l.index));
        let meta = SnapshotMeta { last_log_id: data.last_applied, last_membership: data.membership, snapshot_id: id };
        *self.snapshot.lock().unwrap() = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, openraft::BasicNode>), StorageError<NodeId>> {
        let data = self.data.lock().unwrap();
        Ok((data.last_applied, data.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut data = self.data.lock().unwrap();
        let mut out = Vec::new();
        for e in entries {
            data.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(req) => {
                    data.kv.insert(req.key, req.value);
                }
                EntryPayload::Membership(m) => data.membership = StoredMembership::new(Some(e.log_id), m),
            }
            out.push(Response {});
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let data: Data = serde_json::from_slice(&bytes).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        *self.data.lock().unwrap() = data;
        *self.snapshot.lock().unwrap() = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .snapshot
            .lock()
            .unwrap()
            .clone()
            .map(|(meta, bytes)| Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) }))
    }
}
