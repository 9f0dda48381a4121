//! Telemetry, set up in one place: `tracing` events to stderr, filtered by
//! `RUST_LOG` (default per command: `info` for the long-running roles,
//! `warn` for commands whose stdout is their result), coloured only when
//! stderr is a terminal. Keys never reach a
//! log: they live in redacting types.
//!
//! OpenTelemetry export (SPEC section 10) is not wired yet.

/// Installs the stderr subscriber once; later calls do nothing.
pub fn init(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour only for a person at a terminal: a log file or a pipe gets
    // plain text (no ANSI codes for grep, log shippers and tests).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(ansi).with_env_filter(filter).try_init();
}
