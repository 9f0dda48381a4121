//! Write-once files and unique temporary names: the local file primitives
//! behind the manifest (`cohort_coordinator::freeze::write_once`), a judging
//! pass's `pass.json` and the per-run files of a pass.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` once: `AlreadyExists` when `path` exists
/// (another writer won), and no temporary file left behind. The file is
/// written in full and synced under a temporary name, made read-only and
/// hard-linked into place: linking fails where renaming would replace.
pub fn write_once_io(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temporary_sibling(path);
    let result = (|| {
        let mut file = fs::File::create_new(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        let mut permissions = file.metadata()?.permissions();
        permissions.set_readonly(true);
        fs::set_permissions(&tmp, permissions)?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    result
}

/// A hidden temporary name beside `path`, unique to this process and this
/// call: two writers of one path, in one process or two, never share a
/// temporary file (nor remove each other's).
pub fn temporary_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_once_refuses_a_second_write_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pass.json");
        write_once_io(&path, b"first").unwrap();
        assert_eq!(write_once_io(&path, b"second").unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"first");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("pass.json")]);
    }

    #[test]
    fn temporary_siblings_differ_per_call() {
        let p = Path::new("/x/pass.json");
        assert_ne!(temporary_sibling(p), temporary_sibling(p));
    }
}
