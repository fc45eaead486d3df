//! Broker adapter: applies a [`DesiredTopology`] to a message broker and reads queue
//! depths (docs/ARCHITECTURE.md, "Broker topology").
//!
//! - [`BrokerConnection`]: connection settings read from a Kubernetes Secret, with
//!   credentials kept out of every `Debug`, `Display`, log line and error.
//! - [`Broker`]: what the reconcile core needs from a broker (apply a plan, read all queue
//!   depths of a vhost in one call, delete a queue only if it is empty).
//! - [`ApplyReport`]: what an apply did, one [`Action`] per object.
//! - [`rabbitmq`]: the RabbitMQ implementation (management HTTP API + AMQP 0-9-1 via
//!   `lapin`).

pub mod rabbitmq;

use std::collections::BTreeMap;
use std::fmt;

use percent_encoding::percent_decode_str;
use url::Url;

use crate::topology::DesiredTopology;

/// Errors of the broker adapter. No variant ever carries a password: endpoints are
/// redacted ([`BrokerConnection::redacted_amqp_uri`]) and reasons are scrubbed.
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

/// Connection settings for one broker, read from a Kubernetes Secret
/// ([`BrokerConnection::from_secret_data`]).
///
/// The password is held privately; `Debug` and the `redacted_*` accessors replace it with
/// `***`.
#[derive(Clone)]
pub struct BrokerConnection {
    secret_name: String,
    /// AMQP URI without userinfo.
    amqp: Url,
    /// Management base URI without userinfo, query or fragment.
    management: Url,
    /// Base URI of the `rabbitmq_prometheus` plugin (`prometheusUri`), if set.
    prometheus: Option<Url>,
    username: String,
    password: String,
    ca_pem: Option<Vec<u8>>,
    client_cert_pem: Option<Vec<u8>>,
    client_key_pem: Option<Vec<u8>>,
}

