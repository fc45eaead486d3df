//! `dlq-operator dlq repair`: repair one dead-lettered message (new JSON body, headers
//! set or removed) and send it back to the source queue, through the replay engine
//! ([`dlq_operator::dlq::repair`]).

use std::path::Path;
use std::process::ExitCode;

use dlq_operator::dlq::repair::{repair_with, RepairOutcome, Rewrite};
use dlq_operator::printable::{shown, PREVIEW_BYTES};

use super::{now_ms, resolve};
use crate::cli::args::RepairArgs;
use crate::cli::error::{CliError, Progress};
use crate::cli::output::{format_report, out};
use crate::cli::signals::{self, Notice, Signals};

/// Checks every flag (the body is valid JSON, no protected header, something to change),
/// then repairs the message and prints the report. Exit 1 unless it was repaired.
///
/// # Errors
/// [`CliError::Usage`] naming the flag (invalid JSON with its line and column, a
/// protected or malformed header, an unreadable `--body-file`) before the broker is
/// touched; as [`resolve`]; [`CliError::Dlq`] for the broker's error;
/// [`CliError::Interrupted`] when stopped before a message was read; the report's
/// [`format_report`] errors.
pub async fn repair(args: RepairArgs) -> Result<ExitCode, CliError> {
    let rewrite = rewrite_of(&args).await?;
    let stop = signals::stop_on_signals(
        Signals::Interrupt,
        Notice::Stderr("interrupted: settling the copy in flight, then stopping"),
    );
    let prepared = resolve(args.which, &stop).await?;
    let client = dlq_operator::rabbitmq::factory()
        .client(&prepared.connection)
        .map_err(|source| dlq_error(&prepared.key, source, false))?;
    let report = repair_with(
        client.as_ref(),
        &prepared.topology,
        &args.id,
        rewrite,
        now_ms(),
        &stop,
    )
    .await
    .map_err(|stop| dlq_error(&prepared.key, stop.error, stop.found))?;
    if stop.is_cancelled() && report.scanned == 0 {
        return Err(CliError::Interrupted);
    }
    out!(
        "{}",
        format_report(&report, args.output, || report.to_string())?
    );
    Ok(if report.outcome == RepairOutcome::Repaired {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A broker error of the repair of DeadLetterQueue `key`; `found`: the message had been
/// found by then, so its copy may have been published ([`Progress::Repair`]).
fn dlq_error(key: &str, source: dlq_operator::broker::BrokerError, found: bool) -> CliError {
    CliError::Dlq {
        key: key.to_string(),
        source: Box::new(source),
        progress: if found {
            Progress::Repair
        } else {
            Progress::Nothing
        },
    }
}

/// The [`Rewrite`] the flags ask for.
///
/// # Errors
/// [`CliError::Usage`] naming the flag and what is wrong.
async fn rewrite_of(args: &RepairArgs) -> Result<Rewrite, CliError> {
    let usage = |flag: &str, e: &dyn std::fmt::Display| CliError::Usage(format!("{flag}: {e}"));
    if args.id.is_empty() {
        return Err(CliError::Usage("--id: must not be empty".into()));
    }
    let mut rewrite = Rewrite::new();
    if let Some(text) = &args.body_json {
        rewrite = rewrite
            .with_json_body(text)
            .map_err(|e| usage("--body-json", &e))?;
    }
    if let Some(path) = &args.body_file {
        let flag = format!("--body-file {}", shown_path(path));
        let text = read_text(path).await.map_err(|e| usage(&flag, &e))?;
        rewrite = rewrite
            .with_json_body(&text)
            .map_err(|e| usage(&flag, &e))?;
    }
    for kv in &args.set_header {
        let flag = format!("--set-header {}", shown(kv, PREVIEW_BYTES));
        let (name, value) = kv
            .split_once('=')
            .ok_or_else(|| usage(&flag, &"expected NAME=VALUE"))?;
        rewrite
            .set_header(name, &header_value(value))
            .map_err(|e| usage(&flag, &e))?;
    }
    for name in &args.remove_header {
        let flag = format!("--remove-header {}", shown(name, PREVIEW_BYTES));
        rewrite.remove_header(name).map_err(|e| usage(&flag, &e))?;
    }
    if rewrite.is_empty() {
        return Err(CliError::Usage(
            "nothing to repair: give --body-file, --body-json, --set-header or --remove-header"
                .into(),
        ));
    }
    Ok(rewrite)
}

/// `--set-header`'s value: a JSON number, boolean or string when it parses as one, else
/// the text itself.
fn header_value(text: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(
            v @ (serde_json::Value::Number(_)
            | serde_json::Value::Bool(_)
            | serde_json::Value::String(_)),
        ) => v,
        _ => serde_json::Value::String(text.to_string()),
    }
}

/// A path for an error line (escaped, cut).
fn shown_path(path: &Path) -> String {
    shown(&path.display().to_string(), PREVIEW_BYTES)
}

/// The largest `--body-file` read (bytes): RabbitMQ 4's default `max_message_size`
/// (16 MiB); a larger body could not be published anyway, and a device such as
/// `/dev/zero` is not read without end.
pub const MAX_BODY_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The UTF-8 text of `path`, at most [`MAX_BODY_FILE_BYTES`].
///
/// # Errors
/// The I/O error, a file larger than the limit, or that it is not UTF-8.
async fn read_text(path: &Path) -> Result<String, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_BODY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_BODY_FILE_BYTES {
        return Err(format!(
            "larger than {MAX_BODY_FILE_BYTES} bytes (16 MiB, RabbitMQ 4's default max_message_size): not a message body"
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text ({e})"))
}
