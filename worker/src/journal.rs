//! The worker's journal of reports (ARCHITECTURE.md, "Durable
//! acknowledgements").
//!
//! A Redis ledger without `appendfsync always` can lose, in a crash of its
//! server, writes it had already acknowledged: a result the worker was told
//! was accepted would vanish, and its run would be executed (the product
//! called and charged) again. So when the coordinator asks for it
//! (`RegisterResponse.journal_reports`), every report is written here and
//! synced to disk *before* it is sent, and kept until the coordinator says
//! the ledger has it on disk (`Durability.durable_seq`, in the epoch it was
//! acknowledged in). When the ledger's epoch moves on (it recovered from a
//! restart), every report acknowledged in an earlier epoch is sent again;
//! the ledger applies a report it already has as a no-op and takes back a
//! lease it lost, so a replay never changes a result and never runs a
//! product.
//!
//! On disk: `DIR/.cohort/journal/<worker>/` (beside the spool) holds
//! numbered segment files of records `kind (1 byte) | length (u32 LE) |
//! protobuf bytes` (kind 1 a `ReportResultRequest`, 2 a
//! `ReportAttemptRequest`), and a `lock` file the process holds locked
//! while it lives (made under a hidden `.<worker>.new` name and renamed
//! into place once locked). A segment is deleted once every report in it is
//! durable; the directory when the journal is empty at shutdown. A
//! directory whose lock nobody holds belongs to a worker that died: the
//! next worker on the machine replays it ([`Journal::leftovers`]) before it
//! leases, then deletes it. A record cut short by a crash mid-write ends
//! its segment: it was never sent.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use cohort_proto::v1 as pb;
use prost::Message as _;

/// A report as journaled.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Result(pb::ReportResultRequest),
    Attempt(pb::ReportAttemptRequest),
}

impl Entry {
    fn kind(&self) -> u8 {
        match self {
            Entry::Result(_) => 1,
            Entry::Attempt(_) => 2,
        }
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            Entry::Result(r) => r.encode_to_vec(),
            Entry::Attempt(a) => a.encode_to_vec(),
        }
    }

    fn decode(kind: u8, bytes: &[u8]) -> Option<Entry> {
        match kind {
            1 => pb::ReportResultRequest::decode(bytes).ok().map(Entry::Result),
            2 => pb::ReportAttemptRequest::decode(bytes).ok().map(Entry::Attempt),
            _ => None,
        }
    }
}

/// Identifies an entry of this process's journal.
pub type EntryId = u64;

/// Where an acknowledgement stands: the ledger's epoch and sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub epoch: u64,
    pub seq: u64,
}

#[derive(Debug)]
struct Held {
    entry: Entry,
    segment: u64,
    ack: Option<Ack>,
}

/// A segment file is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 1 << 20;

/// This process's journal.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    /// Held locked while the journal lives: others see it is not left over.
    _lock: File,
    /// The segment being written: its number and file.
    open: (u64, File, u64),
    /// Segments closed and not deleted yet.
    closed: std::collections::BTreeSet<u64>,
    held: BTreeMap<EntryId, Held>,
    next_id: EntryId,
}

impl Journal {
    /// Opens a fresh journal for this process under `root` (a directory
    /// named `tag`, which must be unique to this process).
    ///
    /// The directory is made and locked under a hidden staging name
    /// (`.tag.new`) and only then renamed into place, so a journal another
    /// worker can see is locked from its first instant: a worker starting
    /// at the same moment never takes a live journal for a left-over one.
    pub fn open(root: &Path, tag: &str) -> io::Result<Journal> {
        let dir = root.join(tag);
        let staging = root.join(format!(".{tag}.new"));
        fs::create_dir_all(&staging)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(staging.join("lock"))?;
        lock.try_lock().map_err(|e| io::Error::other(format!("journal {} is in use: {e}", staging.display())))?;
        segment_file(&staging, 0)?;
        sync_dir(&staging)?;
        fs::rename(&staging, &dir)
            .map_err(|e| io::Error::other(format!("cannot move journal {} into place: {e}", dir.display())))?;
        sync_dir(root)?;
        let file = OpenOptions::new().append(true).open(segment_path(&dir, 0))?;
        Ok(Journal {
            dir,
            _lock: lock,
            open: (0, file, 0),
            closed: Default::default(),
            held: BTreeMap::new(),
            next_id: 0,
        })
    }

