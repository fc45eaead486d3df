//! Validation of a DeadLetterQueue's spec: every rule the schema states (an API server
//! may not have applied it, and a manifest read without a cluster never met it) and those
//! it cannot state, each error naming its field.

use super::{
    BaselineMode, DeadLetterQueueSpec, DeadLetterSpec, MonitoringSpec, PartitionBy,
    MAX_ALERT_DURATION_MS, MAX_NAME_BYTES, MAX_THRESHOLD_FACTOR, MIN_MONITORING_INTERVAL_MS,
};
use crate::crd::{out_of_range, readable_number, BrokerType, Errors, InvalidSpec};
use crate::redis_keys::Keys;

/// Shortest and longest `spec.source.visibilityTimeout`, ms.
const VISIBILITY_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 100..=86_400_000;

impl DeadLetterQueueSpec {
    /// Checks every rule the schema states (and those it cannot), naming each bad field.
    ///
    /// # Errors
    /// [`InvalidSpec`] listing every invalid field with its path under `spec.`.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut errs = Errors::default();
        self.check_broker(&mut errs);
        match self.broker.type_ {
            BrokerType::RabbitMQ => {
                self.check_source_names(&mut errs);
                self.check_planned_names(&mut errs);
                self.check_source_delivery(&mut errs);
                self.check_partition_names(&mut errs);
                self.check_router(&mut errs);
                self.check_no_redis_fields(&mut errs);
            }
            BrokerType::Redis => self.check_redis_source(&mut errs),
        }
        check_object_name(
            &mut errs,
            "spec.retryPolicyRef.name",
            &self.retry_policy_ref.name,
        );
        self.dead_letter.check(&mut errs);
        self.monitoring.check(&mut errs);
        errs.finish()
    }

    /// `spec.broker`: the Secret's name, the vhost (addressable through the management
    /// API's URLs), the policy priority (0 to 10000).
    fn check_broker(&self, errs: &mut Errors) {
        check_object_name(
            errs,
            "spec.broker.secretRef.name",
            &self.broker.secret_ref.name,
        );
        if self.broker.vhost.is_empty() {
            errs.push("spec.broker.vhost", "must not be empty");
        } else if self.broker.vhost == "." || self.broker.vhost == ".." {
            errs.push(
                "spec.broker.vhost",
                "\".\" and \"..\" cannot be addressed through the management API's URLs",
            );
        } else if self.broker.vhost.chars().any(char::is_control) {
            errs.push("spec.broker.vhost", "must not contain control characters");
        }
        if !(0..=10_000).contains(&self.broker.policy_priority) {
            errs.push(
                "spec.broker.policyPriority",
                format!("{} is out of range 0..=10000", self.broker.policy_priority),
            );
        }
    }

    /// `spec.source.queue` (a RabbitMQ name short enough for the names derived from it)
    /// and `spec.source.exchange`.
    fn check_source_names(&self, errs: &mut Errors) {
        check_name(errs, "spec.source.queue", &self.source.queue);
        // Derived names (`<queue>.retry.<tier>`, `<queue>.dlq.<class>`) must fit too.
        if self.source.queue.len() > 200 {
            errs.push(
                "spec.source.queue",
                "longer than 200 bytes: derived retry and dead-letter names would exceed RabbitMQ's 255-byte limit",
            );
        }
        if let Some(e) = &self.source.exchange {
            if e.chars().any(char::is_control) {
                errs.push(
                    "spec.source.exchange",
                    "must not contain control characters",
                );
            }
            if e.is_empty() {
                errs.push(
                    "spec.source.exchange",
                    "must not be empty (omit it to publish through the default exchange)",
                );
            }
        }
    }

    /// `spec.source` of a Redis DeadLetterQueue: a stream with its group (the keys the
    /// operator derives from it must share its hash slot, [`Keys`]), a dead-letter key in
    /// the same slot, a visibility timeout in range, and none of the RabbitMQ-only fields.
    fn check_redis_source(&self, errs: &mut Errors) {
        const FOR_RABBITMQ: &str = "is for RabbitMQ; a Redis DeadLetterQueue names spec.source.stream and spec.source.group (docs/REDIS.md)";
        if !self.source.queue.is_empty() {
            errs.push("spec.source.queue", FOR_RABBITMQ);
        }
        let defaults = rabbitmq_defaults();
        for (field, set) in [
            ("spec.source.exchange", self.source.exchange.is_some()),
            ("spec.source.routingKey", self.source.routing_key.is_some()),
            (
                "spec.deadLetter.exchange",
                self.dead_letter.exchange.is_some(),
            ),
            (
                "spec.deadLetter.partitionBy",
                self.dead_letter.partition_by != PartitionBy::None,
            ),
            // Fields with defaults: only a value other than the default is refused.
            (
                "spec.source.queueType",
                self.source.queue_type != defaults.source.queue_type,
            ),
            (
                "spec.source.manage",
                self.source.manage != defaults.source.manage,
            ),
            (
                "spec.source.deliveryLimit",
                self.source.delivery_limit != defaults.source.delivery_limit,
            ),
            (
                "spec.broker.vhost",
                self.broker.vhost != defaults.broker.vhost,
            ),
            (
                "spec.broker.policyPriority",
                self.broker.policy_priority != defaults.broker.policy_priority,
            ),
            (
                "spec.broker.queueSettings",
                self.broker.queue_settings != defaults.broker.queue_settings,
            ),
            (
                "spec.deadLetter.retention",
                self.dead_letter.retention != defaults.dead_letter.retention,
            ),
            ("spec.router.enabled", self.router.enabled),
        ] {
            if set {
                errs.push(field, FOR_RABBITMQ);
            }
        }
        match (&self.source.stream, &self.source.group) {
            (None, _) => errs.push(
                "spec.source.stream",
                "required for spec.broker.type: Redis: the stream the consumers read with a consumer group",
            ),
            (Some(_), None) => errs.push(
                "spec.source.group",
                "required with spec.source.stream: the consumer group the consumers read it with",
            ),
            (Some(stream), Some(group)) => self.check_redis_keys(errs, stream, group),
        }
        if let Some(t) = &self.source.visibility_timeout {
            match t.as_ms() {
                Ok(ms) if VISIBILITY_TIMEOUT_MS.contains(&ms) => {}
                Ok(_) => errs.push("spec.source.visibilityTimeout", "out of range 100ms..=24h"),
                Err(e) => errs.push("spec.source.visibilityTimeout", e.to_string()),
            }
        }
    }

    /// The stream's key, its group's name and a named dead-letter key (in the stream's
    /// slot, none of the operator's own keys).
    fn check_redis_keys(&self, errs: &mut Errors, stream: &str, group: &str) {
        if stream.chars().any(char::is_control) {
            errs.push("spec.source.stream", "must not contain control characters");
        }
        if group.is_empty() || group.chars().any(char::is_control) {
            errs.push(
                "spec.source.group",
                "must be a non-empty name without control characters",
            );
        }
        match Keys::new(stream, self.dead_letter.queue.as_deref(), None) {
            Err(e) => errs.push("spec.source.stream", e.to_string()),
            Ok(keys) => {
                if let Some(dead) = &self.dead_letter.queue {
                    if dead == stream {
                        errs.push("spec.deadLetter.queue", "must not be the source stream");
                    } else if keys.own().iter().any(|k| k == dead) {
                        errs.push(
                            "spec.deadLetter.queue",
                            format!("{dead:?} is one of the keys the operator keeps for this stream; choose another name"),
                        );
                    } else if dead.is_empty() || dead.chars().any(char::is_control) {
                        errs.push(
                            "spec.deadLetter.queue",
                            "must be a non-empty key without control characters",
                        );
                    } else if let Err(e) = keys.check_same_slot(dead) {
                        errs.push("spec.deadLetter.queue", e);
                    }
                }
            }
        }
    }

    /// The Redis-only fields of a RabbitMQ DeadLetterQueue.
    fn check_no_redis_fields(&self, errs: &mut Errors) {
        const FOR_REDIS: &str = "is for spec.broker.type: Redis; this DeadLetterQueue is on RabbitMQ: remove the field, or set spec.broker.type: Redis (docs/REDIS.md)";
        for (field, set) in [
            ("spec.source.stream", self.source.stream.is_some()),
            ("spec.source.group", self.source.group.is_some()),
            (
                "spec.source.visibilityTimeout",
                self.source.visibility_timeout.is_some(),
            ),
        ] {
            if set {
                errs.push(field, FOR_REDIS);
            }
        }
    }

    /// Planned names must not collide ([`crate::topology::plan`]): the dead-letter route,
    /// the retry exchange and the source must be distinct objects.
    fn check_planned_names(&self, errs: &mut Errors) {
        let q = self.source.queue.as_str();
        let dlq = self.dead_letter_queue_name();
        let dlx = self.dead_letter_exchange_name();
        if dlq == q || dlq.starts_with(&format!("{}.", self.retry_exchange_name())) {
            errs.push(
                "spec.deadLetter.queue",
                format!("{dlq:?} collides with the source queue or its retry tiers"),
            );
        }
        if self
            .dead_letter_queue_names()
            .iter()
            .any(|(name, class)| class.is_some() && name == q)
        {
            errs.push(
                "spec.deadLetter.queue",
                format!("a partition {dlq:?}.<class> would be named like the source queue {q:?}"),
            );
        }
        if dlx == self.retry_exchange_name() || Some(&dlx) == self.source.exchange.as_ref() {
            errs.push(
                "spec.deadLetter.exchange",
                format!("{dlx:?} collides with the retry exchange or spec.source.exchange"),
            );
        }
    }

    /// `spec.source.deliveryLimit` (1 to 1000000) and `spec.source.routingKey` (only with
    /// an exchange, an AMQP short string).
    fn check_source_delivery(&self, errs: &mut Errors) {
        if !(1..=1_000_000).contains(&self.source.delivery_limit) {
            errs.push(
                "spec.source.deliveryLimit",
                format!("{} is out of range 1..=1000000", self.source.delivery_limit),
            );
        }
        if let Some(key) = &self.source.routing_key {
            if key.chars().any(char::is_control) {
                errs.push(
                    "spec.source.routingKey",
                    "must not contain control characters",
                );
            }
            if self.source.exchange.is_none() {
                errs.push(
                    "spec.source.routingKey",
                    "applies only with spec.source.exchange (the binding it names)",
                );
            }
            if key.len() > MAX_NAME_BYTES {
                errs.push(
                    "spec.source.routingKey",
                    format!(
                        "{} bytes is longer than AMQP's limit of {MAX_NAME_BYTES}",
                        key.len()
                    ),
                );
            }
        }
    }

    /// `spec.router`: the prefetch (1 to 10000) and backlog threshold (at least 1), and in
    /// router mode an inbox name (`<source>.router`, queue and exchange) that no other
    /// planned or referenced object has.
    fn check_router(&self, errs: &mut Errors) {
        if !(1..=10_000).contains(&self.router.prefetch) {
            errs.push(
                "spec.router.prefetch",
                format!("{} is out of range 1..=10000", self.router.prefetch),
            );
        }
        if self.router.backlog_threshold == 0 {
            errs.push("spec.router.backlogThreshold", "must be at least 1");
        }
        if !self.router.enabled {
            return;
        }
        let inbox = self.router_inbox_name();
        let queues = self.dead_letter_queue_names();
        if queues.iter().any(|(name, _)| *name == inbox) {
            errs.push(
                "spec.deadLetter.queue",
                format!("{inbox:?} is the router inbox's name in router mode; choose another dead-letter queue name"),
            );
        }
        if self.dead_letter_exchange_name() == inbox
            || self.source.exchange.as_ref() == Some(&inbox)
        {
            errs.push(
                "spec.router.enabled",
                format!("the router inbox exchange {inbox:?} would collide with spec.deadLetter.exchange or spec.source.exchange; rename that exchange"),
            );
        }
    }

    /// With `partitionBy: ErrorClass`, the longest partition name
    /// (`<dead-letter queue>.connection-refused`) must fit RabbitMQ's limit.
    fn check_partition_names(&self, errs: &mut Errors) {
        let dlq = self.dead_letter_queue_name();
        if self.dead_letter.partition_by == PartitionBy::ErrorClass
            && dlq.len() + ".connection-refused".len() > MAX_NAME_BYTES
        {
            errs.push(
                "spec.deadLetter.queue",
                format!("too long for partitions: {dlq:?}.<class> would exceed RabbitMQ's {MAX_NAME_BYTES}-byte limit"),
            );
        }
    }
}

