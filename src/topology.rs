//! Desired broker topology for one DeadLetterQueue: pure planning from the spec and its
//! resolved RetryPolicy (docs/ARCHITECTURE.md, "Broker topology"). No I/O here; [`crate::broker`] applies the plan.
//!
//! For source queue `Q` the plan is:
//! - `Q.dlx` (direct exchange) → `Q.dlq` bound with routing key `Q` (the explicit
//!   dead-letter routing key), plus with `partitionBy: ErrorClass` one queue per class
//!   (`Q.dlq.timeout` …) bound with its own queue name as routing key.
//! - `Q.retry` (direct exchange) → one queue per tier `Q.retry.<tier>` bound with routing
//!   key `<tier>`; each has a queue-level message TTL and dead-letters back to `Q` through
//!   the default exchange. These arguments never change for a given tier queue, so they
//!   live in the queue's arguments: a retrying message must not be dropped on expiry
//!   because a policy was removed (see docs/ARCHITECTURE.md).
//! - `Q` itself, with only `x-queue-type` in its arguments; dead-letter exchange and
//!   routing key, delivery limit and (quorum) at-least-once dead-lettering are in the
//!   operator's policy `dlq-operator.Q`, which users may change without redeclaring.
//! - Each dead-letter queue: retention (message TTL), max length and overflow in the
//!   policy `dlq-operator.<dlq>`.
//!
//! - In router mode (`spec.router.enabled`): the router inbox `Q.router`, a queue of the
//!   source's type bound to the fanout exchange `Q.router`; the source's policy then
//!   dead-letters into the inbox through the default exchange instead of into `Q.dlx`,
//!   and the inbox's own policy dead-letters into `Q.dlx` (docs/ROUTER.md).
//!
//! Apply order ([`DesiredTopology::steps`]): exchanges; then the whole dead-letter route
//! (each dead-letter queue's policy and queue, then the dead-letter exchange's bindings,
//! then the router inbox); only then the source queue's policy (which points it at the dead-letter exchange) and
//! queue; then the retry tiers and the remaining bindings. A policy goes before its queue
//! (policies may exist before the queues they match), so a new queue has its settings from
//! birth, and an existing source queue is never pointed at a route that is not complete.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use crate::backoff::ResolvedPolicy;
use crate::crd::{DeadLetterQueueSpec, ErrorClass, QueueSettings, QueueType, TopologyStatus};
use crate::duration::format_ms;

/// Prefix of every policy name the operator owns.
pub const POLICY_PREFIX: &str = "dlq-operator.";

/// Kind of a RabbitMQ exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeKind {
    /// Routes by exact routing key.
    Direct,
    /// Routes by routing-key pattern.
    Topic,
    /// Routes to every bound queue.
    Fanout,
    /// Routes by headers.
    Headers,
}

impl ExchangeKind {
    /// The management API's `type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// An exchange the operator declares (durable, not auto-delete, not internal).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExchangePlan {
    /// Exchange name.
    pub name: String,
    /// Exchange type.
    pub kind: ExchangeKind,
}

/// Role of a queue in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum QueueRole {
    /// The work queue.
    Source,
    /// A retry delay queue holding messages for `delay_ms` milliseconds.
    Retry {
        /// Tier delay in milliseconds.
        #[serde(rename = "delayMs")]
        delay_ms: u64,
    },
    /// A dead-letter queue (`class` set for an error-class partition).
    DeadLetter {
        /// Error class of this partition, `None` for the default dead-letter queue.
        class: Option<ErrorClass>,
    },
    /// The router inbox (router mode): the source queue dead-letters into it and the
    /// retry router consumes it.
    Inbox,
}

/// A queue in the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuePlan {
    /// Queue name.
    pub name: String,
    /// What the queue is for.
    #[serde(flatten)]
    pub role: QueueRole,
    /// Queue type (`x-queue-type`; compared with the queue's `type` on the broker).
    pub queue_type: QueueType,
    /// Immutable arguments other than `x-queue-type` (declare-time only).
    pub arguments: BTreeMap<String, Value>,
    /// `false` when the queue must already exist (`source.manage: false`).
    pub declare: bool,
}

