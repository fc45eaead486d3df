//! `dlq-operator dlq purge`: remove the dead-lettered messages older than `--older-than`
//! (and matching every `--filter`); every other message stays.

use std::process::ExitCode;

use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::purge::PurgeReport;
use dlq_operator::rabbitmq::dlq::purge_into;

use super::{now_ms, resolve};
use crate::cli::args::{age, PurgeArgs};
use crate::cli::error::{CliError, Progress};
use crate::cli::output::{format_report, out, purge_table};
use crate::cli::signals::{self, Notice, Signals};

/// Checks the flags (an age, the filter terms, `--yes` unless `--dry-run`), then removes
/// the matching messages (counts them with `--dry-run`) and prints the report. Exit 1
/// when a signal cut the run short (the report then covers what was read).
///
/// # Errors
/// [`CliError::Usage`] or [`CliError::Filter`] for the flags, before anything is read;
/// as [`resolve`]; [`CliError::Dlq`] for the broker's error, with what was removed
/// before it; [`CliError::Interrupted`] when stopped before a message was read; the
/// report's [`format_report`] errors.
pub async fn purge(args: PurgeArgs) -> Result<ExitCode, CliError> {
    let older_than = age(&args.older_than)
        .map_err(|e| CliError::Usage(format!("--older-than {:?}: {e}", args.older_than)))?;
    let filter = Filter::parse(&args.filter)?.older_than(older_than);
    if !args.dry_run && !args.yes {
        return Err(CliError::Usage(
            "dlq purge removes messages for good: add --yes (or --dry-run to count them first)"
                .into(),
        ));
    }
    let stop = signals::stop_on_signals(
        Signals::Interrupt,
        Notice::Stderr("interrupted: giving back the messages read, then stopping"),
    );
    let prepared = resolve(args.which, &stop).await?;
    let mut report = PurgeReport::default();
    purge_into(
        &prepared.connection,
        &prepared.topology,
        &filter,
        args.dry_run,
        now_ms(),
        &stop,
        &mut report,
    )
    .await
    .map_err(|source| CliError::Dlq {
        key: prepared.key.clone(),
        source: Box::new(source),
        progress: Progress::Purge {
            read: report.scanned,
            removed: report.removed,
        },
    })?;
    if report.interrupted && report.scanned == 0 {
        return Err(CliError::Interrupted);
    }
    out!(
        "{}",
        format_report(&report, args.output, || purge_table(&report))?
    );
    Ok(if report.interrupted {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
