//! The command line: the clap types of every command and flag, and the parsers of the
//! flag values clap checks itself (`dlq-operator --help` and each command's `--help`
//! are made from the doc comments here).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use dlq_operator::dlq::replay::MAX_IN_FLIGHT;
use dlq_operator::duration::parse_ms;
use dlq_operator::maturity::Weights;

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
pub fn age(value: &str) -> Result<u64, String> {
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

/// `dlq-operator`'s flags and command.
#[derive(Parser)]
#[command(
    name = "dlq-operator",
    version,
    about = "Retry and dead-letter policies for RabbitMQ queues"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format`: how log lines are written to stderr.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `rbac --format`.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum RbacFormat {
    Markdown,
    Yaml,
}

/// `simulate backoff --output`.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum Output {
    Table,
    Json,
}

/// `--output` of the `dlq` commands' reports.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum ReportFormat {
    Table,
    Json,
    Yaml,
}

/// The commands.
#[derive(Subcommand)]
pub enum Command {
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
    Run(RunArgs),
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
    /// Run the retry router of every DeadLetterQueue in router mode (spec.router.enabled)
    /// and, with --standalone, of every Redis DeadLetterQueue (docs/REDIS.md) until SIGINT
    /// or SIGTERM, which drains it: from the cluster, or with --standalone from manifest
    /// files. Several router processes may run at once.
    Router(RouterArgs),
    /// Serve the dead-letter console (docs/CONSOLE.md): every DeadLetterQueue's depth,
    /// its dead letters by group, the messages, replay and purge with a dry run first,
    /// and repair & replay of one message.
    /// With --standalone from manifest files, on a loopback address, behind a random token
    /// printed on stderr at start.
    Console(ConsoleArgs),
    /// How far each DeadLetterQueue has come in adopting retries and dead-lettering:
    /// its maturity score (retry, dead-letter and monitoring parts) and the steps still
    /// missing, worst first. From the cluster, or with --standalone from manifest files
    /// and their brokers. Exit 1 when a broker cannot be read (--standalone).
    Report(ReportArgs),
    /// Dead-letter operations on a DeadLetterQueue's dead-letter queues.
    Dlq {
        #[command(subcommand)]
        what: DlqCommand,
    },
}

/// The flags of `run` (the controller, or `--standalone`).
#[derive(clap::Args)]
pub struct RunArgs {
    /// Run from manifest files without a Kubernetes cluster.
    #[arg(long)]
    pub standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Poll interval (e.g. 5s); default: the smallest spec.monitoring.interval
    /// (--standalone).
    #[arg(long)]
    pub interval: Option<String>,
    /// Re-apply unchanged resources at least this often, in both modes (repairs
    /// objects changed on the broker behind the operator's back; at least 10s for the
    /// controller).
    #[arg(long, default_value = "5m")]
    pub resync: String,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only reconcile DeadLetterQueues, RetryPolicies and DeadLetterReplays with these
    /// labels (a label selector, e.g. `dlqoperator.io/shard=a`), to shard across deployments.
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// Take the leader Lease before reconciling (disable for a single local process).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "dlq-operator")]
    pub lease_name: String,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else the kubeconfig's
    /// or in-cluster namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Lease duration in seconds: how long a dead leader blocks the others.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    pub lease_duration: u64,
    /// Identity in the Lease and in Events (default: $POD_NAME, or host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Address of /metrics, /healthz and /readyz: IP:port (e.g. 127.0.0.1:8080,
    /// [::1]:8080); host names are not resolved.
    // The doc comment is the --help text: `[::1]` stays as written, not a rustdoc link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, default_value = "0.0.0.0:8080", value_parser = socket_address)]
    pub metrics_bind_address: std::net::SocketAddr,
    /// Reconciles running at once per controller.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// Run the retry router of each DeadLetterQueue in router mode inside this process
    /// (false when `dlq-operator router` runs elsewhere, e.g. the chart's router
    /// Deployment).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub embedded_router: bool,
    /// Weights of the maturity score's retry, dead-letter and monitoring parts
    /// (status.maturity, dlq_maturity_score): three numbers from 0 to 1 summing to 1.
    #[arg(long, default_value = "0.4,0.4,0.2", value_parser = maturity_weights, allow_hyphen_values = true)]
    pub maturity_weights: Weights,
}

/// The flags of `report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Read the DeadLetterQueues from manifest files (and read their brokers once)
    /// instead of a cluster.
    #[arg(long)]
    pub standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Only this namespace (default: all namespaces; cluster only).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
    /// Weights of the retry, dead-letter and monitoring parts: three numbers from 0 to 1
    /// summing to 1 (default: in a cluster the weights the operator used,
    /// status.maturity.weights; else 0.4,0.4,0.2).
    #[arg(long, value_parser = maturity_weights, allow_hyphen_values = true)]
    pub maturity_weights: Option<Weights>,
}

