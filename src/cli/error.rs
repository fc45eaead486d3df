//! [`CliError`]: why a command failed, with the text printed after `error: ` on stderr
//! and the exit code.

use std::path::PathBuf;

use dlq_operator::broker::BrokerError;
use dlq_operator::controller::RunError;
use dlq_operator::crd::InvalidSpec;
use dlq_operator::dlq::filter::FilterError;
use dlq_operator::duration::DurationError;
use dlq_operator::manifest::ManifestError;
use dlq_operator::resolve::target::TargetError;

/// The error of a `dlq` command stopped by a signal before it read a message: an empty
/// report would read as an empty dead-letter queue.
pub const NOTHING_READ: &str = "interrupted before any message was read; nothing was changed";

/// Why a command failed. Its `Display` is the message printed after `error: ` on stderr;
/// [`CliError::exit_code`] is the process's exit code. (Usage errors that clap finds
/// itself, such as a missing required flag, never get here: clap prints them and exits 2.)
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The async runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A write to standard output failed (a reader that went away is not an error:
    /// [`super::output::Stdout`]).
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
    /// A flag value, or a combination of flags, that the command refuses before it reads
    /// or touches anything; the message names the flag and what it must be.
    #[error("{0}")]
    Usage(String),
    /// A duration flag (`--resync`, `--interval`, `--bucket`) that does not parse.
    #[error("{flag}: {source}")]
    Duration {
        /// The flag, e.g. `--resync`.
        flag: &'static str,
        /// Why the duration was rejected.
        #[source]
        source: DurationError,
    },
    /// `simulate backoff --strategy` names no strategy (the parser's message).
    #[error("--strategy: {0}")]
    Strategy(String),
    /// `simulate backoff`'s flags make an invalid backoff; the fields of the RetryPolicy
    /// are named as the flags that set them ([`flag_names`]).
    #[error("{}", flag_names(.0))]
    Backoff(InvalidSpec),
    /// A `--filter` term (the term and why).
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The manifests cannot be read, validated or planned (file, document, resource and
    /// field named).
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The DeadLetterQueue a `dlq` command names cannot be found, read or planned
    /// (`dlq_operator::resolve::target`).
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The blocking task reading a `dlq` command's manifests failed (it panicked).
    #[error("reading the manifests failed: {0}")]
    ManifestTask(#[source] tokio::task::JoinError),
    /// No Kubernetes client could be built from the kubeconfig or the in-cluster
    /// service account.
    #[error(
        "cannot reach a Kubernetes API server (KUBECONFIG, ~/.kube/config or in-cluster): {0}; without a cluster, give --standalone -f PATH (manifest files)"
    )]
    Kubernetes(#[source] kube::Error),
    /// A `dlq` command's broker error, with what was done before it.
    #[error("DeadLetterQueue {key}: {source}{progress}")]
    Dlq {
        /// `namespace/name` of the DeadLetterQueue.
        key: String,
        /// The broker's error (boxed: it is the largest).
        #[source]
        source: Box<BrokerError>,
        /// What the command had done when the error came.
        progress: Progress,
    },
    /// A `dlq` command stopped by a signal before it read a message ([`NOTHING_READ`]).
    #[error("{}", NOTHING_READ)]
    Interrupted,
    /// `apply` could not write its report.
    #[error("{0}")]
    Apply(#[source] std::io::Error),
    /// `run --standalone` stopped: its apply reports could not be written, or the
    /// metrics address could not be bound.
    #[error("{0}")]
    Standalone(#[source] std::io::Error),
    /// `console` (cluster) could not list the DeadLetterQueues at start: the API
    /// server's error, and the RBAC to check.
    #[error("{0}; the console's ServiceAccount needs the RBAC in docs/CONSOLE.md (list deadletterqueues, get retrypolicies and secrets)")]
    ConsoleSource(String),
    /// `report` could not list what it scores from the cluster: which list, and why (a
    /// CRD not installed, the RBAC to check).
    #[error(transparent)]
    Report(#[from] dlq_operator::report::ListError),
    /// The controller stopped with an error (metrics address, Lease, selector).
    #[error(transparent)]
    Controller(#[from] RunError),
    /// A file `crdgen --out-dir` writes (or its directory) cannot be written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// YAML output (a plan, a CRD, a report) cannot be made.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    /// JSON output (a report, a simulation) cannot be made.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The progress bar's template is invalid.
    #[error(transparent)]
    ProgressTemplate(#[from] indicatif::style::TemplateError),
}

impl CliError {
    /// The exit code of a command that ended with this error: 1 for every error (a
    /// command that ran but did not do all its work, such as an interrupted replay, exits
    /// 1 too, without an error; clap's own usage errors exit 2).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Runtime(_)
            | CliError::Stdout(_)
            | CliError::Usage(_)
            | CliError::Duration { .. }
            | CliError::Strategy(_)
            | CliError::Backoff(_)
            | CliError::Filter(_)
            | CliError::Manifest(_)
            | CliError::Target(_)
            | CliError::ManifestTask(_)
            | CliError::Kubernetes(_)
            | CliError::Dlq { .. }
            | CliError::Interrupted
            | CliError::Apply(_)
            | CliError::Standalone(_)
            | CliError::ConsoleSource(_)
            | CliError::Report(_)
            | CliError::Controller(_)
            | CliError::File { .. }
            | CliError::Yaml(_)
            | CliError::Json(_)
            | CliError::ProgressTemplate(_) => 1,
        }
    }
}

/// What a `dlq` command had done when a broker error stopped it, shown after the error
/// on a line of its own (nothing when no message was read yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing to add (`dlq inspect`: it changes nothing).
    Nothing,
    /// `dlq replay`: messages read, copies the broker confirmed, and how many unsettled
    /// copies a lost connection can duplicate ([`dlq_operator::dlq::replay::crash_bound`]).
    Replay {
        /// Messages read.
        read: u64,
        /// Copies confirmed by the broker.
        confirmed: u64,
        /// At most this many copies were in flight.
        unsettled: u64,
    },
    /// `dlq repair` that had found its message: its one copy may have been confirmed
    /// before the error.
    Repair,
    /// `dlq purge`: messages read and removed (for good).
    Purge {
        /// Messages read.
        read: u64,
        /// Messages removed.
        removed: u64,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Progress::Repair => write!(f, "\n{}", dlq_operator::dlq::repair::STOPPED_NOTE),
            Progress::Nothing
            | Progress::Replay { read: 0, .. }
            | Progress::Purge { read: 0, .. } => Ok(()),
            Progress::Replay {
                read,
                confirmed,
                unsettled,
            } => write!(
                f,
                "\n{}",
                dlq_operator::dlq::replay::stopped_note(read, confirmed, unsettled)
            ),
            Progress::Purge { read, removed } => write!(
                f,
                "\nbefore the error: {read} messages read, {removed} of them removed (for good); \
                 every other message is still in the dead-letter queues"
            ),
        }
    }
}

/// `e` with the RetryPolicy fields that `simulate backoff`'s flags set named as those
/// flags (`spec.backoff.maxDelay` → `--max-delay`).
fn flag_names(e: &InvalidSpec) -> String {
    e.to_string()
        .replace("spec.backoff.initialDelay", "--initial-delay")
        .replace("spec.backoff.maxDelay", "--max-delay")
        .replace("spec.backoff.jitterRatio", "--jitter-ratio")
        .replace("spec.backoff.", "--")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_shown_only_once_a_message_was_read() {
        let broker = || BrokerError::NotFound {
            what: "queue \"q.dlq\"".into(),
        };
        let error = |progress| CliError::Dlq {
            key: "default/d".into(),
            source: Box::new(broker()),
            progress,
        };
        assert_eq!(
            error(Progress::Nothing).to_string(),
            "DeadLetterQueue default/d: queue \"q.dlq\" not found"
        );
        for progress in [
            Progress::Replay {
                read: 0,
                confirmed: 0,
                unsettled: 1000,
            },
            Progress::Purge {
                read: 0,
                removed: 0,
            },
        ] {
            assert!(!error(progress).to_string().contains("before the error"));
        }
        let replay = error(Progress::Replay {
            read: 20,
            confirmed: 18,
            unsettled: 1000,
        })
        .to_string();
        assert!(
            replay.contains("\nbefore the error: at least 20 messages read and 18 copies confirmed by the broker. Copies not yet settled (up to 1000)"),
            "{replay}"
        );
        let purge = error(Progress::Purge {
            read: 7,
            removed: 3,
        })
        .to_string();
        assert!(
            purge.ends_with("\nbefore the error: 7 messages read, 3 of them removed (for good); every other message is still in the dead-letter queues"),
            "{purge}"
        );
    }

    #[test]
    fn backoff_fields_are_named_as_flags() {
        let spec = InvalidSpec(vec![
            dlq_operator::crd::FieldError {
                field: "spec.backoff.maxDelay".into(),
                message: "maxDelay must be >= initialDelay".into(),
            },
            dlq_operator::crd::FieldError {
                field: "spec.backoff.multiplier".into(),
                message: "0.5 is too small".into(),
            },
        ]);
        assert_eq!(
            CliError::Backoff(spec).to_string(),
            "--max-delay: maxDelay must be >= initialDelay; --multiplier: 0.5 is too small"
        );
    }

    #[test]
    fn every_error_exits_1() {
        for e in [
            CliError::Usage("--rate 0.0: must be a number".into()),
            CliError::Interrupted,
            CliError::Strategy("unknown strategy".into()),
        ] {
            assert_eq!(e.exit_code(), 1, "{e}");
        }
        assert_eq!(CliError::Interrupted.to_string(), NOTHING_READ);
    }
}