impl DeadLetterSpec {
    /// Records every invalid field of `spec.deadLetter` in `errs`: the names, the
    /// retention (above 0, at most 365d), the max length (at least 1).
    fn check(&self, errs: &mut Errors) {
        if let Some(q) = &self.queue {
            check_name(errs, "spec.deadLetter.queue", q);
        }
        if let Some(x) = &self.exchange {
            check_name(errs, "spec.deadLetter.exchange", x);
        }
        match errs.duration("spec.deadLetter.retention", &self.retention) {
            Some(0) => errs.push("spec.deadLetter.retention", "must be greater than 0"),
            Some(ms) if ms > crate::duration::MAX_TTL_MS => errs.push(
                "spec.deadLetter.retention",
                format!("{} is longer than the maximum of 365d", self.retention),
            ),
            Some(_) | None => {}
        }
        if self.max_length == 0 {
            errs.push("spec.deadLetter.maxLength", "must be at least 1");
        } else if i64::try_from(self.max_length).is_err() {
            // RabbitMQ's max-length and Redis's MAXLEN are signed 64-bit integers.
            errs.push(
                "spec.deadLetter.maxLength",
                format!("{} is larger than {}", self.max_length, i64::MAX),
            );
        }
    }
}

impl MonitoringSpec {
    /// Records every invalid field of `spec.monitoring` in `errs` (used by
    /// [`DeadLetterQueueSpec::validate`] and by [`crate::monitor::Params::from_spec`]).
    pub(crate) fn check(&self, errs: &mut Errors) {
        let interval = self.check_durations(errs);
        self.check_baseline(errs, interval);
        self.check_threshold(errs);
        if self.min_headroom == 0 {
            errs.push("spec.monitoring.minHeadroom", "must be at least 1");
        }
        if let Some(g) = self.growth_per_minute {
            if let Some(why) = out_of_range(g, 0.0, false, f64::MAX) {
                errs.push(
                    "spec.monitoring.growthPerMinute",
                    format!(
                        "{} {why}: must be a finite number of messages per minute greater than 0 (0 would always alert)",
                        readable_number(g)
                    ),
                );
            }
        }
    }

