//! What the three controllers (and the backlog monitor) share, one of each per process:
//! the Kubernetes client, the metrics, the broker clients (one per Secret version), the
//! clock, and who records Events ([`Context`]); the per-object error backoff each
//! controller keeps ([`ErrorBackoff`]); the field manager. Each controller's own context
//! ([`crate::controller::context`]) holds an `Arc` of the [`Context`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;

use crate::backoff::Backoff;
use crate::broker::{BrokerClient, BrokerFactory, RequestCounts};
use crate::broker::{BrokerConnection, BrokerError};
use crate::clock::{self, Clock};
use crate::crd::BackoffStrategy;
use crate::lock::Locked;
use crate::metrics::Metrics;

/// Field manager of every server-side apply and patch of the operator.
pub const FIELD_MANAGER: &str = "dlq-operator";

/// Name of the controller in Events (`reportingController`).
pub const REPORTING_CONTROLLER: &str = "dlqoperator.io/dlq-operator";

/// Broker clients, one per Secret version (`namespace/name@resourceVersion`), so that
/// HTTP connections are reused across reconciles and a rotated Secret gets a new client.
pub struct BrokerClients {
    factory: Arc<dyn BrokerFactory>,
    clients: Mutex<HashMap<String, Arc<dyn BrokerClient>>>,
    retired: Mutex<RequestCounts>,
}

impl Default for BrokerClients {
    /// Clients of RabbitMQ ([`crate::rabbitmq::factory`]).
    fn default() -> Self {
        BrokerClients::new(crate::rabbitmq::factory())
    }
}

impl std::fmt::Debug for BrokerClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerClients")
            .field("clients", &self.len())
            .finish_non_exhaustive()
    }
}

impl BrokerClients {
    /// No client yet; clients will be made by `factory` (RabbitMQ, or the in-memory
    /// `crate::fake` in tests).
    pub fn new(factory: Arc<dyn BrokerFactory>) -> Self {
        BrokerClients {
            factory,
            clients: Mutex::default(),
            retired: Mutex::default(),
        }
    }

    /// A client for `conn` that is not kept (a DeadLetterReplay's run, which has its own
    /// connections), made by the same factory.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the CA or client certificate cannot be used.
    pub fn connect(&self, conn: &BrokerConnection) -> Result<Arc<dyn BrokerClient>, BrokerError> {
        self.factory.client(conn)
    }

