//! An in-memory broker for tests: [`FakeBroker`] implements every trait of the broker
//! seam ([`crate::broker::seam`]) with the observable rules of RabbitMQ that the drivers
//! depend on, so a driver, a reconcile or a dead-letter operation can be tested with no
//! broker running.
//!
//! What it holds: virtual hosts with queues (type, arguments, messages with properties,
//! headers and body, consumers), exchanges, bindings and policies, and the ownership
//! records of the DeadLetterQueues (the global parameters of
//! `rabbitmq::ownership`). Everything lives behind one lock; clones share it, so a test
//! keeps a clone to set up and look at the state while a driver holds the client
//! ([`BrokerFactory::client`] hands out clones).
//!
//! Rules kept (its modules `topology` and `dead_letters` say how):
//! - `apply` refuses a plan with a name another owner's record holds (nothing written),
//!   records the names it adopts, declares what is missing, rewrites an operator policy
//!   that differs, reports a queue of another type or with other arguments and an exchange
//!   of another type as conflicts (untouched), a policy of higher or equal priority on the
//!   same queue as shadowing, and unbinds obsolete retry tiers, deleting each once empty.
//!   A second apply of the same plan writes nothing. It keeps every setting in the
//!   operator's policies whatever `spec.broker.queueSettings` says: the arguments layout
//!   and RabbitMQ's rules for combining arguments with policies are tested on the real
//!   broker (tests/queue_settings.rs) and in `rabbitmq::diff`'s unit tests.
//! - `remove` refuses while a queue to delete holds a message or has a consumer, or the
//!   source queue has a consumer, and never touches another owner's names.
//! - Depths are the queues' message counts; `delete_queue_if_empty` refuses a queue with
//!   messages or consumers.
//! - Dead-letter operations use the broker-neutral logic of [`crate::dlq`] (filters,
//!   decisions, routes, the delivery-limit rule) and move messages with publisher-confirm
//!   semantics: a copy is delivered to every queue its route reaches before its original
//!   goes; a refused publish ([`FakeBroker::refuse_publishes`]) or an unroutable one
//!   leaves the original where it was. A message returned to a quorum queue gets one more
//!   `x-delivery-count`; one returned more often than the queue's delivery limit is
//!   dropped ([`FakeBroker::dropped`]), as RabbitMQ drops or dead-letters it.
//!
//! Not modelled: statistics lag, the `rabbitmq_prometheus` source, RabbitMQ 4.x's policy
//! key `delivery-limit: -1`, the drop-head guard of `max-length`, retirement of
//! dead-letter queues the plan no longer names, pacing (`--rate`: the fake does not
//! sleep), and time (a test passes `now_ms`).
//!
//! Failure injection: [`FakeBroker::set_fault`] (every call fails as unreachable or with
//! refused credentials), [`FakeBroker::refuse_publishes`] (the broker nacks publishes
//! routed to a queue).

mod dead_letters;
#[cfg(test)]
mod tests;
mod topology;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::rabbitmq::ownership::{record_name, OwnerRecord};
use super::rabbitmq::{effective_delivery_limit, pattern_matches};
use crate::broker::message::Message;
use crate::broker::{BrokerClient, BrokerConnection, BrokerError, BrokerFactory, QueueLimits};
use crate::dlq::route::{destinations, routing_keys, Binding, ExchangeRoute};
use crate::lock::Locked;

/// The endpoint named in the fake's errors.
pub const ENDPOINT: &str = "fake://broker";

/// A failure every call of the seam meets ([`FakeBroker::set_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The broker cannot be reached: [`BrokerError::Unreachable`].
    Unreachable,
    /// The broker refuses the credentials: [`BrokerError::AuthFailed`].
    AuthFailed,
}

/// A queue of the fake broker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeQueue {
    /// `classic` or `quorum` (`x-queue-type`).
    pub kind: String,
    /// Declare-time arguments (`x-queue-type` included).
    pub arguments: BTreeMap<String, Value>,
    /// Messages, head first.
    pub messages: VecDeque<Message>,
    /// Consumers attached.
    pub consumers: u64,
    /// Messages dropped for being returned more often than the delivery limit.
    pub dropped: u64,
    /// Publishes routed here are refused (nacked): nothing of them is delivered anywhere.
    pub refuse_publishes: bool,
}

