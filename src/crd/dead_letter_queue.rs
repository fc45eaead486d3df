use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::Duration;

mod validate;

/// Retry and dead-letter topology plus backlog monitoring for one source queue
/// (`DeadLetterQueue`, short name `dlq`). Fields and defaults: docs/REFERENCE.md.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "dlqoperator.io",
    version = "v1alpha1",
    kind = "DeadLetterQueue",
    plural = "deadletterqueues",
    singular = "deadletterqueue",
    shortname = "dlq",
    namespaced,
    status = "DeadLetterQueueStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"DLQ depth","type":"integer","jsonPath":".status.depth.deadLetter"}"#,
    printcolumn = r#"{"name":"Baseline","type":"number","jsonPath":".status.baseline"}"#,
    printcolumn = r#"{"name":"Ratio","type":"number","jsonPath":".status.backlogRatio"}"#,
    printcolumn = r#"{"name":"Alert","type":"string","jsonPath":".status.alertState"}"#,
    printcolumn = r#"{"name":"Maturity","type":"number","jsonPath":".status.maturity.score"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct DeadLetterQueueSpec {
    /// Where the broker is and how to log in.
    pub broker: BrokerSpec,
    /// The work queue whose failures are retried and dead-lettered.
    pub source: SourceSpec,
    /// The RetryPolicy (same namespace) that drives retries.
    pub retry_policy_ref: LocalObjectRef,
    /// The dead-letter exchange and queue.
    #[serde(default)]
    pub dead_letter: DeadLetterSpec,
    /// Backlog monitoring of the dead-letter queue.
    #[serde(default)]
    pub monitoring: MonitoringSpec,
    /// Generated Prometheus alert rules.
    #[serde(default)]
    pub alerting: AlertingSpec,
    /// What happens to broker objects when the resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// Router mode: failures are retried by the operator's retry router, so consumers in
    /// any language only reject (docs/ROUTER.md). Off by default.
    #[serde(default, skip_serializing_if = "RouterSpec::is_default")]
    pub router: RouterSpec,
}

/// Router mode (`spec.router`; docs/ROUTER.md).
///
/// With `enabled: true` the source queue dead-letters into the router inbox
/// `<source>.router` instead of the dead-letter exchange; the retry router consumes the
/// inbox, decides with the RetryPolicy exactly as [`crate::client::RetryHandler`] does,
/// and republishes each message to its retry tier or to the dead-letter exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct RouterSpec {
    /// Route failed messages through the retry router (default `false`: the source
    /// dead-letters straight into the dead-letter exchange and only consumers using the
    /// client library retry).
    #[serde(default)]
    pub enabled: bool,
    /// Deliveries one router replica works on at once: the AMQP prefetch on the inbox
    /// (default 100).
    #[serde(default = "default_router_prefetch")]
    #[schemars(range(min = 1, max = 10000))]
    pub prefetch: u16,
    /// Inbox depth (messages) above which the inbox counts as backed up: the
    /// `RouterReady` condition turns `False` with reason `InboxBackedUp` (default 1000).
    #[serde(default = "default_inbox_backlog")]
    #[schemars(range(min = 1))]
    pub backlog_threshold: u64,
}

fn default_router_prefetch() -> u16 {
    100
}
fn default_inbox_backlog() -> u64 {
    1000
}

impl Default for RouterSpec {
    fn default() -> Self {
        RouterSpec {
            enabled: false,
            prefetch: default_router_prefetch(),
            backlog_threshold: default_inbox_backlog(),
        }
    }
}

impl RouterSpec {
    /// Whether every field has its default (then `spec.router` is left out when the
    /// spec is written back, so resources without it render as before).
    pub fn is_default(&self) -> bool {
        *self == RouterSpec::default()
    }
}

