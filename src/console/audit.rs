//! The audit trail of the console's actions: one log line per replay, purge or repair, dry runs,
//! refusals and failures included (who, when, what, how many), at target
//! `dlq_operator::console::audit`; in a cluster also a Kubernetes Event on the
//! DeadLetterQueue for every replay, purge and repair that ran (dry runs and refusals
//! only in the log), as `kubectl describe` shows them. Text from the user or the messages
//! is escaped ([`crate::printable::escape`]).

use crate::status::Note;

/// One action, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Who (the session's user).
    pub user: &'a str,
    /// `replay`, `replay-dry-run`, `purge`, `purge-dry-run`, `purge-refused`, `repair`,
    /// `repair-refused`, `access-refused` (a page or action the caller's RBAC does not
    /// allow).
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

/// The Event of `entry`, or `None` for a dry run or a refusal (log only). Type Normal when
/// it succeeded, else Warning; reason `ConsoleReplay`, `ConsolePurge` or `ConsoleRepair`
/// (CamelCase, as the Kubernetes API conventions ask of reasons); action `Replay`,
/// `Purge` or `Repair`; the note says who, what, how many and the outcome.
pub fn note_of(entry: &Entry<'_>) -> Option<Note> {
    let (reason, action) = match entry.action {
        "replay" => ("ConsoleReplay", "Replay"),
        "purge" => ("ConsolePurge", "Purge"),
        "repair" => ("ConsoleRepair", "Repair"),
        _ => return None,
    };
    let text = format!(
        "{} by {} in the dead-letter console: {}; {} message(s); {}",
        action.to_lowercase(),
        entry.user,
        entry.what,
        entry.count,
        entry.outcome
    );
    Some(if entry.outcome == "ok" {
        Note::normal(reason, action, text)
    } else {
        Note::warning(reason, action, text)
    })
}

impl super::State {
    /// Audits `entry`: the log line ([`record`]), and in a cluster the Event
    /// ([`note_of`]) on the DeadLetterQueue, published in a task the shutdown waits for
    /// (a failed publish is logged by [`crate::status::publish`]).
    pub fn audit(&self, entry: &Entry<'_>) {
        record(entry);
        let (Some(recorder), Some(note)) = (&self.events, note_of(entry)) else {
            return;
        };
        let targets = self.targets();
        let Some(object) = targets
            .iter()
            .find(|t| t.prepared.key == entry.resource)
            .and_then(|t| t.object.clone())
        else {
            return;
        };
        let recorder = recorder.clone();
        self.tasks.spawn(async move {
            let resource = crate::object::api_resource::<crate::crd::DeadLetterQueue>();
            crate::status::publish(&recorder, &object, &resource, note).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(action: &'a str, outcome: &'a str) -> Entry<'a> {
        Entry {
            user: "system:serviceaccount:ops:alice",
            action,
            resource: "shop/orders",
            what: "error class ValidationError",
            count: 3,
            outcome,
        }
    }

    #[test]
    fn actions_that_ran_become_events_dry_runs_and_refusals_do_not() {
        let n = note_of(&entry("replay", "ok")).expect("replay");
        assert_eq!(
            (n.reason.as_str(), n.action.as_str()),
            ("ConsoleReplay", "Replay")
        );
        assert_eq!(n.type_, kube::runtime::events::EventType::Normal);
        for part in [
            "system:serviceaccount:ops:alice",
            "ValidationError",
            "3 message(s)",
            "ok",
        ] {
            assert!(n.note.contains(part), "{part} in {}", n.note);
        }
        let failed = note_of(&entry("purge", "broker unreachable")).expect("purge");
        assert_eq!(failed.type_, kube::runtime::events::EventType::Warning);
        assert_eq!(failed.reason, "ConsolePurge");
        assert_eq!(
            note_of(&entry("repair", "ok")).expect("repair").action,
            "Repair"
        );
        for quiet in [
            "replay-dry-run",
            "purge-dry-run",
            "purge-refused",
            "repair-refused",
            "access-refused",
        ] {
            assert!(note_of(&entry(quiet, "ok")).is_none(), "{quiet}");
        }
    }
}
