//! How far a DeadLetterQueue has come in adopting retries and dead-lettering: its
//! maturity score (docs/ARCHITECTURE.md, "Maturity"). Pure: the drivers gather the
//! [`Facts`] (through [`crate::status::maturity`]: the controller's backlog monitor,
//! `run --standalone`, `dlq-operator report`), this module
//! checks them and scores.
//!
//! The score is the capability maturity score
//! `M = w_retry·R_retry + w_dlq·R_dlq + w_monitor·R_monitor`, with weights 0.4, 0.4, 0.2 by
//! default ([`Weights`]; they must sum to 1). Each `R` in [0, 1] is the share of its
//! area's [`Item`]s that hold, so fixing one missing item raises `M` by exactly its
//! [`share`]: the area's weight divided by the number of items of the area. Every item is
//! something the operator already knows about the resource (its spec, its RetryPolicy,
//! its status, what the broker showed): there is no questionnaire. Each item, what it
//! checks and why it matters: docs/ARCHITECTURE.md, "Maturity".

pub mod metrics;
#[cfg(test)]
mod tests;
mod weights;

use serde::Serialize;

use crate::crd::{
    BackoffStrategy, DeadLetterQueueSpec, MaturityStatus, Overflow, PartitionBy, QueueType,
    RetryPolicySpec,
};

pub use weights::{Weights, WeightsError, SUM_TOLERANCE};

/// The three areas of the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Area {
    /// Retries: classification, backoff with jitter, a bound, a live retry path.
    Retry,
    /// Dead letters: kept safely, classified, replayed.
    DeadLetter,
    /// Monitoring: threshold, alert rules, growth.
    Monitoring,
}

impl Area {
    /// Every area, in the order of the formula.
    pub const ALL: [Area; 3] = [Area::Retry, Area::DeadLetter, Area::Monitoring];

    /// The area's name in status, output and metrics: `retry`, `deadLetter`,
    /// `monitoring`.
    pub fn name(self) -> &'static str {
        match self {
            Area::Retry => "retry",
            Area::DeadLetter => "deadLetter",
            Area::Monitoring => "monitoring",
        }
    }
}

/// One checkable item (docs/ARCHITECTURE.md, "Maturity", has why each matters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Item {
    /// The RetryPolicy exists, is valid and its `Ready` condition is `True` (from files:
    /// it exists and is valid).
    RetryPolicyReady,
    /// Its backoff is jittered: `FullJitter`, `EqualJitter`, `DecorrelatedJitter`, or
    /// `ExponentialJitter` with a jitter above 0.
    JitteredBackoff,
    /// Its classification dead-letters some error class at once (a permanent failure is
    /// not retried).
    NonRetryableClasses,
    /// It bounds the time spent retrying: `maxRetryDuration`.
    RetryWindow,
    /// Retries really happen: a retry router consumes the inbox (router mode), or a
    /// message was seen waiting in a retry tier.
    LiveRetryPath,
    /// Dead-lettering is at-least-once: a quorum source queue (the operator sets
    /// `dead-letter-strategy: at-least-once`).
    AtLeastOnce,
    /// The dead-letter queue is bounded (retention, max length) and, when full, refuses
    /// new dead letters rather than dropping the oldest (`overflow: RejectPublish`).
    RetentionAndCapacity,
    /// Dead letters are kept apart by error class (`partitionBy: ErrorClass`).
    Partitioned,
    /// Dead letters have been replayed (a DeadLetterReplay replayed messages), so the
    /// compensation ratio is known.
    Replayed,
    /// A threshold is set (`threshold` or `thresholdFactor`), so the backlog ratio is
    /// computed against the baseline.
    Threshold,
    /// The alert rules are in place: the PrometheusRule applied (`AlertRulesReady`
    /// `True`); from files, rules enabled (`render --rules` prints them).
    AlertRules,
    /// A growth rule is set (`growthPerMinute`).
    GrowthRule,
}

