//! The worker's spool: the bytes of answers (outputs and run records) that
//! the artifact store refused, kept on the worker's own disk under their
//! SHA-256 until the store takes them.
//!
//! Why it exists: once a system under test has answered, calling it again
//! would let a rerun replace the answer (seed 004: no rerun replaces a
//! result) and charge for it twice. So a worker whose store fails keeps
//! the answer here, reports the run's result by its hashes (content
//! addressing makes them known before the bytes are stored), stops
//! leasing, and moves the spool into the store ([`Spool::flush_into`])
//! before it leases again. When even the local disk refuses a blob, the
//! spool holds it in memory, so it is still flushed when the store comes
//! back before the worker stops; only a worker that dies first loses it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cohort_core::hash::{is_sha256_hex, sha256_hex};

use crate::store::{ArtifactStore, Backend, LocalBackend};

/// Blobs waiting for the artifact store, in a local directory (the local
/// backend's layout, so a spooled blob is written as atomically as a stored
/// one).
/// Clones share the in-memory part and the count.
#[derive(Debug, Clone)]
pub struct Spool {
    local: LocalBackend,
    /// Blobs the local disk refused as well: the last place an answer can
    /// be kept (a std Mutex: held for a map operation, never across await).
    memory: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    /// How many blobs this process has kept, so a worker can tell after
    /// each run whether its store failed without reading the directory.
    kept: Arc<AtomicU64>,
}

/// Where [`Spool::keep`] put a blob.
#[derive(Debug)]
pub enum Kept {
    /// On the local disk: it survives the worker.
    OnDisk,
    /// In memory only, because the disk refused it too (the error): lost
    /// if the worker dies before the store takes it.
    InMemory(io::Error),
}

