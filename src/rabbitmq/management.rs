//! Thin client of the RabbitMQ management HTTP API (RabbitMQ docs, "Management Plugin"
//! and "Management HTTP API", `/api/index.html` on any broker).
//!
//! Every request counts as a read (GET) or a write (PUT, POST, DELETE) in
//! [`RequestCounts`], so tests can prove that an idempotent apply writes nothing.
//! Credentials go in a basic-auth header, never in a URL, and never in an error.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::broker::{BrokerConnection, BrokerError, RequestCounts};

/// Timeout of one whole HTTP request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of establishing a TCP (and TLS) connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub use crate::broker::connection::encode_segment;

/// An exchange as listed by `GET /api/exchanges/{vhost}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ExchangeInfo {
    /// Name (`""` is the default exchange).
    pub name: String,
    /// Type (`direct`, `topic`, …).
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// A queue as listed by `GET /api/queues/{vhost}?columns=…`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QueueInfo {
    /// Name.
    pub name: String,
    /// Queue type (`classic`, `quorum`, `stream`).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Declare-time arguments.
    #[serde(default)]
    pub arguments: BTreeMap<String, Value>,
    /// Messages (ready + unacked), from statistics; absent until first collected.
    #[serde(default)]
    pub messages: Option<u64>,
    /// Ready messages, from statistics.
    #[serde(default)]
    pub messages_ready: Option<u64>,
    /// Unacknowledged messages, from statistics.
    #[serde(default)]
    pub messages_unacknowledged: Option<u64>,
    /// Name of the policy that applies, from statistics (lags like the counts).
    #[serde(default)]
    pub policy: Option<String>,
}

/// A policy as listed by `GET /api/policies/{vhost}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PolicyInfo {
    /// Name.
    pub name: String,
    /// Regular expression matched against object names.
    #[serde(default)]
    pub pattern: String,
    /// `queues`, `exchanges`, `all` (and `classic_queues`, `quorum_queues`, `streams`
    /// on newer brokers).
    #[serde(rename = "apply-to", default)]
    pub apply_to: String,
    /// Policy keys.
    #[serde(default)]
    pub definition: BTreeMap<String, Value>,
    /// Priority (highest wins).
    #[serde(default)]
    pub priority: i64,
}

/// A binding as listed by `GET /api/bindings/{vhost}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BindingInfo {
    /// Source exchange.
    pub source: String,
    /// Destination name.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    /// Routing key.
    #[serde(default)]
    pub routing_key: String,
    /// Key identifying the binding in `DELETE /api/bindings/…/{props}`.
    #[serde(default)]
    pub properties_key: String,
}

/// An HTTP answer: status and body text.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// Body text.
    pub body: String,
}

impl Answer {
    /// Whether this is RabbitMQ's answer to credentials it does not accept (unknown user,
    /// wrong password): HTTP 401 with `"error": "not_authorized"` (American spelling) —
    /// RabbitMQ 3.x adds the reason "Login failed", 4.x "Not_Authorized" — or an empty
    /// body. A user it knows but that lacks a permission gets 401 with
    /// `"error": "not_authorised"` (British spelling) and a reason such as "User not
    /// authorised to access virtual host" or "Not management user" (tried on 3.10.8 and
    /// 4.0.5): not an authentication failure.
    pub fn is_login_failure(&self) -> bool {
        if self.status != StatusCode::UNAUTHORIZED {
            return false;
        }
        let body: Option<Value> = serde_json::from_str(&self.body).ok();
        let field = |k: &str| {
            body.as_ref()
                .and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase)
        };
        self.body.trim().is_empty()
            || field("error").as_deref() == Some("not_authorized")
            || field("reason").is_some_and(|r| r.contains("login failed"))
    }

    /// The `reason` field of a JSON error body, or the body itself.
    pub fn reason(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| self.body.chars().take(500).collect())
    }
}

