//! The console's browser tests: Debian's Chromium driven by playwright-core (npm, in
//! tests/console_browser, installed by `.ci/run`).

use std::path::PathBuf;
use std::process::Command;

use super::helm::skip;
use super::root;

/// The browser's path: `DLQ_CHROMIUM`, else Debian's.
pub fn chromium() -> PathBuf {
    std::env::var_os("DLQ_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// The directory of the browser scripts.
pub fn scripts() -> PathBuf {
    root().join("tests/console_browser")
}

/// True when node, playwright-core and Chromium are there; else reports `test` skipped
/// (failed with `DLQ_REQUIRE_TOOLS=1`).
pub fn browser_tools(test: &str) -> bool {
    let how = "apt-get install nodejs npm chromium, then npm ci in tests/console_browser (as .ci/run does)";
    if !matches!(Command::new("node").arg("--version").output(), Ok(o) if o.status.success()) {
        skip(test, &format!("node is not in PATH: {how}"));
        return false;
    }
    if !scripts()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        skip(test, &format!("playwright-core is not installed: {how}"));
        return false;
    }
    if !chromium().exists() {
        skip(
            test,
            &format!("no browser at {}: {how}", chromium().display()),
        );
        return false;
    }
    true
}

/// Runs `node SCRIPT` (in the scripts' directory) with `env`: its JSON step lines (printed
/// on stderr too). Panics, with the steps, when the script fails.
pub fn run_script(script: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let out = Command::new("node")
        .arg(scripts().join(script))
        .current_dir(scripts())
        .env("CHROMIUM", chromium())
        .envs(env.iter().copied())
        .output()
        .expect("node runs");
    let steps = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!(
        "browser steps:\n{steps}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the browser flow failed: {steps}");
    steps
}