impl QueuePlan {
    /// Arguments sent on declare: [`QueuePlan::arguments`] plus `x-queue-type`.
    pub fn declare_arguments(&self) -> BTreeMap<String, Value> {
        let mut args = self.arguments.clone();
        args.insert("x-queue-type".into(), json!(self.queue_type.argument()));
        args
    }
}

/// A binding from an exchange to a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingPlan {
    /// Source exchange.
    pub exchange: String,
    /// Destination queue.
    pub queue: String,
    /// Routing key.
    pub routing_key: String,
}

/// An operator-owned policy for exactly one queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPlan {
    /// Policy name (`dlq-operator.<queue>`).
    pub name: String,
    /// The queue it is for.
    pub queue: String,
    /// Exact-name regular expression (`^<escaped queue>$`).
    pub pattern: String,
    /// Policy priority (RabbitMQ applies only the highest-priority matching policy).
    pub priority: i32,
    /// Policy definition keys (RabbitMQ policy names, e.g. `dead-letter-exchange`).
    pub definition: BTreeMap<String, Value>,
}

/// A retry tier as the consumer helper sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TierRoute {
    /// Delay in milliseconds.
    pub delay_ms: u64,
    /// Canonical tier name (e.g. `5s`), also the routing key on the retry exchange.
    pub name: String,
    /// The tier queue (`Q.retry.<name>`).
    pub queue: String,
}

/// Where a consumer republishes failed messages (used by [`crate::client`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Routes {
    /// Source queue.
    pub source_queue: String,
    /// Retry exchange (`Q.retry`).
    pub retry_exchange: String,
    /// Tiers, shortest first.
    pub tiers: Vec<TierRoute>,
    /// Dead-letter exchange (`Q.dlx`).
    pub dead_letter_exchange: String,
    /// Routing key to the default dead-letter queue (the source queue name).
    pub dead_letter_routing_key: String,
    /// With `partitionBy: ErrorClass`: routing key per class.
    pub partitions: BTreeMap<ErrorClass, String>,
    /// In router mode: the router inbox (queue and exchange of the same name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<String>,
}

impl Routes {
    /// Routing key on the dead-letter exchange for a failure of class `class`.
    pub fn dead_letter_key(&self, class: Option<ErrorClass>) -> &str {
        class
            .and_then(|c| self.partitions.get(&c))
            .map(String::as_str)
            .unwrap_or(&self.dead_letter_routing_key)
    }

    /// The tier route for a tier delay in milliseconds, if planned.
    pub fn tier(&self, delay_ms: u64) -> Option<&TierRoute> {
        self.tiers.iter().find(|t| t.delay_ms == delay_ms)
    }
}

/// Everything one DeadLetterQueue needs on the broker, in apply order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredTopology {
    /// `namespace/name` of the owning resource (for messages and logs).
    pub owner: String,
    /// Virtual host.
    pub vhost: String,
    /// Exchanges to declare.
    pub exchanges: Vec<ExchangePlan>,
    /// Operator-owned policies (applied before queues). Under
    /// [`QueueSettings::Arguments`] these are the settings each queue must have: a queue
    /// the operator declares carries them as arguments, and a policy is written only
    /// where one is needed (docs/ARCHITECTURE.md, "A thousand queues per vhost").
    pub policies: Vec<PolicyPlan>,
    /// Where the settings of the queues the operator declares live
    /// (`spec.broker.queueSettings`; left out of the rendered plan when `Policy`).
    #[serde(skip_serializing_if = "QueueSettings::is_policy")]
    pub queue_settings: QueueSettings,
    /// Queues: dead-letter queues, source, retry tiers.
    pub queues: Vec<QueuePlan>,
    /// Bindings: dead-letter route, retry tiers, source exchange.
    pub bindings: Vec<BindingPlan>,
    /// Existing exchange the source queue is bound to (never declared by the operator).
    pub source_exchange: Option<String>,
    /// Routes for consumers.
    pub routes: Routes,
}

