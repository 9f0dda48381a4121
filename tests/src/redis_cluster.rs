//! [`RedisCluster`]: a private Redis Cluster of `redis-server` processes on
//! free loopback ports (`cluster-enabled yes`), made into one cluster by
//! `redis-cli --cluster create`, for tests that run the ledger or the judge
//! proxy's limiter on a real cluster and fail a master over to its replica.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{STARTUP_TIMEOUT, free_port, ping, redis_server_binary};

/// How long the cluster may take to agree on its slots (after creation) or
/// to promote a replica (after a master died): a safety bound only.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node may be unreachable before the others mark it failed and
/// its replica takes over: small, so that a failover takes about a second.
const NODE_TIMEOUT_MS: u32 = 1000;

/// One node of a [`RedisCluster`].
#[derive(Debug)]
struct Node {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) -> io::Result<()> {
        let mut cmd = Command::new(redis_server_binary()?);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "yes"])
            .args(["--dir", &self.dir.path().to_string_lossy(), "--logfile", "redis.log"])
            .args(["--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            // A replica takes over however long it was cut off: the test
            // kills a master once and wants the failover, not a judgement
            // of the replica's freshness.
            .args(["--cluster-replica-validity-factor", "0"])
            // A replica's first full sync starts at once, not after the
            // default 5 s wait for more replicas: the cluster is ready (and
            // a replica holds its master's data) as soon as it can be.
            .args(["--repl-diskless-sync-delay", "0"]);
        let stderr = fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("redis.stderr"))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server (cluster node) exited at start ({status}); see {}/redis.log",
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
        Err(io::Error::new(io::ErrorKind::TimedOut, "redis-server (cluster node) did not answer PING"))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each, all
/// on 127.0.0.1, every process killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
}

impl RedisCluster {
    /// Starts `masters * (1 + replicas)` nodes, creates the cluster and
    /// waits until every node says `cluster_state:ok` and every master has
    /// its replicas.
    pub fn start(masters: usize, replicas: usize) -> io::Result<RedisCluster> {
        let mut cluster = RedisCluster { nodes: Vec::new() };
        for _ in 0..masters * (1 + replicas) {
            let mut last_error = None;
            let mut started = None;
            // A free port can be taken between finding it and binding it.
            for _ in 0..5 {
                let mut node = Node { port: free_port()?, dir: tempfile::tempdir()?, child: None };
                match node.spawn() {
                    Ok(()) => {
                        started = Some(node);
                        break;
                    }
                    Err(e) => last_error = Some(e),
                }
            }
            match started {
                Some(node) => cluster.nodes.push(node),
                None => return Err(last_error.unwrap_or_else(|| io::Error::other("a cluster node did not start"))),
            }
        }
        let mut create = Command::new(redis_cli_binary());
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let ok = cluster
                .live_ports()
                .iter()
                .all(|&p| cli(p, &["CLUSTER", "INFO"]).is_ok_and(|info| info.contains("cluster_state:ok")));
            let replicas_seen = cluster
                .live_ports()
                .first()
                .and_then(|&p| cli(p, &["CLUSTER", "NODES"]).ok())
                .map_or(0, |nodes| nodes.lines().filter(|l| l.contains("slave")).count());
            // Every replica has finished its first sync: from here on it
            // holds what its master held, less what is still in flight.
            let synced = cluster.live_ports().iter().all(|&p| {
                cli(p, &["INFO", "replication"]).is_ok_and(|i| {
                    i.contains("role:master")
                        || i.contains("master_link_status:up") && i.contains("master_sync_in_progress:0")
                })
            });
            if ok && synced && replicas_seen == masters * replicas {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the redis cluster did not reach cluster_state:ok",
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`: every node as a seed.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The ports of the nodes whose process runs.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.port).collect()
    }

    /// The port of the master that serves `key`'s slot now, as a live node
    /// sees the cluster (`CLUSTER NODES`), skipping masters marked failed.
    pub fn master_of(&self, key: &str) -> io::Result<u16> {
        let port = *self.live_ports().first().ok_or_else(|| io::Error::other("no cluster node runs"))?;
        let slot: u16 = cli(port, &["CLUSTER", "KEYSLOT", key])?
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("CLUSTER KEYSLOT: {e}")))?;
        let nodes = cli(port, &["CLUSTER", "NODES"])?;
        master_of_slot(&nodes, slot).ok_or_else(|| io::Error::other(format!("no live master serves slot {slot}")))
    }

    /// `redis://127.0.0.1:PORT/` of the master that serves `key` now: a
    /// plain connection that can read every key of that slot.
    pub fn master_url_of(&self, key: &str) -> io::Result<String> {
        Ok(format!("redis://127.0.0.1:{}/", self.master_of(key)?))
    }

    /// SIGKILLs the master that serves `key` and waits until a replica
    /// has taken its slots over and the cluster is `ok` again. Returns the
    /// (killed, promoted) ports.
    pub fn kill_master_of(&mut self, key: &str) -> io::Result<(u16, u16)> {
        let killed = self.master_of(key)?;
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == killed) {
            node.kill();
        }
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            if let Ok(promoted) = self.master_of(key)
                && promoted != killed
                && self
                    .live_ports()
                    .iter()
                    .all(|&p| cli(p, &["CLUSTER", "INFO"]).is_ok_and(|i| i.contains("cluster_state:ok")))
            {
                return Ok((killed, promoted));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no replica took over the killed master's slots"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// The port of the live master that serves `slot` in a `CLUSTER NODES`
/// reply (`id host:port@cport flags master ping pong epoch state slots...`).
fn master_of_slot(nodes: &str, slot: u16) -> Option<u16> {
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (addr, flags) = (fields.get(1)?, fields.get(2)?);
        if !flags.contains("master") || flags.contains("fail") {
            return None;
        }
        let serves = fields.iter().skip(8).any(|range| {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        });
        if !serves {
            return None;
        }
        addr.split('@').next()?.rsplit_once(':')?.1.parse().ok()
    })
}

/// `redis-cli -p PORT ARGS...`'s output.
fn cli(port: u16, args: &[&str]) -> io::Result<String> {
    let out =
        Command::new(redis_cli_binary()).args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!("redis-cli {args:?}: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn redis_cli_binary() -> PathBuf {
    let candidates = ["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"];
    candidates.iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(|| PathBuf::from("redis-cli"))
}
