//! `dlq-operator rbac [--format yaml|markdown]`: the RBAC rules the operator needs.

use std::process::ExitCode;

use dlq_operator::rbac;

use super::args::RbacFormat;
use super::error::CliError;
use super::output::out;

/// Prints the rules as a ClusterRole named `dlq-operator` (YAML) or as the table of
/// docs/RBAC.md (Markdown).
///
/// # Errors
/// [`CliError::Stdout`] when the output cannot be written.
pub fn rbac(format: RbacFormat) -> Result<ExitCode, CliError> {
    match format {
        RbacFormat::Markdown => out!("{}", rbac::markdown()),
        RbacFormat::Yaml => out!("{}", rbac::cluster_role_yaml("dlq-operator")),
    }
    Ok(ExitCode::SUCCESS)
}
