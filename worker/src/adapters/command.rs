//! `command`: a system under test run as a local program, prompt on stdin,
//! output on stdout.
//!
//! Stdin: for the first call (one turn) the prompt verbatim. For a
//! follow-up (after a clarification question) the whole conversation, each
//! turn preceded by a header line:
//!
//! ```text
//! --- cohort turn 1: user ---
//! <the prompt>
//! --- cohort turn 2: system_under_test ---
//! <the clarifying question>
//! --- cohort turn 3: user ---
//! <the suffix>
//! ```
//!
//! The environment variable `COHORT_TURNS` holds the number of turns, so a
//! program knows which form it reads. The program inherits the worker's
//! environment (a program that needs a key reads it there: `env` is
//! recorded with the settings, so it holds no secrets).
//!
//! How an exit is classified: exit 0 with non-blank UTF-8 stdout is `ok`
//! (stdout is the output); blank stdout is `empty_content`; stdout that is
//! not UTF-8 is `malformed`; a non-zero exit (or death by a signal) is
//! `client_error` with stderr's first line as detail; a program that cannot
//! be started is `client_error` naming it; past `timeout_secs` the program
//! is killed and the attempt is a `timeout`. The program is also killed
//! when the worker's per-run deadline drops the call (`kill_on_drop`). The
//! adapter never reports a clarification.
//!
//! Settings (nothing else is accepted):
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | `program` | required | the program: a path, or a name looked up on `PATH` |
//! | `args` | `[]` | its arguments |
//! | `timeout_secs` | 600 | how long one call may take (fractions allowed) |
//! | `version_label` | none | the version label to record (none: "not disclosed") |
//! | `env` | none | a table of environment variables added for the program |

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::http_class::truncate_detail;
use cohort_core::taxonomy::AttemptClass;
use tokio::io::AsyncWriteExt;

use super::settings::Settings;
use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply};

/// How long one call may take when `timeout_secs` is unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

const KNOWN_SETTINGS: [&str; 5] = ["program", "args", "timeout_secs", "version_label", "env"];

/// An arm run as a local program.
#[derive(Debug)]
pub struct CommandAdapter {
    program: String,
    args: Vec<String>,
    timeout: Duration,
    version_label: Option<String>,
    env: Vec<(String, String)>,
}

impl CommandAdapter {
    pub fn from_arm(arm: &ArmConfig) -> Result<CommandAdapter, AdapterError> {
        let s = Settings::new(arm, "command", &KNOWN_SETTINGS)?;
        Ok(CommandAdapter {
            program: s.required_string("program")?,
            args: s.strings("args")?,
            timeout: s.seconds("timeout_secs", DEFAULT_TIMEOUT)?,
            version_label: s.string("version_label")?.map(|v| v.trim().to_owned()),
            env: s.string_table("env")?,
        })
    }

    async fn run(&self, stdin_text: String, turns: usize) -> AdapterResponse {
        let mut child = match tokio::process::Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("COHORT_TURNS", turns.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                let mut r = self.respond(AttemptClass::ClientError, format!("cannot start {:?}: {e}", self.program));
                r.observed_version = None;
                return r;
            }
        };
        let stdin = child.stdin.take();
        // Written while the output is read: a program that answers before it
        // has read all its input never blocks on a full pipe.
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A program may exit without reading its input: its choice.
                let _ = stdin.write_all(stdin_text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        };
        let output = match tokio::time::timeout(self.timeout, async {
            let ((), output) = tokio::join!(write, child.wait_with_output());
            output
        })
        .await
        {
            // Dropping the future dropped the child: kill_on_drop ended it.
            Err(_) => {
                let mut r = self.respond(
                    AttemptClass::Timeout,
                    format!("{:?} gave no output within {} s; killed", self.program, self.timeout.as_secs_f64()),
                );
                r.observed_version = None;
                return r;
            }
            Ok(Err(e)) => return self.respond(AttemptClass::ClientError, format!("{:?}: {e}", self.program)),
            Ok(Ok(o)) => o,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let first = stderr.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("(no stderr)");
            let how = match output.status.code() {
                Some(code) => format!("exit status {code}"),
                None => "killed by a signal".to_owned(),
            };
            return self.respond(AttemptClass::ClientError, format!("{:?}: {how}: {first}", self.program));
        }
        let Ok(text) = String::from_utf8(output.stdout) else {
            return self.respond(AttemptClass::Malformed, format!("{:?} wrote stdout that is not UTF-8", self.program));
        };
        if text.trim().is_empty() {
            return self.respond(AttemptClass::EmptyContent, format!("{:?} exited 0 with no output", self.program));
        }
        let mut response = self.respond(AttemptClass::Ok, String::new());
        response.reply = Reply::Output(text);
        response
    }

    fn respond(&self, class: AttemptClass, detail: String) -> AdapterResponse {
        AdapterResponse {
            observed_version: self.version_label.clone(),
            ..AdapterResponse::nothing(class, 0, truncate_detail(&detail))
        }
    }
}

/// What the program reads on stdin (see the module docs).
pub fn stdin_text(request: &AdapterRequest) -> String {
    match request.conversation.as_slice() {
        [only] => only.text.clone(),
        turns => {
            let mut out = String::new();
            for (i, t) in turns.iter().enumerate() {
                out.push_str(&format!("--- cohort turn {}: {} ---\n", i + 1, t.role));
                out.push_str(&t.text);
                if !t.text.ends_with('\n') {
                    out.push('\n');
                }
            }
            out
        }
    }
}

#[async_trait]
impl Adapter for CommandAdapter {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        self.run(stdin_text(request), request.conversation.len()).await
    }
}
