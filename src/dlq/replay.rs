//! `dlq replay`: sends dead-lettered messages back to where they failed, at least once.
//!
//! Each dead-letter queue is read by a consumer (manual acknowledgements, a prefetch
//! window of [`PREFETCH`]) until the messages there at the start are read. A message the
//! [`Filter`] takes is published — a copy with the retry state reset and the replay
//! stamped ([`replay_properties`](super::replay_properties)) — with `mandatory` and a publisher confirm, and the
//! original is acked only after the broker confirmed the copy: a crash in between leaves
//! a duplicate, never a loss (at-least-once; consumers deduplicate on `message_id` +
//! `dlq-replay-id`). Up to [`CONFIRM_WINDOW`] copies are in flight at once, in batches of
//! [`CHECKPOINT_BATCH`] with an [`Observer::checkpoint`] before each; a crash duplicates
//! at most [`crash_bound`] copies (`max_in_flight`, 1,000 by default). Every other message
//! is held unacknowledged like [`super::browse::inspect_with`] holds it, and given back at the
//! end by the inspection rule ([`release_for`](super::release_for)): skipped and failed ones stay in the
//! dead-letter queue. Held messages fill the prefetch window; when they fill half of it,
//! the consumer is cancelled and a new one started — RabbitMQ keeps a cancelled
//! consumer's unacknowledged messages with the channel (checked on 3.10.8 for classic and
//! quorum queues), so they stay held and the new consumer gets a fresh window. A message
//! that carries this replay's own `dlq-replay-id` (it failed again after being replayed,
//! or a resumed replay reads it) is skipped.
//!
//! The engine that does this on RabbitMQ (consumers, pipelined publisher confirms,
//! deferred `multiple` acks) is `rabbitmq::dead_letters::replay`; this module
//! holds what every engine shares: the options and report, the per-message decision
//! ([`decide`]), the pacing ([`pause_for`], [`checkpoint_batch`]) and the crash bound.
//!
//! Targets: by default the DeadLetterQueue's own source queue through the default
//! exchange, so a message that failed in one of several queues bound to a fanout or topic
//! exchange reaches that queue only; with [`Target::OriginalExchange`] the exchange and
//! routing key it was first published with. A message whose original queue is another
//! queue is skipped, never sent elsewhere; so is a copy whose route — resolved from the
//! broker's bindings before it is published ([`super::route`]), `CC`/`BCC` headers
//! included — would reach any queue but the source queue, or cannot be resolved for
//! certain.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::filter::Filter;
use super::DeadLetterOps;
use super::{DeadLetter, REPLAY_ID};
use crate::printable::{shown, PREVIEW_BYTES};
use crate::topology::DesiredTopology;
use crate::wire::BrokerError;

/// The longest pause between two copies that `--rate` can ask for (a day).
pub const MAX_PAUSE: Duration = Duration::from_secs(86_400);

/// Copies awaiting their publisher confirm at most, per dead-letter queue.
pub const CONFIRM_WINDOW: usize = 1000;

/// The consumer's prefetch window (messages delivered and not yet acknowledged) at full
/// speed; at a limited rate, twice the rate per second, at least 100. The messages kept
/// (held until the end) fill it: at half of it the consumer is replaced by a fresh one.
/// Half of it + [`CONFIRM_WINDOW`] + the deferred acks stay below it, so the window never
/// closes on the scan.
pub const PREFETCH: u16 = 3000;

/// Copies per checkpoint ([`Observer::checkpoint`]) at full speed; at a limited rate,
/// one second's worth.
pub const CHECKPOINT_BATCH: u64 = 1000;

/// The crash window a replay keeps by default (`--max-in-flight`, `spec.maxInFlight`), and
/// the largest it takes: [`crate::crd::MAX_IN_FLIGHT`], the [`CONFIRM_WINDOW`].
pub const MAX_IN_FLIGHT: usize = crate::crd::MAX_IN_FLIGHT as usize;
const _: () = assert!(MAX_IN_FLIGHT == CONFIRM_WINDOW);

