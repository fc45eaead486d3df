//! `dlq-operator simulate backoff`: the thundering-herd model of the backoff strategies
//! ([`dlq_operator::backoff::simulate`]).

use std::process::ExitCode;

use rand::{rngs::StdRng, SeedableRng};

use dlq_operator::backoff::{simulate, Backoff, SimulationResult};
use dlq_operator::crd::{BackoffSpec, BackoffStrategy};
use dlq_operator::duration::{format_ms, parse_ms, Duration};

use super::args::{BackoffArgs, Output, SimulateCommand};
use super::error::CliError;
use super::output::{out, outln};

/// Runs a `simulate` command.
///
/// # Errors
/// As [`backoff`].
pub fn simulate_command(what: SimulateCommand) -> Result<ExitCode, CliError> {
    match what {
        SimulateCommand::Backoff(args) => backoff(&args),
    }
}

/// Simulates each strategy of `args` (every one by default) with the same seed and
/// prints, per retry attempt, the peak number of clients retrying in one bucket: a table
/// side by side, or JSON.
///
/// # Errors
/// [`CliError::Strategy`], [`CliError::Duration`] (`--bucket`), [`CliError::Usage`] (a
/// count out of range) or [`CliError::Backoff`] (the backoff the flags make is invalid),
/// before anything is simulated; [`CliError::Json`] or [`CliError::Stdout`].
fn backoff(args: &BackoffArgs) -> Result<ExitCode, CliError> {
    let strategies: Vec<BackoffStrategy> = if args.strategy.is_empty() {
        BackoffStrategy::ALL.to_vec()
    } else {
        args.strategy
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, String>>()
            .map_err(CliError::Strategy)?
    };
    let bucket_ms = parse_ms(&args.bucket).map_err(|source| CliError::Duration {
        flag: "--bucket",
        source,
    })?;
    if bucket_ms == 0 {
        return Err(CliError::Usage("--bucket: must be greater than 0".into()));
    }
    if !(1..=10_000_000).contains(&args.clients) {
        return Err(CliError::Usage(
            "--clients must be between 1 and 10000000".into(),
        ));
    }
    if !(1..=100).contains(&args.attempts) {
        return Err(CliError::Usage(
            "--attempts must be between 1 and 100 (maxRetries' range)".into(),
        ));
    }
    let mut results: Vec<SimulationResult> = Vec::new();
    for strategy in strategies {
        let backoff = Backoff::from_spec(&spec(args, strategy)).map_err(CliError::Backoff)?;
        let mut rng = StdRng::seed_from_u64(args.seed);
        results.push(simulate(
            &backoff,
            args.clients,
            args.attempts,
            bucket_ms,
            &mut rng,
        ));
    }
    print(args, bucket_ms, &results)?;
    Ok(ExitCode::SUCCESS)
}

/// The `spec.backoff` of a RetryPolicy that `args` describe, with `strategy`: the jitter
/// flags only for ExponentialJitter (a jitter ratio of 0.5 when neither is given).
fn spec(args: &BackoffArgs, strategy: BackoffStrategy) -> BackoffSpec {
    let jitter_spec = strategy == BackoffStrategy::ExponentialJitter;
    BackoffSpec {
        strategy,
        initial_delay: Duration::new(&args.initial_delay),
        multiplier: args.multiplier,
        max_delay: Duration::new(&args.max_delay),
        jitter: args
            .jitter
            .clone()
            .filter(|_| jitter_spec)
            .map(Duration::new),
        jitter_ratio: if jitter_spec && args.jitter.is_none() {
            Some(args.jitter_ratio.unwrap_or(0.5))
        } else {
            None
        },
    }
}

/// Prints `results` as `args.output` says.
fn print(args: &BackoffArgs, bucket_ms: u64, results: &[SimulationResult]) -> Result<(), CliError> {
    let (clients, seed) = (args.clients, args.seed);
    if args.output == Output::Json {
        let json = serde_json::json!({
            "clients": clients,
            "attempts": args.attempts,
            "bucketMs": bucket_ms,
            "seed": seed,
            "strategies": results,
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    outln!(
        "peak clients retrying in one {} bucket ({clients} clients failed at t=0, seed {seed})",
        format_ms(bucket_ms)
    );
    out!("{:>8}", "attempt");
    for r in results {
        out!(" {:>18}", r.strategy.name());
    }
    outln!();
    for n in 0..args.attempts as usize {
        out!("{:>8}", n + 1);
        for r in results {
            out!(" {:>18}", r.peaks.get(n).copied().unwrap_or(0));
        }
        outln!();
    }
    Ok(())
}
