//! The harness of cohort's cross-process tests.
//!
//! - [`RedisServer`]: a private `redis-server` on a free loopback port, in
//!   a temporary directory, killed on drop. Tests never touch a shared Redis
//!   (6379 may be in use by anyone) and never flush a database they did not
//!   create; fault tests kill and restart their own server, and with
//!   [`RedisServer::start_everysec`] cut its AOF back by the writes of the
//!   last seconds ([`RedisServer::kill_cut_restart`]), as a machine that
//!   crashed with `appendfsync everysec` may lose them.
//! - [`RedisCluster`]: a private Redis Cluster (masters and replicas on
//!   free loopback ports) whose master of a key's slot a test can kill, to
//!   watch a replica take over.
//! - [`cargo_bin`]: the path of one of the workspace's binaries, built on
//!   first use, so tests run the real processes.
//! - [`SimCohort`] and [`write_judge_file`]: the sim cohort the judging
//!   tests and the judge benchmark collect and judge, and its judge file.

use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod otlp;
pub mod proc;
mod redis_cluster;
mod sim_cohort;

pub use redis_cluster::RedisCluster;
pub use sim_cohort::{SimCohort, write_judge_file};

/// How long a started server may take to answer PING.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`RedisServer`] persists its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// No AOF: a restart starts empty.
    None,
    /// AOF with `appendfsync always`: a restart loses nothing.
    AofAlways,
    /// AOF with `appendfsync everysec` and `aof-timestamp-enabled yes`: each
    /// second's writes are preceded by a `#TS:<unix secs>` annotation, so
    /// [`RedisServer::kill_cut_restart`] can cut the last seconds off, which
    /// is what a crash of the machine (not just of the process) may lose.
    /// Automatic AOF rewrites are off (`auto-aof-rewrite-percentage 0`): a
    /// rewrite starts a new incr file, and `redis-check-aof` cuts only the
    /// last one, so a rewrite inside the last seconds would make the cut
    /// impossible.
    AofEverysec,
}

/// A `redis-server` owned by one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// The server's working directory (AOF files live here, so a restart
    /// with an AOF finds its data again; its log and stderr are here too).
    dir: tempfile::TempDir,
    persistence: Persistence,
}

/// What [`RedisServer::kill_cut_restart`] cut off the AOF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AofCut {
    /// The AOF now ends with the writes annotated at this second (unix
    /// seconds): every write annotated later is gone.
    pub to_unix_secs: u64,
    /// The incr file that was cut (the last one of the manifest).
    pub file: PathBuf,
    /// Commands in that file before and after the cut.
    pub commands_before: u64,
    pub commands_after: u64,
    /// Bytes cut off the file.
    pub bytes_cut: u64,
}

impl AofCut {
    /// How many commands (writes, plus the `SELECT`s and `MULTI`/`EXEC`
    /// that frame them) were cut.
    pub fn commands_cut(&self) -> u64 {
        self.commands_before - self.commands_after
    }
}

