//! `dlq-operator dlq inspect|replay|purge|repair`: dead-letter operations on one
//! DeadLetterQueue's dead-letter queues, found in the cluster (`NAMESPACE/NAME`) or in
//! manifest files (`--standalone -f PATH --name NAME`). Each checks its flags before it
//! reads or touches anything, and stops cleanly on SIGINT, SIGTERM or SIGHUP.

mod inspect;
mod purge;
mod repair;
mod replay;

use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use dlq_operator::client::{Clock, SystemClock};
use dlq_operator::reconcile::Prepared;
use dlq_operator::resolve::target;

use super::args::{DlqCommand, Which};
use super::error::CliError;

/// Runs a `dlq` command.
///
/// # Errors
/// As [`inspect::inspect`], [`replay::replay`], [`purge::purge`] and [`repair::repair`].
pub async fn dlq_command(command: DlqCommand) -> Result<ExitCode, CliError> {
    match command {
        DlqCommand::Inspect(args) => inspect::inspect(args).await,
        DlqCommand::Replay(args) => replay::replay(args).await,
        DlqCommand::Purge(args) => purge::purge(args).await,
        DlqCommand::Repair(args) => repair::repair(args).await,
    }
}

/// Now, in ms since the Unix epoch (the reference of the messages' ages).
fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// The DeadLetterQueue `which` names, validated and planned, or
/// [`CliError::Interrupted`] as soon as `stop` is cancelled (nothing is touched on the
/// broker before this returns, so a Ctrl-C during a slow Kubernetes API call or a blocked
/// manifest read ends the command at once).
///
/// # Errors
/// [`CliError::Usage`] for flags that do not go together; [`CliError::Target`] when the
/// DeadLetterQueue cannot be found, read or planned; [`CliError::Kubernetes`];
/// [`CliError::Interrupted`].
async fn resolve(which: Which, stop: &CancellationToken) -> Result<Prepared, CliError> {
    tokio::select! {
        done = find(which) => done,
        () = stop.cancelled() => Err(CliError::Interrupted),
    }
}

/// The DeadLetterQueue `which` names (see [`resolve`]). The one place that turns
/// `dlq_operator::resolve::target`'s errors into [`CliError::Target`].
async fn find(which: Which) -> Result<Prepared, CliError> {
    let Which {
        reference,
        standalone,
        files,
        name,
    } = which;
    if standalone {
        if files.is_empty() {
            return Err(CliError::Usage(
                "--standalone needs -f PATH (the manifests)".into(),
            ));
        }
        if reference.is_some() {
            return Err(CliError::Usage(
                "give the DeadLetterQueue with --name in --standalone mode, not as NAMESPACE/NAME"
                    .into(),
            ));
        }
        // Off the async threads: a file that blocks (a FIFO, a hung network mount) must
        // not keep a signal from ending the command.
        let name = name.unwrap_or_default();
        let read = tokio::task::spawn_blocking(move || target::in_files(&files, &name))
            .await
            .map_err(CliError::ManifestTask)?;
        return read.map_err(|e| CliError::Target(e.into()));
    }
    if !files.is_empty() || name.is_some() {
        return Err(CliError::Usage(
            "-f and --name are for --standalone; in a cluster give NAMESPACE/NAME".into(),
        ));
    }
    let reference = reference.unwrap_or_default();
    let (ns, name) = target::split_ref(&reference).map_err(CliError::Target)?;
    let client = kube::Client::try_default()
        .await
        .map_err(CliError::Kubernetes)?;
    target::in_cluster(client, ns, name)
        .await
        .map_err(|e| CliError::Target(e.into()))
}
