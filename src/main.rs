//! `dlq-operator` command line: a thin driver over the library (the commands are in
//! `cli/`, one module each).

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::args::Cli;
use cli::error::CliError;

fn main() -> ExitCode {
    let args = Cli::parse();
    cli::init_tracing(args.log_format);
    let result = tokio::runtime::Runtime::new()
        .map_err(CliError::Runtime)
        .and_then(|runtime| {
            let result = runtime.block_on(cli::execute(args.command));
            // Not waiting for a blocking read the command gave up on (a manifest on a hung
            // mount or a FIFO, abandoned after a signal): the command is over.
            runtime.shutdown_background();
            result
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            cli::output::err(&format!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}