impl Item {
    /// Every item, area by area.
    pub const ALL: [Item; 12] = [
        Item::RetryPolicyReady,
        Item::JitteredBackoff,
        Item::NonRetryableClasses,
        Item::RetryWindow,
        Item::LiveRetryPath,
        Item::AtLeastOnce,
        Item::RetentionAndCapacity,
        Item::Partitioned,
        Item::Replayed,
        Item::Threshold,
        Item::AlertRules,
        Item::GrowthRule,
    ];

    /// The area the item counts in.
    pub fn area(self) -> Area {
        match self {
            Item::RetryPolicyReady
            | Item::JitteredBackoff
            | Item::NonRetryableClasses
            | Item::RetryWindow
            | Item::LiveRetryPath => Area::Retry,
            Item::AtLeastOnce | Item::RetentionAndCapacity | Item::Partitioned | Item::Replayed => {
                Area::DeadLetter
            }
            Item::Threshold | Item::AlertRules | Item::GrowthRule => Area::Monitoring,
        }
    }
}

/// What is known of the DeadLetterQueue's RetryPolicy.
#[derive(Debug, Clone, Copy)]
pub enum Policy<'a> {
    /// It does not exist, or is invalid: nothing of it can be checked.
    Unusable,
    /// It exists and is valid; `ready`: its `Ready` condition is `True` (always `true`
    /// when read from files, which have no status).
    Found {
        /// Its spec.
        spec: &'a RetryPolicySpec,
        /// Whether it is Ready.
        ready: bool,
    },
}

/// What the operator saw happen, as opposed to what is configured, and where it looked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Live {
    /// Seen from manifest files and their brokers (`report --standalone`, `run
    /// --standalone`), not in a cluster: no status, no DeadLetterReplay. Only the advice
    /// ([`Check::next_step`]) differs.
    pub from_files: bool,
    /// Router mode, and the router inbox has a consumer.
    pub router_consuming: bool,
    /// A message was seen waiting in one of the retry tiers.
    pub retries_seen: bool,
    /// A replay of its dead letters replayed at least one message.
    pub replayed: bool,
    /// Its alert rules are in place (the driver decides: [`Item::AlertRules`]).
    pub alert_rules: bool,
}

/// Everything the items are checked on.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The DeadLetterQueue's spec.
    pub spec: &'a DeadLetterQueueSpec,
    /// Its RetryPolicy.
    pub policy: Policy<'a>,
    /// What was seen.
    pub live: Live,
}

/// One item checked: whether it holds and, when it does not, what to do (one short
/// sentence naming the field to set).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// The item.
    pub item: Item,
    /// Whether it holds.
    pub holds: bool,
    /// What to do when it does not hold (empty when it holds).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub next_step: String,
}

/// Whether `backoff` is jittered ([`Item::JitteredBackoff`]).
fn jittered(policy: &RetryPolicySpec) -> bool {
    let b = &policy.backoff;
    match b.strategy {
        BackoffStrategy::Fixed | BackoffStrategy::Exponential => false,
        BackoffStrategy::FullJitter
        | BackoffStrategy::EqualJitter
        | BackoffStrategy::DecorrelatedJitter => true,
        BackoffStrategy::ExponentialJitter => {
            b.jitter_ratio.is_some_and(|r| r > 0.0)
                || b.jitter
                    .as_ref()
                    .is_some_and(|j| j.as_ms().is_ok_and(|ms| ms > 0))
        }
    }
}

/// Whether `policy` dead-letters some error class at once ([`Item::NonRetryableClasses`]).
fn classifies(policy: &RetryPolicySpec) -> bool {
    crate::crd::ErrorClass::ALL
        .into_iter()
        .any(|c| !policy.classification.is_retryable(c))
}