    /// The poll interval (at least [`MIN_MONITORING_INTERVAL_MS`]), `for` and
    /// `keepFiringFor` (at most [`MAX_ALERT_DURATION_MS`]); returns the interval in ms
    /// when it parses.
    fn check_durations(&self, errs: &mut Errors) -> Option<u64> {
        let interval = errs.duration("spec.monitoring.interval", &self.interval);
        if interval.is_some_and(|ms| ms < MIN_MONITORING_INTERVAL_MS) {
            errs.push(
                "spec.monitoring.interval",
                "must be at least 100ms (each poll lists every queue of the vhost)",
            );
        }
        // Prometheus durations end near 292 years; a `for` beyond a year is a typo.
        let at_most_a_year = |errs: &mut Errors, field: &str, ms: Option<u64>| {
            if ms.is_some_and(|ms| ms > MAX_ALERT_DURATION_MS) {
                errs.push(field, "must be at most 365d");
            }
        };
        let for_ms = errs.duration("spec.monitoring.for", &self.for_);
        at_most_a_year(errs, "spec.monitoring.for", for_ms);
        if let Some(k) = &self.keep_firing_for {
            let ms = errs.duration("spec.monitoring.keepFiringFor", k);
            at_most_a_year(errs, "spec.monitoring.keepFiringFor", ms);
        }
        interval
    }

