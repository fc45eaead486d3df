//! `dlq-operator dlq inspect`: what is in the dead-letter queues, nothing changed.

use std::process::ExitCode;

use dlq_operator::dlq::browse;
use dlq_operator::printable::PREVIEW_BYTES;
use dlq_operator::rabbitmq;

use super::{now_ms, resolve};
use crate::cli::args::InspectArgs;
use crate::cli::error::{CliError, Progress};
use crate::cli::output::{format_report, out};
use crate::cli::signals::{self, Notice, Signals};

/// Reads up to `--max-messages` messages of the DeadLetterQueue's dead-letter queues,
/// gives every one back, and prints the summary. Exit 1 when a signal cut the reading
/// short (the summary then covers what was read).
///
/// # Errors
/// As [`resolve`]; [`CliError::Dlq`] for the broker's error; [`CliError::Interrupted`]
/// when stopped before a message was read; the report's [`format_report`] errors.
pub async fn inspect(args: InspectArgs) -> Result<ExitCode, CliError> {
    let stop = signals::stop_on_signals(
        Signals::Interrupt,
        Notice::Stderr("interrupted: giving back the messages read, then stopping"),
    );
    let prepared = resolve(args.which, &stop).await?;
    let opts = browse::InspectOptions {
        max_messages: args.max_messages,
        sample_size: usize::try_from(args.sample).unwrap_or(usize::MAX),
        preview_bytes: if args.show_payload {
            usize::MAX
        } else {
            PREVIEW_BYTES
        },
    };
    let failed = |source| CliError::Dlq {
        key: prepared.key.clone(),
        source: Box::new(source),
        progress: Progress::Nothing,
    };
    let broker = rabbitmq::factory()
        .client(&prepared.connection)
        .map_err(failed)?;
    let report = browse::inspect_with(broker.as_ref(), &prepared.topology, opts, now_ms(), &stop)
        .await
        .map_err(failed)?;
    if report.interrupted && report.scanned == 0 {
        return Err(CliError::Interrupted);
    }
    out!(
        "{}",
        format_report(&report, args.output, || report.table())?
    );
    Ok(if report.interrupted {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
