//! `cohort freeze`: validate a cohort directory and write its manifest,
//! once.
//!
//! - Not frozen yet: validate everything, archive the five files in the
//!   artifact store, and write `manifest.json` write-once (a temporary file
//!   hard-linked into place, which fails rather than overwrites).
//! - Frozen and unchanged: verify and change nothing.
//! - Frozen and changed: refuse, naming every changed file with its old and
//!   new hash, unless `--amend NEW_NAME --reason TEXT` is given. Then a new
//!   cohort `NEW_NAME` is created beside the old one from the changed files,
//!   its manifest logs the amendment, and the old directory's files are put
//!   back as they were frozen (from the artifact store), so the old cohort
//!   verifies again. The old manifest is never touched.
//!
//! Every file is read only when it is a regular file (a symlink must lead
//! to one), and through a cap: a link to `/dev/zero` or a FIFO in a cohort
//! is refused, not read until memory runs out or forever.
//!
//! Architecture Invariant: bad input writes nothing. Every check runs
//! before the first write.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cohort_core::cohort::{CohortFiles, FROZEN_FILES, OPTIONAL_FILES, ValidatedCohort};
use cohort_core::config;
use cohort_core::error::ValidationError;
use cohort_core::hash::sha256_hex;
use cohort_core::manifest::{self, Amendment, FileChange, Integrity, Manifest, QuestionChanges, rfc3339};
use cohort_core::questions;

use cohort_artifacts::store::ArtifactStore;

/// The largest cohort file read; larger ones are refused, not truncated.
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// What to do besides freezing.
#[derive(Debug, Clone)]
pub struct FreezeOptions {
    /// The time to record as `frozen_at` (injected: tests pin it).
    pub now: SystemTime,
    /// Amend a changed, frozen cohort into a new one.
    pub amend: Option<AmendRequest>,
}

/// `--amend NEW_NAME --reason TEXT`.
#[derive(Debug, Clone)]
pub struct AmendRequest {
    pub new_name: String,
    pub reason: String,
}

/// What `freeze` did.
#[derive(Debug)]
pub enum FreezeReport {
    /// The manifest was written.
    Frozen { manifest: Manifest, path: PathBuf },
    /// The directory was already frozen and its files match the manifest.
    Verified { manifest: Manifest, path: PathBuf },
    /// A new cohort was created from the changed files.
    Amended {
        manifest: Manifest,
        /// The new cohort's directory.
        dir: PathBuf,
        /// Whether the old directory's files were put back as frozen.
        restored: bool,
    },
}

/// Why a freeze did not happen. Nothing was written in any of these cases
/// (except where a message says otherwise).
#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    // The io::Error is the `source`: `{:#}` and log chains print it after
    // this message, so the message does not repeat it.
    #[error("cannot read {}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{} is larger than {MAX_FILE_BYTES} bytes: refusing to read it", path.display())]
    TooLarge { path: PathBuf },
    #[error("{} is {kind}, not a regular file: refusing to read it; put the file itself there", path.display())]
    NotRegular {
        path: PathBuf,
        /// What it is instead ("a FIFO", "a device", "a directory").
        kind: &'static str,
    },
    #[error("{}", ChangedMessage { dir, changes })]
    Changed { dir: PathBuf, changes: Vec<FileChange> },
    #[error("{} is not a manifest cohort can trust: {message}", path.display())]
    BadManifest { path: PathBuf, message: String },
    #[error("{} is not frozen yet: run `cohort freeze {}` first", dir.display(), dir.display())]
    NotFrozen { dir: PathBuf },
    #[error("nothing to amend: the files of {} match its manifest", dir.display())]
    NothingToAmend { dir: PathBuf },
    #[error("cannot amend into {}: it already exists; choose another name", path.display())]
    AmendTargetExists { path: PathBuf },
    #[error("--reason must say why the cohort is amended")]
    EmptyReason,
    #[error("{} appeared while freezing (another freeze?); nothing was overwritten", path.display())]
    ManifestRace { path: PathBuf },
}

/// The message of [`FreezeError::Changed`]: each changed file, its old and
/// new hash, and how to go on.
struct ChangedMessage<'a> {
    dir: &'a Path,
    changes: &'a [FileChange],
}

impl fmt::Display for ChangedMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.dir.display();
        writeln!(
            f,
            "{dir} is frozen and its files changed since; the manifest is write-once, so nothing was written:"
        )?;
        for c in self.changes {
            let new = c.new_sha256.as_deref().unwrap_or("(missing)");
            writeln!(f, "  {}: frozen {} now {new}", c.file, c.old_sha256)?;
        }
        write!(
            f,
            "to go on with the changed files, create a new, clearly named cohort:\n  \
             cohort freeze {dir} --amend NEW_NAME --reason \"what changed and why\""
        )
    }
}

