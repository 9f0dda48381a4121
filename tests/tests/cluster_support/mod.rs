//! What the cluster and chaos tests share: a cohort written and frozen in a
//! temporary directory (the simulated 500-run one by default, or any size,
//! answered by the sim or by a call-counting `command` product);
//! `cohort coordinator` and `cohort worker` processes with their output in
//! files, all killed when the [`Cluster`] is dropped (and their log tails
//! printed if the test failed); [`check_ledger`], the invariants the tests
//! hold the ledger to; and [`read_calls`], which turns the counting
//! product's call log into calls per run, so [`Figures::add_calls`] can
//! prove no run was executed more often than the ledger explains.

#![allow(dead_code)]
// Test code: a failed unwrap is a failed test (clippy's allow-unwrap-in-tests
// covers `#[test]` functions only, not the helpers they share).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cohort_core::hash::sha256_hex;
use cohort_core::lifecycle;
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::redis::RedisLedger;
use cohort_ledger::{Ledger, RunStateKind, Status};
use cohort_tests::{cargo_bin, free_port};

/// The cohort's name (and so the ledger's Redis hash tag).
pub const COHORT_NAME: &str = "cluster-sim";
/// Questions in the default cohort ([`write_and_freeze`]); with [`ARMS`]
/// they make [`PLANNED`] runs. [`ClusterCohort::questions`] sets any other
/// size.
pub const QUESTIONS: usize = 250;
pub const ARMS: [&str; 2] = ["sim-a", "sim-b"];
pub const PLANNED: u64 = (QUESTIONS * ARMS.len()) as u64;

/// The leases of the 500-run tests: short, so a killed worker's runs come
/// back quickly.
pub const DEFAULT_LEASE_TTL_MS: u64 = 1500;
pub const DEFAULT_HEARTBEAT_MS: u64 = 300;

/// How long the coordinator may take to print that it listens.
const COORDINATOR_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The simulated system and the policy of one test cohort.
#[derive(Debug, Clone)]
pub struct SimCohort {
    /// Mean latency of an answer (the sim varies it by +-50 %).
    pub latency_ms: u64,
    pub refusal_rate: f64,
    pub failure_rate: f64,
    pub timeout_rate: f64,
    pub outage_rate: f64,
    /// Per-arm concurrency cap.
    pub concurrency: u32,
    pub max_attempts: u32,
}

/// What answers a [`ClusterCohort`]'s arms.
#[derive(Debug, Clone)]
pub enum Product {
    /// cohort's built-in `sim` adapter, with the latency and injected faults
    /// of the [`SimCohort`] (its `concurrency` and `max_attempts` are
    /// ignored: the [`ClusterCohort`]'s apply).
    Sim(SimCohort),
    /// The real `command` adapter running a `/bin/sh` script written next
    /// to the cohort (see [`product_paths`]): each call appends
    /// `<unix_ms> <arm> <first line of the prompt>` to the call log, sleeps
    /// `latency_ms`, and answers with one cited claim and a reference list.
    /// It injects no faults: every attempt it answers is `ok`.
    Counting { latency_ms: u64 },
    /// The counting product, whose first call for every `empty_first_every`-th
    /// question (by its number, on each arm) answers nothing: an
    /// `empty_content` outage, retried, so those runs have two attempts and
    /// two calls (see [`ClusterCohort::outage_runs`]).
    CountingWithOutages { latency_ms: u64, empty_first_every: usize },
}

impl Product {
    /// The counting product's latency and outage period (0: none), if it is one.
    fn counting(&self) -> Option<(u64, usize)> {
        match *self {
            Product::Sim(_) => None,
            Product::Counting { latency_ms } => Some((latency_ms, 0)),
            Product::CountingWithOutages { latency_ms, empty_first_every } => Some((latency_ms, empty_first_every)),
        }
    }
}

/// A cohort of any size for the cluster tests: `questions` x [`ARMS`] runs.
#[derive(Debug, Clone)]
pub struct ClusterCohort {
    pub questions: usize,
    pub product: Product,
    /// Per-arm concurrency cap.
    pub concurrency: u32,
    pub max_attempts: u32,
}

impl ClusterCohort {
    /// The default cohort of [`write_and_freeze`]: [`QUESTIONS`] questions
    /// answered by the sim.
    pub fn sim(sim: &SimCohort) -> ClusterCohort {
        ClusterCohort {
            questions: QUESTIONS,
            product: Product::Sim(sim.clone()),
            concurrency: sim.concurrency,
            max_attempts: sim.max_attempts,
        }
    }

    /// The runs it plans.
    pub fn planned(&self) -> u64 {
        (self.questions * ARMS.len()) as u64
    }

    /// The runs whose first call the product answers with nothing
    /// ([`Product::CountingWithOutages`]): exactly one `empty_content`
    /// attempt each, then a completed second attempt.
    pub fn outage_runs(&self) -> Vec<String> {
        let every = self.product.counting().map_or(0, |(_, every)| every);
        if every == 0 {
            return Vec::new();
        }
        (1..=self.questions)
            .filter(|i| i % every == 0)
            .flat_map(|i| ARMS.iter().map(move |arm| format!("q{i:03}:{arm}:1")))
            .collect()
    }

    /// Whether the product injects refusals, failures, timeouts and
    /// outages: [`check_ledger_of`] then requires that each happened.
    fn injects_faults(&self) -> bool {
        matches!(&self.product, Product::Sim(s) if s.refusal_rate > 0.0 && s.failure_rate > 0.0 && s.timeout_rate > 0.0 && s.outage_rate > 0.0)
    }
}

