//! Connection settings of one broker, read from a Kubernetes Secret.

use std::collections::BTreeMap;
use std::fmt;

use percent_encoding::percent_decode_str;
use url::Url;

use super::{rabbitmq, BrokerError};

/// Connection settings for one broker, read from a Kubernetes Secret
/// ([`BrokerConnection::from_secret_data`]).
///
/// The password is held privately; `Debug` and the `redacted_*` accessors replace it with
/// `***`.
#[derive(Clone, PartialEq)]
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
        let secret = SecretData {
            name: secret_name,
            data,
        };
        let (amqp, uri_user, uri_password) = amqp_uri(&secret)?;
        let management = http_base(
            &secret.required("managementUri")?,
            "/api",
            "give the management plugin's base URI without /api (e.g. http://rabbitmq:15672)",
        )
        .map_err(|reason| secret.invalid("managementUri", &reason))?;
        // Optional: an empty value (what `kubectl apply` leaves of a removed stringData
        // key) means unset.
        let prometheus = match secret.text("prometheusUri")? {
            None => None,
            Some(u) if u.is_empty() => None,
            Some(u) => Some(
                http_base(
                    &u,
                    "/metrics",
                    "give the plugin's base URI without /metrics (e.g. http://rabbitmq:15692)",
                )
                .map_err(|reason| secret.invalid("prometheusUri", &reason))?,
            ),
        };
        let (username, password) = credentials(&secret, uri_user, uri_password)?;
        let ca_pem = secret.pem("ca.crt")?;
        let client_cert_pem = secret.pem("tls.crt")?;
        let client_key_pem = secret.pem("tls.key")?;
        match (&client_cert_pem, &client_key_pem) {
            (Some(_), None) => {
                return Err(
                    secret.invalid("tls.key", "missing: tls.crt is set, tls.key must be too")
                )
            }
            (None, Some(_)) => {
                return Err(
                    secret.invalid("tls.crt", "missing: tls.key is set, tls.crt must be too")
                )
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

/// A Secret's `data` being read ([`BrokerConnection::from_secret_data`]): its values by
/// key, with errors that name the Secret and the key.
struct SecretData<'a> {
    /// The Secret's name.
    name: &'a str,
    /// Its values, base64-decoded.
    data: &'a BTreeMap<String, Vec<u8>>,
}

impl SecretData<'_> {
    /// [`BrokerError::InvalidSecret`] for `key`, saying `reason`.
    fn invalid(&self, key: &str, reason: &str) -> BrokerError {
        BrokerError::InvalidSecret {
            secret: self.name.to_string(),
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }

    /// The value of `key` as trimmed text, `None` when the key is absent.
    fn text(&self, key: &str) -> Result<Option<String>, BrokerError> {
        match self.data.get(key) {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes.clone())
                .map(|s| Some(s.trim().to_string()))
                .map_err(|_| self.invalid(key, "value is not UTF-8 text")),
        }
    }

    /// The value of `key`, which must be present and not empty.
    fn required(&self, key: &str) -> Result<String, BrokerError> {
        match self.text(key)? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err(self.invalid(key, "value is empty")),
            None => Err(self.invalid(key, "missing (required)")),
        }
    }

    /// The PEM value of `key`, if present: not empty, with a `-----BEGIN` block.
    fn pem(&self, key: &str) -> Result<Option<Vec<u8>>, BrokerError> {
        match self.data.get(key) {
            None => Ok(None),
            Some(bytes) if bytes.is_empty() => Err(self.invalid(key, "value is empty")),
            Some(bytes) => {
                if !String::from_utf8_lossy(bytes).contains("-----BEGIN ") {
                    return Err(self.invalid(key, "not PEM (no -----BEGIN block)"));
                }
                Ok(Some(bytes.clone()))
            }
        }
    }
}

/// The Secret's `uri`: the AMQP URI without userinfo, and the user and password of its
/// userinfo (percent-decoded), if any.
fn amqp_uri(secret: &SecretData<'_>) -> Result<(Url, Option<String>, Option<String>), BrokerError> {
    let uri = secret.required("uri")?;
    let mut amqp = Url::parse(&uri).map_err(|e| {
        // A raw credential with `/ ? #` cuts the authority short (the rest reads as
        // a port, "invalid port number"): say so, as the URI itself is not shown.
        let hint = if uri.contains('@') {
            format!("; {RAW_CREDENTIAL_HINT}")
        } else {
            String::new()
        };
        secret.invalid("uri", &format!("not a valid URI ({e}){hint}"))
    })?;
    if !matches!(amqp.scheme(), "amqp" | "amqps") {
        return Err(secret.invalid("uri", "not an amqp(s) URI"));
    }
    // `amqp://user:12/34@host/` parses, as host `user`, port 12 and path `/34@host/`:
    // an `@` after the authority is a credential cut short, not a vhost to use.
    if [Some(amqp.path()), amqp.query(), amqp.fragment()]
        .into_iter()
        .flatten()
        .any(|part| part.contains('@'))
    {
        return Err(secret.invalid(
            "uri",
            &format!(
                "an '@' follows the host: the user name or password before it probably holds '/', '?' or '#'; {RAW_CREDENTIAL_HINT} (an '@' in the vhost is written %40)"
            ),
        ));
    }
    if amqp.host_str().is_none_or(str::is_empty) {
        return Err(secret.invalid("uri", "URI has no host"));
    }
    let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
    let uri_user = (!amqp.username().is_empty()).then(|| decode(amqp.username()));
    let uri_password = amqp.password().map(decode);
    strip_userinfo(&mut amqp);
    Ok((amqp, uri_user, uri_password))
}

/// The user name and password: the `username` and `password` keys, else the URI's
/// (`uri_user`, `uri_password`), else `guest` (with password `guest` for that user only).
fn credentials(
    secret: &SecretData<'_>,
    uri_user: Option<String>,
    uri_password: Option<String>,
) -> Result<(String, String), BrokerError> {
    let username = match secret.text("username")? {
        Some(u) if !u.is_empty() => u,
        Some(_) => return Err(secret.invalid("username", "value is empty")),
        None => uri_user.unwrap_or_else(|| DEFAULT_USER.to_string()),
    };
    // A password key overrides the URI's; no trimming of credentials beyond the
    // trailing newline that `kubectl create secret --from-file` tends to add.
    let password = match secret.data.get("password") {
        Some(bytes) => String::from_utf8(bytes.clone())
            .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
            .map_err(|_| secret.invalid("password", "value is not UTF-8 text"))?,
        None => uri_password.unwrap_or_else(|| {
            if username == DEFAULT_USER {
                DEFAULT_USER.to_string()
            } else {
                String::new()
            }
        }),
    };
    Ok((username, password))
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

#[cfg(test)]
mod tests {
    use super::*;

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
