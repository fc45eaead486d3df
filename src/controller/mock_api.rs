//! The mock Kubernetes API of the controllers' fast tests: kube's `tower-test` mock
//! service, answered from a few fixed objects, every call recorded. With the in-memory
//! broker ([`crate::fake::FakeBroker`]) the reconciles run with no API server and
//! no RabbitMQ.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

use crate::controller::context::{BrokerClients, Context};
use crate::fake::FakeBroker;
use crate::metrics::Metrics;

/// The namespace of every fixture.
pub const NS: &str = "team-a";
/// The path of the namespace's `dlqoperator.io/v1alpha1` resources.
pub const API: &str = "/apis/dlqoperator.io/v1alpha1/namespaces/team-a";
/// The path of the namespace's Secrets.
pub const SECRET_PATH: &str = "/api/v1/namespaces/team-a/secrets";

/// One recorded API call: method, path, JSON body (`null` when none).
pub type Call = (String, String, Value);

/// The mock API: GETs answered from `objects` by path (404 otherwise), a PATCH echoes the
/// object at its path (without `/status`), a POST (an Event) echoes its body.
#[derive(Clone, Default)]
pub struct MockApi {
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl MockApi {
    /// Serves `object` at `path`.
    pub fn put(&self, path: &str, object: Value) {
        let mut objects = self.objects.lock().expect("lock");
        objects.insert(path.into(), object);
    }

    /// The calls recorded since the last `take`.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }

    /// The calls recorded so far (kept).
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("lock").clone()
    }

    fn answer(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let objects = self.objects.lock().expect("lock");
        match (method, objects.get(path.trim_end_matches("/status"))) {
            ("GET" | "PATCH", Some(o)) => (200, o.clone()),
            ("POST", _) => (201, body.clone()),
            _ => (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
            ),
        }
    }

    /// A client whose requests this mock answers (on a spawned task).
    pub fn client(&self) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let mock = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("request body");
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (method, path) = (parts.method.to_string(), parts.uri.path().to_string());
                let (status, answer) = mock.answer(&method, &path, &body);
                mock.calls.lock().expect("lock").push((method, path, body));
                let answer = serde_json::to_vec(&answer).expect("json");
                let response = Response::builder().status(status).body(Body::from(answer));
                send.send_response(response.expect("response"));
            }
        });
        Client::new(service, NS)
    }

    /// Serves the RetryPolicy `policy` (`maxRetries: 2`, tiers `5s`, `30s`) and the Secret
    /// `rabbit` (guest/guest on host `rabbit`) every fixture DeadLetterQueue references.
    pub fn with_references(self) -> Self {
        self.put(
            &format!("{API}/retrypolicies/policy"),
            json!({
            "apiVersion": "dlqoperator.io/v1alpha1", "kind": "RetryPolicy",
            "metadata": {"name": "policy", "namespace": NS, "generation": 1, "resourceVersion": "7"},
            "spec": {"maxRetries": 2, "tiers": ["5s", "30s"]}}),
        );
        // base64 of amqp://guest:guest@rabbit:5672/%2f and http://rabbit:15672
        self.put(
            &format!("{SECRET_PATH}/rabbit"),
            json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "rabbit", "namespace": NS, "resourceVersion": "1"},
            "data": {"uri": "YW1xcDovL2d1ZXN0Omd1ZXN0QHJhYmJpdDo1NjcyLyUyZg==",
                     "managementUri": "aHR0cDovL3JhYmJpdDoxNTY3Mg=="}}),
        );
        self
    }

    /// The controllers' shared context over this mock and `broker`.
    pub fn context(&self, broker: &FakeBroker) -> Arc<Context> {
        let brokers = Arc::new(BrokerClients::new(Arc::new(broker.clone())));
        Arc::new(Context::new(
            self.client(),
            "test-instance",
            Metrics::new(),
            brokers,
        ))
    }
}