/// The counting product's script and call log for the cohort in `dir`:
/// beside the cohort directory, not in it (the cohort freezes its own
/// files only).
pub fn product_paths(dir: &Path) -> (PathBuf, PathBuf) {
    let base = dir.parent().expect("the cohort directory has a parent");
    (base.join("counting-product.sh"), base.join("calls.log"))
}

/// The counting product. The call is logged before anything else, so a
/// call whose worker is killed mid-way still counts (it did happen: the
/// product was asked). One line of well under PIPE_BUF bytes appended with
/// `>>` (O_APPEND) is one write, so concurrent calls never interleave.
/// The rest of stdin is read so the adapter's writer never sees a broken
/// pipe. With `COUNTING_EMPTY_EVERY` = N > 0, the first call (the log holds
/// no earlier one) for a question whose number is a multiple of N answers
/// nothing (`empty_content`).
const COUNTING_PRODUCT: &str = r#"#!/bin/sh
# The call-counting product of cohort's cluster tests (SIMULATED).
# $1: the arm. Environment: COUNTING_LOG (the call log), COUNTING_LATENCY
# (seconds to sleep), COUNTING_EMPTY_EVERY (0: never answer empty).
IFS= read -r question
cat >/dev/null
printf '%s %s %s\n' "$(date +%s%3N)" "$1" "$question" >> "$COUNTING_LOG"
sleep "$COUNTING_LATENCY"
every="${COUNTING_EMPTY_EVERY:-0}"
n="${question#Simulated question }"
n="${n%%:*}"
if [ "$every" -gt 0 ] && [ $((n % every)) -eq 0 ] && [ "$(grep -cF " $1 $question" "$COUNTING_LOG")" -eq 1 ]; then
  exit 0
fi
printf '# Answer of the counting product, arm %s (SIMULATED)\n\n' "$1"
printf 'The counting product records that this question was asked [1].\n\n'
printf '## References\n\n1. [Counting product call log](https://counting.cohort.invalid/%s)\n' "$1"
"#;

/// Writes the five cohort files of the default 500-run sim cohort into
/// `dir` (created) and freezes it with the real `cohort freeze`.
pub fn write_and_freeze(dir: &Path, sim: &SimCohort) {
    write_and_freeze_cohort(dir, &ClusterCohort::sim(sim));
}

/// Writes the five cohort files of `cohort` into `dir` (created), and the
/// counting product's script beside it if it uses one, and freezes it with
/// the real `cohort freeze`.
pub fn write_and_freeze_cohort(dir: &Path, cohort: &ClusterCohort) {
    fs::create_dir_all(dir).unwrap();
    let (script, log) = product_paths(dir);
    let (what, timeout) = match cohort.product {
        // Simulated stalls end at the per-run deadline: keep it short.
        Product::Sim(_) => ("sim", 1),
        // Nothing stalls; the deadline only bounds a call on a busy machine.
        Product::Counting { .. } | Product::CountingWithOutages { .. } => ("counting command", 60),
    };
    let mut toml = format!(
        "# A SIMULATED cohort for the cross-process tests: {} questions x {} {what} arms.\n\
         name = \"{COHORT_NAME}\"\nseed = 4\nwindow_hours = 48\nrun_timeout_secs = {timeout}\n",
        cohort.questions,
        ARMS.len()
    );
    for arm in ARMS {
        let (adapter, settings) = match &cohort.product {
            Product::Sim(sim) => (
                "sim",
                format!(
                    "{{ latency_ms = {}, refusal_rate = {}, failure_rate = {}, timeout_rate = {}, outage_rate = {} }}",
                    sim.latency_ms, sim.refusal_rate, sim.failure_rate, sim.timeout_rate, sim.outage_rate
                ),
            ),
            Product::Counting { latency_ms } | Product::CountingWithOutages { latency_ms, .. } => (
                "command",
                format!(
                    "{{ program = \"/bin/sh\", args = [{:?}, \"{arm}\"], timeout_secs = 30, version_label = \"{arm}-1\", \
                     env = {{ COUNTING_LOG = {:?}, COUNTING_LATENCY = \"{}\", COUNTING_EMPTY_EVERY = \"{}\" }} }}",
                    script.display().to_string(),
                    log.display().to_string(),
                    *latency_ms as f64 / 1000.0,
                    cohort.product.counting().map_or(0, |(_, every)| every)
                ),
            ),
        };
        write!(
            toml,
            "\n[[arms]]\nid = \"{arm}\"\nlabel = \"Simulated system {arm} (SIMULATED)\"\nadapter = \"{adapter}\"\n\
             pinned_version = \"{arm}-1\"\nvendor_lineage = \"cohort-sim\"\nconcurrency = {}\nsettings = {settings}\n",
            cohort.concurrency
        )
        .unwrap();
    }
    write!(
        toml,
        "\n[retry]\nmax_attempts = {}\ninitial_backoff_ms = 50\nmax_backoff_ms = 200\nmax_total_secs = 60\n",
        cohort.max_attempts
    )
    .unwrap();
    fs::write(dir.join("cohort.toml"), toml).unwrap();
    if cohort.product.counting().is_some() {
        fs::write(&script, COUNTING_PRODUCT).unwrap();
        fs::write(&log, "").unwrap();
    }

    let categories = cohort_core::config::DEFAULT_CATEGORIES;
    let questions: Vec<serde_json::Value> = (1..=cohort.questions)
        .map(|i| {
            serde_json::json!({
                "id": format!("q{i:03}"),
                "category": categories[i % categories.len()],
                "text": format!("Simulated question {i}: what does the published evidence establish about topic {i}?"),
            })
        })
        .collect();
    fs::write(dir.join("questions.json"), serde_json::to_vec_pretty(&questions).unwrap()).unwrap();

    let quickstart = cohort_tests::workspace_root().join("examples/quickstart");
    for file in ["suffix.txt", "protocol.md", "rubric.md"] {
        fs::copy(quickstart.join(file), dir.join(file)).unwrap();
    }

    let out = Command::new(cohort_bin()).arg("freeze").arg(dir).output().unwrap();
    assert!(out.status.success(), "cohort freeze failed: {}", String::from_utf8_lossy(&out.stderr));
}

