use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Errors, InvalidSpec};
use crate::duration::Duration;
use crate::error_class::ErrorClass;

/// Desired retry behaviour for the messages of one or more queues (`RetryPolicy`, short
/// name `rp`). Fields and defaults: docs/REFERENCE.md.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "dlqoperator.io",
    version = "v1alpha1",
    kind = "RetryPolicy",
    plural = "retrypolicies",
    singular = "retrypolicy",
    shortname = "rp",
    namespaced,
    status = "RetryPolicyStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".spec.backoff.strategy"}"#,
    printcolumn = r#"{"name":"Retries","type":"integer","jsonPath":".spec.maxRetries"}"#,
    printcolumn = r#"{"name":"Worst case","type":"string","jsonPath":".status.worstCaseRetryDuration"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct RetryPolicySpec {
    /// Retries after the first attempt (0..=100). 0 dead-letters on the first failure.
    #[serde(default = "default_max_retries")]
    #[schemars(range(min = 0, max = 100))]
    pub max_retries: u32,
    /// How long each retry waits.
    #[serde(default)]
    pub backoff: BackoffSpec,
    /// Total retry window measured from the first failure; past it a message is
    /// dead-lettered with reason `RetryWindowExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_duration: Option<Duration>,
    /// Explicit delay tiers (one delay queue each), e.g. `[5s, 15s, 60s, 300s]`. Without
    /// it, tiers are the distinct delays of the nominal schedule. Attempt n waits in the
    /// smallest tier ≥ its computed delay (the last tier if none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub tiers: Option<Vec<Duration>>,
    /// Which error classes are retried and which are dead-lettered at once.
    #[serde(default)]
    pub classification: Classification,
}

fn default_max_retries() -> u32 {
    3
}

impl Default for RetryPolicySpec {
    /// Every field at its schema default (`maxRetries: 3`, default backoff, no window, derived
    /// tiers, default classification), as for `spec: {}`.
    fn default() -> Self {
        RetryPolicySpec {
            max_retries: default_max_retries(),
            backoff: BackoffSpec::default(),
            max_retry_duration: None,
            tiers: None,
            classification: Classification::default(),
        }
    }
}

/// Backoff strategy. Formulas: [`crate::backoff`] (Brooker, "Exponential Backoff And
/// Jitter", AWS Architecture Blog, 2015, for the jitter variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum BackoffStrategy {
    /// Always `initialDelay`.
    Fixed,
    /// `min(initialDelay · multiplier^(n−1), maxDelay)`.
    #[default]
    Exponential,
    /// Exponential plus `U(0, jitter)` or `U(0, jitterRatio · nominal)`, capped.
    ExponentialJitter,
    /// `U(0, exponential)` ("Full Jitter").
    FullJitter,
    /// `exponential/2 + U(0, exponential/2)` ("Equal Jitter").
    EqualJitter,
    /// `min(maxDelay, U(initialDelay, 3 · previous))` ("Decorrelated Jitter").
    DecorrelatedJitter,
}

impl BackoffStrategy {
    /// Every strategy, in declaration order.
    pub const ALL: [BackoffStrategy; 6] = [
        BackoffStrategy::Fixed,
        BackoffStrategy::Exponential,
        BackoffStrategy::ExponentialJitter,
        BackoffStrategy::FullJitter,
        BackoffStrategy::EqualJitter,
        BackoffStrategy::DecorrelatedJitter,
    ];

    /// The name as written in a manifest (e.g. `FullJitter`).
    pub fn name(self) -> &'static str {
        match self {
            BackoffStrategy::Fixed => "Fixed",
            BackoffStrategy::Exponential => "Exponential",
            BackoffStrategy::ExponentialJitter => "ExponentialJitter",
            BackoffStrategy::FullJitter => "FullJitter",
            BackoffStrategy::EqualJitter => "EqualJitter",
            BackoffStrategy::DecorrelatedJitter => "DecorrelatedJitter",
        }
    }
}