/// An `http(s)://` base URI from a Secret value: parsed, with a host, without userinfo,
/// query or fragment, and not ending in `suffix` (a path the client appends itself;
/// `hint` says what to give instead). The error is the reason, for
/// [`BrokerError::InvalidSecret`].
fn http_base(value: &str, suffix: &str, hint: &str) -> Result<Url, String> {
    let mut url = Url::parse(value).map_err(|e| format!("not a valid URI ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("not an http(s) URI".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("URI has no host".into());
    }
    strip_userinfo(&mut url);
    url.set_query(None);
    url.set_fragment(None);
    if url.path().trim_end_matches('/').ends_with(suffix) {
        return Err(hint.into());
    }
    Ok(url)
}

/// What to do about a user name or password written raw into a Secret's `uri`.
const RAW_CREDENTIAL_HINT: &str = "a user name or password holding any of @ : / ? # % must be percent-encoded in the URI (@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25), or given in the Secret's `username` and `password` keys instead";

/// Default user name of the AMQP URI specification when a URI carries none
/// (RabbitMQ docs, "URI Specification").
const DEFAULT_USER: &str = "guest";

impl BrokerConnection {
    /// Builds connection settings from a Secret's `data` (values already base64-decoded).
    ///
    /// Keys:
    /// - `uri` (required): `amqp://` or `amqps://` URI (RabbitMQ docs, "URI
    ///   Specification"); its userinfo gives user and password (percent-decoded).
    /// - `managementUri` (required): `http://` or `https://` base URI of the management
    ///   plugin (e.g. `http://rabbitmq:15672`; a path prefix is kept).
    /// - `username`, `password` (optional): override the userinfo of `uri`. Without any
    ///   user, `guest` is used as the URI specification says.
    /// - `prometheusUri` (optional): `http://` or `https://` base URI of the
    ///   `rabbitmq_prometheus` plugin (e.g. `http://rabbitmq:15692`). When set, queue
    ///   depths are read from its `/metrics/detailed?vhost=…&family=queue_coarse_metrics`
    ///   (far cheaper for the broker on large vhosts: docs/ARCHITECTURE.md, "Depth
    ///   collection"); no credentials are sent to it.
    /// - `ca.crt` (optional): PEM CA certificate(s) trusted for both AMQPS and HTTPS.
    /// - `tls.crt` + `tls.key` (optional, both or neither): PEM client certificate and
    ///   PKCS#8 private key.
    ///
    /// # Errors
    /// [`BrokerError::InvalidSecret`] naming the secret and the key: missing required
    /// key, value not UTF-8, unparsable URI (with the advice to percent-encode a raw user
    /// name or password, or to use the `username`/`password` keys), an `@` after the
    /// URI's host (such a credential cut short), wrong scheme, only one of `tls.crt`/`tls.key`,
    /// a PEM key without a PEM block. Values of credentials are never included.
    pub fn from_secret_data(
        secret_name: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, BrokerError> {
        let invalid = |key: &str, reason: &str| BrokerError::InvalidSecret {
            secret: secret_name.to_string(),
            key: key.to_string(),
            reason: reason.to_string(),
        };
        let text = |key: &str| -> Result<Option<String>, BrokerError> {
            match data.get(key) {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes.clone())
                    .map(|s| Some(s.trim().to_string()))
                    .map_err(|_| invalid(key, "value is not UTF-8 text")),
            }
        };
        let required = |key: &str| -> Result<String, BrokerError> {
            match text(key)? {
                Some(s) if !s.is_empty() => Ok(s),
                Some(_) => Err(invalid(key, "value is empty")),
                None => Err(invalid(key, "missing (required)")),
            }
        };

        let uri = required("uri")?;
        let mut amqp = Url::parse(&uri).map_err(|e| {
            // A raw credential with `/ ? #` cuts the authority short (the rest reads as
            // a port, "invalid port number"): say so, as the URI itself is not shown.
            let hint = if uri.contains('@') {
                format!("; {RAW_CREDENTIAL_HINT}")
            } else {
                String::new()
            };
            invalid("uri", &format!("not a valid URI ({e}){hint}"))
        })?;
        if !matches!(amqp.scheme(), "amqp" | "amqps") {
            return Err(invalid("uri", "not an amqp(s) URI"));
        }
        // `amqp://user:12/34@host/` parses, as host `user`, port 12 and path `/34@host/`:
        // an `@` after the authority is a credential cut short, not a vhost to use.
        if [Some(amqp.path()), amqp.query(), amqp.fragment()]
            .into_iter()
            .flatten()
            .any(|part| part.contains('@'))
        {
            return Err(invalid(
                "uri",
                &format!(
                    "an '@' follows the host: the user name or password before it probably holds '/', '?' or '#'; {RAW_CREDENTIAL_HINT} (an '@' in the vhost is written %40)"
                ),
            ));
        }
        if amqp.host_str().is_none_or(str::is_empty) {
            return Err(invalid("uri", "URI has no host"));
        }
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        let uri_user = (!amqp.username().is_empty()).then(|| decode(amqp.username()));
        let uri_password = amqp.password().map(decode);
        strip_userinfo(&mut amqp);

        let management = http_base(
            &required("managementUri")?,
            "/api",
            "give the management plugin's base URI without /api (e.g. http://rabbitmq:15672)",
        )
        .map_err(|reason| invalid("managementUri", &reason))?;

        // Optional: an empty value (what `kubectl apply` leaves of a removed stringData
        // key) means unset.
        let prometheus = match text("prometheusUri")? {
            None => None,
            Some(u) if u.is_empty() => None,
            Some(u) => Some(
                http_base(
                    &u,
                    "/metrics",
                    "give the plugin's base URI without /metrics (e.g. http://rabbitmq:15692)",
                )
                .map_err(|reason| invalid("prometheusUri", &reason))?,
            ),
        };

        let username = match text("username")? {
            Some(u) if !u.is_empty() => u,
            Some(_) => return Err(invalid("username", "value is empty")),
            None => uri_user.unwrap_or_else(|| DEFAULT_USER.to_string()),
        };
        // A password key overrides the URI's; no trimming of credentials beyond the
        // trailing newline that `kubectl create secret --from-file` tends to add.
        let password = match data.get("password") {
            Some(bytes) => String::from_utf8(bytes.clone())
                .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
                .map_err(|_| invalid("password", "value is not UTF-8 text"))?,
            None => uri_password.unwrap_or_else(|| {
                if username == DEFAULT_USER {
                    DEFAULT_USER.to_string()
                } else {
                    String::new()
                }
            }),
        };

        let pem = |key: &str| -> Result<Option<Vec<u8>>, BrokerError> {
            match data.get(key) {
                None => Ok(None),
                Some(bytes) if bytes.is_empty() => Err(invalid(key, "value is empty")),
                Some(bytes) => {
                    if !String::from_utf8_lossy(bytes).contains("-----BEGIN ") {
                        return Err(invalid(key, "not PEM (no -----BEGIN block)"));
                    }
                    Ok(Some(bytes.clone()))
                }
            }
        };
        let ca_pem = pem("ca.crt")?;
        let client_cert_pem = pem("tls.crt")?;
        let client_key_pem = pem("tls.key")?;
        match (&client_cert_pem, &client_key_pem) {
            (Some(_), None) => {
                return Err(invalid(
                    "tls.key",
                    "missing: tls.crt is set, tls.key must be too",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "tls.crt",
                    "missing: tls.key is set, tls.crt must be too",
                ))
            }
            _ => {}
        }

        Ok(BrokerConnection {
            secret_name: secret_name.to_string(),
            amqp,
            management,
            prometheus,
            username,
            password,
            ca_pem,
            client_cert_pem,
            client_key_pem,
        })
    }

    /// Name of the Secret these settings came from.
    pub fn secret_name(&self) -> &str {
        &self.secret_name
    }

    /// The user name (not secret; shown in errors).
    pub fn username(&self) -> &str {
        &self.username
    }

    /// `true` for an `amqps://` URI.
    pub fn amqp_uses_tls(&self) -> bool {
        self.amqp.scheme() == "amqps"
    }

    /// `true` for an `https://` management URI.
    pub fn management_uses_tls(&self) -> bool {
        self.management.scheme() == "https"
    }

    /// The AMQP URI with `user:***@` as userinfo, for logs and errors.
    pub fn redacted_amqp_uri(&self) -> String {
        with_userinfo(&self.amqp, &self.username, "***")
    }

    /// The management base URI with `user:***@` as userinfo, for logs and errors.
    pub fn redacted_management_uri(&self) -> String {
        with_userinfo(&self.management, &self.username, "***")
    }

    /// The `rabbitmq_prometheus` base URI (`prometheusUri`), if set.
    pub fn prometheus_base(&self) -> Option<&Url> {
        self.prometheus.as_ref()
    }

    /// The management base URI without credentials (basic auth is sent as a header).
    pub fn management_base(&self) -> &Url {
        &self.management
    }

    /// PEM CA certificate(s) from `ca.crt`, if set.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }

    /// PEM client certificate and key from `tls.crt` and `tls.key`, if set.
    pub fn client_identity_pem(&self) -> Option<(&[u8], &[u8])> {
        match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(c), Some(k)) => Some((c.as_slice(), k.as_slice())),
            _ => None,
        }
    }

    /// The password, for the transport layers of this module only.
    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// The AMQP URI with the real credentials, for `lapin` only. Never log it.
    pub(crate) fn amqp_uri_with_credentials(&self) -> String {
        with_userinfo(&self.amqp, &self.username, &self.password)
    }

    /// Like [`BrokerConnection::amqp_uri_with_credentials`] with virtual host `vhost`.
    pub(crate) fn amqp_uri_with_credentials_for_vhost(&self, vhost: &str) -> String {
        let mut u = self.amqp.clone();
        u.set_path(&format!("/{}", rabbitmq::management::encode_segment(vhost)));
        with_userinfo(&u, &self.username, &self.password)
    }

    /// Replaces every occurrence of the password (raw and percent-encoded) in `text` by
    /// `***`, as a last line of defence for error messages of third-party libraries.
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.password.is_empty() {
            return text.to_string();
        }
        let encoded: String = percent_encoding::utf8_percent_encode(
            &self.password,
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        text.replace(&self.password, "***").replace(&encoded, "***")
    }
}

