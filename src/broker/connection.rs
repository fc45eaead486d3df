//! Connection settings of one broker, read from a Kubernetes Secret.

use std::collections::BTreeMap;
use std::fmt;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use url::Url;

use super::BrokerError;
use crate::lock::Locked;

/// Connection settings for one broker, read from a Kubernetes Secret
/// ([`BrokerConnection::from_secret_data`]).
///
/// The password is held privately; `Debug` and the `redacted_*` accessors replace it with
/// `***`.
///
/// `uri` and `managementUri` may each list several addresses of one cluster (as
/// RabbitMQ's own clients take an address list): connections try them in order, starting
/// with the one that answered last ([`Addresses`]), so a node that is down costs one
/// timeout, not one per request.
#[derive(Clone)]
pub struct BrokerConnection {
    secret_name: String,
    /// AMQP URIs without userinfo, in the Secret's order (at least one).
    amqp: Addresses,
    /// Management base URIs without userinfo, query or fragment (at least one).
    management: Addresses,
    /// Base URI of the `rabbitmq_prometheus` plugin (`prometheusUri`), if set.
    prometheus: Option<Url>,
    username: String,
    password: String,
    ca_pem: Option<Vec<u8>>,
    client_cert_pem: Option<Vec<u8>>,
    client_key_pem: Option<Vec<u8>>,
}

/// The most addresses one Secret key may list.
pub const MAX_ADDRESSES: usize = 16;

/// The addresses of one endpoint of a broker (the AMQP URIs, or the management base
/// URIs), in the order the Secret lists them, and which one answered last: shared by
/// every [`BrokerConnection`] of this process with the same list (a Secret is read again
/// at each reconcile), so all its clients move to the next node together and a node that
/// is down costs one timeout, not one per reconcile.
#[derive(Clone)]
pub struct Addresses {
    urls: Vec<Url>,
    in_use: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Which address is in use, per list of addresses (the URIs without credentials): one
/// entry per distinct list a Secret ever gave this process.
type InUseRegistry = std::sync::Mutex<
    std::collections::HashMap<Vec<String>, std::sync::Arc<std::sync::atomic::AtomicUsize>>,
>;

static IN_USE: std::sync::OnceLock<InUseRegistry> = std::sync::OnceLock::new();

impl Addresses {
    fn new(urls: Vec<Url>) -> Self {
        let key: Vec<String> = urls.iter().map(Url::to_string).collect();
        let in_use = IN_USE
            .get_or_init(Default::default)
            .locked()
            .entry(key)
            .or_default()
            .clone();
        Addresses { urls, in_use }
    }

    /// Every address, in the Secret's order.
    pub fn all(&self) -> &[Url] {
        &self.urls
    }

    /// The address in use: the one that answered last (the first before any answered).
    pub fn in_use(&self) -> &Url {
        let i = self.in_use_index();
        &self.urls[i]
    }

    /// Index of [`Addresses::in_use`] in [`Addresses::all`].
    pub fn in_use_index(&self) -> usize {
        self.in_use
            .load(std::sync::atomic::Ordering::Relaxed)
            .min(self.urls.len().saturating_sub(1))
    }

    /// The order to try them in: the one in use first, then the others in the Secret's
    /// order after it, wrapping around (indices into [`Addresses::all`]).
    pub fn try_order(&self) -> Vec<usize> {
        let n = self.urls.len();
        let first = self.in_use_index();
        (0..n).map(|k| (first + k) % n).collect()
    }

    /// Records that address `index` answered; returns the address used before when it
    /// changed (for the log line that says the client moved).
    pub fn answered(&self, index: usize) -> Option<&Url> {
        let before = self
            .in_use
            .swap(index, std::sync::atomic::Ordering::Relaxed);
        (before != index && index < self.urls.len())
            .then(|| &self.urls[before.min(self.urls.len() - 1)])
    }

    /// `true` when the Secret lists more than one address.
    pub fn several(&self) -> bool {
        self.urls.len() > 1
    }

