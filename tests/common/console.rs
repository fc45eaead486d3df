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
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlq-operator"))
            .args([
                "console",
                "--standalone",
                "-f",
                path,
                "--bind-address",
                "127.0.0.1:0",
                "--interval",
                "1s",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let lines = super::stderr_lines(&mut child);
        let link = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the console prints its login link");
            if let Some(link) = line.strip_prefix("console: ") {
                break link.to_string();
            }
        };
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