fn strip_userinfo(url: &mut Url) {
    // Only fails for URLs that cannot have credentials, which have none to strip.
    let _ = url.set_password(None);
    let _ = url.set_username("");
}

fn with_userinfo(url: &Url, user: &str, password: &str) -> String {
    let mut u = url.clone();
    if u.set_username(user).is_err() || u.set_password(Some(password)).is_err() {
        return url.to_string();
    }
    u.to_string()
}

impl fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("secret", &self.secret_name)
            .field("uri", &self.redacted_amqp_uri())
            .field("management_uri", &self.redacted_management_uri())
            .field("username", &self.username)
            .field("password", &"***")
            .field("ca", &self.ca_pem.is_some())
            .field("client_cert", &self.client_cert_pem.is_some())
            .finish()
    }
}

/// Depth of one queue as reported by the broker's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Ready plus unacknowledged messages.
    pub messages: u64,
    /// Messages ready for delivery.
    pub ready: u64,
    /// Messages delivered but not yet acknowledged.
    pub unacked: u64,
}

/// One row of the depth listing `GET /api/queues/{vhost}?columns=name,messages,
/// messages_ready,messages_unacknowledged` (counts absent until the broker's first
/// statistics collection).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct QueueDepthRow {
    /// Queue name.
    pub name: String,
    /// Ready plus unacknowledged messages.
    #[serde(default)]
    pub messages: Option<u64>,
    /// Ready messages.
    #[serde(default)]
    pub messages_ready: Option<u64>,
    /// Unacknowledged messages.
    #[serde(default)]
    pub messages_unacknowledged: Option<u64>,
}

