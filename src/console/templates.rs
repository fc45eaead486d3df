//! The console's pages: askama templates (`templates/console/*.html`, compiled and
//! checked with the crate; HTML-escaped by askama) and their typed contexts. Text from
//! messages arrives here already made visible by [`super::views`].

use askama::Template;

use super::views::{Editor, GroupRow, MessageRow, MessageView};

/// The style sheet (`GET /static/console.css`; the pages load no script).
pub const CSS: &str = include_str!("../../templates/console/console.css");

/// A page with one paragraph: errors, refusals, the login prompt.
#[derive(Template)]
#[template(path = "console/message_page.html")]
pub struct MessagePage {
    /// Heading.
    pub title: String,
    /// The paragraph.
    pub text: String,
    /// CSS class of the paragraph (`error`, `note`).
    pub class: &'static str,
    /// A link back, if any.
    pub back: Option<String>,
}

/// One row of the index.
#[derive(Debug, Clone)]
pub struct IndexRow {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Dead-letter depth (`-` before the first poll, `?` when the listing failed).
    pub depth: String,
    /// Backlog ratio (`-` when there is no threshold yet).
    pub ratio: String,
    /// Alert state name (`Inactive`, `Pending`, `Firing`, `Unknown`).
    pub alert: &'static str,
    /// The sparkline's polyline points ([`super::history::sparkline`]).
    pub points: String,
    /// Polls in the sparkline.
    pub points_count: usize,
}

/// `GET /`.
#[derive(Template)]
#[template(path = "console/index.html")]
pub struct Index {
    /// The DeadLetterQueues (in a cluster, those the user may view).
    pub rows: Vec<IndexRow>,
    /// The poll interval, formatted.
    pub interval: String,
    /// Who is logged in (shown).
    pub user: String,
}

/// `GET /login`: the form taking a token (standalone: the one printed at start; in a
/// cluster: a Kubernetes bearer token).
#[derive(Template)]
#[template(path = "console/login.html")]
pub struct Login {
    /// In a cluster (the form says which token).
    pub kubernetes: bool,
    /// Why the last try failed, if it did.
    pub error: Option<String>,
}

/// `GET /dlq/{ns}/{name}`.
#[derive(Template)]
#[template(path = "console/dlq.html")]
pub struct DlqPage {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// The broker's management URI without user name and password, and the vhost.
    pub broker: String,
    /// (dead-letter queue, messages now or the error).
    pub queues: Vec<(String, String)>,
    /// A scan is running (the page refreshes itself).
    pub scanning: bool,
    /// The last scan's error.
    pub error: Option<String>,
    /// What the last scan read, and when.
    pub summary: Option<String>,
    /// The last scan's number.
    pub generation: u64,
    /// Its groups.
    pub groups: Vec<GroupRow>,
}

/// `GET /dlq/{ns}/{name}/messages`.
#[derive(Template)]
#[template(path = "console/messages.html")]
pub struct Messages {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Which messages (the group or filter), shown.
    pub what: String,
    /// Messages the scan read.
    pub scanned: u64,
    /// The scan's number.
    pub generation: u64,
    /// The rows.
    pub rows: Vec<MessageRow>,
}

/// `GET /dlq/{ns}/{name}/messages/{i}`.
#[derive(Template)]
#[template(path = "console/message.html")]
pub struct Message {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The message.
    pub view: MessageView,
    /// The session's CSRF token (the repair form).
    pub csrf: String,
    /// The scan's number (the repair form sends it back).
    pub generation: u64,
    /// The message's index in the scan's sample.
    pub index: usize,
    /// The repair form.
    pub repair: Editor,
}

/// The result of a repair ([`super::repair`]).
#[derive(Template)]
#[template(path = "console/repair_done.html")]
pub struct RepairDone {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The `message_id`, shown.
    pub message_id: String,
    /// `repaired`, `not found`, `skipped`, `failed` or `interrupted`.
    pub outcome: &'static str,
    /// What happened, for people (shown).
    pub text: String,
    /// The copy's `dlq-replay-id` (shown) when repaired.
    pub replay_id: Option<String>,
    /// Messages the repair read.
    pub scanned: u64,
}

/// The dry-run count and the confirmation form of a replay or purge.
#[derive(Template)]
#[template(path = "console/confirm.html")]
pub struct Confirm {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The session's CSRF token.
    pub csrf: String,
    /// `replay` or `purge` (the form's path).
    pub kind: &'static str,
    /// `Replay` or `Purge` (the button).
    pub verb: &'static str,
    /// `replayed` or `removed`.
    pub done: &'static str,
    /// Which messages, shown.
    pub what: String,
    /// Would be replayed / removed.
    pub count: u64,
    /// Messages read by the dry run.
    pub scanned: u64,
    /// Skipped and other notes, shown.
    pub notes: String,
    /// The one-time action id the form sends back.
    pub action: String,
    /// Whether the DeadLetterQueue's `namespace/name` must be typed.
    pub typed: bool,
    /// Why the last confirmation was refused.
    pub error: Option<String>,
}

/// `GET /jobs/{id}`: a replay's progress, then its result.
#[derive(Template)]
#[template(path = "console/job.html")]
pub struct JobPage {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Which messages, shown.
    pub what: String,
    /// Ended (else the page refreshes itself).
    pub finished: bool,
    /// Replayed so far.
    pub replayed: u64,
    /// Read so far.
    pub scanned: u64,
    /// In the dead-letter queues at the start.
    pub total: u64,
    /// Skipped and failed, shown.
    pub notes: String,
    /// The broker's error, if it stopped with one.
    pub error: Option<String>,
}

