use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Errors, InvalidSpec, LocalObjectRef};

/// One replay of a DeadLetterQueue's dead-lettered messages back to where they failed
/// (`DeadLetterReplay`, short name `dlqr`): the `dlq replay` command as a resource. The
/// operator runs it once; its spec cannot change after creation (a new replay is a new
/// object). Semantics: ARCHITECTURE.md "Replay" and "DeadLetterReplay".
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "dlqoperator.io",
    version = "v1alpha1",
    kind = "DeadLetterReplay",
    plural = "deadletterreplays",
    singular = "deadletterreplay",
    shortname = "dlqr",
    namespaced,
    status = "DeadLetterReplayStatus",
    printcolumn = r#"{"name":"DLQ","type":"string","jsonPath":".spec.deadLetterQueueRef.name"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Matched","type":"integer","jsonPath":".status.matched"}"#,
    printcolumn = r#"{"name":"Replayed","type":"integer","jsonPath":".status.replayed"}"#,
    printcolumn = r#"{"name":"Skipped","type":"integer","jsonPath":".status.skipped"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.failed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self == oldSelf",
        "message": "spec is immutable: create a new DeadLetterReplay"
    }
]))]
#[serde(expecting = "a mapping of fields (docs/REFERENCE.md lists them)")]
pub struct DeadLetterReplaySpec {
    /// The DeadLetterQueue (same namespace) whose dead-letter queues are replayed.
    pub dead_letter_queue_ref: LocalObjectRef,
    /// Filter terms, all of which a message must match (the `dlq replay --filter`
    /// syntax): `class=NAME`, `reason=R`, `queue=Q` (each also `!=`), `age>DURATION`,
    /// `age<DURATION`, `header.NAME=VALUE` / `!=`, `id=MESSAGE_ID` / `!=`. Empty: every
    /// message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub filter: Vec<String>,
    /// Replay at most this many messages (unset: every matching message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// Messages per second at most (unset: as fast as the broker confirms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub rate: Option<u32>,
    /// Where replayed messages go (default `OriginalQueue`).
    #[serde(default)]
    pub target: ReplayTarget,
    /// Skip a message already replayed this many times (`dlq-replay-count`), default 3.
    #[serde(default = "default_max_replays")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_replays: u32,
    /// Count what would be replayed, publish nothing (default false).
    #[serde(default)]
    pub dry_run: bool,
    /// At most this many copies in flight whose originals the broker has not yet been
    /// seen to remove: what an operator crash can duplicate (unset: 1000, the fastest;
    /// 1: each original removed before the next copy is published, the slowest). The
    /// `dlq replay --max-in-flight` option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_IN_FLIGHT))]
    pub max_in_flight: Option<u32>,
}

fn default_max_replays() -> u32 {
    3
}

/// The largest `spec.maxInFlight` (and `dlq replay --max-in-flight`), and the default: the
/// replay engine's confirm window ([`crate::dlq::replay::MAX_IN_FLIGHT`] is this).
pub const MAX_IN_FLIGHT: u32 = 1000;

/// Where a DeadLetterReplay sends messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ReplayTarget {
    /// The DeadLetterQueue's source queue through the default exchange: a message that
    /// failed in one of several queues bound to a fanout or topic exchange reaches that
    /// queue only.
    #[default]
    OriginalQueue,
    /// The exchange and routing key the message was first published with
    /// (`dlq-original-exchange`/`-routing-key`, else `x-death`), only when the exchange's
    /// bindings route it to the source queue and to no other queue; otherwise the message
    /// is skipped and stays.
    OriginalExchange,
}

/// Where a DeadLetterReplay is (`status.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ReplayPhase {
    /// Not started: waiting for its DeadLetterQueue, the broker, or an operator.
    #[default]
    Pending,
    /// Messages are being replayed (also after an operator restart, until it resumes).
    Running,
    /// Every matching message was replayed, or skipped for a reason in `status.reasons`.
    Succeeded,
    /// Stopped before the end (the broker lost for three retries): what was replayed is
    /// replayed, the rest is still in the dead-letter queue.
    Partial,
    /// It could not run (invalid spec), or some message could not be replayed (it stays
    /// in the dead-letter queue; `status.reasons` says why).
    Failed,
}

impl ReplayPhase {
    /// `Succeeded`, `Partial` or `Failed`: the replay is over and never runs again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            ReplayPhase::Succeeded | ReplayPhase::Partial | ReplayPhase::Failed
        )
    }
}

