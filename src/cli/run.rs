//! `dlq-operator run`: the Kubernetes controller, or with `--standalone` the operator on
//! manifest files without a cluster. Both stop cleanly on SIGINT or SIGTERM.

use std::process::ExitCode;
use std::time::Duration as StdDuration;

use dlq_operator::duration::parse_ms;
use dlq_operator::{controller, crd, manifest, standalone};

use super::args::RunArgs;
use super::error::CliError;
use super::signals::{self, Notice, Signals};

/// Runs the operator as `args` say: [`standalone`] or [`controller`] mode.
///
/// # Errors
/// As [`run_standalone`] and [`run_controller`].
pub async fn run(args: RunArgs) -> Result<ExitCode, CliError> {
    if args.standalone {
        run_standalone(args).await
    } else {
        run_controller(args).await
    }
}

/// A duration flag in milliseconds that must be greater than 0.
pub(super) fn positive_duration(flag: &'static str, value: &str) -> Result<StdDuration, CliError> {
    match parse_ms(value) {
        Ok(0) => Err(CliError::Usage(format!("{flag}: must be greater than 0"))),
        Ok(ms) => Ok(StdDuration::from_millis(ms)),
        Err(source) => Err(CliError::Duration { flag, source }),
    }
}

/// `run --standalone -f PATH…`: checks the flags and the manifests (fail fast at
/// start-up; later edits are re-checked by the runner), then reconciles until SIGINT or
/// SIGTERM ([`standalone::run`]).
///
/// # Errors
/// [`CliError::Usage`] or [`CliError::Duration`] for the flags (no `-f`, `-f -`, a bad
/// `--interval` or `--resync`); [`CliError::Manifest`] for invalid manifests;
/// [`CliError::Standalone`] when the runner stops on an I/O error.
async fn run_standalone(args: RunArgs) -> Result<ExitCode, CliError> {
    let RunArgs {
        files,
        interval,
        resync,
        metrics_bind_address,
        embedded_router,
        maturity_weights,
        ..
    } = args;
    if files.is_empty() {
        return Err(CliError::Usage(
            "run --standalone needs -f PATH (manifest file or directory)".into(),
        ));
    }
    if files
        .iter()
        .any(|f| f.as_path() == std::path::Path::new(manifest::STDIN))
    {
        return Err(CliError::Usage(
            "run --standalone -f -: standard input can be read only once, and run --standalone re-reads its manifests every interval; save them to a file and give -f FILE"
                .into(),
        ));
    }
    let interval = interval
        .map(|s| positive_duration("--interval", &s))
        .transpose()?;
    let resync = positive_duration("--resync", &resync)?;
    // Fail fast on invalid manifests at start-up; later edits are re-checked.
    standalone::load_and_plan(&files)?;
    let stop = signals::stop_on_signals(Signals::Shutdown, Notice::Silent);
    standalone::run(
        standalone::RunOptions {
            paths: files,
            interval,
            resync,
            metrics_addr: Some(metrics_bind_address),
            brokers: dlq_operator::rabbitmq::factory(),
            routers: embedded_router,
            maturity_weights,
        },
        stop,
    )
    .await
    .map_err(CliError::Standalone)?;
    Ok(ExitCode::SUCCESS)
}

/// `run`: checks the flags before reaching any cluster, then runs the controller until
/// SIGINT or SIGTERM (which drains the reconciles in flight) or until the Lease is lost
/// ([`controller::run`]).
///
/// # Errors
/// [`CliError::Usage`] or [`CliError::Duration`] for the flags (`-f`, a `--resync` under
/// 10 s, a namespace that is not an RFC 1123 label); [`CliError::Kubernetes`] without a
/// kubeconfig or service account; [`CliError::Controller`].
async fn run_controller(args: RunArgs) -> Result<ExitCode, CliError> {
    if !args.files.is_empty() {
        return Err(CliError::Usage(
            "-f PATH is for `run --standalone`; the controller reads the cluster".into(),
        ));
    }
    let resync = match parse_ms(&args.resync) {
        Ok(ms) if ms >= 10_000 => StdDuration::from_millis(ms),
        Ok(_) => {
            return Err(CliError::Usage(
                "--resync: must be at least 10s (each resync reads every resource's topology from the broker)"
                    .into(),
            ))
        }
        Err(source) => {
            return Err(CliError::Duration {
                flag: "--resync",
                source,
            })
        }
    };
    for (flag, value) in [
        ("--namespace", &args.namespace),
        ("--lease-namespace", &args.lease_namespace),
    ] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            if !crd::is_rfc1123_label(v) {
                return Err(CliError::Usage(format!(
                    "{flag} {v:?}: not a namespace name (RFC 1123 label: lower-case letters, digits and '-', at most 63)"
                )));
            }
        }
    }
    let client = kube::Client::try_default()
        .await
        .map_err(CliError::Kubernetes)?;
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let options = controller::Options {
        namespace: non_empty(args.namespace),
        selector: non_empty(args.selector),
        leader_election: args.leader_election,
        lease_name: args.lease_name,
        lease_namespace: non_empty(args.lease_namespace),
        identity: non_empty(args.identity).unwrap_or_else(default_identity),
        lease_duration_s: args.lease_duration,
        metrics_addr: args.metrics_bind_address,
        resync,
        concurrency: args.concurrency,
        embedded_router: args.embedded_router,
        maturity_weights: args.maturity_weights,
    };
    let stop = signals::stop_on_signals(
        Signals::Shutdown,
        Notice::Log("shutdown requested: draining in-flight reconciles"),
    );
    controller::run(client, options, stop).await?;
    Ok(ExitCode::SUCCESS)
}

/// `<host name>-<pid>`: unique enough among replicas that do not set `POD_NAME`.
pub(super) fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "dlq-operator".into());
    format!("{host}-{}", std::process::id())
}