/// Freezes, verifies or amends the cohort in `dir` (see the module docs).
pub fn freeze(dir: &Path, options: &FreezeOptions) -> Result<FreezeReport, FreezeError> {
    let files = read_cohort_files(dir)?;
    let manifest_path = dir.join(manifest::FILE);
    let existing = read_manifest(&manifest_path)?;
    match (existing, &options.amend) {
        (None, None) => {
            let cohort = files.validate()?;
            let manifest = Manifest::build(&cohort, options.now, Vec::new());
            write_frozen(dir, &files, &manifest)?;
            Ok(FreezeReport::Frozen { manifest, path: manifest_path })
        }
        (None, Some(_)) => Err(FreezeError::NotFrozen { dir: dir.to_owned() }),
        (Some((manifest, sha256)), None) => {
            verify(dir, &files, &manifest)?;
            check_bytes(&manifest_path, &manifest, &sha256)?;
            Ok(FreezeReport::Verified { manifest, path: manifest_path })
        }
        (Some((old, old_sha256)), Some(request)) => amend(dir, &files, &old, &old_sha256, request, options.now),
    }
}

fn amend(
    dir: &Path,
    files: &CohortFiles,
    old: &Manifest,
    old_manifest_sha256: &str,
    request: &AmendRequest,
    now: SystemTime,
) -> Result<FreezeReport, FreezeError> {
    let changes = old.changes(&files.hashes());
    if changes.is_empty() {
        return Err(FreezeError::NothingToAmend { dir: dir.to_owned() });
    }
    // The files changed, so only the fields that do not derive from them
    // can be checked; an edited old manifest is not amended from.
    old.check_own_fields(false)
        .map_err(|p| FreezeError::BadManifest { path: dir.join(manifest::FILE), message: p.to_string() })?;
    if request.reason.trim().is_empty() {
        return Err(FreezeError::EmptyReason);
    }
    // The new cohort: the changed files, with the new name in cohort.toml.
    let toml = files.get(config::FILE).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or_default();
    let renamed =
        config::rename(toml, &request.new_name).map_err(|p| ValidationError { problems: vec![p.field("name")] })?;
    let mut new_files = files.clone();
    new_files.files.insert(config::FILE.to_owned(), Some(renamed.into_bytes()));
    let cohort = new_files.validate()?;
    let parent = dir.parent().unwrap_or(Path::new("."));
    let new_dir = parent.join(&request.new_name);
    if new_dir.exists() {
        return Err(FreezeError::AmendTargetExists { path: new_dir });
    }

    let old_store = ArtifactStore::for_cohort(dir);
    let question_changes = old_questions(&old_store, old).map(|q| QuestionChanges::between(&q, &cohort.questions));
    let mut amendments = old.amendments.clone();
    amendments.push(Amendment {
        from_cohort: old.cohort.clone(),
        from_manifest_sha256: old_manifest_sha256.to_owned(),
        from_dir: dir.file_name().map(|n| n.to_string_lossy().into_owned()).filter(|n| config::is_plain_name(n)),
        amended_at: rfc3339(now),
        reason: request.reason.clone(),
        changes,
        questions: question_changes,
    });
    let manifest = Manifest::build(&cohort, now, amendments);

    fs::create_dir(&new_dir).map_err(|source| FreezeError::Write { path: new_dir.clone(), source })?;
    for &name in FROZEN_FILES.iter().chain(&OPTIONAL_FILES) {
        // An optional file the cohort does not have stays absent.
        if OPTIONAL_FILES.contains(&name) && new_files.get(name).is_none() {
            continue;
        }
        let path = new_dir.join(name);
        let bytes = new_files.get(name).unwrap_or_default();
        fs::write(&path, bytes).map_err(|source| FreezeError::Write { path, source })?;
    }
    write_frozen(&new_dir, &new_files, &manifest)?;
    let restored = restore_frozen(dir, &old_store, old)?;
    Ok(FreezeReport::Amended { manifest, dir: new_dir, restored })
}