    /// Where address `index` stands in the list, for messages: `""` for a single address,
    /// else `" (address 2 of 3)"`.
    pub fn position(&self, index: usize) -> String {
        if self.several() {
            format!(" (address {} of {})", index + 1, self.urls.len())
        } else {
            String::new()
        }
    }
}

impl PartialEq for Addresses {
    /// The same addresses in the same order (which one is in use does not matter).
    fn eq(&self, other: &Self) -> bool {
        self.urls == other.urls
    }
}

/// The URIs listed in one Secret value: separated by whitespace (one per line) or by a
/// comma before the next URI's scheme (`amqp://a:5672,amqp://b:5672`); a comma elsewhere
/// belongs to the URI (a raw one in a password), except commas ending a piece (`a,,b`,
/// a trailing `,`), which are separators too. Empty pieces are dropped.
fn split_list<'a>(value: &'a str, schemes: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for token in value.split_whitespace() {
        let mut rest = token;
        loop {
            let cut = rest.match_indices(',').map(|(i, _)| i).find(|&i| {
                let after = &rest[i + 1..];
                after.is_empty()
                    || schemes
                        .iter()
                        .any(|s| after.len() >= s.len() && after[..s.len()].eq_ignore_ascii_case(s))
            });
            match cut {
                Some(i) => {
                    out.push(rest[..i].trim_end_matches(','));
                    rest = &rest[i + 1..];
                }
                None => {
                    out.push(rest);
                    break;
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
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
    ///   Specification"); its userinfo gives user and password (percent-decoded). Several
    ///   URIs of one cluster may be listed, one per line or separated by commas (at most
    ///   [`MAX_ADDRESSES`]); they must name the same vhost and carry the same credentials
    ///   (or none).
    /// - `managementUri` (required): `http://` or `https://` base URI of the management
    ///   plugin (e.g. `http://rabbitmq:15672`; a path prefix is kept); a list like `uri`.
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
        let (amqp, uri_user, uri_password) = amqp_uris(&secret)?;
        let management = management_uris(&secret)?;
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
            amqp: Addresses::new(amqp),
            management: Addresses::new(management),
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

    /// `true` when the AMQP URI in use is `amqps://`.
    pub fn amqp_uses_tls(&self) -> bool {
        self.amqp.in_use().scheme() == "amqps"
    }

    /// `true` when the management URI in use is `https://`.
    pub fn management_uses_tls(&self) -> bool {
        self.management.in_use().scheme() == "https"
    }

    /// The AMQP addresses (`uri`), and which one is in use.
    pub fn amqp_addresses(&self) -> &Addresses {
        &self.amqp
    }

    /// The management addresses (`managementUri`), and which one is in use.
    pub fn management_addresses(&self) -> &Addresses {
        &self.management
    }

    /// The AMQP URI in use with `user:***@` as userinfo, for logs and errors.
    pub fn redacted_amqp_uri(&self) -> String {
        self.redacted_amqp_uri_at(self.amqp.in_use_index())
    }

    /// AMQP address `index` of [`BrokerConnection::amqp_addresses`] with `user:***@` as
    /// userinfo.
    pub fn redacted_amqp_uri_at(&self, index: usize) -> String {
        let url = &self.amqp.all()[index.min(self.amqp.all().len() - 1)];
        with_userinfo(url, &self.username, "***")
    }

    /// The management base URI in use with `user:***@` as userinfo, for logs and errors.
    pub fn redacted_management_uri(&self) -> String {
        self.redacted_management_uri_at(self.management.in_use_index())
    }

    /// Every management base URI with `user:***@` as userinfo, joined by `, `: what
    /// identifies the broker of this Secret whichever node is in use (groups of one
    /// listing, one owner per name).
    pub fn redacted_management_uris(&self) -> String {
        (0..self.management.all().len())
            .map(|i| self.redacted_management_uri_at(i))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Management address `index` of [`BrokerConnection::management_addresses`] with
    /// `user:***@` as userinfo.
    pub fn redacted_management_uri_at(&self, index: usize) -> String {
        let url = &self.management.all()[index.min(self.management.all().len() - 1)];
        with_userinfo(url, &self.username, "***")
    }

    /// The `rabbitmq_prometheus` base URI (`prometheusUri`), if set.
    pub fn prometheus_base(&self) -> Option<&Url> {
        self.prometheus.as_ref()
    }

    /// The management base URI in use, without credentials (basic auth is sent as a
    /// header).
    pub fn management_base(&self) -> &Url {
        self.management.in_use()
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

    /// AMQP address `index` with the real credentials, with virtual host `vhost` (`None`:
    /// the URI's own), for `lapin` only. Never log it.
    pub(crate) fn amqp_uri_with_credentials_at(&self, index: usize, vhost: Option<&str>) -> String {
        let mut u = self.amqp.all()[index.min(self.amqp.all().len() - 1)].clone();
        if let Some(vhost) = vhost {
            u.set_path(&format!("/{}", encode_segment(vhost)));
        }
        with_userinfo(&u, &self.username, &self.password)
    }

    /// Every AMQP address with the real credentials and virtual host `vhost`, in order: for
    /// a digest of what a connection depends on (never shown).
    pub(crate) fn amqp_uris_with_credentials_for_vhost(&self, vhost: &str) -> Vec<String> {
        (0..self.amqp.all().len())
            .map(|i| self.amqp_uri_with_credentials_at(i, Some(vhost)))
            .collect()
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

/// The pieces of a Secret value that lists addresses (`key`): at least one, at most
/// [`MAX_ADDRESSES`].
fn listed<'a>(
    secret: &SecretData<'_>,
    key: &str,
    value: &'a str,
    schemes: &[&str],
) -> Result<Vec<&'a str>, BrokerError> {
    let pieces = split_list(value, schemes);
    if pieces.is_empty() {
        return Err(secret.invalid(key, "value is empty"));
    }
    if pieces.len() > MAX_ADDRESSES {
        return Err(secret.invalid(
            key,
            &format!(
                "lists {} addresses; at most {MAX_ADDRESSES} (the nodes of one cluster, or one Service address)",
                pieces.len()
            ),
        ));
    }
    Ok(pieces)
}

/// The reason the URI `url` at `index` cannot be listed after `first`: another scheme. A
/// list is all TLS or all plain, so that a node failing TLS verification (or an attacker
/// making it fail) never sends the credentials to the next address in clear text.
fn other_scheme(first: &Url, url: &Url) -> Option<String> {
    (first.scheme() != url.scheme()).then(|| {
        format!(
            "uses {}:// while the first address uses {}://: every address of a list must use TLS alike (a node failing TLS verification must never be left for one without it)",
            url.scheme(),
            first.scheme()
        )
    })
}

/// `reason` about the address at `index` of `count`, for an error: as it is for a single
/// address, else prefixed with `address 2 of 3: `.
fn about(index: usize, count: usize, reason: &str) -> String {
    if count > 1 {
        format!("address {} of {count}: {reason}", index + 1)
    } else {
        reason.to_string()
    }
}

/// The Secret's `managementUri`: one base URI or several ([`split_list`]).
fn management_uris(secret: &SecretData<'_>) -> Result<Vec<Url>, BrokerError> {
    let value = secret.required("managementUri")?;
    let pieces = listed(secret, "managementUri", &value, &["http://", "https://"])?;
    let mut urls: Vec<Url> = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let url = http_base(
            piece,
            "/api",
            "give the management plugin's base URI without /api (e.g. http://rabbitmq:15672)",
        )
        .map_err(|reason| secret.invalid("managementUri", &about(i, pieces.len(), &reason)))?;
        if let Some(reason) = urls.first().and_then(|first| other_scheme(first, &url)) {
            return Err(secret.invalid("managementUri", &about(i, pieces.len(), &reason)));
        }
        urls.push(url);
    }
    Ok(urls)
}

/// The AMQP URIs of a Secret's `uri` without userinfo, and the user and password their
/// userinfo gave, if any.
type ListedUris = (Vec<Url>, Option<String>, Option<String>);

/// The Secret's `uri`: the AMQP URIs without userinfo, and the user and password of their
/// userinfo (percent-decoded), if any. Several URIs must name the same vhost and carry the
/// same userinfo or none.
fn amqp_uris(secret: &SecretData<'_>) -> Result<ListedUris, BrokerError> {
    let value = secret.required("uri")?;
    let pieces = listed(secret, "uri", &value, &["amqp://", "amqps://"])?;
    let mut urls: Vec<Url> = Vec::new();
    let mut credentials: Option<(Option<String>, Option<String>)> = None;
    for (i, piece) in pieces.iter().enumerate() {
        let (url, user, password) = amqp_uri(piece)
            .map_err(|reason| secret.invalid("uri", &about(i, pieces.len(), &reason)))?;
        if let Some(reason) = urls.first().and_then(|first| other_scheme(first, &url)) {
            return Err(secret.invalid("uri", &about(i, pieces.len(), &reason)));
        }
        if let Some(first) = urls.first() {
            if first.path() != url.path() {
                return Err(secret.invalid(
                    "uri",
                    &about(i, pieces.len(), "names another vhost than the first address: the addresses of `uri` are the nodes of one cluster and must name the same vhost"),
                ));
            }
        }
        if user.is_some() || password.is_some() {
            match &credentials {
                Some(c) if *c != (user.clone(), password.clone()) => {
                    return Err(secret.invalid(
                        "uri",
                        &about(i, pieces.len(), "carries other credentials than an address before it: give one user name and password for the whole cluster (in every URI alike, or in the Secret's `username` and `password` keys)"),
                    ))
                }
                _ => credentials = Some((user, password)),
            }
        }
        urls.push(url);
    }
    let (user, password) = credentials.unwrap_or((None, None));
    Ok((urls, user, password))
}

/// One AMQP URI of the Secret's `uri`: without userinfo, and the user and password of its
/// userinfo (percent-decoded), if any. The error is the reason.
fn amqp_uri(uri: &str) -> Result<(Url, Option<String>, Option<String>), String> {
    let mut amqp = Url::parse(uri).map_err(|e| {
        // A raw credential with `/ ? #` cuts the authority short (the rest reads as
        // a port, "invalid port number"): say so, as the URI itself is not shown.
        let hint = if uri.contains('@') {
            format!("; {RAW_CREDENTIAL_HINT}")
        } else {
            String::new()
        };
        format!("not a valid URI ({e}){hint}")
    })?;
    if matches!(amqp.scheme(), "redis" | "rediss") {
        return Err("a Redis URI on a RabbitMQ DeadLetterQueue: set spec.broker.type: Redis on the DeadLetterQueue (docs/REDIS.md), or give the RabbitMQ amqp(s):// URI".into());
    }
    if !matches!(amqp.scheme(), "amqp" | "amqps") {
        return Err("not an amqp(s) URI".into());
    }
    // `amqp://user:12/34@host/` parses, as host `user`, port 12 and path `/34@host/`:
    // an `@` after the authority is a credential cut short, not a vhost to use.
    if [Some(amqp.path()), amqp.query(), amqp.fragment()]
        .into_iter()
        .flatten()
        .any(|part| part.contains('@'))
    {
        return Err(format!(
            "an '@' follows the host: the user name or password before it probably holds '/', '?' or '#'; {RAW_CREDENTIAL_HINT} (an '@' in the vhost is written %40)"
        ));
    }
    if amqp.host_str().is_none_or(str::is_empty) {
        return Err("URI has no host".into());
    }
    if amqp.path().contains("://") {
        return Err("the vhost part holds another URI: list several addresses separated by commas or new lines, each with the scheme amqp:// or amqps://".into());
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

impl PartialEq for BrokerConnection {
    /// The same settings (which address is in use does not matter).
    fn eq(&self, other: &Self) -> bool {
        self.secret_name == other.secret_name
            && self.amqp == other.amqp
            && self.management == other.management
            && self.prometheus == other.prometheus
            && self.username == other.username
            && self.password == other.password
            && self.ca_pem == other.ca_pem
            && self.client_cert_pem == other.client_cert_pem
            && self.client_key_pem == other.client_key_pem
    }
}

impl fmt::Debug for BrokerConnection {
    /// Every address redacted (not which one is in use: a digest of the settings must not
    /// change when a client moves to another node).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let amqp: Vec<String> = (0..self.amqp.all().len())
            .map(|i| self.redacted_amqp_uri_at(i))
            .collect();
        let management: Vec<String> = (0..self.management.all().len())
            .map(|i| self.redacted_management_uri_at(i))
            .collect();
        f.debug_struct("BrokerConnection")
            .field("secret", &self.secret_name)
            .field("uri", &amqp.join(","))
            .field("management_uri", &management.join(","))
            .field("username", &self.username)
            .field("password", &"***")
            .field("ca", &self.ca_pem.is_some())
            .field("client_cert", &self.client_cert_pem.is_some())
            .finish()
    }
}

/// Characters percent-encoded in a path segment: everything but RFC 3986 unreserved
/// characters, so `/` in a vhost becomes `%2F` (as a URI's vhost path and RabbitMQ's
/// management API require).
/// `.` stays encoded: a vhost named `.` or `..` would otherwise be read as a relative
/// path segment and normalised away by the HTTP client.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'~');

/// Percent-encodes one path segment (vhost, queue, exchange or policy name).
pub fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Connection settings of a Redis deployment (a standalone server or a Redis Cluster's
/// seed nodes), read from a Secret's `uri`: `redis://` or `rediss://` (TLS) URIs with the
/// user, password and database in them (the `redis` crate's URI format), several
/// separated by commas or new lines. `Debug` and [`RedisConnection::redacted`] hide the
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConnection {
    secret_name: String,
    uris: Vec<Url>,
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("secret", &self.secret_name)
            .field("uris", &self.redacted())
            .finish()
    }
}

impl RedisConnection {
    /// Reads `uri` of the Secret `secret_name`'s `data`.
    ///
    /// # Errors
    /// [`BrokerError::InvalidSecret`] naming the Secret and `uri`: missing, empty, not
    /// UTF-8, more than [`MAX_ADDRESSES`] addresses, not a URI, an `amqp(s)://` URI (with
    /// what to set instead), another scheme, no host, TLS and plain addresses mixed.
    pub fn from_secret_data(
        secret_name: &str,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, BrokerError> {
        let secret = SecretData {
            name: secret_name,
            data,
        };
        let value = secret.required("uri")?;
        let pieces = listed(&secret, "uri", &value, &["redis://", "rediss://"])?;
        let mut uris: Vec<Url> = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            let url = redis_uri(piece)
                .map_err(|reason| secret.invalid("uri", &about(i, pieces.len(), &reason)))?;
            if let Some(reason) = uris.first().and_then(|first| other_scheme(first, &url)) {
                return Err(secret.invalid("uri", &about(i, pieces.len(), &reason)));
            }
            uris.push(url);
        }
        Ok(RedisConnection {
            secret_name: secret_name.to_string(),
            uris,
        })
    }

    /// The URIs with their credentials, for the client only: never log or show them.
    pub fn uris_with_credentials(&self) -> Vec<String> {
        self.uris.iter().map(Url::to_string).collect()
    }

    /// The URIs with the password replaced by `***`, comma-separated: for logs and status.
    pub fn redacted(&self) -> String {
        self.uris
            .iter()
            .map(|u| {
                let mut u = u.clone();
                if u.password().is_some() {
                    // A URI with a host always takes a password.
                    let _ = u.set_password(Some("***"));
                }
                u.to_string()
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The Secret's name.
    pub fn secret_name(&self) -> &str {
        &self.secret_name
    }
}

/// One Redis address of a Secret's `uri`, or why it is not one.
fn redis_uri(uri: &str) -> Result<Url, String> {
    let url = Url::parse(uri).map_err(|e| format!("not a valid URI ({e})"))?;
    match url.scheme() {
        "redis" | "rediss" => {}
        "amqp" | "amqps" => return Err("a RabbitMQ URI on a Redis DeadLetterQueue (spec.broker.type: Redis): give the redis:// or rediss:// URI, or remove spec.broker.type for RabbitMQ".into()),
        other => return Err(format!("scheme {other}:// is not redis:// or rediss://")),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("URI has no host".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests;