impl Spool {
    /// A spool in the directory `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Spool {
        Spool { local: LocalBackend::new(dir), memory: Arc::default(), kept: Arc::default() }
    }

    /// The spool of a cohort directory: `DIR/.cohort/spool`, on the disk of
    /// the machine that runs the worker, whatever store it writes to.
    pub fn for_cohort(dir: &Path) -> Spool {
        Spool::new(dir.join(crate::STATE_DIR).join("spool"))
    }

    /// Where the spool is, for messages to the operator.
    pub fn dir(&self) -> &Path {
        self.local.root()
    }

    /// Keeps `bytes`, on disk or, if the disk refuses them, in memory;
    /// returns their SHA-256 and where they went. Never fails: an answer
    /// always has somewhere to wait.
    pub fn keep(&self, bytes: &[u8]) -> (String, Kept) {
        let sha256 = sha256_hex(bytes);
        self.kept.fetch_add(1, Ordering::SeqCst);
        match self.local.put(&sha256, bytes) {
            Ok(()) => (sha256, Kept::OnDisk),
            Err(e) => {
                lock(&self.memory).insert(sha256.clone(), bytes.to_vec());
                (sha256, Kept::InMemory(e))
            }
        }
    }

    /// How many blobs this process has kept since it started (flushed or
    /// not): above zero means its store has failed at least once.
    pub fn kept_here(&self) -> u64 {
        self.kept.load(Ordering::SeqCst)
    }

    /// How many waiting blobs are held in memory only (the disk refused
    /// them): lost if the process exits before they are flushed.
    pub fn held_in_memory(&self) -> usize {
        lock(&self.memory).len()
    }

    /// The hashes of the blobs waiting, on disk and in memory, in no
    /// particular order. A spool never written to is empty.
    pub fn pending(&self) -> io::Result<Vec<String>> {
        let mut hashes = self.on_disk()?;
        hashes.extend(lock(&self.memory).keys().cloned());
        Ok(hashes)
    }

    fn on_disk(&self) -> io::Result<Vec<String>> {
        let root = self.local.root().join("sha256");
        let folders = match fs::read_dir(&root) {
            Ok(f) => f,
            // Never written to, or not a directory (then nothing is on
            // disk: every keep went to memory).
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut hashes = Vec::new();
        for folder in folders {
            let folder = folder?;
            if !folder.file_type()?.is_dir() {
                continue;
            }
            for entry in fs::read_dir(folder.path())? {
                let name = entry?.file_name().to_string_lossy().into_owned();
                // Temporary files of an interrupted write start with a dot.
                if is_sha256_hex(&name) {
                    hashes.push(name);
                }
            }
        }
        Ok(hashes)
    }

    /// Moves every waiting blob into `store`: each is checked against its
    /// hash, stored, and removed from the spool only once stored. Returns
    /// how many moved; the first failure stops it with the blob's hash in
    /// the error (what moved before stays moved, the rest waits).
    pub fn flush_into(&self, store: &ArtifactStore) -> io::Result<usize> {
        let mut moved = 0;
        let in_memory: Vec<(String, Vec<u8>)> =
            lock(&self.memory).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (sha256, bytes) in in_memory {
            store.put(&bytes).map_err(|e| io::Error::new(e.kind(), format!("storing spooled blob {sha256}: {e}")))?;
            lock(&self.memory).remove(&sha256);
            moved += 1;
        }
        for sha256 in self.on_disk()? {
            let path = self.local.path_of(&sha256);
            // Workers of one cohort directory share its spool: a blob gone
            // between the listing and here was moved by another one.
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(io::Error::new(e.kind(), format!("reading spooled blob {}: {e}", path.display())));
                }
            };
            if sha256_hex(&bytes) != sha256 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("spooled blob {} does not match its hash: left in place", path.display()),
                ));
            }
            let stored = store
                .put(&bytes)
                .map_err(|e| io::Error::new(e.kind(), format!("storing spooled blob {sha256}: {e}")))?;
            debug_assert_eq!(stored, sha256);
            match fs::remove_file(&path) {
                Ok(()) => moved += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("removing stored spool blob {}: {e}", path.display()),
                    ));
                }
            }
        }
        Ok(moved)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A backend that refuses writes until told to accept them.
    #[derive(Debug, Default)]
    struct Flaky {
        works: AtomicBool,
        inner: std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>,
    }

    impl Backend for Flaky {
        fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
            if !self.works.load(Ordering::SeqCst) {
                return Err(io::Error::other("the store is down"));
            }
            self.inner.lock().unwrap().insert(sha256.to_owned(), bytes.to_vec());
            Ok(())
        }
        fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
            Ok(self.inner.lock().unwrap().get(sha256).cloned())
        }
    }

    /// Proves that spooled blobs wait while the store fails, move into it
    /// once it works (checked by hash on the way out), and leave the spool
    /// empty; a failing flush keeps them.
    #[test]
    fn spooled_blobs_move_into_the_store_once_it_works() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        assert!(spool.pending().unwrap().is_empty(), "a spool never written to is empty");
        let (a, _) = spool.keep(b"an output");
        let (b, _) = spool.keep(b"a record");
        assert_eq!(spool.kept_here(), 2);
        let mut pending = spool.pending().unwrap();
        pending.sort();
        let mut want = vec![a.clone(), b.clone()];
        want.sort();
        assert_eq!(pending, want);

        let backend = Arc::new(Flaky::default());
        let store = ArtifactStore::with_backend(backend.clone());
        let err = spool.flush_into(&store).unwrap_err();
        assert!(err.to_string().contains("storing spooled blob"), "{err}");
        assert_eq!(spool.pending().unwrap().len(), 2, "nothing leaves the spool unstored");

        backend.works.store(true, Ordering::SeqCst);
        assert_eq!(spool.flush_into(&store).unwrap(), 2);
        assert!(spool.pending().unwrap().is_empty());
        assert_eq!(store.get(&a).unwrap().as_deref(), Some(&b"an output"[..]));
        assert_eq!(store.get(&b).unwrap().as_deref(), Some(&b"a record"[..]));
    }

    /// Proves that workers sharing one spool can flush it at once: every
    /// blob ends in the store, none fails because another flusher moved it
    /// first.
    #[test]
    fn concurrent_flushes_of_one_spool_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        let hashes: Vec<String> = (0..200).map(|i| spool.keep(format!("answer {i}").as_bytes()).0).collect();
        let store = ArtifactStore::local(dir.path().join("store"));
        let results: Vec<io::Result<usize>> = std::thread::scope(|s| {
            let flushers: Vec<_> =
                (0..4).map(|_| s.spawn(|| Spool::new(dir.path().join("spool")).flush_into(&store))).collect();
            flushers.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            assert!(r.is_ok(), "{r:?}");
        }
        assert!(spool.pending().unwrap().is_empty());
        for sha in &hashes {
            assert!(store.get(sha).unwrap().is_some(), "{sha}");
        }
    }

    /// Proves that a spooled blob whose bytes changed is refused, not stored.
    #[test]
    fn a_corrupt_spooled_blob_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        let (a, _) = spool.keep(b"an output");
        let path = spool.local.path_of(&a);
        fs::write(&path, b"changed").unwrap();
        let store = ArtifactStore::local(dir.path().join("store"));
        assert_eq!(spool.flush_into(&store).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(store.get(&a).unwrap(), None);
    }

    /// Proves that a blob the spool's disk refuses is held in memory, is
    /// pending, and moves into the store like the others.
    #[test]
    fn a_blob_the_disk_refuses_waits_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the spool's directory should be: every write fails.
        let blocked = dir.path().join("spool");
        fs::write(&blocked, b"not a directory").unwrap();
        let spool = Spool::new(&blocked);
        let (a, kept) = spool.keep(b"an output");
        assert!(matches!(kept, Kept::InMemory(_)), "{kept:?}");
        assert_eq!(spool.pending().unwrap(), vec![a.clone()]);
        let store = ArtifactStore::local(dir.path().join("store"));
        assert_eq!(spool.flush_into(&store).unwrap(), 1);
        assert_eq!(store.get(&a).unwrap().as_deref(), Some(&b"an output"[..]));
    }
}
