//! Who may use the console, and the checks every request passes: the Host header (DNS
//! rebinding), the session cookie, and on every POST the CSRF token and a same-origin
//! `Origin` / `Sec-Fetch-Site`. Pure, except for the random tokens.
//!
//! [`Auth`] is the seam for the ways a user is recognised: today only
//! [`Auth::Token`] (standalone: the random token printed at start); the cluster mode
//! (TokenReview and SubjectAccessReview) is to be added as another variant.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "dlq_console";

/// How users are recognised.
#[derive(Debug)]
pub enum Auth {
    /// Standalone: whoever presents this token (printed on stderr at start) once, in
    /// `GET /login?token=…`, gets a session. The token's SHA-256 is kept, not the token.
    Token(TokenDigest),
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

impl Auth {
    /// Standalone auth with a new random token: the auth and the token (to print once).
    pub fn new_token() -> (Auth, String) {
        let token = random_token();
        (Auth::Token(TokenDigest::of(&token)), token)
    }

    /// The user `presented` (the login token) identifies, or `None`. Standalone: the
    /// user is `local` (whoever holds the token printed at start).
    pub fn login(&self, presented: &str) -> Option<String> {
        match self {
            Auth::Token(digest) => (TokenDigest::of(presented) == *digest).then(|| "local".into()),
        }
    }
}

/// A logged-in user's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who (for the audit log).
    pub user: String,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
}

/// The sessions, by the SHA-256 of their cookie value (the cookie itself is not kept).
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<[u8; 32], Session>>);

impl Sessions {
    /// Opens a session for `user`: the cookie value to set.
    pub fn open(&self, user: String) -> String {
        let id = random_token();
        let session = Session {
            user,
            csrf: random_token(),
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

    #[test]
    fn only_the_printed_token_logs_in() {
        let (auth, token) = Auth::new_token();
        assert_eq!(token.len(), 64);
        assert_eq!(auth.login(&token).as_deref(), Some("local"));
        assert_eq!(auth.login(""), None);
        assert_eq!(auth.login(&token[..63]), None);
        let (_, other) = Auth::new_token();
        assert_ne!(token, other, "tokens are random");
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_closed() {
        let sessions = Sessions::default();
        let id = sessions.open("local".into());
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
}
