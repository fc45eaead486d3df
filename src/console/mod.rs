//! The dead-letter console (docs/CONSOLE.md): a small web UI served by the operator
//! binary (`dlq-operator console --standalone -f …`) to look at dead letters and act on
//! them through the same core as the CLI: [`crate::dlq::browse::inspect_with`] (cached,
//! bounded scans: [`scan`]), [`crate::dlq::replay::replay_with`] and
//! [`crate::dlq::purge::purge_with`] ([`actions`]). Depths, backlog ratio and alert state
//! come from the collector `run --standalone` uses ([`crate::collector::groups`],
//! [`crate::collector::poll`]), polled by the console itself, with a depth ring per
//! DeadLetterQueue ([`history`]).
//!
//! Two modes, one code: standalone ([`source::Source::Files`], [`auth::Auth::Token`]) it
//! binds a loopback address and lets in whoever presents the random token printed at
//! start; in a cluster ([`source::Source::Cluster`], [`auth::Auth::Kubernetes`]) it lists
//! the DeadLetterQueues from the API server, lets in whoever presents a Kubernetes bearer
//! token (TokenReview) and shows and allows per DeadLetterQueue what SubjectAccessReview
//! allows; its audit trail is also Kubernetes Events on the DeadLetterQueue ([`audit`]).

pub mod actions;
pub mod audit;
pub mod auth;
pub mod history;
pub mod jobs;
pub mod repair;
pub mod respond;
pub mod scan;
pub mod server;
pub mod source;
pub mod templates;
pub mod views;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker::BrokerFactory;
use crate::collector::{Collector, Reading};
use crate::lock::{Locked, RwLocked};
use source::{Source, Target};

/// Body bytes kept per message by a scan (the message view's preview).
pub const PREVIEW_BYTES: usize = 4096;

/// What the console serves and how.
pub struct Options {
    /// Where the DeadLetterQueues come from (read again when due, [`Source::due`]; on an
    /// error the last read stays in force).
    pub source: Source,
    /// The DeadLetterQueues as read at start.
    pub targets: Vec<Target>,
    /// Where to listen (port 0 picks one); standalone ([`auth::Auth::Token`]) a loopback
    /// address only ([`check_bind`]).
    pub bind: SocketAddr,
    /// Poll interval; default: the smallest `spec.monitoring.interval` (15 s without).
    pub interval: Option<Duration>,
    /// Messages a scan reads at most per DeadLetterQueue.
    pub scan_max_messages: u64,
    /// How long a scan is shown before a page view starts a new one.
    pub scan_ttl: Duration,
    /// The brokers ([`crate::rabbitmq::factory`], or a fake in tests).
    pub brokers: Arc<dyn BrokerFactory>,
    /// In a cluster: the recorder of the audit's Events on the DeadLetterQueues.
    pub events: Option<kube::runtime::events::Recorder>,
}

/// Refuses an address a standalone console must not listen on: anything but loopback
/// (its only protection is the token; it must not be reachable from the network).
///
/// # Errors
/// The message saying so, naming the address.
pub fn check_bind(addr: SocketAddr) -> Result<(), String> {
    // Exactly the addresses the Host check answers to (`auth::host_ok`): another
    // 127.0.0.0/8 address would be bound, then every request refused (421).
    let ip = addr.ip();
    if ip == std::net::Ipv4Addr::LOCALHOST || ip == std::net::Ipv6Addr::LOCALHOST {
        Ok(())
    } else {
        Err(format!(
            "--bind-address {addr}: the standalone console listens on a loopback address only (127.0.0.1 or [::1]); reach it from elsewhere through an SSH tunnel or kubectl port-forward"
        ))
    }
}

/// What the last poll said of one DeadLetterQueue.
#[derive(Debug, Clone, Default)]
pub struct Polled {
    /// Dead-letter depth (`None`: the listing failed).
    pub depth: Option<u64>,
    /// Backlog ratio.
    pub ratio: Option<f64>,
    /// Alert state name, `Unknown` when the listing failed.
    pub alert: &'static str,
}