/// The result of a purge.
#[derive(Template)]
#[template(path = "console/done.html")]
pub struct Done {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Replay` or `Purge`.
    pub verb: &'static str,
    /// `replayed` or `removed`.
    pub done: &'static str,
    /// Which messages, shown.
    pub what: String,
    /// Replayed / removed.
    pub count: u64,
    /// Skipped, failed and other notes, shown.
    pub notes: String,
    /// The broker's error, if it stopped with one.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::views::{message_rows, message_view, tests::letter};
    use crate::dlq::filter::Filter;

    const HOSTILE: &str = "<script>alert(1)</script>\"'&\u{1b}[2J\u{202e}";

    fn assert_inert(html: &str) {
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains('\u{1b}'), "raw ESC in {html}");
        assert!(!html.contains('\u{202e}'), "raw bidi override in {html}");
        assert!(
            html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn message_pages_escape_hostile_text() {
        let mut m = letter(HOSTILE, HOSTILE, HOSTILE, Some(0));
        m.body_preview = HOSTILE.into();
        m.headers.insert(HOSTILE.into(), serde_json::json!(HOSTILE));
        let page = Message {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            view: message_view(&m, 0),
            csrf: "c".into(),
            generation: 1,
            index: 0,
            repair: crate::console::repair::editor(&m),
        };
        assert_inert(&page.render().expect("render"));
        let list = Messages {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            what: "all".into(),
            scanned: 1,
            generation: 1,
            rows: message_rows(&[m], &Filter::default(), 0),
        };
        assert_inert(&list.render().expect("render"));
    }

    #[test]
    fn confirm_and_error_pages_escape() {
        let page = Confirm {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            csrf: "\"><script>".into(),
            kind: "purge",
            verb: "Purge",
            done: "removed",
            what: crate::printable::shown(HOSTILE, 256),
            count: 3,
            scanned: 4,
            notes: String::new(),
            action: "a".into(),
            typed: true,
            error: Some(HOSTILE.into()),
        };
        let html = page.render().expect("render");
        assert!(html.contains("name=\"confirm\""));
        assert!(!html.contains("\"><script>"), "attribute escaped: {html}");
        let err = MessagePage {
            title: HOSTILE.into(),
            text: crate::printable::shown(HOSTILE, 256),
            class: "error",
            back: None,
        };
        let html = err.render().expect("render");
        assert!(!html.contains("<script>"), "{html}");
    }

    #[test]
    fn the_job_page_refreshes_until_done_and_escapes() {
        let mut page = JobPage {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            what: crate::printable::shown(HOSTILE, 256),
            finished: false,
            replayed: 1,
            scanned: 2,
            total: 5,
            notes: crate::printable::shown(HOSTILE, 256),
            error: None,
        };
        let html = page.render().expect("render");
        assert!(html.contains("http-equiv=\"refresh\""), "{html}");
        assert_inert(&html);
        page.finished = true;
        page.error = Some(HOSTILE.into());
        let html = page.render().expect("render");
        assert!(!html.contains("http-equiv=\"refresh\""), "{html}");
        assert!(html.contains("<strong id=\"count\">1</strong>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }

    #[test]
    fn index_draws_the_sparkline_from_numbers() {
        let page = Index {
            rows: vec![IndexRow {
                namespace: "ns".into(),
                name: "d".into(),
                depth: "5".into(),
                ratio: "0.50".into(),
                alert: "Firing",
                points: crate::console::history::sparkline(&[0, 5], 120, 24),
                points_count: 2,
            }],
            interval: "15s".into(),
            user: "<script>x</script>".into(),
        };
        let html = page.render().expect("render");
        assert!(html.contains("points=\"0.0,24.0 120.0,0.0\""), "{html}");
        assert!(
            !html.contains("<script>") && html.contains("Logged in as &#60;script"),
            "{html}"
        );
        assert!(html.contains("/dlq/ns/d"));
    }

    #[test]
    fn the_repair_form_and_result_escape_hostile_text() {
        let mut m = letter(HOSTILE, HOSTILE, HOSTILE, Some(0));
        m.body_preview = format!("{{\"a\": \"{HOSTILE}</textarea>\"}}");
        m.body_bytes = m.body_preview.len();
        m.headers.insert(HOSTILE.into(), serde_json::json!(HOSTILE));
        m.headers.insert("x-death".into(), serde_json::json!([]));
        let mut repair = crate::console::repair::editor(&m);
        repair.error = Some(crate::printable::shown(HOSTILE, 256));
        let page = Message {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            view: message_view(&m, 0),
            csrf: "\"><script>".into(),
            generation: 7,
            index: 3,
            repair,
        };
        let html = page.render().expect("render");
        assert_inert(&html);
        assert!(!html.contains("\"><script>"), "attribute escaped: {html}");
        assert!(
            !html.contains("</textarea>\""),
            "textarea not closed by text: {html}"
        );
        for id in [
            "repair-form",
            "repair-body",
            "repair-headers",
            "repair-submit",
            "repair-error",
            "repair-protected",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{id} in {html}");
        }
        assert!(
            html.contains("action=\"/dlq/ns/d/messages/3/repair\""),
            "{html}"
        );
        assert!(html.contains("name=\"g\" value=\"7\""), "{html}");
        m.message_id = None;
        let page = Message {
            repair: crate::console::repair::editor(&m),
            ..page
        };
        let html = page.render().expect("render");
        assert!(html.contains("id=\"repair-unavailable\"") && !html.contains("repair-form"));
        let done = RepairDone {
            key: "ns/d".into(),
            namespace: "ns".into(),
            name: "d".into(),
            message_id: crate::printable::shown(HOSTILE, 256),
            outcome: "skipped",
            text: crate::printable::shown(HOSTILE, 256),
            replay_id: Some(crate::printable::shown(HOSTILE, 256)),
            scanned: 1,
        };
        assert_inert(&done.render().expect("render"));
    }
}
