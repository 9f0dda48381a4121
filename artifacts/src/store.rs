//! The content-addressed artifact store: bytes are stored under their
//! SHA-256, so a hash in the ledger or a manifest names exactly one content,
//! and storing the same bytes twice stores them once.
//!
//! [`ArtifactStore`] owns the content-addressing rule (hash on put, check
//! on get) once; a [`Backend`] only keeps bytes under a name. Layout of the
//! local backend: `ROOT/sha256/ab/abcdef...` (the first two hex digits fan
//! the files out over 256 folders). Writes go to a temporary file and are
//! renamed into place, so a reader never sees half a blob.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use cohort_core::hash::{is_sha256_hex, sha256_hex};

/// Where blobs are kept. The store calls it only with a valid SHA-256 that
/// is the hash of the bytes, and checks what `get` returns, so a backend
/// neither hashes nor verifies.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Keeps `bytes` under `sha256`, atomically for readers: a concurrent
    /// `get` sees no blob or the whole blob. Storing a blob that exists
    /// succeeds (the bytes are the same, the name is their hash).
    fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()>;

    /// The bytes kept under `sha256`; `None` when absent.
    fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>>;

    /// Removes the temporary files of writes that never finished (a writer
    /// killed between its write and its rename) last modified more than
    /// `min_age` ago; returns how many. A backend without such files has
    /// nothing to do.
    fn remove_stale_temporaries(&self, _min_age: std::time::Duration) -> io::Result<usize> {
        Ok(0)
    }
}

/// A content-addressed store over a [`Backend`]; cheap to clone (clones
/// share the backend).
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    backend: Arc<dyn Backend>,
}

impl ArtifactStore {
    /// A store in the local directory `root` (created on first write).
    pub fn local(root: impl Into<PathBuf>) -> ArtifactStore {
        ArtifactStore::with_backend(Arc::new(LocalBackend::new(root)))
    }

    /// The store of a cohort directory: `DIR/.cohort/artifacts`.
    pub fn for_cohort(dir: &Path) -> ArtifactStore {
        ArtifactStore::local(dir.join(crate::STATE_DIR).join("artifacts"))
    }

    /// A store over any backend (another storage service, or a test double
    /// that fails).
    pub fn with_backend(backend: Arc<dyn Backend>) -> ArtifactStore {
        ArtifactStore { backend }
    }

    /// Stores `bytes`; returns their SHA-256 (lowercase hex). Atomic for
    /// readers (see [`Backend::put`]).
    pub fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let sha256 = sha256_hex(bytes);
        self.backend.put(&sha256, bytes)?;
        Ok(sha256)
    }

    /// Removes what killed writers left behind (see
    /// [`Backend::remove_stale_temporaries`]): called when a role starts.
    /// `min_age` keeps the files of writes in flight elsewhere (another
    /// worker sharing the store) out of reach.
    pub fn remove_stale_temporaries(&self, min_age: std::time::Duration) -> io::Result<usize> {
        self.backend.remove_stale_temporaries(min_age)
    }

    /// The bytes stored under `sha256`, checked against it; `None` when
    /// absent. A blob whose content no longer matches its name is an error.
    pub fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        if !is_sha256_hex(sha256) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a sha256: {sha256:?}")));
        }
        match self.backend.get(sha256)? {
            Some(bytes) if sha256_hex(&bytes) == sha256 => Ok(Some(bytes)),
            Some(_) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("artifact {sha256} is corrupt"))),
            None => Ok(None),
        }
    }
}

// === impl LocalBackend ===

/// Blobs as files in a local directory, `ROOT/sha256/ab/abcdef...`.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: PathBuf,
}

impl LocalBackend {
    /// A backend rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> LocalBackend {
        LocalBackend { root: root.into() }
    }

    /// The directory the blobs are kept in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn path_of(&self, sha256: &str) -> PathBuf {
        self.root.join("sha256").join(&sha256[..2]).join(sha256)
    }
}