impl DesiredTopology {
    /// Names of the dead-letter queues: the default one and every error-class partition.
    pub fn dead_letter_queues(&self) -> impl Iterator<Item = &str> {
        self.queues
            .iter()
            .filter(|q| matches!(q.role, QueueRole::DeadLetter { .. }))
            .map(|q| q.name.as_str())
    }

    /// Names for `status.topology`.
    pub fn status(&self) -> TopologyStatus {
        TopologyStatus {
            exchanges: self.exchanges.iter().map(|e| e.name.clone()).collect(),
            queues: self.queues.iter().map(|q| q.name.clone()).collect(),
            policies: self.policies.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The distinct `(exchange, queue)` pairs of [`DesiredTopology::bindings`], sorted.
    pub fn binding_pairs(&self) -> Vec<(&str, &str)> {
        let mut pairs: Vec<(&str, &str)> = self
            .bindings
            .iter()
            .map(|b| (b.exchange.as_str(), b.queue.as_str()))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }

    /// Names of retry tier queues of this source queue that the plan no longer wants.
    /// `existing` are the queues on the broker with their declare-time arguments. A queue
    /// counts as one of ours only if it carries a tier's signature — name
    /// `<Q>.retry.<duration>`, `x-message-ttl` equal to that duration, dead-lettering to
    /// the default exchange with routing key `<Q>` — so a user's queue that merely looks
    /// like a tier by name is never touched. They are unbound and deleted only once empty.
    pub fn obsolete_tier_queues<'a>(
        &self,
        existing: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, Value>)>,
    ) -> Vec<String> {
        let prefix = format!("{}.", self.routes.retry_exchange);
        let source = self.routes.source_queue.as_str();
        existing
            .into_iter()
            .filter(|(name, args)| {
                let Some(ttl) = name
                    .strip_prefix(&prefix)
                    .and_then(|tier| crate::duration::parse_ms(tier).ok())
                else {
                    return false;
                };
                args.get("x-message-ttl").and_then(Value::as_u64) == Some(ttl)
                    && args.get("x-dead-letter-exchange").and_then(Value::as_str) == Some("")
                    && args
                        .get("x-dead-letter-routing-key")
                        .and_then(Value::as_str)
                        == Some(source)
                    && !self.queues.iter().any(|q| q.name == *name)
            })
            .map(|(name, _)| name.to_string())
            .collect()
    }
}

/// One broker object to put in place, in apply order (see [`DesiredTopology::steps`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step<'a> {
    /// Declare an exchange.
    Exchange(&'a ExchangePlan),
    /// Write a policy.
    Policy(&'a PolicyPlan),
    /// Declare a queue.
    Queue(&'a QueuePlan),
    /// Create a binding.
    Binding(&'a BindingPlan),
}

impl DesiredTopology {
    /// Every object of the plan exactly once, in the order they must be applied so that
    /// no message is ever dead-lettered into a route that does not exist yet (docs/ARCHITECTURE.md,
    /// "Broker topology": "create the dead-letter route before pointing a queue at it"):
    /// 1. exchanges;
    /// 2. per dead-letter queue: its policy, then the queue;
    /// 3. the dead-letter exchange's bindings;
    /// 4. in router mode the inbox's policy and queue (the source dead-letters into it);
    /// 5. the source queue's policy, then the source queue;
    /// 6. per retry tier: the queue (its dead-letter target, the source queue, exists now);
    /// 7. the remaining bindings (retry tiers, the inbox exchange, then the source
    ///    exchange).
    pub fn steps<'a>(&'a self) -> Vec<Step<'a>> {
        let dlx = self.routes.dead_letter_exchange.as_str();
        let mut steps: Vec<Step<'a>> = self.exchanges.iter().map(Step::Exchange).collect();
        let queues_of = |steps: &mut Vec<Step<'a>>, wanted: fn(&QueueRole) -> bool| {
            for q in self.queues.iter().filter(|q| wanted(&q.role)) {
                steps.extend(
                    self.policies
                        .iter()
                        .filter(|p| p.queue == q.name)
                        .map(Step::Policy),
                );
                steps.push(Step::Queue(q));
            }
        };
        queues_of(&mut steps, |r| matches!(r, QueueRole::DeadLetter { .. }));
        steps.extend(
            self.bindings
                .iter()
                .filter(|b| b.exchange == dlx)
                .map(Step::Binding),
        );
        queues_of(&mut steps, |r| *r == QueueRole::Inbox);
        queues_of(&mut steps, |r| *r == QueueRole::Source);
        queues_of(&mut steps, |r| matches!(r, QueueRole::Retry { .. }));
        steps.extend(
            self.bindings
                .iter()
                .filter(|b| b.exchange != dlx)
                .map(Step::Binding),
        );
        steps
    }
}

