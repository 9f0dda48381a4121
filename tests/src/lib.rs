//! The harness of cohort's cross-process tests.
//!
//! - [`RedisServer`]: a private `redis-server` on a free loopback port, in
//!   a temporary directory, killed on drop. Tests never touch a shared Redis
//!   (6379 may be in use by anyone) and never flush a database they did not
//!   create; fault tests kill and restart their own server.
//! - [`cargo_bin`]: the path of one of the workspace's binaries, built on
//!   first use, so tests run the real processes.
//! - [`SimCohort`] and [`write_judge_file`]: the sim cohort the judging
//!   tests and the judge benchmark collect and judge, and its judge file.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod sim_cohort;

pub use sim_cohort::{SimCohort, write_judge_file};

/// How long a started server may take to answer PING.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` owned by one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// The server's working directory (AOF files live here, so a restart
    /// with `appendonly` finds its data again).
    dir: tempfile::TempDir,
    appendonly: bool,
}

impl RedisServer {
    /// Starts a server without persistence.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(false)
    }

    /// Starts a server; with `appendonly`, every write is logged to an AOF
    /// (fsync always) so that [`RedisServer::restart`] loses nothing.
    pub fn start_with(appendonly: bool) -> io::Result<RedisServer> {
        let mut dir = tempfile::tempdir()?;
        let mut last_error = None;
        // A free port can be taken between finding it and binding it: try a
        // few ports before giving up.
        for _ in 0..5 {
            let port = free_port()?;
            let mut server = RedisServer { child: None, port, dir, appendonly };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last_error = Some(e);
                    dir = server.take_dir()?;
                }
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn take_dir(mut self) -> io::Result<tempfile::TempDir> {
        self.kill();
        let replacement = tempfile::tempdir()?;
        Ok(std::mem::replace(&mut self.dir, replacement))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut cmd = Command::new(redis_server_binary()?);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes"])
            .args(["--dir", &self.dir.path().to_string_lossy()])
            .args(["--appendonly", if self.appendonly { "yes" } else { "no" }])
            .args(["--appendfsync", "always", "--logfile", "redis.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!("redis-server exited at start ({status}); see its log")));
            }
            if ping(self.port).is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(io::Error::new(io::ErrorKind::TimedOut, "redis-server did not answer PING"))
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server with SIGKILL (no shutdown, no final save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and directory.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }

    /// Whether the server answers PING now.
    pub fn is_up(&self) -> bool {
        ping(self.port).is_ok()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ping(port: u16) -> io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"PING\r\n")?;
    let mut line = String::new();
    BufReader::new(&mut stream).read_line(&mut line)?;
    if line.starts_with("+PONG") { Ok(()) } else { Err(io::Error::other(format!("unexpected reply {line:?}"))) }
}

fn redis_server_binary() -> io::Result<PathBuf> {
    let candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"];
    candidates.iter().map(PathBuf::from).find(|p| p.exists()).map_or_else(
        || {
            // Fall back to PATH.
            Command::new("redis-server").arg("--version").output().map(|_| PathBuf::from("redis-server")).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "redis-server is not installed: run scripts/test.sh (it installs Debian's redis-server) or apt-get install redis-server",
                )
            })
        },
        Ok,
    )
}

/// Whether this test process has brought the workspace's binaries up to
/// date yet.
static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();

/// The path of the workspace binary `name` (of package `_package`), so
/// tests run the real binaries.
///
/// The first call in a test process runs `cargo build --workspace --bins
/// --tests`: the same units, with the same unified features, as the test
/// run that started this process, so it is a no-op when that run already
/// built everything and rebuilds what changed otherwise. (Building one
/// package with `-p` would unify features differently and recompile much of
/// the dependency tree.)
pub fn cargo_bin(_package: &str, name: &str) -> PathBuf {
    let built = BUILT.get_or_init(|| {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "--workspace", "--bins", "--tests"])
            .current_dir(workspace_root())
            .status();
        match status {
            Ok(s) if s.success() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let path = target_dir().join("debug").join(name);
    match built {
        Ok(()) if path.exists() => path,
        Ok(()) => panic!("{} was not built by `cargo build --workspace --bins`", path.display()),
        Err(e) => panic!("could not build the workspace's binaries: {e}"),
    }
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}
