//! A fake Kubernetes API for controller tests and benchmarks: kube's `tower-test` mock
//! service (as in kube-rs `controller-rs`), answering GETs from an in-memory set of
//! objects (404 for the rest, worded like a real API server for a group/version no
//! object is served under, i.e. a CRD that is not installed), echoing patched objects, accepting Events, and recording
//! every call (method, path, query, JSON body) for exact assertions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

/// One request the controller made.
#[derive(Debug, Clone)]
pub struct Call {
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Query string.
    pub query: String,
    /// JSON body (`null` when none).
    pub body: Value,
}

impl Call {
    /// `true` for anything but GET.
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

/// The fake API server: objects served by GET (by path) and every call recorded.
#[derive(Clone, Default)]
pub struct FakeApi {
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl FakeApi {
    /// Serves `object` at `path`.
    pub fn put(&self, path: &str, object: Value) {
        self.objects
            .lock()
            .expect("lock")
            .insert(path.to_string(), object);
    }

    /// Stops serving `path`.
    pub fn remove(&self, path: &str) {
        self.objects.lock().expect("lock").remove(path);
    }

    /// The calls so far, and forget them.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }

    /// A client whose requests this fake answers (on a spawned task).
    pub fn client(&self, namespace: &str) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = self.clone();
        let namespace = namespace.to_string();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("request body");
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let call = Call {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_string(),
                    query: parts.uri.query().unwrap_or_default().to_string(),
                    body,
                };
                let (status, answer) = fake.answer(&call);
                fake.calls.lock().expect("lock").push(call);
                send.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                        .expect("response"),
                );
            }
        });
        Client::new(service, namespace.as_str())
    }

    /// Number of calls recorded and not yet taken.
    pub fn pending(&self) -> usize {
        self.calls.lock().expect("lock").len()
    }

    fn answer(&self, call: &Call) -> (u16, Value) {
        let objects = self.objects.lock().expect("lock");
        let status_path = call.path.trim_end_matches("/status");
        // An API group/version under which no object is served answers like a real API
        // server without that CRD: "the server could not find the requested resource".
        let not_served = |path: &str| {
            let group_version: String = path.split('/').take(4).collect::<Vec<_>>().join("/");
            path.starts_with("/apis/") && !objects.keys().any(|k| k.starts_with(&group_version))
        };
        let missing = |path: &str| {
            if not_served(path) {
                (404, resource_not_served())
            } else {
                (404, not_found(path))
            }
        };
        match call.method.as_str() {
            "GET" => match objects.get(&call.path) {
                Some(o) => (200, o.clone()),
                None => missing(&call.path),
            },
            "PATCH" => match objects.get(status_path) {
                // Echo the object (the controller only needs a decodable answer).
                Some(o) => (200, o.clone()),
                None => missing(&call.path),
            },
            "POST" => (201, call.body.clone()),
            _ => (405, json!({})),
        }
    }
}

fn resource_not_served() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": "the server could not find the requested resource", "reason": "NotFound",
           "code": 404})
}

fn not_found(path: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": format!("{path} not found"), "reason": "NotFound", "code": 404})
}
