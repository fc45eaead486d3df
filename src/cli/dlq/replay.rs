//! `dlq-operator dlq replay`: send dead-lettered messages back where they failed, with a
//! progress bar on stderr.

use std::process::ExitCode;

use dlq_operator::dlq::filter::Filter;
use dlq_operator::dlq::replay::{self as engine, Observer, ReplayOptions, ReplayReport};

use super::{now_ms, resolve};
use crate::cli::args::{ReplayArgs, ReplayTarget};
use crate::cli::error::{CliError, Progress};
use crate::cli::output::{format_report, out, replay_table};
use crate::cli::signals::{self, Notice, Signals};

/// Checks the flags, then replays the matching messages ([`dlq_operator::rabbitmq::dlq::replay`]) and prints
/// the report. Exit 1 unless the replay [`engine::Outcome::Succeeded`] (a copy failed, or
/// a signal cut it short).
///
/// # Errors
/// [`CliError::Filter`] or [`CliError::Usage`] (`--rate`) before anything is read; as
/// [`resolve`]; [`CliError::Dlq`] for the broker's error, with what was read and
/// confirmed before it and how many copies a lost connection can duplicate;
/// [`CliError::Interrupted`] when stopped before a message was read; the report's
/// [`format_report`] errors.
pub async fn replay(args: ReplayArgs) -> Result<ExitCode, CliError> {
    // Every argument is checked before anything is read or touched.
    let filter = checked_filter(&args)?;
    let stop = signals::stop_on_signals(
        Signals::Interrupt,
        Notice::Stderr("interrupted: settling the copies in flight, then stopping"),
    );
    let prepared = resolve(args.which, &stop).await?;
    let started = now_ms();
    let opts = ReplayOptions {
        filter,
        limit: args.limit,
        rate: args.rate,
        dry_run: args.dry_run,
        target: match args.to {
            ReplayTarget::OriginalQueue => engine::Target::OriginalQueue,
            ReplayTarget::OriginalExchange => engine::Target::OriginalExchange,
        },
        max_replays: args.max_replays,
        replay_id: engine::new_replay_id(started),
        // In 1..=MAX_IN_FLIGHT (the parser's range).
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(engine::MAX_IN_FLIGHT),
        rewrite: None,
    };
    let window = engine::crash_bound(opts.max_in_flight, opts.rate, opts.limit);
    let mut shown = Shown::new()?;
    let report = dlq_operator::rabbitmq::dlq::replay(
        &prepared.connection,
        &prepared.topology,
        &opts,
        started,
        &stop,
        &mut shown,
    )
    .await
    .map_err(|source| CliError::Dlq {
        key: prepared.key.clone(),
        source: Box::new(source),
        progress: Progress::Replay {
            read: shown.read,
            confirmed: shown.replayed,
            unsettled: window,
        },
    })?;
    shown.bar.finish_and_clear();
    if stop.is_cancelled() && report.scanned == 0 {
        return Err(CliError::Interrupted);
    }
    out!(
        "{}",
        format_report(&report, args.output, || replay_table(&report))?
    );
    Ok(if report.outcome == engine::Outcome::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The `--filter` terms of `args`, once `--rate` is checked too.
///
/// # Errors
/// [`CliError::Filter`] for a bad `--filter` term; [`CliError::Usage`] for a `--rate`
/// that is not a finite number of at least 0.001.
fn checked_filter(args: &ReplayArgs) -> Result<Filter, CliError> {
    let filter = Filter::parse(&args.filter)?;
    if let Some(r) = args.rate {
        if !(r.is_finite() && r >= 0.001) {
            return Err(CliError::Usage(format!(
                "--rate {r:?}: must be a number of messages per second, at least 0.001"
            )));
        }
    }
    Ok(filter)
}

/// The replay's progress: a bar on stderr, and what an error in the middle reports.
struct Shown {
    bar: indicatif::ProgressBar,
    /// Messages read so far.
    read: u64,
    /// Copies confirmed by the broker so far.
    replayed: u64,
}

impl Shown {
    /// A bar with nothing read yet.
    ///
    /// # Errors
    /// [`CliError::ProgressTemplate`] (the template is a constant).
    fn new() -> Result<Self, CliError> {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} read  {msg}",
        )?);
        Ok(Shown {
            bar,
            read: 0,
            replayed: 0,
        })
    }
}

impl Observer for Shown {
    fn progress(&mut self, r: &ReplayReport) {
        self.bar.set_length(r.total);
        self.bar.set_position(r.scanned);
        self.bar.set_message(format!("replayed {}", r.replayed));
        (self.read, self.replayed) = (r.scanned, r.replayed);
    }

    /// One line on stderr above the bar: what was lost, and when the replay goes on.
    fn resuming(
        &mut self,
        attempt: u32,
        error: &dlq_operator::broker::BrokerError,
        delay: std::time::Duration,
    ) {
        let line = format!(
            "the broker was lost after {} read and {} replayed ({}); resuming in {} s on the next address that answers (pass {attempt} of {})",
            self.read,
            self.replayed,
            error,
            delay.as_secs(),
            engine::RESUME_ATTEMPTS,
        );
        self.bar.suspend(|| crate::cli::output::err(&line));
    }
}