/// Copies in flight at most when a queue is read one message at a time (a quorum queue
/// with a delivery limit): their originals are exposed to a crash like the message in
/// hand.
pub const CONFIRM_WINDOW_ONE_AT_A_TIME: usize = 16;

/// What a replay reports to its driver while it runs: progress after each message (the
/// CLI's progress bar), and a checkpoint before each batch of copies is published (the
/// DeadLetterReplay controller writes its status there, so that an operator crash leaves
/// at most one batch "in doubt"). Any `FnMut(&ReplayReport)` is an observer that keeps no
/// checkpoint.
pub trait Observer: Send {
    /// Called after each message read, and once at the end of each dead-letter queue.
    fn progress(&mut self, report: &ReplayReport);

    /// Called before up to `batch` copies are published, with the report so far (every
    /// earlier copy settled: replayed or failed). The replay waits for it; an error stops
    /// the replay like a cancellation does (the copies in flight are settled, the rest stays;
    /// [`Outcome::Partial`]). Default: nothing kept.
    ///
    /// # Errors
    /// Why the progress could not be kept (the replay then stops).
    fn checkpoint<'a>(
        &'a mut self,
        report: &'a ReplayReport,
        batch: u64,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        let _ = (report, batch);
        Box::pin(async { Ok(()) })
    }

    /// Called when [`replay_resuming`] lost the broker (`error`) and resumes after `delay` with
    /// attempt `attempt` (2 for the first resumption) of [`RESUME_ATTEMPTS`]. Default:
    /// nothing said.
    fn resuming(&mut self, attempt: u32, error: &BrokerError, delay: Duration) {
        let _ = (attempt, error, delay);
    }
}

/// Passes a replay makes at most after broker errors ([`replay_resuming`]; the DeadLetterReplay
/// controller's runs too): the first and three resumptions.
pub const RESUME_ATTEMPTS: u32 = 4;

/// Pause before attempt `n + 1` after the broker error that ended attempt `n` (1 for the
/// first): 5 s · 2^(n−1) — 5, 10, 20 s, long enough for a cluster to elect new quorum
/// queue leaders after a node loss (seconds: docs/RELIABILITY.md).
pub fn resume_delay(n: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1u64 << n.saturating_sub(1).min(16)))
}

/// Whether a new pass may get past `e`: the broker could not be reached, or the AMQP
/// connection or channel failed (a node lost, a quorum queue's leader moved). A refused
/// login, a missing queue, a name owned by another resource or a bad Secret would fail
/// the same way again.
pub fn resumable(e: &BrokerError) -> bool {
    matches!(
        e,
        BrokerError::Unreachable { .. } | BrokerError::Amqp { .. }
    )
}

impl<F: FnMut(&ReplayReport) + Send> Observer for F {
    fn progress(&mut self, report: &ReplayReport) {
        self(report)
    }
}

/// Where replayed messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The DeadLetterQueue's source queue, through the default exchange.
    OriginalQueue,
    /// The exchange and routing key of the first failed delivery (`dlq-original-*`, else
    /// `x-death`); only for messages whose original queue is the DeadLetterQueue's source
    /// queue, like the default, and only when that exchange routes the copy to the source
    /// queue and no other ([`super::route`]).
    OriginalExchange,
}

