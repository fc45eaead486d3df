//! `dlq-operator apply -f PATH…`: reconcile the manifests once against the broker.

use std::path::PathBuf;
use std::process::ExitCode;

use dlq_operator::standalone;

use super::error::CliError;
use super::output::Stdout;

/// Applies every DeadLetterQueue of the manifests at `files` and writes the report to
/// stdout. Returns exit 0 when everything is in place, 1 when a resource is not ready.
///
/// # Errors
/// [`CliError::Manifest`] for manifests that cannot be read, validated or planned (nothing
/// is applied then); [`CliError::Apply`] when the report cannot be written.
pub async fn apply(files: &[PathBuf]) -> Result<ExitCode, CliError> {
    let (_, planned) = standalone::load_and_plan(files)?;
    let summary = standalone::apply_all(
        dlq_operator::rabbitmq::factory().as_ref(),
        &planned,
        &mut Stdout,
    )
    .await
    .map_err(CliError::Apply)?;
    Ok(if summary.not_ready == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
