//! The audit trail of the console's actions: one log line per replay, purge or repair, dry runs,
//! refusals and failures included (who, when, what, how many), at target
//! `dlq_operator::console::audit`. Text from the user or the messages is escaped
//! ([`crate::printable::escape`]). The cluster mode is to add Kubernetes Events on the
//! DeadLetterQueue here.

/// One action, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Who (the session's user).
    pub user: &'a str,
    /// `replay`, `replay-dry-run`, `purge`, `purge-dry-run`, `purge-refused`, `repair`,
    /// `repair-refused`.
    pub action: &'a str,
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: &'a str,
    /// Which messages (the filter or group, as shown on the page).
    pub what: &'a str,
    /// Messages replayed or removed (would be, in a dry run).
    pub count: u64,
    /// `ok`, or the error (escaped).
    pub outcome: &'a str,
}

/// Logs `entry` at INFO (a failed outcome at WARN), with the time in RFC 3339; `user`,
/// `what` and `outcome` quoted (free text, with spaces), so each line parses as
/// `key=value` pairs.
pub fn record(entry: &Entry<'_>) {
    use crate::printable::escape;
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (user, what, outcome) = (
        escape(entry.user),
        escape(entry.what),
        escape(entry.outcome),
    );
    if entry.outcome == "ok" {
        tracing::info!(target: "dlq_operator::console::audit", %at, ?user, action = entry.action,
            resource = entry.resource, ?what, count = entry.count, ?outcome, "console audit");
    } else {
        tracing::warn!(target: "dlq_operator::console::audit", %at, ?user, action = entry.action,
            resource = entry.resource, ?what, count = entry.count, ?outcome, "console audit");
    }
}