/// What a replay takes and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Which messages.
    pub filter: Filter,
    /// Replay at most this many (`None`: all that match).
    pub limit: Option<u64>,
    /// Messages per second at most (`None`: as fast as confirms come).
    pub rate: Option<f64>,
    /// Count what would be replayed, publish nothing.
    pub dry_run: bool,
    /// Where to.
    pub target: Target,
    /// Skip a message already replayed this many times (a message that keeps failing is
    /// not looped forever).
    pub max_replays: u64,
    /// The id stamped in `dlq-replay-id`.
    pub replay_id: String,
    /// The crash window, 1 to [`MAX_IN_FLIGHT`] (the default): at most this many copies
    /// are published whose originals the broker has not yet been seen to remove, so a
    /// crash duplicates at most this many ([`crash_bound`]). Smaller is slower: at 1, each
    /// original's removal is confirmed by a round trip before the next copy goes out.
    pub max_in_flight: usize,
    /// A repair's edits of the copy (new body, headers set or removed; `None`: an exact
    /// replay). Applied by every engine through `repair::copy_content`.
    pub rewrite: Option<super::rewrite::Rewrite>,
}

/// A fresh replay id for a replay started at `now_ms` (ms since epoch):
/// `<now_ms>-<8 random hex digits>`.
pub fn new_replay_id(now_ms: u64) -> String {
    format!("{now_ms}-{:08x}", rand::random::<u32>())
}

/// Copies per checkpoint for `rate` (messages per second; `None`: as fast as confirms
/// come): [`CHECKPOINT_BATCH`], or one second's worth at a limited rate (at least 1).
pub fn checkpoint_batch(rate: Option<f64>) -> u64 {
    rate.map_or(CHECKPOINT_BATCH, |r| {
        (r.ceil() as u64).clamp(1, CHECKPOINT_BATCH)
    })
}

/// The most copies a crash of a replay with `max_in_flight`, `rate` and `limit` can
/// duplicate (a SIGKILL, a lost connection: copies that arrived while their originals
/// went back to the dead-letter queue, to be replayed again). A copy counts from its
/// publish until a reply of the broker on the consuming channel shows its original's ack
/// handled (a channel handles its methods in order); before more than `max_in_flight`
/// copies would count, the copies in flight are settled, the acks written (also the
/// deferred `multiple` one) and that reply awaited. The same happens before each
/// checkpoint batch ([`checkpoint_batch`]), and a replay sends at most `limit` copies. So
/// the bound is the least of the three. The prefetch window adds nothing: a delivered
/// message without a copy returns to the queue on a crash, undecided, and is not
/// duplicated.
pub fn crash_bound(max_in_flight: usize, rate: Option<f64>, limit: Option<u64>) -> u64 {
    let window = u64::try_from(max_in_flight).unwrap_or(u64::MAX);
    window
        .min(checkpoint_batch(rate))
        .min(limit.unwrap_or(u64::MAX))
        .max(1)
}

/// What a replay that stopped on a broker error may have left, for the user (the CLI's
/// error, the console's job page): `read` messages read, `confirmed` copies confirmed and
/// up to `unsettled` ([`crash_bound`]) copies in flight when it stopped. At-least-once:
/// nothing is lost, a second replay may send some again.
pub fn stopped_note(read: u64, confirmed: u64, unsettled: u64) -> String {
    format!(
        "before the error: at least {read} messages read and {confirmed} copies confirmed \
         by the broker. Copies not yet settled (up to {unsettled}) may have arrived too, \
         and the originals of those and of confirmed copies whose acks were \
         not yet sent are back in the dead-letter queues if the connection \
         was lost: a second replay sends those again (at-least-once; \
         deduplicate on message_id). Nothing is lost."
    )
}

/// How a replay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every matching message was replayed (or, dry run, would be).
    Succeeded,
    /// Interrupted: what was replayed is replayed, the rest is still in the dead-letter
    /// queue.
    Partial,
    /// Some message could not be replayed (it stays in the dead-letter queue).
    Failed,
}