/// Whether `item` holds for `facts`.
fn holds(item: Item, facts: &Facts<'_>) -> bool {
    let spec = facts.spec;
    let policy = match facts.policy {
        Policy::Found { spec, .. } => Some(spec),
        Policy::Unusable => None,
    };
    match item {
        Item::RetryPolicyReady => matches!(facts.policy, Policy::Found { ready: true, .. }),
        Item::JitteredBackoff => policy.is_some_and(jittered),
        Item::NonRetryableClasses => policy.is_some_and(classifies),
        Item::RetryWindow => policy.is_some_and(|p| p.max_retry_duration.is_some()),
        Item::LiveRetryPath => facts.live.router_consuming || facts.live.retries_seen,
        Item::AtLeastOnce => spec.source.queue_type == QueueType::Quorum,
        Item::RetentionAndCapacity => spec.dead_letter.overflow == Overflow::RejectPublish,
        Item::Partitioned => spec.dead_letter.partition_by == PartitionBy::ErrorClass,
        Item::Replayed => facts.live.replayed,
        Item::Threshold => {
            spec.monitoring.threshold.is_some() || spec.monitoring.threshold_factor.is_some()
        }
        Item::AlertRules => facts.live.alert_rules,
        Item::GrowthRule => spec.monitoring.growth_per_minute.is_some(),
    }
}

/// What to do about `item` when it does not hold for `facts`: one sentence, starting
/// with its area, naming the field to set (and the RetryPolicy by name). The items of a
/// RetryPolicy that is missing or invalid say they were not checked (the
/// [`Item::RetryPolicyReady`] sentence says what to do).
fn next_step(item: Item, facts: &Facts<'_>) -> String {
    let policy = &facts.spec.retry_policy_ref.name;
    let area = item.area().name();
    let unusable = matches!(facts.policy, Policy::Unusable);
    let text = match item {
        Item::RetryPolicyReady if unusable => format!("create RetryPolicy {policy} or fix it: it is missing or invalid, so nothing is retried by policy"),
        Item::RetryPolicyReady => format!("make RetryPolicy {policy} Ready: see its Ready condition (written once the operator has reconciled it)"),
        Item::JitteredBackoff | Item::NonRetryableClasses | Item::RetryWindow if unusable => {
            let what = match item {
                Item::JitteredBackoff => "jittered backoff",
                Item::NonRetryableClasses => "classification",
                _ => "retry window",
            };
            format!("{what} not checked: RetryPolicy {policy} is missing or invalid")
        }
        Item::JitteredBackoff => format!("use a jittered backoff in RetryPolicy {policy} (spec.backoff.strategy FullJitter, EqualJitter or DecorrelatedJitter), so consumers that failed together do not retry together"),
        Item::NonRetryableClasses => format!("dead-letter permanent failures at once in RetryPolicy {policy} (spec.classification.deadLetter, e.g. Validation, Parse, Poison) instead of retrying them"),
        Item::RetryWindow => format!("set spec.maxRetryDuration in RetryPolicy {policy}, so no message is retried past a deadline"),
        Item::LiveRetryPath if facts.spec.router.enabled && facts.live.from_files => format!("no retry router consumes the inbox {}: run `dlq-operator run --standalone` (its embedded routers) or `dlq-operator router --standalone`", facts.spec.router_inbox_name()),
        Item::LiveRetryPath if facts.spec.router.enabled => format!("no retry router consumes the inbox {}: run `dlq-operator run` (its embedded routers) or `dlq-operator router`; the RouterReady condition says why", facts.spec.router_inbox_name()),
        Item::LiveRetryPath => "no retry seen yet: turn on spec.router.enabled (consumers then only reject), or retry with the client library's retry handler".to_string(),
        Item::AtLeastOnce => "set spec.source.queueType: Quorum, so dead-lettering is at-least-once (a classic queue can lose a dead letter)".to_string(),
        Item::RetentionAndCapacity => "set spec.deadLetter.overflow: RejectPublish, so a full dead-letter queue refuses new dead letters instead of dropping the oldest".to_string(),
        Item::Partitioned => "set spec.deadLetter.partitionBy: ErrorClass, so dead letters are kept apart by error class".to_string(),
        Item::Replayed if facts.live.from_files => "no replay known: from files none can be (a DeadLetterQueue in a cluster counts its DeadLetterReplays; `dlq replay --standalone` leaves no record)".to_string(),
        Item::Replayed => "no replay yet: after a fix, replay the dead letters with a DeadLetterReplay, so the compensation ratio is known".to_string(),
        Item::Threshold => "set spec.monitoring.threshold or thresholdFactor, so the backlog ratio is computed against the baseline".to_string(),
        Item::AlertRules if facts.spec.alerting.prometheus_rule.enabled => "the alert rules are not applied: the AlertRulesReady condition says why (without the Prometheus Operator, load `dlq-operator render --rules` into Prometheus)".to_string(),
        Item::AlertRules => "set spec.alerting.prometheusRule.enabled: true, so the backlog alerts reach Prometheus".to_string(),
        Item::GrowthRule => "set spec.monitoring.growthPerMinute, so fast growth alerts before the threshold is reached".to_string(),
    };
    format!("{area}: {text}")
}

