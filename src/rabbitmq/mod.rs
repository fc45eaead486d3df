//! The RabbitMQ adapter of the broker seam ([`BrokerTopology`](crate::broker::BrokerTopology),
//! [`DeadLetterOps`](crate::broker::DeadLetterOps): `seam.rs`) over the management HTTP API (RabbitMQ docs,
//! "Management HTTP API"), with AMQP 0-9-1 helpers in [`amqp`]. The drivers hold it as
//! [`factory()`]; [`dlq`] runs the dead-letter operations on the broker of a
//! [`BrokerConnection`](crate::broker::BrokerConnection).
//!
//! Rules applied here, with their source:
//! - Queue arguments are immutable: re-declaring with others fails with 406
//!   `PRECONDITION_FAILED - inequivalent arg` (RabbitMQ docs, "Queues: optional
//!   arguments"). A queue whose type or planned arguments differ is reported as
//!   [`Outcome::Conflict`](crate::broker::Outcome::Conflict) and never deleted or
//!   redeclared.
//! - Optional arguments set by a client take precedence over policy keys (RabbitMQ docs,
//!   "Policies": "Combining policy definitions and optional arguments"), so a queue whose
//!   own `x-<key>` argument would override a key of our policy is a conflict too — except
//!   under `spec.broker.queueSettings: Arguments` and for queues the resource declared so,
//!   where the operator declares the settings as arguments itself and follows RabbitMQ's
//!   rule for each key (module `declared`).
//! - Only one policy applies to a queue: the highest-priority matching one (RabbitMQ
//!   docs, "Policies": "Policy priorities"). Higher or equal-priority policies that match
//!   the queue shadow ours ([`Outcome::Shadowed`](crate::broker::Outcome::Shadowed)); the keys of lower-priority ones that
//!   we do not set are merged into ours so nothing the user configured is lost (except
//!   `expires`, [`NEVER_MERGED`]: it would delete an unused dead-letter queue).
//! - Each queue and exchange belongs to one DeadLetterQueue, recorded on the broker
//!   ([`ownership`]): another owner's record stops an apply before any write.
//! - A dead-letter queue the spec no longer names is unbound from the dead-letter exchange
//!   and kept while it holds dead letters (module `retire`).
//! - Obsolete retry tiers are unbound first, then deleted only once empty
//!   (`DELETE /api/queues/{vhost}/{name}?if-empty=true&if-unused=true`, the broker refuses
//!   a non-empty queue). RabbitMQ 3.x quorum queues do not support `if-empty`: they are
//!   unbound and retained (see docs/ARCHITECTURE.md), never deleted by the operator.
//!
//! Where each part lives:
//! - [`Snapshot`] (module `snapshot`): what is on the broker for a plan, and the type of
//!   the facts some rules need (the broker's version, queues' ready counts);
//! - module `diff`: the pure diff of a plan against a snapshot — the ordered writes and the
//!   report lines that need none;
//! - module `execute`: an apply, step by step (the facts its diff asks for read first),
//!   and the executor of a diff's writes;
//! - module `failures`: the one wording of a failure at every address of a Secret, and an
//!   error with its sources as one line;
//! - module `retire`: obsolete retry tiers and dead-letter queues the plan no longer has;
//! - module `remove`: the removal of a plan (`deletionPolicy: Delete`), pure steps and
//!   their executor;
//! - [`ownership`]: the ownership records; [`management`]: the HTTP client; [`amqp`]:
//!   AMQP 0-9-1 connections; module `patterns`: policy matching and JSON comparison;
//!   module `limits`: reading a queue's [`QueueLimits`](crate::broker::QueueLimits) and the
//!   delivery-limit rules of each version.

pub mod amqp;
pub mod dead_letters;
mod declared;
pub mod dlq;
pub use declared::NEVER_MERGED;
mod diff;
mod execute;
mod failures;
mod limits;
pub mod management;
pub mod ownership;
mod patterns;
mod remove;
mod retire;
mod retire_inbox;
mod seam;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};

use crate::broker::RequestCounts;

pub use limits::effective_delivery_limit;
use management::{encode_segment as enc, ManagementClient, QueueInfo};
pub use patterns::{json_equal, pattern_matches};
pub use seam::RabbitMqFactory;