    /// Where the journal is, for messages.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reports held: not yet known to be on the ledger's disk.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Writes `entries` and syncs them to disk; returns their ids. Called
    /// before they are sent, so a crash after the send cannot lose them.
    pub fn append(&mut self, entries: Vec<Entry>) -> io::Result<Vec<EntryId>> {
        let mut bytes = Vec::new();
        for e in &entries {
            let body = e.encode();
            bytes.push(e.kind());
            bytes.extend_from_slice(&u32::try_from(body.len()).map_err(io::Error::other)?.to_le_bytes());
            bytes.extend_from_slice(&body);
        }
        let (segment, file, written) = &mut self.open;
        file.write_all(&bytes)?;
        file.sync_data()?;
        *written += bytes.len() as u64;
        let segment = *segment;
        let ids: Vec<EntryId> = entries
            .into_iter()
            .map(|entry| {
                let id = self.next_id;
                self.next_id += 1;
                self.held.insert(id, Held { entry, segment, ack: None });
                id
            })
            .collect();
        if self.open.2 >= SEGMENT_BYTES {
            let next = self.open.0 + 1;
            self.closed.insert(self.open.0);
            self.open = (next, segment_file(&self.dir, next)?, 0);
            sync_dir(&self.dir)?;
        }
        Ok(ids)
    }

    /// The ledger acknowledged these entries (accepted or discarded: either
    /// way it recorded them) at `ack`.
    pub fn acked(&mut self, ids: &[EntryId], ack: Ack) {
        for id in ids {
            if let Some(h) = self.held.get_mut(id) {
                h.ack = Some(ack);
            }
        }
    }

    /// Forgets the entries acknowledged in `epoch` up to `durable_seq` and
    /// deletes the closed segments left with none. Returns how many it
    /// forgot.
    pub fn forget_durable(&mut self, epoch: u64, durable_seq: u64) -> io::Result<usize> {
        let before = self.held.len();
        self.held.retain(|_, h| !h.ack.is_some_and(|a| a.epoch == epoch && a.seq <= durable_seq));
        let forgotten = before - self.held.len();
        if forgotten > 0 {
            let live: std::collections::BTreeSet<u64> = self.held.values().map(|h| h.segment).collect();
            let done: Vec<u64> = self.closed.iter().copied().filter(|n| !live.contains(n)).collect();
            for n in done {
                fs::remove_file(segment_path(&self.dir, n))?;
                self.closed.remove(&n);
            }
        }
        Ok(forgotten)
    }

    /// The entries to send again after the ledger moved to `epoch`: those
    /// acknowledged in an earlier one. (Entries not acknowledged yet are
    /// still with the task that sends them.)
    pub fn to_replay(&self, epoch: u64) -> Vec<(EntryId, Entry)> {
        self.held
            .iter()
            .filter(|(_, h)| h.ack.is_some_and(|a| a.epoch < epoch))
            .map(|(id, h)| (*id, h.entry.clone()))
            .collect()
    }

    /// Deletes the journal's directory if nothing is held; returns whether
    /// it did.
    pub fn remove_if_empty(self) -> io::Result<bool> {
        if !self.held.is_empty() {
            return Ok(false);
        }
        // Removed while still locked, so no other worker takes it up between.
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(true),
        }
    }

    /// The journals under `root` whose process is gone (nobody holds their
    /// lock), each with the reports it holds, in the order written. Each
    /// directory returned is locked by this call until its [`Leftover`] is
    /// dropped, so two workers starting at once do not both take it.
    pub fn leftovers(root: &Path) -> io::Result<Vec<Leftover>> {
        let mut found = Vec::new();
        let dirs = match fs::read_dir(root) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for dir in dirs {
            let dir = dir?.path();
            // Hidden names are journals being made (`Journal::open`): one
            // left by a process that died there never held a report.
            let hidden = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if hidden || !dir.is_dir() {
                continue;
            }
            let Ok(lock) = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("lock")) else {
                continue;
            };
            if lock.try_lock().is_err() {
                continue;
            }
            let mut segments: Vec<(u64, PathBuf)> = fs::read_dir(&dir)?
                .filter_map(|e| e.ok())
                .filter_map(|e| Some((segment_number(&e.path())?, e.path())))
                .collect();
            segments.sort();
            let mut entries = Vec::new();
            for (_, path) in segments {
                entries.extend(read_segment(&path)?);
            }
            found.push(Leftover { dir, entries, _lock: lock });
        }
        Ok(found)
    }
}