impl RedisServer {
    /// Starts a server without persistence.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_persisting(Persistence::None)
    }

    /// Starts a server; with `appendonly`, every write is logged to an AOF
    /// (fsync always) so that [`RedisServer::restart`] loses nothing.
    pub fn start_with(appendonly: bool) -> io::Result<RedisServer> {
        RedisServer::start_persisting(if appendonly { Persistence::AofAlways } else { Persistence::None })
    }

    /// Starts a server with an AOF written with `appendfsync everysec` and
    /// timestamp annotations (see [`Persistence::AofEverysec`]).
    pub fn start_everysec() -> io::Result<RedisServer> {
        RedisServer::start_persisting(Persistence::AofEverysec)
    }

    /// Starts a server persisting as `persistence` says.
    pub fn start_persisting(persistence: Persistence) -> io::Result<RedisServer> {
        let mut dir = tempfile::tempdir()?;
        let mut last_error = None;
        // A free port can be taken between finding it and binding it: try a
        // few ports before giving up.
        for _ in 0..5 {
            let port = free_port()?;
            let mut server = RedisServer { child: None, port, dir, persistence };
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
            .args(["--dir", &self.dir.path().to_string_lossy(), "--logfile", "redis.log"]);
        match self.persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::AofAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
            Persistence::AofEverysec => cmd
                .args(["--appendonly", "yes", "--appendfsync", "everysec", "--aof-timestamp-enabled", "yes"])
                .args(["--auto-aof-rewrite-percentage", "0"]),
        };
        // Appended, not truncated: a restarted server's stderr follows the
        // one it replaces.
        let stderr = fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("redis.stderr"))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server exited at start ({status}); see {}/redis.log",
                    self.dir.path().display()
                )));
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

    /// The server process's id while it runs (for reading its CPU time
    /// from `/proc` in benchmarks).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `INFO commandstats`: command name (`evalsha`, `get`...) -> calls.
    /// Redis counts the commands a Lua script runs inside under their own
    /// names too, so a caller counting what clients sent leaves those out.
    /// Spoken in RESP over a plain socket (one bulk string comes back).
    pub fn commandstats(&self) -> io::Result<std::collections::HashMap<String, u64>> {
        use std::io::Read as _;
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")?;
        let mut reader = BufReader::new(stream);
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let len: usize = header
            .trim()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| io::Error::other(format!("INFO commandstats answered {header:?}")))?;
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        Ok(String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect())
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

    /// The server's working directory (its AOF, `redis.log`, `redis.stderr`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILLs the server, cuts its AOF back by the writes of at least the
    /// last `secs` seconds, and starts it again on the same port and
    /// directory: what a crash of the machine may cost a server that
    /// fsyncs every second (Redis says it may lose up to about a second;
    /// more if a fsync stalls).
    ///
    /// The cut is `redis-check-aof --truncate-to-timestamp T` on the
    /// manifest, which drops every write annotated after second `T`. With
    /// the kill at time K (unix seconds, fractional), T = floor(K - secs) -
    /// 1: everything written since floor(K - secs), at or before K - secs,
    /// is gone, so between `secs` and `secs + 1` seconds of writes are cut.
    /// The tool's output is appended to `aof-cut.log` in the server's
    /// directory. Refused unless the server was started with
    /// [`Persistence::AofEverysec`].
    pub fn kill_cut_restart(&mut self, secs: u64) -> io::Result<AofCut> {
        if self.persistence != Persistence::AofEverysec {
            return Err(io::Error::other("kill_cut_restart needs a server started with start_everysec"));
        }
        self.kill();
        let killed_at = SystemTime::now().duration_since(UNIX_EPOCH).map_err(io::Error::other)?.as_secs_f64();
        let cut = self.cut_aof((killed_at - secs as f64).floor() as u64 - 1)?;
        self.spawn()?;
        Ok(cut)
    }

    /// Cuts the (stopped) server's AOF so that it ends with the writes
    /// annotated at second `to_unix_secs`.
    fn cut_aof(&self, to_unix_secs: u64) -> io::Result<AofCut> {
        let aof_dir = self.dir.path().join("appendonlydir");
        let manifest = aof_dir.join("appendonly.aof.manifest");
        let manifest_text = fs::read_to_string(&manifest)?;
        // Lines are `file NAME seq N type b|h|i`; the last `i` is the file
        // being written, the only one the tool can cut.
        let last_incr = manifest_text
            .lines()
            .filter_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                (words.len() >= 6 && words[0] == "file" && words[5] == "i").then(|| words[1].to_owned())
            })
            .next_back()
            .ok_or_else(|| io::Error::other(format!("{} names no incr file", manifest.display())))?;
        let file = aof_dir.join(last_incr);
        let before = fs::read(&file)?;
        let commands_before = aof_commands(&before)?;
        let first_ts = aof_timestamps(&before).next();
        let mut log = fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("aof-cut.log"))?;
        writeln!(log, "=== cut {} to timestamp {to_unix_secs}", file.display())?;
        if first_ts.is_some_and(|ts| ts > to_unix_secs) {
            // The tool refuses a file that has nothing at or before the
            // timestamp ("nothing before timestamp"): every write in it is
            // newer, so all of it goes. An empty incr file is a valid one.
            writeln!(log, "every write in the file is newer: truncated to 0 bytes")?;
            fs::OpenOptions::new().write(true).open(&file)?.set_len(0)?;
        } else {
            let out = Command::new(redis_check_aof_binary()?)
                .arg("--truncate-to-timestamp")
                .arg(to_unix_secs.to_string())
                .arg(&manifest)
                .output()?;
            log.write_all(&out.stdout)?;
            log.write_all(&out.stderr)?;
            if !out.status.success() {
                return Err(io::Error::other(format!(
                    "redis-check-aof --truncate-to-timestamp {to_unix_secs} failed ({}); see {}/aof-cut.log",
                    out.status,
                    self.dir.path().display()
                )));
            }
        }
        let after = fs::read(&file)?;
        let commands_after = aof_commands(&after)?;
        Ok(AofCut {
            to_unix_secs,
            file,
            commands_before,
            commands_after,
            bytes_cut: (before.len() - after.len()) as u64,
        })
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