/// The factory of the production broker, RabbitMQ ([`RabbitMqFactory`]), as the drivers hold
/// it (`Arc<dyn BrokerFactory>`).
pub fn factory() -> std::sync::Arc<dyn crate::broker::BrokerFactory> {
    std::sync::Arc::new(RabbitMqFactory)
}
pub use snapshot::Snapshot;

use crate::broker::{
    ApplyReport, BrokerConnection, BrokerError, DeleteOutcome, QueueDepth, RemovalReport,
};
use crate::lock::Locked;
use crate::topology::DesiredTopology;

/// A RabbitMQ broker reached through its management HTTP API.
#[derive(Debug)]
pub struct RabbitMq {
    mgmt: ManagementClient,
    /// The broker's overview, once read ([`RabbitMq::cluster_name`],
    /// [`RabbitMq::broker_version`]).
    overview: tokio::sync::OnceCell<Overview>,
    /// The last AMQP check per vhost and when it ran ([`RabbitMq::check_amqp`]).
    amqp_checked: tokio::sync::Mutex<BTreeMap<String, AmqpCheck>>,
    /// When the last warning about a failed `prometheusUri` read was logged.
    prometheus_warned: std::sync::Mutex<Option<std::time::Instant>>,
}

/// What the operator reads of `GET /api/overview`.
#[derive(Debug, serde::Deserialize)]
struct Overview {
    /// The cluster's name.
    #[serde(default)]
    cluster_name: String,
    /// The RabbitMQ version, e.g. `4.0.5`.
    #[serde(default)]
    rabbitmq_version: String,
}

/// When an AMQP connection check ran, and what it found.
type AmqpCheck = (std::time::Instant, Result<(), BrokerError>);

/// How long a successful AMQP connection check ([`RabbitMq::check_amqp`]) stands for
/// one client and vhost: the resources sharing a client (a Secret) check once a minute,
/// not once per apply.
const AMQP_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a failed AMQP check stands: the resources sharing a client in one `apply` run
/// get its answer at once instead of each waiting for the same timeout, and a later run
/// or resync checks again.
const AMQP_FAILURE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Least time between two warnings about a failed `prometheusUri` read of one client
/// (each poll falls back to the management API; the rest are logged at debug level).
const PROMETHEUS_WARNING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);

impl RabbitMq {
    /// Builds the client (no request is made): HTTP timeouts of ~10 s, `ca.crt` as
    /// trusted root and `tls.crt`+`tls.key` as client identity when set, basic auth.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the CA or the client certificate/key cannot be used.
    pub fn new(conn: &BrokerConnection) -> Result<Self, BrokerError> {
        Ok(RabbitMq {
            mgmt: ManagementClient::new(conn)?,
            overview: tokio::sync::OnceCell::new(),
            amqp_checked: tokio::sync::Mutex::new(BTreeMap::new()),
            prometheus_warned: std::sync::Mutex::new(None),
        })
    }

    /// Checks that the Secret's AMQP `uri` connects to `vhost` ([`amqp::check`]). Per vhost,
    /// a success stands for `AMQP_CHECK_INTERVAL` (60 s) and a failure for
    /// `AMQP_FAILURE_INTERVAL` (10 s) (the same error again, at once).
    ///
    /// # Errors
    /// As [`amqp::check`].
    pub async fn check_amqp(&self, vhost: &str) -> Result<(), BrokerError> {
        let mut checked = self.amqp_checked.lock().await;
        if let Some((at, result)) = checked.get(vhost) {
            let stands = if result.is_ok() {
                AMQP_CHECK_INTERVAL
            } else {
                AMQP_FAILURE_INTERVAL
            };
            if at.elapsed() < stands {
                return result.clone();
            }
        }
        let result = amqp::check(self.mgmt.connection(), vhost).await;
        checked.insert(
            vhost.to_string(),
            (std::time::Instant::now(), result.clone()),
        );
        result
    }

    /// [`RabbitMq::queue_depths`] that must cover `required` (the queues whose depths the
    /// caller will judge): [`RabbitMq::queue_depths_and_consumers`] without consumers.
    ///
    /// # Errors
    /// As [`RabbitMq::queue_depths`] (from the management API).
    pub async fn queue_depths_covering(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        self.queue_depths_and_consumers(vhost, required, &BTreeSet::new())
            .await
    }