/// Observed state of a DeadLetterReplay. Counts are messages; a replay resumed after an
/// operator restart continues them (`replayed` and `inDoubt` add up over every run;
/// `skipped`, `failed` and `reasons` are the latest run's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterReplayStatus {
    /// `Pending`, `Running`, `Succeeded`, `Partial` or `Failed`.
    #[serde(default)]
    pub phase: ReplayPhase,
    /// `Complete`: `True` once finished (reason: the final phase, `InvalidSpec` or `SpecChanged`),
    /// `False` until then (`Running`, `Interrupted`, or why it is `Pending`, e.g.
    /// `DeadLetterQueueNotFound`, `BrokerUnreachable`). A map list keyed by `type`.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Generation the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `dlq-replay-id` stamped on every replayed copy (the object's UID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_id: Option<String>,
    /// RFC 3339 time the replay first started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// Messages read from the dead-letter queues.
    #[serde(default)]
    pub scanned: u64,
    /// Messages the filter took.
    #[serde(default)]
    pub matched: u64,
    /// Messages replayed: the copy confirmed by the broker, the original removed.
    #[serde(default)]
    pub replayed: u64,
    /// Matched messages not replayed on purpose (already replayed `maxReplays` times,
    /// another original queue, a missing exchange, a route reaching another queue;
    /// `reasons` says which).
    #[serde(default)]
    pub skipped: u64,
    /// Matched messages whose copy the broker refused or could not route (they stay).
    #[serde(default)]
    pub failed: u64,
    /// Copies whose fate an operator crash or a lost broker connection left unknown:
    /// published, maybe confirmed, the original maybe still in the dead-letter queue
    /// (then replayed again on resume: a duplicate, never a loss). 0 unless the operator
    /// stopped without draining or a pass lost the broker.
    #[serde(default)]
    pub in_doubt: u64,
    /// Why messages were skipped or failed, with counts (e.g. `skipped: already replayed 3
    /// times (maxReplays): 4`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl DeadLetterReplaySpec {
    /// Checks what the schema cannot: the filter terms parse
    /// ([`crate::filter::Filter::parse`]); and again the ranges the schema has, which
    /// an API server may not have applied (`limit`, `rate`, `maxReplays`, `maxInFlight`).
    ///
    /// # Errors
    /// [`InvalidSpec`] naming `spec.filter[i]` and the parser's reason.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut errors = Errors::default();
        for (i, term) in self.filter.iter().enumerate() {
            if let Err(e) = crate::filter::Filter::parse(std::slice::from_ref(term)) {
                // The term and the reason, without the CLI's `--filter` prefix.
                errors.push(
                    format!("spec.filter[{i}]"),
                    format!("{:?}: {}", e.term, e.reason),
                );
            }
        }
        if self.limit == Some(0) {
            errors.push("spec.limit", "must be at least 1");
        }
        if self.rate == Some(0) {
            errors.push("spec.rate", "must be at least 1 (messages per second)");
        }
        if self.max_replays == 0 {
            errors.push("spec.maxReplays", "must be at least 1");
        }
        if let Some(n) = self.max_in_flight {
            if n == 0 || n > MAX_IN_FLIGHT {
                errors.push(
                    "spec.maxInFlight",
                    format!("{n} is out of range: must be 1 to {MAX_IN_FLIGHT} (copies in flight)"),
                );
            }
        }
        errors.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(filter: &[&str]) -> DeadLetterReplaySpec {
        DeadLetterReplaySpec {
            dead_letter_queue_ref: LocalObjectRef {
                name: "orders".into(),
            },
            filter: filter.iter().map(|s| s.to_string()).collect(),
            limit: None,
            rate: None,
            target: ReplayTarget::default(),
            max_replays: 3,
            dry_run: false,
            max_in_flight: None,
        }
    }

    #[test]
    fn defaults_and_validation_name_the_field() {
        let s: DeadLetterReplaySpec =
            serde_json::from_value(serde_json::json!({"deadLetterQueueRef": {"name": "x"}}))
                .expect("minimal spec decodes");
        assert_eq!(s.max_replays, 3);
        assert_eq!(s.target, ReplayTarget::OriginalQueue);
        assert!(!s.dry_run);
        assert!(s.validate().is_ok());
        assert!(spec(&["class=Timeout", "age>1h"]).validate().is_ok());
        let err = spec(&["class=Timeout", "age>=1h"])
            .validate()
            .expect_err("bad term");
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].field, "spec.filter[1]");
        let mut zero = spec(&[]);
        zero.limit = Some(0);
        zero.rate = Some(0);
        zero.max_replays = 0;
        zero.max_in_flight = Some(0);
        let fields: Vec<String> = zero
            .validate()
            .expect_err("zeros")
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.limit",
                "spec.rate",
                "spec.maxReplays",
                "spec.maxInFlight"
            ]
        );
        let mut big = spec(&[]);
        big.max_in_flight = Some(1001);
        let err = big.validate().expect_err("too big");
        assert_eq!(err.0[0].field, "spec.maxInFlight");
        big.max_in_flight = Some(1000);
        assert!(big.validate().is_ok());
    }

    #[test]
    fn finished_phases() {
        assert!(!ReplayPhase::Pending.is_finished());
        assert!(!ReplayPhase::Running.is_finished());
        for p in [
            ReplayPhase::Succeeded,
            ReplayPhase::Partial,
            ReplayPhase::Failed,
        ] {
            assert!(p.is_finished());
        }
    }
}
