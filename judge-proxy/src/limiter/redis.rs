//! The shared store of the limiter: Redis, through the Lua scripts beside
//! this file (`book.lua`, `adjust.lua`, `adapt.lua`). Key layout
//! (docs/judge-proxy.md, "Redis"): every key of an upstream carries the
//! hash tag `{PREFIX:jp:UPSTREAM}`, so one script's keys are in one slot on
//! Redis Cluster, and every script names all its keys in KEYS, so the
//! cluster client sends it to that slot's master. A cluster is named
//! `redis+cluster://HOST:PORT,...` (`cohort_redis::RedisTarget`).

use std::fmt;
use std::time::Duration;

use cohort_redis::{ConnectOptions, RedisConn, RedisTarget};
use redis::Script;

use super::gcra::{self, BookResult, Booking, Charges};
use super::rate::{self, Limited};
use crate::error::ProxyError;
use crate::secret::{Redactor, Secret};

/// How long one Redis call may take before the limiter gives up on it.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// The limiter's timelines in a Redis shared by every replica. Cheap to
/// clone (one multiplexed, reconnecting connection, per node on a cluster,
/// behind a handle).
#[derive(Clone)]
pub struct RedisLimiter {
    conn: RedisConn,
    prefix: String,
    book: Script,
    adjust: Script,
    adapt: Script,
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
        let target = RedisTarget::parse(url.expose()).map_err(|e| ProxyError::Limiter(e.to_string()))?;
        let opts = ConnectOptions {
            response_timeout: REDIS_TIMEOUT,
            connection_timeout: REDIS_TIMEOUT,
            retries: 2,
            max_retry_wait: REDIS_TIMEOUT,
        };
        let conn = RedisConn::connect(&target, opts).await.map_err(fail)?;
        Ok(RedisLimiter {
            conn,
            prefix: prefix.to_owned(),
            book: Script::new(include_str!("book.lua")),
            adjust: Script::new(include_str!("adjust.lua")),
            adapt: Script::new(include_str!("adapt.lua")),
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

    /// The (request TAT, token TAT) keys of `team`'s timeline.
    pub fn timeline_keys(&self, upstream: &str, team: &str) -> [String; 2] {
        let b = self.base(upstream);
        [format!("{b}:team:{team}:rpm"), format!("{b}:team:{team}:tpm")]
    }

    /// The pause-until and rate keys of `upstream`.
    pub fn upstream_keys(&self, upstream: &str) -> [String; 2] {
        let b = self.base(upstream);
        [format!("{b}:pause"), format!("{b}:rate")]
    }

    /// Applies `corrections`, then books, in one script call (`now`: µs
    /// since the epoch; None: the server's clock). `teams` are the
    /// upstream's teams in timeline order. Returns the result and the
    /// store's now.
    #[allow(clippy::too_many_arguments)]
    pub async fn book(
        &self,
        upstream: &str,
        teams: &[String],
        team: usize,
        c: &Charges,
        max_wait: i64,
        corrections: &[(usize, i64, i64)],
        now: Option<i64>,
    ) -> Result<(BookResult, i64), ProxyError> {
        let mut inv = self.book.prepare_invoke();
        for k in self.upstream_keys(upstream) {
            inv.key(k);
        }
        for t in teams {
            for k in self.timeline_keys(upstream, t) {
                inv.key(k);
            }
        }
        inv.arg(now.unwrap_or(0))
            .arg(team)
            .arg(max_wait)
            .arg(c.tol)
            .arg(c.horizon)
            .arg(rate::HOLD_US)
            .arg(rate::PROBE_US)
            .arg(gcra::FLOOR_PPM)
            .arg(rate::RING_S)
            .arg(rate::WINDOW_S)
            .arg(teams.len());
        for inc in c.req_inc.iter().chain(&c.tok_inc) {
            inv.arg(*inc);
        }
        inv.arg(corrections.len());
        for (j, r, t) in corrections {
            inv.arg(*j).arg(*r).arg(*t);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = inv.invoke_async(&mut conn).await.map_err(|e| self.fail(&e))?;
        let [booked, slot, timeline, req_inc, tok_inc, ppm, epoch, now] = reply[..] else {
            return Err(ProxyError::Limiter(format!("book.lua answered {} values, not 8", reply.len())));
        };
        let timeline = usize::try_from(timeline).unwrap_or(team);
        let result = if booked == 1 {
            BookResult::Booked(Booking { slot, timeline, req_inc, tok_inc, ppm, epoch })
        } else {
            BookResult::Refused { slot, ppm, epoch }
        };
        Ok((result, now))
    }

    /// Moves timelines by `corrections` (timeline, request µs, token µs).
    pub async fn adjust(
        &self,
        upstream: &str,
        teams: &[String],
        corrections: &[(usize, i64, i64)],
        now: Option<i64>,
    ) -> Result<(), ProxyError> {
        if corrections.is_empty() {
            return Ok(());
        }
        let mut inv = self.adjust.prepare_invoke();
        inv.arg(now.unwrap_or(0));
        for (j, r, t) in corrections {
            let name = teams.get(*j).map_or("", String::as_str);
            for k in self.timeline_keys(upstream, name) {
                inv.key(k);
            }
            inv.arg(*r).arg(*t);
        }
        let mut conn = self.conn.clone();
        let _: i64 = inv.invoke_async(&mut conn).await.map_err(|e| self.fail(&e))?;
        Ok(())
    }

    /// A provider signal (see `adapt.lua`). Returns the fraction in force.
    pub async fn adapt(
        &self,
        upstream: &str,
        limited: Option<Limited>,
        pause_us: i64,
        cap_ppm: Option<i64>,
        now: Option<i64>,
    ) -> Result<i64, ProxyError> {
        let mut inv = self.adapt.prepare_invoke();
        for k in self.upstream_keys(upstream) {
            inv.key(k);
        }
        inv.arg(now.unwrap_or(0))
            .arg(limited.map_or(-1, |l| l.epoch))
            .arg(limited.map_or(0, |l| l.slot))
            .arg(limited.map_or(1, |l| l.rpm.max(1)))
            .arg(pause_us.max(0))
            .arg(cap_ppm.unwrap_or(-1))
            .arg(rate::HOLD_US)
            .arg(rate::PROBE_US)
            .arg(gcra::FLOOR_PPM)
            .arg(rate::GRACE_US)
            .arg(rate::SUSTAIN_PPM)
            .arg(rate::FALLBACK_CUT_PPM)
            .arg(rate::MAX_CUT_PPM)
            .arg(rate::RING_S)
            .arg(rate::WINDOW_S);
        let mut conn = self.conn.clone();
        let (ppm, _epoch): (i64, i64) = inv.invoke_async(&mut conn).await.map_err(|e| self.fail(&e))?;
        Ok(ppm)
    }

    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
    }
}
