//! The ledger conformance suite (`cohort_coordinator::ledger::conformance`)
//! run against both implementations: each case proves one rule of the run
//! lifecycle holds on the embedded SQLite store and on Redis alike.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod sqlite {
    use cohort_coordinator::conformance_tests;
    use cohort_coordinator::ledger::sqlite::SqliteLedger;

    /// A fresh on-disk SQLite ledger in a temporary directory.
    async fn make() -> (SqliteLedger, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(&dir.path().join("ledger.sqlite")).unwrap();
        (ledger, dir)
    }

    conformance_tests!(make());
}

mod redis {
    use cohort_coordinator::conformance_tests;
    use cohort_coordinator::ledger::redis::RedisLedger;
    use cohort_tests::RedisServer;

    /// A Redis ledger on a private redis-server started for this test.
    async fn make() -> (RedisLedger, RedisServer) {
        let server = RedisServer::start().unwrap();
        let ledger = RedisLedger::connect(&server.url(), "conformance").await.unwrap();
        (ledger, server)
    }

    conformance_tests!(make());
}
