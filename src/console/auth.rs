//! Who may use the console, and the checks every request passes: the Host header (DNS
//! rebinding), the session cookie, and on every POST the CSRF token and a same-origin
//! `Origin` / `Sec-Fetch-Site`. Pure, except for the random tokens and the reviews of
//! [`Auth::Kubernetes`].
//!
//! [`Auth`] is the seam for the ways a user is recognised: [`Auth::Token`] (standalone:
//! the random token printed at start; the holder may do everything) and
//! [`Auth::Kubernetes`] (in a cluster: a Kubernetes bearer token, reviewed by
//! TokenReview, and every page and action authorised by SubjectAccessReview per
//! DeadLetterQueue: [`crate::access`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::access::{AccessError, Permission, Reviewer};

/// The session cookie's name.
pub const COOKIE: &str = "dlq_console";

/// How users are recognised.
pub enum Auth {
    /// Standalone: whoever presents this token (printed on stderr at start) once, in
    /// `GET /login?token=…` or the login form, gets a session. The token's SHA-256 is
    /// kept, not the token.
    Token(TokenDigest),
    /// In a cluster: whoever presents a Kubernetes bearer token that a TokenReview
    /// authenticates gets a session; what they may see and do is asked per
    /// DeadLetterQueue by SubjectAccessReview ([`Permission`]).
    Kubernetes(Arc<dyn Reviewer>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token"),
            Auth::Kubernetes(_) => f.write_str("Auth::Kubernetes"),
        }
    }
}

/// The SHA-256 of a secret: compared instead of the secret, so the comparison's time
/// says nothing about the secret's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `secret`.
    pub fn of(secret: &str) -> Self {
        TokenDigest(Sha256::digest(secret.as_bytes()).into())
    }
}

/// A fresh random token: 32 bytes from the OS-seeded thread RNG, as 64 hex digits.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whose a session is.
#[derive(Clone, PartialEq, Eq)]
pub enum Identity {
    /// The holder of the standalone token.
    Local,
    /// A Kubernetes bearer token, kept in memory only (never shown, never logged:
    /// `Debug` prints no byte of it) and reviewed again (answers cached
    /// [`crate::access::CACHE_TTL_S`] s) on every request, so an expired or revoked token
    /// ends the session.
    Bearer(Arc<str>),
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Local => f.write_str("Local"),
            Identity::Bearer(_) => f.write_str("Bearer(…)"),
        }
    }
}

/// What a request needs, checked by [`Auth::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// A valid session only (the index: its rows are filtered by [`Need::View`]).
    Session,
    /// See DeadLetterQueue `(namespace, name)` and its dead letters.
    View(&'a str, &'a str),
    /// Replay, repair or purge its dead letters (needs [`Need::View`] too).
    Act(&'a str, &'a str),
}

/// The answer of [`Auth::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Allowed,
    /// The session's token no longer authenticates anybody (expired, revoked): log in
    /// again.
    LoggedOut,
    /// Authenticated, without the permission (`what`: the RBAC it takes, for the page).
    Denied(String),
}

impl Auth {
    /// Standalone auth with a new random token: the auth and the token (to print once).
    pub fn new_token() -> (Auth, String) {
        let token = random_token();
        (Auth::Token(TokenDigest::of(&token)), token)
    }

    /// The user name and identity `presented` (the login token) identifies, or `None`.
    /// Standalone: the user is `local` (whoever holds the token printed at start); in a
    /// cluster, the user name the TokenReview gives.
    ///
    /// # Errors
    /// [`AccessError`] when the TokenReview could not be made.
    pub async fn login(&self, presented: &str) -> Result<Option<(String, Identity)>, AccessError> {
        match self {
            Auth::Token(digest) => Ok((TokenDigest::of(presented) == *digest)
                .then(|| ("local".to_string(), Identity::Local))),
            Auth::Kubernetes(reviewer) => Ok(reviewer
                .authenticate(presented)
                .await?
                .map(|caller| (caller.username, Identity::Bearer(presented.into())))),
        }
    }

