//! `dlq-operator apply -f PATH…`: reconcile the manifests once against the broker.

use std::path::PathBuf;
use std::process::ExitCode;

use dlq_operator::standalone;

use super::error::CliError;
use super::output::Stdout;

/// Applies every DeadLetterQueue of the manifests at `files` (RabbitMQ and Redis) and
/// writes the report to stdout. Returns exit 0 when everything is in place, 1 when a resource is not ready.
///
/// # Errors
/// [`CliError::Manifest`] for manifests that cannot be read, validated or planned (nothing
/// is applied then); [`CliError::Apply`] when the report cannot be written.
pub async fn apply(files: &[PathBuf]) -> Result<ExitCode, CliError> {
    let (planned, redis) = dlq_operator::resolve::manifests::load_and_plan_all(files)?;
    let rabbitmq = standalone::apply_each(
        dlq_operator::rabbitmq::factory().as_ref(),
        &planned,
        &mut Stdout,
    )
    .await
    .map_err(CliError::Apply)?;
    let redis = standalone::apply_redis_each(&redis, &mut Stdout)
        .await
        .map_err(CliError::Apply)?;
    let summary = standalone::Summary {
        ready: rabbitmq.ready + redis.ready,
        not_ready: rabbitmq.not_ready + redis.not_ready,
    };
    standalone::write_total(&summary, &mut Stdout).map_err(CliError::Apply)?;
    Ok(if summary.not_ready == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