/// Reference to an object in the resource's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct LocalObjectRef {
    /// Name of the referenced object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Broker connection (`spec.broker`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct BrokerSpec {
    /// The broker: `RabbitMQ` (default) or `Redis` (docs/REDIS.md: a stream read by a
    /// consumer group, `spec.source.stream` and `spec.source.group`).
    #[serde(
        rename = "type",
        default,
        skip_serializing_if = "BrokerType::is_rabbitmq"
    )]
    pub type_: BrokerType,
    /// Secret with, for Redis, `uri` (`redis[s]://[user:password@]host:port[/db]`, several
    /// comma-separated for a cluster's seed nodes); for RabbitMQ,
    /// `uri` (`amqp[s]://…`), `managementUri` (`http[s]://…:15672`), optionally
    /// `username`/`password`, `prometheusUri` (`http[s]://…:15692`: depths from the
    /// rabbitmq_prometheus plugin, for large vhosts), and for TLS `ca.crt`, `tls.crt`,
    /// `tls.key`.
    pub secret_ref: LocalObjectRef,
    /// Virtual host (default `/`).
    #[serde(default = "default_vhost")]
    #[schemars(length(min = 1, max = 255))]
    pub vhost: String,
    /// Priority of the operator's policies; must be above any other policy that matches
    /// the same queues (RabbitMQ applies only the highest-priority policy). Default 100.
    #[serde(default = "default_policy_priority")]
    #[schemars(range(min = 0, max = 10000))]
    pub policy_priority: i32,
    /// Where the settings of the queues the operator declares live
    /// (docs/ARCHITECTURE.md, "A thousand queues per vhost"): `Policy` (default) in one
    /// exact-name policy per queue, every setting changeable in place; `Arguments` as
    /// queue arguments at declaration, with no policy, for vhosts of hundreds to thousands
    /// of queues. Under `Arguments` a retention, maximum length or delivery limit can be
    /// lowered in place (one policy) but not raised (reason `DeclaredArgument`; give the
    /// dead-letter queue a new name instead), and the dead-letter exchange, router mode
    /// and a classic queue's overflow of a declared queue cannot change (reason
    /// `ArgumentConflict`). Queues that already exist keep the layout they were declared
    /// in.
    #[serde(default, skip_serializing_if = "QueueSettings::is_policy")]
    pub queue_settings: QueueSettings,
}

/// The broker a DeadLetterQueue is on (`spec.broker.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum BrokerType {
    /// RabbitMQ (the default): queues, exchanges and policies.
    #[default]
    RabbitMQ,
    /// Redis 7 or later: a stream read by a consumer group (docs/REDIS.md).
    Redis,
}

impl BrokerType {
    /// Whether this is the default, [`BrokerType::RabbitMQ`] (then the field is left out
    /// when the spec is written back).
    pub fn is_rabbitmq(&self) -> bool {
        *self == BrokerType::RabbitMQ
    }
}

/// Where the settings of the queues the operator declares live (`spec.broker.queueSettings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum QueueSettings {
    /// One exact-name operator policy per queue (every setting changeable in place).
    #[default]
    Policy,
    /// Queue arguments at declaration; a policy only where one is needed.
    Arguments,
}

impl QueueSettings {
    /// Whether this is the default, [`QueueSettings::Policy`] (then the field is left out
    /// when the spec is written back).
    pub fn is_policy(&self) -> bool {
        *self == QueueSettings::Policy
    }
}

fn default_vhost() -> String {
    "/".into()
}
fn default_policy_priority() -> i32 {
    100
}

/// RabbitMQ queue type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum QueueType {
    /// Replicated Raft-based queue (the default; at-least-once dead-lettering).
    #[default]
    Quorum,
    /// Classic queue.
    Classic,
}

impl QueueType {
    /// The `x-queue-type` argument value.
    pub fn argument(self) -> &'static str {
        match self {
            QueueType::Quorum => "quorum",
            QueueType::Classic => "classic",
        }
    }
}

/// The work queue (`spec.source`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct SourceSpec {
    /// Name of the work queue (RabbitMQ; required there).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 200))]
    pub queue: String,
    /// Redis: the stream the consumers read (required for `spec.broker.type: Redis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1000))]
    pub stream: Option<String>,
    /// Redis: the consumer group the consumers of `stream` read with (required with it).
    /// The consumers create it (`XGROUP CREATE … MKSTREAM`); the router waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub group: Option<String>,
    /// Redis: how long an entry may stay pending (read, not acknowledged) before it has
    /// failed once (default `30s`; 100ms to 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility_timeout: Option<Duration>,
    /// Existing exchange to bind the queue to (not declared by the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// Routing key of that binding (default: the queue name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    /// Queue type (default `Quorum`).
    #[serde(default)]
    pub queue_type: QueueType,
    /// Declare the source queue if it is missing (default true).
    #[serde(default = "default_true")]
    pub manage: bool,
    /// Broker-side delivery limit of a quorum source queue: deliveries (redeliveries
    /// after consumer crashes or requeues) before RabbitMQ dead-letters a message itself.
    /// Always set explicitly, since RabbitMQ 4.0 silently defaults it to 20. Default 20.
    #[serde(default = "default_delivery_limit")]
    #[schemars(range(min = 1, max = 1000000))]
    pub delivery_limit: u32,
}