/// clap parser of `--maturity-weights` (its error says what the three numbers are).
fn maturity_weights(value: &str) -> Result<Weights, String> {
    value.parse::<Weights>().map_err(|e| e.to_string())
}

/// The flags of `router`.
#[derive(clap::Args)]
pub struct RouterArgs {
    /// Read the DeadLetterQueues from manifest files instead of a cluster.
    #[arg(long)]
    pub standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// How often the DeadLetterQueues (and their RetryPolicies and Secrets) are read
    /// again to start, restart or stop routers.
    #[arg(long, default_value = "30s")]
    pub resync: String,
    /// Only this namespace (default: all namespaces; cluster only).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only DeadLetterQueues with these labels (a label selector; cluster only).
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// Address of /metrics, /healthz and /readyz: IP:port.
    #[arg(long, default_value = "0.0.0.0:8080", value_parser = socket_address)]
    pub metrics_bind_address: std::net::SocketAddr,
}

/// The flags of `console`.
#[derive(clap::Args)]
pub struct ConsoleArgs {
    /// Read the DeadLetterQueues from manifest files and let in the holder of a random
    /// token printed at start (without it: the cluster's DeadLetterQueues, and users log
    /// in with Kubernetes bearer tokens checked by TokenReview and SubjectAccessReview).
    #[arg(long)]
    pub standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Only this namespace's DeadLetterQueues (default: all namespaces; cluster only).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Address to listen on, IP:port (port 0 picks a free one, printed at start). With
    /// --standalone a loopback address only (127.0.0.1:PORT or [::1]:PORT); in a cluster
    /// e.g. 0.0.0.0:8081.
    // The doc comment is the --help text: `[::1]` stays as written, not a rustdoc link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = socket_address)]
    pub bind_address: std::net::SocketAddr,
    /// Depth poll interval (e.g. 15s); default: the smallest spec.monitoring.interval.
    #[arg(long)]
    pub interval: Option<String>,
    /// Messages a scan of a DeadLetterQueue reads at most (every one read is given back).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub scan_max_messages: u64,
    /// How long a scan's groups are shown before viewing the page scans again.
    #[arg(long, default_value = "60s")]
    pub scan_ttl: String,
}

/// Which DeadLetterQueue a `dlq` command works on.
#[derive(clap::Args)]
pub struct Which {
    /// NAMESPACE/NAME of the DeadLetterQueue in the cluster (KUBECONFIG,
    /// ~/.kube/config or in-cluster); with --standalone, use --name.
    #[arg(required_unless_present_any = ["name", "standalone"])]
    pub reference: Option<String>,
    /// Read the DeadLetterQueue from manifest files instead of a cluster.
    #[arg(long, requires = "name")]
    pub standalone: bool,
    /// Manifest file or directory (repeatable; with --standalone).
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// The DeadLetterQueue's NAME (or NAMESPACE/NAME) in the files (with --standalone).
    #[arg(long)]
    pub name: Option<String>,
}

/// `dlq replay --to`.
#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum ReplayTarget {
    OriginalQueue,
    OriginalExchange,
}

/// The `dlq` commands.
#[derive(Subcommand)]
pub enum DlqCommand {
    /// Summarise what is in the dead-letter queues: counts by error class, reason, retry
    /// count and original queue, oldest and newest age, and a sample. No message is lost
    /// or dead-lettered; on quorum queues the order of the messages read may change (see
    /// docs/ARCHITECTURE.md, "Inspection").
    Inspect(InspectArgs),
    /// Send dead-lettered messages back where they failed: publish with a publisher
    /// confirm, then ack from the dead-letter queue (at-least-once). The retry state is
    /// reset and dlq-replayed-at, dlq-replay-id and dlq-replay-count are added. A crash
    /// (SIGKILL, a lost connection; not Ctrl-C, SIGTERM or SIGHUP, which stop cleanly)
    /// duplicates at most --max-in-flight copies (1000 by default; fewer with --rate: one
    /// second's worth, or --limit). Exit 1 when a copy failed or the run was interrupted
    /// (skipped messages are reported, not failures).
    Replay(ReplayArgs),
    /// Remove the dead-lettered messages older than --older-than (and matching every
    /// --filter); every other message stays. Needs --yes unless --dry-run.
    Purge(PurgeArgs),
    /// Repair one dead-lettered message and send it back: a replay of the message whose
    /// message_id is --id, with a new JSON body and/or headers set or removed. The copy is
    /// published to the source queue with a publisher confirm, then the original is
    /// removed; message_id is kept and dlq-repaired-at added. x-*, dlq-*, CC and BCC
    /// headers cannot be edited. Exit 1 unless it was repaired (not found, skipped,
    /// refused: nothing changed).
    Repair(RepairArgs),
}

/// The flags of `dlq inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub which: Which,
    /// Messages shown whole in the sample (0 or more).
    #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = count_at_least::<0>)]
    pub sample: u64,
    /// Print sampled bodies in full (default: the first 256 bytes).
    #[arg(long)]
    pub show_payload: bool,
    /// Read at most this many messages (the counts then cover those).
    #[arg(long, default_value_t = 10_000, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
    pub max_messages: u64,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

