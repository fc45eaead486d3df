//! `dlq-operator` command line: a thin driver over the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rand::{rngs::StdRng, SeedableRng};

use dlq_operator::backoff::{simulate, Backoff, SimulationResult};
use dlq_operator::crd::{self, BackoffSpec, BackoffStrategy};
use dlq_operator::duration::{format_ms, parse_ms, Duration};
use dlq_operator::{manifest, standalone};

/// Standard output for the commands' results. A reader that went away
/// (`dlq-operator crdgen | head`) is not an error: the rest of the output is dropped, the
/// command's work goes on (an `apply` finishes, a replay is not cut short) and its exit
/// code still says how that work went. `print!` would panic there instead. Any other
/// write error is returned.
struct Stdout;

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
/// `Err(String)`.
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(&mut Stdout, format_args!($($arg)*))
            .map_err(|e| format!("cannot write to standard output: {e}"))?
    };
}

/// `println!` to [`Stdout`], like [`out!`].
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

/// A line on standard error, like `eprintln!` but without its panic when stderr is
/// closed (the exit code still tells). Control characters in it (an error quoting a queue
/// name or a broker reason) are escaped, its line breaks kept
/// ([`dlq_operator::printable::escape_lines`]).
fn err(line: &str) {
    use std::io::Write;
    let line = dlq_operator::printable::escape_lines(line);
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// clap parser of a whole-number flag that must be at least `MIN`: one error that says
/// so for a negative number (`--limit -1`), where clap would suggest `-- -1`, which then
/// fails too.
fn count_at_least<const MIN: u64>(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(n) if n >= MIN => Ok(n),
        _ => Err(format!("must be a whole number >= {MIN}")),
    }
}

/// clap parser of a whole-number flag between `MIN` and `MAX`, like [`count_at_least`].
fn count_between<const MIN: u64, const MAX: u64>(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(n) if (MIN..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("must be a whole number from {MIN} to {MAX}")),
    }
}

/// An age (`--older-than`, taken with hyphen values so that `-1s` reaches this one
/// error): a duration of 0 or more, in milliseconds.
///
/// # Errors
/// A negative or invalid duration, with what it must be.
fn age(value: &str) -> Result<u64, String> {
    if value.starts_with('-') {
        return Err(
            "must be a positive duration (e.g. 7d, 12h, 30m): an age is never negative".into(),
        );
    }
    parse_ms(value).map_err(|e| format!("{e}; must be a positive duration (e.g. 7d, 12h, 30m)"))
}

/// clap parser of a listening address: IP:port only, with the example a host name
/// (`localhost:8080`) is missing.
fn socket_address(value: &str) -> Result<std::net::SocketAddr, String> {
    value.parse().map_err(|_| {
        let port = value.rsplit_once(':').map_or("8080", |(_, p)| p);
        let port = if port.parse::<u16>().is_ok() { port } else { "8080" };
        format!("takes IP:port, e.g. 127.0.0.1:{port}, 0.0.0.0:{port} or [::1]:{port} (a host name such as localhost is not resolved)")
    })
}