fn default_true() -> bool {
    true
}
fn default_delivery_limit() -> u32 {
    20
}

/// What to do when the dead-letter queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Overflow {
    /// Refuse new dead letters (they stay in the source queue / publisher gets a nack).
    #[default]
    RejectPublish,
    /// Drop the oldest dead letter.
    DropHead,
}

impl Overflow {
    /// The RabbitMQ `overflow` policy value.
    pub fn argument(self) -> &'static str {
        match self {
            Overflow::RejectPublish => "reject-publish",
            Overflow::DropHead => "drop-head",
        }
    }
}

/// How dead letters are split across queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum PartitionBy {
    /// One dead-letter queue.
    #[default]
    None,
    /// One dead-letter queue per error class plus the default one.
    ErrorClass,
}

/// Dead-letter exchange and queue (`spec.deadLetter`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct DeadLetterSpec {
    /// Dead-letter queue name (default `<source>.dlq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Dead-letter exchange name (default `<source>.dlx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// How long a dead letter is kept (queue message TTL; default `168h`).
    #[serde(default = "default_retention")]
    pub retention: Duration,
    /// Maximum number of dead letters kept (default 100000).
    #[serde(default = "default_max_length")]
    #[schemars(range(min = 1))]
    pub max_length: u64,
    /// What happens when `maxLength` is reached (default `RejectPublish`).
    #[serde(default)]
    pub overflow: Overflow,
    /// Split dead letters by error class (default `None`).
    #[serde(default)]
    pub partition_by: PartitionBy,
}

fn default_retention() -> Duration {
    Duration::new("168h")
}
fn default_max_length() -> u64 {
    100_000
}

impl Default for DeadLetterSpec {
    fn default() -> Self {
        DeadLetterSpec {
            queue: None,
            exchange: None,
            retention: default_retention(),
            max_length: default_max_length(),
            overflow: Overflow::default(),
            partition_by: PartitionBy::default(),
        }
    }
}

/// How the baseline depth is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum BaselineMode {
    /// A fixed depth (`value`).
    #[default]
    Static,
    /// Learned from non-breaching samples over `window`.
    Rolling,
}

/// Baseline of the backlog ratio (`spec.monitoring.baseline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct BaselineSpec {
    /// `Static` or `Rolling`.
    #[serde(default)]
    pub mode: BaselineMode,
    /// Static baseline depth (messages; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub value: Option<u64>,
    /// Rolling window (default `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
}

impl Default for BaselineSpec {
    fn default() -> Self {
        BaselineSpec {
            mode: BaselineMode::Static,
            value: Some(0),
            window: None,
        }
    }
}

/// Backlog monitoring (`spec.monitoring`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct MonitoringSpec {
    /// Poll interval (default `15s`, at least `100ms`).
    #[serde(default = "default_interval")]
    pub interval: Duration,
    /// Baseline depth.
    #[serde(default)]
    pub baseline: BaselineSpec,
    /// Absolute threshold depth (messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    /// Threshold as a factor of the baseline (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub threshold_factor: Option<f64>,
    /// Smallest allowed `threshold − baseline` (messages; default 1): bounds the ratio's
    /// denominator so it is never zero.
    #[serde(default = "default_min_headroom")]
    #[schemars(range(min = 1))]
    pub min_headroom: u64,
    /// How long the ratio must stay ≥ 1 before the alert fires (default `5m`).
    #[serde(default = "default_for", rename = "for")]
    pub for_: Duration,
    /// Growth rate (messages per minute) that alerts on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub growth_per_minute: Option<f64>,
    /// How long a firing alert keeps firing after the condition stops holding, so a
    /// single dip does not resolve it (like Prometheus' `keep_firing_for`; default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for: Option<Duration>,
}

fn default_interval() -> Duration {
    Duration::new("15s")
}
fn default_min_headroom() -> u64 {
    1
}
fn default_for() -> Duration {
    Duration::new("5m")
}

impl Default for MonitoringSpec {
    fn default() -> Self {
        MonitoringSpec {
            interval: default_interval(),
            baseline: BaselineSpec::default(),
            threshold: None,
            threshold_factor: None,
            min_headroom: default_min_headroom(),
            for_: default_for(),
            growth_per_minute: None,
            keep_firing_for: None,
        }
    }
}

