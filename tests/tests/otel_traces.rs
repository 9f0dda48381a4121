//! OpenTelemetry traces across processes (issue 13): `cohort coordinator`,
//! `cohort worker` and `cohort judge-proxy`, each its own process, export
//! to an OTLP receiver in this test built from the protocol's own
//! definitions (`opentelemetry-proto`: its tonic `TraceService` server for
//! gRPC, its prost messages for HTTP/protobuf). The coordinator and the
//! proxy export over gRPC, the worker over HTTP/protobuf, configured only
//! by the standard `OTEL_*` variables. The mock provider (a TEST DOUBLE)
//! serves the judge a dated snapshot where `judge-1` was requested.
//!
//! It proves, for a run: one tree holds the coordinator's root span of the
//! run and, below it, each attempt's lease span (retried runs too), the
//! worker's run, attempt, adapter (GenAI `chat`), judge-batch spans, the
//! proxy's judge span and its upstream GenAI span, and the coordinator's
//! record of the result, each with its parent in the right process; the
//! upstream span names the served snapshot in `gen_ai.response.model`;
//! no key, prompt or output is in any attribute. With
//! `OTEL_METRICS_EXPORTER=otlp` the same processes push their metrics to
//! the receiver, with the figures their `/metrics` has.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cohort_tests::otlp::{self, Got};
use cohort_tests::{SimCohort, cargo_bin, write_judge_file};
use judge_proxy_support::{Proc, mock_judge_env};

const TEAM_KEY: &str = "team-key-otel-traces-5d0c2f";
const MOCK_KEY: &str = "sk-mock-provider-otel-0007";
const SERVED: &str = "judge-1-2026-05-01";

fn otel_env<'a>(endpoint: &'a str, protocol: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        // Exported every 100 ms rather than every 5 s, so the test is quick.
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        // Metrics pushed over OTLP too, every 200 ms (and at the end).
        ("OTEL_METRICS_EXPORTER", "otlp"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
    ]
}

