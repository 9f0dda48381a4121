//! How cohort's components authenticate each other (SPEC section 11).
//!
//! - **A cluster token**: one bearer token the operator gives the
//!   coordinator and every worker (from a file, or the environment). The
//!   coordinator's gRPC service refuses a call without it, or with another,
//!   as `Unauthenticated` ([`RequireToken`]); workers send it on every call
//!   ([`SendToken`]). The token is compared by its SHA-256, and never
//!   logged, printed or put in an error: its `Debug` is redacted.
//! - **Mutual TLS**: the coordinator presents a certificate and, given a
//!   client CA, requires one from every worker ([`ServerTls`]); workers
//!   check the coordinator's against a CA and present their own
//!   ([`ClientTls`]). rustls on aws-lc-rs, the stack reqwest already uses.
//!
//! The two can be combined. The judge proxy authenticates callers by their
//! team key (its own config), which also decides whose quota a call spends.
//! `grpc.health.v1` stays open on the coordinator's port: a probe carries
//! no token.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{Request, Status};

/// The environment variable a role reads its cluster token from when no
/// token file is given.
pub const TOKEN_ENV: &str = "COHORT_CLUSTER_TOKEN";

/// The most bytes read from a token or PEM file (a token is short; a
/// certificate chain a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What went wrong setting authentication up. Names the file or variable,
/// never the secret.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read {what} from {path}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} in {origin} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { what: &'static str, origin: String },
    #[error("the cluster token in {origin} is empty")]
    EmptyToken { origin: String },
    #[error(
        "the cluster token in {origin} has characters a header cannot carry: use printable ASCII without spaces (for example `openssl rand -hex 32`)"
    )]
    BadToken { origin: String },
    #[error("{0}")]
    Tls(String),
}

/// Reads a small file whole, refusing a large one before reading it.
fn read_small(what: &'static str, path: &Path) -> Result<Vec<u8>, AuthError> {
    let read = |source| AuthError::Read { what, path: path.to_owned(), source };
    let meta = std::fs::metadata(path).map_err(read)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(AuthError::TooLarge { what, origin: path.display().to_string() });
    }
    std::fs::read(path).map_err(read)
}

// === impl ClusterToken ===

/// The cluster's bearer token, as the `authorization` header carries it.
#[derive(Clone)]
pub struct ClusterToken {
    /// `Bearer <token>`, marked sensitive (hyper leaves it out of its own
    /// debug output and HPACK tables).
    header: AsciiMetadataValue,
    /// SHA-256 of the header: what a presented header is compared with.
    digest: [u8; 32],
}

impl fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterToken(<redacted>)")
    }
}

impl ClusterToken {
    /// The token `value` (surrounding whitespace trimmed) read from
    /// `origin` (a file name or a variable, for messages).
    pub fn from_value(value: &str, origin: &str) -> Result<ClusterToken, AuthError> {
        let token = value.trim();
        if token.is_empty() {
            return Err(AuthError::EmptyToken { origin: origin.to_owned() });
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AuthError::BadToken { origin: origin.to_owned() });
        }
        let header_text = format!("Bearer {token}");
        let mut header = MetadataValue::try_from(header_text.as_str())
            .map_err(|_| AuthError::BadToken { origin: origin.to_owned() })?;
        header.set_sensitive(true);
        Ok(ClusterToken { header, digest: Sha256::digest(header_text.as_bytes()).into() })
    }

    /// The token in the file `path` (one line; a trailing newline is fine).
    pub fn from_file(path: &Path) -> Result<ClusterToken, AuthError> {
        let bytes = read_small("the cluster token", path)?;
        let origin = path.display().to_string();
        let text = String::from_utf8(bytes).map_err(|_| AuthError::BadToken { origin: origin.clone() })?;
        ClusterToken::from_value(&text, &origin)
    }

    /// The token from `file` when given, else from [`TOKEN_ENV`] when set;
    /// `None` when neither is (no token: calls are not checked).
    pub fn load(file: Option<&Path>) -> Result<Option<ClusterToken>, AuthError> {
        if let Some(path) = file {
            return ClusterToken::from_file(path).map(Some);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(v) => ClusterToken::from_value(&v, TOKEN_ENV).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(AuthError::BadToken { origin: TOKEN_ENV.to_owned() }),
        }
    }

    /// Whether a presented `authorization` header is this token.
    fn matches(&self, presented: &[u8]) -> bool {
        // Comparing digests: the time taken says nothing about the token.
        <[u8; 32]>::from(Sha256::digest(presented)) == self.digest
    }
}

// === impl RequireToken ===

/// The server side: a tonic interceptor that lets through only calls that
/// carry the cluster token (every call, when a token is set; nothing is
/// checked without one). A refusal is logged with the caller's address,
/// never with what it sent.
#[derive(Debug, Clone, Default)]
pub struct RequireToken {
    token: Option<ClusterToken>,
}