/// Every journal under `root`, live or left over, with the reports it
/// holds, in the order written: read only (no lock taken, nothing
/// deleted), for `cohort ledger rebuild`, which takes the reports of every
/// worker as evidence of what the ledger had acknowledged. A record cut
/// short ends its segment, as for [`Journal::leftovers`].
pub fn read_all(root: &Path) -> io::Result<Vec<(PathBuf, Vec<Entry>)>> {
    let mut found = Vec::new();
    let dirs = match fs::read_dir(root) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for dir in dirs {
        let dir = dir?.path();
        if !dir.is_dir() {
            continue;
        }
        let mut segments: Vec<(u64, PathBuf)> = fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((segment_number(&e.path())?, e.path())))
            .collect();
        segments.sort();
        let mut entries = Vec::new();
        for (_, path) in segments {
            entries.extend(read_segment(&path)?);
        }
        found.push((dir, entries));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// The journal of a worker that died, locked for replay.
#[derive(Debug)]
pub struct Leftover {
    pub dir: PathBuf,
    pub entries: Vec<Entry>,
    _lock: File,
}

impl Leftover {
    /// Deletes it, once its reports are acknowledged again (a replayed
    /// report is a no-op where the ledger has it).
    ///
    /// Removed while still locked, so no other worker takes it up between.
    pub fn remove(self) -> io::Result<()> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:08}.log"))
}

fn segment_file(dir: &Path, n: u64) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(segment_path(dir, n))
}

fn segment_number(path: &Path) -> Option<u64> {
    path.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok()
}

/// The records of one segment, up to the first one that is cut short or
/// does not decode (a crash mid-write: never sent).
fn read_segment(path: &Path) -> io::Result<Vec<Entry>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut entries = Vec::new();
    let mut rest = bytes.as_slice();
    while rest.len() >= 5 {
        let kind = rest[0];
        let len = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(body) = rest.get(5..5 + len) else { break };
        let Some(entry) = Entry::decode(kind, body) else { break };
        entries.push(entry);
        rest = &rest[5 + len..];
    }
    Ok(entries)
}