/// Name of the operator's policy for `queue`.
pub fn policy_name(queue: &str) -> String {
    format!("{POLICY_PREFIX}{queue}")
}

/// Plans the topology for a validated DeadLetterQueue spec and its resolved policy.
///
/// Takes `owner` (`namespace/name`, for messages), the spec (already validated with
/// [`DeadLetterQueueSpec::validate`]) and the resolved RetryPolicy; returns the desired
/// topology. Pure and deterministic: the same inputs give the same plan.
pub fn plan(owner: &str, spec: &DeadLetterQueueSpec, policy: &ResolvedPolicy) -> DesiredTopology {
    let q = spec.source.queue.as_str();
    let dlx = spec.dead_letter_exchange_name();
    let retry_exchange = spec.retry_exchange_name();
    let dead_letter_queues = spec.dead_letter_queue_names();
    let inbox = spec.router.enabled.then(|| spec.router_inbox_name());
    let mut parts = Parts::default();
    parts.dead_letter_route(spec, &dead_letter_queues, &dlx);
    let source_dead_letter_target = match &inbox {
        Some(inbox) => {
            parts.router_inbox(spec, inbox, &dlx);
            DeadLetterTarget {
                exchange: "",
                routing_key: inbox,
            }
        }
        None => DeadLetterTarget {
            exchange: &dlx,
            routing_key: q,
        },
    };
    parts.source_queue(spec, &source_dead_letter_target);
    let tiers = parts.retry_tiers(spec, &retry_exchange, &policy.tiers_ms);
    parts.source_binding(spec);
    let mut exchanges = vec![
        ExchangePlan {
            name: dlx.clone(),
            kind: ExchangeKind::Direct,
        },
        ExchangePlan {
            name: retry_exchange.clone(),
            kind: ExchangeKind::Direct,
        },
    ];
    if let Some(inbox) = &inbox {
        exchanges.push(ExchangePlan {
            name: inbox.clone(),
            kind: ExchangeKind::Fanout,
        });
    }
    DesiredTopology {
        owner: owner.to_string(),
        vhost: spec.broker.vhost.clone(),
        exchanges,
        policies: parts.policies,
        queue_settings: spec.broker.queue_settings,
        queues: parts.queues,
        bindings: parts.bindings,
        source_exchange: spec.source.exchange.clone(),
        routes: Routes {
            source_queue: q.to_string(),
            retry_exchange,
            tiers,
            dead_letter_exchange: dlx,
            dead_letter_routing_key: q.to_string(),
            partitions: dead_letter_queues
                .iter()
                .filter_map(|(name, class)| class.map(|c| (c, name.clone())))
                .collect(),
            inbox,
        },
    }
}