    /// Whether `identity` may do what `need` says: always, for the standalone token;
    /// in a cluster, when its token still authenticates and every SubjectAccessReview
    /// `need` takes allows (Act: View, then Act).
    ///
    /// # Errors
    /// [`AccessError`] when a review could not be made.
    pub async fn check(&self, identity: &Identity, need: Need<'_>) -> Result<Verdict, AccessError> {
        let (Auth::Kubernetes(reviewer), Identity::Bearer(token)) = (self, identity) else {
            return Ok(match (self, identity) {
                (Auth::Token(_), Identity::Local) => Verdict::Allowed,
                _ => Verdict::LoggedOut,
            });
        };
        let Some(caller) = reviewer.authenticate(token).await? else {
            return Ok(Verdict::LoggedOut);
        };
        let view = |ns: &str, name: &str| Permission::View {
            namespace: ns.into(),
            name: name.into(),
        };
        let asks = match need {
            Need::Session => vec![],
            Need::View(ns, name) => vec![view(ns, name)],
            Need::Act(ns, name) => vec![
                view(ns, name),
                Permission::Act {
                    namespace: ns.into(),
                },
            ],
        };
        for permission in asks {
            if !reviewer.allowed(&caller, &permission).await? {
                return Ok(Verdict::Denied(rbac_text(&permission)));
            }
        }
        Ok(Verdict::Allowed)
    }
}

/// The RBAC a refused permission takes, for people.
fn rbac_text(permission: &Permission) -> String {
    match permission {
        Permission::View { namespace, name } => format!(
            "viewing DeadLetterQueue {namespace}/{name} needs get on deadletterqueues.dlqoperator.io in namespace {namespace}"
        ),
        Permission::Act { namespace } => format!(
            "replaying, repairing or purging dead letters in namespace {namespace} needs create on deadletterreplays.dlqoperator.io there"
        ),
    }
}

/// A logged-in user's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who (for the audit log).
    pub user: String,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// Whose it is (for the reviews of every request).
    pub identity: Identity,
}

/// The sessions, by the SHA-256 of their cookie value (the cookie itself is not kept).
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<[u8; 32], Session>>);

impl Sessions {
    /// Opens a session for `user` with `identity`: the cookie value to set.
    pub fn open(&self, user: String, identity: Identity) -> String {
        let id = random_token();
        let session = Session {
            user,
            csrf: random_token(),
            identity,
        };
        self.lock().insert(TokenDigest::of(&id).0, session);
        id
    }

    /// The session of the request's cookie, if any.
    pub fn of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie_value(headers, COOKIE)?;
        self.lock().get(&TokenDigest::of(id).0).cloned()
    }

    /// Ends the session of the request's cookie.
    pub fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie_value(headers, COOKIE) {
            self.lock().remove(&TokenDigest::of(id).0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `Set-Cookie` value of a session: HttpOnly, SameSite=Strict, whole site.
pub fn session_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/")
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The host names a loopback console answers to, with its `port`: `127.0.0.1`,
/// `localhost` and `[::1]`. A browser sends what the user typed, so a page of another
/// site whose name resolves to 127.0.0.1 (DNS rebinding) has its own name here and is
/// refused.
pub fn host_ok(host: Option<&str>, port: u16) -> bool {
    let Some(host) = host else { return false };
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|h| host == format!("{h}:{port}"))
}

/// Whether a POST comes from the console's own pages: `Origin`, when present, must be
/// `http://` + an allowed host ([`host_ok`]); `Sec-Fetch-Site`, when present, must be
/// `same-origin` (or `none`: typed by the user). Clients that send neither (not a
/// browser) still need the CSRF token.
pub fn same_origin(headers: &HeaderMap, port: u16) -> bool {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    let origin_ok = text("origin").is_none_or(|o| {
        o.strip_prefix("http://")
            .is_some_and(|host| host_ok(Some(host), port))
    });
    let site_ok = text("sec-fetch-site").is_none_or(|s| s == "same-origin" || s == "none");
    origin_ok && site_ok
}

/// Which `Host` a console answers to, and so what a same-origin request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hosts {
    /// Standalone: only its loopback names with this port ([`host_ok`], [`same_origin`]).
    Loopback(u16),
    /// In a cluster (behind a Service, a port-forward or an Ingress, under names it cannot
    /// know): any `Host`, and a POST is same-origin when its `Origin` is `http://` or
    /// `https://` + that `Host`. DNS rebinding gains nothing here: the session cookie is
    /// the console's own (SameSite=Strict, never sent to the rebound name) and every
    /// request is reviewed.
    Any,
}