impl RequireToken {
    pub fn new(token: Option<ClusterToken>) -> RequireToken {
        RequireToken { token }
    }

    /// Whether calls are checked.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }
}

impl Interceptor for RequireToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else { return Ok(request) };
        let peer = request.remote_addr().map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        match request.metadata().get("authorization") {
            Some(presented) if token.matches(presented.as_bytes()) => Ok(request),
            Some(_) => {
                tracing::warn!(%peer, "refused a call with a wrong cluster token");
                Err(Status::unauthenticated("wrong cluster token: give the worker the coordinator's token"))
            }
            None => {
                tracing::warn!(%peer, "refused a call without the cluster token");
                Err(Status::unauthenticated(format!(
                    "this coordinator requires the cluster token: give the worker --token-file FILE or {TOKEN_ENV}"
                )))
            }
        }
    }
}

// === impl SendToken ===

/// The client side: adds the cluster token (when there is one) to every
/// call.
#[derive(Debug, Clone, Default)]
pub struct SendToken {
    token: Option<ClusterToken>,
}

impl SendToken {
    pub fn new(token: Option<ClusterToken>) -> SendToken {
        SendToken { token }
    }
}

impl Interceptor for SendToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.header.clone());
        }
        Ok(request)
    }
}

// === impl ServerTls ===

/// The coordinator's TLS: its certificate chain and key, and the CA whose
/// certificates it requires from workers (mutual TLS) when given. Kept as
/// PEM; [`ServerTls::incoming`] does the handshakes itself (rustls through
/// tokio-rustls, as tonic would), so that a refused one is logged with the
/// peer's address: tonic's own TLS says nothing above DEBUG, and nothing
/// of who it was.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    mutual: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls").field("mutual", &self.mutual).finish_non_exhaustive()
    }
}

/// How long a connection may take to finish its TLS handshake before it is
/// dropped (and logged as refused).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Refused handshakes logged at WARN per [`REFUSAL_WINDOW`]; the rest of a
/// burst (a port scanner, a misconfigured fleet) are counted and said in
/// the next window's first line.
const REFUSALS_LOGGED_PER_WINDOW: u32 = 5;
const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

impl ServerTls {
    /// From PEM files: `cert` (the chain), `key`, and `client_ca`. The
    /// files are checked here, so a bad one stops the coordinator before it
    /// listens.
    pub fn from_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerTls, AuthError> {
        let cert = read_small("the TLS certificate", cert)?;
        let key = read_small("the TLS key", key)?;
        let client_ca = client_ca.map(|p| read_small("the client CA", p)).transpose()?;
        let config = Arc::new(server_config(&cert, &key, client_ca.as_deref())?);
        Ok(ServerTls { config, mutual: client_ca.is_some() })
    }

    /// The coordinator's TLS from its flags: none, or its certificate and
    /// key with the workers' CA when given; a CA without the coordinator's
    /// own certificate is refused (TLS first, then mutual).
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<ServerTls>, AuthError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(ServerTls::from_files(cert, key, client_ca)?)),
            _ if client_ca.is_some() => Err(AuthError::Tls(
                "--tls-ca on the coordinator needs its own --tls-cert and --tls-key (TLS first, then mutual)"
                    .to_owned(),
            )),
            _ => Ok(None),
        }
    }

    /// Whether a client certificate is required.
    pub fn mutual(&self) -> bool {
        self.mutual
    }

    /// The connections of `listener` that completed the TLS handshake, for
    /// a tonic server built without its own TLS (`serve_with_incoming`).
    /// Each handshake runs in a task of its own (a slow client holds up no
    /// other) within [`HANDSHAKE_TIMEOUT`]; one that fails (no client
    /// certificate, one from another CA, plain HTTP on the TLS port, a
    /// timeout) is dropped and logged at WARN with the peer's address and
    /// rustls's reason, at most [`REFUSALS_LOGGED_PER_WINDOW`] lines per
    /// [`REFUSAL_WINDOW`]. The accepting task ends when the stream is
    /// dropped.
    pub fn incoming(
        &self,
        listener: tokio::net::TcpListener,
    ) -> tokio::sync::mpsc::Receiver<std::io::Result<TlsConnection>> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config));
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            let refusals = Arc::new(std::sync::Mutex::new(RefusalLog::default()));
            loop {
                let (tcp, peer) = tokio::select! {
                    () = tx.closed() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of file descriptors and the like: said,
                            // and the loop goes on after a breath.
                            tracing::warn!(error = %e, "cannot accept a connection");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                // An RPC server answers in small writes: without
                // TCP_NODELAY, Nagle's algorithm holds one back until the
                // peer acknowledges the one before (the coordinator's plain path
                // sets it too: `cohort_coordinator::service`, issue 24).
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx, refusals) = (acceptor.clone(), tx.clone(), Arc::clone(&refusals));
                tokio::spawn(async move {
                    let reason = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send(Ok(tls)).await;
                            return;
                        }
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => format!("no handshake within {} s", HANDSHAKE_TIMEOUT.as_secs()),
                    };
                    let said = refusals.lock().map(|mut log| log.note(std::time::Instant::now()));
                    if let Ok(Some(suppressed)) = said {
                        tracing::warn!(
                            %peer,
                            %reason,
                            suppressed_before = suppressed,
                            "refused a TLS handshake (mutual TLS needs a client certificate from --tls-ca; a plain \
                             http:// worker URL on this port is refused too)"
                        );
                    }
                });
            }
        });
        rx
    }
}