/// Where the source queue dead-letters to: the dead-letter exchange with the source's
/// name as routing key, or in router mode the inbox through the default exchange.
struct DeadLetterTarget<'a> {
    exchange: &'a str,
    routing_key: &'a str,
}

/// The policies, queues and bindings of a plan as [`plan`] collects them, each list in
/// its final order: dead-letter route first, then the source queue, then the retry tiers
/// (and last the source exchange's binding).
#[derive(Default)]
struct Parts {
    policies: Vec<PolicyPlan>,
    queues: Vec<QueuePlan>,
    bindings: Vec<BindingPlan>,
}

impl Parts {
    /// Each dead-letter queue (default first, then one per class when partitioned) with
    /// its policy (retention as message TTL, max length, overflow) and its binding on the
    /// dead-letter exchange. A partition's routing key is its queue name: unlike a bare
    /// class slug it can never equal the default key (the source queue's name), which
    /// validation keeps distinct from every planned queue name.
    fn dead_letter_route(
        &mut self,
        spec: &DeadLetterQueueSpec,
        dead_letter_queues: &[(String, Option<ErrorClass>)],
        dlx: &str,
    ) {
        // Validated: the retention parses.
        let retention_ms = spec.dead_letter.retention.as_ms().unwrap_or(0);
        for (name, class) in dead_letter_queues {
            let mut def = BTreeMap::new();
            def.insert("message-ttl".to_string(), json!(retention_ms));
            def.insert("max-length".to_string(), json!(spec.dead_letter.max_length));
            def.insert(
                "overflow".to_string(),
                json!(spec.dead_letter.overflow.argument()),
            );
            self.policies.push(exact_policy(spec, name, def));
            self.queues.push(QueuePlan {
                name: name.clone(),
                role: QueueRole::DeadLetter { class: *class },
                queue_type: spec.source.queue_type,
                arguments: BTreeMap::new(),
                declare: true,
            });
            self.bindings.push(BindingPlan {
                exchange: dlx.to_string(),
                queue: name.clone(),
                routing_key: if class.is_some() {
                    name.clone()
                } else {
                    spec.source.queue.clone()
                },
            });
        }
    }

    /// The router inbox (router mode): a queue of the source's type, bound to the fanout
    /// exchange of the same name (where consumers may publish a failure with its class),
    /// with a policy that dead-letters into the dead-letter exchange what the inbox
    /// itself gives up (a quorum inbox's delivery limit), so nothing is ever dropped. The
    /// source reaches the inbox through the default exchange, which is always there.
    fn router_inbox(&mut self, spec: &DeadLetterQueueSpec, inbox: &str, dlx: &str) {
        let def = dead_lettering(
            spec,
            &DeadLetterTarget {
                exchange: dlx,
                routing_key: &spec.source.queue,
            },
        );
        self.policies.push(exact_policy(spec, inbox, def));
        self.queues.push(QueuePlan {
            name: inbox.to_string(),
            role: QueueRole::Inbox,
            queue_type: spec.source.queue_type,
            arguments: BTreeMap::new(),
            declare: true,
        });
        self.bindings.push(BindingPlan {
            exchange: inbox.to_string(),
            queue: inbox.to_string(),
            routing_key: String::new(),
        });
    }

    /// The source queue and its policy: the dead-letter route and, on a quorum queue, the
    /// broker-side delivery limit, at-least-once dead-lettering and `reject-publish`.
    fn source_queue(&mut self, spec: &DeadLetterQueueSpec, target: &DeadLetterTarget<'_>) {
        let q = spec.source.queue.as_str();
        let def = dead_lettering(spec, target);
        self.policies.push(exact_policy(spec, q, def));
        self.queues.push(QueuePlan {
            name: q.to_string(),
            role: QueueRole::Source,
            queue_type: spec.source.queue_type,
            arguments: BTreeMap::new(),
            declare: spec.source.manage,
        });
    }

