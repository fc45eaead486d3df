//! `dlq-operator render -f PATH… [--rules]`: the planned topology and alert rules,
//! without touching a broker.

use std::path::PathBuf;
use std::process::ExitCode;

use dlq_operator::standalone;

use super::error::CliError;
use super::output::out;

/// Prints the plan of every DeadLetterQueue of the manifests at `files`, or with `rules`
/// only their Prometheus rule file.
///
/// # Errors
/// [`CliError::Manifest`] for manifests that cannot be read, validated or planned;
/// [`CliError::Yaml`] or [`CliError::Stdout`] when the output cannot be made or written.
pub fn render(files: &[PathBuf], rules: bool) -> Result<ExitCode, CliError> {
    let (_, planned) = standalone::load_and_plan(files)?;
    let text = if rules {
        standalone::render_rules(&planned)
    } else {
        standalone::render(&planned)
    }?;
    out!("{text}");
    Ok(ExitCode::SUCCESS)
}
