//! The shared store of the limiter: Redis, through the Lua scripts beside
//! this file. Key layout (docs/judge-proxy.md, "Redis"): every key of an
//! upstream carries the hash tag `{PREFIX:jp:UPSTREAM}`, so one script's
//! keys are in one slot on Redis Cluster.

use std::fmt;
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;

use super::gcra::{Charges, Decision, ShareSpec};
use crate::error::ProxyError;
use crate::secret::{Redactor, Secret};

/// How long one Redis call may take before the limiter gives up on it.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// The limiter's buckets in a Redis shared by every replica.
pub struct RedisLimiter {
    /// Cheap to clone: a handle to one multiplexed, reconnecting connection.
    conn: ConnectionManager,
    prefix: String,
    acquire: Script,
    reconcile: Script,
    pause: Script,
    redactor: Redactor,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url`; keys start with `prefix`.
    pub async fn connect(url: &Secret, prefix: &str) -> Result<RedisLimiter, ProxyError> {
        let redactor = Redactor::new([url.clone()]);
        let fail = |e: redis::RedisError| ProxyError::Limiter(redactor.scrub(&e.to_string()));
        let client = redis::Client::open(url.expose()).map_err(fail)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT))
            .set_number_of_retries(2);
        let conn = client.get_connection_manager_with_config(config).await.map_err(fail)?;
        Ok(RedisLimiter {
            conn,
            prefix: prefix.to_owned(),
            acquire: Script::new(include_str!("acquire.lua")),
            reconcile: Script::new(include_str!("reconcile.lua")),
            pause: Script::new(include_str!("pause.lua")),
            redactor,
        })
    }

    fn fail(&self, e: &redis::RedisError) -> ProxyError {
        ProxyError::Limiter(self.redactor.scrub(&e.to_string()))
    }

    /// The hash-tagged base of an upstream's keys.
    fn base(&self, upstream: &str) -> String {
        format!("{{{}:jp:{upstream}}}", self.prefix)
    }

    /// The keys of `acquire.lua`, in its order.
    pub fn keys(&self, upstream: &str, team: &str) -> [String; 5] {
        let b = self.base(upstream);
        [
            format!("{b}:rpm"),
            format!("{b}:tpm"),
            format!("{b}:team:{team}:rpm"),
            format!("{b}:team:{team}:tpm"),
            format!("{b}:pause"),
        ]
    }

    /// Applies the rule in Redis at `now` (µs since the epoch; None: the
    /// server's clock).
    pub async fn decide(
        &self,
        upstream: &str,
        team: &str,
        c: &Charges,
        now: Option<i64>,
    ) -> Result<Decision, ProxyError> {
        let mut inv = self.acquire.prepare_invoke();
        for k in self.keys(upstream, team) {
            inv.key(k);
        }
        inv.arg(now.unwrap_or(0))
            .arg(c.upstream_req_inc)
            .arg(c.upstream_tok_inc)
            .arg(c.upstream_tol)
            .arg(c.borrow_tol)
            .arg(c.team_req_inc)
            .arg(c.team_tok_inc)
            .arg(c.team_tol);
        let mut conn = self.conn.clone();
        let (admitted, in_share, wait): (i64, i64, i64) =
            inv.invoke_async(&mut conn).await.map_err(|e| self.fail(&e))?;
        Ok(if admitted == 1 { Decision::Admit { in_share: in_share == 1 } } else { Decision::Wait { us: wait.max(1) } })
    }

    pub async fn reconcile(
        &self,
        upstream: &str,
        team: &str,
        spec: &ShareSpec,
        delta_tokens: i64,
        in_share: bool,
    ) -> Result<(), ProxyError> {
        let c = spec.charges(delta_tokens.unsigned_abs());
        let sign = if delta_tokens < 0 { -1 } else { 1 };
        let [_, up_tok, _, team_tok, _] = self.keys(upstream, team);
        let mut conn = self.conn.clone();
        let _: i64 = self
            .reconcile
            .key(up_tok)
            .key(team_tok)
            .arg(sign * c.upstream_tok_inc)
            .arg(if in_share { sign * c.team_tok_inc } else { 0 })
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(())
    }

    pub async fn pause(&self, upstream: &str, pause: Duration) -> Result<(), ProxyError> {
        let [.., key] = self.keys(upstream, "");
        let mut conn = self.conn.clone();
        let _: i64 = self
            .pause
            .key(key)
            .arg(i64::try_from(pause.as_micros()).unwrap_or(i64::MAX / 4))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(())
    }

    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}