fn write_cohort(dir: &Path) {
    SimCohort { batch_size: Some(4), concurrency: 2, ..SimCohort::new("traced", 17, 3) }.write(dir).unwrap();
    // The judge is frozen as the snapshot that serves the alias.
    // Half the attempts hit an outage (seeded: the same ones every time),
    // retried at once, so some runs have several attempts.
    let toml = std::fs::read_to_string(dir.join("cohort.toml"))
        .unwrap()
        .replace("unsupported_claim_rate = 0.3 }", "unsupported_claim_rate = 0.3, outage_rate = 0.5 }");
    let retry = "[retry]\nmax_attempts = 8\ninitial_backoff_ms = 10\nmax_backoff_ms = 20\nmax_total_secs = 60\n";
    std::fs::write(dir.join("cohort.toml"), format!("{toml}served_model = \"{SERVED}\"\n\n{retry}")).unwrap();
    let out = Command::new(cargo_bin("cohort-cli", "cohort")).arg("freeze").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Waits until every service has sent at least one span after its
/// process ended (they flush on a graceful stop).
fn wait_for_services(receiver: &otlp::Receiver, services: &[&str]) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        let seen: Vec<String> = receiver.spans().iter().map(|s| s.service.clone()).collect();
        if services.iter().all(|s| seen.iter().any(|x| x == s)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen: std::collections::BTreeSet<String> = receiver.spans().iter().map(|s| s.service.clone()).collect();
    panic!("spans from {services:?} expected; got spans from {seen:?}");
}

#[test]
fn a_runs_spans_form_one_trace_across_coordinator_worker_and_judge_proxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let receiver = runtime.block_on(otlp::Receiver::start());
    let (grpc, http) = (receiver.grpc_url.clone(), receiver.http_url.clone());

    let alias = format!("judge-1={SERVED},{SERVED},1");
    let (_mock, mut proxy, proxy_url, _) = mock_judge_env(
        tmp.path(),
        &["--alias", &alias],
        ("TRACE_TEAM_KEY", TEAM_KEY),
        MOCK_KEY,
        "",
        "",
        &otel_env(&grpc, "grpc"),
    );
    let judge = tmp.path().join("judge.toml");
    write_judge_file(&judge, &proxy_url, "TRACE_TEAM_KEY", 60).unwrap();

    let cohort = cargo_bin("cohort-cli", "cohort");
    let dir_s = dir.to_str().unwrap();
    let mut coordinator = Proc::spawn(
        &cohort,
        &["coordinator", dir_s, "--listen", "127.0.0.1:0", "--reconcile-ms", "100"],
        &otel_env(&grpc, "grpc"),
        tmp.path().join("coordinator.log"),
    );
    let coordinator_url = format!("http://{}", coordinator.url_after("listening on "));
    let mut worker_env = otel_env(&http, "http/protobuf");
    worker_env.push(("TRACE_TEAM_KEY", TEAM_KEY));
    // The worker prints its first line when it is done: the whole cohort.
    let worker = Proc::spawn(
        &cohort,
        &[
            "worker",
            dir_s,
            "--coordinator",
            &coordinator_url,
            "--slots",
            "2",
            "--no-capture",
            "--judge",
            judge.to_str().unwrap(),
        ],
        &worker_env,
        tmp.path().join("worker.log"),
    );
    assert!(worker.first_line.starts_with("worker done: leased "), "{}\n{}", worker.first_line, worker.log_text());
    assert_eq!(coordinator.terminate(), Some(0), "{}", coordinator.log_text());
    assert_eq!(proxy.terminate(), Some(0), "{}", proxy.log_text());
    wait_for_services(&receiver, &["cohort-coordinator", "cohort-worker", "cohort-judge-proxy"]);
    let spans = receiver.spans();

    // No secret, prompt or output in any attribute of any span.
    let prompt_words = "What is known about topic";
    for s in &spans {
        for (k, v) in &s.attributes {
            for secret in [TEAM_KEY, MOCK_KEY, prompt_words] {
                assert!(!v.contains(secret), "{k}={v:?} of span {:?} ({}) holds {secret:?}", s.name, s.service);
            }
        }
    }

    // Each planned run is one tree: one root span, `cohort run`, from the
    // coordinator, with every attempt's lease span as its child and every
    // other span's parent in the same trace, retried runs included.
    let roots: Vec<&Got> = spans.iter().filter(|s| s.name == "cohort run").collect();
    assert_eq!(roots.len(), 3, "one root per run: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let leases: Vec<&Got> = spans.iter().filter(|s| s.name == "lease run").collect();
    let mut retried = 0;
    for root in &roots {
        assert_eq!(root.service, "cohort-coordinator");
        assert!(root.parent.is_empty(), "the run's root has no parent");
        let in_trace: Vec<&Got> = spans.iter().filter(|s| s.trace == root.trace).collect();
        let tops: Vec<&&Got> = in_trace.iter().filter(|s| s.parent.is_empty()).collect();
        assert_eq!(
            tops.len(),
            1,
            "not one tree: {} roots in {:?}'s trace",
            tops.len(),
            root.attributes.get("cohort.run.id")
        );
        for s in &in_trace {
            assert!(
                s.parent.is_empty() || in_trace.iter().any(|p| p.id == s.parent),
                "{:?} from {} has a parent outside its run's trace",
                s.name,
                s.service
            );
        }
        let attempts = leases.iter().filter(|l| l.trace == root.trace).count();
        assert!(attempts >= 1, "a run without a lease span");
        assert!(
            leases.iter().filter(|l| l.trace == root.trace).all(|l| l.parent == root.id),
            "a lease beside the root"
        );
        if attempts > 1 {
            retried += 1;
        }
    }
    assert!(retried >= 1, "no run was retried: the test proves nothing about retried runs");
    let one = |trace: &[u8], service: &str, name: &str, parent: &[u8]| -> Got {
        let found: Vec<&Got> =
            spans.iter().filter(|s| s.trace == trace && s.service == service && s.name == name).collect();
        assert!(
            !found.is_empty(),
            "no {name:?} span from {service} in the trace; its spans: {:?}",
            spans
                .iter()
                .filter(|s| s.trace == trace)
                .map(|s| (&s.service, &s.name, hex::encode(&s.parent)))
                .collect::<Vec<_>>()
        );
        let child = found.iter().find(|s| s.parent == parent).unwrap_or_else(|| {
            panic!(
                "{name:?} from {service} is not a child of the expected span: parents {:?}",
                found.iter().map(|s| hex::encode(&s.parent)).collect::<Vec<_>>()
            )
        });
        (*child).clone()
    };
    let mut judged_runs = 0;
    for lease in &leases {
        assert_eq!(lease.service, "cohort-coordinator");
        // The run's ids are its root's, set once; a lease span carries what
        // differs by attempt, and starts no earlier than the run's root
        // (no duration: it marks the run's start).
        let root = roots.iter().find(|r| r.trace == lease.trace).unwrap();
        let run_id = root.attributes.get("cohort.run.id").unwrap().clone();
        for key in ["cohort.name", "cohort.question.id", "cohort.arm.id"] {
            assert!(root.attributes.contains_key(key), "the root has no {key}: {:?}", root.attributes);
        }
        assert!(lease.attributes.contains_key("cohort.worker.id"), "{:?}", lease.attributes);
        assert!(lease.attributes.get("cohort.attempt").is_some_and(|a| a.parse::<u32>().is_ok_and(|a| a >= 1)));
        assert!(
            !lease.attributes.contains_key("cohort.run.id"),
            "the run's ids are its root's: {:?}",
            lease.attributes
        );
        assert_eq!(root.start_ns, root.end_ns, "the run's root has no duration");
        assert!(root.start_ns > 0 && root.start_ns <= lease.start_ns && lease.start_ns <= lease.end_ns);
        let run = one(&lease.trace, "cohort-worker", "run", &lease.id);
        assert_eq!(run.attributes.get("cohort.run.id"), Some(&run_id));
        // An attempt that hit an outage has no outcome; the last one has.
        if !run.attributes.contains_key("cohort.outcome") {
            continue;
        }
        assert_eq!(run.attributes.get("cohort.outcome").map(String::as_str), Some("completed"));
        let attempt = one(&lease.trace, "cohort-worker", "attempt", &run.id);
        let adapter = one(&lease.trace, "cohort-worker", "chat sim-1", &attempt.id);
        assert_eq!(adapter.kind, 3, "the adapter call is a CLIENT span");
        assert_eq!(adapter.attributes.get("gen_ai.operation.name").map(String::as_str), Some("chat"));
        // The provider as the semantic conventions name one (cohort's own
        // name for the simulated system); the declared lineage beside it.
        assert_eq!(adapter.attributes.get("gen_ai.provider.name").map(String::as_str), Some("cohort.sim"));
        assert_eq!(adapter.attributes.get("cohort.vendor_lineage").map(String::as_str), Some("cohort-sim"));
        let recorded = one(&lease.trace, "cohort-coordinator", "record result", &run.id);
        assert_eq!(recorded.attributes.get("cohort.accepted").map(String::as_str), Some("true"));
        assert_eq!(recorded.attributes.get("cohort.run.id"), Some(&run_id));
        assert!(recorded.start_ns > 0 && recorded.start_ns <= recorded.end_ns);
        // The judge: worker batch -> proxy judge -> proxy upstream call.
        for batch in spans.iter().filter(|s| s.trace == lease.trace && s.name == "judge batch") {
            assert_eq!(batch.service, "cohort-worker");
            let judge = one(&lease.trace, "cohort-judge-proxy", "judge", &batch.id);
            let call = one(&lease.trace, "cohort-judge-proxy", "chat judge-1", &judge.id);
            assert_eq!(call.kind, 3, "the upstream call is a CLIENT span");
            assert_eq!(call.attributes.get("gen_ai.request.model").map(String::as_str), Some("judge-1"));
            assert_eq!(call.attributes.get("gen_ai.response.model").map(String::as_str), Some(SERVED));
            assert_eq!(call.attributes.get("gen_ai.provider.name").map(String::as_str), Some("openai"));
            assert_eq!(call.attributes.get("gen_ai.request.temperature").map(String::as_str), Some("0"));
            assert!(call.attributes.contains_key("gen_ai.usage.input_tokens"), "{:?}", call.attributes);
            assert!(call.attributes.contains_key("gen_ai.usage.output_tokens"), "{:?}", call.attributes);
            assert!(!call.attributes.contains_key("gen_ai.system"), "the deprecated name is not used");
            judged_runs += 1;
        }
    }
    assert!(judged_runs >= 1, "at least one run was judged through the proxy");
    // Every run and attempt span is in a trace the coordinator started:
    // nothing of a run is left in a trace of its own. (The worker's
    // pre-flight probe of the judge, before any run, is a trace of its own.)
    let run_traces: Vec<&Vec<u8>> = leases.iter().map(|l| &l.trace).collect();
    for s in spans.iter().filter(|s| ["run", "attempt"].contains(&s.name.as_str())) {
        assert!(run_traces.contains(&&s.trace), "{:?} from {} is outside every run's trace", s.name, s.service);
    }

    // Metrics over OTLP: each role's last figures, as its /metrics has them.
    let points = receiver.points();
    let last = |service: &str, metric: &str, attr: (&str, &str)| -> Option<f64> {
        points
            .iter()
            .rev()
            .find(|p| {
                p.service == service
                    && p.metric == metric
                    && p.attributes.get(attr.0).map(String::as_str) == Some(attr.1)
            })
            .map(|p| p.value)
    };
    let last_plain = |service: &str, metric: &str| -> Option<f64> {
        points.iter().rev().find(|p| p.service == service && p.metric == metric).map(|p| p.value)
    };
    assert_eq!(last_plain("cohort-coordinator", "cohort_coordinator_leases_granted_total"), Some(leases.len() as f64));
    assert_eq!(last("cohort-coordinator", "cohort_coordinator_runs_final", ("outcome", "completed")), Some(3.0));
    assert_eq!(last("cohort-worker", "cohort_worker_attempts_total", ("class", "ok")), Some(3.0));
    assert!(
        last("cohort-judge-proxy", "cohort_judge_proxy_served_total", ("served_model", SERVED))
            .is_some_and(|v| v >= 1.0),
        "the proxy's calls by served model: {:?}",
        points
            .iter()
            .filter(|p| p.service == "cohort-judge-proxy")
            .map(|p| &p.metric)
            .collect::<std::collections::BTreeSet<_>>()
    );
    println!(
        "otel traces: {} spans from 3 processes, 3 runs, {judged_runs} judge batches traced to the served model {SERVED}; {} metric points over OTLP",
        spans.len(),
        points.len()
    );
}

/// An export the build cannot carry out is refused at start, naming the
/// variable, with exit 2 (a script can tell a setting from a failure), and
/// the refusal never prints a header's value: compression (this build has
/// none), OTLP/gRPC over TLS, a header entry that is not `key=value`.
#[test]
fn an_export_this_build_cannot_do_is_refused_at_start_without_printing_a_header() {
    let secret = "Bearer%20otlp-secret-77e1";
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")], "compression \"gzip\""),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.invalid:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "TLS",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=a,otlp-secret-77e1")],
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2",
        ),
    ];
    for (vars, expected) in cases {
        let mut command = Command::new(cargo_bin("cohort-cli", "cohort"));
        command
            .args(["freeze", "does-not-exist"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
            .env("OTEL_EXPORTER_OTLP_HEADERS", format!("authorization={secret}"));
        for (k, v) in vars {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{vars:?}: {stderr}");
        assert!(stderr.contains(expected), "{vars:?}: {stderr}");
        assert!(!stderr.contains("otlp-secret-77e1"), "a header's value was printed: {stderr}");
    }
}