impl std::str::FromStr for BackoffStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackoffStrategy::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = BackoffStrategy::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown strategy {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Backoff parameters (`spec.backoff`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.initialDelay.matches('[dw]') || self.maxDelay.matches('[dw]') || duration(self.maxDelay) >= duration(self.initialDelay)",
        "message": "maxDelay must be >= initialDelay"
    },
    {
        "rule": "!(has(self.jitter) && has(self.jitterRatio))",
        "message": "set at most one of jitter and jitterRatio"
    },
    {
        "rule": "self.strategy == 'ExponentialJitter' ? (has(self.jitter) || has(self.jitterRatio)) : !(has(self.jitter) || has(self.jitterRatio))",
        "message": "ExponentialJitter needs jitter or jitterRatio; other strategies take neither"
    }
]))]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct BackoffSpec {
    /// Backoff strategy.
    #[serde(default)]
    pub strategy: BackoffStrategy,
    /// Delay before the first retry (default `1s`).
    #[serde(default = "default_initial_delay")]
    pub initial_delay: Duration,
    /// Growth factor per retry (≥ 1, default 2).
    #[serde(default = "default_multiplier")]
    #[schemars(range(min = 1.0, max = 1000.0))]
    pub multiplier: f64,
    /// Upper bound of any delay (≥ initialDelay, default `60s`).
    #[serde(default = "default_max_delay")]
    pub max_delay: Duration,
    /// `ExponentialJitter` only: maximum random delay added to each nominal delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Duration>,
    /// `ExponentialJitter` only: random delay added, as a fraction (0..=1) of the nominal
    /// delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub jitter_ratio: Option<f64>,
}

fn default_initial_delay() -> Duration {
    Duration::new("1s")
}
fn default_multiplier() -> f64 {
    2.0
}
fn default_max_delay() -> Duration {
    Duration::new("60s")
}

impl Default for BackoffSpec {
    fn default() -> Self {
        BackoffSpec {
            strategy: BackoffStrategy::default(),
            initial_delay: default_initial_delay(),
            multiplier: default_multiplier(),
            max_delay: default_max_delay(),
            jitter: None,
            jitter_ratio: None,
        }
    }
}

/// What to do with an error class that is in neither list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ClassificationDefault {
    /// Retry it (bounded by `maxRetries` / `maxRetryDuration`).
    #[default]
    Retry,
    /// Dead-letter it at once.
    DeadLetter,
}

/// Failure classification (`spec.classification`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct Classification {
    /// Classes that are retried (default: the transient ones).
    #[serde(default = "default_retryable")]
    pub retryable: Vec<ErrorClass>,
    /// Classes that go to the dead-letter queue at once (default: Validation, Parse,
    /// Poison).
    #[serde(default = "default_dead_letter")]
    pub dead_letter: Vec<ErrorClass>,
    /// Decision for a class in neither list.
    #[serde(default)]
    pub default: ClassificationDefault,
}

fn default_retryable() -> Vec<ErrorClass> {
    ErrorClass::ALL[..6].to_vec()
}
fn default_dead_letter() -> Vec<ErrorClass> {
    ErrorClass::ALL[6..].to_vec()
}

impl Default for Classification {
    fn default() -> Self {
        Classification {
            retryable: default_retryable(),
            dead_letter: default_dead_letter(),
            default: ClassificationDefault::default(),
        }
    }
}

impl Classification {
    /// Whether a failure of class `class` is retried (`true`) or dead-lettered at once.
    /// An unclassified failure (`None`: e.g. a plain `basic.reject` seen by the retry
    /// router) is in neither list, so `default` decides.
    pub fn is_retryable(&self, class: impl Into<Option<ErrorClass>>) -> bool {
        let Some(class) = class.into() else {
            return self.default == ClassificationDefault::Retry;
        };
        if self.dead_letter.contains(&class) {
            false
        } else if self.retryable.contains(&class) {
            true
        } else {
            self.default == ClassificationDefault::Retry
        }
    }
}

/// Observed state of a RetryPolicy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicyStatus {
    /// `Ready` condition (Kubernetes API conventions).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Generation the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nominal delay of each retry attempt, first retry first.
    #[serde(default)]
    pub schedule: Vec<String>,
    /// Resolved delay tiers (one delay queue each).
    #[serde(default)]
    pub tiers: Vec<String>,
    /// Longest time a message can spend retrying (sum of the tier delays it waits in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_case_retry_duration: Option<String>,
}

