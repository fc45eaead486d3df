//! The command line, one module per command: [`args`] (the clap types), [`error`]
//! ([`CliError`]: the message and exit code of a failed command), [`output`] (stdout,
//! stderr, the report formats), [`signals`] (the stop on SIGINT/SIGTERM/SIGHUP), and
//! [`execute`], which runs a parsed command.

pub mod args;
pub mod error;
pub mod output;
pub mod signals;

mod apply;
mod console;
mod crdgen;
mod dlq;
mod rbac;
mod render;
mod report;
mod router;
mod run;
mod simulate;

use std::process::ExitCode;

use args::{Command, LogFormat};
use error::CliError;

/// Runs `command`: its exit code (0, or 1 for work not all done, such as a resource not
/// ready or a replay cut short), or the error it stopped with.
///
/// # Errors
/// The command's [`CliError`].
pub async fn execute(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Apply { files } => apply::apply(&files).await,
        Command::Run(args) => run::run(args).await,
        Command::Rbac { format } => rbac::rbac(format),
        Command::Render { files, rules } => render::render(&files, rules),
        Command::Crdgen { out_dir } => crdgen::crdgen(out_dir.as_deref()),
        Command::Simulate { what } => simulate::simulate_command(what),
        Command::Router(args) => router::router(args).await,
        Command::Console(args) => console::console(args).await,
        Command::Report(args) => report::report(args).await,
        Command::Dlq { what } => dlq::dlq_command(what).await,
    }
}

/// Logs to stderr in `format`, at the level of `RUST_LOG` (default: `info`, and nothing
/// from lapin).
pub fn init_tracing(format: LogFormat) {
    // lapin logs a returned (unroutable) publish at WARN with the message body, and a
    // channel the broker closes at ERROR, also the expected ones (the passive declare that
    // finds an exchange missing): the commands and the operator report every failure
    // themselves, from lapin's results, without the payload.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lapin=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (stderr closed, `2>&1 | head`) is dropped:
        // tracing-subscriber would report it with `eprintln!`, which panics there.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
