//! dlq-operator: retry and dead-letter policies for RabbitMQ queues and Redis streams as
//! Kubernetes custom resources. docs/ARCHITECTURE.md is the design the code follows; its "Modules" section
//! draws these layers, each importing only from itself and the layers below
//! (`tests/layers.rs` checks it):
//!
//! - Domain, pure: [`crd`], [`duration`], [`backoff`], [`topology`], [`redis_keys`],
//!   [`monitor`], [`alerts`], [`maturity`], [`manifest`], [`ownership`], [`rbac`],
//!   [`clock`], [`lock`] and the small leaves.
//! - The broker seam: [`wire`] (the values that cross it), [`dlq`] (the dead-letter trait
//!   and the neutral dead-letter logic), [`broker`] (the whole client and its factory).
//! - Adapters: [`rabbitmq`], [`redis`] (and the unit tests' in-memory fake).
//! - Shared engines: [`resolve`], [`reconcile`], [`collector`], [`status`], [`metrics`],
//!   [`serve`], [`router`], [`client`], [`access`].
//! - Drivers: the Kubernetes [`controller`], [`standalone`], [`console`], [`report`] and
//!   the CLI (the binary); no driver imports another.

#![warn(missing_docs)]

pub mod access;
pub mod alerts;
pub mod backoff;
pub mod broker;
pub mod client;
pub mod clock;
pub mod collector;
pub mod compensation;
pub mod console;
pub mod controller;
pub mod crd;
pub mod dlq;
pub mod duration;
pub mod error_class;
#[cfg(test)]
pub mod fake;
pub mod filter;
pub mod lock;
pub mod manifest;
pub mod maturity;
pub mod metrics;
pub mod monitor;
pub mod nesting;
pub mod object;
pub mod ownership;
pub mod printable;
pub mod rabbitmq;
pub mod rbac;
pub mod reconcile;
pub mod redis;
pub mod redis_keys;
pub mod report;
pub mod resolve;
pub mod router;
pub mod serve;
pub mod standalone;
pub mod status;
pub mod topology;
pub mod wire;