/// A replay or purge whose dry run was shown: what its confirmation does.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Who asked (only they can confirm).
    pub user: String,
    /// The DeadLetterQueue.
    pub key: String,
    /// `replay` or `purge`.
    pub kind: &'static str,
    /// Which messages.
    pub filter: crate::dlq::filter::Filter,
    /// The same, for people (shown).
    pub what: String,
    /// The dry run's count (would be replayed / removed).
    pub count: u64,
    /// Messages the dry run read.
    pub scanned: u64,
    /// The dry run's notes (skipped, unknown ages), shown.
    pub notes: String,
    /// When the dry run was shown: a confirmation older than [`PENDING_TTL`] is refused.
    pub created: std::time::Instant,
}

/// How long a dry run's confirmation stays valid (after that, count again).
pub const PENDING_TTL: Duration = Duration::from_secs(15 * 60);

/// Everything the handlers share.
pub struct State {
    /// Who may log in.
    pub auth: auth::Auth,
    /// Open sessions.
    pub sessions: auth::Sessions,
    /// The `Host` names answered to (and so what a same-origin POST is).
    pub hosts: auth::Hosts,
    /// The brokers.
    pub brokers: Arc<dyn BrokerFactory>,
    /// The DeadLetterQueues in force.
    pub targets: RwLock<Arc<Vec<Target>>>,
    /// In a cluster: the recorder of the audit's Events.
    pub events: Option<kube::runtime::events::Recorder>,
    /// The last poll per DeadLetterQueue.
    pub polled: Mutex<BTreeMap<String, Polled>>,
    /// Depth rings.
    pub history: Mutex<history::DepthHistory>,
    /// Cached scans.
    pub scans: Arc<scan::Scans>,
    /// Replays started by the console.
    pub jobs: jobs::Jobs,
    /// Dry runs awaiting confirmation, by one-time action id.
    pub pending: Mutex<HashMap<String, Pending>>,
    /// The explicit poll interval, if any.
    pub interval: Option<Duration>,
    /// Cancelled on shutdown: scans and actions stop (held messages given back).
    pub cancel: CancellationToken,
    /// Every scan and action task: [`Console::serve`] waits for them after cancelling,
    /// so a replay stopped by SIGTERM settles its copies in flight and is audited.
    pub tasks: TaskTracker,
}

impl State {
    /// The DeadLetterQueues in force.
    pub fn targets(&self) -> Arc<Vec<Target>> {
        self.targets.read_locked().clone()
    }

    /// The poll interval: the explicit one, else the smallest
    /// `spec.monitoring.interval` (15 s without any), as `run --standalone` does.
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or_else(|| {
            self.targets()
                .iter()
                .filter_map(|p| p.prepared.monitoring_interval_ms)
                .min()
                .map_or(Duration::from_secs(15), Duration::from_millis)
        })
    }
}

/// A console bound to its address, not yet serving.
pub struct Console {
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    source: Source,
}

impl Console {
    /// Binds `opts.bind` with `auth`.
    ///
    /// # Errors
    /// [`std::io::ErrorKind::InvalidInput`] for a non-loopback address with the standalone
    /// token ([`check_bind`]); the bind error, naming the address.
    pub async fn bind(opts: Options, auth: auth::Auth) -> std::io::Result<Console> {
        let standalone = matches!(auth, auth::Auth::Token(_));
        if standalone {
            check_bind(opts.bind)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        }
        let listener = tokio::net::TcpListener::bind(opts.bind)
            .await
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("--bind-address {}: {e}", opts.bind))
            })?;
        let port = listener.local_addr()?.port();
        let hosts = if standalone {
            auth::Hosts::Loopback(port)
        } else {
            auth::Hosts::Any
        };
        let tasks = TaskTracker::new();
        let state = Arc::new(State {
            auth,
            sessions: auth::Sessions::default(),
            hosts,
            brokers: opts.brokers,
            targets: RwLock::new(Arc::new(opts.targets)),
            events: opts.events,
            polled: Mutex::new(BTreeMap::new()),
            history: Mutex::new(history::DepthHistory::default()),
            scans: Arc::new(scan::Scans::new(
                opts.scan_max_messages,
                PREVIEW_BYTES,
                opts.scan_ttl,
                tasks.clone(),
            )),
            jobs: jobs::Jobs::default(),
            pending: Mutex::new(HashMap::new()),
            interval: opts.interval,
            cancel: CancellationToken::new(),
            tasks,
        });
        Ok(Console {
            listener,
            state,
            source: opts.source,
        })
    }

    /// The address listened on (the real port when 0 was asked).
    ///
    /// # Errors
    /// The socket's error.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Polls and serves until `shutdown`; then scans and actions in flight are
    /// cancelled (their held messages given back, copies in flight settled) and waited
    /// for.
    ///
    /// # Errors
    /// The server's I/O error.
    pub async fn serve(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let state = self.state;
        let poller = tokio::spawn(poll_loop(Arc::clone(&state), self.source));
        let app = server::router(Arc::clone(&state));
        let (stop, cancel) = (shutdown.clone(), state.cancel.clone());
        // On shutdown the scans and actions in flight are cancelled first, so the
        // graceful end waits only for them to settle, not to finish.
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(async move {
                stop.cancelled().await;
                cancel.cancel();
            })
            .await;
        state.cancel.cancel();
        poller.abort();
        // Scans and actions end promptly once cancelled (held messages given back,
        // copies in flight settled, the action audited): wait for them.
        state.tasks.close();
        state.tasks.wait().await;
        served
    }
}

