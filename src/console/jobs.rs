//! Replays the console runs (a confirmed replay can take a while): each a job with an id,
//! its progress (the core's report after each message) and its end, shown by `GET
//! /jobs/{id}` to the user who started it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State as Extract};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::auth;
use super::auth::Need;
use super::respond::{authorized, html, page, Shared};
use super::templates::JobPage;
use crate::dlq::replay::ReplayReport;
use crate::lock::Locked;

/// One replay run by the console.
#[derive(Debug, Default)]
pub struct Job {
    /// Who started it (only they see it).
    pub user: String,
    /// The DeadLetterQueue.
    pub key: String,
    /// Which messages, shown.
    pub what: String,
    /// The report so far (final once [`Job::finished`]).
    pub report: Option<ReplayReport>,
    /// Ended.
    pub finished: bool,
    /// The broker's error it ended with, escaped.
    pub error: Option<String>,
}

/// Every job of this process, by id.
#[derive(Debug, Default)]
pub struct Jobs(Mutex<HashMap<String, Arc<Mutex<Job>>>>);

impl Jobs {
    /// A new job of `user` on `key` for `what`: its id and its shared state.
    pub fn open(&self, user: &str, key: &str, what: &str) -> (String, Arc<Mutex<Job>>) {
        let id = auth::random_token();
        let job = Arc::new(Mutex::new(Job {
            user: user.into(),
            key: key.into(),
            what: what.into(),
            ..Job::default()
        }));
        self.0.locked().insert(id.clone(), Arc::clone(&job));
        (id, job)
    }

    /// The job `id`, if any.
    pub fn get(&self, id: &str) -> Option<Arc<Mutex<Job>>> {
        self.0.locked().get(id).cloned()
    }
}

/// `GET /jobs/{id}`: the job's progress (the page refreshes itself every second) or its
/// result.
pub async fn job_page(
    Extract(state): Extract<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let s = match authorized(&state, &headers, Need::Session).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Some(job) = state.jobs.get(&id) else {
        return page(StatusCode::NOT_FOUND, "No such job", String::new());
    };
    let key = {
        let j = job.locked();
        if j.user != s.user {
            return page(StatusCode::NOT_FOUND, "No such job", String::new());
        }
        j.key.clone()
    };
    // Its DeadLetterQueue must still be the user's to view (RBAC may have changed).
    let (namespace, name) = crate::collector::split_key(&key);
    if let Err(r) = authorized(&state, &headers, Need::View(namespace, name)).await {
        return r;
    }
    let j = job.locked();
    let r = j.report.as_ref();
    html(
        StatusCode::OK,
        &JobPage {
            key: j.key.clone(),
            namespace: namespace.into(),
            name: name.into(),
            what: j.what.clone(),
            finished: j.finished,
            replayed: r.map_or(0, |r| r.replayed),
            scanned: r.map_or(0, |r| r.scanned),
            total: r.map_or(0, |r| r.total),
            notes: r.map(super::actions::replay_notes).unwrap_or_default(),
            error: j.error.clone(),
        },
    )
}
