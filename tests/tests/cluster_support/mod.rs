//! What the cluster and chaos tests share: a simulated 500-run cohort
//! written and frozen in a temporary directory; `cohort coordinator` and
//! `cohort worker` processes with their output in files, all killed when the
//! [`Cluster`] is dropped (and their log tails printed if the test failed);
//! and [`check_ledger`], the invariants both tests hold the ledger to.

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
use std::time::{Duration, Instant};

use cohort_coordinator::ledger::redis::RedisLedger;
use cohort_coordinator::ledger::{Ledger, RunStateKind, Status};
use cohort_core::hash::sha256_hex;
use cohort_core::lifecycle;
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_tests::{cargo_bin, free_port};

/// The cohort's name (and so the ledger's Redis hash tag).
pub const COHORT_NAME: &str = "cluster-sim";
/// Questions in the cohort; with [`ARMS`] they make [`PLANNED`] runs.
pub const QUESTIONS: usize = 250;
pub const ARMS: [&str; 2] = ["sim-a", "sim-b"];
pub const PLANNED: u64 = (QUESTIONS * ARMS.len()) as u64;

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

/// Writes the five cohort files into `dir` (created) and freezes it with
/// the real `cohort freeze`.
pub fn write_and_freeze(dir: &Path, sim: &SimCohort) {
    fs::create_dir_all(dir).unwrap();
    let mut toml = format!(
        "# A SIMULATED cohort for the cross-process tests: {QUESTIONS} questions x {} sim arms.\n\
         name = \"{COHORT_NAME}\"\nseed = 4\nwindow_hours = 48\n\
         # Simulated stalls end at the per-run deadline: keep it short.\nrun_timeout_secs = 1\n",
        ARMS.len()
    );
    for arm in ARMS {
        write!(
            toml,
            "\n[[arms]]\nid = \"{arm}\"\nlabel = \"Simulated system {arm} (SIMULATED)\"\nadapter = \"sim\"\n\
             pinned_version = \"{arm}-1\"\nvendor_lineage = \"cohort-sim\"\nconcurrency = {}\n\
             settings = {{ latency_ms = {}, refusal_rate = {}, failure_rate = {}, timeout_rate = {}, outage_rate = {} }}\n",
            sim.concurrency, sim.latency_ms, sim.refusal_rate, sim.failure_rate, sim.timeout_rate, sim.outage_rate
        )
        .unwrap();
    }
    write!(
        toml,
        "\n[retry]\nmax_attempts = {}\ninitial_backoff_ms = 50\nmax_backoff_ms = 200\nmax_total_secs = 60\n",
        sim.max_attempts
    )
    .unwrap();
    fs::write(dir.join("cohort.toml"), toml).unwrap();

    let categories = cohort_core::config::DEFAULT_CATEGORIES;
    let questions: Vec<serde_json::Value> = (1..=QUESTIONS)
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
    pub coordinator: Option<Proc>,
    pub workers: Vec<Proc>,
    /// Processes that ended (killed or exited), kept for their logs.
    ended: Vec<Proc>,
    coordinator_starts: u32,
    worker_starts: u32,
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
            coordinator: None,
            workers: Vec::new(),
            ended: Vec::new(),
            coordinator_starts: 0,
            worker_starts: 0,
        }
    }

    /// Starts the coordinator on the cluster's port and waits until it says
    /// it listens.
    pub fn start_coordinator(&mut self) {
        assert!(self.coordinator.is_none(), "a coordinator is already running");
        self.coordinator_starts += 1;
        let name = format!("coordinator-{}", self.coordinator_starts);
        let args: Vec<String> = vec![
            "coordinator".into(),
            self.dir.display().to_string(),
            "--redis".into(),
            self.redis_url.clone(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.port),
            "--lease-ttl-ms".into(),
            "1500".into(),
            "--heartbeat-ms".into(),
            "300".into(),
            "--reconcile-ms".into(),
            "100".into(),
        ];
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
        self.worker_starts += 1;
        let name = format!("w{}", self.worker_starts);
        let args: Vec<String> = vec![
            "worker".into(),
            self.dir.display().to_string(),
            "--coordinator".into(),
            format!("http://127.0.0.1:{}", self.port),
            "--slots".into(),
            self.slots.to_string(),
            "--redis".into(),
            self.redis_url.clone(),
            "--name".into(),
            name.clone(),
        ];
        let proc = Proc::spawn(&name, &cohort_bin(), &args, &self.logs);
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
    pub violations: Vec<String>,
}