/// The depths of a depth listing, by queue name (a queue without statistics yet counts
/// 0). Pure: what [`Broker::queue_depths`] does with the management API's answer, and
/// what the collector benchmark measures.
pub fn depths_from_rows(rows: Vec<QueueDepthRow>) -> BTreeMap<String, QueueDepth> {
    rows.into_iter()
        .map(|q| {
            let depth =
                QueueDepth::from_counts(q.messages, q.messages_ready, q.messages_unacknowledged);
            (q.name, depth)
        })
        .collect()
}

/// The families of `rabbitmq_prometheus`'s `queue_coarse_metrics` read for depths.
const PROM_MESSAGES: &str = "rabbitmq_detailed_queue_messages";
const PROM_READY: &str = "rabbitmq_detailed_queue_messages_ready";
const PROM_UNACKED: &str = "rabbitmq_detailed_queue_messages_unacked";

/// The depths of `vhost`'s queues from a `rabbitmq_prometheus` answer to
/// `/metrics/detailed?vhost=…&family=queue_coarse_metrics` (Prometheus text exposition
/// format 0.0.4: `name{label="value",…} value [timestamp]`, label values escaped with
/// `\\`, `\"` and `\n`). Pure. Samples of other vhosts and other families are skipped.
///
/// The general-purpose parser crates were not used: `prometheus-parse` splits label
/// values on `,` and `=` (a queue named `a,b` would be read as `a`, silently giving
/// another queue's depth) and `openmetrics-parser` is LGPL-3.0.
///
/// # Errors
/// A line of one of the three families read that does not parse (quoted, with the line
/// number): a depth is never guessed.
pub fn depths_from_prometheus(
    text: &str,
    vhost: &str,
) -> Result<BTreeMap<String, QueueDepth>, String> {
    #[derive(Default)]
    struct Counts {
        messages: Option<u64>,
        ready: Option<u64>,
        unacked: Option<u64>,
    }
    let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let family = match name {
            PROM_MESSAGES => 0,
            PROM_READY => 1,
            PROM_UNACKED => 2,
            _ => continue,
        };
        let bad = |why: &str| format!("line {}: {why}: {:?}", n + 1, truncate(line, 200));
        let (labels, value) = parse_labels(rest).map_err(|e| bad(&e))?;
        let mut tokens = value.split_whitespace();
        let value = tokens.next().ok_or_else(|| bad("no value"))?;
        // At most a timestamp after the value: anything else means the line was cut
        // (RabbitMQ 3.10 does not escape quotes in queue names).
        match (tokens.next(), tokens.next()) {
            (None, _) => {}
            (Some(ts), None) if ts.parse::<i64>().is_ok() => {}
            _ => return Err(bad("unexpected text after the value")),
        }
        let value: f64 = value.parse().map_err(|_| bad("value is not a number"))?;
        if !(value.is_finite() && value >= 0.0) {
            return Err(bad("value is not a count"));
        }
        for (i, (name, _)) in labels.iter().enumerate() {
            if labels[..i].iter().any(|(other, _)| other == name) {
                return Err(bad(&format!("label {name} twice")));
            }
        }
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        if label("vhost").map(String::as_str) != Some(vhost) {
            continue;
        }
        let queue = label("queue").ok_or_else(|| bad("no queue label"))?;
        let c = counts.entry(queue.clone()).or_default();
        let slot = match family {
            0 => &mut c.messages,
            1 => &mut c.ready,
            _ => &mut c.unacked,
        };
        if slot.is_some() {
            return Err(bad("the same queue twice"));
        }
        *slot = Some(value as u64);
    }
    Ok(counts
        .into_iter()
        .map(|(name, c)| {
            (
                name,
                QueueDepth::from_counts(c.messages, c.ready, c.unacked),
            )
        })
        .collect())
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Label name and value pairs of one sample.
type LabelPairs = Vec<(String, String)>;

