//! A consumer that fails every message, written with the project's client library
//! (`dlq_operator::client::RetryHandler`), to watch one message go through the retry
//! tiers of a DeadLetterQueue and into its dead-letter queue.
//!
//! ```sh
//! dlq-operator apply -f examples/ -f examples/try/          # the topology first
//! cargo run --locked --example retry_demo                   # then this
//! cargo run --locked --example retry_demo -- --name NAME -f DIR_OR_FILE …
//! ```
//!
//! It reads the same manifests as `dlq-operator` (by default `examples/rabbitmq-secret.yaml`
//! and `examples/try/`), plans the DeadLetterQueue `retry-demo` with the library's own
//! planner (`reconcile::prepare`), connects to the broker of its Secret, publishes one order
//! message to the source queue and consumes it. Each delivery is failed with the retryable
//! class `Timeout` and handed to `RetryHandler::handle_failure`, which republishes it to the
//! retry tier its retry count calls for, or, once the RetryPolicy's `maxRetries` are used
//! up, to the dead-letter exchange. Every delivery is printed with its time, its
//! `dlq-retry-count` and what the handler did. It stops once its message is dead-lettered
//! and the dead-letter queue holds it, and exits 1 on any error (nothing published is lost:
//! the handler acks an original only after the broker confirmed its copy).
//!
//! Messages already in the source queue (from an interrupted earlier run) are failed the
//! same way, so they end in the dead-letter queue too.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use dlq_operator::client::headers::FailureState;
use dlq_operator::client::{Outcome, RetryHandler};
use dlq_operator::crd::ErrorClass;
use dlq_operator::manifest::{load_paths, namespace_of};
use dlq_operator::rabbitmq::amqp;
use dlq_operator::reconcile::{prepare, Prepared};
use dlq_operator::topology::DesiredTopology;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

/// The error class every delivery is failed with: transient, so it is retried.
const CLASS: ErrorClass = ErrorClass::Timeout;
/// How long to wait for the next delivery beyond the longest tier, in ms: a message that
/// does not come back by then means the topology is not what the manifests say.
const DELIVERY_SLACK_MS: u64 = 15_000;

/// Command line of the demo.
#[derive(Debug, Parser)]
#[command(about = "Fail one message through every retry tier into the dead-letter queue")]
struct Args {
    /// The DeadLetterQueue (NAME, or NAMESPACE/NAME) in the manifests.
    #[arg(long, default_value = "retry-demo")]
    name: String,
    /// Manifest file or directory (repeatable), as `dlq-operator -f`.
    #[arg(short = 'f', long = "filename", default_values = ["examples/rabbitmq-secret.yaml", "examples/try/"])]
    files: Vec<PathBuf>,
}