/// Generated alert rules (`spec.alerting`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct AlertingSpec {
    /// The generated `PrometheusRule`.
    #[serde(default)]
    pub prometheus_rule: PrometheusRuleSpec,
}

/// Settings of the generated `PrometheusRule`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct PrometheusRuleSpec {
    /// Generate the rule (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Labels on the PrometheusRule object (e.g. `release: kube-prometheus-stack`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `severity` label of the alerts (default `warning`).
    #[serde(default = "default_severity")]
    pub severity: String,
    /// `runbook_url` annotation of the alerts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runbook_url: Option<String>,
}

fn default_severity() -> String {
    "warning".into()
}

impl Default for PrometheusRuleSpec {
    fn default() -> Self {
        PrometheusRuleSpec {
            enabled: true,
            labels: BTreeMap::new(),
            severity: default_severity(),
            runbook_url: None,
        }
    }
}

/// What deleting the resource does to broker objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Broker objects stay (default).
    #[default]
    Retain,
    /// Operator-owned objects are removed, but never a queue that still holds messages.
    Delete,
}

/// Names of what exists on the broker for this resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyStatus {
    /// Exchanges.
    #[serde(default)]
    pub exchanges: Vec<String>,
    /// Queues.
    #[serde(default)]
    pub queues: Vec<String>,
    /// Operator-owned policies of the plan (with `spec.broker.queueSettings: Arguments`
    /// written only where one is needed).
    #[serde(default)]
    pub policies: Vec<String>,
}

/// Last observed queue depths (messages).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DepthStatus {
    /// Source queue depth.
    pub source: u64,
    /// Depth per retry tier (key: tier, e.g. `5s`).
    #[serde(default)]
    pub retry: BTreeMap<String, u64>,
    /// Dead-letter queue depth (all partitions).
    pub dead_letter: u64,
    /// Router inbox depth (router mode only): failed messages waiting for the retry
    /// router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<u64>,
}

impl DepthStatus {
    /// Whether a message waits in one of the retry tiers.
    pub fn retries_waiting(&self) -> bool {
        self.retry.values().any(|&n| n > 0)
    }
}

/// Observed state of a DeadLetterQueue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterQueueStatus {
    /// `Ready`, `TopologyReady`, `BacklogHigh`, `AlertRulesReady`, and in router mode
    /// `RouterReady`. A map list keyed by `type` (`x-kubernetes-list-type: map`), so that
    /// the reconcile and the backlog monitor, two field managers, each own their own
    /// conditions under server-side apply.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Generation the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Broker objects in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyStatus>,
    /// Retry tiers in place, as canonical durations (e.g. `5s`, `1m`), from the resolved
    /// RetryPolicy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<String>,
    /// Last observed depths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<DepthStatus>,
    /// Baseline depth (messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// Threshold depth (messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Backlog ratio `(D − B) / max(T − B, minHeadroom)`; 1 is the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_ratio: Option<f64>,
    /// `Inactive`, `Pending` or `Firing`; `Unknown` while the depth cannot be read (the
    /// `BacklogHigh` condition says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_state: Option<String>,
    /// RFC 3339 time since which the ratio has been ≥ 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaching_since: Option<String>,
    /// Dead-letter growth (messages per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_per_minute: Option<f64>,
    /// RFC 3339 time of the last depth observation written to status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<String>,
    /// How far the resource has come in adopting retries and dead-lettering, and what to
    /// do next (docs/ARCHITECTURE.md, "Maturity"). Written by the backlog monitor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maturity: Option<MaturityStatus>,
}

/// The maturity score in status (`status.maturity`; docs/ARCHITECTURE.md, "Maturity"):
/// `score = w_retry·retry + w_dlq·deadLetter + w_monitor·monitoring`, each part the share
/// of its area's items that hold. Figures in 0..1, rounded to 3 decimals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaturityStatus {
    /// The score `M`, 0..1.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub score: f64,
    /// Share of the retry items that hold, 0..1.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub retry: f64,
    /// Share of the dead-letter items that hold, 0..1.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub dead_letter: f64,
    /// Share of the monitoring items that hold, 0..1.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub monitoring: f64,
    /// What to do next: one sentence per item that does not hold, worth most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// RFC 3339 time a message was first seen waiting in a retry tier: from then on
    /// retries count as live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries_seen_time: Option<String>,
    /// The weights the score was computed with (the operator's `--maturity-weights`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<MaturityWeights>,
}