impl Figures {
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.by_outcome.get(&o).copied().unwrap_or(0)
    }

    pub fn class(&self, c: AttemptClass) -> u64 {
        self.attempts_by_class.get(&c).copied().unwrap_or(0)
    }

    /// Panics listing every broken invariant.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} ledger invariant(s) broken:\n  {}\n(figures: {self:?})",
            self.violations.len(),
            self.violations.join("\n  ")
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

/// Reads the whole ledger of the test cohort at `redis_url` and checks it
/// against the invariants of issue 4, reading run records from the cohort
/// directory's artifact store.
pub fn check_ledger(redis_url: &str, dir: &Path) -> Figures {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(check_ledger_async(redis_url, dir))
}

async fn check_ledger_async(redis_url: &str, dir: &Path) -> Figures {
    let ledger = RedisLedger::connect(redis_url, COHORT_NAME).await.unwrap();
    let status: Status = ledger.status().await.unwrap();
    let runs = ledger.runs().await.unwrap();
    let discarded = ledger.discarded().await.unwrap();
    let events = ledger.events(100_000).await.unwrap();
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
    if status.planned != PLANNED || status.finished != PLANNED {
        v.push(format!(
            "planned {} and finished {}, expected {PLANNED} and {PLANNED}",
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
        if sum != arm.planned || arm.planned != QUESTIONS as u64 {
            v.push(format!("arm {}: planned {}, outcomes add up to {sum}, expected {QUESTIONS}", arm.id, arm.planned));
        }
    }
    if status.discarded != f.discarded {
        v.push(format!("status counts {} discarded reports, the list holds {}", status.discarded, f.discarded));
    }

    if runs.len() as u64 != PLANNED {
        v.push(format!("{} runs in the ledger, expected {PLANNED}", runs.len()));
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
        if run.state != RunStateKind::Final {
            f.lost += 1;
            v.push(format!("run {} has outcome {outcome} but state {:?}", run.run_id, run.state));
        }
        let attempts = ledger.attempts(&run.run_id).await.unwrap();
        f.attempts += attempts.len() as u64;
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
    for e in events.iter().filter(|e| e.kind == "final") {
        *finals.entry(e.run_id.as_str()).or_default() += 1;
    }
    f.duplicated = finals.values().filter(|&&n| n > 1).count() as u64;
    if f.duplicated > 0 {
        let mut dups: Vec<_> = finals.iter().filter(|(_, n)| **n > 1).collect();
        dups.sort();
        v.push(format!("{} runs have more than one final event: {:?}", f.duplicated, &dups[..dups.len().min(10)]));
    }
    let without_final: Vec<&str> =
        runs.iter().map(|r| r.run_id.as_str()).filter(|id| !finals.contains_key(id)).collect();
    if !without_final.is_empty() {
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
    for o in [Outcome::Refused, Outcome::Failed, Outcome::TimedOut] {
        if f.outcome(o) == 0 {
            v.push(format!("no run ended {o}: the injected faults did not happen"));
        }
    }
    if f.retried_runs == 0 {
        v.push("no run was retried: the injected outages did not happen".to_owned());
    }
    f.violations = v;
    f
}

/// The run record `sha` exists in the store, hashes to its name, is the
/// record of `run_id`, and lists every attempt the ledger holds for the
/// run, in order (number, class, worker), marked complete.
fn check_record(
    store: &Path,
    run_id: &str,
    sha: &str,
    attempts: &[cohort_coordinator::ledger::AttemptRecord],
    v: &mut Vec<String>,
) {
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
                v.push(format!("run {run_id}: the record lists attempts {listed:?}, the ledger {ledger:?}"));
            }
        }
        Ok(record) => v.push(format!("run {run_id}: record {sha} is the record of {}", record["run_id"])),
        Err(e) => v.push(format!("run {run_id}: record {sha} is not JSON: {e}")),
    }
}