impl Hosts {
    /// Whether a request with this `Host` header is answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        match self {
            Hosts::Loopback(port) => host_ok(host, *port),
            Hosts::Any => host.is_some(),
        }
    }

    /// Whether a POST comes from the console's own pages (see [`same_origin`]).
    pub fn same_origin(&self, headers: &HeaderMap) -> bool {
        match self {
            Hosts::Loopback(port) => same_origin(headers, *port),
            Hosts::Any => same_origin_as_host(headers),
        }
    }
}

/// [`same_origin`] for [`Hosts::Any`]: `Origin`, when present, must be `http://` or
/// `https://` + the request's own `Host`.
pub fn same_origin_as_host(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"));
    let host = text("host");
    let origin_ok = text("origin").is_none_or(|o| {
        let named = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"));
        named.is_some() && named == host
    });
    let site_ok = text("sec-fetch-site").is_none_or(|s| s == "same-origin" || s == "none");
    origin_ok && site_ok
}

/// Whether the CSRF token of a form (`presented`) is the session's.
pub fn csrf_ok(session: &Session, presented: Option<&str>) -> bool {
    presented.is_some_and(|p| TokenDigest::of(p) == TokenDigest::of(&session.csrf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[tokio::test]
    async fn only_the_printed_token_logs_in() {
        let (auth, token) = Auth::new_token();
        assert_eq!(token.len(), 64);
        let user = |t: &str| {
            let t = t.to_string();
            let auth = &auth;
            async move { auth.login(&t).await.expect("no review").map(|(u, _)| u) }
        };
        assert_eq!(user(&token).await.as_deref(), Some("local"));
        assert_eq!(user("").await, None);
        assert_eq!(user(&token[..63]).await, None);
        let (_, other) = Auth::new_token();
        assert_ne!(token, other, "tokens are random");
        assert_eq!(
            auth.check(&Identity::Local, Need::Act("ns", "orders"))
                .await
                .expect("check"),
            Verdict::Allowed,
            "the standalone token's holder may do everything"
        );
    }

    #[tokio::test]
    async fn kubernetes_tokens_are_reviewed_on_every_check() {
        use crate::access::fake::Tables;
        let view = Permission::View {
            namespace: "ns".into(),
            name: "orders".into(),
        };
        let act = Permission::Act {
            namespace: "ns".into(),
        };
        let tables = Arc::new(
            Tables::default()
                .with("t-viewer", "viewer", vec![view.clone()])
                .with("t-actor", "actor", vec![view, act.clone()])
                .with("t-acts-blind", "blind", vec![act]),
        );
        let auth = Auth::Kubernetes(tables.clone());
        assert_eq!(auth.login("made-up").await.expect("review"), None);
        let (user, viewer) = auth
            .login("t-viewer")
            .await
            .expect("review")
            .expect("viewer");
        assert_eq!(user, "viewer");
        assert_eq!(format!("{viewer:?}"), "Bearer(…)", "Debug shows no token");
        let (_, actor) = auth.login("t-actor").await.expect("review").expect("actor");
        let (_, blind) = auth
            .login("t-acts-blind")
            .await
            .expect("review")
            .expect("blind");
        let check = |who: &Identity, need| {
            let (auth, who) = (&auth, who.clone());
            async move { auth.check(&who, need).await.expect("check") }
        };
        assert_eq!(
            check(&viewer, Need::View("ns", "orders")).await,
            Verdict::Allowed
        );
        assert!(
            matches!(check(&viewer, Need::View("ns", "other")).await, Verdict::Denied(w) if w.contains("get on deadletterqueues"))
        );
        assert!(
            matches!(check(&viewer, Need::Act("ns", "orders")).await, Verdict::Denied(w) if w.contains("create on deadletterreplays"))
        );
        assert_eq!(
            check(&actor, Need::Act("ns", "orders")).await,
            Verdict::Allowed
        );
        assert!(
            matches!(
                check(&blind, Need::Act("ns", "orders")).await,
                Verdict::Denied(_)
            ),
            "acting needs viewing too"
        );
        assert_eq!(
            check(&Identity::Local, Need::Session).await,
            Verdict::LoggedOut
        );
        tables.revoke("t-actor");
        assert_eq!(
            check(&actor, Need::Session).await,
            Verdict::LoggedOut,
            "a revoked token ends the session"
        );
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_closed() {
        let sessions = Sessions::default();
        let id = sessions.open("local".into(), Identity::Local);
        let cookie = session_cookie(&id);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        let h = headers(&[("cookie", &format!("other=1; {COOKIE}={id}"))]);
        let s = sessions.of(&h).expect("session");
        assert_eq!(s.user, "local");
        assert!(csrf_ok(&s, Some(&s.csrf)));
        assert!(!csrf_ok(&s, Some("x")));
        assert!(!csrf_ok(&s, None));
        assert!(sessions
            .of(&headers(&[("cookie", &format!("{COOKIE}=nope"))]))
            .is_none());
        sessions.close(&h);
        assert!(sessions.of(&h).is_none());
    }

    #[test]
    fn host_must_be_loopback_with_the_port() {
        assert!(host_ok(Some("127.0.0.1:8081"), 8081));
        assert!(host_ok(Some("localhost:8081"), 8081));
        assert!(host_ok(Some("[::1]:8081"), 8081));
        assert!(!host_ok(Some("127.0.0.1:8082"), 8081));
        assert!(!host_ok(Some("evil.example:8081"), 8081));
        assert!(!host_ok(Some("127.0.0.1"), 8081));
        assert!(!host_ok(None, 8081));
    }

    #[test]
    fn posts_must_be_same_origin() {
        assert!(same_origin(&headers(&[]), 80));
        assert!(same_origin(
            &headers(&[
                ("origin", "http://127.0.0.1:80"),
                ("sec-fetch-site", "same-origin")
            ]),
            80
        ));
        assert!(!same_origin(
            &headers(&[("origin", "http://evil.example")]),
            80
        ));
        assert!(!same_origin(&headers(&[("origin", "null")]), 80));
        assert!(!same_origin(
            &headers(&[("origin", "https://127.0.0.1:80")]),
            80
        ));
        assert!(!same_origin(
            &headers(&[("sec-fetch-site", "cross-site")]),
            80
        ));
    }

    #[test]
    fn in_a_cluster_any_host_answers_and_posts_must_come_from_it() {
        let any = Hosts::Any;
        assert!(any.allows(Some("dlq-console.ops.svc:8081")));
        assert!(!any.allows(None));
        let host = ("host", "console.example.com");
        for origin in ["https://console.example.com", "http://console.example.com"] {
            assert!(
                any.same_origin(&headers(&[host, ("origin", origin)])),
                "{origin}"
            );
        }
        assert!(
            any.same_origin(&headers(&[host])),
            "no Origin: the CSRF token decides"
        );
        for origin in [
            "https://evil.example",
            "null",
            "https://console.example.com.evil",
        ] {
            assert!(
                !any.same_origin(&headers(&[host, ("origin", origin)])),
                "{origin}"
            );
        }
        assert!(!any.same_origin(&headers(&[host, ("sec-fetch-site", "cross-site")])));
        assert!(
            !any.same_origin(&headers(&[("origin", "https://x")])),
            "no Host"
        );
        let loopback = Hosts::Loopback(8081);
        assert!(loopback.allows(Some("127.0.0.1:8081")) && !loopback.allows(Some("x:8081")));
    }
}
