//! What an apply or a removal did: one [`Action`] per object.

use std::fmt;

/// Result of [`BrokerTopology::delete_queue_if_empty`](super::BrokerTopology::delete_queue_if_empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The queue was empty and is gone.
    Deleted,
    /// The broker refused: the queue still holds messages (count from the broker's
    /// statistics, at least 1).
    NotEmpty {
        /// Messages left.
        messages: u64,
    },
    /// There was no such queue.
    Absent,
    /// Not deleted: the broker cannot delete this queue only-if-empty (quorum queues on
    /// RabbitMQ 3.x), and any check of ours would race with messages in flight.
    Unsupported {
        /// The broker's reason.
        reason: String,
    },
}

/// Kind of broker object in an [`Action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
    /// A policy.
    Policy,
    /// A binding (name `exchange -> queue [routing key]`).
    Binding,
    /// The ownership records of a DeadLetterQueue's names on the broker (name: how
    /// many), see `rabbitmq::ownership`.
    Ownership,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Exchange => "exchange",
            ObjectKind::Queue => "queue",
            ObjectKind::Policy => "policy",
            ObjectKind::Binding => "binding",
            ObjectKind::Ownership => "ownership records",
        })
    }
}

/// What an apply did (or found) for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Did not exist; created.
    Created,
    /// Existed with other settings; rewritten (policies only: queue arguments are
    /// immutable).
    Updated,
    /// Already as planned; nothing written.
    InPlace,
    /// Exists in a form the operator must not change (e.g. a queue with other
    /// arguments); left untouched, reason given.
    Conflict(String),
    /// Our policy is in place but another policy takes precedence on the queue.
    Shadowed(String),
    /// A setting the spec asks for cannot take effect on a queue declared with it as an
    /// argument (`queueSettings: Arguments`: a number above the argument, which RabbitMQ
    /// applies as the lower of the two); reason and way out given. Nothing is written for
    /// it beyond keeping an existing operator policy in step with the spec.
    Fixed(String),
    /// An obsolete queue still holds messages; unbound and removed once empty.
    Draining(String),
    /// An obsolete queue that the operator unbound but will not delete (reason given,
    /// e.g. the broker cannot delete it only-if-empty); delete it by hand once empty.
    Retained(String),
    /// A dead-letter queue the spec no longer names: unbound from the dead-letter
    /// exchange and kept while it holds dead letters (reason and what to do given).
    Retired(String),
    /// An obsolete object was removed.
    Deleted,
    /// Could not be applied (reason given).
    Failed(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Created => f.write_str("created"),
            Outcome::Updated => f.write_str("updated"),
            Outcome::InPlace => f.write_str("in place"),
            Outcome::Conflict(r) => write!(f, "conflict: {r}"),
            Outcome::Shadowed(r) => write!(f, "shadowed: {r}"),
            Outcome::Fixed(r) => write!(f, "fixed at declaration: {r}"),
            Outcome::Draining(r) => write!(f, "draining: {r}"),
            Outcome::Retained(r) => write!(f, "retained: {r}"),
            Outcome::Retired(r) => write!(f, "retired: {r}"),
            Outcome::Deleted => f.write_str("deleted"),
            Outcome::Failed(r) => write!(f, "failed: {r}"),
        }
    }
}

/// One object of an apply and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Kind of object.
    pub kind: ObjectKind,
    /// Object name (bindings: `exchange -> queue [routing key]`).
    pub name: String,
    /// What happened.
    pub outcome: Outcome,
}

impl fmt::Display for Action {
    /// One human line, e.g. `queue orders.dlq: created`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind, self.name, self.outcome)
    }
}

/// Everything an apply did, in apply order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// One action per object considered.
    pub actions: Vec<Action>,
}

impl ApplyReport {
    /// `true` when no action is [`Outcome::Conflict`], [`Outcome::Shadowed`] or
    /// [`Outcome::Failed`] (draining obsolete queues do not block readiness).
    pub fn is_ready(&self) -> bool {
        !self.actions.iter().any(|a| {
            matches!(
                a.outcome,
                Outcome::Conflict(_)
                    | Outcome::Shadowed(_)
                    | Outcome::Fixed(_)
                    | Outcome::Failed(_)
            )
        })
    }

    /// Number of actions that wrote to the broker (created, updated, deleted).
    pub fn writes(&self) -> usize {
        self.actions
            .iter()
            .filter(|a| {
                matches!(
                    a.outcome,
                    Outcome::Created | Outcome::Updated | Outcome::Deleted
                )
            })
            .count()
    }

    /// Each action whose outcome `want` selects, as its human line.
    pub fn lines(&self, want: fn(&Outcome) -> bool) -> Vec<String> {
        self.actions
            .iter()
            .filter(|a| want(&a.outcome))
            .map(|a| a.to_string())
            .collect()
    }

    /// The first action for `kind`/`name`, if any.
    pub fn find(&self, kind: ObjectKind, name: &str) -> Option<&Action> {
        self.actions
            .iter()
            .find(|a| a.kind == kind && a.name == name)
    }
}

impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.actions.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

/// What [`BrokerTopology::remove`](super::BrokerTopology::remove) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemovalReport {
    /// Objects removed ([`Outcome::Deleted`]) or kept with a reason
    /// ([`Outcome::Retained`]), in removal order.
    pub actions: Vec<Action>,
    /// Why the removal did not happen, one line per queue that still holds messages or
    /// has consumers (e.g. `queue "orders.dlq" holds 3 message(s)`). Empty when done.
    pub blocked: Vec<String>,
}

impl RemovalReport {
    /// `true` when nothing blocked the removal.
    pub fn is_complete(&self) -> bool {
        self.blocked.is_empty()
    }
}

/// Requests made by one client since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GET requests.
    pub reads: u64,
    /// PUT, POST and DELETE requests.
    pub writes: u64,
}