fn redis_check_aof_binary() -> io::Result<PathBuf> {
    let candidates = ["/usr/bin/redis-check-aof", "/usr/local/bin/redis-check-aof"];
    Ok(candidates.iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(|| PathBuf::from("redis-check-aof")))
}

/// The `#TS:<unix secs>` annotations of an AOF with `aof-timestamp-enabled`.
fn aof_timestamps(aof: &[u8]) -> impl Iterator<Item = u64> + '_ {
    aof.split(|&b| b == b'\n').filter_map(|line| {
        let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
        line.strip_prefix("#TS:")?.parse().ok()
    })
}

/// Counts the commands of an AOF incr file: RESP arrays of bulk strings,
/// with `#...` annotation lines between them.
fn aof_commands(aof: &[u8]) -> io::Result<u64> {
    fn line(aof: &[u8], at: &mut usize) -> io::Result<String> {
        let rest = &aof[*at..];
        let end =
            rest.windows(2).position(|w| w == b"\r\n").ok_or_else(|| io::Error::other("AOF line without CRLF"))?;
        *at += end + 2;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }
    let bad = |what: &str, at: usize| io::Error::other(format!("AOF: {what} at byte {at}"));
    let (mut at, mut commands) = (0, 0);
    while at < aof.len() {
        let start = at;
        let header = line(aof, &mut at)?;
        if header.starts_with('#') {
            continue;
        }
        let n: usize = header.strip_prefix('*').and_then(|n| n.parse().ok()).ok_or_else(|| bad("no array", start))?;
        for _ in 0..n {
            let len_at = at;
            let len: usize = line(aof, &mut at)?
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad("no bulk string", len_at))?;
            at += len + 2;
            if at > aof.len() {
                return Err(bad("a bulk string past the end", len_at));
            }
        }
        commands += 1;
    }
    Ok(commands)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends one command (bulk strings) and reads a one-line reply: enough
    /// RESP for SET and EXISTS without a client crate.
    fn command(stream: &mut BufReader<TcpStream>, args: &[&str]) -> String {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.get_mut().write_all(req.as_bytes()).unwrap();
        let mut line = String::new();
        stream.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    }

    fn connect(port: u16) -> BufReader<TcpStream> {
        BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap())
    }

    fn unix_secs() -> f64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
    }

    /// Proves that `kill_cut_restart` really loses the last writes, as a
    /// crash with `appendfsync everysec` may: keys are set every 40 ms for
    /// about 3.5 s, the server is killed and its AOF cut by (at least) the
    /// last second, and after the restart every key written before the cut
    /// second is there and every key written after it is gone. Keys within
    /// 100 ms of the boundary are not judged (the server's second and the
    /// test's clock may differ by a tick).
    #[test]
    fn kill_cut_restart_drops_the_last_seconds_of_writes() {
        let mut redis = RedisServer::start_everysec().unwrap();
        let mut conn = connect(redis.port());
        let started = Instant::now();
        let mut written: Vec<(String, f64)> = Vec::new();
        while started.elapsed() < Duration::from_millis(3500) {
            let key = format!("k{}", written.len());
            let at = unix_secs();
            assert_eq!(command(&mut conn, &["SET", &key, "v"]), "+OK");
            written.push((key, at));
            std::thread::sleep(Duration::from_millis(40));
        }
        drop(conn);
        let cut = redis.kill_cut_restart(1).unwrap();
        let boundary = (cut.to_unix_secs + 1) as f64;
        let mut conn = connect(redis.port());
        let (mut kept, mut gone, mut unjudged) = (0, 0, 0);
        for (key, at) in &written {
            let exists = command(&mut conn, &["EXISTS", key]) == ":1";
            if *at < boundary - 0.1 {
                assert!(exists, "{key}, written {:.3} s before the cut second ended, is gone", boundary - at);
                kept += 1;
            } else if *at >= boundary + 0.1 {
                assert!(!exists, "{key}, written {:.3} s after the cut second, survived the cut", at - boundary);
                gone += 1;
            } else {
                unjudged += 1;
            }
        }
        println!(
            "aof cut: {} keys written over 3.5 s; cut to second {} ({} commands of {} and {} bytes cut from {}); \
             keys kept {kept}, gone {gone}, at the boundary (not judged) {unjudged}",
            written.len(),
            cut.to_unix_secs,
            cut.commands_cut(),
            cut.commands_before,
            cut.bytes_cut,
            cut.file.display()
        );
        assert!(kept > 0 && gone > 0, "the cut must keep the early keys and drop the late ones");
        assert!(gone >= 20, "at least a second of writes (every 40 ms) must be cut, {gone} were");
    }
}