    /// The depths of every queue of `vhost` in one request, covering `required` (the
    /// queues whose depths the caller will judge) and the consumer counts of
    /// `consumers_of` (the router inboxes the caller judges; a subset of `required`).
    ///
    /// The `rabbitmq_prometheus` answer (with `prometheusUri`; it always carries the
    /// consumers) is used only when it is complete: it parses strictly, holds at least one
    /// queue of the vhost, every `required` queue, and a consumer count for each of
    /// `consumers_of`. Otherwise — a queue too new to have statistics, one hosted on
    /// another cluster node (that endpoint reports only its node's queues), a vhost that
    /// is gone, an answer that is not the plugin's — the management API answers for this
    /// poll, so a depth is never read as 0 for lack of data. The management listing skips
    /// the per-queue statistics (`disable_stats=true`, ~3.5× cheaper for the broker:
    /// docs/ARCHITECTURE.md) unless `consumers_of` is not empty: that listing has no
    /// `consumers` column (RabbitMQ 3.10.8 and 4.0.5), so a vhost with a router inbox to
    /// judge is listed with statistics.
    ///
    /// # Errors
    /// As [`RabbitMq::queue_depths`] (from the management API).
    pub async fn queue_depths_and_consumers(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
        consumers_of: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        let why = match self.mgmt.prometheus_depths(vhost).await {
            Ok(Some(depths)) => {
                let missing = required.iter().filter(|q| !depths.contains_key(*q)).count();
                let uncounted = consumers_of
                    .iter()
                    .filter(|q| depths.get(*q).is_none_or(|d| d.consumers.is_none()))
                    .count();
                if !depths.is_empty() && missing == 0 && uncounted == 0 {
                    return Ok(depths);
                }
                Some(format!(
                    "the answer lacks {missing} of {} queue(s) to watch and the consumer count of {uncounted} of {} ({} listed): new queues without statistics yet, queues on another node, or not the plugin's answer",
                    required.len(),
                    consumers_of.len(),
                    depths.len()
                ))
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            self.warn_prometheus(vhost, &why);
        }
        // Without per-object statistics the broker answers ~3.5× cheaper, with the same
        // message counts (RabbitMQ 3.8+; measured: docs/ARCHITECTURE.md) but without the
        // consumer counts.
        let query = if consumers_of.is_empty() {
            "?disable_stats=true&enable_queue_totals=true&columns=name,messages,messages_ready,messages_unacknowledged"
        } else {
            "?columns=name,messages,messages_ready,messages_unacknowledged,consumers"
        };
        let rows: Vec<crate::broker::QueueDepthRow> = self.list("queues", vhost, query).await?;
        Ok(crate::broker::depths_from_rows(rows))
    }

    /// Logs why the `prometheusUri` answer was not used: a warning at most every
    /// `PROMETHEUS_WARNING_INTERVAL` per client, the repeats at debug level.
    fn warn_prometheus(&self, vhost: &str, why: &str) {
        let mut warned = self.prometheus_warned.locked();
        if warned.is_none_or(|t| t.elapsed() >= PROMETHEUS_WARNING_INTERVAL) {
            *warned = Some(std::time::Instant::now());
            tracing::warn!(
                vhost,
                "prometheusUri: {why}; using the management API (repeats are logged at debug level for 10 min)"
            );
        } else {
            tracing::debug!(vhost, "prometheusUri: {why}; using the management API");
        }
    }

    /// The broker's cluster name and version, read once per client with one
    /// `GET /api/overview?columns=cluster_name,rabbitmq_version`.
    ///
    /// # Errors
    /// Transport, authentication and API errors (and read again on the next call).
    async fn overview(&self) -> Result<&Overview, BrokerError> {
        self.overview
            .get_or_try_init(|| async {
                self.mgmt
                    .get_json(
                        "overview?columns=cluster_name,rabbitmq_version",
                        "the broker overview",
                    )
                    .await
            })
            .await
    }

    /// The broker's cluster name (`GET /api/overview`, `cluster_name`), read once per
    /// client: two Secrets with different URIs (`localhost` and `127.0.0.1`, a Service
    /// name and its IP) reach the same broker exactly when the names are equal.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn cluster_name(&self) -> Result<String, BrokerError> {
        Ok(self.overview().await?.cluster_name.clone())
    }