/// A policy of the fake broker (RabbitMQ docs, "Policies").
#[derive(Debug, Clone, PartialEq)]
pub struct FakePolicy {
    /// Regular expression over queue names.
    pub pattern: String,
    /// `queues`, `all`, `classic_queues`, `quorum_queues`.
    pub apply_to: String,
    /// Priority: the highest matching policy applies.
    pub priority: i64,
    /// Its keys (`dead-letter-exchange`, `delivery-limit`, …).
    pub definition: BTreeMap<String, Value>,
}

/// A binding of the fake broker: exchange → queue with a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FakeBinding {
    /// The source exchange.
    pub exchange: String,
    /// The destination queue.
    pub queue: String,
    /// The binding key.
    pub routing_key: String,
}

/// One virtual host.
#[derive(Debug, Clone, Default)]
pub struct FakeVhost {
    /// Queues by name.
    pub queues: BTreeMap<String, FakeQueue>,
    /// Exchanges by name, with their type (`direct`, `topic`, `fanout`, `headers`).
    pub exchanges: BTreeMap<String, String>,
    /// Bindings.
    pub bindings: BTreeSet<FakeBinding>,
    /// Policies by name.
    pub policies: BTreeMap<String, FakePolicy>,
}

/// What a publish did ([`FakeBroker::publish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Delivered to these queues, confirmed.
    Routed(BTreeSet<String>),
    /// No queue took it (a `mandatory` publish is returned; confirmed all the same).
    Unroutable,
    /// The broker refused it (a nack): delivered nowhere.
    Refused,
}

/// Everything the fake broker holds.
#[derive(Debug)]
struct State {
    cluster_name: String,
    version: String,
    vhosts: BTreeMap<String, FakeVhost>,
    /// Ownership records by global parameter name.
    records: BTreeMap<String, OwnerRecord>,
    fault: Option<Fault>,
    reads: u64,
    writes: u64,
}

/// The in-memory broker (module doc). Clones share one state.
#[derive(Debug, Clone)]
pub struct FakeBroker {
    state: Arc<Mutex<State>>,
}

