//! Where the commands write: standard output that tolerates a reader gone away
//! ([`Stdout`], [`out!`], [`outln!`]), lines on standard error ([`err`]), and the `dlq`
//! commands' reports as a table, JSON or YAML, with every text they quote escaped
//! ([`dlq_operator::printable`]).

use dlq_operator::dlq::purge::PurgeReport;
use dlq_operator::dlq::replay::ReplayReport;
use dlq_operator::printable::{
    escape, escape_json, escape_lines, escape_yaml, shown, PREVIEW_BYTES,
};

use super::args::ReportFormat;
use super::error::CliError;

/// Standard output for the commands' results. A reader that went away
/// (`dlq-operator crdgen | head`) is not an error: the rest of the output is dropped, the
/// command's work goes on (an `apply` finishes, a replay is not cut short) and its exit
/// code still says how that work went. `print!` would panic there instead. Any other
/// write error is returned.
pub struct Stdout;

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::io::stdout().write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(buf.len()),
            written => written,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match std::io::stdout().flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            flushed => flushed,
        }
    }
}

/// `print!` to [`Stdout`]; a write error returns from the enclosing function with
/// [`CliError::Stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(&mut $crate::cli::output::Stdout, format_args!($($arg)*))
            .map_err($crate::cli::error::CliError::Stdout)?
    };
}

/// `println!` to [`Stdout`], like [`out!`].
macro_rules! outln {
    () => { $crate::cli::output::out!("\n") };
    ($($arg:tt)*) => {{
        $crate::cli::output::out!($($arg)*);
        $crate::cli::output::out!("\n");
    }};
}

pub(crate) use {out, outln};

/// A line on standard error, like `eprintln!` but without its panic when stderr is
/// closed (the exit code still tells). Control characters in it (an error quoting a queue
/// name or a broker reason) are escaped, its line breaks kept
/// ([`dlq_operator::printable::escape_lines`]).
pub fn err(line: &str) {
    use std::io::Write;
    let line = escape_lines(line);
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `report` in `format`; JSON and YAML with the characters that `serde_json` and
/// `serde_yaml_ng` leave raw and a terminal would act on escaped
/// ([`dlq_operator::printable::escape_json`], [`dlq_operator::printable::escape_yaml`]).
/// `table` must escape what it quotes itself.
///
/// # Errors
/// [`CliError::Json`] or [`CliError::Yaml`] when the report cannot be serialized.
pub fn format_report<T: serde::Serialize>(
    report: &T,
    format: ReportFormat,
    table: impl FnOnce() -> String,
) -> Result<String, CliError> {
    Ok(match format {
        ReportFormat::Table => table(),
        ReportFormat::Json => {
            let json = serde_json::to_string_pretty(report)?;
            escape_json(&json).into_owned() + "\n"
        }
        ReportFormat::Yaml => escape_yaml(&serde_yaml_ng::to_string(report)?).into_owned(),
    })
}

/// The purge report as text (the resource name escaped, like every text the tables quote).
pub fn purge_table(r: &PurgeReport) -> String {
    format!(
        "DeadLetterQueue  {}\nin the DLQ       {} at the start, {} read{}\nmatched          {}\n{:<16} {}\nno age, kept     {}\n",
        shown(&r.resource, PREVIEW_BYTES),
        r.total,
        r.scanned,
        if r.interrupted { " (interrupted)" } else { "" },
        r.matched,
        if r.dry_run { "would remove" } else { "removed" },
        if r.dry_run { r.matched } else { r.removed },
        r.unknown_age,
    )
}

/// The replay report as text; the skip and failure reasons, which quote messages (their
/// original queue, exchange, routing key: cut by the engine) and the broker, escaped
/// ([`dlq_operator::printable`]).
pub fn replay_table(r: &ReplayReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "DeadLetterQueue  {}",
        shown(&r.resource, PREVIEW_BYTES)
    );
    let _ = writeln!(
        out,
        "replay id        {}{}",
        shown(&r.replay_id, PREVIEW_BYTES),
        if r.dry_run { " (dry run)" } else { "" }
    );
    let _ = writeln!(out, "outcome          {:?}", r.outcome);
    let _ = writeln!(
        out,
        "in the DLQ       {} at the start, {} read, {} matched",
        r.total, r.scanned, r.matched
    );
    let verb = if r.dry_run {
        "would replay"
    } else {
        "replayed"
    };
    let _ = writeln!(out, "{verb:<16} {}", r.replayed);
    let _ = writeln!(out, "skipped          {}", r.skipped_total());
    for (why, n) in &r.skipped {
        let _ = writeln!(out, "  {n:>8}  {}", escape(why));
    }
    let _ = writeln!(out, "failed           {}", r.failed_total());
    for (why, n) in &r.failed {
        let _ = writeln!(out, "  {n:>8}  {}", escape(why));
    }
    if r.resumed > 0 {
        let _ = writeln!(
            out,
            "resumed          {} time(s) after the broker was lost; at most {} of the replayed copies may be duplicates",
            r.resumed, r.in_doubt
        );
    }
    out
}
