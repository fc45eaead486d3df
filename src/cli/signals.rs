//! Stopping on a signal. Every command that stops cleanly takes one
//! [`CancellationToken`], cancelled by the first SIGINT (Ctrl-C) or SIGTERM (and SIGHUP
//! for the `dlq` commands), which the library's operations take as they are.

use tokio_util::sync::CancellationToken;

use super::output::err;

/// Which signals stop the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signals {
    /// SIGINT and SIGTERM: the operator (`run`), which SIGHUP still ends at once (its
    /// default action).
    Shutdown,
    /// SIGINT, SIGTERM and SIGHUP (its terminal closed): a one-shot `dlq` command, which
    /// must settle the message in hand whichever way it is stopped.
    Interrupt,
}

/// What is said once a signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A line on stderr ([`err`]).
    Stderr(&'static str),
    /// A log line at INFO.
    Log(&'static str),
    /// Nothing (the library logs its own shutdown).
    Silent,
}

impl Notice {
    fn tell(self) {
        match self {
            Notice::Stderr(line) => err(line),
            Notice::Log(line) => tracing::info!("{line}"),
            Notice::Silent => {}
        }
    }
}

/// A token cancelled by the first of `signals`, after which `notice` is given. The
/// handlers are installed before this returns (it must run inside the Tokio runtime), so
/// from then on such a signal stops the command cleanly — a `dlq` command between two
/// messages, with the message in hand settled, instead of being killed with that message
/// held (a quorum queue would count the return as a delivery, and drop a message already
/// at its delivery limit). A second signal changes nothing: the command is already
/// stopping. A handler that cannot be installed is reported on stderr and that signal
/// keeps its default action.
pub fn stop_on_signals(signals: Signals, notice: Notice) -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut kinds = vec![
            (SignalKind::interrupt(), "SIGINT"),
            (SignalKind::terminate(), "SIGTERM"),
        ];
        if signals == Signals::Interrupt {
            kinds.push((SignalKind::hangup(), "SIGHUP"));
        }
        let mut streams = Vec::new();
        for (kind, name) in kinds {
            match signal(kind) {
                Ok(s) => streams.push(s),
                Err(e) => err(&format!("warning: cannot handle {name}: {e}")),
            }
        }
        if streams.is_empty() {
            return token;
        }
        tokio::spawn(async move {
            let any = futures::future::select_all(streams.iter_mut().map(|s| Box::pin(s.recv())));
            any.await;
            cancel.cancel();
            notice.tell();
            // Keep the handlers (and so the signals caught) until the command ends.
            std::future::pending::<()>().await;
        });
    }
    #[cfg(not(unix))]
    {
        let _ = signals;
        tokio::spawn(async move {
            match tokio::signal::ctrl_c().await {
                Ok(()) => {
                    cancel.cancel();
                    notice.tell();
                }
                Err(e) => err(&format!("warning: cannot handle Ctrl-C: {e}")),
            }
        });
    }
    token
}
