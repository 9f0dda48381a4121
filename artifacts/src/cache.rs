//! A local read cache in front of a remote backend: a blob read once from
//! the bucket is kept in a local directory (the local backend's layout) and
//! read from there afterwards. Content addressing makes this simple: a
//! blob never changes under its name, so the cache is never stale and
//! needs no invalidation; only bytes whose hash matches their name are
//! kept, so a bad copy in the cache is passed over and replaced.
//!
//! Puts go to the remote only: a worker's disk does not fill with every
//! answer it stores.

use std::io;

use cohort_core::hash::sha256_hex;

use crate::store::{Backend, LocalBackend};

/// `remote`, with reads cached in `cache`.
#[derive(Debug)]
pub struct CachedBackend<B> {
    remote: B,
    cache: LocalBackend,
}

impl<B: Backend> CachedBackend<B> {
    pub fn new(remote: B, cache: LocalBackend) -> CachedBackend<B> {
        CachedBackend { remote, cache }
    }
}

impl<B: Backend> Backend for CachedBackend<B> {
    fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
        self.remote.put(sha256, bytes)
    }

    /// From the cache when it holds the right bytes; else from the remote,
    /// kept in the cache when they match their name. A cache that cannot
    /// be read or written is passed over (the remote is the store).
    fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        if let Ok(Some(bytes)) = self.cache.get(sha256) {
            if sha256_hex(&bytes) == sha256 {
                return Ok(Some(bytes));
            }
            // The local backend keeps a blob that exists, so a bad copy
            // goes before the good one can take its place.
            let _ = std::fs::remove_file(self.cache.path_of(sha256));
        }
        let got = self.remote.get(sha256)?;
        if let Some(bytes) = &got
            && sha256_hex(bytes) == sha256
            && let Err(e) = self.cache.put(sha256, bytes)
        {
            tracing::debug!(error = %e, cache = %self.cache.root().display(), "cannot keep an artifact in the read cache");
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::ArtifactStore;

    /// A remote that counts its reads.
    #[derive(Debug)]
    struct Counting {
        inner: LocalBackend,
        gets: AtomicUsize,
    }

    impl Backend for &Counting {
        fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
            self.inner.put(sha256, bytes)
        }
        fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            self.inner.get(sha256)
        }
    }

    /// Proves a blob is fetched from the remote once, then from the cache,
    /// and that a tampered cache copy is passed over and replaced.
    #[test]
    fn reads_are_cached_and_a_bad_copy_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let remote = Counting { inner: LocalBackend::new(dir.path().join("remote")), gets: AtomicUsize::new(0) };
        let sha = ArtifactStore::local(dir.path().join("remote")).put(b"record").unwrap();
        let cache = LocalBackend::new(dir.path().join("cache"));
        let cached = CachedBackend::new(&remote, cache.clone());
        assert!(cache.get(&sha).unwrap().is_none(), "a put does not fill the cache");
        for _ in 0..3 {
            assert_eq!(cached.get(&sha).unwrap().as_deref(), Some(&b"record"[..]));
        }
        assert_eq!(remote.gets.load(Ordering::SeqCst), 1);
        std::fs::write(cache.path_of(&sha), b"tampered").unwrap();
        assert_eq!(cached.get(&sha).unwrap().as_deref(), Some(&b"record"[..]));
        assert_eq!(remote.gets.load(Ordering::SeqCst), 2);
        assert_eq!(cache.get(&sha).unwrap().as_deref(), Some(&b"record"[..]), "the bad copy is replaced");
        assert_eq!(cached.get(&"00".repeat(32)).unwrap(), None);
    }
}
