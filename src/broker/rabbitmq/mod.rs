//! RabbitMQ implementation of [`Broker`] over the management HTTP API (RabbitMQ docs,
//! "Management HTTP API"), with AMQP 0-9-1 helpers in [`amqp`].
//!
//! Rules applied here, with their source:
//! - Queue arguments are immutable: re-declaring with others fails with 406
//!   `PRECONDITION_FAILED - inequivalent arg` (RabbitMQ docs, "Queues: optional
//!   arguments"). A queue whose type or planned arguments differ is reported as
//!   [`Outcome::Conflict`] and never deleted or redeclared.
//! - Optional arguments set by a client take precedence over policy keys (RabbitMQ docs,
//!   "Policies": "Combining policy definitions and optional arguments"), so a queue whose
//!   own `x-<key>` argument would override a key of our policy is a conflict too.
//! - Only one policy applies to a queue: the highest-priority matching one (RabbitMQ
//!   docs, "Policies": "Policy priorities"). Higher or equal-priority policies that match
//!   the queue shadow ours ([`Outcome::Shadowed`]); the keys of lower-priority ones that
//!   we do not set are merged into ours so nothing the user configured is lost.
//! - Each queue and exchange belongs to one DeadLetterQueue, recorded on the broker
//!   ([`ownership`]): another owner's record stops an apply before any write.
//! - A dead-letter queue the spec no longer names is unbound from the dead-letter exchange
//!   and kept while it holds dead letters (module `retire`).
//! - Obsolete retry tiers are unbound first, then deleted only once empty
//!   (`DELETE /api/queues/{vhost}/{name}?if-empty=true&if-unused=true`, the broker refuses
//!   a non-empty queue). RabbitMQ 3.x quorum queues do not support `if-empty`: they are
//!   unbound and retained (see docs/ARCHITECTURE.md), never deleted by the operator.

pub mod amqp;
pub mod dead_letters;
pub mod management;
pub mod ownership;
mod retire;
mod seam;

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub use management::RequestCounts;
use management::{
    encode_segment as enc, BindingInfo, ExchangeInfo, ManagementClient, PolicyInfo, QueueInfo,
};
pub use seam::RabbitMqFactory;

use crate::broker::{
    Action, ApplyReport, Broker, BrokerConnection, BrokerError, DeleteOutcome, ObjectKind, Outcome,
    QueueDepth, RemovalReport,
};
use crate::topology::{BindingPlan, DesiredTopology, PolicyPlan, QueuePlan, Step};

/// Why an obsolete quorum tier queue is kept.
const QUORUM_RETAINED: &str = "unbound, so no new retries enter it; its messages still return to the source queue. Kept because RabbitMQ cannot delete a quorum queue only-if-empty: delete it once its depth is 0";

/// "N message(s) left" for a draining tier queue.
fn messages_left(n: u64) -> String {
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} message{plural} left; removed once empty")
}