    /// `spec.monitoring.baseline`: `value` only for a static baseline, `window` only for
    /// a rolling one, holding at least two polls of `interval_ms`.
    fn check_baseline(&self, errs: &mut Errors, interval_ms: Option<u64>) {
        match self.baseline.mode {
            BaselineMode::Static => {
                if self.baseline.window.is_some() {
                    errs.push(
                        "spec.monitoring.baseline.window",
                        "applies only to mode Rolling",
                    );
                }
            }
            BaselineMode::Rolling => {
                if self.baseline.value.is_some() {
                    errs.push(
                        "spec.monitoring.baseline.value",
                        "applies only to mode Static",
                    );
                }
                if let Some(w) = &self.baseline.window {
                    let window = errs.duration("spec.monitoring.baseline.window", w);
                    if let (Some(w), Some(i)) = (window, interval_ms) {
                        if w < 2 * i {
                            errs.push(
                                "spec.monitoring.baseline.window",
                                format!(
                                    "must hold at least two polls (>= 2 × interval {})",
                                    self.interval.0
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    /// `threshold` or `thresholdFactor` (at most one; a factor in (0, 1000000]), each
    /// above a static baseline.
    fn check_threshold(&self, errs: &mut Errors) {
        if self.threshold.is_some() && self.threshold_factor.is_some() {
            errs.push(
                "spec.monitoring.thresholdFactor",
                "set at most one of threshold and thresholdFactor",
            );
        }
        if let Some(f) = self.threshold_factor {
            if let Some(why) = out_of_range(f, 0.0, false, MAX_THRESHOLD_FACTOR) {
                errs.push(
                    "spec.monitoring.thresholdFactor",
                    format!(
                        "{} {why}: must be a number greater than 0 and at most 1000000",
                        readable_number(f)
                    ),
                );
            } else if self.baseline.mode == BaselineMode::Static && f <= 1.0 {
                // As for an absolute threshold: T = f × B must lie above a static B.
                errs.push(
                    "spec.monitoring.thresholdFactor",
                    format!("{} must be greater than 1 with a static baseline (threshold = factor × baseline)", readable_number(f)),
                );
            }
        }
        if let (BaselineMode::Static, Some(t)) = (self.baseline.mode, self.threshold) {
            let b = self.baseline.value.unwrap_or(0);
            if t <= b {
                errs.push(
                    "spec.monitoring.threshold",
                    format!("{t} must be greater than the static baseline {b}"),
                );
            }
        }
    }
}

/// Checks that `name` can name a Kubernetes object (a Secret or RetryPolicy): a DNS
/// subdomain per RFC 1123 as Kubernetes requires for object names (API conventions,
/// "Names"): lower-case letters, digits, `-` and `.`, starting and ending with a letter
/// or digit, at most 253 characters.
fn check_object_name(errs: &mut Errors, field: &str, name: &str) {
    if name.is_empty() {
        errs.push(field, "must not be empty");
        return;
    }
    if !crate::crd::is_rfc1123_subdomain(name) {
        errs.push(
            field,
            format!(
                "{name:?} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253)"
            ),
        );
    }
}

/// Checks a RabbitMQ queue or exchange name: not empty, at most [`MAX_NAME_BYTES`], not
/// `amq.`-reserved, no control characters.
fn check_name(errs: &mut Errors, field: &str, name: &str) {
    if name.is_empty() {
        errs.push(field, "must not be empty");
    } else if name.len() > MAX_NAME_BYTES {
        errs.push(
            field,
            format!(
                "{} bytes is longer than RabbitMQ's limit of {MAX_NAME_BYTES}",
                name.len()
            ),
        );
    } else if name.starts_with("amq.") {
        errs.push(
            field,
            "names starting with \"amq.\" are reserved by RabbitMQ",
        );
    } else if name.chars().any(char::is_control) {
        errs.push(
            field,
            "must not contain control characters (RabbitMQ strips them, so the operator's exact-name policy would not match)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(secret: &str, policy: &str) -> DeadLetterQueueSpec {
        serde_json::from_value(serde_json::json!({
            "broker": {"secretRef": {"name": secret}},
            "source": {"queue": "orders"},
            "retryPolicyRef": {"name": policy},
        }))
        .expect("spec")
    }

    #[test]
    fn monitoring_settings_that_could_never_alert_or_always_alert_are_refused() {
        let check = |m: serde_json::Value| -> Vec<String> {
            let mut s = spec("s", "p");
            s.monitoring = serde_json::from_value(m).expect("monitoring");
            match s.validate() {
                Ok(()) => Vec::new(),
                Err(e) => e.0.iter().map(|f| f.field.clone()).collect(),
            }
        };
        let field = |f: &str| vec![format!("spec.monitoring.{f}")];
        assert_eq!(
            check(serde_json::json!({"growthPerMinute": 0.0})),
            field("growthPerMinute")
        );
        assert_eq!(
            check(
                serde_json::json!({"baseline": {"mode": "Static", "value": 100}, "thresholdFactor": 0.5})
            ),
            field("thresholdFactor")
        );
        assert_eq!(
            check(serde_json::json!({"thresholdFactor": 1e308})),
            field("thresholdFactor")
        );
        assert_eq!(
            check(
                serde_json::json!({"interval": "2s", "baseline": {"mode": "Rolling", "window": "1ms"}})
            ),
            field("baseline.window")
        );
        assert_eq!(check(serde_json::json!({"for": "366d"})), field("for"));
        assert_eq!(
            check(serde_json::json!({"keepFiringFor": "999999999w"})),
            field("keepFiringFor")
        );
        // What stays valid: a factor below 1 on a rolling baseline (minHeadroom bounds it).
        assert!(check(
            serde_json::json!({"baseline": {"mode": "Rolling", "window": "1h"},
            "thresholdFactor": 0.5, "for": "365d", "growthPerMinute": 0.1})
        )
        .is_empty());
    }

    #[test]
    fn router_settings_and_the_inbox_name_are_checked() {
        let fields = |router: serde_json::Value, dead_letter: serde_json::Value| -> Vec<String> {
            let mut s = spec("s", "p");
            s.router = serde_json::from_value(router).expect("router");
            s.dead_letter = serde_json::from_value(dead_letter).expect("deadLetter");
            match s.validate() {
                Ok(()) => Vec::new(),
                Err(e) => e.0.iter().map(|f| f.field.clone()).collect(),
            }
        };
        let none = serde_json::json!({});
        assert!(fields(serde_json::json!({"enabled": true}), none.clone()).is_empty());
        assert_eq!(
            fields(serde_json::json!({"prefetch": 0}), none.clone()),
            ["spec.router.prefetch"]
        );
        assert_eq!(
            fields(serde_json::json!({"backlogThreshold": 0}), none.clone()),
            ["spec.router.backlogThreshold"]
        );
        let named_like_the_inbox = serde_json::json!({"queue": "orders.router"});
        // Only router mode plans the inbox: the name is free without it.
        assert!(fields(none.clone(), named_like_the_inbox.clone()).is_empty());
        assert_eq!(
            fields(serde_json::json!({"enabled": true}), named_like_the_inbox),
            ["spec.deadLetter.queue"]
        );
        assert_eq!(
            fields(
                serde_json::json!({"enabled": true}),
                serde_json::json!({"exchange": "orders.router"})
            ),
            ["spec.router.enabled"]
        );
    }

    #[test]
    fn the_monitoring_interval_has_a_floor() {
        for (interval, ok) in [
            ("0s", false),
            ("99ms", false),
            ("100ms", true),
            ("15s", true),
        ] {
            let mut s = spec("s", "p");
            s.monitoring.interval = crate::duration::Duration(interval.into());
            match s.validate() {
                Ok(()) => assert!(ok, "{interval} accepted"),
                Err(e) => {
                    assert!(!ok, "{interval}: {e}");
                    assert_eq!(e.0[0].field, "spec.monitoring.interval");
                }
            }
        }
    }

    #[test]
    fn references_must_be_kubernetes_object_names() {
        assert!(spec("rabbit-mq.prod", "p1").validate().is_ok());
        for bad in [
            "",
            " ",
            "Bad_Name",
            "../other/secrets/x",
            "-x",
            "x.",
            "a..b",
        ] {
            let err = spec(bad, "p1").validate().expect_err(bad);
            assert_eq!(err.0[0].field, "spec.broker.secretRef.name", "{bad:?}");
            let err = spec("rabbit", bad).validate().expect_err(bad);
            assert_eq!(err.0[0].field, "spec.retryPolicyRef.name", "{bad:?}");
        }
        let long = "a".repeat(254);
        assert!(spec(&long, "p").validate().is_err());
    }
}

/// A RabbitMQ DeadLetterQueue's spec with every default, to tell the RabbitMQ-only fields a
/// Redis DeadLetterQueue sets from those it leaves alone; decoded once per process.
fn rabbitmq_defaults() -> &'static DeadLetterQueueSpec {
    static DEFAULTS: std::sync::LazyLock<DeadLetterQueueSpec> = std::sync::LazyLock::new(|| {
        // Every field with a default, the required ones named: this decodes.
        serde_json::from_value(serde_json::json!({
            "broker": {"secretRef": {"name": "s"}},
            "source": {"queue": "q"},
            "retryPolicyRef": {"name": "p"},
        }))
        .unwrap_or_else(|e| unreachable!("a spec of defaults decodes: {e}"))
    });
    &DEFAULTS
}

#[cfg(test)]
mod redis_tests {
    use crate::crd::DeadLetterQueueSpec;

    fn spec(source: serde_json::Value, extra: serde_json::Value) -> DeadLetterQueueSpec {
        let mut v = serde_json::json!({
            "broker": {"type": "Redis", "secretRef": {"name": "redis"}},
            "source": source,
            "retryPolicyRef": {"name": "rp"},
        });
        if let (Some(obj), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in extra {
                obj.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(v).expect("spec")
    }

    fn fields(spec: &DeadLetterQueueSpec) -> Vec<String> {
        match spec.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.0.into_iter().map(|f| f.field).collect(),
        }
    }

    #[test]
    fn a_stream_with_its_group_is_valid() {
        let ok = spec(
            serde_json::json!({"stream": "orders", "group": "workers", "visibilityTimeout": "5s"}),
            serde_json::json!({"deadLetter": {"queue": "{orders}:dead"}}),
        );
        assert_eq!(fields(&ok), Vec::<String>::new());
    }

    #[test]
    fn each_redis_mistake_names_its_field() {
        let no_group = spec(
            serde_json::json!({"stream": "orders"}),
            serde_json::json!({}),
        );
        assert_eq!(fields(&no_group), ["spec.source.group"]);
        let no_stream = spec(
            serde_json::json!({"queue": "orders"}),
            serde_json::json!({}),
        );
        assert_eq!(
            fields(&no_stream),
            ["spec.source.queue", "spec.source.stream"]
        );
        let untaggable = spec(
            serde_json::json!({"stream": "a}b", "group": "g"}),
            serde_json::json!({}),
        );
        assert_eq!(fields(&untaggable), ["spec.source.stream"]);
        let other_slot = spec(
            serde_json::json!({"stream": "orders", "group": "g", "visibilityTimeout": "10ms"}),
            serde_json::json!({"deadLetter": {"queue": "orders-dead", "exchange": "x"}}),
        );
        assert_eq!(
            fields(&other_slot),
            [
                "spec.deadLetter.exchange",
                "spec.deadLetter.queue",
                "spec.source.visibilityTimeout"
            ]
        );
    }

    #[test]
    fn rabbitmq_settings_and_the_operators_own_keys_are_refused_on_redis() {
        let s = spec(
            serde_json::json!({"stream": "orders", "group": "g", "queueType": "Classic", "deliveryLimit": 5}),
            serde_json::json!({
                "deadLetter": {"queue": "{orders}:dlq:retry", "retention": "1d", "maxLength": u64::MAX},
                "router": {"enabled": true},
            }),
        );
        let mut refused = fields(&s);
        refused.sort();
        assert_eq!(
            refused,
            [
                "spec.deadLetter.maxLength",
                "spec.deadLetter.queue",
                "spec.deadLetter.retention",
                "spec.router.enabled",
                "spec.source.deliveryLimit",
                "spec.source.queueType",
            ]
        );
        let control = spec(
            serde_json::json!({"stream": "a\u{1b}[2J", "group": "g"}),
            serde_json::json!({}),
        );
        assert_eq!(fields(&control), ["spec.source.stream"]);
    }

    #[test]
    fn redis_fields_on_a_rabbitmq_resource_are_refused() {
        let mut s = spec(
            serde_json::json!({"queue": "orders", "stream": "orders", "group": "g"}),
            serde_json::json!({}),
        );
        s.broker.type_ = crate::crd::BrokerType::RabbitMQ;
        assert_eq!(fields(&s), ["spec.source.stream", "spec.source.group"]);
    }
}
