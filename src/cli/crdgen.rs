//! `dlq-operator crdgen [--out-dir DIR]`: the CustomResourceDefinitions as YAML.

use std::path::Path;
use std::process::ExitCode;

use dlq_operator::crd;

use super::error::CliError;
use super::output::{out, outln};

/// Writes every CRD to `out_dir` as `<plural>.<group>.yaml` (creating the directory),
/// naming each file written on stdout; without `out_dir`, prints them to stdout as one
/// multi-document YAML stream.
///
/// # Errors
/// [`CliError::File`] naming a directory or file that cannot be written;
/// [`CliError::Yaml`] or [`CliError::Stdout`].
pub fn crdgen(out_dir: Option<&Path>) -> Result<ExitCode, CliError> {
    for c in crd::all_crds() {
        let yaml = crd::crd_yaml(&c)?;
        match out_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| CliError::File {
                    path: dir.to_path_buf(),
                    source,
                })?;
                let path = dir.join(crd::crd_file_name(&c));
                std::fs::write(&path, yaml).map_err(|source| CliError::File {
                    path: path.clone(),
                    source,
                })?;
                outln!("wrote {}", path.display());
            }
            None => out!("---\n{yaml}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