/// Parses `a="x",b="y\"z"} rest` (what follows a metric name's `{`) into the label pairs
/// and the text after `}`.
fn parse_labels(s: &str) -> Result<(LabelPairs, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without `=`")?;
        let name = rest[..eq].trim().to_string();
        if name.is_empty() {
            return Err("empty label name".into());
        }
        let mut chars = rest[eq + 1..].char_indices();
        if !matches!(chars.next(), Some((_, '"'))) {
            return Err(format!("label {name} has no quoted value"));
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("escape at end of line".into()),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.ok_or_else(|| format!("label {name}: unterminated value"))?;
        labels.push((name, value));
        rest = &rest[end..];
    }
}

impl QueueDepth {
    /// A depth from the broker's counts, each absent until its statistics exist: ready
    /// and unacknowledged count 0 then, and the total defaults to their sum.
    pub fn from_counts(messages: Option<u64>, ready: Option<u64>, unacked: Option<u64>) -> Self {
        let ready = ready.unwrap_or(0);
        let unacked = unacked.unwrap_or(0);
        QueueDepth {
            messages: messages.unwrap_or(ready + unacked),
            ready,
            unacked,
        }
    }
}

/// Result of [`Broker::delete_queue_if_empty`].
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
                Outcome::Conflict(_) | Outcome::Shadowed(_) | Outcome::Failed(_)
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

/// What the reconcile core needs from a broker.
#[allow(async_fn_in_trait)]
pub trait Broker {
    /// Applies a plan: refuses it when another DeadLetterQueue owns one of its names
    /// (nothing written), records its ownership, declares what is missing, updates
    /// operator-owned policies that differ, reports conflicts without touching the
    /// conflicting objects, drains obsolete retry tiers and retires dead-letter queues
    /// the plan no longer has. Idempotent: a second apply of the same plan writes nothing.
    ///
    /// # Errors
    /// Transport, authentication and vhost errors, [`BrokerError::NameOwned`] for another
    /// owner's name; per-object problems are reported as [`Outcome`]s in the
    /// [`ApplyReport`] instead.
    async fn apply(&self, plan: &DesiredTopology) -> Result<ApplyReport, BrokerError>;

    /// Depths of every queue of `vhost`, by queue name, read in one call.
    ///
    /// # Errors
    /// Transport, authentication and vhost errors.
    async fn queue_depths(&self, vhost: &str) -> Result<BTreeMap<String, QueueDepth>, BrokerError>;