impl Default for FakeBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeBroker {
    /// A broker with the vhost `/` and nothing in it, cluster name `fake@localhost`,
    /// RabbitMQ version `3.13.7`.
    pub fn new() -> Self {
        let state = State {
            cluster_name: "fake@localhost".into(),
            version: "3.13.7".into(),
            vhosts: BTreeMap::from([("/".to_string(), FakeVhost::default())]),
            records: BTreeMap::new(),
            fault: None,
            reads: 0,
            writes: 0,
        };
        FakeBroker {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// The state, locked (a panic of another holder does not poison it for tests).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Sets the failure every call of the seam meets (`None`: none).
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.lock().fault = fault;
    }

    /// Sets the cluster name ([`BrokerTopology::cluster_name`](crate::broker::BrokerTopology::cluster_name)).
    pub fn set_cluster_name(&self, name: &str) {
        self.lock().cluster_name = name.to_string();
    }

    /// Sets the RabbitMQ version the delivery-limit rules follow (e.g. `4.0.5`: a quorum
    /// queue without a limit gets 20).
    pub fn set_version(&self, version: &str) {
        self.lock().version = version.to_string();
    }

    /// Adds an empty vhost `name` (no change when it exists).
    pub fn add_vhost(&self, name: &str) {
        self.lock().vhosts.entry(name.to_string()).or_default();
    }

    /// Declares queue `name` of `vhost` (adding the vhost) of type `kind` with `arguments`
    /// (`x-queue-type` is set from `kind`); an existing queue is replaced.
    pub fn declare_queue(
        &self,
        vhost: &str,
        name: &str,
        kind: &str,
        mut arguments: BTreeMap<String, Value>,
    ) {
        arguments.insert("x-queue-type".into(), Value::from(kind));
        let queue = FakeQueue {
            kind: kind.to_string(),
            arguments,
            ..FakeQueue::default()
        };
        let mut s = self.lock();
        let v = s.vhosts.entry(vhost.to_string()).or_default();
        v.queues.insert(name.to_string(), queue);
    }

    /// Declares exchange `name` of `vhost` of type `kind` (adding the vhost).
    pub fn declare_exchange(&self, vhost: &str, name: &str, kind: &str) {
        let mut s = self.lock();
        let v = s.vhosts.entry(vhost.to_string()).or_default();
        v.exchanges.insert(name.to_string(), kind.to_string());
    }

    /// Binds `queue` to `exchange` in `vhost` with `routing_key`.
    pub fn bind(&self, vhost: &str, exchange: &str, queue: &str, routing_key: &str) {
        let mut s = self.lock();
        let v = s.vhosts.entry(vhost.to_string()).or_default();
        v.bindings.insert(FakeBinding {
            exchange: exchange.to_string(),
            queue: queue.to_string(),
            routing_key: routing_key.to_string(),
        });
    }

    /// Writes policy `name` of `vhost`.
    pub fn put_policy(&self, vhost: &str, name: &str, policy: FakePolicy) {
        let mut s = self.lock();
        let v = s.vhosts.entry(vhost.to_string()).or_default();
        v.policies.insert(name.to_string(), policy);
    }

    /// Writes an ownership record (as another DeadLetterQueue's apply would).
    pub fn put_record(&self, record: OwnerRecord) {
        self.lock().records.insert(record.parameter(), record);
    }

    /// The ownership record of object `name` of `kind` (`queue`, `exchange`) in `vhost`.
    pub fn record(&self, vhost: &str, kind: &str, name: &str) -> Option<OwnerRecord> {
        self.lock()
            .records
            .get(&record_name(vhost, kind, name))
            .cloned()
    }

    /// Sets the number of consumers of queue `name` of `vhost` (no change when absent).
    pub fn set_consumers(&self, vhost: &str, name: &str, consumers: u64) {
        if let Some(q) = self.lock().queue_mut(vhost, name) {
            q.consumers = consumers;
        }
    }

    /// Makes the broker nack (`true`) or take (`false`) every publish routed to queue
    /// `name` of `vhost`, as it nacks publishes to a full queue with `overflow:
    /// reject-publish` (no change when the queue is absent).
    pub fn refuse_publishes(&self, vhost: &str, name: &str, refuse: bool) {
        if let Some(q) = self.lock().queue_mut(vhost, name) {
            q.refuse_publishes = refuse;
        }
    }

    /// Publishes `message` to `exchange` (`""`: the default exchange) of `vhost` with
    /// `routing_key` (and the `CC`/`BCC` headers' keys), routed like
    /// [`crate::dlq::route`] resolves routes; a route it cannot resolve (a `headers`
    /// exchange, a missing exchange) reaches no queue.
    pub fn publish(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        message: Message,
    ) -> Published {
        self.lock().publish(vhost, exchange, routing_key, message)
    }

    /// A copy of queue `name` of `vhost`, if it exists.
    pub fn queue(&self, vhost: &str, name: &str) -> Option<FakeQueue> {
        self.lock().vhosts.get(vhost)?.queues.get(name).cloned()
    }

    /// The messages of queue `name` of `vhost`, head first (none when absent).
    pub fn messages(&self, vhost: &str, name: &str) -> Vec<Message> {
        self.queue(vhost, name)
            .map(|q| q.messages.into_iter().collect())
            .unwrap_or_default()
    }

    /// Messages of queue `name` of `vhost` dropped for passing the delivery limit.
    pub fn dropped(&self, vhost: &str, name: &str) -> u64 {
        self.queue(vhost, name).map_or(0, |q| q.dropped)
    }

    /// A copy of vhost `name`, if it exists.
    pub fn vhost(&self, name: &str) -> Option<FakeVhost> {
        self.lock().vhosts.get(name).cloned()
    }
}

impl State {
    /// The error of the injected fault, if any; counts a read.
    fn call(&mut self) -> Result<(), BrokerError> {
        self.reads += 1;
        match self.fault {
            None => Ok(()),
            Some(Fault::Unreachable) => Err(BrokerError::Unreachable {
                endpoint: ENDPOINT.into(),
                reason: "connection refused (injected)".into(),
            }),
            Some(Fault::AuthFailed) => Err(BrokerError::AuthFailed {
                endpoint: ENDPOINT.into(),
                user: "guest".into(),
            }),
        }
    }

    /// Vhost `name`.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] when it does not exist.
    fn vhost(&self, name: &str) -> Result<&FakeVhost, BrokerError> {
        self.vhosts.get(name).ok_or_else(|| BrokerError::NotFound {
            what: format!("vhost {name:?}"),
        })
    }

    /// Vhost `name`, to change.
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] when it does not exist.
    fn vhost_mut(&mut self, name: &str) -> Result<&mut FakeVhost, BrokerError> {
        self.vhosts
            .get_mut(name)
            .ok_or_else(|| BrokerError::NotFound {
                what: format!("vhost {name:?}"),
            })
    }

    fn queue_mut(&mut self, vhost: &str, name: &str) -> Option<&mut FakeQueue> {
        self.vhosts.get_mut(vhost)?.queues.get_mut(name)
    }

