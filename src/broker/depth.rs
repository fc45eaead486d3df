//! Queue depths: the management API listing and the `rabbitmq_prometheus` text format.

use std::collections::BTreeMap;

/// Depth of one queue as reported by the broker's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Ready plus unacknowledged messages.
    pub messages: u64,
    /// Messages ready for delivery.
    pub ready: u64,
    /// Messages delivered but not yet acknowledged.
    pub unacked: u64,
    /// Consumers of the queue, when the listing carries them: the management API's
    /// listing with statistics (not the cheaper `disable_stats=true` one, which has no
    /// `consumers` column: checked on RabbitMQ 3.10.8 and 4.0.5) and the
    /// `rabbitmq_prometheus` family `queue_consumer_count`. `None`: not read, or no
    /// statistics for the queue yet.
    pub consumers: Option<u64>,
}

/// One row of the depth listing `GET /api/queues/{vhost}?columns=name,messages,
/// messages_ready,messages_unacknowledged[,consumers]` (counts absent until the broker's
/// first statistics collection; `consumers` only in a listing with statistics).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct QueueDepthRow {
    /// Queue name.
    pub name: String,
    /// Ready plus unacknowledged messages.
    #[serde(default)]
    pub messages: Option<u64>,
    /// Ready messages.
    #[serde(default)]
    pub messages_ready: Option<u64>,
    /// Unacknowledged messages.
    #[serde(default)]
    pub messages_unacknowledged: Option<u64>,
    /// Consumers (absent without statistics).
    #[serde(default)]
    pub consumers: Option<u64>,
}

/// The depths of a depth listing, by queue name (a queue without statistics yet counts
/// 0). Pure: what [`BrokerTopology::queue_depths`](super::BrokerTopology::queue_depths) does with the management API's answer, and
/// what the collector benchmark measures.
pub fn depths_from_rows(rows: Vec<QueueDepthRow>) -> BTreeMap<String, QueueDepth> {
    rows.into_iter()
        .map(|q| {
            let depth =
                QueueDepth::from_counts(q.messages, q.messages_ready, q.messages_unacknowledged)
                    .with_consumers(q.consumers);
            (q.name, depth)
        })
        .collect()
}

/// The metrics of `rabbitmq_prometheus`'s `queue_coarse_metrics` family read for depths.
const PROM_MESSAGES: &str = "rabbitmq_detailed_queue_messages";
const PROM_READY: &str = "rabbitmq_detailed_queue_messages_ready";
const PROM_UNACKED: &str = "rabbitmq_detailed_queue_messages_unacked";
/// The metric of its `queue_consumer_count` family (RabbitMQ 3.10.8 and 4.0.5: "Consumers
/// on a queue").
const PROM_CONSUMERS: &str = "rabbitmq_detailed_queue_consumers";