// === the counting product's call log ===

/// The calls the counting product logged, by run id.
#[derive(Debug, Default)]
pub struct Calls {
    /// Run id (`{question_id}:{arm}:1`) -> calls.
    pub per_run: BTreeMap<String, u64>,
    pub total: u64,
    /// Calls whose prompt was empty: the script started but its stdin
    /// closed before the prompt was written (the worker died, or dropped
    /// the call, first). The product was asked nothing, so no run was
    /// executed; they are counted, not attributed.
    pub without_prompt: u64,
    /// Lines that name no planned question or arm (each one a violation).
    pub unreadable: Vec<String>,
}

/// Reads the counting product's call log of the cohort in `dir` and maps
/// each call to its run: the first line of the prompt is the question's
/// text (unique per question, looked up in the cohort's questions.json),
/// the arm is the script's argument. Read it once the workers are gone: a
/// killed worker's script may still log its call a moment after the kill.
pub fn read_calls(dir: &Path) -> Calls {
    let questions: Vec<serde_json::Value> =
        serde_json::from_slice(&fs::read(dir.join("questions.json")).unwrap()).unwrap();
    let by_text: HashMap<&str, &str> =
        questions.iter().map(|q| (q["text"].as_str().unwrap(), q["id"].as_str().unwrap())).collect();
    let (_, log) = product_paths(dir);
    let text = fs::read_to_string(&log).unwrap_or_else(|e| panic!("cannot read the call log {}: {e}", log.display()));
    let mut calls = Calls::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (_at, arm, question) = (parts.next(), parts.next(), parts.next());
        if question.is_none_or(str::is_empty) && arm.is_some_and(|a| ARMS.contains(&a)) {
            calls.without_prompt += 1;
            continue;
        }
        match (arm, question.and_then(|q| by_text.get(q))) {
            (Some(arm), Some(qid)) if ARMS.contains(&arm) => {
                *calls.per_run.entry(format!("{qid}:{arm}:1")).or_default() += 1;
                calls.total += 1;
            }
            _ => calls.unreadable.push(line.to_owned()),
        }
    }
    calls
}

/// The `cohort` binary, built once per test process: `cargo_bin` asks cargo
/// every time, which may wait for the build lock or rebuild mid-test, and a
/// process restarted under chaos must be the same program it replaces.
pub fn cohort_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| cargo_bin("cohort-cli", "cohort")).clone()
}

// === processes ===

/// One child process with stdout and stderr in files; SIGKILLed on drop.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// How it ended, once it has.
    pub exit: Option<ExitStatus>,
}

impl Proc {
    fn spawn(name: &str, program: &Path, args: &[String], logs: &Path) -> Proc {
        let stdout = logs.join(format!("{name}.out"));
        let stderr = logs.join(format!("{name}.err"));
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name: name.to_owned(), child: Some(child), stdout, stderr, exit: None }
    }

    /// SIGKILL (on Unix `Child::kill` sends SIGKILL), then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            self.exit = child.wait().ok();
        }
    }

    /// Whether it has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        if let Some(child) = &mut self.child
            && let Ok(Some(status)) = child.try_wait()
        {
            self.exit = Some(status);
            self.child = None;
        }
        self.child.is_none()
    }

    fn tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for path in [&self.stdout, &self.stderr] {
            let text = fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            writeln!(out, "--- {} (last {} of {} lines)", path.display(), all.len() - from, all.len()).unwrap();
            for line in &all[from..] {
                writeln!(out, "{line}").unwrap();
            }
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A coordinator and its workers on one frozen cohort and one Redis. Every
/// process it started is killed when it is dropped, whether the test passed
/// or not; if the test is failing, the tails of every log are printed.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    logs: PathBuf,
    redis_url: String,
    /// The coordinator's port, kept across restarts so workers find it again.
    port: u16,
    slots: u32,
    /// The coordinator's `--lease-ttl-ms` and `--heartbeat-ms`
    /// ([`Cluster::with_leases`]).
    lease_ttl_ms: u64,
    heartbeat_ms: u64,
    pub coordinator: Option<Proc>,
    pub workers: Vec<Proc>,
    /// Processes that ended (killed or exited), kept for their logs.
    ended: Vec<Proc>,
    coordinator_starts: u32,
    worker_starts: u32,
    /// Added to the arguments of every coordinator (and worker) started
    /// from now on (`--ops-listen 127.0.0.1:0`, say).
    pub coordinator_args: Vec<String>,
    pub worker_args: Vec<String>,
    /// Where the coordinator listens and workers reach it (127.0.0.1, or
    /// the address of the host a network-namespace test made).
    host: String,
}

