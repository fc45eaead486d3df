//! dlq-operator: retry and dead-letter policies for RabbitMQ queues as Kubernetes custom
//! resources. docs/ARCHITECTURE.md is the design the code follows.
//!
//! Pure cores: [`duration`], [`backoff`], [`topology`], [`monitor`], [`alerts`]. Drivers:
//! [`standalone`] and the Kubernetes [`controller`], thin over the shared [`reconcile`] and
//! [`collector`] cores; [`metrics`] serves both.

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
pub mod report;
pub mod resolve;
pub mod router;
pub mod serve;
pub mod standalone;
pub mod status;
pub mod topology;
pub mod wire;
