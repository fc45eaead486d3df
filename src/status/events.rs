//! Events about an object: one [`Note`] per Event a driver records, cut to the API's limit
//! and escaped for terminals ([`publish`]). The controller records them with its
//! recorder; the console's audit records its own the same way.

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;
use tracing::warn;

/// One Event to record about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (e.g. `TopologyApplied`, `BrokerUnreachable`).
    pub reason: String,
    /// What the controller was doing (`Apply`, `Delete`, `Validate`).
    pub action: String,
    /// Human-readable detail (cut to 1 KiB, the API's limit for `note`).
    pub note: String,
}

impl Note {
    /// A Normal Event.
    pub fn normal(reason: &str, action: &str, note: String) -> Self {
        Note {
            type_: EventType::Normal,
            reason: reason.into(),
            action: action.into(),
            note,
        }
    }

    /// A Warning Event.
    pub fn warning(reason: &str, action: &str, note: String) -> Self {
        Note {
            type_: EventType::Warning,
            reason: reason.into(),
            action: action.into(),
            note,
        }
    }
}

/// Most bytes of an Event's `note` (events.k8s.io/v1 validation: 1 KiB).
pub const MAX_NOTE_BYTES: usize = 1024;

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn truncate_note(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Records `note` about `obj` (a resource of `resource`) with a controller's `recorder`.
/// A failure to record is logged (Events are informational; the status carries the same
/// facts) and does not fail the reconcile.
pub async fn publish(recorder: &Recorder, obj: &DynamicObject, resource: &ApiResource, note: Note) {
    let reference = obj.object_ref(resource);
    let event = Event {
        type_: note.type_,
        reason: note.reason.clone(),
        // kubectl prints notes to terminals; they may quote messages (a replay's skip
        // reasons) or the broker.
        note: Some(truncate_note(
            &crate::printable::escape(&note.note),
            MAX_NOTE_BYTES,
        )),
        action: note.action,
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        warn!(reason = %note.reason, error = %e, "could not record Event");
    }
}
