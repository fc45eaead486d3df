//! Broker adapter: applies a [`DesiredTopology`](crate::topology::DesiredTopology) to a
//! message broker, reads queue depths and runs the dead-letter operations
//! (docs/ARCHITECTURE.md, "Broker topology").
//!
//! The seam ([`seam`]): drivers hold a broker as `Arc<dyn BrokerClient>` built by a
//! [`BrokerFactory`] from a [`BrokerConnection`]; nothing outside this module (and the
//! consumer helper, [`crate::client`]) names a RabbitMQ or `lapin` type.
//!
//! - [`BrokerConnection`] ([`connection`]): connection settings read from a Kubernetes
//!   Secret, with credentials kept out of every `Debug`, `Display`, log line and error.
//! - [`BrokerTopology`], [`DeadLetterOps`], [`BrokerClient`], [`BrokerFactory`]: the
//!   seam's traits.
//! - [`ApplyReport`], [`RemovalReport`] ([`report`]): what an apply or removal did, one
//!   [`Action`] per object.
//! - [`QueueDepth`] ([`depth`]): queue depths and the parsers of the depth sources.
//! - [`message`]: a message as broker-neutral code sees it (properties, headers, body).
//! - [`rabbitmq`]: the RabbitMQ implementation (management HTTP API + AMQP 0-9-1 via
//!   `lapin`), with the dead-letter engines in `rabbitmq::dead_letters`.
//! - [`fake`]: an in-memory broker with the same observable rules, for tests.

pub mod connection;
pub mod depth;
mod error;
pub mod fake;
pub mod message;
pub mod rabbitmq;
pub mod report;
pub mod seam;

use std::sync::Arc;

pub use connection::{Addresses, BrokerConnection};
pub use depth::{depths_from_prometheus, depths_from_rows, QueueDepth, QueueDepthRow};
pub use error::BrokerError;
pub use rabbitmq::{QueueLimits, RequestCounts};
pub use report::{Action, ApplyReport, DeleteOutcome, ObjectKind, Outcome, RemovalReport};
pub use seam::{BrokerClient, BrokerFactory, BrokerTopology, DeadLetterOps, QueueCounts};

/// The factory of the production broker, RabbitMQ (`rabbitmq::RabbitMqFactory`): what the
/// `dlq` commands' entry points that take a [`BrokerConnection`] use.
pub fn default_factory() -> Arc<dyn BrokerFactory> {
    Arc::new(rabbitmq::RabbitMqFactory)
}