/// Syncs a directory, so a file created in it survives a crash.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(run: &str, token: u64) -> Entry {
        Entry::Result(pb::ReportResultRequest {
            worker_id: "w".into(),
            lease: Some(pb::LeaseRef { run_id: run.into(), fencing_token: token }),
            record_sha256: "a".repeat(64),
            ..Default::default()
        })
    }

    /// Proves the journal's life: entries written and synced, kept until
    /// durable in their epoch, given back for replay after the epoch moved,
    /// found by the next process when this one dies (its lock released),
    /// cut short at a torn record, and not taken while its owner lives.
    #[test]
    fn entries_live_until_durable_and_outlive_their_process() {
        let root = tempfile::tempdir().unwrap();
        let mut j = Journal::open(root.path(), "w1").unwrap();
        let ids = j.append(vec![result("q1:a:1", 1), result("q2:a:1", 2)]).unwrap();
        let third = j.append(vec![result("q3:a:1", 3)]).unwrap();
        assert!(Journal::leftovers(root.path()).unwrap().is_empty(), "a live journal is not left over");
        j.acked(&ids, Ack { epoch: 1, seq: 10 });
        j.acked(&third, Ack { epoch: 1, seq: 11 });
        assert_eq!(j.forget_durable(1, 10).unwrap(), 2);
        assert_eq!(j.len(), 1);
        assert!(j.to_replay(1).is_empty());
        assert_eq!(j.to_replay(2), vec![(third[0], result("q3:a:1", 3))]);
        assert_eq!(j.forget_durable(2, 100).unwrap(), 0, "durable in another epoch says nothing of this one");

        // A torn record after the last whole one: the process died mid-write.
        let segment = j.dir().join("00000000.log");
        let mut f = OpenOptions::new().append(true).open(&segment).unwrap();
        f.write_all(&[1, 200, 0, 0, 0, 7]).unwrap();
        drop(j);
        let left = Journal::leftovers(root.path()).unwrap();
        assert_eq!(left.len(), 1);
        let runs: Vec<String> = left[0]
            .entries
            .iter()
            .map(|e| match e {
                Entry::Result(r) => r.lease.as_ref().unwrap().run_id.clone(),
                Entry::Attempt(a) => a.lease.as_ref().unwrap().run_id.clone(),
            })
            .collect();
        assert_eq!(runs, ["q1:a:1", "q2:a:1", "q3:a:1"], "every whole record, in order");
        assert!(Journal::leftovers(root.path()).unwrap().is_empty(), "locked by the first taker");
        left.into_iter().for_each(|l| l.remove().unwrap());
        assert!(fs::read_dir(root.path()).unwrap().next().is_none());
    }

    /// A rebuild reads every journal, a live one too, without taking it:
    /// the live journal is still its process's, and no left-over is consumed.
    #[test]
    fn read_all_reads_live_and_left_over_journals_and_takes_none() {
        let root = tempfile::tempdir().unwrap();
        let mut live = Journal::open(root.path(), "w1").unwrap();
        live.append(vec![result("q1:a:1", 1)]).unwrap();
        let mut dead = Journal::open(root.path(), "w2").unwrap();
        dead.append(vec![result("q2:a:1", 2), result("q3:a:1", 3)]).unwrap();
        drop(dead);
        let all = read_all(root.path()).unwrap();
        let counts: Vec<usize> = all.iter().map(|(_, e)| e.len()).collect();
        assert_eq!(counts, [1, 2]);
        assert_eq!(Journal::leftovers(root.path()).unwrap().len(), 1, "the left-over one is still there to replay");
        assert_eq!(live.len(), 1);
    }

    /// An empty journal removes its directory at the end; one that holds
    /// reports stays for the next worker.
    #[test]
    fn only_an_empty_journal_goes_away() {
        let root = tempfile::tempdir().unwrap();
        let mut j = Journal::open(root.path(), "w1").unwrap();
        let ids = j.append(vec![result("q1:a:1", 1)]).unwrap();
        j.acked(&ids, Ack { epoch: 1, seq: 1 });
        j.forget_durable(1, 1).unwrap();
        assert!(j.remove_if_empty().unwrap());
        let mut j = Journal::open(root.path(), "w2").unwrap();
        j.append(vec![result("q1:a:1", 1)]).unwrap();
        assert!(!j.remove_if_empty().unwrap());
        assert_eq!(Journal::leftovers(root.path()).unwrap().len(), 1);
    }

    /// Workers starting at the same moment in one directory: a scan for
    /// left-over journals never takes one whose worker is alive (the CI run
    /// that found this had two of four workers stop on "journal is in use"
    /// and "No such file or directory").
    #[test]
    fn a_journal_being_opened_is_never_left_over() {
        let root = tempfile::tempdir().unwrap();
        for round in 0..200 {
            let path = root.path().to_path_buf();
            let opener = std::thread::spawn(move || Journal::open(&path, &format!("w{round}")).unwrap());
            let taken = Journal::leftovers(root.path()).unwrap();
            let journal = opener.join().unwrap();
            assert!(taken.is_empty(), "round {round}: took a live journal: {:?}", taken[0].dir);
            assert!(journal.remove_if_empty().unwrap());
        }
        assert!(fs::read_dir(root.path()).unwrap().next().is_none(), "nothing left behind");
    }
}