/// The depths (and consumers) of `vhost`'s queues from a `rabbitmq_prometheus` answer to
/// `/metrics/detailed?vhost=…&family=queue_coarse_metrics&family=queue_consumer_count`
/// (Prometheus text exposition format 0.0.4: `name{label="value",…} value [timestamp]`,
/// label values escaped with `\\`, `\"` and `\n`). Pure. Samples of other vhosts and other
/// metrics are skipped; a queue without a consumers sample has `consumers: None` (an
/// answer without that family: a plugin that does not have it).
///
/// The general-purpose parser crates were not used: `prometheus-parse` splits label
/// values on `,` and `=` (a queue named `a,b` would be read as `a`, silently giving
/// another queue's depth) and `openmetrics-parser` is LGPL-3.0.
///
/// # Errors
/// A line of one of the four metrics read that does not parse (quoted, with the line
/// number): a depth is never guessed.
pub fn depths_from_prometheus(
    text: &str,
    vhost: &str,
) -> Result<BTreeMap<String, QueueDepth>, String> {
    #[derive(Default)]
    struct Counts {
        messages: Option<u64>,
        ready: Option<u64>,
        unacked: Option<u64>,
        consumers: Option<u64>,
    }
    let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let family = match name {
            PROM_MESSAGES => 0,
            PROM_READY => 1,
            PROM_UNACKED => 2,
            PROM_CONSUMERS => 3,
            _ => continue,
        };
        let bad = |why: &str| format!("line {}: {why}: {:?}", n + 1, truncate(line, 200));
        let (labels, value) = parse_labels(rest).map_err(|e| bad(&e))?;
        let mut tokens = value.split_whitespace();
        let value = tokens.next().ok_or_else(|| bad("no value"))?;
        // At most a timestamp after the value: anything else means the line was cut
        // (RabbitMQ 3.10 does not escape quotes in queue names).
        match (tokens.next(), tokens.next()) {
            (None, _) => {}
            (Some(ts), None) if ts.parse::<i64>().is_ok() => {}
            _ => return Err(bad("unexpected text after the value")),
        }
        let value: f64 = value.parse().map_err(|_| bad("value is not a number"))?;
        if !(value.is_finite() && value >= 0.0) {
            return Err(bad("value is not a count"));
        }
        for (i, (name, _)) in labels.iter().enumerate() {
            if labels[..i].iter().any(|(other, _)| other == name) {
                return Err(bad(&format!("label {name} twice")));
            }
        }
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        if label("vhost").map(String::as_str) != Some(vhost) {
            continue;
        }
        let queue = label("queue").ok_or_else(|| bad("no queue label"))?;
        let c = counts.entry(queue.clone()).or_default();
        let slot = match family {
            0 => &mut c.messages,
            1 => &mut c.ready,
            2 => &mut c.unacked,
            _ => &mut c.consumers,
        };
        if slot.is_some() {
            return Err(bad("the same queue twice"));
        }
        *slot = Some(value as u64);
    }
    Ok(counts
        .into_iter()
        .map(|(name, c)| {
            (
                name,
                QueueDepth::from_counts(c.messages, c.ready, c.unacked).with_consumers(c.consumers),
            )
        })
        .collect())
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Label name and value pairs of one sample.
type LabelPairs = Vec<(String, String)>;

/// Parses `a="x",b="y\"z"} rest` (what follows a metric name's `{`) into the label pairs
/// and the text after `}`.
fn parse_labels(s: &str) -> Result<(LabelPairs, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without `=`")?;
        let name = rest[..eq].trim().to_string();
        if name.is_empty() {
            return Err("empty label name".into());
        }
        let mut chars = rest[eq + 1..].char_indices();
        if !matches!(chars.next(), Some((_, '"'))) {
            return Err(format!("label {name} has no quoted value"));
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("escape at end of line".into()),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.ok_or_else(|| format!("label {name}: unterminated value"))?;
        labels.push((name, value));
        rest = &rest[end..];
    }
}

impl QueueDepth {
    /// A depth from the broker's counts, each absent until its statistics exist: ready
    /// and unacknowledged count 0 then, and the total defaults to their sum. Consumers
    /// unknown ([`QueueDepth::with_consumers`] sets them).
    pub fn from_counts(messages: Option<u64>, ready: Option<u64>, unacked: Option<u64>) -> Self {
        let ready = ready.unwrap_or(0);
        let unacked = unacked.unwrap_or(0);
        QueueDepth {
            messages: messages.unwrap_or(ready + unacked),
            ready,
            unacked,
            consumers: None,
        }
    }