/// The flags of `dlq replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub which: Which,
    /// Which messages (repeatable, terms joined by `,`): class=C, reason=R, queue=Q
    /// (also !=), age>D or age<D (e.g. 1h, 7d), header.NAME=V (also !=), id=M (the
    /// message_id property, exactly; also !=).
    #[arg(long)]
    pub filter: Vec<String>,
    /// Replay at most N messages (at least 1).
    #[arg(long, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
    pub limit: Option<u64>,
    /// At most this many messages per second (at least 0.001).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Count what would be replayed; publish nothing, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// original-queue: the DeadLetterQueue's source queue through the default exchange
    /// (only that queue, even when its exchange fans out); original-exchange: the
    /// exchange and routing key the message was first published with, only when the
    /// exchange's bindings route it to the source queue and no other queue (else the
    /// message is skipped and stays).
    #[arg(long, value_enum, default_value_t = ReplayTarget::OriginalQueue)]
    pub to: ReplayTarget,
    /// Skip a message already replayed this many times (at least 1).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = count_at_least::<1>)]
    pub max_replays: u64,
    /// At most N copies published whose originals the broker has not yet been seen to
    /// remove: what a crash can duplicate (1 to 1000). Smaller is slower: 1 removes
    /// each original, confirmed by a round trip, before the next copy is published.
    #[arg(long, value_name = "N", default_value_t = MAX_IN_FLIGHT as u64,
          allow_negative_numbers = true,
          value_parser = count_between::<1, { MAX_IN_FLIGHT as u64 }>)]
    pub max_in_flight: u64,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

/// The flags of `dlq purge`.
#[derive(clap::Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    pub which: Which,
    /// Remove only messages dead-lettered more than this long ago (e.g. 7d, 12h).
    #[arg(long, required = true, allow_hyphen_values = true)]
    pub older_than: String,
    /// More terms, as for `dlq replay --filter`.
    #[arg(long)]
    pub filter: Vec<String>,
    /// Count what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm the removal (required without --dry-run).
    #[arg(long)]
    pub yes: bool,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

/// The flags of `dlq repair`.
#[derive(clap::Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub which: Which,
    /// The message_id property of the dead-lettered message (exact; if several messages
    /// share it, the first one read is repaired).
    #[arg(long, value_name = "MESSAGE_ID")]
    pub id: String,
    /// The new body: this file's content, which must be JSON (kept byte for byte).
    #[arg(long, value_name = "FILE", conflicts_with = "body_json")]
    pub body_file: Option<PathBuf>,
    /// The new body as JSON text (kept byte for byte).
    #[arg(long, value_name = "JSON")]
    pub body_json: Option<String>,
    /// Set header K to V (repeatable): V is a JSON number, true/false or "quoted string"
    /// when it parses as one, else the text itself.
    #[arg(long, value_name = "K=V")]
    pub set_header: Vec<String>,
    /// Remove header K (repeatable).
    #[arg(long, value_name = "K")]
    pub remove_header: Vec<String>,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

/// The `simulate` commands.
#[derive(Subcommand)]
pub enum SimulateCommand {
    /// Thundering-herd model: N clients fail at t=0; per retry attempt, the peak number
    /// of clients retrying within one bucket, for each strategy side by side.
    Backoff(BackoffArgs),
}

/// The flags of `simulate backoff`.
#[derive(clap::Args)]
pub struct BackoffArgs {
    /// Strategy to simulate (repeatable): Fixed, Exponential, ExponentialJitter,
    /// FullJitter, EqualJitter, DecorrelatedJitter; default: all six.
    #[arg(long)]
    pub strategy: Vec<String>,
    /// Number of clients that fail together at t=0.
    #[arg(long, default_value_t = 1000)]
    pub clients: u32,
    /// Retry attempts per client.
    #[arg(long, default_value_t = 6)]
    pub attempts: u32,
    /// Bucket width (a duration, e.g. 5s).
    #[arg(long, default_value = "5s", allow_hyphen_values = true)]
    pub bucket: String,
    /// backoff.initialDelay.
    #[arg(long, default_value = "1s", allow_hyphen_values = true)]
    pub initial_delay: String,
    /// backoff.multiplier.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub multiplier: f64,
    /// backoff.maxDelay.
    #[arg(long, default_value = "60s", allow_hyphen_values = true)]
    pub max_delay: String,
    /// backoff.jitter for ExponentialJitter (a duration; the other strategies take no
    /// jitter).
    #[arg(long, conflicts_with = "jitter_ratio", allow_hyphen_values = true)]
    pub jitter: Option<String>,
    /// backoff.jitterRatio for ExponentialJitter (0..=1). Default 0.5 when neither
    /// --jitter nor --jitter-ratio is given.
    #[arg(long, allow_negative_numbers = true)]
    pub jitter_ratio: Option<f64>,
    /// RNG seed (same seed, same result).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}
