//! `cohort`: the one user-facing binary. It parses arguments and calls the
//! libraries; every command's logic lives in a module of this crate or in
//! the role crates, never here.

use std::process::ExitCode;

use clap::Parser;

mod commands;
mod telemetry;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
    telemetry::init(cli.default_log_level());
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<commands::Exit>() {
            Some(commands::Exit(code)) => ExitCode::from(*code),
            None => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