    /// One queue per tier delay (ms) `<retry exchange>.<tier>`, bound on the retry
    /// exchange with the tier's name; returns the tiers' routes.
    fn retry_tiers(
        &mut self,
        spec: &DeadLetterQueueSpec,
        retry_exchange: &str,
        tiers_ms: &[u64],
    ) -> Vec<TierRoute> {
        let mut tiers = Vec::new();
        for &delay_ms in tiers_ms {
            let tier = format_ms(delay_ms);
            let name = format!("{retry_exchange}.{tier}");
            self.queues.push(QueuePlan {
                name: name.clone(),
                role: QueueRole::Retry { delay_ms },
                queue_type: spec.source.queue_type,
                arguments: tier_arguments(spec, delay_ms),
                declare: true,
            });
            self.bindings.push(BindingPlan {
                exchange: retry_exchange.to_string(),
                queue: name.clone(),
                routing_key: tier.clone(),
            });
            tiers.push(TierRoute {
                delay_ms,
                name: tier,
                queue: name,
            });
        }
        tiers
    }

    /// The binding of the source queue to `spec.source.exchange`, if set (routing key
    /// `spec.source.routingKey`, default the queue's name).
    fn source_binding(&mut self, spec: &DeadLetterQueueSpec) {
        let q = &spec.source.queue;
        if let Some(x) = &spec.source.exchange {
            self.bindings.push(BindingPlan {
                exchange: x.clone(),
                queue: q.clone(),
                routing_key: spec.source.routing_key.clone().unwrap_or_else(|| q.clone()),
            });
        }
    }
}

/// The policy definition of a queue that dead-letters to `target`: dead-letter exchange
/// and routing key and, on a quorum queue, the broker-side delivery limit, at-least-once
/// dead-lettering and `reject-publish` (which at-least-once requires).
fn dead_lettering(
    spec: &DeadLetterQueueSpec,
    target: &DeadLetterTarget<'_>,
) -> BTreeMap<String, Value> {
    let mut def = BTreeMap::new();
    def.insert("dead-letter-exchange".to_string(), json!(target.exchange));
    def.insert(
        "dead-letter-routing-key".to_string(),
        json!(target.routing_key),
    );
    if spec.source.queue_type == QueueType::Quorum {
        def.insert(
            "delivery-limit".to_string(),
            json!(spec.source.delivery_limit),
        );
        def.insert("dead-letter-strategy".to_string(), json!("at-least-once"));
        def.insert("overflow".to_string(), json!("reject-publish"));
    }
    def
}

/// The declare-time arguments of the tier queue of `delay_ms`: the tier's message TTL and
/// dead-lettering back to the source queue through the default exchange (at least once,
/// with `reject-publish`, on quorum queues). They never change for a tier, so they are
/// arguments, not policy: a retrying message is never dropped on expiry because a policy
/// was removed.
fn tier_arguments(spec: &DeadLetterQueueSpec, delay_ms: u64) -> BTreeMap<String, Value> {
    let mut args = BTreeMap::new();
    args.insert("x-message-ttl".to_string(), json!(delay_ms));
    args.insert("x-dead-letter-exchange".to_string(), json!(""));
    args.insert(
        "x-dead-letter-routing-key".to_string(),
        json!(spec.source.queue),
    );
    if spec.source.queue_type == QueueType::Quorum {
        args.insert("x-dead-letter-strategy".to_string(), json!("at-least-once"));
        args.insert("x-overflow".to_string(), json!("reject-publish"));
    }
    args
}

/// The operator's policy for exactly `queue` (pattern `^<escaped queue>$`, the spec's
/// `policyPriority`) with `definition`.
fn exact_policy(
    spec: &DeadLetterQueueSpec,
    queue: &str,
    definition: BTreeMap<String, Value>,
) -> PolicyPlan {
    PolicyPlan {
        name: policy_name(queue),
        queue: queue.to_string(),
        pattern: format!("^{}$", regex::escape(queue)),
        priority: spec.broker.policy_priority,
        definition,
    }
}