#[derive(Parser)]
#[command(
    name = "dlq-operator",
    version,
    about = "Retry and dead-letter policies for RabbitMQ queues"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum RbacFormat {
    Markdown,
    Yaml,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Reconcile the manifests once against the broker and report what was created,
    /// found in place or could not be done. Exit 0 only when everything is in place.
    Apply {
        /// Manifest file or directory (repeatable).
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
    },
    /// Run the operator: the Kubernetes controller (kubeconfig from $KUBECONFIG,
    /// ~/.kube/config or the in-cluster service account), or with --standalone from
    /// manifest files without a cluster.
    Run {
        /// Run from manifest files without a Kubernetes cluster.
        #[arg(long)]
        standalone: bool,
        /// Manifest file or directory (repeatable; with --standalone).
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// Poll interval (e.g. 5s); default: the smallest spec.monitoring.interval
        /// (--standalone).
        #[arg(long)]
        interval: Option<String>,
        /// Re-apply unchanged resources at least this often, in both modes (repairs
        /// objects changed on the broker behind the operator's back; at least 10s for the
        /// controller).
        #[arg(long, default_value = "5m")]
        resync: String,
        /// Watch only this namespace (default: all namespaces).
        #[arg(long, env = "WATCH_NAMESPACE")]
        namespace: Option<String>,
        /// Only reconcile DeadLetterQueues and RetryPolicies with these labels (a label
        /// selector, e.g. `dlqoperator.io/shard=a`), to shard across deployments.
        #[arg(long, short = 'l')]
        selector: Option<String>,
        /// Take the leader Lease before reconciling (disable for a single local process).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        leader_election: bool,
        /// Name of the leader Lease.
        #[arg(long, default_value = "dlq-operator")]
        lease_name: String,
        /// Namespace of the leader Lease (default: $POD_NAMESPACE, else the kubeconfig's
        /// or in-cluster namespace, else `default`).
        #[arg(long, env = "POD_NAMESPACE")]
        lease_namespace: Option<String>,
        /// Lease duration in seconds: how long a dead leader blocks the others.
        #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
        lease_duration: u64,
        /// Identity in the Lease and in Events (default: $POD_NAME, or host name and pid).
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
        /// Address of /metrics, /healthz and /readyz: IP:port (e.g. 127.0.0.1:8080,
        /// [::1]:8080); host names are not resolved.
        #[arg(long, default_value = "0.0.0.0:8080", value_parser = socket_address)]
        metrics_bind_address: std::net::SocketAddr,
        /// Reconciles running at once per controller.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
        concurrency: u16,
    },
    /// Print the RBAC rules the operator needs (every API call it makes).
    Rbac {
        /// `markdown` (docs/RBAC.md) or `yaml` (a ClusterRole).
        #[arg(long, value_enum, default_value_t = RbacFormat::Yaml)]
        format: RbacFormat,
    },
    /// Print the planned topology and alert rules without touching a broker.
    Render {
        /// Manifest file or directory (repeatable).
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// Print only the Prometheus rule file (`groups:`) of every DeadLetterQueue, for
        /// Prometheus's `rule_files` where the Prometheus Operator is not used.
        #[arg(long)]
        rules: bool,
    },
    /// Write the CustomResourceDefinitions as YAML.
    Crdgen {
        /// Directory to write `<plural>.<group>.yaml` files to; without it, print to stdout.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Models and simulations.
    Simulate {
        #[command(subcommand)]
        what: SimulateCommand,
    },
    /// Dead-letter operations on a DeadLetterQueue's dead-letter queues.
    Dlq {
        #[command(subcommand)]
        what: DlqCommand,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum ReportFormat {
    Table,
    Json,
    Yaml,
}

/// Which DeadLetterQueue a `dlq` command works on.
#[derive(clap::Args)]
struct Which {
    /// NAMESPACE/NAME of the DeadLetterQueue in the cluster (KUBECONFIG,
    /// ~/.kube/config or in-cluster); with --standalone, use --name.
    #[arg(required_unless_present_any = ["name", "standalone"])]
    reference: Option<String>,
    /// Read the DeadLetterQueue from manifest files instead of a cluster.
    #[arg(long, requires = "name")]
    standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    files: Vec<PathBuf>,
    /// The DeadLetterQueue's NAME (or NAMESPACE/NAME) in the files (with --standalone).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum ReplayTarget {
    OriginalQueue,
    OriginalExchange,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Summarise what is in the dead-letter queues: counts by error class, reason, retry
    /// count and original queue, oldest and newest age, and a sample. No message is lost
    /// or dead-lettered; on quorum queues the order of the messages read may change (see
    /// docs/ARCHITECTURE.md, "Inspection").
    Inspect {
        #[command(flatten)]
        which: Which,
        /// Messages shown whole in the sample (0 or more).
        #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = count_at_least::<0>)]
        sample: u64,
        /// Print sampled bodies in full (default: the first 256 bytes).
        #[arg(long)]
        show_payload: bool,
        /// Read at most this many messages (the counts then cover those).
        #[arg(long, default_value_t = 10_000, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
        max_messages: u64,
        /// Report format.
        #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
        output: ReportFormat,
    },
    /// Send dead-lettered messages back where they failed: publish with a publisher
    /// confirm, then ack from the dead-letter queue (at-least-once). The retry state is
    /// reset and dlq-replayed-at, dlq-replay-id and dlq-replay-count are added. A crash
    /// (SIGKILL, a lost connection; not Ctrl-C, SIGTERM or SIGHUP, which stop cleanly)
    /// duplicates at most --max-in-flight copies (1000 by default; fewer with --rate: one
    /// second's worth, or --limit). Exit 1 when a copy failed or the run was interrupted
    /// (skipped messages are reported, not failures).
    Replay {
        #[command(flatten)]
        which: Which,
        /// Which messages (repeatable, terms joined by `,`): class=C, reason=R, queue=Q
        /// (also !=), age>D or age<D (e.g. 1h, 7d), header.NAME=V (also !=).
        #[arg(long)]
        filter: Vec<String>,
        /// Replay at most N messages (at least 1).
        #[arg(long, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
        limit: Option<u64>,
        /// At most this many messages per second (at least 0.001).
        #[arg(long, allow_negative_numbers = true)]
        rate: Option<f64>,
        /// Count what would be replayed; publish nothing, remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// original-queue: the DeadLetterQueue's source queue through the default exchange
        /// (only that queue, even when its exchange fans out); original-exchange: the
        /// exchange and routing key the message was first published with, only when the
        /// exchange's bindings route it to the source queue and no other queue (else the
        /// message is skipped and stays).
        #[arg(long, value_enum, default_value_t = ReplayTarget::OriginalQueue)]
        to: ReplayTarget,
        /// Skip a message already replayed this many times (at least 1).
        #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
        max_replays: u64,
        /// At most N copies published whose originals the broker has not yet been seen to
        /// remove: what a crash can duplicate (1 to 1000). Smaller is slower: 1 removes
        /// each original, confirmed by a round trip, before the next copy is published.
        #[arg(long, value_name = "N", default_value_t = dlq_operator::dlq::replay::MAX_IN_FLIGHT as u64,
              allow_negative_numbers = true,
              value_parser = count_between::<1, { dlq_operator::dlq::replay::MAX_IN_FLIGHT as u64 }>)]
        max_in_flight: u64,
        /// Report format.
        #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
        output: ReportFormat,
    },
    /// Remove the dead-lettered messages older than --older-than (and matching every
    /// --filter); every other message stays. Needs --yes unless --dry-run.
    Purge {
        #[command(flatten)]
        which: Which,
        /// Remove only messages dead-lettered more than this long ago (e.g. 7d, 12h).
        #[arg(long, required = true, allow_hyphen_values = true)]
        older_than: String,
        /// More terms, as for `dlq replay --filter`.
        #[arg(long)]
        filter: Vec<String>,
        /// Count what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Confirm the removal (required without --dry-run).
        #[arg(long)]
        yes: bool,
        /// Report format.
        #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
        output: ReportFormat,
    },
}

#[derive(Subcommand)]
enum SimulateCommand {
    /// Thundering-herd model: N clients fail at t=0; per retry attempt, the peak number
    /// of clients retrying within one bucket, for each strategy side by side.
    Backoff {
        /// Strategy to simulate (repeatable): Fixed, Exponential, ExponentialJitter,
        /// FullJitter, EqualJitter, DecorrelatedJitter; default: all six.
        #[arg(long)]
        strategy: Vec<String>,
        /// Number of clients that fail together at t=0.
        #[arg(long, default_value_t = 1000)]
        clients: u32,
        /// Retry attempts per client.
        #[arg(long, default_value_t = 6)]
        attempts: u32,
        /// Bucket width (a duration, e.g. 5s).
        #[arg(long, default_value = "5s", allow_hyphen_values = true)]
        bucket: String,
        /// backoff.initialDelay.
        #[arg(long, default_value = "1s", allow_hyphen_values = true)]
        initial_delay: String,
        /// backoff.multiplier.
        #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
        multiplier: f64,
        /// backoff.maxDelay.
        #[arg(long, default_value = "60s", allow_hyphen_values = true)]
        max_delay: String,
        /// backoff.jitter for ExponentialJitter (a duration; the other strategies take no
        /// jitter).
        #[arg(long, conflicts_with = "jitter_ratio", allow_hyphen_values = true)]
        jitter: Option<String>,
        /// backoff.jitterRatio for ExponentialJitter (0..=1). Default 0.5 when neither
        /// --jitter nor --jitter-ratio is given.
        #[arg(long, allow_negative_numbers = true)]
        jitter_ratio: Option<f64>,
        /// RNG seed (same seed, same result).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

fn init_tracing(format: LogFormat) {
    // lapin logs a returned (unroutable) publish at WARN with the message body, and a
    // channel the broker closes at ERROR, also the expected ones (the passive declare that
    // finds an exchange missing): the commands and the operator report every failure
    // themselves, from lapin's results, without the payload.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lapin=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (stderr closed, `2>&1 | head`) is dropped:
        // tracing-subscriber would report it with `eprintln!`, which panics there.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The DeadLetterQueue a `dlq` command names, validated and planned.
async fn resolve(which: Which) -> Result<dlq_operator::reconcile::Prepared, String> {
    use dlq_operator::dlq::target;
    let Which {
        reference,
        standalone,
        files,
        name,
    } = which;
    if standalone {
        if files.is_empty() {
            return Err("--standalone needs -f PATH (the manifests)".into());
        }
        if reference.is_some() {
            return Err(
                "give the DeadLetterQueue with --name in --standalone mode, not as NAMESPACE/NAME"
                    .into(),
            );
        }
        // Off the async threads: a file that blocks (a FIFO, a hung network mount) must
        // not keep a signal from ending the command.
        let name = name.unwrap_or_default();
        return tokio::task::spawn_blocking(move || target::from_files(&files, &name))
            .await
            .map_err(|e| format!("reading the manifests failed: {e}"))?;
    }
    if !files.is_empty() || name.is_some() {
        return Err("-f and --name are for --standalone; in a cluster give NAMESPACE/NAME".into());
    }
    let reference = reference.unwrap_or_default();
    let (ns, name) = target::split_ref(&reference)?;
    let client = kube::Client::try_default().await.map_err(|e| {
        format!(
            "cannot reach a Kubernetes API server (KUBECONFIG, ~/.kube/config or in-cluster): {e}"
        )
    })?;
    target::from_cluster(client, ns, name).await
}

/// `report` in `format`; JSON with the characters that `serde_json` leaves raw and a
/// terminal would act on escaped ([`dlq_operator::printable::escape_json`]). `table` must
/// escape what it quotes itself.
fn format_report<T: serde::Serialize>(
    report: &T,
    format: ReportFormat,
    table: impl FnOnce() -> String,
) -> Result<String, String> {
    Ok(match format {
        ReportFormat::Table => table(),
        ReportFormat::Json => {
            let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
            dlq_operator::printable::escape_json(&json).into_owned() + "\n"
        }
        ReportFormat::Yaml => serde_yaml_ng::to_string(report).map_err(|e| e.to_string())?,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `dlq-operator dlq …`.
async fn dlq(command: DlqCommand) -> Result<ExitCode, String> {
    use dlq_operator::dlq::{browse, filter::Filter, replay};
    match command {
        DlqCommand::Inspect {
            which,
            sample,
            show_payload,
            max_messages,
            output,
        } => {
            let stop = stop_on_signals("interrupted: giving back the messages read, then stopping");
            let prepared = unless_stopped(&stop, resolve(which)).await?;
            let opts = browse::InspectOptions {
                max_messages,
                sample_size: usize::try_from(sample).unwrap_or(usize::MAX),
                preview_bytes: if show_payload {
                    usize::MAX
                } else {
                    dlq_operator::printable::PREVIEW_BYTES
                },
            };
            let report = browse::inspect_until(
                &prepared.connection,
                &prepared.topology,
                opts,
                now_ms(),
                &stop,
            )
            .await
            .map_err(|e| format!("DeadLetterQueue {}: {e}", prepared.key))?;
            if report.interrupted && report.scanned == 0 {
                return Err(NOTHING_READ.into());
            }
            out!("{}", format_report(&report, output, || report.table())?);
            Ok(if report.interrupted {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        DlqCommand::Replay {
            which,
            filter,
            limit,
            rate,
            dry_run,
            to,
            max_replays,
            max_in_flight,
            output,
        } => {
            // Every argument is checked before anything is read or touched.
            let filter = Filter::parse(&filter).map_err(|e| e.to_string())?;
            if let Some(r) = rate {
                if !(r.is_finite() && r >= 0.001) {
                    return Err(format!(
                        "--rate {r:?}: must be a number of messages per second, at least 0.001"
                    ));
                }
            }
            let stop = stop_on_signals("interrupted: settling the copies in flight, then stopping");
            let prepared = unless_stopped(&stop, resolve(which)).await?;
            let started = now_ms();
            let opts = replay::ReplayOptions {
                filter,
                limit,
                rate,
                dry_run,
                target: match to {
                    ReplayTarget::OriginalQueue => replay::Target::OriginalQueue,
                    ReplayTarget::OriginalExchange => replay::Target::OriginalExchange,
                },
                max_replays,
                replay_id: format!("{started}-{:08x}", rand::random::<u32>()),
                // In 1..=MAX_IN_FLIGHT (the parser's range).
                max_in_flight: usize::try_from(max_in_flight).unwrap_or(replay::MAX_IN_FLIGHT),
            };
            let window = replay::crash_bound(opts.max_in_flight, opts.rate, opts.limit);
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} read  {msg}")
                    .map_err(|e| e.to_string())?,
            );
            // (read, replayed) so far: what an error in the middle reports.
            let mut so_far = (0, 0);
            let mut progress = |r: &replay::ReplayReport| {
                bar.set_length(r.total);
                bar.set_position(r.scanned);
                bar.set_message(format!("replayed {}", r.replayed));
                so_far = (r.scanned, r.replayed);
            };
            let report = replay::replay(
                &prepared.connection,
                &prepared.topology,
                &opts,
                started,
                &stop,
                &mut progress,
            )
            .await
            .map_err(|e| {
                let mut message = format!("DeadLetterQueue {}: {e}", prepared.key);
                if so_far.0 > 0 {
                    message.push_str(&format!(
                        "\nbefore the error: at least {} messages read and {} copies confirmed \
                         by the broker. Copies not yet settled (up to {}) may have arrived too, \
                         and the originals of those and of confirmed copies whose acks were \
                         not yet sent are back in the dead-letter queues if the connection \
                         was lost: a second replay sends those again (at-least-once; \
                         deduplicate on message_id). Nothing is lost.",
                        so_far.0, so_far.1, window
                    ));
                }
                message
            })?;
            bar.finish_and_clear();
            if stop.load(std::sync::atomic::Ordering::SeqCst) && report.scanned == 0 {
                return Err(NOTHING_READ.into());
            }
            out!(
                "{}",
                format_report(&report, output, || replay_table(&report))?
            );
            Ok(if report.outcome == replay::Outcome::Succeeded {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        DlqCommand::Purge {
            which,
            older_than,
            filter,
            dry_run,
            yes,
            output,
        } => {
            let older_than =
                age(&older_than).map_err(|e| format!("--older-than {:?}: {e}", older_than))?;
            let filter = Filter::parse(&filter)
                .map_err(|e| e.to_string())?
                .older_than(older_than);
            if !dry_run && !yes {
                return Err(
                    "dlq purge removes messages for good: add --yes (or --dry-run to count them first)"
                        .into(),
                );
            }
            let stop = stop_on_signals("interrupted: giving back the messages read, then stopping");
            let prepared = unless_stopped(&stop, resolve(which)).await?;
            let mut report = dlq_operator::dlq::purge::PurgeReport::default();
            dlq_operator::dlq::purge::purge_into(
                &prepared.connection,
                &prepared.topology,
                &filter,
                dry_run,
                now_ms(),
                &stop,
                &mut report,
            )
            .await
            .map_err(|e| {
                let mut message = format!("DeadLetterQueue {}: {e}", prepared.key);
                if report.scanned > 0 {
                    message.push_str(&format!(
                        "\nbefore the error: {} messages read, {} of them removed (for good); \
                         every other message is still in the dead-letter queues",
                        report.scanned, report.removed
                    ));
                }
                message
            })?;
            if report.interrupted && report.scanned == 0 {
                return Err(NOTHING_READ.into());
            }
            out!(
                "{}",
                format_report(&report, output, || purge_table(&report))?
            );
            Ok(if report.interrupted {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// The purge report as text (the resource name escaped, like every text the tables quote).
fn purge_table(r: &dlq_operator::dlq::purge::PurgeReport) -> String {
    use dlq_operator::printable::{shown, PREVIEW_BYTES};
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
fn replay_table(r: &dlq_operator::dlq::replay::ReplayReport) -> String {
    use dlq_operator::printable::{escape, shown, PREVIEW_BYTES};
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
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            err(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(execute(cli.command));
    // Not waiting for a blocking read the command gave up on (a manifest on a hung mount
    // or a FIFO, abandoned after a signal): the command is over.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(message) => {
            err(&format!("error: {message}"));
            ExitCode::FAILURE
        }
    }
}

async fn execute(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Dlq { what } => dlq(what).await,
        Command::Apply { files } => {
            let (_, planned) = standalone::load_and_plan(&files).map_err(|e| e.to_string())?;
            let summary = standalone::apply_all(&planned, &mut Stdout)
                .await
                .map_err(|e| e.to_string())?;
            Ok(if summary.not_ready == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Run {
            standalone: true,
            files,
            interval,
            resync,
            metrics_bind_address,
            ..
        } => {
            if files.is_empty() {
                return Err("run --standalone needs -f PATH (manifest file or directory)".into());
            }
            if files
                .iter()
                .any(|f| f.as_path() == std::path::Path::new(manifest::STDIN))
            {
                return Err(
                    "run --standalone -f -: standard input can be read only once, and run --standalone re-reads its manifests every interval; save them to a file and give -f FILE"
                        .into(),
                );
            }
            let interval = interval
                .map(|s| {
                    parse_ms(&s)
                        .map_err(|e| format!("--interval: {e}"))
                        .and_then(|ms| {
                            if ms == 0 {
                                Err("--interval: must be greater than 0".to_string())
                            } else {
                                Ok(std::time::Duration::from_millis(ms))
                            }
                        })
                })
                .transpose()?;
            let resync = match parse_ms(&resync) {
                Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms),
                Ok(_) => return Err("--resync: must be greater than 0".into()),
                Err(e) => return Err(format!("--resync: {e}")),
            };
            // Fail fast on invalid manifests at start-up; later edits are re-checked.
            standalone::load_and_plan(&files).map_err(|e| e.to_string())?;
            standalone::run(
                standalone::RunOptions {
                    paths: files,
                    interval,
                    resync,
                    metrics_addr: Some(metrics_bind_address),
                },
                shutdown_signal(),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            standalone: false,
            files,
            resync,
            namespace,
            selector,
            leader_election,
            lease_name,
            lease_namespace,
            lease_duration,
            identity,
            metrics_bind_address,
            concurrency,
            ..
        } => {
            if !files.is_empty() {
                return Err(
                    "-f PATH is for `run --standalone`; the controller reads the cluster".into(),
                );
            }
            let resync = match parse_ms(&resync) {
                Ok(ms) if ms >= 10_000 => std::time::Duration::from_millis(ms),
                Ok(_) => {
                    return Err(
                        "--resync: must be at least 10s (each resync reads every resource's topology from the broker)"
                            .into(),
                    )
                }
                Err(e) => return Err(format!("--resync: {e}")),
            };
            for (flag, value) in [
                ("--namespace", &namespace),
                ("--lease-namespace", &lease_namespace),
            ] {
                if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                    if !crd::is_rfc1123_label(v) {
                        return Err(format!(
                            "{flag} {v:?}: not a namespace name (RFC 1123 label: lower-case letters, digits and '-', at most 63)"
                        ));
                    }
                }
            }
            let client = kube::Client::try_default()
                .await
                .map_err(|e| format!("cannot reach a Kubernetes API server (KUBECONFIG, ~/.kube/config or in-cluster): {e}"))?;
            let identity = identity
                .filter(|s| !s.is_empty())
                .unwrap_or_else(default_identity);
            let (tx, rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutdown requested: draining in-flight reconciles");
                let _ = tx.send(true);
            });
            dlq_operator::controller::run(
                client,
                dlq_operator::controller::Options {
                    namespace: namespace.filter(|s| !s.is_empty()),
                    selector: selector.filter(|s| !s.is_empty()),
                    leader_election,
                    lease_name,
                    lease_namespace: lease_namespace.filter(|s| !s.is_empty()),
                    identity,
                    lease_duration_s: lease_duration,
                    metrics_addr: metrics_bind_address,
                    resync,
                    concurrency,
                },
                rx,
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Rbac { format } => {
            match format {
                RbacFormat::Markdown => out!("{}", dlq_operator::controller::rbac::markdown()),
                RbacFormat::Yaml => out!(
                    "{}",
                    dlq_operator::controller::rbac::cluster_role_yaml("dlq-operator")
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Render { files, rules } => {
            let (_, planned) = standalone::load_and_plan(&files).map_err(|e| e.to_string())?;
            let out = if rules {
                standalone::render_rules(&planned)
            } else {
                standalone::render(&planned)
            };
            out!("{}", out.map_err(|e| e.to_string())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Crdgen { out_dir } => {
            for c in crd::all_crds() {
                let yaml = crd::crd_yaml(&c).map_err(|e| e.to_string())?;
                match &out_dir {
                    Some(dir) => {
                        std::fs::create_dir_all(dir)
                            .map_err(|e| format!("{}: {e}", dir.display()))?;
                        let path = dir.join(crd::crd_file_name(&c));
                        std::fs::write(&path, yaml)
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        outln!("wrote {}", path.display());
                    }
                    None => out!("---\n{yaml}"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulate {
            what:
                SimulateCommand::Backoff {
                    strategy,
                    clients,
                    attempts,
                    bucket,
                    initial_delay,
                    multiplier,
                    max_delay,
                    jitter,
                    jitter_ratio,
                    seed,
                    output,
                },
        } => {
            let strategies: Vec<BackoffStrategy> = if strategy.is_empty() {
                BackoffStrategy::ALL.to_vec()
            } else {
                strategy
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<_, String>>()
                    .map_err(|e| format!("--strategy: {e}"))?
            };
            let bucket_ms = parse_ms(&bucket).map_err(|e| format!("--bucket: {e}"))?;
            if bucket_ms == 0 {
                return Err("--bucket: must be greater than 0".into());
            }
            if !(1..=10_000_000).contains(&clients) {
                return Err("--clients must be between 1 and 10000000".into());
            }
            if !(1..=100).contains(&attempts) {
                return Err("--attempts must be between 1 and 100 (maxRetries' range)".into());
            }
            let mut results: Vec<SimulationResult> = Vec::new();
            for s in strategies {
                let jitter_spec = s == BackoffStrategy::ExponentialJitter;
                let spec = BackoffSpec {
                    strategy: s,
                    initial_delay: Duration::new(&initial_delay),
                    multiplier,
                    max_delay: Duration::new(&max_delay),
                    jitter: jitter.clone().filter(|_| jitter_spec).map(Duration::new),
                    jitter_ratio: if jitter_spec && jitter.is_none() {
                        Some(jitter_ratio.unwrap_or(0.5))
                    } else {
                        None
                    },
                };
                let backoff = Backoff::from_spec(&spec).map_err(|e| {
                    e.to_string()
                        .replace("spec.backoff.initialDelay", "--initial-delay")
                        .replace("spec.backoff.maxDelay", "--max-delay")
                        .replace("spec.backoff.jitterRatio", "--jitter-ratio")
                        .replace("spec.backoff.", "--")
                })?;
                let mut rng = StdRng::seed_from_u64(seed);
                results.push(simulate(&backoff, clients, attempts, bucket_ms, &mut rng));
            }
            if output == Output::Json {
                let json = serde_json::json!({
                    "clients": clients,
                    "attempts": attempts,
                    "bucketMs": bucket_ms,
                    "seed": seed,
                    "strategies": results,
                });
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
                );
            } else {
                outln!(
                    "peak clients retrying in one {} bucket ({clients} clients failed at t=0, seed {seed})",
                    format_ms(bucket_ms)
                );
                out!("{:>8}", "attempt");
                for r in &results {
                    out!(" {:>18}", r.strategy.name());
                }
                outln!();
                for n in 0..attempts as usize {
                    out!("{:>8}", n + 1);
                    for r in &results {
                        out!(" {:>18}", r.peaks.get(n).copied().unwrap_or(0));
                    }
                    outln!();
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `<host name>-<pid>`: unique enough among replicas that do not set `POD_NAME`.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "dlq-operator".into());
    format!("{host}-{}", std::process::id())
}

/// Completes on Ctrl-C or SIGTERM.
/// The error of a `dlq` command stopped by a signal before it read a message: an empty
/// report would read as an empty dead-letter queue.
const NOTHING_READ: &str = "interrupted before any message was read; nothing was changed";

/// `work` (finding the DeadLetterQueue: reading manifests or the cluster, nothing touched
/// on the broker yet), given up as soon as `stop` is set, so that Ctrl-C during a slow
/// Kubernetes API call ends the command at once ([`dlq_operator::dlq::stopped`]).
///
/// # Errors
/// `work`'s error, or "interrupted" when stopped first.
async fn unless_stopped<T>(
    stop: &std::sync::atomic::AtomicBool,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::select! {
        done = work => done,
        () = dlq_operator::dlq::stopped(stop) => Err(NOTHING_READ.into()),
    }
}

/// The stop flag of a one-shot `dlq` command, set by SIGINT (Ctrl-C), SIGTERM or SIGHUP
/// (its terminal closed); `notice` then goes to stderr. The handlers are installed before
/// this returns, so from then on such a signal stops the command between two messages,
/// with the message in hand settled, instead of killing it with that message held (a
/// quorum queue would count the return as a delivery, and drop a message already at its
/// delivery limit). A second signal changes nothing: the command is already stopping.
/// A handler that cannot be installed is reported on stderr and the signal keeps its
/// default action.
fn stop_on_signals(notice: &'static str) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let set = stop.clone();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut streams = Vec::new();
        for (kind, name) in [
            (SignalKind::interrupt(), "SIGINT"),
            (SignalKind::terminate(), "SIGTERM"),
            (SignalKind::hangup(), "SIGHUP"),
        ] {
            match signal(kind) {
                Ok(s) => streams.push(s),
                Err(e) => err(&format!("warning: cannot handle {name}: {e}")),
            }
        }
        if streams.is_empty() {
            return stop;
        }
        tokio::spawn(async move {
            let any = futures::future::select_all(streams.iter_mut().map(|s| Box::pin(s.recv())));
            any.await;
            set.store(true, std::sync::atomic::Ordering::SeqCst);
            err(notice);
            // Keep the handlers (and so the signals caught) until the command ends.
            std::future::pending::<()>().await;
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            set.store(true, std::sync::atomic::Ordering::SeqCst);
            err(notice);
        }
    });
    stop
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