impl Cluster {
    /// A cluster for the frozen cohort `dir`; logs go to `logs` (created).
    pub fn new(dir: &Path, logs: &Path, redis_url: &str, slots: u32) -> Cluster {
        fs::create_dir_all(logs).unwrap();
        Cluster {
            dir: dir.to_owned(),
            logs: logs.to_owned(),
            redis_url: redis_url.to_owned(),
            port: free_port().unwrap(),
            slots,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            coordinator: None,
            workers: Vec::new(),
            ended: Vec::new(),
            coordinator_starts: 0,
            worker_starts: 0,
            coordinator_args: Vec::new(),
            worker_args: Vec::new(),
            host: "127.0.0.1".to_owned(),
        }
    }

    /// The coordinator listens on `host` (an address of this machine) and
    /// workers reach it there, from the next start on.
    pub fn with_host(mut self, host: &str) -> Cluster {
        self.host = host.to_owned();
        self
    }

    /// Leases that live `ttl_ms`, renewed every `heartbeat_ms`, from the next
    /// coordinator start on.
    pub fn with_leases(mut self, ttl_ms: u64, heartbeat_ms: u64) -> Cluster {
        self.lease_ttl_ms = ttl_ms;
        self.heartbeat_ms = heartbeat_ms;
        self
    }