/// The server's rustls configuration: its chain and key, HTTP/2 by
/// ALPN (gRPC), and with a client CA a certificate from it required
/// (not optional).
fn server_config(cert: &[u8], key: &[u8], client_ca: Option<&[u8]>) -> Result<rustls::ServerConfig, AuthError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn fmt::Display| AuthError::Tls(format!("{what}: {e}"));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots
                    .add(cert.map_err(|e| bad("--tls-ca is not a PEM certificate", &e))?)
                    .map_err(|e| bad("--tls-ca", &e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad("--tls-ca", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("--tls-cert is not a PEM certificate", &e))?;
    if chain.is_empty() {
        return Err(AuthError::Tls("--tls-cert holds no PEM certificate".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("--tls-key is not a PEM key", &e))?;
    let mut config = builder.with_single_cert(chain, key).map_err(|e| bad("--tls-cert with --tls-key", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A connection [`ServerTls::incoming`] yields.
pub type TlsConnection = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Which refused handshakes are logged: the first
/// [`REFUSALS_LOGGED_PER_WINDOW`] of each [`REFUSAL_WINDOW`].
#[derive(Debug, Default)]
struct RefusalLog {
    window: Option<std::time::Instant>,
    logged: u32,
    suppressed: u64,
}

impl RefusalLog {
    /// One refusal at `now`: `Some(n)` to log it, with `n` refusals not
    /// logged since the last line; `None` to count it silently.
    fn note(&mut self, now: std::time::Instant) -> Option<u64> {
        if self.window.is_none_or(|start| now.duration_since(start) >= REFUSAL_WINDOW) {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged < REFUSALS_LOGGED_PER_WINDOW {
            self.logged += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

// === impl ClientTls ===

/// A worker's TLS: the CA the coordinator's certificate must chain to, and
/// the worker's own certificate and key for mutual TLS. Kept as PEM: tonic
/// builds the channel's configuration from it, and [`ClientTls::probe`]
/// its own rustls one.
#[derive(Clone)]
pub struct ClientTls {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls").field("client_certificate", &self.identity.is_some()).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// From PEM files: `ca` (the coordinator's CA; without one the
    /// platform's roots are not used, so give one), and the worker's `cert`
    /// and `key` (both or neither).
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<ClientTls, AuthError> {
        let ca = ca.map(|p| read_small("the CA", p)).transpose()?;
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((read_small("the TLS certificate", c)?, read_small("the TLS key", k)?)),
            (None, None) => None,
            _ => return Err(AuthError::Tls("give both --tls-cert and --tls-key, or neither".to_owned())),
        };
        Ok(ClientTls { ca, identity })
    }

    /// A worker's TLS from its flags: when any file is given or the
    /// coordinator's `url` is `https://`; files with a plain `http://` URL
    /// are refused.
    pub fn for_url(
        url: &str,
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<ClientTls>, AuthError> {
        if ca.is_none() && cert.is_none() && !url.starts_with("https://") {
            return Ok(None);
        }
        if !url.starts_with("https://") {
            return Err(AuthError::Tls(format!("TLS files were given but --coordinator {url} is not an https:// URL")));
        }
        Ok(Some(ClientTls::from_files(ca, cert, key)?))
    }

    /// The channel's tonic TLS configuration.
    pub fn config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        config
    }

    /// The same trust and identity as a rustls configuration.
    fn rustls_config(&self) -> Result<rustls::ClientConfig, AuthError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |what: &str, e: &dyn fmt::Display| AuthError::Tls(format!("{what}: {e}"));
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = &self.ca {
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots
                    .add(cert.map_err(|e| bad("the CA is not a PEM certificate", &e))?)
                    .map_err(|e| bad("the CA", &e))?;
            }
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS versions", &e))?
            .with_root_certificates(roots);
        match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad("--tls-cert is not a PEM certificate", &e))?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("--tls-key is not a PEM key", &e))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| bad("--tls-cert with --tls-key", &e))
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }

    /// Checks, before a worker registers, that the coordinator at
    /// `host:port` accepts this worker's TLS. Over TLS 1.3 a server that
    /// wants a client certificate it did not get (or cannot verify) says so
    /// only after the handshake, and gRPC then sees a connection closed,
    /// which looks like an outage and would be retried forever; this
    /// handshake reads the server's first bytes (its HTTP/2 settings) or
    /// its alert. A coordinator that cannot be reached is not an error
    /// here: the worker's own retries wait for it.
    pub async fn probe(&self, host: &str, port: u16) -> Result<(), AuthError> {
        use tokio::io::AsyncReadExt as _;
        let config = self.rustls_config()?;
        let Ok(Ok(tcp)) = tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect((host, port))).await
        else {
            return Ok(());
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| AuthError::Tls(format!("{host} is not a TLS server name: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let mut stream = match tokio::time::timeout(PROBE_TIMEOUT, connector.connect(name, tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(AuthError::Tls(format!("the TLS handshake with the coordinator failed: {e}"))),
            Err(_) => return Ok(()),
        };
        let mut first = [0u8; 1];
        match tokio::time::timeout(PROBE_TIMEOUT, stream.read(&mut first)).await {
            Ok(Err(e)) if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => Err(AuthError::Tls(format!(
                "the coordinator refused this worker's TLS: {e} (mutual TLS needs --tls-cert and --tls-key signed by the coordinator's client CA)"
            ))),
            _ => Ok(()),
        }
    }
}

/// How long each step of [`ClientTls::probe`] waits.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether a call failed because TLS refused the connection (a handshake
/// alert such as a missing or unknown client certificate, or a server
/// certificate that does not verify): a configuration error, never healed
/// by retrying, unlike an outage.
pub fn is_tls_refusal(status: &Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn call(interceptor: &mut impl Interceptor, header: Option<&str>) -> Result<Request<()>, Status> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request.metadata_mut().insert("authorization", h.parse().unwrap());
        }
        interceptor.call(request)
    }

    /// A burst of refused handshakes logs the first few of each window and
    /// counts the rest into the next window's first line.
    #[test]
    fn refused_handshakes_are_logged_a_few_per_window_and_the_rest_counted() {
        let mut log = RefusalLog::default();
        let t0 = std::time::Instant::now();
        let first: Vec<Option<u64>> = (0..8).map(|i| log.note(t0 + std::time::Duration::from_millis(i))).collect();
        assert_eq!(first, [Some(0), Some(0), Some(0), Some(0), Some(0), None, None, None]);
        // The next window's first line says how many were not logged.
        assert_eq!(log.note(t0 + REFUSAL_WINDOW), Some(3));
        assert_eq!(log.note(t0 + REFUSAL_WINDOW), Some(0));
    }

    #[test]
    fn only_the_token_passes_and_refusals_are_unauthenticated() {
        let token = ClusterToken::from_value("s3cret-token\n", "test").unwrap();
        let mut server = RequireToken::new(Some(token.clone()));
        assert!(call(&mut server, Some("Bearer s3cret-token")).is_ok());
        for bad in [None, Some("Bearer other"), Some("s3cret-token"), Some("Bearer s3cret-token ")] {
            let refused = call(&mut server, bad).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{bad:?}");
            assert!(!refused.message().contains("s3cret"), "the refusal names no token: {}", refused.message());
        }
        // The client side sends exactly what the server accepts.
        let sent = SendToken::new(Some(token)).call(Request::new(())).unwrap();
        assert!(server.call(sent).is_ok());
        // Without a token nothing is checked.
        assert!(call(&mut RequireToken::new(None), None).is_ok());
    }

    #[test]
    fn tokens_are_checked_and_never_shown() {
        assert!(matches!(ClusterToken::from_value(" \n", "f"), Err(AuthError::EmptyToken { .. })));
        assert!(matches!(ClusterToken::from_value("has space", "f"), Err(AuthError::BadToken { .. })));
        assert!(matches!(ClusterToken::from_value("tökén", "f"), Err(AuthError::BadToken { .. })));
        let token = ClusterToken::from_value("visible-nowhere", "f").unwrap();
        assert!(!format!("{token:?}").contains("visible-nowhere"));
        assert!(!format!("{:?}", RequireToken::new(Some(token.clone()))).contains("visible-nowhere"));
        assert!(!format!("{:?}", SendToken::new(Some(token))).contains("visible-nowhere"));
    }

    #[test]
    fn token_files_are_read_trimmed_and_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("cohort-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "abc123\n").unwrap();
        let token = ClusterToken::from_file(&file).unwrap();
        assert!(token.matches(b"Bearer abc123"));
        let missing = ClusterToken::from_file(&dir.join("nope")).unwrap_err().to_string();
        assert!(missing.contains("nope"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
