//! The content-addressed artifact store: bytes are stored under their
//! SHA-256, so a hash in the ledger or a manifest names exactly one content,
//! and storing the same bytes twice stores them once.
//!
//! Layout of the local store: `ROOT/sha256/ab/abcdef...` (the first two hex
//! digits fan the files out over 256 folders). Writes go to a temporary
//! file and are renamed into place, so a reader never sees half a blob.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cohort_core::hash::{is_sha256_hex, sha256_hex};

/// A content-addressed store in a local directory.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
}

impl ArtifactStore {
    /// A store rooted at `root` (created on first write).
    pub fn local(root: impl Into<PathBuf>) -> ArtifactStore {
        ArtifactStore { root: root.into() }
    }

    /// The store of a cohort directory: `DIR/.cohort/artifacts`.
    pub fn for_cohort(dir: &Path) -> ArtifactStore {
        ArtifactStore::local(dir.join(crate::STATE_DIR).join("artifacts"))
    }

    fn path_of(&self, sha256: &str) -> PathBuf {
        self.root.join("sha256").join(&sha256[..2]).join(sha256)
    }

    /// Stores `bytes`; returns their SHA-256 (lowercase hex).
    pub fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let sha256 = sha256_hex(bytes);
        let path = self.path_of(&sha256);
        if path.exists() {
            return Ok(sha256);
        }
        let dir = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(dir)?;
        // Unique per write, not only per process: two tasks of one worker
        // storing the same bytes at once (two identical refusals) must not
        // share a temporary file, or one rename finds it gone.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let n = WRITES.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{sha256}.{}.{n}.tmp", std::process::id()));
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        Ok(sha256)
    }

    /// The bytes stored under `sha256`, checked against it; `None` when
    /// absent. A blob whose content no longer matches its name is an error.
    pub fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        if !is_sha256_hex(sha256) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a sha256: {sha256:?}")));
        }
        match fs::read(self.path_of(sha256)) {
            Ok(bytes) if sha256_hex(&bytes) == sha256 => Ok(Some(bytes)),
            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("artifact {sha256} is corrupt"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        fs::write(store.path_of(&a), b"tampered").unwrap();
        assert_eq!(store.get(&a).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
