//! How cohort names and reaches Redis, for the ledger and the judge proxy's
//! limiter alike: one URL parser ([`RedisTarget::parse`]) and one
//! connection type ([`RedisConn`]) that is either a reconnecting connection
//! to one server or a Redis Cluster connection.
//!
//! A single server is named as the redis crate names it (`redis://` or
//! `rediss://`). A cluster is named by the scheme `redis+cluster://` (or
//! `rediss+cluster://` for TLS) followed by one or more seed nodes separated
//! by commas, e.g. `redis+cluster://10.0.0.1:7000,10.0.0.2:7000`; a
//! `user:password@` before the first node applies to every node. The seed
//! nodes only find the cluster: the client learns every master and replica
//! from them (`CLUSTER SLOTS`) and follows `MOVED` and failovers itself.
//!
//! Both variants implement [`redis::aio::ConnectionLike`], so scripts,
//! commands and pipelines are sent to either the same way. On a cluster a
//! command goes to the master of the slot of its first key; callers keep
//! every key of one script (and one pipeline) in one slot with a hash tag.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// What is wrong with a Redis URL. The messages never repeat the URL, which
/// may hold a password.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisUrlError {
    #[error(
        "a redis URL must start with redis://, rediss://, redis+cluster:// or rediss+cluster:// \
         (a cluster: redis+cluster://HOST:PORT,HOST:PORT)"
    )]
    Scheme,
    #[error("a redis+cluster:// URL needs at least one seed node HOST:PORT")]
    NoNodes,
    #[error("redis cluster seed node {0} is not HOST:PORT")]
    BadNode(usize),
    #[error("a redis+cluster:// URL names no database or path: a cluster has only database 0")]
    Path,
}

/// A parsed Redis URL: one server or the seed nodes of a cluster.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://...` or `rediss://...`, as the redis crate reads it.
    Single(String),
    /// One `redis://` (or `rediss://`) URL per seed node, each carrying
    /// the credentials given once in the cluster URL.
    Cluster(Vec<String>),
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may hold passwords: say only what kind of target it is.
        match self {
            RedisTarget::Single(_) => f.write_str("RedisTarget::Single(..)"),
            RedisTarget::Cluster(nodes) => write!(f, "RedisTarget::Cluster({} seed nodes)", nodes.len()),
        }
    }
}

impl RedisTarget {
    /// Reads a Redis URL (see the module header for the forms).
    pub fn parse(url: &str) -> Result<RedisTarget, RedisUrlError> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
            ("redis", rest)
        } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
            ("rediss", rest)
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            return Ok(RedisTarget::Single(url.to_owned()));
        } else {
            return Err(RedisUrlError::Scheme);
        };
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let hosts = match hosts.split_once('/') {
            Some((h, "" | "0")) => h,
            Some(_) => return Err(RedisUrlError::Path),
            None => hosts,
        };
        if hosts.trim().is_empty() {
            return Err(RedisUrlError::NoNodes);
        }
        let nodes = hosts
            .split(',')
            .enumerate()
            .map(|(i, node)| {
                let node = node.trim();
                match node.rsplit_once(':') {
                    Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                        Ok(match userinfo {
                            Some(u) => format!("{scheme}://{u}@{node}"),
                            None => format!("{scheme}://{node}"),
                        })
                    }
                    _ => Err(RedisUrlError::BadNode(i + 1)),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisTarget::Cluster(nodes))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster(_))
    }
}

/// How patient a connection is.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// How long one reply may take before the call fails.
    pub response_timeout: Duration,
    /// How long a (re)connection may take.
    pub connection_timeout: Duration,
    /// How many times a failed (re)connection or a cluster request
    /// (`MOVED`, a node down during a failover) is tried again.
    pub retries: u32,
    /// The longest wait between two tries.
    pub max_retry_wait: Duration,
}

/// One server behind a reconnecting [`ConnectionManager`], or a cluster
/// behind a [`ClusterConnection`] (which follows slots, `MOVED` and
/// failovers by itself). Cheap to clone: both are handles to one
/// multiplexed connection (per node).
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RedisConn::Single(_) => "RedisConn::Single",
            RedisConn::Cluster(_) => "RedisConn::Cluster",
        })
    }
}

impl RedisConn {
    /// Connects to `target`.
    pub async fn connect(target: &RedisTarget, opts: ConnectOptions) -> RedisResult<RedisConn> {
        match target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(opts.retries as usize)
                    .set_max_delay(opts.max_retry_wait)
                    .set_connection_timeout(Some(opts.connection_timeout))
                    .set_response_timeout(Some(opts.response_timeout));
                Ok(RedisConn::Single(ConnectionManager::new_with_config(client, config).await?))
            }
            RedisTarget::Cluster(nodes) => {
                let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .retries(opts.retries)
                    .max_retry_wait(u64::try_from(opts.max_retry_wait.as_millis()).unwrap_or(u64::MAX))
                    .connection_timeout(opts.connection_timeout)
                    .response_timeout(opts.response_timeout)
                    .build()?;
                Ok(RedisConn::Cluster(client.get_async_connection().await?))
            }
        }
    }

    /// Sends `cmd` (a command with no key, such as `CONFIG GET`) to the
    /// server that holds `key`: the one server, or the master of `key`'s
    /// slot in a cluster.
    pub async fn query_at_key<T: redis::FromRedisValue>(&mut self, cmd: Cmd, key: &str) -> RedisResult<T> {
        match self {
            RedisConn::Single(c) => cmd.query_async(c).await,
            RedisConn::Cluster(c) => {
                let route = redis::cluster_routing::Route::with_key(key.as_bytes(), SlotAddr::Master);
                let value =
                    c.route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))).await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster URL names its seed nodes with the credentials on each, a
    /// single server's URL is kept as it is, and bad input is refused with
    /// a message that does not repeat it.
    #[test]
    fn urls_parse_into_targets() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://a:7000,b:7001").unwrap(),
            RedisTarget::Cluster(vec!["redis://a:7000".into(), "redis://b:7001".into()])
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://u:secret@a:7000,b:7001/").unwrap(),
            RedisTarget::Cluster(vec!["rediss://u:secret@a:7000".into(), "rediss://u:secret@b:7001".into()])
        );
        assert_eq!(RedisTarget::parse("redis://x:1/2").unwrap(), RedisTarget::Single("redis://x:1/2".into()));
        assert!(matches!(RedisTarget::parse("http://x"), Err(RedisUrlError::Scheme)));
        assert!(matches!(RedisTarget::parse("redis+cluster://"), Err(RedisUrlError::NoNodes)));
        assert!(matches!(RedisTarget::parse("redis+cluster://a:1,b"), Err(RedisUrlError::BadNode(2))));
        assert!(matches!(RedisTarget::parse("redis+cluster://a:1/3"), Err(RedisUrlError::Path)));
        let err = RedisTarget::parse("redis+cluster://u:secret@a:x").unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
        assert!(!format!("{:?}", RedisTarget::parse("redis://u:secret@a:1").unwrap()).contains("secret"));
    }
}
