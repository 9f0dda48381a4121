//! A worker that cannot reach its coordinator says so (issue 23): at WARN,
//! naming the address and the error, at once rather than retrying in
//! silence.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod support;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{COHORT, cohort, text};

/// Proves `cohort worker` against an address where nothing listens warns
/// within seconds with the address and the connection error, and keeps
/// retrying (it does not exit).
#[test]
fn a_worker_that_cannot_reach_its_coordinator_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    support::write_cohort(
        &dir,
        "unreachable",
        3,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 1\n",
    );
    let frozen = cohort(&["freeze", dir.to_str().unwrap()]);
    assert!(frozen.status.success(), "{}", text(&frozen));
    // A loopback port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(COHORT)
        .args(["worker", dir.to_str().unwrap(), "--coordinator", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut seen = Vec::new();
    let warned = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let warn = line.contains("WARN") && line.contains("cannot reach the coordinator");
                seen.push(line.clone());
                if warn {
                    break Some(line);
                }
            }
            Err(_) if started.elapsed() > Duration::from_secs(20) => break None,
            Err(_) => {}
        }
    };
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    let line = warned.unwrap_or_else(|| panic!("no warning in 20 s; stderr:\n{}", seen.join("\n")));
    assert!(line.contains(&url), "the warning names the address: {line}");
    assert!(line.to_lowercase().contains("connect") || line.contains("refused"), "and the error: {line}");
    assert!(still_running, "the worker keeps retrying");
}
