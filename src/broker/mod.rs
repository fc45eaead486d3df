//! TEMPORARY stub with the adapter's interface; replaced by the real adapter (branch broker).
#![allow(missing_docs, dead_code, unused_variables)]
use std::collections::BTreeMap;
use std::fmt;

use crate::topology::DesiredTopology;

pub mod rabbitmq;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker unreachable at {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("authentication failed at {endpoint} for user {user:?}")]
    AuthFailed { endpoint: String, user: String },
    #[error("not found: {what}")]
    NotFound { what: String },
    #[error("queue {queue}: {reason}")]
    ArgumentConflict { queue: String, reason: String },
    #[error("{method} {path}: HTTP {status}: {reason}")]
    Api {
        method: String,
        path: String,
        status: u16,
        reason: String,
    },
    #[error("secret {secret:?}: key {key:?}: {reason}")]
    InvalidSecret {
        secret: String,
        key: String,
        reason: String,
    },
    #[error("TLS: {reason}")]
    Tls { reason: String },
    #[error("AMQP: {reason}")]
    Amqp { reason: String },
}
impl BrokerError {
    pub fn metric_label(&self) -> &'static str {
        "x"
    }
}
#[derive(Clone, Debug)]
pub struct BrokerConnection;
impl BrokerConnection {
    pub fn from_secret_data(
        secret_name: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, BrokerError> {
        Ok(BrokerConnection)
    }
    pub fn redacted_management_uri(&self) -> String {
        String::new()
    }
    pub fn redacted_amqp_uri(&self) -> String {
        String::new()
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Exchange,
    Queue,
    Policy,
    Binding,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    InPlace,
    Conflict(String),
    Shadowed(String),
    Draining(String),
    Deleted,
    Failed(String),
}
#[derive(Debug, Clone)]
pub struct Action {
    pub kind: ObjectKind,
    pub name: String,
    pub outcome: Outcome,
}
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}: {:?}", self.kind, self.name, self.outcome)
    }
}
#[derive(Debug, Clone, Default)]
pub struct ApplyReport {
    pub actions: Vec<Action>,
}
impl ApplyReport {
    pub fn is_ready(&self) -> bool {
        true
    }
    pub fn writes(&self) -> usize {
        0
    }
}
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub messages: u64,
    pub ready: u64,
    pub unacked: u64,
}
#[allow(async_fn_in_trait)]
pub trait Broker {
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError>;
    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError>;
}