    /// How long a lease lives.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    /// Starts the coordinator on the cluster's port and waits until it says
    /// it listens.
    pub fn start_coordinator(&mut self) {
        assert!(self.coordinator.is_none(), "a coordinator is already running");
        self.coordinator_starts += 1;
        let name = format!("coordinator-{}", self.coordinator_starts);
        let mut args: Vec<String> = vec![
            "coordinator".into(),
            self.dir.display().to_string(),
            "--redis".into(),
            self.redis_url.clone(),
            "--listen".into(),
            format!("{}:{}", self.host, self.port),
            "--lease-ttl-ms".into(),
            self.lease_ttl_ms.to_string(),
            "--heartbeat-ms".into(),
            self.heartbeat_ms.to_string(),
            "--reconcile-ms".into(),
            "100".into(),
        ];
        args.extend(self.coordinator_args.iter().cloned());
        let mut proc = Proc::spawn(&name, &cohort_bin(), &args, &self.logs);
        let deadline = Instant::now() + COORDINATOR_READY_TIMEOUT;
        loop {
            if fs::read_to_string(&proc.stdout).unwrap_or_default().contains("coordinator listening on") {
                break;
            }
            if proc.has_exited() {
                let tail = proc.tail(30);
                self.ended.push(proc);
                panic!("{name} exited before listening ({:?}):\n{tail}", self.ended.last().and_then(|p| p.exit));
            }
            if Instant::now() > deadline {
                self.ended.push(proc);
                panic!("{name} did not say it listens within {COORDINATOR_READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.coordinator = Some(proc);
    }

    /// SIGKILLs the coordinator.
    pub fn kill_coordinator(&mut self) {
        if let Some(mut proc) = self.coordinator.take() {
            proc.kill();
            self.ended.push(proc);
        }
    }

    /// Starts one more worker (`w1`, `w2`, ...).
    pub fn start_worker(&mut self) {
        self.start_worker_in(None);
    }

    /// Starts one more worker, inside the network namespace `netns` when
    /// given (`ip netns exec NETNS cohort worker ...`: another host).
    pub fn start_worker_in(&mut self, netns: Option<&str>) {
        self.worker_starts += 1;
        let name = format!("w{}", self.worker_starts);
        let mut args: Vec<String> = vec![
            "worker".into(),
            self.dir.display().to_string(),
            "--coordinator".into(),
            format!("http://{}:{}", self.host, self.port),
            "--slots".into(),
            self.slots.to_string(),
            "--redis".into(),
            self.redis_url.clone(),
            "--name".into(),
            name.clone(),
        ];
        args.extend(self.worker_args.iter().cloned());
        let proc = match netns {
            None => Proc::spawn(&name, &cohort_bin(), &args, &self.logs),
            Some(ns) => {
                let mut wrapped: Vec<String> = vec!["netns".into(), "exec".into(), ns.into()];
                wrapped.push(cohort_bin().display().to_string());
                wrapped.extend(args);
                Proc::spawn(&name, Path::new("ip"), &wrapped, &self.logs)
            }
        };
        self.workers.push(proc);
    }

    /// SIGKILLs the running worker at `index` of [`Cluster::running_workers`].
    pub fn kill_worker(&mut self, index: usize) -> String {
        let i = self.running_worker_indices()[index];
        let mut proc = self.workers.remove(i);
        proc.kill();
        let name = proc.name.clone();
        self.ended.push(proc);
        name
    }

    /// Freezes the running worker at `index` (SIGSTOP) for `pause`, then
    /// lets it go on (SIGCONT): a worker that lost its leases while it
    /// could not heartbeat, and then reports as if nothing happened.
    pub fn pause_worker(&mut self, index: usize, pause: Duration) -> String {
        let i = self.running_worker_indices()[index];
        let proc = &self.workers[i];
        let pid = proc.child.as_ref().map(|c| c.id().to_string()).unwrap();
        let signal = |sig: &str| {
            let status = Command::new("kill").args([sig, &pid]).status().unwrap();
            assert!(status.success(), "kill {sig} {pid} failed");
        };
        signal("-STOP");
        std::thread::sleep(pause);
        signal("-CONT");
        proc.name.clone()
    }

    fn running_worker_indices(&mut self) -> Vec<usize> {
        (0..self.workers.len()).filter(|&i| !self.workers[i].has_exited()).collect()
    }

    /// How many workers are still running.
    pub fn running_workers(&mut self) -> usize {
        self.running_worker_indices().len()
    }

    /// Whether every worker has exited (they do once the cohort is done).
    pub fn workers_finished(&mut self) -> bool {
        self.running_workers() == 0
    }

    /// Waits until every worker has exited by itself; panics at `deadline`.
    /// Returns the workers that did not exit successfully.
    pub fn wait_for_workers(&mut self, deadline: Instant, what: &str) -> Vec<String> {
        while !self.workers_finished() {
            if Instant::now() > deadline {
                panic!(
                    "{what}: the workers did not finish the cohort before the deadline; the ledger says:\n{}",
                    self.status_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.workers
            .iter()
            .filter(|w| !w.exit.is_some_and(|s| s.success()))
            .map(|w| format!("{} ended with {:?}", w.name, w.exit))
            .collect()
    }

    /// What `cohort status` prints now (for failure messages).
    pub fn status_text(&self) -> String {
        let out = Command::new(cohort_bin())
            .args(["status", &self.dir.display().to_string(), "--events", "20", "--redis", &self.redis_url])
            .output();
        match out {
            Ok(o) => format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            Err(e) => format!("cohort status could not run: {e}"),
        }
    }

    fn tails(&self) -> String {
        let mut out = String::new();
        for proc in self.ended.iter().chain(&self.workers).chain(&self.coordinator) {
            writeln!(out, "=== {} ({:?})", proc.name, proc.exit).unwrap();
            out.push_str(&proc.tail(20));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_coordinator();
        for mut w in self.workers.drain(..) {
            w.kill();
            self.ended.push(w);
        }
        if std::thread::panicking() {
            eprintln!("the cluster's logs (in {}):\n{}", self.logs.display(), self.tails());
        }
    }
}

// === chaos ===

/// xorshift64*: enough randomness to pick victims and pauses; the seed is
/// printed so a failing schedule can be replayed (`COHORT_CHAOS_SEED`).
pub struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let seed = std::env::var("COHORT_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1);
        println!("chaos: seed {seed} (set COHORT_CHAOS_SEED={seed} to replay the choices)");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

// === the ledger's invariants ===

/// What the ledger says at the end, and every invariant it breaks.
#[derive(Debug, Default)]
pub struct Figures {
    pub planned: u64,
    pub finished: u64,
    pub by_outcome: BTreeMap<Outcome, u64>,
    /// Recorded attempts (discarded reports excluded).
    pub attempts: u64,
    pub attempts_by_class: BTreeMap<AttemptClass, u64>,
    pub discarded: u64,
    /// The discarded reports by kind and worker (`result from w3`).
    pub discarded_by: BTreeMap<String, u64>,
    /// Runs with more than one attempt.
    pub retried_runs: u64,
    /// Planned runs without a final outcome.
    pub lost: u64,
    /// Runs with more than one `final` event.
    pub duplicated: u64,
    /// Recorded attempts by run id.
    pub attempts_per_run: BTreeMap<String, u64>,
    /// Run id -> outcome, for the runs that have one.
    pub outcomes: BTreeMap<String, Outcome>,
    /// From the counting product's call log ([`Figures::add_calls`]):
    /// calls in all, runs the product was called for more than once, and
    /// runs called more often than the ledger recorded attempts for them,
    /// i.e. re-executions no recorded attempt (such as a killed worker's
    /// `worker_lost`) explains.
    pub calls: u64,
    /// Scripts started that got no prompt ([`Calls::without_prompt`]).
    pub calls_without_prompt: u64,
    pub runs_called_more_than_once: u64,
    pub unexplained_reexecutions: u64,
    pub violations: Vec<String>,
}

impl Figures {
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.by_outcome.get(&o).copied().unwrap_or(0)
    }

    pub fn class(&self, c: AttemptClass) -> u64 {
        self.attempts_by_class.get(&c).copied().unwrap_or(0)
    }

    /// Holds the counting product's calls against the ledger: every call
    /// names a planned run; every run the product answered (`completed`)
    /// was called; and no run was called more often than it has recorded
    /// attempts (each call is one attempt, recorded when it reports or, for
    /// a killed or frozen worker, when its lease expires as `worker_lost`).
    pub fn add_calls(&mut self, calls: &Calls) {
        self.calls = calls.total;
        self.calls_without_prompt = calls.without_prompt;
        for line in calls.unreadable.iter().take(10) {
            self.violations.push(format!("a call names no planned run: {line:?}"));
        }
        let mut unexplained = Vec::new();
        for (run, &n) in &calls.per_run {
            let Some(&attempts) = self.attempts_per_run.get(run) else {
                self.violations.push(format!("the product was called for {run}, which the ledger does not hold"));
                continue;
            };
            if n > 1 {
                self.runs_called_more_than_once += 1;
            }
            if n > attempts {
                self.unexplained_reexecutions += 1;
                unexplained.push(format!("{run}: {n} calls, {attempts} attempts"));
            }
        }
        if !unexplained.is_empty() {
            self.violations.push(format!(
                "{} runs were called more often than they have attempts: {:?}",
                unexplained.len(),
                &unexplained[..unexplained.len().min(10)]
            ));
        }
        let uncalled: Vec<&String> = self
            .outcomes
            .iter()
            .filter(|(run, o)| **o == Outcome::Completed && !calls.per_run.contains_key(*run))
            .map(|(run, _)| run)
            .collect();
        if !uncalled.is_empty() {
            self.violations.push(format!(
                "{} runs completed without a call to the product: {:?}",
                uncalled.len(),
                &uncalled[..uncalled.len().min(10)]
            ));
        }
    }

    /// Panics listing every broken invariant.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} ledger invariant(s) broken:\n  {}\n(figures: planned {}, finished {}, outcomes {:?}, attempts {:?}, \
             discarded {:?}, lost {}, duplicated {}, calls {}, unexplained re-executions {})",
            self.violations.len(),
            self.violations.join("\n  "),
            self.planned,
            self.finished,
            self.by_outcome,
            self.attempts_by_class,
            self.discarded_by,
            self.lost,
            self.duplicated,
            self.calls,
            self.unexplained_reexecutions
        );
    }
}

/// Watches a cohort's progress through its ledger while processes come and
/// go; a call that fails (Redis restarting) answers `None`.
#[derive(Debug)]
pub struct LedgerProbe {
    runtime: tokio::runtime::Runtime,
    ledger: RedisLedger,
}

impl LedgerProbe {
    pub fn connect(redis_url: &str) -> LedgerProbe {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let ledger = runtime.block_on(RedisLedger::connect(redis_url, COHORT_NAME)).unwrap();
        LedgerProbe { runtime, ledger }
    }

    /// Runs with their final outcome so far.
    pub fn finished(&self) -> Option<u64> {
        self.runtime.block_on(async {
            let status = tokio::time::timeout(Duration::from_secs(2), self.ledger.status()).await.ok()?.ok()?;
            Some(status.finished)
        })
    }
}

/// Whether `class` may be the last attempt of a run the ledger ended with
/// `outcome`. A worker's final result fits core's `check_final` (the same
/// table both ledgers enforce); the ledger's own outcomes come from an
/// attempt: `unavailable` from the retry policy or closing after an
/// attempt class, `not_run` after excused attempts only.
fn class_fits(outcome: Outcome, class: AttemptClass) -> bool {
    match outcome {
        Outcome::Unavailable => lifecycle::reported_as_attempt(class),
        Outcome::NotRun => lifecycle::excused(class),
        _ => lifecycle::check_final(outcome, class).is_ok(),
    }
}

/// Reads the whole ledger of the default 500-run sim cohort
/// ([`write_and_freeze`]) at `redis_url` and checks it against the
/// invariants of issue 4, reading run records from the cohort directory's
/// artifact store.
pub fn check_ledger(redis_url: &str, dir: &Path) -> Figures {
    check_ledger_of(redis_url, dir, &ClusterCohort::sim(&DEFAULT_FAULTS))
}

/// What [`check_ledger`] assumes: a sim that injects every kind of fault
/// (only the rates' being non-zero matters to the check); the cluster test
/// runs it with a latency.
pub const DEFAULT_FAULTS: SimCohort = SimCohort {
    latency_ms: 0,
    refusal_rate: 0.05,
    failure_rate: 0.05,
    timeout_rate: 0.02,
    outage_rate: 0.1,
    concurrency: 16,
    max_attempts: 3,
};

/// [`check_ledger`] for `cohort`, as [`write_and_freeze_cohort`] wrote it:
/// its size, and whether its product injects faults that must show.
pub fn check_ledger_of(redis_url: &str, dir: &Path, cohort: &ClusterCohort) -> Figures {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(check_ledger_async(redis_url, dir, cohort))
}

/// The ledger's event stream keeps about this many events (`XADD MAXLEN ~`
/// in ledger/src/lua/common.lua); a longer history is cut.
const EVENTS_KEPT: usize = 100_000;

async fn check_ledger_async(redis_url: &str, dir: &Path, cohort: &ClusterCohort) -> Figures {
    let planned = cohort.planned();
    let per_arm = cohort.questions as u64;
    let ledger = RedisLedger::connect(redis_url, COHORT_NAME).await.unwrap();
    let status: Status = ledger.status().await.unwrap();
    let runs = ledger.runs().await.unwrap();
    let discarded = ledger.discarded().await.unwrap();
    // Read in pages: one reply of a 10,000-run cohort's whole history
    // outlasts the ledger connection's response timeout.
    let events = tokio::task::spawn_blocking({
        let url = redis_url.to_owned();
        move || read_events(&url)
    })
    .await
    .unwrap();
    let mut f = Figures {
        planned: status.planned,
        finished: status.finished,
        by_outcome: status.by_outcome.clone(),
        attempts_by_class: status.attempts_by_class.clone(),
        discarded: discarded.len() as u64,
        ..Figures::default()
    };
    for d in &discarded {
        *f.discarded_by.entry(format!("{} from {}", d.kind, d.worker)).or_default() += 1;
    }
    let mut v = Vec::new();

    if !status.done() {
        v.push(format!("status is not done: finished {} of {}", status.finished, status.planned));
    }
    if status.planned != planned || status.finished != planned {
        v.push(format!(
            "planned {} and finished {}, expected {planned} and {planned}",
            status.planned, status.finished
        ));
    }
    let by_outcome_sum: u64 = status.by_outcome.values().sum();
    if by_outcome_sum != status.planned {
        v.push(format!("the counts by outcome add up to {by_outcome_sum}, not the planned {}", status.planned));
    }
    if status.arms.len() != ARMS.len() {
        v.push(format!("{} arms in the status, expected {}", status.arms.len(), ARMS.len()));
    }
    for arm in &status.arms {
        let sum: u64 = arm.by_outcome.values().sum();
        if sum != arm.planned || arm.planned != per_arm {
            v.push(format!("arm {}: planned {}, outcomes add up to {sum}, expected {per_arm}", arm.id, arm.planned));
        }
    }
    if status.discarded != f.discarded {
        v.push(format!("status counts {} discarded reports, the list holds {}", status.discarded, f.discarded));
    }

    if runs.len() as u64 != planned {
        v.push(format!("{} runs in the ledger, expected {planned}", runs.len()));
    }
    let mut seen = HashMap::new();
    let mut row_outcomes: BTreeMap<Outcome, u64> = BTreeMap::new();
    let store = dir.join(".cohort/artifacts/sha256");
    for run in &runs {
        if seen.insert(run.run_id.clone(), ()).is_some() {
            v.push(format!("run {} is listed twice", run.run_id));
        }
        let Some(outcome) = run.outcome else {
            f.lost += 1;
            v.push(format!("run {} has no outcome (state {:?})", run.run_id, run.state));
            continue;
        };
        *row_outcomes.entry(outcome).or_default() += 1;
        f.outcomes.insert(run.run_id.clone(), outcome);
        if run.state != RunStateKind::Final {
            f.lost += 1;
            v.push(format!("run {} has outcome {outcome} but state {:?}", run.run_id, run.state));
        }
        let attempts = ledger.attempts(&run.run_id).await.unwrap();
        f.attempts += attempts.len() as u64;
        f.attempts_per_run.insert(run.run_id.clone(), attempts.len() as u64);
        if attempts.len() > 1 {
            f.retried_runs += 1;
        }
        if attempts.len() != run.attempts as usize {
            v.push(format!(
                "run {}: {} attempts recorded, the run counts {}",
                run.run_id,
                attempts.len(),
                run.attempts
            ));
        }
        for (i, a) in attempts.iter().enumerate() {
            if a.attempt as usize != i + 1 {
                v.push(format!("run {}: attempt {} is numbered {}", run.run_id, i + 1, a.attempt));
            }
            if i + 1 < attempts.len() && !lifecycle::run_retryable(a.class) && !lifecycle::excused(a.class) {
                v.push(format!("run {}: attempt {} ({}) was retried but is not an outage", run.run_id, i + 1, a.class));
            }
        }
        match attempts.last() {
            None if outcome != Outcome::NotRun => {
                v.push(format!("run {} is {outcome} without any attempt", run.run_id))
            }
            Some(last) if !class_fits(outcome, last.class) => {
                v.push(format!("run {} is {outcome} but its last attempt is {}", run.run_id, last.class));
            }
            _ => {}
        }
        if matches!(outcome, Outcome::Completed | Outcome::Refused | Outcome::Failed | Outcome::TimedOut) {
            check_record(&store, &run.run_id, &run.record_sha256, &attempts, &mut v);
        }
    }
    if row_outcomes != status.by_outcome {
        v.push(format!("the runs' outcomes {row_outcomes:?} differ from the counts {:?}", status.by_outcome));
    }
    let by_class_sum: u64 = status.attempts_by_class.values().sum();
    if by_class_sum != f.attempts {
        v.push(format!("{} attempts recorded on runs, the counts by class add up to {by_class_sum}", f.attempts));
    }

    let mut finals: HashMap<&str, u64> = HashMap::new();
    for (kind, run_id) in &events {
        if kind == "final" {
            *finals.entry(run_id.as_str()).or_default() += 1;
        }
    }
    f.duplicated = finals.values().filter(|&&n| n > 1).count() as u64;
    if f.duplicated > 0 {
        let mut dups: Vec<_> = finals.iter().filter(|(_, n)| **n > 1).collect();
        dups.sort();
        v.push(format!("{} runs have more than one final event: {:?}", f.duplicated, &dups[..dups.len().min(10)]));
    }
    let without_final: Vec<&str> =
        runs.iter().map(|r| r.run_id.as_str()).filter(|id| !finals.contains_key(id)).collect();
    if !without_final.is_empty() && events.len() >= EVENTS_KEPT {
        v.push(format!(
            "{} runs have no final event among the last {} events the ledger keeps: the history is cut, a longer \
             cohort cannot be checked for final events",
            without_final.len(),
            events.len()
        ));
    } else if !without_final.is_empty() {
        v.push(format!(
            "{} runs have no final event: {:?}",
            without_final.len(),
            &without_final[..without_final.len().min(10)]
        ));
    }
    if let Some(stray) = finals.keys().find(|id| !seen.contains_key(**id)) {
        v.push(format!("a final event names {stray:?}, which is not a planned run"));
    }

    // The injected faults happened: otherwise this proves much less.
    if cohort.injects_faults() {
        for o in [Outcome::Refused, Outcome::Failed, Outcome::TimedOut] {
            if f.outcome(o) == 0 {
                v.push(format!("no run ended {o}: the injected faults did not happen"));
            }
        }
        if f.retried_runs == 0 {
            v.push("no run was retried: the injected outages did not happen".to_owned());
        }
    }
    f.violations = v;
    f
}

/// Every event of the cohort's ledger as (kind, run id), oldest first,
/// read with `XRANGE ... COUNT 2000` pages over a plain connection (the
/// ledger's own `events` reads the newest N), an event per `run_id` of an
/// entry.
fn read_events(redis_url: &str) -> Vec<(String, String)> {
    use std::io::{BufRead, BufReader, Write as _};
    /// One RESP2 reply; bulk and simple strings as text, nil as empty.
    enum Resp {
        Text(String),
        Array(Vec<Resp>),
    }
    fn read(r: &mut BufReader<std::net::TcpStream>) -> Resp {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(1);
        match kind {
            "*" => match rest.parse::<i64>().unwrap() {
                n if n < 0 => Resp::Array(Vec::new()),
                n => Resp::Array((0..n).map(|_| read(r)).collect()),
            },
            "$" => match rest.parse::<i64>().unwrap() {
                n if n < 0 => Resp::Text(String::new()),
                n => {
                    let mut buf = vec![0; n as usize + 2];
                    std::io::Read::read_exact(r, &mut buf).unwrap();
                    buf.truncate(n as usize);
                    Resp::Text(String::from_utf8_lossy(&buf).into_owned())
                }
            },
            "+" | ":" => Resp::Text(rest.to_owned()),
            _ => panic!("redis answered {line:?}"),
        }
    }
    let addr = redis_url.trim_start_matches("redis://").trim_end_matches('/');
    let stream = std::net::TcpStream::connect(addr).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let key = format!("cohort:{{{COHORT_NAME}}}:events");
    let mut out = Vec::new();
    let mut start = "-".to_owned();
    loop {
        let args = ["XRANGE", key.as_str(), start.as_str(), "+", "COUNT", "2000"];
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            write!(req, "${}\r\n{a}\r\n", a.len()).unwrap();
        }
        writer.write_all(req.as_bytes()).unwrap();
        let Resp::Array(entries) = read(&mut reader) else { panic!("XRANGE answered a non-array") };
        let mut last = None;
        let n = entries.len();
        for entry in entries {
            let Resp::Array(mut parts) = entry else { panic!("an XRANGE entry is not an array") };
            let (Some(Resp::Array(fields)), Some(Resp::Text(id))) = (parts.pop(), parts.pop()) else {
                panic!("an XRANGE entry is not [id, fields]")
            };
            let texts: Vec<String> =
                fields.into_iter().map(|f| if let Resp::Text(t) = f { t } else { String::new() }).collect();
            // An entry is one event, or a batch's `final` events: a
            // `run_id` per run after the entry's `kind` (common.lua).
            let kind = texts.chunks(2).find(|kv| kv[0] == "kind").map(|kv| kv[1].clone()).unwrap_or_default();
            let runs: Vec<String> = texts.chunks(2).filter(|kv| kv[0] == "run_id").map(|kv| kv[1].clone()).collect();
            if runs.is_empty() {
                out.push((kind, String::new()));
            } else {
                out.extend(runs.into_iter().map(|run_id| (kind.clone(), run_id)));
            }
            last = Some(id);
        }
        match last {
            // `(` makes the next page start after the last id read.
            Some(id) if n == 2000 => start = format!("({id}"),
            _ => break,
        }
    }
    out
}

/// The run record `sha` exists in the store, hashes to its name, is the
/// record of `run_id`, and lists every attempt the ledger holds for the
/// run, in order (number, class, worker), marked complete.
fn check_record(store: &Path, run_id: &str, sha: &str, attempts: &[cohort_ledger::AttemptRecord], v: &mut Vec<String>) {
    if sha.len() != 64 {
        v.push(format!("run {run_id} has no record hash ({sha:?})"));
        return;
    }
    let path = store.join(&sha[..2]).join(sha);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            v.push(format!("run {run_id}: record {} cannot be read: {e}", path.display()));
            return;
        }
    };
    if sha256_hex(&bytes) != sha {
        v.push(format!("run {run_id}: record {sha} does not hash to its name"));
    }
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(record) if record["run_id"] == run_id => {
            let listed: Vec<(u64, String, String)> = record["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| (a["attempt"].as_u64().unwrap_or(0), a["class"].to_string(), a["worker"].to_string()))
                .collect();
            let ledger: Vec<(u64, String, String)> = attempts
                .iter()
                .map(|a| (u64::from(a.attempt), format!("\"{}\"", a.class), format!("{:?}", a.worker)))
                .collect();
            if listed != ledger || record["attempts_complete"] != true {
                let details: Vec<(u64, &str)> = attempts.iter().map(|a| (a.token, a.detail.as_str())).collect();
                let incomplete = if record["attempts_complete"] == true {
                    ""
                } else {
                    "; the record says its list is incomplete (the coordinator could not read the earlier attempts)"
                };
                v.push(format!(
                    "run {run_id}: the record lists attempts {listed:?}, the ledger {ledger:?} (tokens and details: \
                     {details:?}){incomplete}"
                ));
            }
        }
        Ok(record) => v.push(format!("run {run_id}: record {sha} is the record of {}", record["run_id"])),
        Err(e) => v.push(format!("run {run_id}: record {sha} is not JSON: {e}")),
    }
}