    /// Exchange `name` of `vhost` as route data, `None` when absent.
    fn exchange_route(&self, vhost: &str, name: &str) -> Option<ExchangeRoute> {
        let v = self.vhosts.get(vhost)?;
        let kind = v.exchanges.get(name)?;
        let bindings = v
            .bindings
            .iter()
            .filter(|b| b.exchange == name)
            .map(|b| Binding {
                destination: b.queue.clone(),
                destination_type: "queue".into(),
                routing_key: b.routing_key.clone(),
            })
            .collect();
        Some(ExchangeRoute {
            kind: kind.clone(),
            bindings,
        })
    }

    /// The queues a publish to `exchange` with `routing_key` and `message`'s `CC`/`BCC`
    /// reaches (empty when the route cannot be resolved).
    fn route(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        message: &Message,
    ) -> BTreeSet<String> {
        let Ok(keys) = routing_keys(routing_key, message.properties.headers.as_ref()) else {
            return BTreeSet::new();
        };
        let queues = self.vhosts.get(vhost).map(|v| &v.queues);
        let mut out = BTreeSet::new();
        for key in keys {
            let reached = if exchange.is_empty() {
                BTreeSet::from([key])
            } else {
                self.exchange_route(vhost, exchange)
                    .and_then(|x| destinations(&x.kind, &x.bindings, &key).ok())
                    .unwrap_or_default()
            };
            out.extend(
                reached
                    .into_iter()
                    .filter(|q| queues.is_some_and(|qs| qs.contains_key(q))),
            );
        }
        out
    }

    /// [`FakeBroker::publish`].
    fn publish(
        &mut self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        message: Message,
    ) -> Published {
        let reached = self.route(vhost, exchange, routing_key, &message);
        if reached.is_empty() {
            return Published::Unroutable;
        }
        let Some(v) = self.vhosts.get_mut(vhost) else {
            return Published::Unroutable;
        };
        if reached
            .iter()
            .any(|q| v.queues.get(q).is_some_and(|q| q.refuse_publishes))
        {
            return Published::Refused;
        }
        for name in &reached {
            if let Some(q) = v.queues.get_mut(name) {
                q.messages.push_back(message.clone());
            }
        }
        Published::Routed(reached)
    }

    /// [`QueueLimits`] of queue `name` of `vhost`, from its arguments and every policy
    /// that matches it (the smallest limits, like `RabbitMq::queue_limits`).
    ///
    /// # Errors
    /// [`BrokerError::NotFound`] for a missing vhost or queue.
    fn queue_limits(&self, vhost: &str, name: &str) -> Result<QueueLimits, BrokerError> {
        let v = self.vhost(vhost)?;
        let q = v.queues.get(name).ok_or_else(|| BrokerError::NotFound {
            what: format!("queue {name:?} in vhost {vhost:?}"),
        })?;
        let definitions: Vec<&BTreeMap<String, Value>> = v
            .policies
            .values()
            .filter(|p| {
                matches!(
                    p.apply_to.as_str(),
                    "all" | "queues" | "quorum_queues" | "classic_queues"
                )
            })
            .filter(|p| pattern_matches(&p.pattern, name).unwrap_or(true))
            .map(|p| &p.definition)
            .collect();
        let smallest = |arg: &str, key: &str| {
            definitions
                .iter()
                .filter_map(|d| d.get(key).and_then(Value::as_u64))
                .chain(q.arguments.get(arg).and_then(Value::as_u64))
                .min()
        };
        let quorum = q.kind == "quorum";
        let limits: Vec<i64> = definitions
            .iter()
            .filter_map(|d| d.get("delivery-limit").and_then(Value::as_i64))
            .chain(q.arguments.get("x-delivery-limit").and_then(Value::as_i64))
            .collect();
        let delivery_limit = quorum
            .then(|| effective_delivery_limit(&limits, &self.version))
            .flatten();
        let overflow = |o: Option<&Value>| o.and_then(Value::as_str) == Some("drop-head");
        Ok(QueueLimits {
            quorum,
            delivery_limit,
            default_delivery_limit: delivery_limit.is_some() && limits.is_empty(),
            max_length: smallest("x-max-length", "max-length"),
            max_length_bytes: smallest("x-max-length-bytes", "max-length-bytes"),
            drops_head: definitions.iter().any(|d| overflow(d.get("overflow")))
                || overflow(q.arguments.get("x-overflow")),
        })
    }
}

impl BrokerFactory for FakeBroker {
    /// A client sharing this broker's state, whatever `conn` says.
    fn client(&self, _conn: &BrokerConnection) -> Result<Arc<dyn BrokerClient>, BrokerError> {
        Ok(Arc::new(self.clone()))
    }
}
