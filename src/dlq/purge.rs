//! `dlq purge`: removes only the dead-lettered messages a filter takes (the CLI requires
//! `--older-than`), read like inspection reads (held until the end); every other message
//! goes back by the inspection rule ([`super::release_for`]). The RabbitMQ engine is
//! `rabbitmq::dead_letters::purge`; the per-message decision is
//! [`PurgeReport::take`].

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::filter::Filter;
use super::DeadLetter;
use super::DeadLetterOps;
use crate::topology::DesiredTopology;
use crate::wire::BrokerError;

/// The purge report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PurgeReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// Nothing was removed.
    pub dry_run: bool,
    /// Stopped before the end (Ctrl-C).
    pub interrupted: bool,
    /// Messages in the dead-letter queues when it started.
    pub total: u64,
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Messages removed (0 in a dry run).
    pub removed: u64,
    /// Messages kept because they carry no dead-lettering time, so no age
    /// ([`super::dead_lettered_at`]): an age filter never takes them.
    pub unknown_age: u64,
}

impl PurgeReport {
    /// The empty report of a purge of `topology`'s dead-letter queues.
    pub fn start(topology: &DesiredTopology, dry_run: bool) -> Self {
        PurgeReport {
            resource: topology.owner.clone(),
            dry_run,
            ..PurgeReport::default()
        }
    }

    /// Counts `letter` (read at `now_ms`, ms since epoch) and says whether to remove it:
    /// `true` when `filter` takes it and this is no dry run. The caller removes it and
    /// then counts it with [`PurgeReport::removed_one`]; any other message it gives back.
    pub fn take(&mut self, letter: &DeadLetter, filter: &Filter, now_ms: u64) -> bool {
        self.scanned += 1;
        if letter.dead_lettered_at_ms.is_none() {
            self.unknown_age += 1;
        }
        if filter.matches(letter, now_ms) {
            self.matched += 1;
            return !self.dry_run;
        }
        false
    }

    /// Counts a message removed.
    pub fn removed_one(&mut self) {
        self.removed += 1;
    }
}

/// Removes the messages of `topology`'s dead-letter queues that `filter` takes (none with
/// `dry_run`) on any broker client, counting into `report` as it goes (so that after an
/// error the caller still knows what was removed before it: removed messages stay
/// removed), stopped by `cancel`.
///
/// # Errors
/// As [`DeadLetterOps::purge`].
pub async fn purge_with(
    broker: &dyn DeadLetterOps,
    topology: &DesiredTopology,
    filter: &Filter,
    dry_run: bool,
    now_ms: u64,
    cancel: &CancellationToken,
    report: &mut PurgeReport,
) -> Result<(), BrokerError> {
    broker
        .purge(topology, filter, dry_run, now_ms, cancel, report)
        .await
}