/// The final report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// The DeadLetterQueue (`namespace/name`).
    pub resource: String,
    /// `dlq-replay-id` of this run.
    pub replay_id: String,
    /// Nothing was published.
    pub dry_run: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// Messages in the dead-letter queues when it started.
    pub total: u64,
    /// Messages read.
    pub scanned: u64,
    /// Messages the filter took.
    pub matched: u64,
    /// Replayed (confirmed by the broker and removed from the dead-letter queue); in a
    /// dry run, how many would be.
    pub replayed: u64,
    /// Matched but not replayed, by reason (they stay).
    pub skipped: BTreeMap<String, u64>,
    /// Not replayed because publishing failed, by reason (they stay).
    pub failed: BTreeMap<String, u64>,
    /// Passes resumed after the broker was lost ([`replay_resuming`]); 0 when none was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resumed: u32,
    /// At most this many of the replayed copies are duplicates: copies in flight when a
    /// pass lost the broker, whose originals went back to the dead-letter queue and were
    /// replayed again ([`crash_bound`] per resumption). 0 without a resumption.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub in_doubt: u64,
}

/// `true` for 0 (a count left out of the report when there is nothing to say).
fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

impl ReplayReport {
    /// Skipped messages in all.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Failed messages in all.
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// Where `m` goes under `target` for a resource whose source queue is `source`, or why it
/// is skipped (a reason quoting the message's text escaped and cut:
/// [`crate::printable::shown`]).
pub fn route_for(m: &DeadLetter, target: Target, source: &str) -> Result<(String, String), String> {
    if m.original_queue != source && m.original_queue != "unknown" {
        return Err(format!(
            "original queue {} is not this DeadLetterQueue's source queue {}",
            shown(&m.original_queue, PREVIEW_BYTES),
            shown(source, PREVIEW_BYTES)
        ));
    }
    match target {
        Target::OriginalQueue => Ok((String::new(), source.to_string())),
        Target::OriginalExchange => match (&m.original_exchange, &m.original_routing_key) {
            (Some(x), Some(k)) => Ok((x.clone(), k.clone())),
            _ => Err("no original exchange and routing key recorded".to_string()),
        },
    }
}

/// Replays the matching messages of the dead-letter queues of `topology` (module doc) on
/// the broker that `connect` reaches (one new client per pass: the RabbitMQ adapter's
/// `rabbitmq::dlq::replay` connects to a Secret's addresses). `cancel` is checked
/// before each message: once cancelled, the copies in flight are
/// settled, the rest given back, and the report says [`Outcome::Partial`] (so it does
/// when a checkpoint of `observer` fails). `observer` sees the progress after each
/// message read and keeps a checkpoint before each batch of copies.
///
/// A pass that loses the broker ([`resumable`]: a node killed, a partition) after it
/// read a message, or a pass after such a one, is resumed
/// on a new connection — the next of the Secret's addresses that answers — after
/// [`resume_delay`], up to [`RESUME_ATTEMPTS`] passes in all, with the same replay id (a
/// copy that came back meanwhile is not replayed again) and the limit lowered by what was
/// replayed. Each resumption is told to [`Observer::resuming`]; the progress and the
/// report count every pass ([`ReplayReport::resumed`], [`ReplayReport::in_doubt`]).
///
/// # Errors
/// [`BrokerError::NotFound`] for a missing dead-letter queue (every one is looked up
/// before anything is read, so nothing is replayed then); connection and AMQP errors
/// after the last pass (held messages return to their queue; copies already confirmed are
/// replayed; at most [`crash_bound`] copies are duplicated per lost pass).
pub async fn replay_resuming(
    connect: &(dyn Fn() -> Result<Arc<dyn DeadLetterOps>, BrokerError> + Send + Sync),
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    cancel: &CancellationToken,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    let mut earlier: Option<ReplayReport> = None;
    let mut attempt = 1;
    loop {
        let mut pass_opts = opts.clone();
        let before = earlier.as_ref().map_or(0, |e| e.replayed);
        pass_opts.limit = opts.limit.map(|l| l.saturating_sub(before));
        let mut offset = Offset {
            inner: &mut *observer,
            earlier: earlier.as_ref(),
            last: None,
        };
        let pass = match connect() {
            Ok(client) if pass_opts.limit != Some(0) => {
                replay_with(
                    client.as_ref(),
                    topology,
                    &pass_opts,
                    now_ms,
                    cancel,
                    &mut offset,
                )
                .await
            }
            Ok(_) => Ok(ReplayReport::start(topology, &pass_opts)),
            Err(e) => Err(e),
        };
        let last = offset.last.take();
        // Only a broker lost on the way is resumed: a first pass that read nothing has
        // already tried every address, and none answered.
        let reached = last.is_some() || earlier.is_some();
        match pass {
            Ok(report) => return Ok(report.after(earlier.as_ref())),
            Err(e)
                if reached
                    && resumable(&e)
                    && attempt < RESUME_ATTEMPTS
                    && !cancel.is_cancelled() =>
            {
                let delay = resume_delay(attempt);
                attempt += 1;
                observer.resuming(attempt, &e, delay);
                let mut so_far = last
                    .map(|r| r.after(earlier.as_ref()))
                    .or(earlier.take())
                    .unwrap_or_else(|| ReplayReport::start(topology, opts));
                so_far.resumed += 1;
                so_far.in_doubt += crash_bound(opts.max_in_flight, opts.rate, opts.limit);
                earlier = Some(so_far);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancel.cancelled() => {}
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The observer of one pass of a resumed replay: forwards each report with what the
/// passes before counted ([`ReplayReport::after`]), and keeps the pass's last report.
struct Offset<'a> {
    inner: &'a mut dyn Observer,
    earlier: Option<&'a ReplayReport>,
    last: Option<ReplayReport>,
}

impl Observer for Offset<'_> {
    fn progress(&mut self, report: &ReplayReport) {
        self.last = Some(report.clone());
        let all = report.clone().after(self.earlier);
        self.inner.progress(&all);
    }

    fn checkpoint<'b>(
        &'b mut self,
        report: &'b ReplayReport,
        batch: u64,
    ) -> futures::future::BoxFuture<'b, Result<(), String>> {
        self.last = Some(report.clone());
        Box::pin(async move {
            let all = report.clone().after(self.earlier);
            self.inner.checkpoint(&all, batch).await
        })
    }
}

/// One pass of [`replay_resuming`] on any broker client (no resumption), stopped by `cancel`.
///
/// # Errors
/// As [`DeadLetterOps::replay`].
pub async fn replay_with(
    broker: &dyn DeadLetterOps,
    topology: &DesiredTopology,
    opts: &ReplayOptions,
    now_ms: u64,
    cancel: &CancellationToken,
    observer: &mut dyn Observer,
) -> Result<ReplayReport, BrokerError> {
    broker
        .replay(topology, opts, now_ms, cancel, observer)
        .await
}

impl ReplayReport {
    /// The empty report of a replay of `topology`'s dead-letter queues with `opts`.
    pub fn start(topology: &DesiredTopology, opts: &ReplayOptions) -> Self {
        ReplayReport {
            resource: topology.owner.clone(),
            replay_id: opts.replay_id.clone(),
            dry_run: opts.dry_run,
            outcome: Outcome::Succeeded,
            total: 0,
            scanned: 0,
            matched: 0,
            replayed: 0,
            skipped: BTreeMap::new(),
            failed: BTreeMap::new(),
            resumed: 0,
            in_doubt: 0,
        }
    }