/// The questions as they were frozen, when the artifact store has them.
fn old_questions(store: &ArtifactStore, old: &Manifest) -> Option<Vec<questions::Question>> {
    let bytes = store.get(old.files.get(questions::FILE)?).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// Puts the old directory's files back as frozen, when every one of them
/// is in the artifact store. Returns whether it did.
fn restore_frozen(dir: &Path, store: &ArtifactStore, old: &Manifest) -> Result<bool, FreezeError> {
    let mut originals = Vec::new();
    let optional = OPTIONAL_FILES.iter().filter(|f| old.files.contains_key(**f));
    for &name in FROZEN_FILES.iter().chain(optional) {
        let Some(sha) = old.files.get(name) else {
            return Ok(false);
        };
        match store.get(sha) {
            Ok(Some(bytes)) => originals.push((name, bytes)),
            _ => return Ok(false),
        }
    }
    for (name, bytes) in originals {
        let path = dir.join(name);
        if read_capped(&path).ok().flatten().is_some_and(|now| sha256_hex(&now) == sha256_hex(&bytes)) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        fs::write(&tmp, &bytes)
            .and_then(|()| fs::rename(&tmp, &path))
            .map_err(|source| FreezeError::Write { path: path.clone(), source })?;
    }
    Ok(true)
}

/// Archives the five files (and the optional ones present) and writes the manifest, write-once.
fn write_frozen(dir: &Path, files: &CohortFiles, manifest: &Manifest) -> Result<(), FreezeError> {
    let store = ArtifactStore::for_cohort(dir);
    for &name in FROZEN_FILES.iter().chain(&OPTIONAL_FILES) {
        if let Some(bytes) = files.get(name) {
            store
                .put(bytes)
                .map_err(|source| FreezeError::Write { path: dir.join(cohort_artifacts::STATE_DIR), source })?;
        }
    }
    let bytes = manifest_bytes(manifest)
        .map_err(|e| FreezeError::Write { path: dir.join(manifest::FILE), source: io::Error::other(e) })?;
    write_once(&dir.join(manifest::FILE), &bytes)
}

/// The bytes of `manifest.json` as freezing writes them: pretty JSON and a
/// newline. The one serialisation, so reading can check a file is it.
fn manifest_bytes(manifest: &Manifest) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = serde_json::to_vec_pretty(manifest)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Writes `bytes` to `path` only if `path` does not exist, atomically: the
/// content goes to a temporary file that is then hard-linked into place
/// (`link` fails if the target exists, where `rename` would replace it).
/// The result is made read-only as a reminder that it is never modified.
pub fn write_once(path: &Path, bytes: &[u8]) -> Result<(), FreezeError> {
    match write_once_io(path, bytes) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(FreezeError::ManifestRace { path: path.to_owned() }),
        Err(source) => Err(FreezeError::Write { path: path.to_owned(), source }),
    }
}

/// [`write_once`] at the I/O level (for a judging pass's `pass.json`) and
/// the unique temporary names beside a file: in `cohort-artifacts`, which
/// the worker uses without the coordinator.
pub use cohort_artifacts::files::{temporary_sibling, write_once_io};

/// Reads the five files of `dir` and the optional ones; a missing file is `None` (validation
/// names it), any other read failure is an error.
pub fn read_cohort_files(dir: &Path) -> Result<CohortFiles, FreezeError> {
    if !dir.is_dir() {
        return Err(FreezeError::Read {
            path: dir.to_owned(),
            source: io::Error::new(io::ErrorKind::NotFound, "not a cohort directory"),
        });
    }
    let mut files = BTreeMap::new();
    for &name in FROZEN_FILES.iter().chain(&OPTIONAL_FILES) {
        files.insert(name.to_owned(), read_capped(&dir.join(name))?);
    }
    Ok(CohortFiles { files })
}

/// The bytes of `path`, `None` when it does not exist (a dangling symlink
/// included: validation names the file as missing). Only a regular file is
/// read, and at most [`MAX_FILE_BYTES`] of it: the type is checked before
/// opening (so a FIFO is never opened, which would block) and again on the
/// opened file, and the read stops one byte past the cap, so a file that
/// grows, or a device swapped in, is refused without being read whole.
pub fn read_capped(path: &Path) -> Result<Option<Vec<u8>>, FreezeError> {
    let read_error = |source| FreezeError::Read { path: path.to_owned(), source };
    let metadata = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(read_error(source)),
    };
    regular(path, &metadata)?;
    let file = fs::File::open(path).map_err(read_error)?;
    let opened = file.metadata().map_err(read_error)?;
    regular(path, &opened)?;
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len().min(MAX_FILE_BYTES)).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FreezeError::TooLarge { path: path.to_owned() });
    }
    Ok(Some(bytes))
}

/// Refuses anything but a regular file of at most [`MAX_FILE_BYTES`].
fn regular(path: &Path, metadata: &fs::Metadata) -> Result<(), FreezeError> {
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        return Err(FreezeError::NotRegular { path: path.to_owned(), kind: kind_of(&file_type) });
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(FreezeError::TooLarge { path: path.to_owned() });
    }
    Ok(())
}

