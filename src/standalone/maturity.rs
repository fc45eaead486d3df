//! The maturity metrics of `run --standalone` (`dlq_maturity_score`,
//! `dlq_maturity_area_score`): after each poll, each DeadLetterQueue read from the files
//! is scored on what the files say and what the poll showed
//! ([`crate::status::maturity::file_facts`]). A message once seen in a retry tier keeps
//! retries counted as live for the life of the process (files have no status to keep it
//! in).

use std::collections::{BTreeMap, HashSet};

use crate::collector::Observed;
use crate::maturity::{self, Weights};
use crate::metrics::Metrics;
use crate::resolve::manifests::Planned;
use crate::status::maturity::file_facts;

/// What the scores remember between polls.
pub struct Scores {
    weights: Weights,
    metrics: Metrics,
    /// DeadLetterQueues (`namespace/name`) with a message seen in a retry tier.
    retries_seen: HashSet<String>,
}

impl Scores {
    /// Scores under `weights`, recorded in `metrics`.
    pub fn new(weights: Weights, metrics: Metrics) -> Self {
        Scores {
            weights,
            metrics,
            retries_seen: HashSet::new(),
        }
    }

    /// Records the score of each of `planned` whose depths a poll read (`observed`, by
    /// `namespace/name`); forgets those no longer planned. A resource whose broker could
    /// not be read keeps its last score.
    pub fn record(&mut self, planned: &[Planned], observed: &BTreeMap<String, Observed>) {
        let keys: HashSet<&str> = planned.iter().map(|p| p.prepared.key.as_str()).collect();
        self.retries_seen.retain(|k| keys.contains(k.as_str()));
        self.metrics.maturity().retain(|k| keys.contains(k));
        for p in planned {
            let key = &p.prepared.key;
            let Some(o) = observed.get(key) else {
                continue;
            };
            let mut facts = file_facts(p, Some(o));
            if facts.live.retries_seen {
                self.retries_seen.insert(key.clone());
            }
            facts.live.retries_seen |= self.retries_seen.contains(key);
            let m = maturity::evaluate(&facts, &self.weights);
            let (ns, name) = crate::collector::split_key(key);
            self.metrics.maturity().record(ns, name, &m);
        }
    }
}
