//! The broker seam (docs/ARCHITECTURE.md, "Modules"): what the drivers and the shared
//! engines need from a message broker, as object-safe traits held as `Arc<dyn …>`, and the
//! values they exchange. No adapter lives here: RabbitMQ is [`crate::rabbitmq`], and the
//! unit tests' in-memory broker is `crate::fake`; drivers choose the factory.
//!
//! - [`BrokerConnection`] ([`connection`]): connection settings read from a Kubernetes
//!   Secret, with credentials kept out of every `Debug`, `Display`, log line and error.
//! - [`BrokerTopology`], [`BrokerClient`], [`BrokerFactory`] ([`seam`]): the seam's traits;
//!   the dead-letter part, [`DeadLetterOps`], is [`crate::dlq::ops`].
//! - [`ApplyReport`], [`RemovalReport`] ([`report`]): what an apply or removal did, one
//!   [`Action`] per object; [`RequestCounts`]: a client's requests.
//! - [`QueueDepth`] ([`depth`]): queue depths and the parsers of the depth sources.
//! - [`message`], [`BrokerError`], [`QueueCounts`], [`QueueLimits`]: the neutral values of
//!   [`crate::wire`], re-exported.

pub mod connection;
pub mod depth;
pub mod report;
pub mod seam;

pub use crate::dlq::DeadLetterOps;
pub use crate::wire::{message, BrokerError, QueueCounts, QueueLimits};
pub use connection::{Addresses, BrokerConnection, RedisConnection};
pub use depth::{depths_from_prometheus, depths_from_rows, QueueDepth, QueueDepthRow};
pub use report::{
    Action, ApplyReport, DeleteOutcome, ObjectKind, Outcome, RemovalReport, RequestCounts,
};
pub use seam::{BrokerClient, BrokerFactory, BrokerTopology};