/// What a file that is not regular is, in words.
fn kind_of(file_type: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() { "a directory" } else { "not a file" }
}

/// The manifest of a frozen directory and the SHA-256 of its bytes; `None`
/// when the directory is not frozen.
pub fn read_manifest(path: &Path) -> Result<Option<(Manifest, String)>, FreezeError> {
    let Some(bytes) = read_capped(path)? else {
        return Ok(None);
    };
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| FreezeError::BadManifest {
        path: path.to_owned(),
        message: format!("{e}: it is not a manifest as freezing writes it"),
    })?;
    Ok(Some((manifest, sha256_hex(&bytes))))
}

/// Loads a frozen cohort for running: its files must match the manifest
/// and the manifest its files.
pub fn load_frozen(dir: &Path) -> Result<(ValidatedCohort, Manifest, String), FreezeError> {
    let files = read_cohort_files(dir)?;
    let path = dir.join(manifest::FILE);
    let (manifest, sha) = read_manifest(&path)?.ok_or_else(|| FreezeError::NotFrozen { dir: dir.to_owned() })?;
    let cohort = verify(dir, &files, &manifest)?;
    check_bytes(&path, &manifest, &sha)?;
    Ok((cohort, manifest, sha))
}

/// Checks that a verified manifest's bytes (SHA-256 `sha256`) are the ones
/// freezing writes. Everything that names the cohort (the ledger, the run
/// records, the workers' registration) names it by the SHA-256 of the
/// bytes: a re-indented manifest with the same content passes every other
/// check and would then be another cohort to the ledger, so `cohort
/// freeze` and `cohort run` refuse it alike. A legacy manifest (written
/// before `amendments` existed) does not re-serialise the same way and is
/// not checked.
fn check_bytes(path: &Path, manifest: &Manifest, sha256: &str) -> Result<(), FreezeError> {
    let Ok(written) = manifest_bytes(manifest) else { return Ok(()) };
    let written = sha256_hex(&written);
    if manifest.self_sha256.is_none() || written == sha256 {
        return Ok(());
    }
    Err(FreezeError::BadManifest {
        path: path.to_owned(),
        message: format!(
            "its content is the frozen manifest but its bytes are not the ones freezing wrote (re-formatted?): \
             the ledger, the run records and the workers name a cohort by the SHA-256 of those bytes, so this \
             file (SHA-256 {sha256}) would be another cohort to them than the one frozen (SHA-256 {written}); \
             restore the file freezing wrote (for example `git checkout manifest.json`)"
        ),
    })
}

/// Checks a frozen directory: its files have the manifest's hashes, they
/// are valid, and every field of the manifest is the one they derive or
/// otherwise holds (it was not edited), its amendment log included, checked
/// against the predecessor's manifest when that cohort is beside this one.
/// A legacy manifest (no self-hash) passes with [`Integrity::Legacy`],
/// which [`Manifest::is_legacy`] tells callers afterwards.
fn verify(dir: &Path, files: &CohortFiles, manifest: &Manifest) -> Result<ValidatedCohort, FreezeError> {
    let changes = manifest.changes(&files.hashes());
    if !changes.is_empty() {
        return Err(FreezeError::Changed { dir: dir.to_owned(), changes });
    }
    let cohort = files.validate()?;
    let bad =
        |path: PathBuf| move |p: manifest::ManifestProblem| FreezeError::BadManifest { path, message: p.to_string() };
    let _: Integrity = manifest.check_consistency(&cohort).map_err(bad(dir.join(manifest::FILE)))?;
    if let Some((predecessor, sha)) = predecessor(dir, manifest)? {
        manifest.check_predecessor(&predecessor, &sha).map_err(bad(dir.join(manifest::FILE)))?;
    }
    Ok(cohort)
}

/// The manifest the last amendment was made from, with its bytes' hash,
/// when that cohort's directory is beside `dir` (`from_dir`, or for a
/// legacy amendment the cohort's name) and its manifest names that cohort.
/// A predecessor moved elsewhere is not looked for: the chain is then
/// checked within this manifest only.
fn predecessor(dir: &Path, manifest: &Manifest) -> Result<Option<(Manifest, String)>, FreezeError> {
    let Some(last) = manifest.amendments.last() else {
        return Ok(None);
    };
    let name = last.from_dir.as_deref().unwrap_or(&last.from_cohort);
    if !config::is_plain_name(name) {
        return Ok(None);
    }
    let Some(parent) = dir.parent() else {
        return Ok(None);
    };
    let path = parent.join(name).join(manifest::FILE);
    match read_manifest(&path)? {
        Some((m, sha)) if m.cohort == last.from_cohort => Ok(Some((m, sha))),
        _ => Ok(None),
    }
}
