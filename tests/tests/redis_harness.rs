//! The harness itself: a private Redis starts on a free port, survives a
//! kill and restart with its AOF, and is gone after drop.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use cohort_tests::RedisServer;

fn command(port: u16, cmd: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(cmd.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    if line.starts_with('$') && !line.starts_with("$-1") {
        let mut value = String::new();
        reader.read_line(&mut value).unwrap();
        return value.trim_end().to_owned();
    }
    line.trim_end().to_owned()
}

/// Proves a test gets its own server, that an AOF restart keeps data, and
/// that dropping the harness stops the server.
#[test]
fn private_server_restarts_with_its_data_and_stops_on_drop() {
    let mut redis = RedisServer::start_with(true).unwrap();
    let port = redis.port();
    assert_ne!(port, 6379, "never the shared default port");
    assert_eq!(command(port, "SET {t}k v\r\n"), "+OK");
    redis.restart().unwrap();
    assert_eq!(command(port, "GET {t}k\r\n"), "v", "AOF survives a SIGKILL restart");
    drop(redis);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "server is gone after drop");
}