    /// Deletes queue `name` of `vhost` only if it holds no messages; the broker itself
    /// enforces the condition.
    ///
    /// # Errors
    /// Transport, authentication and other API errors.
    async fn delete_queue_if_empty(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<DeleteOutcome, BrokerError>;

    /// Removes the operator-owned objects of `plan` (`deletionPolicy: Delete`,
    /// docs/REFERENCE.md): the operator's policies, the retry and dead-letter exchanges, the retry tier
    /// queues (planned and obsolete ones) and the dead-letter queues. The source queue is
    /// never deleted (only our policy on it is removed).
    ///
    /// Nothing is removed unless every queue to delete is idle: no message (ready or
    /// unacknowledged) and no consumer. Otherwise the report lists why in
    /// [`RemovalReport::blocked`] and the broker is left untouched. A missing vhost means
    /// there is nothing to remove.
    ///
    /// # Errors
    /// Transport, authentication and API errors.
    async fn remove(&self, plan: &DesiredTopology) -> Result<RemovalReport, BrokerError>;
}

/// What [`Broker::remove`] did.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_depths_read_escaped_names_and_only_the_vhost() {
        let text = concat!(
            "# TYPE rabbitmq_detailed_queue_messages_ready gauge\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"orders\"} 3\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"orders,eu\"} 40\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"a\\\"b=c\\\\}\"} 5\n",
            "rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"orders\"} 2\n",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"orders\"} 5\n",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"orders,eu\"} 40\n",
            "rabbitmq_detailed_queue_messages{vhost=\"other\",queue=\"orders\"} 999\n",
            "rabbitmq_detailed_queue_process_reductions_total{vhost=\"/\",queue=\"orders\"} 12345\n",
            "rabbitmq_identity_info{rabbitmq_node=\"rabbit@h\"} 1\n",
        );
        let d = depths_from_prometheus(text, "/").expect("parses");
        assert_eq!(
            d.get("orders"),
            Some(&QueueDepth {
                messages: 5,
                ready: 3,
                unacked: 2
            })
        );
        assert_eq!(
            d.get("orders,eu").map(|q| q.messages),
            Some(40),
            "comma in a name"
        );
        assert_eq!(
            d.get("a\"b=c\\}").map(|q| (q.messages, q.ready)),
            Some((5, 5)),
            "escaped quote and backslash, no total: ready + unacked"
        );
        assert_eq!(d.len(), 3, "the other vhost is left out: {d:?}");
        assert_eq!(
            depths_from_prometheus(text, "other").expect("parses")["orders"].messages,
            999
        );
    }

    #[test]
    fn a_malformed_depth_line_is_an_error_not_a_guess() {
        for line in [
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} lots",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} -1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\"} 1",
            // RabbitMQ 3.10 does not escape label values: a quote in a queue name.
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"x\",queue=\"orders\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"brk9-\"q\\ {{x\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q.dlq\"} 0 a\"} 0",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} 1\nrabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} 0",
        ] {
            let err = depths_from_prometheus(line, "/").expect_err(line);
            assert!(err.starts_with("line "), "{err}");
        }
        // Other families may be anything.
        assert!(depths_from_prometheus("other_metric{x=y} z", "/")
            .expect("ignored")
            .is_empty());
    }

    #[test]
    fn prometheus_uri_is_checked_and_stripped_of_credentials() {
        let data = |p: &str| -> BTreeMap<String, Vec<u8>> {
            [
                ("uri", "amqp://guest:guest@h:5672/%2f"),
                ("managementUri", "http://h:15672"),
                ("prometheusUri", p),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
        };
        let ok =
            BrokerConnection::from_secret_data("s", &data("http://u:pw@h:15692/")).expect("valid");
        assert_eq!(
            ok.prometheus_base().map(Url::as_str),
            Some("http://h:15692/"),
            "no credentials are kept for an unauthenticated endpoint"
        );
        let empty = BrokerConnection::from_secret_data("s", &data("")).expect("empty is unset");
        assert!(empty.prometheus_base().is_none());
        for bad in ["ftp://h:15692", "http://h:15692/metrics", "not a uri"] {
            match BrokerConnection::from_secret_data("s", &data(bad)) {
                Err(BrokerError::InvalidSecret { key, .. }) => assert_eq!(key, "prometheusUri"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