impl Backend for LocalBackend {
    /// The bytes go to a temporary file of this call alone, are synced, and
    /// the file is renamed onto the blob's name, so a reader sees no blob
    /// or the whole blob, never part of one. Two puts of the same bytes at
    /// once (two tasks of one worker storing identical refusals) both
    /// succeed: each writes its own temporary file, and the second rename
    /// replaces the first blob with identical bytes (the name is their
    /// hash), which a reader cannot tell apart.
    fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.path_of(sha256);
        if path.is_file() {
            return Ok(());
        }
        let dir = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(dir)?;
        let tmp = dir.join(temporary_name(sha256));
        let written = (|| {
            let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        // The rename is durable once the folder is synced; a failure here
        // leaves a complete blob in place, so it is not an error of the put.
        if let Ok(folder) = fs::File::open(dir) {
            let _ = folder.sync_all();
        }
        Ok(())
    }

    /// The `.<sha256>.*.tmp` files of [`temporary_name`] in the fan-out
    /// folders, older than `min_age`.
    fn remove_stale_temporaries(&self, min_age: std::time::Duration) -> io::Result<usize> {
        let folders = match fs::read_dir(self.root.join("sha256")) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for folder in folders {
            let folder = folder?.path();
            if !folder.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&folder)? {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if !(name.starts_with('.') && name.ends_with(".tmp")) {
                    continue;
                }
                let age = entry.metadata()?.modified().ok().and_then(|m| now.duration_since(m).ok());
                if age.is_some_and(|a| a >= min_age) {
                    match fs::remove_file(entry.path()) {
                        Ok(()) => removed += 1,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(removed)
    }

    fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path_of(sha256)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A hidden temporary name for one write of the blob `sha256`, unique to
/// this call: the process id tells processes apart, the counter the calls of
/// one process, and the time of the call processes that reuse an id (a
/// restarted worker whose crashed predecessor left a temporary file with
/// the same pid and counter behind). `create_new` refuses a name that
/// exists all the same, so two writers never share a file.
fn temporary_name(sha256: &str) -> String {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!(".{sha256}.{}.{n}.{nanos}.tmp", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the start-up clean-up removes the temporary files a killed
    /// writer left (older than the bound), and keeps a fresh one (a write
    /// in flight elsewhere), the blobs and other files.
    #[test]
    fn stale_temporaries_are_removed_and_fresh_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::local(dir.path());
        let sha = store.put(b"a blob").unwrap();
        let folder = dir.path().join("sha256").join(&sha[..2]);
        let old = folder.join(format!(".{sha}.4242.0.1.tmp"));
        let fresh = folder.join(format!(".{sha}.4243.0.2.tmp"));
        let other = folder.join("notes.txt");
        for path in [&old, &fresh, &other] {
            fs::write(path, b"partial").unwrap();
        }
        let hour_ago = SystemTime::now() - std::time::Duration::from_secs(3_600);
        for path in [&old, &other] {
            fs::File::options().write(true).open(path).unwrap().set_modified(hour_ago).unwrap();
        }
        let removed = store.remove_stale_temporaries(std::time::Duration::from_secs(600)).unwrap();
        assert_eq!(removed, 1);
        assert!(!old.exists() && fresh.exists() && other.exists());
        assert_eq!(store.get(&sha).unwrap().as_deref(), Some(&b"a blob"[..]));
        let empty = ArtifactStore::local(dir.path().join("none"));
        assert_eq!(empty.remove_stale_temporaries(std::time::Duration::ZERO).unwrap(), 0);
    }

    #[test]
    fn put_then_get_round_trips_and_dedups() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::local(dir.path());
        let a = store.put(b"hello").unwrap();
        assert_eq!(store.put(b"hello").unwrap(), a);
        assert_eq!(store.get(&a).unwrap().as_deref(), Some(&b"hello"[..]));
        assert_eq!(store.get(&sha256_hex(b"absent")).unwrap(), None);
        assert!(store.get("../../etc/passwd").is_err());
    }

    /// Proves that threads storing the same bytes at once all succeed (they
    /// once shared one temporary file name per process, and a rename found
    /// it gone: a spurious outage for the run).
    #[test]
    fn concurrent_identical_puts_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::local(dir.path());
        for round in 0..20 {
            let bytes = format!("the same refusal, round {round}").repeat(2000);
            let results: Vec<io::Result<String>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8).map(|_| s.spawn(|| store.put(bytes.as_bytes()))).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for r in results {
                assert_eq!(r.unwrap(), sha256_hex(bytes.as_bytes()));
            }
        }
    }

    #[test]
    fn corrupt_blobs_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::local(dir.path());
        let a = store.put(b"hello").unwrap();
        fs::write(LocalBackend::new(dir.path()).path_of(&a), b"tampered").unwrap();
        assert_eq!(store.get(&a).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
