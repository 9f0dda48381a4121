//! Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, moto in
//! tests), through the `object_store` crate: `PREFIX/sha256/ab/abcdef...`,
//! the local backend's layout under the URL's prefix.
//!
//! The [`Backend`] trait is synchronous (the local backend is plain file
//! I/O, and `freeze` calls it outside any runtime), while `object_store` is
//! async and callers are often inside a Tokio runtime. So the backend owns
//! a small runtime of its own and each call waits, on a std channel, for a
//! task spawned there: it never `block_on`s the caller's runtime (which
//! panics inside async code), and the caller's thread waits as it would on
//! a local disk. On drop the runtime is shut down in the background, which
//! is allowed from async code where dropping a runtime is not.
//!
//! Credentials come from the standard AWS sources, in `object_store`'s
//! order (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`,
//! web identity, ECS, instance metadata) and, when no key is in the
//! environment, the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`
//! or `~/.aws/credentials`, profile `AWS_PROFILE` or `default`), which
//! `object_store` does not read itself. Endpoint and region from
//! `AWS_ENDPOINT_URL` and `AWS_REGION`/`AWS_DEFAULT_REGION`; `AWS_ALLOW_HTTP=true`
//! for a plain-HTTP server (a loopback test server). None of it is logged:
//! this type's `Debug` shows the bucket, the prefix and the limits only.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt as _, PutPayload, RetryConfig};

use crate::store::Backend;

/// The largest blob an S3 store takes by default: 128 MiB. Outputs, run
/// records and captured pages are far smaller (a capture is cut at 5 MiB,
/// a manual answer at 64 MiB at most); the cap keeps one put to one
/// request held in memory, and a runaway blob from filling the bucket.
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 128 * 1024 * 1024;

/// How an S3 store talks to its service. Every field has a default
/// ([`S3Config::default`]); the CLI sets `max_blob_bytes` from
/// `--artifacts-max-mib`.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Blobs larger than this are refused before any request
    /// ([`S3Backend::put`]'s error says by how much).
    pub max_blob_bytes: u64,
    /// One HTTP request, connection to last byte.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries of one call (transient errors, 5xx, timeouts) by
    /// `object_store`, with exponential backoff from `backoff_min` up to
    /// `backoff_max`, and none started after `retry_timeout`. Set here, not
    /// left to the crate's default (10 retries over up to 3 minutes), so a
    /// worker whose store is down spools its answers within about a minute.
    pub max_retries: usize,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub retry_timeout: Duration,
}

impl Default for S3Config {
    fn default() -> S3Config {
        S3Config {
            max_blob_bytes: DEFAULT_MAX_BLOB_BYTES,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            max_retries: 4,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            retry_timeout: Duration::from_secs(60),
        }
    }
}

/// Opening an S3 store failed.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// The client could not be built from the configuration (a bad
    /// endpoint or region in the AWS variables).
    #[error("cannot set up the S3 client for bucket {bucket:?} (check AWS_ENDPOINT_URL and AWS_REGION): {source}")]
    Client {
        bucket: String,
        #[source]
        source: object_store::Error,
    },
    /// The AWS credentials file exists but cannot be read.
    #[error("cannot read the AWS credentials file {path}: {source}")]
    CredentialsFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The backend's own runtime could not start.
    #[error("cannot start the S3 store's runtime: {0}")]
    Runtime(#[source] io::Error),
}

/// Blobs in one bucket under one prefix.
pub struct S3Backend {
    /// The client. Not `Debug`-printed: its configuration holds the
    /// credentials.
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
    max_blob_bytes: u64,
    /// Where the requests run (see the module comment). An `Option` only so
    /// `Drop` can take it and shut it down without blocking.
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Backend")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("max_blob_bytes", &self.max_blob_bytes)
            .finish_non_exhaustive()
    }
}

impl S3Backend {
    /// A backend for `bucket` under `prefix`, configured from the AWS
    /// environment variables and the shared credentials file (see the
    /// module comment).
    pub fn from_env(bucket: &str, prefix: &str, config: &S3Config) -> Result<S3Backend, S3Error> {
        let mut builder = AmazonS3Builder::from_env();
        let has_key = std::env::var_os("AWS_ACCESS_KEY_ID").is_some();
        if !has_key && let Some(keys) = credentials_from_file()? {
            builder = builder.with_access_key_id(keys.access_key_id).with_secret_access_key(keys.secret_access_key);
            if let Some(token) = keys.session_token {
                builder = builder.with_token(token);
            }
        }
        S3Backend::with_builder(builder, bucket, prefix, config)
    }

