//! `dlq-operator router`: the retry routers of every DeadLetterQueue in router mode, from
//! the cluster or (`--standalone`) from manifest files, until SIGINT or SIGTERM (docs/ROUTER.md).

use std::process::ExitCode;

use dlq_operator::crd;
use dlq_operator::metrics::{Metrics, Readiness};
use dlq_operator::router::{sources, Fleet};

use super::args::RouterArgs;
use super::error::CliError;
use super::run::positive_duration;
use super::signals::{self, Notice, Signals};

/// Runs the routers as `args` say, serving `/metrics`, `/healthz` and `/readyz`.
///
/// # Errors
/// [`CliError::Usage`] / [`CliError::Duration`] for the flags (`-l/--selector` is for
/// the cluster, not `--standalone`; `--namespace` there is only warned about, since it
/// may come from `WATCH_NAMESPACE`), [`CliError::Manifest`] for
/// invalid manifests (standalone, at start), [`CliError::Kubernetes`] without a
/// kubeconfig, [`CliError::Standalone`] when the metrics address cannot be bound.
pub async fn router(args: RouterArgs) -> Result<ExitCode, CliError> {
    let resync = positive_duration("--resync", &args.resync)?;
    if args.standalone == args.files.is_empty() {
        return Err(CliError::Usage(if args.standalone {
            "router --standalone needs -f PATH (manifest file or directory)".into()
        } else {
            "-f PATH is for `router --standalone`; without it the router reads the cluster".into()
        }));
    }
    if args.standalone
        && args
            .files
            .iter()
            .any(|f| f.as_path() == std::path::Path::new(dlq_operator::manifest::STDIN))
    {
        return Err(CliError::Usage(
            "router --standalone -f -: standard input can be read only once, and the router re-reads its manifests every --resync; save them to a file and give -f FILE".into(),
        ));
    }
    if args.standalone && args.selector.is_some() {
        return Err(CliError::Usage(
            "-l/--selector chooses DeadLetterQueues in the cluster; with --standalone the routers are those of the -f manifests (drop -l, or drop --standalone to read the cluster)".into(),
        ));
    }
    if args.standalone && args.namespace.is_some() {
        // Not an error: it may come from WATCH_NAMESPACE, set for the cluster mode.
        tracing::warn!("--namespace (or WATCH_NAMESPACE) is ignored with --standalone: the routers are those of the -f manifests");
    }
    if let Some(ns) = args.namespace.as_deref().filter(|n| !n.is_empty()) {
        if !crd::is_rfc1123_label(ns) {
            return Err(CliError::Usage(format!(
                "--namespace {ns:?}: not a namespace name (RFC 1123 label)"
            )));
        }
    }
    let client = if args.standalone {
        // Fail fast on invalid manifests at start-up; later edits are re-checked.
        dlq_operator::resolve::manifests::load_and_plan_all(&args.files)?;
        None
    } else {
        Some(
            kube::Client::try_default()
                .await
                .map_err(CliError::Kubernetes)?,
        )
    };
    let stop = signals::stop_on_signals(
        Signals::Shutdown,
        Notice::Log("shutdown requested: draining the retry routers"),
    );
    let metrics = Metrics::new();
    let readiness = Readiness::new("starting");
    readiness.set_ready();
    let server =
        dlq_operator::serve::start(args.metrics_bind_address, metrics.clone(), readiness, &stop)
            .await
            .map_err(CliError::Standalone)?;
    let fleet = Fleet::new(metrics.router().clone());
    match client {
        None => {
            let files = args.files;
            let source = || {
                let found = sources::in_files(&files).map(|targets| sources::Found {
                    targets,
                    unresolved: Vec::new(),
                });
                std::future::ready(found)
            };
            sources::follow(&fleet, source, resync, &stop).await;
        }
        Some(client) => {
            let (namespace, selector) = (args.namespace, args.selector);
            let source = || {
                sources::in_cluster(
                    &client,
                    namespace.as_deref().filter(|n| !n.is_empty()),
                    selector.as_deref().filter(|s| !s.is_empty()),
                )
            };
            sources::follow(&fleet, source, resync, &stop).await;
        }
    }
    server.stop().await;
    Ok(ExitCode::SUCCESS)
}