/// `apply-to` of every operator-owned policy.
const APPLY_TO: &str = "queues";

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
    /// a success stands for [`AMQP_CHECK_INTERVAL`] and a failure for
    /// [`AMQP_FAILURE_INTERVAL`] (the same error again, at once).
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

    /// [`Broker::queue_depths`] that must cover `required` (the queues whose depths the
    /// caller will judge). The `rabbitmq_prometheus` answer (with `prometheusUri`) is used
    /// only when it is complete: it parses strictly, holds at least one queue of the vhost
    /// and every `required` queue. Otherwise — a queue too new to have statistics, one
    /// hosted on another cluster node (that endpoint reports only its node's queues), a
    /// vhost that is gone, an answer that is not the plugin's — the management API answers
    /// for this poll, so a depth is never read as 0 for lack of data.
    ///
    /// # Errors
    /// As [`Broker::queue_depths`] (from the management API).
    pub async fn queue_depths_covering(
        &self,
        vhost: &str,
        required: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        let why = match self.mgmt.prometheus_depths(vhost).await {
            Ok(Some(depths)) => {
                let missing = required.iter().filter(|q| !depths.contains_key(*q)).count();
                if !depths.is_empty() && missing == 0 {
                    return Ok(depths);
                }
                Some(format!(
                    "the answer lacks {missing} of {} queue(s) to watch ({} listed): new queues without statistics yet, queues on another node, or not the plugin's answer",
                    required.len(),
                    depths.len()
                ))
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            let mut warned = self
                .prometheus_warned
                .lock()
                .unwrap_or_else(|p| p.into_inner());
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
        // Without per-object statistics the broker answers ~3.5× cheaper, with the same
        // message counts (RabbitMQ 3.8+; measured: docs/ARCHITECTURE.md).
        let rows: Vec<crate::broker::QueueDepthRow> = self
            .list(
                "queues",
                vhost,
                "?disable_stats=true&enable_queue_totals=true&columns=name,messages,messages_ready,messages_unacknowledged",
            )
            .await?;
        Ok(crate::broker::depths_from_rows(rows))
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

    /// On RabbitMQ 4.x, sets `delivery-limit: -1` (no limit) in the policy `definition` of
    /// a quorum dead-letter queue that has none from any policy: 4.0 gives every quorum
    /// queue a limit of 20 by default, which makes `dlq inspect` and `dlq replay` read it
    /// one message at a time. A negative limit means "none" on 4.x (rabbitmq-server PR
    /// #12250; tried on 4.0.5, also for a queue that existed before the policy), but 0 on
    /// 3.x, whose policy validation refuses it anyway: nothing is added there. A policy
    /// rather than a queue argument, so that a user's policy of lower priority that sets a
    /// limit keeps it (its keys are merged first), and dead-letter queues made before this
    /// version get it too.
    ///
    /// # Errors
    /// As [`RabbitMq::broker_version`].
    async fn no_default_delivery_limit(
        &self,
        definition: &mut BTreeMap<String, Value>,
    ) -> Result<(), BrokerError> {
        if definition.contains_key("delivery-limit") {
            return Ok(());
        }
        if major_version(&self.broker_version().await?) >= 4 {
            definition.insert("delivery-limit".into(), json!(-1));
        }
        Ok(())
    }

    /// HTTP requests made by this client so far (GET = read; PUT/POST/DELETE = write).
    pub fn request_counts(&self) -> RequestCounts {
        self.mgmt.request_counts()
    }

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
}

/// The major number of a RabbitMQ version (`4` for `4.0.5`; 0 when unreadable).
fn major_version(version: &str) -> u32 {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// The delivery limit a quorum queue has, from every `delivery-limit` that may apply to
/// it (`limits`: its `x-delivery-limit` argument and the policies' keys) on a broker of
/// `version`; `None` for none. Taken conservatively, the smallest:
/// - any limit of 0 or more: the smallest of those;
/// - else a negative one: no limit on RabbitMQ 4.x (rabbitmq-server PR #12250, tried on
///   4.0.5: 30 returns, none dead-lettered), but 0 on 3.x, which reads a negative limit as
///   0 ("dead-letter at the first return": NServiceBus.RabbitMQ issue #1828);
/// - else none set: 20 on RabbitMQ 4.0 to 4.2, their default (RabbitMQ 4.0 release notes;
///   tried on 4.0.5: the 21st delivery dead-letters), none before.
pub fn effective_delivery_limit(limits: &[i64], version: &str) -> Option<u64> {
    if let Some(smallest) = limits.iter().filter(|l| **l >= 0).min() {
        return u64::try_from(*smallest).ok();
    }
    if !limits.is_empty() {
        return (major_version(version) < 4).then_some(0);
    }
    ["4.0.", "4.1.", "4.2."]
        .iter()
        .any(|v| version.starts_with(v))
        .then_some(20)
}

/// Whether the dead-letter exchange and every dead-letter queue of `plan` are usable (none
/// is in `unusable` / `unusable_queues`: another type, other arguments), so that the
/// source queue may be pointed at the route.
fn dead_letter_route_ready(
    plan: &DesiredTopology,
    unusable: &BTreeSet<String>,
    unusable_queues: &BTreeSet<String>,
) -> bool {
    !unusable.contains(&plan.routes.dead_letter_exchange)
        && plan
            .dead_letter_queues()
            .all(|q| !unusable_queues.contains(q))
}

/// Compares two JSON values, numbers numerically (`1000` equals `1000.0`).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(i), Some(j)) => i == j,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn maps_equal(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
}

/// Whether a policy with this `apply-to` can apply to a queue of type `queue_type`.
fn applies_to_queue(apply_to: &str, queue_type: &str) -> bool {
    match apply_to {
        "queues" | "all" | "" => true,
        "classic_queues" => queue_type == "classic",
        "quorum_queues" => queue_type == "quorum",
        "streams" => queue_type == "stream",
        _ => false,
    }
}

/// Whether policy pattern `pattern` matches object name `name` as RabbitMQ matches it, or
/// `None` when that cannot be told here. RabbitMQ runs the pattern with Erlang's `re`
/// (PCRE) on the name's bytes (RabbitMQ docs, "Policies": patterns are regular
/// expressions); the `regex` crate with Unicode off, on bytes, agrees with it on the
/// syntax both have (`.` is one byte, as in PCRE without the `u` option). PCRE features
/// `regex` lacks (look-around, backreferences, possessive quantifiers) give `None`.
pub fn pattern_matches(pattern: &str, name: &str) -> Option<bool> {
    regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .ok()
        .map(|re| re.is_match(name.as_bytes()))
}

/// Policies of the vhost other than `ours` that may match `queue`: (higher-or-equal
/// priority, lower priority), each sorted by descending priority. A higher-or-equal one
/// whose pattern cannot be evaluated here ([`pattern_matches`]) counts as matching, so it
/// is reported as possibly shadowing ours rather than missed; a lower one counts only
/// when it surely matches (its keys are merged into ours).
fn matching_policies<'a>(
    policies: &'a [PolicyInfo],
    ours: &PolicyPlan,
    queue_type: &str,
) -> (Vec<&'a PolicyInfo>, Vec<&'a PolicyInfo>) {
    let mut matching: Vec<&PolicyInfo> = policies
        .iter()
        .filter(|p| p.name != ours.name)
        .filter(|p| applies_to_queue(&p.apply_to, queue_type))
        .filter(|p| {
            pattern_matches(&p.pattern, &ours.queue)
                .unwrap_or(p.priority >= i64::from(ours.priority))
        })
        .collect();
    matching.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    matching
        .into_iter()
        .partition(|p| p.priority >= i64::from(ours.priority))
}

fn binding_name(b: &BindingPlan) -> String {
    format!("{} -> {} [{}]", b.exchange, b.queue, b.routing_key)
}

/// Why an existing queue cannot serve as `plan` (empty when it can).
fn queue_conflicts(
    existing: &QueueInfo,
    plan: &QueuePlan,
    policy: Option<&PolicyPlan>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let want_type = plan.queue_type.argument();
    let have_type = existing
        .kind
        .clone()
        .or_else(|| {
            existing
                .arguments
                .get("x-queue-type")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "classic".to_string());
    if have_type != want_type {
        reasons.push(format!(
            "queue {:?} is a {have_type} queue (x-queue-type), the plan wants {want_type}",
            plan.name
        ));
    }
    for (key, want) in &plan.arguments {
        match existing.arguments.get(key) {
            None => reasons.push(format!(
                "queue {:?} has no argument {key}, the plan wants {want}",
                plan.name
            )),
            Some(have) if !json_equal(have, want) => reasons.push(format!(
                "queue {:?} has argument {key}={have}, the plan wants {want}",
                plan.name
            )),
            Some(_) => {}
        }
    }
    if let Some(p) = policy {
        for key in p.definition.keys() {
            let arg = format!("x-{key}");
            if let Some(have) = existing.arguments.get(&arg) {
                if !plan.arguments.contains_key(&arg) {
                    reasons.push(format!(
                        "queue {:?} has argument {arg}={have}, which overrides key {key} of policy {} (queue arguments take precedence over policies)",
                        plan.name, p.name
                    ));
                }
            }
        }
    }
    reasons
}

impl Broker for RabbitMq {
    /// Applies `plan` (see the module documentation for the rules): the reads of
    /// [`RabbitMq::snapshot`] (one small GET per planned object, never a whole-vhost
    /// listing of queues, exchanges or bindings), an AMQP connection check
    /// ([`RabbitMq::check_amqp`]), the ownership records ([`ownership`]: another owner's
    /// stops the apply before any write), then one write per object that is
    /// missing or differs, in the plan's order (exchanges, policies, queues, bindings), then
    /// the draining of obsolete retry tiers.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost, transport/authentication errors
    /// (of the management API, or of the AMQP `uri`), [`BrokerError::NameOwned`] when
    /// another DeadLetterQueue's record holds a planned name, and [`BrokerError::Api`]
    /// for a write the broker refuses for another reason than a conflict (conflicts are
    /// [`Outcome`]s).
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError> {
        let vhost = plan.vhost.as_str();
        let v = enc(vhost);
        let Snapshot {
            exchanges,
            queues,
            policies,
            bindings,
        } = self.snapshot(plan).await?;
        // The management API answered; consumers, inspection and replay need AMQP too.
        self.check_amqp(vhost).await?;
        let exchange_by_name: BTreeMap<&str, &ExchangeInfo> =
            exchanges.iter().map(|e| (e.name.as_str(), e)).collect();
        let queue_by_name: BTreeMap<&str, &QueueInfo> =
            queues.iter().map(|q| (q.name.as_str(), q)).collect();
        // Existing queues that cannot serve the plan, computed before any policy is
        // written so that our policy is never put on a queue we will not adopt (it would
        // change the behaviour of someone else's queue, e.g. its overflow mode).
        let conflicts: BTreeMap<&str, Vec<String>> = plan
            .queues
            .iter()
            .filter_map(|q| {
                let existing = queue_by_name.get(q.name.as_str())?;
                let policy = plan.policies.iter().find(|p| p.queue == q.name);
                let reasons = queue_conflicts(existing, q, policy);
                (!reasons.is_empty()).then_some((q.name.as_str(), reasons))
            })
            .collect();
        // Exchanges of another type: not ours either.
        let foreign_exchanges: BTreeSet<&str> = plan
            .exchanges
            .iter()
            .filter(|x| {
                exchange_by_name
                    .get(x.name.as_str())
                    .is_some_and(|e| e.kind != x.kind.as_str())
            })
            .map(|x| x.name.as_str())
            .collect();

        // Ownership first: another DeadLetterQueue's record stops the apply before any
        // write; then the missing records are written before the objects they cover —
        // never for an object in conflict, which the plan does not adopt.
        let found = self.check_claims(plan).await?;
        let (created, updated) = self
            .record_claims(plan, &found, |c| {
                if c.kind == ownership::EXCHANGE {
                    !foreign_exchanges.contains(c.name.as_str())
                } else {
                    !conflicts.contains_key(c.name.as_str())
                }
            })
            .await?;
        let policy_by_name: BTreeMap<&str, &PolicyInfo> =
            policies.iter().map(|p| (p.name.as_str(), p)).collect();
        let existing_bindings: BTreeSet<(&str, &str, &str)> = bindings
            .iter()
            .filter(|b| b.destination_type == "queue")
            .map(|b| {
                (
                    b.source.as_str(),
                    b.destination.as_str(),
                    b.routing_key.as_str(),
                )
            })
            .collect();

        let mut actions = Vec::new();
        actions.extend(ownership::record_actions(created, updated));
        // Exchanges and queues that bindings must skip.
        let mut unusable: BTreeSet<String> = BTreeSet::new();
        let mut unusable_queues: BTreeSet<String> = BTreeSet::new();

        // The source exchange is never declared: it must exist.
        if let Some(sx) = &plan.source_exchange {
            if !exchange_by_name.contains_key(sx.as_str()) {
                unusable.insert(sx.clone());
                actions.push(Action {
                    kind: ObjectKind::Exchange,
                    name: sx.clone(),
                    outcome: Outcome::Failed(format!(
                        "source exchange {sx:?} does not exist in vhost {vhost:?}; the operator never declares it (spec.source.exchange)"
                    )),
                });
            }
        }

        // Every object in the plan's apply order (dead-letter route first).
        for step in plan.steps() {
            match step {
                Step::Exchange(x) => {
                    let outcome = match exchange_by_name.get(x.name.as_str()) {
                        Some(e) if e.kind == x.kind.as_str() => Outcome::InPlace,
                        Some(e) => {
                            unusable.insert(x.name.clone());
                            Outcome::Conflict(format!(
                                "exchange {:?} exists with type {}, the plan wants {}",
                                x.name,
                                e.kind,
                                x.kind.as_str()
                            ))
                        }
                        None => {
                            self.mgmt
                                .write(
                                    Method::PUT,
                                    &format!("exchanges/{v}/{}", enc(&x.name)),
                                    Some(&json!({
                                        "type": x.kind.as_str(),
                                        "durable": true,
                                        "auto_delete": false,
                                        "internal": false,
                                        "arguments": {}
                                    })),
                                    None,
                                )
                                .await?;
                            Outcome::Created
                        }
                    };
                    actions.push(Action {
                        kind: ObjectKind::Exchange,
                        name: x.name.clone(),
                        outcome,
                    });
                }
                Step::Policy(p) => {
                    let queue_type = queue_by_name
                        .get(p.queue.as_str())
                        .and_then(|q| q.kind.as_deref())
                        .unwrap_or_else(|| {
                            plan.queues
                                .iter()
                                .find(|q| q.name == p.queue)
                                .map_or("classic", |q| q.queue_type.argument())
                        });
                    let (higher, lower) = matching_policies(&policies, p, queue_type);
                    let mut definition = p.definition.clone();
                    for other in &lower {
                        for (k, val) in &other.definition {
                            definition.entry(k.clone()).or_insert_with(|| val.clone());
                        }
                    }
                    let dead_letter_queue = plan.dead_letter_queues().any(|q| q == p.queue);
                    if dead_letter_queue && queue_type == "quorum" {
                        self.no_default_delivery_limit(&mut definition).await?;
                    }
                    let write = match policy_by_name.get(p.name.as_str()) {
                        None => Some(Outcome::Created),
                        Some(e)
                            if e.pattern != p.pattern
                                || e.priority != i64::from(p.priority)
                                || e.apply_to != APPLY_TO
                                || !maps_equal(&e.definition, &definition) =>
                        {
                            Some(Outcome::Updated)
                        }
                        Some(_) => None,
                    };
                    // Lowering max-length below the current depth with overflow
                    // drop-head would make the broker drop dead letters at once.
                    let new_max = definition.get("max-length").and_then(Value::as_u64);
                    let drop_head =
                        definition.get("overflow").and_then(Value::as_str) == Some("drop-head");
                    let mut held = queue_by_name
                        .get(p.queue.as_str())
                        .and_then(|q| q.messages)
                        .unwrap_or(0);
                    if write.is_some() && drop_head && queue_by_name.contains_key(p.queue.as_str())
                    {
                        // The statistics lag (or are absent for a new queue): also ask the
                        // broker directly for the ready count.
                        if let Some((ready, _)) =
                            amqp::passive_queue_counts(self.mgmt.connection(), vhost, &p.queue)
                                .await?
                        {
                            held = held.max(u64::from(ready));
                        }
                    }
                    let drops = drop_head && new_max.is_some_and(|max| held > max);
                    let mut outcome = match write {
                        Some(_) if drops => Outcome::Conflict(format!(
                            "not written: queue {:?} holds {held} messages, more than the new max-length {}; with overflow DropHead RabbitMQ would drop the oldest at once. Drain or replay the queue first, or raise maxLength",
                            p.queue,
                            new_max.unwrap_or(0)
                        )),
                        Some(_) if conflicts.contains_key(p.queue.as_str()) => {
                            Outcome::Conflict(format!(
                                "not written: queue {:?} exists with conflicting arguments",
                                p.queue
                            ))
                        }
                        // The source queue is pointed at the dead-letter exchange only when
                        // the whole route behind it is in place: otherwise every dead letter
                        // would be dropped, or land in someone else's queues.
                        Some(_)
                            if p.queue == plan.routes.source_queue
                                && !dead_letter_route_ready(plan, &unusable, &unusable_queues) =>
                        {
                            Outcome::Conflict(format!(
                                "not written: the dead-letter route ({} and its dead-letter queues) is not in place (see the conflicts above); pointing {:?} at it would drop its dead letters",
                                plan.routes.dead_letter_exchange, p.queue
                            ))
                        }
                        Some(outcome) => {
                            self.mgmt
                                .write(
                                    Method::PUT,
                                    &format!("policies/{v}/{}", enc(&p.name)),
                                    Some(&json!({
                                        "pattern": p.pattern,
                                        "definition": definition,
                                        "priority": p.priority,
                                        "apply-to": APPLY_TO
                                    })),
                                    None,
                                )
                                .await?;
                            outcome
                        }
                        None => Outcome::InPlace,
                    };
                    if let Some(top) = higher.first() {
                        let how = match pattern_matches(&top.pattern, &p.queue) {
                            Some(_) => "takes",
                            None => "may take (its pattern uses regular-expression features the operator cannot evaluate, so it is counted as matching)",
                        };
                        outcome = Outcome::Shadowed(format!(
                            "policy {} (priority {}) {how} precedence over {} (priority {}) on queue {:?}",
                            top.name, top.priority, p.name, p.priority, p.queue
                        ));
                    }
                    actions.push(Action {
                        kind: ObjectKind::Policy,
                        name: p.name.clone(),
                        outcome,
                    });
                }
                Step::Queue(q) => {
                    let outcome = match queue_by_name.get(q.name.as_str()) {
                        None if !q.declare => {
                            unusable_queues.insert(q.name.clone());
                            Outcome::Failed(format!(
                                "source queue {} does not exist and spec.source.manage is false",
                                q.name
                            ))
                        }
                        None => {
                            let res = self
                                .mgmt
                                .write(
                                    Method::PUT,
                                    &format!("queues/{v}/{}", enc(&q.name)),
                                    Some(&json!({
                                        "durable": true,
                                        "auto_delete": false,
                                        "arguments": q.declare_arguments()
                                    })),
                                    Some(&q.name),
                                )
                                .await;
                            match res {
                                Ok(()) => Outcome::Created,
                                // Declared by someone else since our read.
                                Err(BrokerError::ArgumentConflict { reason, .. }) => {
                                    unusable_queues.insert(q.name.clone());
                                    Outcome::Conflict(reason)
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        Some(_) => match conflicts.get(q.name.as_str()) {
                            None => Outcome::InPlace,
                            Some(reasons) => {
                                unusable_queues.insert(q.name.clone());
                                Outcome::Conflict(format!(
                                    "{}; left untouched (queue arguments are immutable and the queue is never deleted to fix this)",
                                    reasons.join("; ")
                                ))
                            }
                        },
                    };
                    actions.push(Action {
                        kind: ObjectKind::Queue,
                        name: q.name.clone(),
                        outcome,
                    });
                }
                Step::Binding(b) => {
                    if unusable.contains(&b.exchange) || unusable_queues.contains(&b.queue) {
                        continue;
                    }
                    let outcome = if existing_bindings.contains(&(
                        b.exchange.as_str(),
                        b.queue.as_str(),
                        b.routing_key.as_str(),
                    )) {
                        Outcome::InPlace
                    } else {
                        self.mgmt
                            .write(
                                Method::POST,
                                &format!("bindings/{v}/e/{}/q/{}", enc(&b.exchange), enc(&b.queue)),
                                Some(&json!({ "routing_key": b.routing_key, "arguments": {} })),
                                None,
                            )
                            .await?;
                        Outcome::Created
                    };
                    actions.push(Action {
                        kind: ObjectKind::Binding,
                        name: binding_name(b),
                        outcome,
                    });
                }
            }
        }

        // Obsolete retry tiers and dead-letter queues, only once what replaces them is in
        // place: the old ones keep serving until the new ones do.
        let in_place = |wanted: fn(&crate::topology::QueueRole) -> bool| {
            plan.queues
                .iter()
                .filter(|q| wanted(&q.role))
                .all(|q| !unusable_queues.contains(&q.name))
        };
        if in_place(|r| matches!(r, crate::topology::QueueRole::Retry { .. })) {
            self.retire_tiers(plan, &queues, &bindings, &found, &mut actions)
                .await?;
        }
        if in_place(|r| matches!(r, crate::topology::QueueRole::DeadLetter { .. }))
            && !unusable.contains(&plan.routes.dead_letter_exchange)
        {
            self.retire_dead_letter_queues(plan, &found, &policies, &mut actions)
                .await?;
        }

        Ok(ApplyReport { actions })
    }

    /// One request for every queue of `vhost`: with the Secret's `prometheusUri`,
    /// `GET {prometheusUri}/metrics/detailed?vhost=…&family=queue_coarse_metrics`
    /// (`rabbitmq_prometheus`; falls back to the management API, with a warning, when that
    /// fails); otherwise `GET /api/queues/{vhost}?disable_stats=true&enable_queue_totals=true
    /// &columns=name,messages,messages_ready,messages_unacknowledged` (RabbitMQ docs,
    /// "Management HTTP API"). Counts lag by the broker's statistics interval
    /// (`collect_statistics_interval`, 5 s by default); queues without statistics yet count
    /// 0 (management API) or are absent (prometheus plugin).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost; transport/authentication errors.
    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError> {
        self.queue_depths_covering(vhost, &BTreeSet::new()).await
    }

    /// `DELETE /api/queues/{vhost}/{name}?if-empty=true`: the broker refuses a non-empty
    /// queue. Quorum queues of RabbitMQ 3.x do not support `if-empty`; for them the queue
    /// is deleted only if the management statistics and an AMQP passive declare both say
    /// it has no messages and no consumers (unbind it first so nothing new arrives).
    ///
    /// # Errors
    /// Transport/authentication errors, [`BrokerError::Api`] for other refusals.
    async fn delete_queue_if_empty(
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
    async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError> {
        let vhost = plan.vhost.as_str();
        let v = enc(vhost);
        let queues: Vec<QueueInfo> = match self
            .list(
                "queues",
                vhost,
                "?columns=name,type,arguments,messages,messages_ready,messages_unacknowledged",
            )
            .await
        {
            Err(BrokerError::NotFound { .. }) => return Ok(RemovalReport::default()),
            other => other?,
        };
        let queue_by_name: BTreeMap<&str, &QueueInfo> =
            queues.iter().map(|q| (q.name.as_str(), q)).collect();
        // Never what another DeadLetterQueue's ownership record holds; the dead-letter
        // queues this one retired are its own.
        let records = self.ownership_for_removal(plan).await?;
        let mut targets: Vec<&QueueInfo> = plan
            .queues
            .iter()
            .filter(|q| q.role != crate::topology::QueueRole::Source)
            .filter(|q| !records.foreign_queue(&q.name))
            .filter_map(|q| queue_by_name.get(q.name.as_str()).copied())
            .collect();
        for name in plan
            .obsolete_tier_queues(queues.iter().map(|q| (q.name.as_str(), &q.arguments)))
            .iter()
            .chain(&records.retired)
        {
            if let Some(q) = queue_by_name.get(name.as_str()) {
                targets.push(q);
            }
        }

        // 1. Every queue must be idle, or nothing is touched.
        let conn = self.mgmt.connection();
        let mut blocked = Vec::new();
        for q in &targets {
            if let Some(reason) = self.busy(conn, vhost, q).await? {
                blocked.push(reason);
            }
        }
        // The source queue stays, but loses its dead-letter route: a consumer still
        // attached would have its rejected messages dropped from now on.
        let source = plan.routes.source_queue.as_str();
        if let Some((_, consumers)) = amqp::passive_queue_counts(conn, vhost, source).await? {
            if consumers > 0 {
                blocked.push(format!(
                    "source queue {source:?} has {consumers} consumer(s), whose rejected messages would be dropped without the dead-letter route; stop them first"
                ));
            }
        }
        if !blocked.is_empty() {
            return Ok(RemovalReport {
                actions: Vec::new(),
                blocked,
            });
        }

        let mut actions = Vec::new();
        // 2. Policies, the source queue's first.
        let policies: Vec<PolicyInfo> = self.list("policies", vhost, "").await?;
        let mut ours: Vec<&crate::topology::PolicyPlan> = plan
            .policies
            .iter()
            .filter(|p| !records.foreign_queue(&p.queue))
            .collect();
        ours.sort_by_key(|p| p.queue != plan.routes.source_queue);
        let names = ours.iter().map(|p| p.name.clone()).chain(
            records
                .retired
                .iter()
                .map(|q| crate::topology::policy_name(q)),
        );
        for name in names {
            if !policies.iter().any(|e| e.name == name) {
                continue;
            }
            let path = format!("policies/{v}/{}", enc(&name));
            self.delete_path(&path).await?;
            actions.push(Action {
                kind: ObjectKind::Policy,
                name,
                outcome: Outcome::Deleted,
            });
        }

        // 3. Exchanges (with their bindings), unless bound to a queue that is not ours.
        let exchanges: Vec<ExchangeInfo> = self.list("exchanges", vhost, "").await?;
        let bindings: Vec<BindingInfo> = self.list("bindings", vhost, "").await?;
        let our_queues: BTreeSet<&str> = targets.iter().map(|q| q.name.as_str()).collect();
        for x in &plan.exchanges {
            if records.foreign_exchange(&x.name) || !exchanges.iter().any(|e| e.name == x.name) {
                continue;
            }
            let foreign: Vec<&str> = bindings
                .iter()
                .filter(|b| b.source == x.name)
                .filter(|b| {
                    b.destination_type != "queue" || !our_queues.contains(b.destination.as_str())
                })
                .map(|b| b.destination.as_str())
                .collect();
            let outcome = if foreign.is_empty() {
                self.delete_path(&format!("exchanges/{v}/{}", enc(&x.name)))
                    .await?;
                Outcome::Deleted
            } else {
                Outcome::Retained(format!(
                    "still bound to {} that the operator does not own",
                    foreign.join(", ")
                ))
            };
            actions.push(Action {
                kind: ObjectKind::Exchange,
                name: x.name.clone(),
                outcome,
            });
        }

        // 4. Queues.
        for q in &targets {
            let outcome = if q.kind.as_deref() == Some("quorum") {
                match self.busy(conn, vhost, q).await? {
                    Some(reason) => {
                        blocked.push(reason.clone());
                        Outcome::Retained(reason)
                    }
                    None => {
                        self.delete_path(&format!("queues/{v}/{}", enc(&q.name)))
                            .await?;
                        Outcome::Deleted
                    }
                }
            } else {
                match self.delete_if_empty_known(vhost, &q.name, Some(q)).await? {
                    DeleteOutcome::Deleted | DeleteOutcome::Absent => Outcome::Deleted,
                    DeleteOutcome::NotEmpty { messages } => {
                        let reason = format!("queue {:?} holds {messages} message(s)", q.name);
                        blocked.push(reason.clone());
                        Outcome::Retained(reason)
                    }
                    DeleteOutcome::Unsupported { reason } => {
                        blocked.push(format!("queue {:?}: {reason}", q.name));
                        Outcome::Retained(reason)
                    }
                }
            };
            actions.push(Action {
                kind: ObjectKind::Queue,
                name: q.name.clone(),
                outcome,
            });
        }
        // 5. Once nothing is left to wait for, the names are free again.
        if blocked.is_empty() {
            self.release_ownership(plan, &records).await?;
        }
        Ok(RemovalReport { actions, blocked })
    }
}

/// What exists on the broker for one plan (see [`RabbitMq::snapshot`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The planned exchanges and the source exchange that exist.
    pub exchanges: Vec<ExchangeInfo>,
    /// The planned queues that exist, and every queue named like a retry tier of the
    /// source queue (`<retry exchange>.…`).
    pub queues: Vec<QueueInfo>,
    /// Every policy of the vhost (shadowing and merging need them all).
    pub policies: Vec<PolicyInfo>,
    /// Bindings between each planned exchange/queue pair, and the bindings of the tier-like
    /// queues that are not planned.
    pub bindings: Vec<BindingInfo>,
}

/// Page size of filtered queue listings.
const PAGE_SIZE: u32 = 500;

impl RabbitMq {
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

    /// What reading queue `name` of `vhost` without losing a message must know
    /// ([`QueueLimits`]), taken conservatively — the smallest delivery and length limit
    /// any source could apply: the queue's arguments, its effective policy, and every
    /// policy of the vhost whose pattern matches the name (read from the policy list,
    /// which is current, while the queue's effective policy comes from statistics that lag
    /// by `collect_statistics_interval`). A pattern that cannot be evaluated here
    /// ([`pattern_matches`]) counts as matching. With no delivery limit set, a quorum queue gets 20 on RabbitMQ 4.0 to
    /// 4.2, which apply that default (RabbitMQ 4.0 release notes).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing queue; transport and authentication errors.
    pub async fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError> {
        let q: Value = self
            .mgmt
            .get_json(
                &format!(
                    "queues/{}/{}?columns=type,arguments,effective_policy_definition",
                    enc(vhost),
                    enc(name)
                ),
                &format!("queue {name:?} in vhost {vhost:?}"),
            )
            .await?;
        let policies: Vec<Value> = self
            .mgmt
            .get_json(
                &format!("policies/{}", enc(vhost)),
                &format!("vhost {vhost:?}"),
            )
            .await?;
        // A record without its type or arguments must not read as "no delivery limit":
        // that would let inspection requeue a message past the limit.
        if !q["type"].is_string() || !q["arguments"].is_object() {
            return Err(BrokerError::Amqp {
                reason: format!(
                    "the management API returned queue {name:?} in vhost {vhost:?} without its \
                     type or arguments; its delivery limit is unknown, so it is not read (retry)"
                ),
            });
        }
        let mut definitions = vec![q["effective_policy_definition"].clone()];
        for p in policies {
            let applies = matches!(
                p["apply-to"].as_str().unwrap_or("all"),
                "all" | "queues" | "quorum_queues" | "classic_queues"
            );
            let matches = p["pattern"]
                .as_str()
                .and_then(|pat| pattern_matches(pat, name))
                .unwrap_or(true);
            if applies && matches {
                definitions.push(p["definition"].clone());
            }
        }
        let args = &q["arguments"];
        let smallest = |arg: &str, key: &str| {
            definitions
                .iter()
                .filter_map(|d| d[key].as_u64())
                .chain(args[arg].as_u64())
                .min()
        };
        let quorum = q["type"] == "quorum";
        let delivery_limits: Vec<i64> = definitions
            .iter()
            .filter_map(|d| d["delivery-limit"].as_i64())
            .chain(args["x-delivery-limit"].as_i64())
            .collect();
        let version = if quorum {
            self.broker_version().await?
        } else {
            String::new()
        };
        let delivery_limit = quorum
            .then(|| effective_delivery_limit(&delivery_limits, &version))
            .flatten();
        Ok(QueueLimits {
            quorum,
            delivery_limit,
            default_delivery_limit: delivery_limit.is_some() && delivery_limits.is_empty(),
            max_length: smallest("x-max-length", "max-length"),
            max_length_bytes: smallest("x-max-length-bytes", "max-length-bytes"),
            drops_head: definitions
                .iter()
                .map(|d| &d["overflow"])
                .chain(std::iter::once(&args["x-overflow"]))
                .any(|o| o == "drop-head"),
        })
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

    /// Reads what the broker has for `plan`, with requests whose cost does not grow with
    /// the number of objects in the vhost (the management API's listings of queues and
    /// bindings take tens of milliseconds per thousand queues, and an apply of 1,000
    /// resources would otherwise cost O(n²)): `GET /api/vhosts` ([`RabbitMq::ensure_vhost`]); one GET per
    /// planned exchange, queue and exchange/queue binding pair; the vhost's policies; and
    /// the queues named `<retry exchange>.*` through the filtered, paginated listing
    /// (`name=…&use_regex=true`) plus their bindings, to find obsolete tiers.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost; transport/authentication errors.
    pub async fn snapshot(&self, plan: &DesiredTopology) -> Result<Snapshot, BrokerError> {
        let vhost = plan.vhost.as_str();
        let v = enc(vhost);
        self.ensure_vhost(vhost).await?;
        let mut snap = Snapshot::default();
        let exchange_names = plan
            .exchanges
            .iter()
            .map(|x| x.name.as_str())
            .chain(plan.source_exchange.as_deref());
        for name in exchange_names {
            if let Some(x) = self
                .get_opt::<ExchangeInfo>(&format!("exchanges/{v}/{}?columns=name,type", enc(name)))
                .await?
            {
                snap.exchanges.push(x);
            }
        }
        const QUEUE_COLUMNS: &str =
            "columns=name,type,durable,arguments,messages,messages_ready,messages_unacknowledged,policy";
        for q in &plan.queues {
            if let Some(info) = self
                .get_opt::<QueueInfo>(&format!("queues/{v}/{}?{QUEUE_COLUMNS}", enc(&q.name)))
                .await?
            {
                snap.queues.push(info);
            }
        }
        // Tier-like queues of this source (planned or not), page by page.
        let pattern = format!("^{}\\.", regex::escape(&plan.routes.retry_exchange));
        let mut page = 1;
        loop {
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                items: Vec<QueueInfo>,
                #[serde(default)]
                page_count: u32,
            }
            let path = format!(
                "queues/{v}?page={page}&page_size={PAGE_SIZE}&name={}&use_regex=true&{QUEUE_COLUMNS}",
                enc(&pattern)
            );
            let p: Page = self
                .mgmt
                .get_json(&path, &format!("vhost {vhost:?}"))
                .await?;
            for info in p.items {
                if !snap.queues.iter().any(|q| q.name == info.name) {
                    snap.queues.push(info);
                }
            }
            if page >= p.page_count {
                break;
            }
            page += 1;
        }
        snap.policies = self.list("policies", vhost, "").await?;
        const BINDING_COLUMNS: &str =
            "columns=source,destination,destination_type,routing_key,properties_key";
        for (x, q) in plan.binding_pairs() {
            let found: Option<Vec<BindingInfo>> = self
                .get_opt(&format!(
                    "bindings/{v}/e/{}/q/{}?{BINDING_COLUMNS}",
                    enc(x),
                    enc(q)
                ))
                .await?;
            snap.bindings.extend(found.unwrap_or_default());
        }
        let unplanned: Vec<String> = snap
            .queues
            .iter()
            .filter(|q| !plan.queues.iter().any(|p| p.name == q.name))
            .map(|q| q.name.clone())
            .collect();
        for name in unplanned {
            let found: Option<Vec<BindingInfo>> = self
                .get_opt(&format!(
                    "queues/{v}/{}/bindings?{BINDING_COLUMNS}",
                    enc(&name)
                ))
                .await?;
            snap.bindings.extend(found.unwrap_or_default());
        }
        Ok(snap)
    }

    /// Why queue `q` must not be deleted now (messages or consumers), or `None` when it is
    /// idle or gone. Reads the statistics already in `q` and an AMQP passive declare.
    async fn busy(
        &self,
        conn: &BrokerConnection,
        vhost: &str,
        q: &QueueInfo,
    ) -> Result<Option<String>, BrokerError> {
        let stats = q
            .messages
            .unwrap_or(0)
            .max(q.messages_ready.unwrap_or(0) + q.messages_unacknowledged.unwrap_or(0));
        let Some((ready, consumers)) = amqp::passive_queue_counts(conn, vhost, &q.name).await?
        else {
            return Ok(None);
        };
        let messages = stats.max(u64::from(ready));
        Ok(if messages > 0 {
            Some(format!("queue {:?} holds {messages} message(s)", q.name))
        } else if consumers > 0 {
            Some(format!("queue {:?} has {consumers} consumer(s)", q.name))
        } else {
            None
        })
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

/// What reading a queue without losing a message must know of it
/// ([`RabbitMq::queue_limits`]; see `crate::dlq::release_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueLimits {
    /// A quorum queue (returns count as deliveries).
    pub quorum: bool,
    /// The smallest delivery limit that may apply.
    pub delivery_limit: Option<u64>,
    /// [`QueueLimits::delivery_limit`] is RabbitMQ 4.0–4.2's default (no limit is set).
    pub default_delivery_limit: bool,
    /// The smallest `max-length` that may apply.
    pub max_length: Option<u64>,
    /// The smallest `max-length-bytes` that may apply.
    pub max_length_bytes: Option<u64>,
    /// `overflow: drop-head` may apply (a copy published to a full queue drops its head).
    pub drops_head: bool,
}

impl QueueLimits {
    /// Why reading this queue is slower, for the user (`None` when it is not): a quorum
    /// queue with a delivery limit is read one message at a time by `dlq replay`, and
    /// `dlq inspect` rotates the messages near the limit, so that reading never
    /// dead-letters or drops one.
    pub fn slow_reading(&self, queue: &str) -> Option<String> {
        let limit = self.delivery_limit.filter(|_| self.quorum)?;
        let source = if self.default_delivery_limit {
            "RabbitMQ 4.0-4.2's default for a quorum queue that sets none; `dlq-operator apply` removes it from the dead-letter queues it manages (delivery-limit -1 in their policy)"
        } else {
            "set by a policy or a queue argument (a policy of higher priority than the operator's, or a queue declared with x-delivery-limit)"
        };
        Some(format!(
            "dead-letter queue {queue:?} has a delivery limit of {limit} ({source}): read the safe way (dlq replay one message at a time, dlq inspect rotating the messages near the limit) so that reading never dead-letters one, which is slower"
        ))
    }

    /// `Some(why)` when a scan of this queue, holding `count` messages, could push a
    /// message past its delivery limit: a quorum queue with a delivery limit whose
    /// rotation (a copy published before the original is acked) a length limit could
    /// refuse or answer by dropping the head — it is full, drops its head, or limits bytes
    /// (which the scan cannot check). `None`: safe to read.
    pub fn unsafe_to_read(&self, count: u64) -> Option<String> {
        if !self.quorum || self.delivery_limit.is_none() {
            return None;
        }
        let limited = self.max_length.is_some() || self.max_length_bytes.is_some();
        if limited && self.drops_head {
            return Some("its length limit drops the head when full".into());
        }
        if self.max_length_bytes.is_some() {
            return Some("it has a max-length-bytes limit".into());
        }
        match self.max_length {
            Some(max) if count >= max => Some(format!("it is full ({count} of max-length {max})")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::QueueType;
    use crate::topology::QueueRole;

    #[test]
    fn json_numbers_compare_numerically() {
        assert!(json_equal(&json!(1000), &json!(1000.0)));
        assert!(json_equal(&json!({"a": [1, 2]}), &json!({"a": [1.0, 2]})));
        assert!(!json_equal(&json!(1000), &json!("1000")));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn delivery_limits_by_version() {
        // Set limits: the smallest of 0 or more.
        assert_eq!(effective_delivery_limit(&[5, 20], "3.10.8"), Some(5));
        assert_eq!(effective_delivery_limit(&[-1, 7], "4.0.5"), Some(7));
        // Only a negative one: none on 4.x, 0 on 3.x.
        assert_eq!(effective_delivery_limit(&[-1], "4.0.5"), None);
        assert_eq!(effective_delivery_limit(&[-1], "3.10.8"), Some(0));
        // None set: 4.0-4.2's default of 20, none before.
        assert_eq!(effective_delivery_limit(&[], "4.0.5"), Some(20));
        assert_eq!(effective_delivery_limit(&[], "4.2.1"), Some(20));
        assert_eq!(effective_delivery_limit(&[], "3.10.8"), None);
        assert_eq!(effective_delivery_limit(&[], "4.10.0"), None);
        let limits = QueueLimits {
            quorum: true,
            delivery_limit: Some(20),
            default_delivery_limit: true,
            ..Default::default()
        };
        let why = limits.slow_reading("q.dlq").expect("slow");
        assert!(why.contains("default"), "{why}");
        assert!(QueueLimits::default().slow_reading("q").is_none());
    }

    #[test]
    fn patterns_match_as_rabbitmq_matches_them() {
        // PCRE on bytes: `.` is one byte, so two dots match the two bytes of "é".
        assert_eq!(pattern_matches("^q-u..$", "q-ué"), Some(true));
        assert_eq!(pattern_matches("^q-u.$", "q-ué"), Some(false));
        assert_eq!(pattern_matches("^orders$", "orders"), Some(true));
        assert_eq!(pattern_matches("^orders$", "orders.dlq"), Some(false));
        assert_eq!(pattern_matches("^ord\\.", "ord.x"), Some(true));
        // PCRE features the regex crate lacks cannot be told: counted as matching where
        // that is the safe side (a possible shadow).
        assert_eq!(pattern_matches("^q(?!zzz)", "q1"), None);
        assert_eq!(pattern_matches("^(a)\\1$", "aa"), None);
        let ours = PolicyPlan {
            name: "dlq-operator.q1".into(),
            queue: "q1".into(),
            pattern: "^q1$".into(),
            priority: 100,
            definition: BTreeMap::new(),
        };
        let policy = |name: &str, pattern: &str, priority: i64| PolicyInfo {
            name: name.into(),
            pattern: pattern.into(),
            apply_to: "all".into(),
            definition: BTreeMap::new(),
            priority,
        };
        let policies = [
            policy("lookahead", "^q(?!zzz)", 500),
            policy("low-lookahead", "^q(?!zzz)", 1),
            policy("other", "^x$", 500),
        ];
        let (higher, lower) = matching_policies(&policies, &ours, "quorum");
        let names = |v: &[&PolicyInfo]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&higher), ["lookahead"]);
        assert!(lower.is_empty(), "{:?}", names(&lower));
    }

    #[test]
    fn apply_to_filters_by_queue_type() {
        assert!(applies_to_queue("all", "quorum"));
        assert!(applies_to_queue("queues", "classic"));
        assert!(applies_to_queue("quorum_queues", "quorum"));
        assert!(!applies_to_queue("classic_queues", "quorum"));
        assert!(!applies_to_queue("exchanges", "quorum"));
    }

    fn tier_plan() -> QueuePlan {
        QueuePlan {
            name: "q.retry.5s".into(),
            role: QueueRole::Retry { delay_ms: 5000 },
            queue_type: QueueType::Quorum,
            arguments: [("x-message-ttl".to_string(), json!(5000))].into(),
            declare: true,
        }
    }

    fn existing(kind: &str, args: Value) -> QueueInfo {
        serde_json::from_value(json!({"name": "q.retry.5s", "type": kind, "arguments": args}))
            .unwrap_or_else(|e| panic!("queue info: {e}"))
    }

    #[test]
    fn queue_conflicts_name_type_and_arguments() {
        let plan = tier_plan();
        assert!(queue_conflicts(
            &existing("quorum", json!({"x-message-ttl": 5000.0})),
            &plan,
            None
        )
        .is_empty());
        let r = queue_conflicts(
            &existing("classic", json!({"x-message-ttl": 6000})),
            &plan,
            None,
        );
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r[0].contains("x-queue-type") && r[1].contains("x-message-ttl"));
        let policy = PolicyPlan {
            name: "dlq-operator.q.retry.5s".into(),
            queue: "q.retry.5s".into(),
            pattern: "^q\\.retry\\.5s$".into(),
            priority: 100,
            definition: [("max-length".to_string(), json!(10))].into(),
        };
        let r = queue_conflicts(
            &existing("quorum", json!({"x-message-ttl": 5000, "x-max-length": 3})),
            &plan,
            Some(&policy),
        );
        assert!(r.len() == 1 && r[0].contains("x-max-length"), "{r:?}");
    }
}