/// Every interval: reads the DeadLetterQueues again when due ([`Source::due`],
/// [`Source::read`]; on an error the last ones stay in force and the error is logged), polls the depths with the collector
/// `run --standalone` uses, and records each DeadLetterQueue's depth, ratio and alert and
/// its depth ring.
async fn poll_loop(state: Arc<State>, source: Source) {
    let mut collector = Collector::new(crate::metrics::Metrics::new());
    // The targets given at start were read just before: the first poll uses them.
    let mut read_at = Some(std::time::Instant::now());
    loop {
        if source.due(read_at.map(|t| t.elapsed())) {
            let last = state.targets();
            match source.read(&last).await {
                Ok(targets) => {
                    *state
                        .targets
                        .write_locked() = Arc::new(targets);
                }
                Err(e) => tracing::warn!(
                    "console: the DeadLetterQueues cannot be read, the last ones read stay in force: {}",
                    crate::printable::escape_lines(&e)
                ),
            }
            read_at = Some(std::time::Instant::now());
        }
        let interval = state.interval();
        poll_once(&state, &mut collector, interval).await;
        tokio::select! {
            () = state.cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One poll of every DeadLetterQueue in force ([`crate::collector::poll`]).
async fn poll_once(state: &State, collector: &mut Collector, interval: Duration) {
    let targets = state.targets();
    let keys: Vec<&str> = targets.iter().map(|t| t.prepared.key.as_str()).collect();
    collector.retain(|k| keys.contains(&k));
    let spacing_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    let prepared = targets.iter().map(|t| &t.prepared);
    let groups: Vec<_> = crate::collector::groups(state.brokers.as_ref(), prepared, spacing_ms)
        .into_iter()
        .map(|(_, g)| g)
        .collect();
    let polls =
        crate::collector::poll(collector, &groups, crate::clock::now_ms(), 1, |_, _| None).await;
    let mut polled = BTreeMap::new();
    let mut history = state.history.locked();
    for (group, poll) in groups.iter().zip(&polls) {
        for (m, reading) in group.members.iter().zip(&poll.readings) {
            let row = match reading {
                Reading::Observed(r) => {
                    history.push(m.key, r.observed.depth.dead_letter);
                    Polled {
                        depth: Some(r.observed.depth.dead_letter),
                        ratio: r.eval.ratio,
                        alert: r.eval.state.name(),
                    }
                }
                Reading::Unknown => Polled {
                    depth: None,
                    ratio: None,
                    alert: "Unknown",
                },
            };
            polled.insert(m.key.to_string(), row);
        }
    }
    history.retain(|k| keys.contains(&k));
    *state.polled.locked() = polled;
}

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod fast_tests;

#[cfg(test)]
mod tests {
    use super::check_bind;

    #[test]
    fn only_loopback_addresses_are_bound() {
        for ok in ["127.0.0.1:0", "127.0.0.1:8081", "[::1]:8081"] {
            assert_eq!(check_bind(ok.parse().expect("addr")), Ok(()), "{ok}");
        }
        // 127.0.0.2 is loopback too, but the Host check answers only to the names of
        // 127.0.0.1 and [::1]: bound, it would refuse every request.
        for refused in [
            "0.0.0.0:8081",
            "[::]:8081",
            "192.168.1.5:8081",
            "127.0.0.2:8081",
        ] {
            let e = check_bind(refused.parse().expect("addr")).expect_err(refused);
            assert!(e.contains(refused) && e.contains("loopback"), "{e}");
        }
    }
}
