//! Authentication between components (issue 14, SPEC section 11): a
//! `cohort coordinator` process with a cluster token refuses a `cohort
//! worker` without it or with another (`Unauthenticated`, logged without
//! either token) and serves one with it; with mutual TLS it refuses a
//! worker that has no client certificate, or one from another CA, and
//! serves one whose certificate chains to its client CA. Certificates are
//! made for the test by the `openssl` command line (Debian's `openssl`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cohort_tests::{SimCohort, cargo_bin};
use judge_proxy_support::Proc;

const TOKEN: &str = "cluster-token-9b2f61e0d4c7a835";
const WRONG: &str = "cluster-token-0000000000000000";

fn cohort() -> Command {
    Command::new(cargo_bin("cohort-cli", "cohort"))
}

fn write_cohort(dir: &Path) {
    SimCohort::new("authed", 23, 4).write(dir).unwrap();
    let out = cohort().arg("freeze").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `cmd` to its end, or kills it after `limit` (then panics: a
/// refused worker must stop by itself, not retry forever).
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn worker(dir: &Path, url: &str, extra: &[&str]) -> Command {
    let mut c = cohort();
    c.arg("worker")
        .arg(dir)
        .args(["--coordinator", url, "--slots", "2"])
        .args(extra)
        .env_remove("COHORT_CLUSTER_TOKEN");
    c
}

fn coordinator(dir: &Path, extra: &[&str], log: PathBuf) -> (Proc, u16) {
    let mut args = vec!["coordinator", dir.to_str().unwrap(), "--listen", "127.0.0.1:0", "--reconcile-ms", "100"];
    args.extend_from_slice(extra);
    let p = Proc::spawn(&cargo_bin("cohort-cli", "cohort"), &args, &[], log);
    let port = p.url_after("listening on ").rsplit(':').next().unwrap().parse().unwrap();
    (p, port)
}

/// The coordinator with a token: no token and a wrong one are refused as
/// `Unauthenticated`, the right one (from the environment) runs the cohort.
#[test]
fn a_worker_without_the_cluster_token_or_with_another_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let (mut coord, port) =
        coordinator(&dir, &["--token-file", token_file.to_str().unwrap()], tmp.path().join("coordinator.log"));
    let url = format!("http://127.0.0.1:{port}");

    let none = run_bounded(worker(&dir, &url, &[]), Duration::from_secs(30));
    assert!(!none.status.success(), "{}", said(&none));
    assert!(said(&none).contains("requires the cluster token"), "{}", said(&none));

    let mut wrong = worker(&dir, &url, &[]);
    wrong.env("COHORT_CLUSTER_TOKEN", WRONG);
    let wrong = run_bounded(wrong, Duration::from_secs(30));
    assert!(!wrong.status.success(), "{}", said(&wrong));
    assert!(said(&wrong).contains("wrong cluster token"), "{}", said(&wrong));

    let mut right = worker(&dir, &url, &[]);
    right.env("COHORT_CLUSTER_TOKEN", TOKEN);
    let right = run_bounded(right, Duration::from_secs(60));
    assert!(right.status.success(), "{}", said(&right));
    assert!(said(&right).contains("worker done: leased 4, reported 4"), "{}", said(&right));

    assert_eq!(coord.terminate(), Some(0));
    let log = coord.log_text();
    assert!(log.contains("refused a call without the cluster token"), "{log}");
    assert!(log.contains("refused a call with a wrong cluster token"), "{log}");
    for out in [said(&none), said(&wrong), said(&right), log] {
        assert!(!out.contains(TOKEN) && !out.contains(WRONG), "a token was printed:\n{out}");
    }
}

/// `openssl` with `args` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("the openssl command");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `openssl req` making a new P-256 key (unencrypted), with `args`.
fn new_key_request(dir: &Path, args: &[&str]) {
    let mut all = vec!["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    all.extend_from_slice(args);
    openssl(dir, &all);
}

/// A CA named `name` in `dir`: `name.pem`, `name.key`.
fn ca(dir: &Path, name: &str) {
    let (pem, key, subject) = (format!("{name}.pem"), format!("{name}.key"), format!("/CN={name}"));
    let ca_ext = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"];
    let mut args = vec!["-x509", "-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subject];
    args.extend_from_slice(&ca_ext);
    new_key_request(dir, &args);
}

/// A leaf `name` signed by CA `ca`, with `extensions` (an openssl
/// extensions file body).
fn leaf(dir: &Path, ca: &str, name: &str, extensions: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let (key, csr, pem, subject) =
        (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("/CN={name}"));
    new_key_request(dir, &["-keyout", &key, "-out", &csr, "-subj", &subject]);
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}

/// Mutual TLS: the coordinator requires a client certificate from its
/// client CA. A worker with none, and one whose certificate another CA
/// signed, are refused (and stop, naming TLS; the coordinator logs each
/// refused handshake at WARN with the peer's address); one with a
/// certificate from the client CA runs the cohort.
#[test]
fn with_mutual_tls_a_worker_without_a_client_certificate_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let pki = tmp.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    ca(&pki, "ca");
    ca(&pki, "other-ca");
    leaf(&pki, "ca", "coordinator", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    leaf(&pki, "ca", "worker", "extendedKeyUsage=clientAuth\n");
    leaf(&pki, "other-ca", "stranger", "extendedKeyUsage=clientAuth\n");
    let f = |n: &str| pki.join(n).to_str().unwrap().to_owned();
    let (mut coord, port) = coordinator(
        &dir,
        &["--tls-cert", &f("coordinator.pem"), "--tls-key", &f("coordinator.key"), "--tls-ca", &f("ca.pem")],
        tmp.path().join("coordinator.log"),
    );
    let url = format!("https://127.0.0.1:{port}");

    let anonymous = run_bounded(worker(&dir, &url, &["--tls-ca", &f("ca.pem")]), Duration::from_secs(30));
    assert!(!anonymous.status.success(), "{}", said(&anonymous));
    assert!(said(&anonymous).contains("TLS"), "{}", said(&anonymous));

    let stranger = run_bounded(
        worker(
            &dir,
            &url,
            &["--tls-ca", &f("ca.pem"), "--tls-cert", &f("stranger.pem"), "--tls-key", &f("stranger.key")],
        ),
        Duration::from_secs(30),
    );
    assert!(!stranger.status.success(), "{}", said(&stranger));
    assert!(said(&stranger).contains("TLS"), "{}", said(&stranger));

    let member = run_bounded(
        worker(&dir, &url, &["--tls-ca", &f("ca.pem"), "--tls-cert", &f("worker.pem"), "--tls-key", &f("worker.key")]),
        Duration::from_secs(60),
    );
    assert!(member.status.success(), "{}", said(&member));
    assert!(said(&member).contains("worker done: leased 4, reported 4"), "{}", said(&member));
    assert_eq!(coord.terminate(), Some(0), "{}", coord.log_text());
    // The coordinator said who it refused, and why, at WARN: both the
    // worker without a certificate and the one from another CA.
    let log = coord.log_text();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("refused a TLS handshake")).collect();
    assert!(refused.len() >= 2, "two refused handshakes, each said:\n{log}");
    for line in &refused {
        assert!(line.contains("WARN") && line.contains("peer=127.0.0.1:"), "{line}");
    }
    assert!(refused.iter().any(|l| l.contains("certificate")), "rustls's reason names the certificate:\n{log}");
}
