//! The one error of every broker operation, whichever adapter runs it.

/// Errors of a broker operation (from any adapter). No variant ever carries a password: endpoints are
/// redacted ([`BrokerConnection::redacted_amqp_uri`](crate::broker::BrokerConnection::redacted_amqp_uri)) and reasons are scrubbed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The broker could not be reached (connection refused, DNS failure, timeout).
    #[error("broker at {endpoint} is unreachable: {reason}")]
    Unreachable {
        /// Redacted endpoint URI.
        endpoint: String,
        /// What failed.
        reason: String,
    },
    /// The broker rejected the credentials (HTTP 401, AMQP `ACCESS_REFUSED`).
    #[error("authentication failed at {endpoint} for user {user:?}: check the user and password of the Secret's `uri`, or its `username` / `password` keys")]
    AuthFailed {
        /// Redacted endpoint URI.
        endpoint: String,
        /// The user name that was refused (never the password).
        user: String,
    },
    /// An object the request needs does not exist (e.g. the virtual host).
    #[error("{what} not found")]
    NotFound {
        /// What is missing, e.g. `vhost "/prod"`.
        what: String,
    },
    /// A queue exists with arguments that differ from the requested ones (RabbitMQ
    /// answers a re-declare with 406 `PRECONDITION_FAILED - inequivalent arg`).
    #[error("queue {queue:?}: inequivalent arguments: {reason}")]
    ArgumentConflict {
        /// Queue name.
        queue: String,
        /// The broker's reason.
        reason: String,
    },
    /// Any other non-success answer of the management HTTP API.
    #[error("{method} {path}: HTTP {status}: {reason}")]
    Api {
        /// HTTP method.
        method: String,
        /// Request path (no credentials, no host).
        path: String,
        /// HTTP status code.
        status: u16,
        /// The `reason` field of the broker's JSON error body (or the body itself).
        reason: String,
    },
    /// The connection Secret is missing a key or a key has an invalid value.
    #[error("secret {secret:?}: key {key:?}: {reason}")]
    InvalidSecret {
        /// Secret name.
        secret: String,
        /// The offending key.
        key: String,
        /// What is wrong (never the value of a credential).
        reason: String,
    },
    /// TLS setup or handshake failed (bad CA, bad client certificate, untrusted server).
    #[error("TLS: {reason}")]
    Tls {
        /// What failed.
        reason: String,
    },
    /// An AMQP 0-9-1 protocol error other than authentication.
    #[error("AMQP: {reason}")]
    Amqp {
        /// What failed.
        reason: String,
    },
    /// Another DeadLetterQueue's ownership record on the broker holds a name the plan
    /// needs (`rabbitmq::ownership`); nothing was written.
    #[error("{field}: {message}")]
    NameOwned {
        /// The DeadLetterQueue field that makes the name (e.g. `spec.source.queue`).
        field: &'static str,
        /// Which object, who owns it, where that is recorded and what to do.
        message: String,
    },
}

impl BrokerError {
    /// A stable snake_case label for metrics (`dlq_operator_reconcile_total{result}` etc.),
    /// one per variant.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BrokerError::Unreachable { .. } => "unreachable",
            BrokerError::AuthFailed { .. } => "auth_failed",
            BrokerError::NotFound { .. } => "not_found",
            BrokerError::ArgumentConflict { .. } => "argument_conflict",
            BrokerError::Api { .. } => "api",
            BrokerError::InvalidSecret { .. } => "invalid_secret",
            BrokerError::Tls { .. } => "tls",
            BrokerError::Amqp { .. } => "amqp",
            BrokerError::NameOwned { .. } => "name_owned",
        }
    }

    /// `true` for errors that may go away by themselves (retry with backoff):
    /// [`BrokerError::Unreachable`] and 5xx [`BrokerError::Api`] answers.
    pub fn is_transient(&self) -> bool {
        match self {
            BrokerError::Unreachable { .. } => true,
            BrokerError::Api { status, .. } => *status >= 500,
            _ => false,
        }
    }
}
