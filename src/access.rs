//! Who is calling, and may they? A caller's Kubernetes bearer token is checked with a
//! `TokenReview` (API group `authentication.k8s.io/v1`) and each permission with a
//! `SubjectAccessReview` (`authorization.k8s.io/v1`), as the API server's own
//! authenticating proxies do (Kubernetes documentation, "Authenticating" → "Webhook
//! token authentication", and "Authorization" → "Checking API access"). The
//! dead-letter console uses it in a cluster (docs/CONSOLE.md): viewing a DeadLetterQueue
//! needs `get` on it, acting on its dead letters needs `create` on `deadletterreplays` in
//! its namespace — the rights a user would need to do the same with `kubectl`.
//!
//! The request bodies and the reading of the answers are pure functions; [`Reviewer`] is
//! the seam (object-safe, faked in the console's fast tests) and [`KubeReviewer`] asks the
//! API server, caching answers for [`CACHE_TTL_S`] seconds (tokens only as SHA-256
//! digests).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use moka::sync::Cache;
use sha2::{Digest, Sha256};

use crate::rbac::Rule;

/// How long an answer of the API server is reused (s): a revoked token or a removed
/// RoleBinding takes effect within this time.
pub const CACHE_TTL_S: u64 = 30;

/// Most answers kept in each cache (tokens, permissions).
pub const CACHE_CAPACITY: u64 = 10_000;

/// The API group of the operator's resources.
const GROUP: &str = "dlqoperator.io";

/// The RBAC rules a process needs to review callers: both reviews are cluster-scoped
/// `create` calls, so they need a ClusterRole even for a namespaced installation.
pub const REVIEW_RULES: &[Rule] = &[
    Rule {
        api_group: "authentication.k8s.io",
        resources: &["tokenreviews"],
        verbs: &["create"],
        why: "check a console caller's bearer token (TokenReview)",
    },
    Rule {
        api_group: "authorization.k8s.io",
        resources: &["subjectaccessreviews"],
        verbs: &["create"],
        why: "check a console caller's permission on a DeadLetterQueue (SubjectAccessReview)",
    },
];