    /// The client for `secret` (read from `namespace`) with settings `conn`; built on first
    /// use and replaced when the Secret's `resourceVersion` changes.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the Secret's CA or client certificate cannot be used.
    pub fn get(
        &self,
        namespace: &str,
        secret: &Secret,
        conn: &BrokerConnection,
    ) -> Result<Arc<dyn BrokerClient>, BrokerError> {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let prefix = format!("{namespace}/{name}@");
        let key = format!(
            "{prefix}{}",
            secret
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default()
        );
        let mut clients = self.clients.locked();
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        // An older version of this Secret: forget its client (keep its request counts).
        let stale: Vec<String> = clients
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        for k in stale {
            if let Some(old) = clients.remove(&k) {
                let counts = old.request_counts();
                let mut retired = self.retired.locked();
                retired.reads += counts.reads;
                retired.writes += counts.writes;
            }
        }
        let client = self.factory.client(conn)?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Management-API requests made by every client so far (reads and writes).
    pub fn request_counts(&self) -> RequestCounts {
        let clients = self.clients.locked();
        let retired = *self.retired.locked();
        clients.values().fold(retired, |mut acc, c| {
            let n = c.request_counts();
            acc.reads += n.reads;
            acc.writes += n.writes;
            acc
        })
    }

    /// Number of clients held.
    pub fn len(&self) -> usize {
        self.clients.locked().len()
    }

    /// `true` when no client was built yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Per-object exponential backoff after failed reconciles: 5 s, 10 s, 20 s … capped at
/// 300 s, with equal jitter (Brooker 2015, "Exponential Backoff And Jitter": half the delay
/// fixed, half random) so objects that failed together do not retry together. Reset by a
/// successful reconcile. Uses the same [`Backoff`] maths as retry policies.
#[derive(Debug)]
pub struct ErrorBackoff {
    backoff: Backoff,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for ErrorBackoff {
    fn default() -> Self {
        Self::new(Duration::from_secs(5), Duration::from_secs(300))
    }
}

impl ErrorBackoff {
    /// Backoff from `initial`, doubling, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial_ms = u64::try_from(initial.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        ErrorBackoff {
            backoff: Backoff {
                strategy: BackoffStrategy::EqualJitter,
                initial_ms,
                multiplier: 2.0,
                max_ms: u64::try_from(max.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(initial_ms),
                jitter: crate::backoff::Jitter::None,
            },
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records one more failure of `key` and returns how long to wait before the next
    /// attempt, with the failure count (1 for the first).
    pub fn next_delay(&self, key: &str) -> (Duration, u32) {
        let mut failures = self.failures.locked();
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let ms = self.backoff.delay_ms(*n, None, &mut rand::rng());
        (Duration::from_millis(ms), *n)
    }

    /// Upper bound of the delay after `failures` failures (ms).
    pub fn max_delay_ms(&self, failures: u32) -> u64 {
        self.backoff.nominal_ms(failures)
    }

    /// Forgets the failures of `key` (after a success).
    pub fn reset(&self, key: &str) {
        self.failures.locked().remove(key);
    }

    /// Failures of `key` so far.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.locked().get(key).copied().unwrap_or(0)
    }
}

/// What the three controllers share (one per process): the Kubernetes client, the
/// metrics, the broker clients, the clock, and the reporter of their Events.
#[derive(Clone)]
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Broker clients, shared by the three controllers and the backlog monitor.
    pub brokers: Arc<BrokerClients>,
    /// Current time.
    pub clock: Clock,
    /// Who records the Events (`reportingController` [`REPORTING_CONTROLLER`],
    /// `reportingInstance` this process's identity).
    pub reporter: Reporter,
    /// Weights of the maturity score (`--maturity-weights`; default 0.4, 0.4, 0.2).
    pub maturity_weights: crate::maturity::Weights,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("reporter", &self.reporter)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The shared context of the controllers of the process `instance` (e.g. the Pod
    /// name: the `reportingInstance` of their Events), with the system clock.
    pub fn new(
        client: Client,
        instance: &str,
        metrics: Metrics,
        brokers: Arc<BrokerClients>,
    ) -> Self {
        Context {
            client,
            metrics,
            brokers,
            clock: clock::system(),
            reporter: Reporter {
                controller: REPORTING_CONTROLLER.into(),
                instance: Some(instance.to_string()),
            },
            maturity_weights: crate::maturity::Weights::default(),
        }
    }

    /// The current time from the context's clock.
    pub fn now(&self) -> Time {
        (self.clock)()
    }

    /// A new Event recorder (one per controller: each keeps its own Event series).
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_backoff_grows_caps_and_resets() {
        let b = ErrorBackoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let mut highs = Vec::new();
        for n in 1..=8 {
            let (d, count) = b.next_delay("ns/a");
            assert_eq!(count, n);
            let high = b.max_delay_ms(n);
            // Equal jitter: between half and all of the nominal delay.
            assert!(d.as_millis() as u64 >= high / 2 && d.as_millis() as u64 <= high);
            highs.push(high);
        }
        assert_eq!(&highs[..4], &[5_000, 10_000, 20_000, 40_000]);
        assert_eq!(*highs.last().expect("8 delays"), 300_000);
        assert_eq!(b.failures("ns/b"), 0, "per object");
        b.reset("ns/a");
        assert_eq!(b.failures("ns/a"), 0);
        assert!(b.next_delay("ns/a").0 <= Duration::from_secs(5));
    }
}
