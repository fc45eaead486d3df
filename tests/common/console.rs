//! The dead-letter console's process in tests: `dlq-operator console --standalone` on
//! `127.0.0.1:0`, its login link read from stderr, killed on drop.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The console process, killed when the test ends (also on a failed assertion).
pub struct Console {
    /// The process.
    pub child: Child,
    /// Its stderr, line by line.
    pub lines: Receiver<String>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The login token.
    pub token: String,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Console {
    /// Starts `console --standalone -f path` on 127.0.0.1:0 and reads the login link.
    pub fn start(path: &str) -> Console {
        let args = ["--standalone", "-f", path];
        let (child, lines, link) = spawn(&args, &[]);
        let (base, token) = link.split_once("/login?token=").expect("a login link");
        assert!(base.starts_with("http://127.0.0.1:"), "{link}");
        assert!(!base.ends_with(":0"), "the real port is printed: {link}");
        Console {
            child,
            lines,
            base: base.to_string(),
            token: token.to_string(),
        }
    }

    /// Starts `console --namespace ns` (the cluster mode) on 127.0.0.1:0 with
    /// `KUBECONFIG=kubeconfig` and reads the address it listens on (`token` is empty:
    /// users log in with their Kubernetes tokens).
    pub fn cluster(kubeconfig: &str, ns: &str) -> Console {
        let (child, lines, said) = spawn(&["--namespace", ns], &[("KUBECONFIG", kubeconfig)]);
        let base = said
            .strip_prefix("listening on ")
            .and_then(|s| s.split(' ').next())
            .unwrap_or_else(|| panic!("an address in {said:?}"))
            .trim_end_matches('/');
        assert!(base.starts_with("http://127.0.0.1:"), "{said}");
        Console {
            base: base.to_string(),
            child,
            lines,
            token: String::new(),
        }
    }

    /// Waits for a stderr line containing every one of `needles`.
    pub fn line_with(&self, needles: &[&str]) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no stderr line with {needles:?}"));
            if needles.iter().all(|n| line.contains(n)) {
                return line;
            }
        }
    }
}

/// Starts `console ARGS --bind-address 127.0.0.1:0 --interval 1s` with `env`: the process,
/// its stderr lines and what its first `console: ` line says.
fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Child, Receiver<String>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
        .arg("console")
        .args(args)
        .args(["--bind-address", "127.0.0.1:0", "--interval", "1s"])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let lines = super::stderr_lines(&mut child);
    let said = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the console prints where it listens");
        if let Some(said) = line.strip_prefix("console: ") {
            break said.to_string();
        }
    };
    (child, lines, said)
}