    /// This depth with `consumers` (`None`: unknown).
    pub fn with_consumers(self, consumers: Option<u64>) -> Self {
        QueueDepth { consumers, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_depths_read_escaped_names_and_only_the_vhost() {
        let text = concat!(
            "# TYPE rabbitmq_detailed_queue_messages_ready gauge\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"orders\"} 3\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"orders,eu\"} 40\n",
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"a\\\"b=c\\\\}\"} 5\n",
            "rabbitmq_detailed_queue_messages_unacked{vhost=\"/\",queue=\"orders\"} 2\n",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"orders\"} 5\n",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"orders,eu\"} 40\n",
            "rabbitmq_detailed_queue_messages{vhost=\"other\",queue=\"orders\"} 999\n",
            "rabbitmq_detailed_queue_process_reductions_total{vhost=\"/\",queue=\"orders\"} 12345\n",
            "# TYPE rabbitmq_detailed_queue_consumers gauge\n",
            "rabbitmq_detailed_queue_consumers{vhost=\"/\",queue=\"orders\"} 2\n",
            "rabbitmq_detailed_queue_consumers{vhost=\"/\",queue=\"orders,eu\"} 0\n",
            "rabbitmq_detailed_queue_consumers{vhost=\"other\",queue=\"orders\"} 7\n",
            "rabbitmq_identity_info{rabbitmq_node=\"rabbit@h\"} 1\n",
        );
        let d = depths_from_prometheus(text, "/").expect("parses");
        assert_eq!(
            d.get("orders"),
            Some(&QueueDepth {
                messages: 5,
                ready: 3,
                unacked: 2,
                consumers: Some(2),
            })
        );
        assert_eq!(
            d["orders,eu"].consumers,
            Some(0),
            "0 is a count, not unknown"
        );
        assert_eq!(
            d["a\"b=c\\}"].consumers, None,
            "no consumers sample: unknown"
        );
        assert_eq!(
            d.get("orders,eu").map(|q| q.messages),
            Some(40),
            "comma in a name"
        );
        assert_eq!(
            d.get("a\"b=c\\}").map(|q| (q.messages, q.ready)),
            Some((5, 5)),
            "escaped quote and backslash, no total: ready + unacked"
        );
        assert_eq!(d.len(), 3, "the other vhost is left out: {d:?}");
        let other = depths_from_prometheus(text, "other").expect("parses");
        assert_eq!(
            (other["orders"].messages, other["orders"].consumers),
            (999, Some(7))
        );
    }

    #[test]
    fn listing_rows_carry_consumers_only_when_listed() {
        let rows: Vec<QueueDepthRow> = serde_json::from_str(
            r#"[{"name":"a","messages":4,"messages_ready":3,"messages_unacknowledged":1,"consumers":2},
                {"name":"b","messages":0,"messages_ready":0,"messages_unacknowledged":0,"consumers":0},
                {"name":"c","messages":9,"messages_ready":9,"messages_unacknowledged":0},
                {"name":"new"}]"#,
        )
        .expect("rows");
        let d = depths_from_rows(rows);
        assert_eq!(
            d["a"],
            QueueDepth {
                messages: 4,
                ready: 3,
                unacked: 1,
                consumers: Some(2)
            }
        );
        assert_eq!(d["b"].consumers, Some(0));
        assert_eq!(
            (d["c"].messages, d["c"].consumers),
            (9, None),
            "the listing without statistics has no consumers column"
        );
        assert_eq!(d["new"], QueueDepth::default(), "no statistics yet");
    }

    #[test]
    fn a_malformed_depth_line_is_an_error_not_a_guess() {
        for line in [
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=q} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} lots",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} -1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\"} 1",
            // RabbitMQ 3.10 does not escape label values: a quote in a queue name.
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"x\",queue=\"orders\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"brk9-\"q\\ {{x\"} 1",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q.dlq\"} 0 a\"} 0",
            "rabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} 1\nrabbitmq_detailed_queue_messages{vhost=\"/\",queue=\"q\"} 0",
            "rabbitmq_detailed_queue_consumers{vhost=\"/\",queue=\"q\"} 1\nrabbitmq_detailed_queue_consumers{vhost=\"/\",queue=\"q\"} 0",
            "rabbitmq_detailed_queue_consumers{vhost=\"/\",queue=\"q\"} 0.5e",
        ] {
            let err = depths_from_prometheus(line, "/").expect_err(line);
            assert!(err.starts_with("line "), "{err}");
        }
        // Other metrics may be anything.
        assert!(depths_from_prometheus("other_metric{x=y} z", "/")
            .expect("ignored")
            .is_empty());
    }
}