/// An authenticated caller, as the API server's TokenReview named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    /// User name (for a ServiceAccount: `system:serviceaccount:<namespace>:<name>`).
    pub username: String,
    /// User UID, when the authenticator gives one.
    pub uid: Option<String>,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes of the authenticator (passed on to the SubjectAccessReview).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a caller wants to do with one DeadLetterQueue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Permission {
    /// See the DeadLetterQueue and its dead letters: `get` on
    /// `deadletterqueues.dlqoperator.io` `name` in `namespace`.
    View {
        /// Namespace of the DeadLetterQueue.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Replay, repair or purge its dead letters: `create` on
    /// `deadletterreplays.dlqoperator.io` in `namespace` (what a replay through the API
    /// needs).
    Act {
        /// Namespace of the DeadLetterQueue.
        namespace: String,
    },
}

impl Permission {
    /// The SubjectAccessReview resource attributes of this permission.
    pub fn attributes(&self) -> ResourceAttributes {
        let (verb, resource, namespace, name) = match self {
            Permission::View { namespace, name } => {
                ("get", "deadletterqueues", namespace, Some(name.clone()))
            }
            Permission::Act { namespace } => ("create", "deadletterreplays", namespace, None),
        };
        ResourceAttributes {
            group: Some(GROUP.to_string()),
            resource: Some(resource.to_string()),
            verb: Some(verb.to_string()),
            namespace: Some(namespace.clone()),
            name,
            ..ResourceAttributes::default()
        }
    }
}

/// Why a review could not be made (not a refusal: a refusal is `Ok(None)` or
/// `Ok(false)`).
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The API server did not answer the review, or refused it (the process's own
    /// ServiceAccount lacks [`REVIEW_RULES`]).
    #[error("the Kubernetes API server could not review the caller ({what}): {source}; check that the console's ServiceAccount may create tokenreviews and subjectaccessreviews (docs/CONSOLE.md)")]
    Api {
        /// `TokenReview` or `SubjectAccessReview`.
        what: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The TokenReview that asks whether `token` is valid (for the API server's own
/// audiences: none given).
pub fn token_review(token: &str) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..TokenReview::default()
    }
}

/// The caller a TokenReview answer names, or `None` when the token was not authenticated
/// (invalid, expired, revoked) or the answer names no user.
pub fn caller_of(review: &TokenReview) -> Option<Caller> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    let user = status.user.as_ref()?;
    let username = user.username.clone().filter(|u| !u.is_empty())?;
    Some(Caller {
        username,
        uid: user.uid.clone(),
        groups: user.groups.clone().unwrap_or_default(),
        extra: user.extra.clone().unwrap_or_default(),
    })
}

/// The SubjectAccessReview that asks whether `caller` has `permission`.
pub fn access_review(caller: &Caller, permission: &Permission) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(caller.username.clone()),
            uid: caller.uid.clone(),
            groups: Some(caller.groups.clone()),
            extra: (!caller.extra.is_empty()).then(|| caller.extra.clone()),
            resource_attributes: Some(permission.attributes()),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// Whether a SubjectAccessReview answer allows (a missing status denies).
pub fn allowed_by(review: &SubjectAccessReview) -> bool {
    review.status.as_ref().is_some_and(|s| s.allowed)
}

/// Reviews callers: object-safe (`Arc<dyn Reviewer>`), implemented by [`KubeReviewer`]
/// and by the console's test fakes.
#[async_trait::async_trait]
pub trait Reviewer: Send + Sync {
    /// The caller `token` authenticates, `None` when it authenticates nobody (an empty
    /// token included).
    ///
    /// # Errors
    /// [`AccessError`] when the review could not be made.
    async fn authenticate(&self, token: &str) -> Result<Option<Caller>, AccessError>;

    /// Whether `caller` has `permission`.
    ///
    /// # Errors
    /// [`AccessError`] when the review could not be made.
    async fn allowed(&self, caller: &Caller, permission: &Permission) -> Result<bool, AccessError>;
}

/// [`Reviewer`] asking the Kubernetes API server, answers cached for [`CACHE_TTL_S`]
/// (errors are not cached).
#[derive(Clone)]
pub struct KubeReviewer {
    client: Client,
    tokens: Cache<[u8; 32], Option<Caller>>,
    answers: Cache<(Caller, Permission), bool>,
}

impl KubeReviewer {
    /// A reviewer using `client` (the process's own identity, which needs
    /// [`REVIEW_RULES`]).
    pub fn new(client: Client) -> Self {
        let ttl = Duration::from_secs(CACHE_TTL_S);
        KubeReviewer {
            client,
            tokens: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            answers: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// As an `Arc<dyn Reviewer>`.
    pub fn shared(self) -> Arc<dyn Reviewer> {
        Arc::new(self)
    }
}

#[async_trait::async_trait]
impl Reviewer for KubeReviewer {
    async fn authenticate(&self, token: &str) -> Result<Option<Caller>, AccessError> {
        if token.is_empty() {
            // The API server refuses to review an empty token (400): it is nobody's.
            return Ok(None);
        }
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(known) = self.tokens.get(&key) {
            return Ok(known);
        }
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &token_review(token))
            .await
            .map_err(|source| AccessError::Api {
                what: "TokenReview",
                source,
            })?;
        let caller = caller_of(&answer);
        self.tokens.insert(key, caller.clone());
        Ok(caller)
    }

    async fn allowed(&self, caller: &Caller, permission: &Permission) -> Result<bool, AccessError> {
        let key = (caller.clone(), permission.clone());
        if let Some(known) = self.answers.get(&key) {
            return Ok(known);
        }
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &access_review(caller, permission))
            .await
            .map_err(|source| AccessError::Api {
                what: "SubjectAccessReview",
                source,
            })?;
        let allowed = allowed_by(&answer);
        self.answers.insert(key, allowed);
        Ok(allowed)
    }
}

/// A [`Reviewer`] answering from tables, for the fast tests (TokenReview and
/// SubjectAccessReview against a real API server: `tests/e2e_access.rs`).
#[cfg(test)]
pub mod fake {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::{AccessError, Caller, Permission, Reviewer};

    /// Tokens by value, each with its user and the permissions granted; `reviews` counts
    /// the reviews asked.
    #[derive(Default)]
    pub struct Tables {
        /// Token → (user name, permissions granted).
        pub tokens: Mutex<BTreeMap<String, (String, Vec<Permission>)>>,
        /// Reviews asked (token and access reviews).
        pub reviews: Mutex<u64>,
    }

    impl Tables {
        /// Adds `token` for `user`, granted `permissions`.
        pub fn with(self, token: &str, user: &str, permissions: Vec<Permission>) -> Self {
            self.tokens
                .lock()
                .expect("lock")
                .insert(token.into(), (user.into(), permissions));
            self
        }

        /// Revokes `token`.
        pub fn revoke(&self, token: &str) {
            self.tokens.lock().expect("lock").remove(token);
        }
    }

    fn caller(user: &str) -> Caller {
        Caller {
            username: user.into(),
            uid: None,
            groups: vec!["system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    #[async_trait::async_trait]
    impl Reviewer for Tables {
        async fn authenticate(&self, token: &str) -> Result<Option<Caller>, AccessError> {
            *self.reviews.lock().expect("lock") += 1;
            Ok(self
                .tokens
                .lock()
                .expect("lock")
                .get(token)
                .map(|(user, _)| caller(user)))
        }

        async fn allowed(
            &self,
            who: &Caller,
            permission: &Permission,
        ) -> Result<bool, AccessError> {
            *self.reviews.lock().expect("lock") += 1;
            let granted = self
                .tokens
                .lock()
                .expect("lock")
                .values()
                .filter(|(user, _)| *user == who.username)
                .any(|(_, granted)| granted.contains(permission));
            Ok(granted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
    use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;

    fn answered(authenticated: Option<bool>, username: Option<&str>) -> TokenReview {
        TokenReview {
            status: Some(TokenReviewStatus {
                authenticated,
                user: Some(UserInfo {
                    username: username.map(str::to_string),
                    uid: Some("u-1".into()),
                    groups: Some(vec!["system:authenticated".into()]),
                    extra: None,
                }),
                ..TokenReviewStatus::default()
            }),
            ..token_review("t")
        }
    }

    fn alice() -> Caller {
        Caller {
            username: "alice".into(),
            uid: Some("u-1".into()),
            groups: vec!["team-a".into(), "system:authenticated".into()],
            extra: BTreeMap::from([("scopes".to_string(), vec!["x".to_string()])]),
        }
    }

    #[test]
    fn a_token_review_carries_the_token_and_no_audience() {
        let review = token_review("secret-token");
        assert_eq!(review.spec.token.as_deref(), Some("secret-token"));
        assert_eq!(review.spec.audiences, None);
    }

    #[test]
    fn only_an_authenticated_answer_with_a_user_name_is_a_caller() {
        let caller = caller_of(&answered(Some(true), Some("alice"))).expect("a caller");
        assert_eq!(caller.username, "alice");
        assert_eq!(caller.uid.as_deref(), Some("u-1"));
        assert_eq!(caller.groups, vec!["system:authenticated".to_string()]);
        for (authenticated, user) in [
            (Some(false), Some("alice")),
            (None, Some("alice")),
            (Some(true), None),
            (Some(true), Some("")),
        ] {
            assert_eq!(
                caller_of(&answered(authenticated, user)),
                None,
                "{authenticated:?} {user:?}"
            );
        }
        assert_eq!(caller_of(&token_review("t")), None, "no status: no caller");
    }

    #[test]
    fn viewing_asks_for_get_on_the_dead_letter_queue_by_name() {
        let view = Permission::View {
            namespace: "shop".into(),
            name: "orders".into(),
        };
        let review = access_review(&alice(), &view);
        let spec = &review.spec;
        assert_eq!(spec.user.as_deref(), Some("alice"));
        assert_eq!(spec.uid.as_deref(), Some("u-1"));
        assert_eq!(spec.groups.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            spec.extra.as_ref().and_then(|e| e.get("scopes")).cloned(),
            Some(vec!["x".to_string()])
        );
        let attrs = spec.resource_attributes.as_ref().expect("attributes");
        assert_eq!(attrs.group.as_deref(), Some("dlqoperator.io"));
        assert_eq!(attrs.resource.as_deref(), Some("deadletterqueues"));
        assert_eq!(attrs.verb.as_deref(), Some("get"));
        assert_eq!(attrs.namespace.as_deref(), Some("shop"));
        assert_eq!(attrs.name.as_deref(), Some("orders"));
    }

    #[test]
    fn acting_asks_for_create_on_dead_letter_replays_in_the_namespace() {
        let act = Permission::Act {
            namespace: "shop".into(),
        };
        let attrs = act.attributes();
        assert_eq!(attrs.resource.as_deref(), Some("deadletterreplays"));
        assert_eq!(attrs.verb.as_deref(), Some("create"));
        assert_eq!(attrs.namespace.as_deref(), Some("shop"));
        assert_eq!(attrs.name, None);
        let mut no_extra = alice();
        no_extra.extra.clear();
        assert_eq!(access_review(&no_extra, &act).spec.extra, None);
    }

    #[test]
    fn only_an_allowed_status_allows() {
        let mut review = access_review(
            &alice(),
            &Permission::Act {
                namespace: "a".into(),
            },
        );
        assert!(!allowed_by(&review), "no status");
        for allowed in [true, false] {
            review.status = Some(SubjectAccessReviewStatus {
                allowed,
                ..SubjectAccessReviewStatus::default()
            });
            assert_eq!(allowed_by(&review), allowed);
        }
    }
}