/// Checks every item ([`Item::ALL`] order) on `facts`.
pub fn assess(facts: &Facts<'_>) -> Vec<Check> {
    Item::ALL
        .into_iter()
        .map(|item| {
            let holds = holds(item, facts);
            Check {
                item,
                holds,
                next_step: if holds {
                    String::new()
                } else {
                    next_step(item, facts)
                },
            }
        })
        .collect()
}

/// What one item is worth in the score: its area's weight ÷ the number of items of the
/// area (0.08 for a retry item with the default weights).
pub fn share(item: Item, weights: &Weights) -> f64 {
    let area = item.area();
    let n = Item::ALL.iter().filter(|i| i.area() == area).count();
    weights.of(area) / n as f64
}

/// A score: `M` and its three parts, with the checks it was made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Maturity {
    /// `M = w_retry·R_retry + w_dlq·R_dlq + w_monitor·R_monitor`, in [0, 1].
    pub score: f64,
    /// `R_retry`: the share of retry items that hold, in [0, 1].
    pub retry: f64,
    /// `R_dlq`: the share of dead-letter items that hold, in [0, 1].
    pub dead_letter: f64,
    /// `R_monitor`: the share of monitoring items that hold, in [0, 1].
    pub monitoring: f64,
    /// Every item checked.
    pub checks: Vec<Check>,
}

impl Maturity {
    /// The next steps: what to do about each item that does not hold, the ones worth most
    /// first ([`share`] under `weights`), then in [`Item::ALL`] order.
    pub fn missing(&self, weights: &Weights) -> Vec<String> {
        let mut missing: Vec<&Check> = self.checks.iter().filter(|c| !c.holds).collect();
        missing.sort_by(|a, b| {
            share(b.item, weights)
                .total_cmp(&share(a.item, weights))
                .then(a.item.cmp(&b.item))
        });
        missing.into_iter().map(|c| c.next_step.clone()).collect()
    }

    /// `status.maturity` of this score under `weights` (the figures to 3 decimals, the
    /// next steps as [`Maturity::missing`], the weights), with the time retries were first
    /// seen.
    pub fn status(&self, weights: &Weights, retries_seen_time: Option<String>) -> MaturityStatus {
        let rounded = |x: f64| (x * 1000.0).round() / 1000.0;
        MaturityStatus {
            score: rounded(self.score),
            retry: rounded(self.retry),
            dead_letter: rounded(self.dead_letter),
            monitoring: rounded(self.monitoring),
            missing: self.missing(weights),
            retries_seen_time,
            weights: Some(crate::crd::MaturityWeights {
                retry: weights.retry,
                dead_letter: weights.dead_letter,
                monitoring: weights.monitoring,
            }),
        }
    }
}

/// The score of `checks` under `weights` (module doc: the formula). An area with no item
/// among `checks` counts 0.
pub fn score(checks: Vec<Check>, weights: &Weights) -> Maturity {
    let part = |area: Area| {
        let of_area: Vec<&Check> = checks.iter().filter(|c| c.item.area() == area).collect();
        if of_area.is_empty() {
            return 0.0;
        }
        of_area.iter().filter(|c| c.holds).count() as f64 / of_area.len() as f64
    };
    let (retry, dead_letter, monitoring) = (
        part(Area::Retry),
        part(Area::DeadLetter),
        part(Area::Monitoring),
    );
    Maturity {
        score: weights.retry * retry
            + weights.dead_letter * dead_letter
            + weights.monitoring * monitoring,
        retry,
        dead_letter,
        monitoring,
        checks,
    }
}

/// [`assess`] then [`score`].
pub fn evaluate(facts: &Facts<'_>, weights: &Weights) -> Maturity {
    score(assess(facts), weights)
}