/// What can stop the demo; each is printed as one line and the demo exits 1.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    /// A manifest could not be read or is invalid.
    #[error(transparent)]
    Manifest(#[from] dlq_operator::manifest::ManifestError),
    /// The DeadLetterQueue is not in the manifests.
    #[error("no DeadLetterQueue {0} in the manifests")]
    NotFound(String),
    /// The DeadLetterQueue, its RetryPolicy or its Secret cannot be planned.
    #[error(transparent)]
    Plan(#[from] dlq_operator::reconcile::ReconcileError),
    /// The broker cannot be reached with the Secret's `uri`.
    #[error(transparent)]
    Broker(#[from] dlq_operator::broker::BrokerError),
    /// An AMQP operation failed.
    #[error("{what}: {source}")]
    Amqp {
        /// The operation.
        what: String,
        /// The client's error.
        #[source]
        source: lapin::Error,
    },
    /// The consumer helper could not republish a message (the original was given back).
    #[error(transparent)]
    Client(#[from] dlq_operator::client::ClientError),
    /// No delivery came within the wait.
    #[error("no message came back to {queue} within {waited_ms} ms: is the topology applied (`dlq-operator apply -f examples/ -f examples/try/`)?")]
    Timeout {
        /// The source queue.
        queue: String,
        /// How long was waited, ms.
        waited_ms: u64,
    },
    /// The broker nacked or returned the published order message.
    #[error("the broker did not take the message published to {0}")]
    NotConfirmed(String),
    /// The plan has no dead-letter queue bound for the demo's error class.
    #[error("the plan of {0} routes no dead-letter queue for class {CLASS:?}")]
    NoDeadLetterQueue(String),
    /// The consumer was cancelled by the broker.
    #[error("the consumer of {0} was cancelled by the broker")]
    ConsumerEnded(String),
}

/// Wraps a lapin error with what was being done.
fn amqp_err(what: impl Into<String>) -> impl FnOnce(lapin::Error) -> DemoError {
    let what = what.into();
    move |source| DemoError::Amqp { what, source }
}

/// Reads the manifests and plans the DeadLetterQueue named `name` (`NAME` or
/// `NAMESPACE/NAME`) as `dlq-operator apply` would.
///
/// # Errors
/// [`DemoError::Manifest`], [`DemoError::NotFound`] or [`DemoError::Plan`].
fn plan(args: &Args) -> Result<Prepared, DemoError> {
    let manifests = load_paths(&args.files)?;
    let (want_ns, want_name) = match args.name.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, args.name.as_str()),
    };
    let dlq = manifests
        .dead_letter_queues
        .iter()
        .map(|l| &l.object)
        .find(|d| {
            d.metadata.name.as_deref() == Some(want_name)
                && want_ns.is_none_or(|ns| namespace_of(&d.metadata) == ns)
        })
        .ok_or_else(|| DemoError::NotFound(args.name.clone()))?;
    let ns = namespace_of(&dlq.metadata);
    let policy = manifests.retry_policy(ns, &dlq.spec.retry_policy_ref.name);
    let secret = manifests.secret(ns, &dlq.spec.broker.secret_ref.name);
    Ok(prepare(
        dlq,
        policy.map(|l| &l.object),
        secret.map(|l| &l.object),
    )?)
}

/// Ready messages in `queue` now (AMQP passive declare: no statistics lag).
///
/// # Errors
/// [`DemoError::Amqp`] when the queue does not exist or the channel fails.
async fn ready(channel: &Channel, queue: &str) -> Result<u32, DemoError> {
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(amqp_err(format!(
            "queue {queue} (apply the manifests first: `dlq-operator apply -f examples/ -f examples/try/`)"
        )))?;
    Ok(declared.message_count())
}

/// Publishes one order message to `queue` through the default exchange, with a publisher
/// confirm, and returns its `message_id`.
///
/// # Errors
/// [`DemoError::Amqp`] when the publish fails or is not confirmed.
async fn publish_order(connection: &Connection, queue: &str) -> Result<String, DemoError> {
    let channel = connection
        .create_channel()
        .await
        .map_err(amqp_err("channel"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(amqp_err("confirm.select"))?;
    let id = format!("order-{}", chrono::Utc::now().timestamp_millis());
    let body = format!(r#"{{"orderId":"{id}","amount":42.5,"currency":"EUR"}}"#);
    let properties = BasicProperties::default()
        .with_message_id(id.as_str().into())
        .with_content_type("application/json".into())
        .with_delivery_mode(dlq_operator::client::headers::PERSISTENT);
    let options = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            options,
            body.as_bytes(),
            properties,
        )
        .await
        .map_err(amqp_err("publish"))?
        .await
        .map_err(amqp_err("publisher confirm"))?;
    let acked = confirm.is_ack();
    if !acked || confirm.take_message().is_some() {
        return Err(DemoError::NotConfirmed(queue.to_string()));
    }
    let _ = channel.close(200, "published".into()).await;
    Ok(id)
}

/// One printed line: wall-clock time (UTC), seconds since `start`, then `text`.
fn say(start: Instant, text: &str) {
    let now = chrono::Utc::now().format("%H:%M:%S%.3f");
    println!("{now}  +{:>5.1}s  {text}", start.elapsed().as_secs_f64());
}

/// Fails `delivery` with [`CLASS`] through the handler and prints what it did. Returns
/// whether the message was dead-lettered.
///
/// # Errors
/// [`DemoError::Client`] when the handler could not republish it.
async fn fail(
    handler: &RetryHandler,
    delivery: &Delivery,
    start: Instant,
    ours: bool,
) -> Result<bool, DemoError> {
    let id = delivery
        .properties
        .message_id()
        .as_ref()
        .map_or_else(|| "(no message_id)".to_string(), |s| s.to_string());
    let state = FailureState::from_properties(&delivery.properties);
    let note = if ours {
        ""
    } else {
        " (left from an earlier run)"
    };
    say(
        start,
        &format!(
            "delivery of {id}{note}: dlq-retry-count={}, processing fails with {CLASS:?}",
            state.retry_count
        ),
    );
    let error = "payment service timed out after 5s (simulated)";
    let outcome = handler.handle_failure(delivery, CLASS, error).await?;
    let max = handler.policy().max_retries;
    let routes = handler.routes();
    match outcome {
        Outcome::Retried {
            attempt,
            tier,
            delay_ms,
        } => {
            let queue = routes
                .tiers
                .iter()
                .find(|t| t.name == tier)
                .map_or("?", |t| t.queue.as_str());
            say(start, &format!("  -> retry {attempt} of {max}: waits in tier {tier} (queue {queue}, computed delay {delay_ms} ms)"));
            Ok(false)
        }
        Outcome::DeadLettered { reason } => {
            say(
                start,
                &format!(
                    "  -> dead-lettered to exchange {} with dlq-reason={}",
                    routes.dead_letter_exchange,
                    reason.as_str()
                ),
            );
            Ok(true)
        }
    }
}

/// Consumes the source queue, failing every delivery, until the message `id` is
/// dead-lettered.
///
/// # Errors
/// [`DemoError::Timeout`] when no delivery comes in time, or what [`fail`] and the
/// consumer report.
async fn consume_until_dead_lettered(
    connection: &Connection,
    handler: &RetryHandler,
    id: &str,
    start: Instant,
) -> Result<(), DemoError> {
    let source = handler.routes().source_queue.clone();
    let channel = connection
        .create_channel()
        .await
        .map_err(amqp_err("channel"))?;
    channel
        .basic_qos(1, BasicQosOptions::default())
        .await
        .map_err(amqp_err("basic.qos"))?;
    let mut consumer = channel
        .basic_consume(
            source.as_str().into(),
            "retry-demo".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(amqp_err(format!("consume {source}")))?;
    let longest = handler.policy().tiers_ms.iter().copied().max().unwrap_or(0);
    let wait = Duration::from_millis(longest + DELIVERY_SLACK_MS);
    loop {
        let next = tokio::time::timeout(wait, consumer.next())
            .await
            .map_err(|_| DemoError::Timeout {
                queue: source.clone(),
                waited_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            })?;
        let delivery = match next {
            Some(d) => d.map_err(amqp_err(format!("delivery from {source}")))?,
            None => return Err(DemoError::ConsumerEnded(source)),
        };
        let ours = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str())
            == Some(id);
        if fail(handler, &delivery, start, ours).await? && ours {
            let _ = channel.close(200, "done".into()).await;
            return Ok(());
        }
    }
}

/// Waits until `queue` holds at least one ready message (dead-lettering goes through an
/// exchange; the confirm came before the queue counted it) and returns the count.
///
/// # Errors
/// [`DemoError::Amqp`] when the queue cannot be declared passively.
async fn await_dead_letter(connection: &Connection, queue: &str) -> Result<u32, DemoError> {
    let channel = connection
        .create_channel()
        .await
        .map_err(amqp_err("channel"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = ready(&channel, queue).await?;
        if n > 0 || Instant::now() >= deadline {
            let _ = channel.close(200, "done".into()).await;
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The dead-letter queue a message failed with [`CLASS`] lands in: the queue bound to the
/// dead-letter exchange with the routing key the handler uses for that class.
fn dead_letter_queue(topology: &DesiredTopology) -> Option<String> {
    let routes = &topology.routes;
    let key = routes.dead_letter_key(Some(CLASS));
    topology
        .bindings
        .iter()
        .find(|b| b.exchange == routes.dead_letter_exchange && b.routing_key == key)
        .map(|b| b.queue.clone())
}

/// Plans, connects, publishes, fails the message through every tier and checks the
/// dead-letter queue.
///
/// # Errors
/// Any [`DemoError`].
async fn run(args: Args) -> Result<(), DemoError> {
    let prepared = plan(&args)?;
    let topology = &prepared.topology;
    let routes = topology.routes.clone();
    let tiers: Vec<&str> = routes.tiers.iter().map(|t| t.name.as_str()).collect();
    let dlq = dead_letter_queue(topology)
        .ok_or_else(|| DemoError::NoDeadLetterQueue(prepared.key.clone()))?;
    println!(
        "DeadLetterQueue {}: source queue {}, retry tiers [{}], maxRetries {}, dead letters to {dlq}",
        prepared.key,
        routes.source_queue,
        tiers.join(", "),
        prepared.policy.max_retries,
    );
    let connection = amqp::connect_vhost(&prepared.connection, &topology.vhost).await?;
    let check = connection
        .create_channel()
        .await
        .map_err(amqp_err("channel"))?;
    let before = ready(&check, &routes.source_queue).await?;
    let dead_before = ready(&check, &dlq).await?;
    let _ = check.close(200, "checked".into()).await;
    let handler_channel = connection
        .create_channel()
        .await
        .map_err(amqp_err("channel"))?;
    let handler =
        RetryHandler::new(handler_channel, routes.clone(), prepared.policy.clone()).await?;
    let start = Instant::now();
    let id = publish_order(&connection, &routes.source_queue).await?;
    say(
        start,
        &format!(
            "published {id} to {} ({before} message(s) were already there)",
            routes.source_queue
        ),
    );
    consume_until_dead_lettered(&connection, &handler, &id, start).await?;
    let dead = await_dead_letter(&connection, &dlq).await?;
    say(
        start,
        &format!("{dlq} holds {dead} message(s) ({dead_before} before this run)"),
    );
    let _ = connection.close(200, "demo done".into()).await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