/// The weights of the maturity score's parts (`status.maturity.weights`), each 0..1,
/// summing to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaturityWeights {
    /// Weight of the retry part.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub retry: f64,
    /// Weight of the dead-letter part.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub dead_letter: f64,
    /// Weight of the monitoring part.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub monitoring: f64,
}

/// Condition types written by the backlog monitor (field manager
/// `dlq-operator-monitor`); the reconcile writes the others.
pub const BACKLOG_CONDITIONS: &[&str] = &["BacklogHigh", "BrokerReachable", "RouterReady"];

impl DeadLetterQueueStatus {
    /// The part of the status the reconcile owns: conditions other than
    /// [`BACKLOG_CONDITIONS`], `observedGeneration`, `topology`, `tiers`. The backlog
    /// fields are left out, so a server-side apply of it never overwrites what the
    /// monitor wrote.
    pub fn reconcile_part(&self) -> Self {
        DeadLetterQueueStatus {
            conditions: self
                .conditions
                .iter()
                .filter(|c| !BACKLOG_CONDITIONS.contains(&c.type_.as_str()))
                .cloned()
                .collect(),
            observed_generation: self.observed_generation,
            topology: self.topology.clone(),
            tiers: self.tiers.clone(),
            ..Default::default()
        }
    }

    /// The part of the status the backlog monitor owns: the [`BACKLOG_CONDITIONS`],
    /// `depth`, `baseline`, `threshold`, `backlogRatio`, `alertState`, `breachingSince`,
    /// `growthPerMinute`, `lastObservedTime`, `maturity`.
    pub fn backlog_part(&self) -> Self {
        DeadLetterQueueStatus {
            conditions: self
                .conditions
                .iter()
                .filter(|c| BACKLOG_CONDITIONS.contains(&c.type_.as_str()))
                .cloned()
                .collect(),
            observed_generation: None,
            topology: None,
            tiers: Vec::new(),
            ..self.clone()
        }
    }
}

/// Longest `spec.monitoring.for` / `keepFiringFor` (ms): 365 days.
pub const MAX_ALERT_DURATION_MS: u64 = 365 * 86_400_000;

/// Largest `spec.monitoring.thresholdFactor` (a larger one makes the threshold
/// meaningless, and `f × baseline` must stay finite).
pub const MAX_THRESHOLD_FACTOR: f64 = 1_000_000.0;

/// Smallest `spec.monitoring.interval` (ms): every poll lists every queue of the vhost.
pub const MIN_MONITORING_INTERVAL_MS: u64 = 100;

/// RabbitMQ's limit on queue and exchange names, in bytes (AMQP 0-9-1 short string).
pub const MAX_NAME_BYTES: usize = 255;

impl DeadLetterQueueSpec {
    /// The dead-letter queue's name: `spec.deadLetter.queue`, default `<source>.dlq`.
    pub fn dead_letter_queue_name(&self) -> String {
        self.dead_letter
            .queue
            .clone()
            .unwrap_or_else(|| format!("{}.dlq", self.source.queue))
    }

    /// The dead-letter exchange's name: `spec.deadLetter.exchange`, default
    /// `<source>.dlx`.
    pub fn dead_letter_exchange_name(&self) -> String {
        self.dead_letter
            .exchange
            .clone()
            .unwrap_or_else(|| format!("{}.dlx", self.source.queue))
    }

    /// The retry exchange's name: `<source>.retry` (its tier queues are
    /// `<source>.retry.<tier>`).
    pub fn retry_exchange_name(&self) -> String {
        format!("{}.retry", self.source.queue)
    }

    /// The router inbox's name, `<source>.router`: the queue the source dead-letters into
    /// in router mode, and the fanout exchange consumers may publish failures to.
    pub fn router_inbox_name(&self) -> String {
        format!("{}.router", self.source.queue)
    }

    /// The dead-letter queues: the default one, then with `partitionBy: ErrorClass` one
    /// per error class, `<dead-letter queue>.<class slug>` (e.g. `orders.dlq.timeout`).
    pub fn dead_letter_queue_names(&self) -> Vec<(String, Option<crate::crd::ErrorClass>)> {
        let dlq = self.dead_letter_queue_name();
        let mut names = vec![(dlq.clone(), None)];
        if self.dead_letter.partition_by == PartitionBy::ErrorClass {
            for class in crate::crd::ErrorClass::ALL {
                names.push((format!("{dlq}.{}", class.slug()), Some(class)));
            }
        }
        names
    }
}
