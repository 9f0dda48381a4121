//! Workers on other hosts (issue 14): two network namespaces this test
//! makes (`ip netns add`), each a worker host joined to this machine by a
//! veth pair on a bridge the test makes too; Redis and the coordinator run
//! here, the coordinator listening on the bridge's address. Mid-cohort one
//! worker host is cut off (its veth taken down) for several lease
//! lifetimes, then joined again. Every address is one the test assigned to
//! its own interfaces, in 198.18.0.0/24 (RFC 2544's benchmarking range);
//! the namespaces have no other route, so no packet leaves them. Needs
//! root (CAP_NET_ADMIN); skips with a message without it, except in CI.

mod cluster_support;

use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, DEFAULT_FAULTS, LedgerProbe, PLANNED, SimCohort, check_ledger, write_and_freeze};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_tests::RedisServer;

/// The coordinator's address on the bridge; workers are .2 and .3.
const HUB: &str = "198.18.0.1";
/// A safety bound only.
const DEADLINE: Duration = Duration::from_secs(240);
/// When the partition starts (finished runs, in percent of the plan).
const PARTITION_AT_PERCENT: u64 = 25;

/// The test's own network: a bridge here and a namespace per worker host,
/// removed on drop (also when the test fails).
struct Net {
    bridge: String,
    hosts: Vec<(String, String)>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Net {
    /// A bridge with [`HUB`] and `hosts` namespaces at 198.18.0.2, .3, ...
    fn build(hosts: usize) -> Result<Net, String> {
        let tag = std::process::id() % 100_000;
        let mut net = Net { bridge: format!("cbr{tag}"), hosts: Vec::new() };
        ip(&["link", "add", "name", &net.bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{HUB}/24"), "dev", &net.bridge])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for i in 0..hosts {
            let (ns, here) = (format!("cohort-w{i}-{tag}"), format!("cv{i}h{tag}"));
            let there = format!("cv{i}n{tag}");
            ip(&["netns", "add", &ns])?;
            net.hosts.push((ns.clone(), here.clone()));
            ip(&["link", "add", &here, "type", "veth", "peer", "name", &there, "netns", &ns])?;
            ip(&["link", "set", &here, "master", &net.bridge])?;
            ip(&["link", "set", &here, "up"])?;
            let addr = format!("198.18.0.{}/24", i + 2);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &there])?;
            ip(&["-n", &ns, "link", "set", &there, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Cuts host `i` off (its veth down here: packets both ways are lost,
    /// no reset is sent) or joins it again.
    fn set_link(&self, i: usize, up: bool) {
        ip(&["link", "set", &self.hosts[i].1, if up { "up" } else { "down" }])
            .unwrap_or_else(|e| panic!("cannot set host {i}'s link {}: {e}", if up { "up" } else { "down" }));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (ns, here) in &self.hosts {
            let _ = ip(&["link", "del", here]);
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// Proves that a cohort run by workers on two other hosts survives one host
/// being cut off for longer than a lease: its runs go to the other host as
/// `worker_lost` attempts under the retry policy, its late reports are
/// discarded when the partition heals, and at the end every planned run
/// has exactly one final outcome (lost 0, duplicated 0).
#[test]
fn a_partitioned_worker_host_loses_its_leases_and_nothing_is_lost_or_duplicated() {
    let net = match Net::build(2) {
        Ok(net) => net,
        Err(e) if std::env::var_os("CI").is_none() => {
            println!("SKIPPED netns_partition: cannot make network namespaces here ({e}); run as root");
            return;
        }
        Err(e) => panic!("cannot make the test's network namespaces: {e}"),
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_and_freeze(&dir, &SimCohort { latency_ms: 150, ..DEFAULT_FAULTS });
    let redis = RedisServer::start().unwrap();
    let mut cluster = Cluster::new(&dir, &tmp.path().join("logs"), &redis.url(), 8).with_host(HUB);
    let partition = cluster.lease_ttl() * 4;

    let started = Instant::now();
    cluster.start_coordinator();
    for (ns, _) in &net.hosts {
        cluster.start_worker_in(Some(ns));
    }
    let probe = LedgerProbe::connect(&redis.url());
    let mut cut: Option<Instant> = None;
    let mut healed = false;
    while !cluster.workers_finished() {
        assert!(Instant::now() < started + DEADLINE, "not done within {DEADLINE:?}:\n{}", cluster.status_text());
        let percent = probe.finished().unwrap_or(0) * 100 / PLANNED;
        match cut {
            None if percent >= PARTITION_AT_PERCENT => {
                net.set_link(0, false);
                cut = Some(Instant::now());
                println!(
                    "netns: host 0 cut off at {percent} % for {partition:?} (leases live {:?})",
                    cluster.lease_ttl()
                );
            }
            Some(at) if !healed && at.elapsed() >= partition => {
                net.set_link(0, true);
                healed = true;
                println!("netns: host 0 joined again at {percent} %");
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(healed, "the cohort ended before the partition healed: make it longer");
    let failed = cluster.wait_for_workers(started + DEADLINE, "netns");
    assert!(failed.is_empty(), "workers failed: {failed:?}");

    let f = check_ledger(&redis.url(), &dir);
    println!(
        "netns: runs {}, completed {}, attempts {}, worker_lost {}, discarded {} ({:?}), lost {}, duplicated {}, in {:.1} s",
        f.planned,
        f.outcome(Outcome::Completed),
        f.attempts,
        f.class(AttemptClass::WorkerLost),
        f.discarded,
        f.discarded_by,
        f.lost,
        f.duplicated,
        started.elapsed().as_secs_f64()
    );
    f.assert_clean();
    assert_eq!((f.planned, f.lost, f.duplicated), (PLANNED, 0, 0));
    assert!(f.class(AttemptClass::WorkerLost) > 0, "the cut-off host's leases expired as worker_lost attempts");
    assert!(f.discarded > 0, "the cut-off host's late reports were discarded");
    drop(net);
}
