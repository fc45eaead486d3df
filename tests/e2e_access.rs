//! Caller reviews (`dlq_operator::access`) against a real Kubernetes API server: tokens of
//! real ServiceAccounts (minted by TokenRequest) are authenticated by TokenReview, and
//! their RBAC decides through SubjectAccessReview — a viewer may see DeadLetterQueues but
//! not act, an actor may do both, a ServiceAccount without a binding neither, a made-up
//! token is nobody. Needs `DLQ_E2E_KUBECONFIG` (.ci/run starts an API server); skipped by
//! name without it.

mod common;

use serde_json::json;

use common::e2e::{account, client, namespace};
use dlq_operator::access::{KubeReviewer, Permission};

#[tokio::test]
async fn service_account_tokens_are_reviewed_and_their_rbac_decides() {
    let Some(client) = client("service_account_tokens_are_reviewed_and_their_rbac_decides").await
    else {
        return;
    };
    let ns = namespace(&client, "e2e-access").await;
    let view_rule = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterqueues"], "verbs": ["get"]});
    let act_rule = json!({"apiGroups": ["dlqoperator.io"], "resources": ["deadletterreplays"], "verbs": ["create"]});
    let viewer = account(&client, &ns, "viewer", json!([view_rule])).await;
    let actor = account(&client, &ns, "actor", json!([view_rule, act_rule])).await;
    let nobody = account(&client, &ns, "nobody", json!([])).await;
    let reviewer = KubeReviewer::new(client.clone()).shared();
    let view = Permission::View {
        namespace: ns.clone(),
        name: "orders".into(),
    };
    let act = Permission::Act {
        namespace: ns.clone(),
    };
    let elsewhere = Permission::View {
        namespace: "default".into(),
        name: "orders".into(),
    };
    for (token, name, may_view, may_act) in [
        (&viewer, "viewer", true, false),
        (&actor, "actor", true, true),
        (&nobody, "nobody", false, false),
    ] {
        let caller = reviewer
            .authenticate(token)
            .await
            .expect("TokenReview answered")
            .unwrap_or_else(|| panic!("{name}'s token authenticates"));
        assert_eq!(
            caller.username,
            format!("system:serviceaccount:{ns}:{name}")
        );
        assert!(
            caller
                .groups
                .contains(&format!("system:serviceaccounts:{ns}")),
            "{caller:?}"
        );
        let allowed = |p| {
            let (reviewer, caller) = (&reviewer, &caller);
            async move {
                reviewer
                    .allowed(caller, p)
                    .await
                    .expect("SubjectAccessReview answered")
            }
        };
        assert_eq!(allowed(&view).await, may_view, "{name} viewing");
        assert_eq!(allowed(&act).await, may_act, "{name} acting");
        assert!(!allowed(&elsewhere).await, "{name} in another namespace");
        // Asked again: the cached answer, the same.
        assert_eq!(allowed(&view).await, may_view, "{name} viewing, cached");
    }
    for bad in ["not-a-token", "", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"] {
        assert_eq!(
            reviewer
                .authenticate(bad)
                .await
                .expect("TokenReview answered"),
            None,
            "{bad:?} authenticates nobody"
        );
    }
}
