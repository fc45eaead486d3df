//! `dlq-operator report [--standalone -f PATH…] [-n NS] [-o table|json|yaml]
//! [--maturity-weights R,D,M]`: every DeadLetterQueue's maturity, worst first
//! ([`dlq_operator::report`]).

use std::process::ExitCode;

use dlq_operator::crd;
use dlq_operator::printable::escape;
use dlq_operator::report::{self, Row};

use super::args::ReportArgs;
use super::error::CliError;
use super::output::{err, format_report, out};

/// Prints the report of the cluster's DeadLetterQueues, or with `--standalone` of the
/// manifests' (after one depth listing per broker and vhost). Exit 1 when a broker could
/// not be read (its lines on stderr; the report is still printed).
///
/// # Errors
/// [`CliError::Usage`] for flags of the other mode or a bad namespace,
/// [`CliError::Manifest`] for manifests that cannot be used, [`CliError::Kubernetes`] when
/// the cluster cannot be read, and output errors.
pub async fn report(args: ReportArgs) -> Result<ExitCode, CliError> {
    if let Some(ns) = &args.namespace {
        if args.standalone {
            return Err(CliError::Usage(
                "-n/--namespace is for the cluster; with --standalone the files say the namespaces"
                    .into(),
            ));
        }
        if !crd::is_rfc1123_label(ns) {
            return Err(CliError::Usage(format!(
                "--namespace {ns:?}: not a namespace name (RFC 1123 label: lower-case letters, digits and '-', at most 63)"
            )));
        }
    }
    let (rows, errors) = if args.standalone {
        if args.files.is_empty() {
            return Err(CliError::Usage(
                "report --standalone needs -f PATH (manifest file or directory)".into(),
            ));
        }
        let files = args.files.clone();
        let (_, planned) =
            tokio::task::spawn_blocking(move || dlq_operator::standalone::load_and_plan(&files))
                .await
                .map_err(CliError::ManifestTask)??;
        let brokers = dlq_operator::rabbitmq::factory();
        let weights = args.maturity_weights.unwrap_or_default();
        report::in_files(&planned, brokers.as_ref(), &weights).await
    } else {
        if !args.files.is_empty() {
            return Err(CliError::Usage(
                "-f PATH is for `report --standalone`; without it the cluster is read".into(),
            ));
        }
        let client = kube::Client::try_default()
            .await
            .map_err(CliError::Kubernetes)?;
        let rows = report::in_cluster(
            &client,
            args.namespace.as_deref(),
            args.maturity_weights.as_ref(),
        )
        .await
        .map_err(CliError::Report)?;
        (rows, Vec::new())
    };
    let text = format_report(&rows, args.output, || table(&rows))?;
    out!("{text}");
    for e in &errors {
        err(&format!("warning: {e}"));
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The rows as a table, one line per DeadLetterQueue and under it one line per missing
/// item (names and sentences escaped: [`escape`]).
fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "no DeadLetterQueue\n".to_string();
    }
    let names: Vec<String> = rows
        .iter()
        .map(|r| escape(&format!("{}/{}", r.namespace, r.name)).into_owned())
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(15);
    let mut text = format!(
        "{:<width$}  {:>8}  {:>5}  {:>11}  {:>10}\n",
        "DEADLETTERQUEUE", "MATURITY", "RETRY", "DEAD-LETTER", "MONITORING"
    );
    for (row, name) in rows.iter().zip(&names) {
        text.push_str(&format!(
            "{name:<width$}  {:>8.3}  {:>5.3}  {:>11.3}  {:>10.3}\n",
            row.score, row.retry, row.dead_letter, row.monitoring
        ));
        for step in &row.missing {
            text.push_str(&format!("  - {}\n", escape(step)));
        }
    }
    text
}