    /// The broker's RabbitMQ version (`GET /api/overview`, `rabbitmq_version`, e.g.
    /// `4.0.5`), read once per client.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    pub async fn broker_version(&self) -> Result<String, BrokerError> {
        Ok(self.overview().await?.rabbitmq_version.clone())
    }

    /// HTTP requests made by this client so far (GET = read; PUT/POST/DELETE = write).
    pub fn request_counts(&self) -> RequestCounts {
        self.mgmt.request_counts()
    }

    /// `GET /api/{kind}/{vhost}{query}`, decoded: every object of `kind` (`queues`,
    /// `policies`, `exchanges`, `bindings`) in `vhost`.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost; transport, authentication and API
    /// errors.
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        vhost: &str,
        query: &str,
    ) -> Result<Vec<T>, BrokerError> {
        self.mgmt
            .get_json(
                &format!("{kind}/{}{query}", enc(vhost)),
                &format!("vhost {vhost:?}"),
            )
            .await
    }

    /// `DELETE /api/queues/{vhost}/{name}?if-empty=true&if-unused=true`: the broker
    /// refuses a queue with messages or consumers ([`DeleteOutcome::NotEmpty`], with the
    /// message count of `known`'s statistics, at least 1). A quorum queue on RabbitMQ 3.x
    /// does not support `if-empty` ([`DeleteOutcome::Unsupported`]): it is kept.
    ///
    /// # Errors
    /// Transport and authentication errors, [`BrokerError::Api`] for other refusals.
    async fn delete_if_empty_known(
        &self,
        vhost: &str,
        name: &str,
        known: Option<&QueueInfo>,
    ) -> Result<DeleteOutcome, BrokerError> {
        let path = format!("queues/{}/{}", enc(vhost), enc(name));
        let answer = self
            .mgmt
            .send(
                Method::DELETE,
                &format!("{path}?if-empty=true&if-unused=true"),
                None,
            )
            .await?;
        let stats_messages = known.and_then(|q| q.messages).unwrap_or(0);
        if answer.status.is_success() {
            return Ok(DeleteOutcome::Deleted);
        }
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(DeleteOutcome::Absent);
        }
        let reason = answer.reason();
        if answer.status == StatusCode::BAD_REQUEST
            && (reason.contains("not empty") || reason.contains("in use"))
        {
            return Ok(DeleteOutcome::NotEmpty {
                messages: stats_messages.max(1),
            });
        }
        if answer.status == StatusCode::BAD_REQUEST && reason.contains("not supported") {
            // Quorum queues on RabbitMQ 3.x. Checking emptiness ourselves would race: the
            // statistics lag and a passive declare does not count messages waiting to be
            // dead-lettered (at-least-once), so a message could be deleted. Keep it.
            return Ok(DeleteOutcome::Unsupported { reason });
        }
        Err(self.mgmt.api_error(
            &Method::DELETE,
            &format!("{path}?if-empty=true&if-unused=true"),
            &answer,
        ))
    }

    /// GETs `/api/{path}` and decodes it; `None` on 404.
    async fn get_opt<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Option<T>, BrokerError> {
        match self.mgmt.get_json::<T>(path, path).await {
            Ok(v) => Ok(Some(v)),
            Err(BrokerError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Checks that `vhost` exists and the user has permissions on it, from
    /// `GET /api/vhosts?columns=name` — the vhosts the user may use. Not
    /// `GET /api/vhosts/{vhost}`: RabbitMQ answers that one only to the `administrator`
    /// tag (401 "Not administrator user" even for `policymaker`), and the operator needs
    /// no more than `policymaker` (RabbitMQ management plugin docs, "Permissions").
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] when the vhost is not in the list; transport and
    /// authentication errors.
    pub async fn ensure_vhost(&self, vhost: &str) -> Result<(), BrokerError> {
        #[derive(serde::Deserialize)]
        struct Name {
            name: String,
        }
        let vhosts: Vec<Name> = self
            .mgmt
            .get_json("vhosts?columns=name", "the vhost list")
            .await?;
        if vhosts.iter().any(|v| v.name == vhost) {
            Ok(())
        } else {
            Err(BrokerError::NotFound {
                what: format!("vhost {vhost:?} (or the user has no permissions on it)"),
            })
        }
    }

    /// `DELETE /api/{path}`; a 404 (already gone) counts as done.
    async fn delete_path(&self, path: &str) -> Result<(), BrokerError> {
        let answer = self.mgmt.send(Method::DELETE, path, None).await?;
        if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(self.mgmt.api_error(&Method::DELETE, path, &answer))
        }
    }
}

