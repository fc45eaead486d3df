//! `dlq-operator console --standalone -f …`: the dead-letter console
//! ([`dlq_operator::console`], docs/CONSOLE.md) until SIGINT or SIGTERM.

use std::process::ExitCode;

use dlq_operator::{console, manifest, standalone};

use super::args::ConsoleArgs;
use super::error::CliError;
use super::run::positive_duration;
use super::signals::{self, Notice, Signals};

/// Checks the flags and the manifests, binds, prints the login link on stderr
/// (`console: http://127.0.0.1:PORT/login?token=…`), then serves until SIGINT or SIGTERM.
///
/// # Errors
/// [`CliError::Usage`] for the flags (no `--standalone`: the cluster mode is not there
/// yet; no `-f`, `-f -`, a non-loopback `--bind-address`), [`CliError::Duration`],
/// [`CliError::Manifest`] for invalid manifests, [`CliError::Standalone`] when the address
/// cannot be bound or the server fails.
pub async fn console(args: ConsoleArgs) -> Result<ExitCode, CliError> {
    if !args.standalone {
        return Err(CliError::Usage(
            "console needs --standalone -f PATH for now (the cluster mode, with Kubernetes authentication, is not there yet)".into(),
        ));
    }
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
    let interval = args
        .interval
        .map(|s| positive_duration("--interval", &s))
        .transpose()?;
    let scan_ttl = positive_duration("--scan-ttl", &args.scan_ttl)?;
    let (_, planned) = standalone::load_and_plan(&args.files)?;
    let (auth, token) = console::auth::Auth::new_token();
    let bound = console::Console::bind(
        console::Options {
            paths: args.files,
            planned,
            bind: args.bind_address,
            interval,
            scan_max_messages: args.scan_max_messages,
            scan_ttl,
            brokers: dlq_operator::broker::default_factory(),
        },
        auth,
    )
    .await
    .map_err(CliError::Standalone)?;
    let addr = bound.local_addr().map_err(CliError::Standalone)?;
    // The one place the token is shown: to whoever started the console.
    eprintln!("console: http://{addr}/login?token={token}");
    let stop = signals::stop_on_signals(Signals::Shutdown, Notice::Silent);
    bound.serve(stop).await.map_err(CliError::Standalone)?;
    Ok(ExitCode::SUCCESS)
}