    /// This report of a pass, counted on top of `earlier` (the passes before it, when it
    /// resumed a replay): replayed, matched, scanned and total add what earlier passes
    /// replayed (those messages are gone from the queue this pass read); skipped and
    /// failed are this pass's (it met those messages again); `resumed` and `in_doubt` are
    /// the earlier ones'.
    pub fn after(mut self, earlier: Option<&ReplayReport>) -> Self {
        if let Some(e) = earlier {
            self.replayed += e.replayed;
            self.matched += e.replayed;
            self.scanned += e.replayed;
            self.total += e.replayed;
            self.resumed = e.resumed;
            self.in_doubt = e.in_doubt;
        }
        self
    }

    /// Sets the outcome once every queue is done: [`Outcome::Partial`] when `stopped` (a
    /// cancel, or a failed checkpoint), else [`Outcome::Failed`] when a copy failed.
    pub fn finish(&mut self, stopped: bool) {
        if stopped {
            self.outcome = Outcome::Partial;
        } else if self.failed_total() > 0 {
            self.outcome = Outcome::Failed;
        }
    }

    /// Counts a matched message that stays, by reason `why`.
    pub fn skip(&mut self, why: String) {
        *self.skipped.entry(why).or_default() += 1;
    }

    /// Counts a message that could not be replayed, by reason `why`.
    pub fn fail(&mut self, why: String) {
        *self.failed.entry(why).or_default() += 1;
    }
}

/// Where `m` (read at `now_ms`) goes under `opts` for a resource whose source queue is
/// `source`, or `None` when it stays: not taken by the filter, or skipped (counted in
/// `report`: already replayed by this replay, replayed `--max-replays` times, or another
/// original queue, [`route_for`]). A match is counted in [`ReplayReport::matched`].
pub fn decide(
    opts: &ReplayOptions,
    m: &DeadLetter,
    now_ms: u64,
    source: &str,
    report: &mut ReplayReport,
) -> Option<(String, String)> {
    if !opts.filter.matches(m, now_ms) {
        return None;
    }
    report.matched += 1;
    if m.headers.get(REPLAY_ID).and_then(|v| v.as_str()) == Some(&opts.replay_id) {
        // Replayed by this very replay and dead-lettered again since (or read again
        // after a resume): sending it back again would loop.
        report.skip("already replayed by this replay".to_string());
        return None;
    }
    if m.replay_count >= opts.max_replays {
        report.skip(format!(
            "already replayed {} times (--max-replays)",
            opts.max_replays
        ));
        return None;
    }
    match route_for(m, opts.target, source) {
        Err(why) => {
            report.skip(why);
            None
        }
        Ok(route) => Some(route),
    }
}

/// The pause between two copies at `rate` (messages per second; `None`: no pause):
/// `1 / rate` seconds, at most [`MAX_PAUSE`] (a rate is validated > 0).
pub fn pause_for(rate: Option<f64>) -> Option<Duration> {
    rate.map(|r| {
        Duration::try_from_secs_f64(1.0 / r)
            .unwrap_or(MAX_PAUSE)
            .min(MAX_PAUSE)
    })
}

/// The consumer's prefetch window at `rate` ([`PREFETCH`]; at a limited rate, twice the
/// rate per second, 100 to [`PREFETCH`]).
pub fn prefetch_for(rate: Option<f64>) -> u16 {
    rate.map_or(PREFETCH, |r| {
        let window = (r.ceil() as u64).saturating_mul(2);
        u16::try_from(window.clamp(100, u64::from(PREFETCH))).unwrap_or(PREFETCH)
    })
}

/// The size of the next checkpoint batch: `batch`, but never more than `--limit` still
/// allows after `replayed` copies (the batch is what a crash may leave in doubt, and a
/// resume subtracts it from the limit), at least 1.
pub fn next_batch(limit: Option<u64>, batch: u64, replayed: u64) -> u64 {
    limit
        .map_or(batch, |l| batch.min(l.saturating_sub(replayed)))
        .max(1)
}

/// Whether `--limit` is reached after `replayed` copies with `in_flight` more on the way.
pub fn limit_reached(limit: Option<u64>, replayed: u64, in_flight: usize) -> bool {
    limit.is_some_and(|l| replayed + in_flight as u64 >= l)
}

/// The failure reason of a copy the broker answered as unroutable.
pub const UNROUTABLE: &str = "unroutable: no queue is bound for the route";
/// The failure reason of a copy the broker nacked.
pub const NACKED: &str = "the broker refused the copy (nack)";
/// The failure reason of a copy published without publisher confirms.
pub const NOT_CONFIRMED: &str = "publisher confirms are off";

/// The failure reason of a copy whose publish the broker refused by closing the channel
/// (an internal exchange, no write permission), with the broker's `error`.
pub fn refused(error: &BrokerError) -> String {
    format!("the broker refused the copy: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_duplicates_at_most_the_window_the_batch_or_the_limit() {
        // The default: the confirm window, which is also the checkpoint batch.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, None, None), 1000);
        assert_eq!(MAX_IN_FLIGHT as u64, CHECKPOINT_BATCH);
        assert_eq!(crash_bound(1, None, None), 1);
        assert_eq!(crash_bound(5, None, None), 5);
        // At a limited rate, one second's worth is settled before each checkpoint.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(2.0), None), 2);
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(0.5), None), 1);
        assert_eq!(crash_bound(10, Some(300.0), None), 10);
        assert_eq!(crash_bound(MAX_IN_FLIGHT, Some(1e9), None), 1000);
        // No more than the limit is ever sent.
        assert_eq!(crash_bound(MAX_IN_FLIGHT, None, Some(20)), 20);
        assert_eq!(crash_bound(0, None, None), 1, "a window of 0 acts as 1");
    }

    #[test]
    fn pacing_follows_the_rate() {
        assert_eq!(pause_for(None), None);
        assert_eq!(pause_for(Some(4.0)), Some(Duration::from_millis(250)));
        assert_eq!(pause_for(Some(1e-9)), Some(MAX_PAUSE));
        assert_eq!(prefetch_for(None), PREFETCH);
        assert_eq!(prefetch_for(Some(1.0)), 100);
        assert_eq!(prefetch_for(Some(400.0)), 800);
        assert_eq!(next_batch(Some(5), 1000, 2), 3);
        assert_eq!(next_batch(Some(5), 1000, 9), 1);
        assert_eq!(next_batch(None, 7, 9), 7);
        assert!(limit_reached(Some(3), 2, 1));
        assert!(!limit_reached(None, 2, 1));
    }

    #[test]
    fn a_resumed_pass_counts_what_the_passes_before_replayed() {
        let report = |skipped: u64| ReplayReport {
            resource: "shop/orders".into(),
            replay_id: "r".into(),
            dry_run: false,
            outcome: Outcome::Succeeded,
            total: 0,
            scanned: 0,
            matched: 0,
            replayed: 0,
            skipped: [("already replayed".to_string(), skipped)].into(),
            failed: BTreeMap::new(),
            resumed: 0,
            in_doubt: 0,
        };
        let mut first = report(10);
        (first.total, first.scanned, first.matched, first.replayed) = (100, 40, 40, 30);
        first.resumed = 1;
        first.in_doubt = 1000;
        let mut second = report(10);
        (
            second.total,
            second.scanned,
            second.matched,
            second.replayed,
        ) = (70, 70, 70, 60);
        let all = second.clone().after(Some(&first));
        assert_eq!(
            (all.total, all.scanned, all.matched, all.replayed),
            (100, 100, 100, 90)
        );
        assert_eq!(
            all.skipped, second.skipped,
            "the second pass met them again"
        );
        assert_eq!((all.resumed, all.in_doubt), (1, 1000));
        assert_eq!(second.clone().after(None), second);
    }

    #[test]
    fn only_a_lost_broker_is_resumed_5_10_20_s_apart() {
        assert_eq!([1, 2, 3].map(|n| resume_delay(n).as_secs()), [5, 10, 20]);
        let unreachable = BrokerError::Unreachable {
            endpoint: "amqp://a".into(),
            reason: "connection refused".into(),
        };
        let missing = BrokerError::NotFound {
            what: "queue q".into(),
        };
        assert!(resumable(&unreachable));
        assert!(!resumable(&missing));
    }
}
