//! `dlq-operator console`: the dead-letter console ([`dlq_operator::console`],
//! docs/CONSOLE.md) until SIGINT or SIGTERM — over manifest files (`--standalone -f`) or
//! over the cluster's DeadLetterQueues.

use std::process::ExitCode;

use dlq_operator::access::KubeReviewer;
use dlq_operator::console::auth::Auth;
use dlq_operator::console::source::{Source, Target};
use dlq_operator::{console, manifest};
use kube::runtime::events::{Recorder, Reporter};

use super::args::ConsoleArgs;
use super::error::CliError;
use super::run::positive_duration;
use super::signals::{self, Notice, Signals};

/// The `reportingController` of the console's audit Events.
pub const REPORTING_CONTROLLER: &str = "dlqoperator.io/console";

/// What a mode gives the console: where its DeadLetterQueues come from (and the first
/// read), who gets in, the Event recorder (cluster) and the login token (standalone).
struct Mode {
    source: Source,
    targets: Vec<Target>,
    auth: Auth,
    events: Option<Recorder>,
    token: Option<String>,
}

/// Checks the flags and the first read of the DeadLetterQueues, binds, prints where it
/// listens on stderr (standalone: the login link `console: http://127.0.0.1:PORT/login?token=…`),
/// then serves until SIGINT or SIGTERM.
///
/// # Errors
/// [`CliError::Usage`] for the flags (`--standalone` without `-f`, `-f` without
/// `--standalone`, `-f -`, a non-loopback `--bind-address` with `--standalone`),
/// [`CliError::Duration`], [`CliError::Manifest`] for invalid manifests,
/// [`CliError::Kubernetes`] without a kubeconfig, [`CliError::ConsoleSource`] when the
/// DeadLetterQueues cannot be listed, [`CliError::Standalone`] when the address cannot be bound or the server fails.
pub async fn console(args: ConsoleArgs) -> Result<ExitCode, CliError> {
    let interval = args
        .interval
        .as_deref()
        .map(|s| positive_duration("--interval", s))
        .transpose()?;
    let scan_ttl = positive_duration("--scan-ttl", &args.scan_ttl)?;
    let mode = if args.standalone {
        standalone_mode(&args)?
    } else {
        cluster_mode(&args).await?
    };
    let bound = console::Console::bind(
        console::Options {
            source: mode.source,
            targets: mode.targets,
            bind: args.bind_address,
            interval,
            scan_max_messages: args.scan_max_messages,
            scan_ttl,
            brokers: dlq_operator::rabbitmq::factory(),
            events: mode.events,
        },
        mode.auth,
    )
    .await
    .map_err(CliError::Standalone)?;
    let addr = bound.local_addr().map_err(CliError::Standalone)?;
    match mode.token {
        // The one place the token is shown: to whoever started the console.
        Some(token) => eprintln!("console: http://{addr}/login?token={token}"),
        None => eprintln!(
            "console: listening on http://{addr}/ (log in with a Kubernetes bearer token)"
        ),
    }
    let stop = signals::stop_on_signals(Signals::Shutdown, Notice::Silent);
    bound.serve(stop).await.map_err(CliError::Standalone)?;
    Ok(ExitCode::SUCCESS)
}

/// `--standalone -f PATH…`: the manifests, a loopback address, a new random token.
fn standalone_mode(args: &ConsoleArgs) -> Result<Mode, CliError> {
    if args.files.is_empty() {
        return Err(CliError::Usage(
            "console --standalone needs -f PATH (manifest file or directory)".into(),
        ));
    }
    if args
        .files
        .iter()
        .any(|f| f.as_path() == std::path::Path::new(manifest::STDIN))
    {
        return Err(CliError::Usage(
            "console --standalone -f -: standard input can be read only once, and the console re-reads its manifests every interval; save them to a file and give -f FILE".into(),
        ));
    }
    console::check_bind(args.bind_address).map_err(CliError::Usage)?;
    let (_, planned) = dlq_operator::standalone::load_and_plan(&args.files)?;
    let targets = planned.into_iter().map(Target::from).collect();
    let (auth, token) = Auth::new_token();
    Ok(Mode {
        source: Source::Files(args.files.clone()),
        targets,
        auth,
        events: None,
        token: Some(token),
    })
}

/// The cluster (KUBECONFIG, ~/.kube/config or in-cluster): its DeadLetterQueues (all
/// namespaces or `--namespace`), callers reviewed by the API server, audit Events.
async fn cluster_mode(args: &ConsoleArgs) -> Result<Mode, CliError> {
    if !args.files.is_empty() {
        return Err(CliError::Usage(
            "-f PATH is for `console --standalone`; without it the console reads the cluster"
                .into(),
        ));
    }
    let client = kube::Client::try_default()
        .await
        .map_err(CliError::Kubernetes)?;
    let source = Source::Cluster {
        client: client.clone(),
        namespace: args.namespace.clone().filter(|ns| !ns.is_empty()),
    };
    // The first read says at once whether the console's identity may list them.
    let targets = source.read(&[]).await.map_err(CliError::ConsoleSource)?;
    let reporter = Reporter {
        controller: REPORTING_CONTROLLER.into(),
        instance: Some(
            std::env::var("POD_NAME")
                .ok()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(super::run::default_identity),
        ),
    };
    Ok(Mode {
        source,
        targets,
        auth: Auth::Kubernetes(KubeReviewer::new(client.clone()).shared()),
        events: Some(Recorder::new(client, reporter)),
        token: None,
    })
}
