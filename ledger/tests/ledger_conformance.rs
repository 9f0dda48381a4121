//! The ledger conformance suite (`cohort_ledger::conformance`)
//! run against both implementations: each case proves one rule of the run
//! lifecycle holds on the embedded SQLite store and on Redis alike.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod sqlite {
    use cohort_ledger::conformance_tests;
    use cohort_ledger::sqlite::SqliteLedger;

    /// A fresh on-disk SQLite ledger in a temporary directory.
    async fn make() -> (SqliteLedger, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).unwrap();
        (ledger, dir)
    }

    conformance_tests!(make());
}

mod redis {
    use cohort_ledger::conformance_tests;
    use cohort_ledger::redis::RedisLedger;
    use cohort_tests::RedisServer;

    /// A Redis ledger on a private redis-server started for this test.
    async fn make() -> (RedisLedger, RedisServer) {
        let server = RedisServer::start().unwrap();
        let ledger = RedisLedger::connect(&server.url(), "conformance").await.unwrap();
        (ledger, server)
    }

    conformance_tests!(make());
}

mod redis_cluster {
    use cohort_ledger::conformance_tests;
    use cohort_ledger::redis::RedisLedger;
    use cohort_tests::RedisCluster;

    /// A Redis ledger on a private 3-master Redis Cluster started for this
    /// test (`redis+cluster://`): the same rules hold when the cohort's
    /// keys live in one slot of a cluster and every script and pipeline is
    /// routed to that slot's master.
    async fn make() -> (RedisLedger, RedisCluster) {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0).unwrap()).await.unwrap();
        let ledger = RedisLedger::connect(&cluster.url(), "conformance").await.unwrap();
        (ledger, cluster)
    }

    conformance_tests!(make());
}