/// Management API client with request counters. With several management addresses in
/// the Secret, each request tries them in order from the one that answered last
/// ([`ManagementClient::send`]).
#[derive(Debug)]
pub struct ManagementClient {
    http: reqwest::Client,
    conn: BrokerConnection,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl ManagementClient {
    /// Builds a client: timeouts ([`REQUEST_TIMEOUT`], [`CONNECT_TIMEOUT`]), the Secret's
    /// `ca.crt` as the only trusted root when set, and `tls.crt`+`tls.key` as client
    /// identity when set.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] for an unusable CA or client certificate/key.
    pub fn new(conn: &BrokerConnection) -> Result<Self, BrokerError> {
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("dlq-operator/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = conn.ca_pem() {
            let certs =
                reqwest::Certificate::from_pem_bundle(ca).map_err(|e| BrokerError::Tls {
                    reason: format!(
                        "secret {:?}: key \"ca.crt\": not a usable PEM certificate bundle: {}",
                        conn.secret_name(),
                        super::failures::error_chain(&e)
                    ),
                })?;
            if certs.is_empty() {
                return Err(BrokerError::Tls {
                    reason: format!(
                        "secret {:?}: key \"ca.crt\": no certificate found",
                        conn.secret_name()
                    ),
                });
            }
            builder = builder.tls_certs_only(certs);
        }
        if let Some((cert, key)) = conn.client_identity_pem() {
            let mut pem = cert.to_vec();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| BrokerError::Tls {
                reason: format!(
                    "secret {:?}: keys \"tls.crt\"/\"tls.key\": not a usable client certificate and key: {}",
                    conn.secret_name(),
                    super::failures::error_chain(&e)
                ),
            })?;
            builder = builder.identity(identity);
        }
        let http = builder.build().map_err(|e| BrokerError::Tls {
            reason: format!(
                "building the HTTP client: {}",
                super::failures::error_chain(&e)
            ),
        })?;
        Ok(ManagementClient {
            http,
            conn: conn.clone(),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    /// Requests made so far.
    pub fn request_counts(&self) -> RequestCounts {
        RequestCounts {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }

    /// The connection settings.
    pub fn connection(&self) -> &BrokerConnection {
        &self.conn
    }

    /// Sends one request to `/api/{path}` (path already percent-encoded) and returns the
    /// answer whatever its status, except 401 which is mapped to
    /// [`BrokerError::AuthFailed`].
    ///
    /// With several management addresses, they are tried in order from the one that
    /// answered last, and the one that answers is kept in use (a warning names the move).
    /// A GET goes to the next address after any transport failure; a write only when it
    /// could not connect (a write that timed out may have been applied: it is not sent
    /// twice, the reconcile repeats it).
    ///
    /// # Errors
    /// [`BrokerError::Unreachable`] (connect failure, timeout; with several addresses, one
    /// error naming every address tried), [`BrokerError::Tls`] (certificate problems),
    /// [`BrokerError::AuthFailed`] (401).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, BrokerError> {
        if method == Method::GET {
            self.reads.fetch_add(1, Ordering::Relaxed);
        } else {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(%method, path, "management API request");
        let addresses = self.conn.management_addresses();
        let mut failures = Vec::new();
        for index in addresses.try_order() {
            let resent = match self.send_to(index, &method, path, body).await {
                Ok(answer) => {
                    if addresses.answered(index).is_some() {
                        tracing::warn!(
                            secret = self.conn.secret_name(),
                            address = %self.conn.redacted_management_uri_at(index),
                            position = %addresses.position(index).trim(),
                            failed = %failures.iter().map(|(i, e): &(usize, BrokerError)| format!("{}: {e}", self.conn.redacted_management_uri_at(*i))).collect::<Vec<_>>().join("; "),
                            "management API: another address of the broker answered"
                        );
                    }
                    return self.checked(answer, &method, path, index);
                }
                Err((e, resendable)) => {
                    failures.push((index, e));
                    resendable
                }
            };
            if !(resent || method == Method::GET) {
                break;
            }
        }
        Err(super::failures::all_failed(
            failures,
            |i| self.conn.redacted_management_uri_at(i),
            addresses.several(),
        ))
    }

    /// One request to management address `index`. The error says whether the request
    /// surely never reached the broker (no connection), so that a write may go to the next
    /// address.
    async fn send_to(
        &self,
        index: usize,
        method: &Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, (BrokerError, bool)> {
        let base = &self.conn.management_addresses().all()[index];
        let url = format!("{}/api/{}", base.as_str().trim_end_matches('/'), path);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .basic_auth(self.conn.username(), Some(self.conn.password()));
        if let Some(b) = body {
            req = req.json(b);
        }
        let failed = |e: reqwest::Error| (self.transport_error(index, &e), e.is_connect());
        let resp = req.send().await.map_err(failed)?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| (self.transport_error(index, &e), false))?;
        Ok(Answer { status, body })
    }

    /// `answer` of management address `index`, or the error of a 401.
    fn checked(
        &self,
        answer: Answer,
        method: &Method,
        path: &str,
        index: usize,
    ) -> Result<Answer, BrokerError> {
        if answer.status == StatusCode::UNAUTHORIZED {
            // RabbitMQ answers 401 both for a failed login and for a user without
            // permission on the vhost or object: only the first is an authentication
            // failure (`Answer::is_login_failure`).
            if answer.is_login_failure() {
                return Err(BrokerError::AuthFailed {
                    endpoint: self.conn.redacted_management_uri_at(index),
                    user: self.conn.username().to_string(),
                });
            }
            return Err(self.api_error(method, path, &answer));
        }
        Ok(answer)
    }

    /// GETs the `rabbitmq_prometheus` plugin's queue depths and consumer counts of
    /// `vhost` in one request
    /// (`{prometheusUri}/metrics/detailed?vhost=…&family=queue_coarse_metrics&family=queue_consumer_count`,
    /// no credentials sent) and parses them ([`crate::broker::depths_from_prometheus`]).
    /// `Ok(None)` when the Secret has no `prometheusUri`.
    ///
    /// # Errors
    /// Transport errors, a non-2xx answer, or an answer that does not parse.
    pub async fn prometheus_depths(
        &self,
        vhost: &str,
    ) -> Result<Option<BTreeMap<String, crate::broker::QueueDepth>>, BrokerError> {
        let Some(base) = self.conn.prometheus_base() else {
            return Ok(None);
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let url = format!(
            "{}/metrics/detailed?vhost={}&family=queue_coarse_metrics&family=queue_consumer_count",
            base.as_str().trim_end_matches('/'),
            encode_segment(vhost)
        );
        let api_error = |status: u16, reason: String| BrokerError::Api {
            method: "GET".into(),
            path: url.clone(),
            status,
            reason,
        };
        // Errors name this endpoint, not the management API's.
        let unreachable = |e: reqwest::Error| BrokerError::Unreachable {
            endpoint: url.clone(),
            reason: self.conn.scrub(&super::failures::error_chain(&e)),
        };
        tracing::debug!(%url, "rabbitmq_prometheus request");
        let resp = self.http.get(&url).send().await.map_err(unreachable)?;
        let status = resp.status();
        let body = resp.text().await.map_err(unreachable)?;
        if !status.is_success() {
            let first: String = body
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect();
            return Err(api_error(status.as_u16(), first));
        }
        crate::broker::depths_from_prometheus(&body, vhost)
            .map(Some)
            .map_err(|e| api_error(status.as_u16(), format!("undecodable answer: {e}")))
    }

    /// GETs `/api/{path}` and decodes the JSON body. `what` names the container for a 404
    /// (e.g. `vhost "/prod"`).
    ///
    /// # Errors
    /// As [`ManagementClient::send`]; [`BrokerError::NotFound`] for 404,
    /// [`BrokerError::Api`] for another non-2xx status or an undecodable body.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<T, BrokerError> {
        let answer = self.send(Method::GET, path, None).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Err(BrokerError::NotFound {
                what: what.to_string(),
            });
        }
        if !answer.status.is_success() {
            return Err(self.api_error(&Method::GET, path, &answer));
        }
        serde_json::from_str(&answer.body).map_err(|e| BrokerError::Api {
            method: "GET".into(),
            path: format!("/api/{path}"),
            status: answer.status.as_u16(),
            reason: format!("undecodable answer: {e}"),
        })
    }

    /// Sends a write and requires a 2xx answer. `queue` names the queue for 400
    /// `inequivalent arg` / `PRECONDITION_FAILED` answers.
    ///
    /// # Errors
    /// As [`ManagementClient::send`]; [`BrokerError::ArgumentConflict`] for inequivalent
    /// arguments, [`BrokerError::Api`] for other non-2xx answers.
    pub async fn write(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        queue: Option<&str>,
    ) -> Result<(), BrokerError> {
        let answer = self.send(method.clone(), path, body).await?;
        if answer.status.is_success() {
            return Ok(());
        }
        let reason = answer.reason();
        if let Some(q) = queue {
            if answer.status == StatusCode::BAD_REQUEST
                && (reason.contains("inequivalent arg") || reason.contains("PRECONDITION_FAILED"))
            {
                return Err(BrokerError::ArgumentConflict {
                    queue: q.to_string(),
                    reason,
                });
            }
        }
        Err(self.api_error(&method, path, &answer))
    }

    /// Builds [`BrokerError::Api`] from an answer.
    pub fn api_error(&self, method: &Method, path: &str, answer: &Answer) -> BrokerError {
        BrokerError::Api {
            method: method.to_string(),
            path: format!("/api/{path}"),
            status: answer.status.as_u16(),
            reason: self.conn.scrub(&answer.reason()),
        }
    }

    /// The error of a request to management address `index` that got no HTTP answer.
    fn transport_error(&self, index: usize, e: &reqwest::Error) -> BrokerError {
        let reason = self.conn.scrub(&super::failures::error_chain(e));
        let lower = reason.to_ascii_lowercase();
        let endpoint = self.conn.redacted_management_uri_at(index);
        if lower.contains("certificate")
            || lower.contains("unknownissuer")
            || lower.contains("tls")
            || lower.contains("handshake")
        {
            BrokerError::Tls {
                reason: format!("{endpoint}: {reason}"),
            }
        } else {
            BrokerError::Unreachable { endpoint, reason }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            body: body.into(),
        }
    }

    #[test]
    fn login_failures_of_3x_and_4x_are_told_apart_from_missing_permissions() {
        // The bodies RabbitMQ 3.10.8 and 4.0.5 answered (docs/ARCHITECTURE.md, "Errors").
        for login in [
            r#"{"error":"not_authorized","reason":"Login failed"}"#,
            r#"{"error":"not_authorized","reason":"Not_Authorized"}"#,
            "",
        ] {
            assert!(answer(401, login).is_login_failure(), "{login}");
        }
        for permission in [
            r#"{"error":"not_authorised","reason":"User not authorised to access virtual host"}"#,
            r#"{"error":"not_authorised","reason":"Not management user"}"#,
            r#"{"error":"not_authorised","reason":"User not authorised to access object"}"#,
        ] {
            assert!(!answer(401, permission).is_login_failure(), "{permission}");
        }
        assert!(!answer(403, r#"{"error":"not_authorized"}"#).is_login_failure());
    }
}