impl RetryPolicySpec {
    /// Checks every rule the schema states (and those it cannot), naming each bad field.
    ///
    /// # Errors
    /// [`InvalidSpec`] listing every invalid field with its path under `spec.`.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut errs = Errors::default();
        if self.max_retries > 100 {
            errs.push(
                "spec.maxRetries",
                format!("{} is out of range 0..=100", self.max_retries),
            );
        }
        self.backoff.check_delays(&mut errs, self.tiers.is_none());
        self.backoff.check_jitter(&mut errs);
        if let Some(d) = &self.max_retry_duration {
            if errs.duration("spec.maxRetryDuration", d) == Some(0) {
                errs.push("spec.maxRetryDuration", "must be greater than 0");
            }
        }
        if let Some(tiers) = &self.tiers {
            check_tiers(&mut errs, tiers);
        }
        for c in &self.classification.retryable {
            if self.classification.dead_letter.contains(c) {
                errs.push(
                    "spec.classification",
                    format!("{} is both retryable and deadLetter", c.name()),
                );
            }
        }
        errs.finish()
    }
}

impl BackoffSpec {
    /// `initialDelay` (above 0), `maxDelay` (at least `initialDelay`; at most 365d when
    /// `derived_tiers`, the tiers being derived from the schedule) and `multiplier` (1 to
    /// 1000).
    fn check_delays(&self, errs: &mut Errors, derived_tiers: bool) {
        let initial = errs.duration("spec.backoff.initialDelay", &self.initial_delay);
        let max = errs.duration("spec.backoff.maxDelay", &self.max_delay);
        if initial == Some(0) {
            errs.push("spec.backoff.initialDelay", "must be greater than 0");
        }
        if derived_tiers && max.is_some_and(|m| m > crate::duration::MAX_TTL_MS) {
            errs.push(
                "spec.backoff.maxDelay",
                format!(
                    "{} is longer than the maximum tier of 365d (tiers are derived from the schedule)",
                    self.max_delay
                ),
            );
        }
        if let (Some(i), Some(m)) = (initial, max) {
            if m < i {
                errs.push(
                    "spec.backoff.maxDelay",
                    format!(
                        "{} is less than initialDelay {}; maxDelay must be >= initialDelay",
                        self.max_delay, self.initial_delay
                    ),
                );
            }
        }
        if let Some(why) = super::out_of_range(self.multiplier, 1.0, true, 1000.0) {
            errs.push(
                "spec.backoff.multiplier",
                format!(
                    "{} {why}: the valid range is 1 to 1000 (each delay is the previous one times the multiplier)",
                    super::readable_number(self.multiplier)
                ),
            );
        }
    }

    /// `jitter` (a duration) or `jitterRatio` (0 to 1): at most one, required by
    /// `ExponentialJitter` and taken by no other strategy.
    fn check_jitter(&self, errs: &mut Errors) {
        if let Some(j) = &self.jitter {
            errs.duration("spec.backoff.jitter", j);
        }
        if let Some(r) = self.jitter_ratio {
            if let Some(why) = super::out_of_range(r, 0.0, true, 1.0) {
                errs.push(
                    "spec.backoff.jitterRatio",
                    format!(
                        "{} {why}: the valid range is 0 to 1 (a fraction of the delay)",
                        super::readable_number(r)
                    ),
                );
            }
        }
        if self.jitter.is_some() && self.jitter_ratio.is_some() {
            errs.push(
                "spec.backoff.jitterRatio",
                "set at most one of jitter and jitterRatio",
            );
        }
        let has_jitter = self.jitter.is_some() || self.jitter_ratio.is_some();
        if self.strategy == BackoffStrategy::ExponentialJitter && !has_jitter {
            errs.push(
                "spec.backoff.jitter",
                "ExponentialJitter needs backoff.jitter (a duration) or backoff.jitterRatio (0..=1)",
            );
        }
        if self.strategy != BackoffStrategy::ExponentialJitter && has_jitter {
            errs.push(
                "spec.backoff.strategy",
                format!(
                    "jitter/jitterRatio apply only to ExponentialJitter, not {}",
                    self.strategy.name()
                ),
            );
        }
    }
}

/// `spec.tiers`: 1 to 32 durations, each above 0 and at most 365d.
fn check_tiers(errs: &mut Errors, tiers: &[Duration]) {
    if tiers.is_empty() || tiers.len() > 32 {
        errs.push("spec.tiers", "must list 1 to 32 durations");
    }
    for (i, t) in tiers.iter().enumerate() {
        let field = format!("spec.tiers[{i}]");
        match errs.duration(&field, t) {
            Some(0) => errs.push(field, "must be greater than 0"),
            Some(ms) if ms > crate::duration::MAX_TTL_MS => {
                errs.push(field, format!("{t} is longer than the maximum of 365d"))
            }
            Some(_) | None => {}
        }
    }
}