    /// A backend from an `object_store` builder (credentials and endpoint
    /// already set), with this crate's retries, timeouts and cap.
    pub fn with_builder(
        builder: AmazonS3Builder,
        bucket: &str,
        prefix: &str,
        config: &S3Config,
    ) -> Result<S3Backend, S3Error> {
        let secs = |d: Duration| format!("{}ms", d.as_millis());
        let builder = builder
            .with_bucket_name(bucket)
            .with_retry(RetryConfig {
                backoff: BackoffConfig { init_backoff: config.backoff_min, max_backoff: config.backoff_max, base: 2.0 },
                max_retries: config.max_retries,
                retry_timeout: config.retry_timeout,
            })
            // Set key by key, not with `with_client_options`, which would
            // replace the client options the environment set
            // (`AWS_ALLOW_HTTP`).
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), secs(config.request_timeout))
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout), secs(config.connect_timeout));
        let store = builder.build().map_err(|source| S3Error::Client { bucket: bucket.to_owned(), source })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cohort-s3")
            .enable_all()
            .build()
            .map_err(S3Error::Runtime)?;
        Ok(S3Backend {
            store: Arc::new(store),
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            max_blob_bytes: config.max_blob_bytes,
            runtime: Some(runtime),
        })
    }

    /// The object's key: `PREFIX/sha256/ab/abcdef...`.
    fn path_of(&self, sha256: &str) -> ObjectPath {
        let parts = self.prefix.split('/').filter(|p| !p.is_empty()).chain(["sha256", &sha256[..2], sha256]);
        ObjectPath::from_iter(parts)
    }

    /// Runs `request` on this backend's runtime and waits for it on the
    /// caller's thread (see the module comment). The task is owned by the
    /// runtime: it ends with its request, or when the runtime is shut
    /// down with the backend.
    fn wait<T: Send + 'static>(&self, request: impl Future<Output = io::Result<T>> + Send + 'static) -> io::Result<T> {
        let runtime = self.runtime.as_ref().ok_or_else(|| io::Error::other("the S3 store is shut down"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(request.await);
        });
        rx.recv().map_err(|_| io::Error::other("the S3 store's request was dropped before it finished"))?
    }
}

impl Drop for S3Backend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Backend for S3Backend {
    /// Refuses a blob over the cap before any request. Otherwise asks
    /// whether the blob is there (content addressing: same name, same
    /// bytes, so nothing to send) and PUTs it when not. An S3 PUT is
    /// atomic for readers (a GET sees no object or the whole object), and
    /// two writers racing past the HEAD write identical bytes, so a plain
    /// overwrite is as safe as a conditional create and works on every
    /// S3-compatible server, including those without `If-None-Match`.
    fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
        let size = bytes.len() as u64;
        if size > self.max_blob_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "artifact {sha256} has {size} bytes, over the S3 store's upload cap of {} bytes (raise it with \
                     --artifacts-max-mib)",
                    self.max_blob_bytes
                ),
            ));
        }
        let store = Arc::clone(&self.store);
        let path = self.path_of(sha256);
        let payload = PutPayload::from(bytes.to_vec());
        let bucket = self.bucket.clone();
        self.wait(async move {
            match store.head(&path).await {
                Ok(_) => return Ok(()),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error(&bucket, &path, "check", e)),
            }
            store.put(&path, payload).await.map(|_| ()).map_err(|e| io_error(&bucket, &path, "store", e))
        })
    }

    fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        let store = Arc::clone(&self.store);
        let path = self.path_of(sha256);
        let bucket = self.bucket.clone();
        self.wait(async move {
            let got = match store.get(&path).await {
                Ok(got) => got,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(io_error(&bucket, &path, "read", e)),
            };
            let bytes = got.bytes().await.map_err(|e| io_error(&bucket, &path, "read", e))?;
            Ok(Some(bytes.to_vec()))
        })
    }
}

/// An `object_store` error as the `io::Error` the [`Backend`] trait speaks,
/// naming the object. The crate's errors carry paths and HTTP statuses,
/// never the request's signature or keys.
fn io_error(bucket: &str, path: &ObjectPath, what: &str, e: object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            io::ErrorKind::PermissionDenied
        }
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("cannot {what} s3://{bucket}/{path}: {e}"))
}

// === credentials file ===

/// Keys of one profile of the AWS shared credentials file.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FileKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// The keys of profile `AWS_PROFILE` (or `default`) in
/// `AWS_SHARED_CREDENTIALS_FILE` (or `~/.aws/credentials`); `None` when
/// there is no such file or profile.
fn credentials_from_file() -> Result<Option<FileKeys>, S3Error> {
    let path = match std::env::var_os("AWS_SHARED_CREDENTIALS_FILE") {
        Some(path) => PathBuf::from(path),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".aws").join("credentials"),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(S3Error::CredentialsFile { path, source }),
    };
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_owned());
    Ok(profile_keys(&text, &profile))
}

