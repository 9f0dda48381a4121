//! `cohort`: the one user-facing binary. It parses arguments and calls the
//! libraries; every command's logic lives in a module of this crate or in
//! the role crates, never here.

use std::process::ExitCode;

use clap::Parser;

mod commands;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
    // Logs to stderr; traces over OTLP when the OTEL_* variables ask. The
    // guard lives to the end of main, outside any runtime, and flushes the
    // spans still batched when it drops.
    let telemetry = match cohort_telemetry::init(cli.service_name(), cli.default_log_level()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let code = match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<commands::Exit>() {
            Some(commands::Exit(code)) => ExitCode::from(*code),
            None => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    };
    drop(telemetry);
    code
}