/// The topology operations, also reachable through the broker seam
/// ([`BrokerTopology`](crate::broker::BrokerTopology), module `seam`).
impl RabbitMq {
    /// Applies `plan` (see the module documentation for the rules): the reads of
    /// [`RabbitMq::snapshot`] (one small GET per planned object, never a whole-vhost
    /// listing of queues, exchanges or bindings), an AMQP connection check
    /// ([`RabbitMq::check_amqp`]), the ownership records ([`ownership`]: another owner's
    /// stops the apply before any write), then the diff (module `diff`: one write per
    /// object that is missing or differs, in the plan's order — exchanges, policies,
    /// queues, bindings), its writes (module `execute`), then the draining of obsolete
    /// retry tiers and the retirement of dead-letter queues the plan no longer has.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost, transport/authentication errors
    /// (of the management API, or of the AMQP `uri`), [`BrokerError::NameOwned`] when
    /// another DeadLetterQueue's record holds a planned name, and [`BrokerError::Api`]
    /// for a write the broker refuses for another reason than a conflict (conflicts are
    /// [`Outcome`](crate::broker::Outcome)s).
    pub async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        self.apply_plan(plan).await
    }

    /// One request for every queue of `vhost`: with the Secret's `prometheusUri`,
    /// `GET {prometheusUri}/metrics/detailed?vhost=…&family=queue_coarse_metrics&family=queue_consumer_count`
    /// (`rabbitmq_prometheus`; falls back to the management API, with a warning, when that
    /// fails); otherwise `GET /api/queues/{vhost}?disable_stats=true&enable_queue_totals=true
    /// &columns=name,messages,messages_ready,messages_unacknowledged` (RabbitMQ docs,
    /// "Management HTTP API"). Counts lag by the broker's statistics interval
    /// (`collect_statistics_interval`, 5 s by default); queues without statistics yet count
    /// 0 (management API) or are absent (prometheus plugin).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost; transport/authentication errors.
    pub async fn queue_depths(
        &self,
        vhost: &str,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        self.queue_depths_covering(vhost, &BTreeSet::new()).await
    }

    /// `DELETE /api/queues/{vhost}/{name}?if-empty=true&if-unused=true`: the broker
    /// refuses a queue with messages or consumers. Quorum queues of RabbitMQ 3.x do not
    /// support `if-empty`: answered [`DeleteOutcome::Unsupported`] and kept, since a check
    /// of ours would race with messages in flight.
    ///
    /// # Errors
    /// Transport/authentication errors, [`BrokerError::Api`] for other refusals.
    pub async fn delete_queue_if_empty(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<DeleteOutcome, BrokerError> {
        self.delete_if_empty_known(vhost, name, None).await
    }

    /// Removal in this order, so that no message is routed into an object about to go:
    /// 1. check every queue to delete: statistics (ready + unacknowledged) and an AMQP
    ///    passive declare (ready count and consumers, immediate); any message or consumer
    ///    blocks the whole removal before anything is written, and so does a consumer on
    ///    the source queue (its rejects would be dropped once the route is gone);
    /// 2. delete our policy on the source queue (it stops dead-lettering to our exchange),
    ///    then our other policies;
    /// 3. delete the retry and dead-letter exchanges (their bindings go with them), unless
    ///    an exchange is bound to a queue that is not ours;
    /// 4. delete the queues: classic ones with `if-empty=true&if-unused=true` (the broker
    ///    enforces it); quorum ones (RabbitMQ 3.x cannot delete them only-if-empty) after
    ///    a second passive declare finds no message and no consumer — nothing routes to
    ///    them any more at that point (step 3), see docs/ARCHITECTURE.md;
    /// 5. when nothing blocked, delete this resource's ownership records.
    ///
    /// A name whose ownership record names another DeadLetterQueue is never touched;
    /// the dead-letter queues this one retired (its dead-letter exchange's record) are
    /// removed with the rest.
    pub async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError> {
        self.remove_plan(plan).await
    }
}