/// The keys of `[profile]` in the INI text of a credentials file.
pub(crate) fn profile_keys(text: &str, profile: &str) -> Option<FileKeys> {
    let (mut in_profile, mut id, mut secret, mut token) = (false, None, None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = name.trim() == profile;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if !in_profile {
            continue;
        }
        let value = Some(value.trim().to_owned());
        match key.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = value,
            "aws_secret_access_key" => secret = value,
            "aws_session_token" => token = value,
            _ => {}
        }
    }
    Some(FileKeys { access_key_id: id?, secret_access_key: secret?, session_token: token })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI-test-secret-never-printed";

    fn backend(config: &S3Config) -> S3Backend {
        let builder = AmazonS3Builder::new()
            .with_region("us-east-1")
            .with_endpoint("http://127.0.0.1:9")
            .with_allow_http(true)
            .with_access_key_id("AKIDTESTKEY")
            .with_secret_access_key(SECRET);
        S3Backend::with_builder(builder, "bucket", "/some/prefix/", config).unwrap()
    }

    #[test]
    fn keys_follow_the_local_layout_under_the_prefix() {
        let b = backend(&S3Config::default());
        let sha = "ab".repeat(32);
        assert_eq!(b.path_of(&sha).as_ref(), format!("some/prefix/sha256/ab/{sha}"));
        let bare = S3Backend::with_builder(AmazonS3Builder::new().with_region("r"), "bucket", "", &S3Config::default())
            .unwrap();
        assert_eq!(bare.path_of(&sha).as_ref(), format!("sha256/ab/{sha}"));
    }

    /// Proves the cap refuses before any request (the endpoint is a closed
    /// port: a request would fail differently) and says how to raise it,
    /// and that a blob at the cap is not refused by it.
    #[test]
    fn blobs_over_the_cap_are_refused_with_the_sizes() {
        let config = S3Config { max_blob_bytes: 10, max_retries: 0, ..S3Config::default() };
        let b = backend(&config);
        let e = b.put(&"cd".repeat(32), &[0u8; 11]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let said = e.to_string();
        assert!(said.contains("11 bytes") && said.contains("cap of 10 bytes") && said.contains("--artifacts-max-mib"));
        let at_cap = b.put(&"cd".repeat(32), &[0u8; 10]).unwrap_err();
        assert_ne!(at_cap.kind(), io::ErrorKind::InvalidInput, "{at_cap}");
    }

    /// Proves a call from inside a Tokio runtime (current-thread, as the
    /// CLI's report runtime may be) neither panics nor deadlocks, and that
    /// dropping the backend there is allowed.
    #[test]
    fn calls_from_async_code_do_not_block_the_callers_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let config = S3Config { max_retries: 0, ..S3Config::default() };
            let b = backend(&config);
            assert!(b.get(&"ef".repeat(32)).is_err(), "a closed port is an error, not a panic");
            drop(b);
        });
    }

    #[test]
    fn debug_output_hides_the_credentials() {
        let store = crate::ArtifactStore::with_backend(Arc::new(backend(&S3Config::default())));
        let shown = format!("{store:?} {store:#?}");
        assert!(!shown.contains(SECRET) && !shown.contains("AKIDTESTKEY"), "{shown}");
        assert!(shown.contains("bucket") && shown.contains("some/prefix"), "{shown}");
    }

    #[test]
    fn the_credentials_file_is_read_by_profile() {
        let text = "# comment\n[default]\naws_access_key_id = AKID1\naws_secret_access_key=SECRET1\n\n\
                    [ci]\naws_access_key_id = AKID2\naws_secret_access_key = SECRET2\naws_session_token = TOKEN2\n\
                    [half]\naws_access_key_id = AKID3\n";
        let default = profile_keys(text, "default").unwrap();
        assert_eq!((default.access_key_id.as_str(), default.secret_access_key.as_str()), ("AKID1", "SECRET1"));
        assert_eq!(default.session_token, None);
        let ci = profile_keys(text, "ci").unwrap();
        assert_eq!((ci.access_key_id.as_str(), ci.session_token.as_deref()), ("AKID2", Some("TOKEN2")));
        assert!(profile_keys(text, "half").is_none(), "a profile without a secret gives no keys");
        assert!(profile_keys(text, "absent").is_none());
    }
}
