//! [`DeadLetterOps`] of the [`FakeBroker`]: inspect, replay and purge over the
//! broker-neutral logic of [`crate::dlq`], with publisher-confirm semantics (a copy is in
//! its destination queues before its original goes).
//!
//! An operation takes the messages of a dead-letter queue out while it reads them
//! ([`Taken`]) and puts back what stays when it ends, also after an error: the ones read
//! and kept at the head in read order (on a quorum queue, each with one more
//! `x-delivery-count`, and dropped past the delivery limit), the unread ones after them,
//! then those that arrived meanwhile, then the rotated copies.

use std::collections::VecDeque;

use tokio_util::sync::CancellationToken;

use super::{FakeBroker, Published, State};
use crate::broker::message::{HeaderValue, Message, Properties};
use crate::broker::{BrokerError, DeadLetterOps, QueueCounts, QueueLimits};
use crate::dlq::browse::{budget, guard, Access, InspectOptions};
use crate::dlq::filter::Filter;
use crate::dlq::purge::PurgeReport;
use crate::dlq::repair::copy_content;
use crate::dlq::replay::{
    checkpoint_batch, decide, limit_reached, next_batch, Observer, ReplayOptions, ReplayReport,
    NACKED, UNROUTABLE,
};
use crate::dlq::route::{ExchangeRoute, Routes};
use crate::dlq::{release_for, DeadLetter, Inspection, Release};
use crate::rabbitmq::dead_letters::written_by_commands;
use crate::rabbitmq::ownership::{claims, conflict_message, record_name};
use crate::topology::DesiredTopology;

/// The messages of one dead-letter queue while an operation holds them.
pub(super) struct Taken {
    vhost: String,
    queue: String,
    limits: QueueLimits,
    /// Not read yet, in queue order.
    pub(super) unread: VecDeque<Message>,
    /// Read and given back: to the head, in read order.
    pub(super) requeue: Vec<Message>,
    /// Copies of rotated messages: to the tail.
    rotated: Vec<Message>,
    /// The broker refuses publishes to this queue (a rotation fails).
    refused: bool,
}

impl Taken {
    /// How many messages the queue held when taken (and not read since).
    fn count(&self) -> u64 {
        self.unread.len() as u64
    }

    /// A read message (with delivery count `count`) that stays: requeued, or rotated
    /// where a return could reach the delivery limit ([`release_for`]).
    ///
    /// # Errors
    /// A rotation the broker refuses (the original then returns to the queue).
    fn keep(&mut self, mut m: Message, count: u64) -> Result<(), BrokerError> {
        match release_for(self.limits.quorum, self.limits.delivery_limit, count) {
            Release::Requeue => self.requeue.push(m),
            Release::Rotate if self.refused => {
                self.requeue.push(m);
                return Err(BrokerError::Amqp {
                    reason: format!(
                        "queue {:?}: the copy to rotate was refused by the broker; the original stays in the queue",
                        self.queue
                    ),
                });
            }
            Release::Rotate => {
                if let Some(h) = m.properties.headers.as_mut() {
                    h.remove("x-delivery-count");
                }
                self.rotated.push(m);
            }
        }
        Ok(())
    }
}

impl State {
    /// Each dead-letter queue of `topology` with its limits, all looked up before any is
    /// read; for [`Access::Write`], none may be another owner's (nor the source queue).
    fn limits_of_all(
        &mut self,
        topology: &DesiredTopology,
        access: Access,
    ) -> Result<Vec<(String, QueueLimits)>, BrokerError> {
        self.call()?;
        if access == Access::Write {
            let taken: Vec<_> = claims(topology)
                .into_iter()
                .filter(written_by_commands)
                .filter_map(|c| {
                    let r = self
                        .records
                        .get(&record_name(&topology.vhost, c.kind, &c.name))?;
                    (r.owner != topology.owner).then(|| (c, r.clone()))
                })
                .collect();
            if let Some((first, _)) = taken.first() {
                return Err(BrokerError::NameOwned {
                    field: first.field,
                    message: conflict_message(&taken),
                });
            }
        }
        topology
            .dead_letter_queues()
            .map(|q| Ok((q.to_string(), self.queue_limits(&topology.vhost, q)?)))
            .collect()
    }
}

impl FakeBroker {
    /// Takes every message of `queue` out (the queue was looked up already).
    pub(super) fn take(
        &self,
        vhost: &str,
        queue: &str,
        limits: QueueLimits,
    ) -> Result<Taken, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        let q = s
            .queue_mut(vhost, queue)
            .ok_or_else(|| BrokerError::NotFound {
                what: format!("queue {queue:?} in vhost {vhost:?}"),
            })?;
        Ok(Taken {
            vhost: vhost.to_string(),
            queue: queue.to_string(),
            limits,
            unread: std::mem::take(&mut q.messages),
            requeue: Vec::new(),
            rotated: Vec::new(),
            refused: q.refuse_publishes,
        })
    }

    /// Puts back what `taken` kept (module doc: the order, and the delivery counts).
    pub(super) fn give_back(&self, taken: Taken) {
        let mut s = self.lock();
        let Some(q) = s.queue_mut(&taken.vhost, &taken.queue) else {
            return;
        };
        let arrived = std::mem::take(&mut q.messages);
        for mut m in taken.requeue {
            if taken.limits.quorum {
                let headers = m.properties.headers.get_or_insert_with(Default::default);
                let count = headers
                    .get("x-delivery-count")
                    .and_then(HeaderValue::as_u64)
                    .unwrap_or(0)
                    .saturating_add(1);
                headers.insert(
                    "x-delivery-count".into(),
                    HeaderValue::I64(i64::try_from(count).unwrap_or(i64::MAX)),
                );
                if taken.limits.delivery_limit.is_some_and(|l| count > l) {
                    q.dropped += 1;
                    continue;
                }
            }
            q.messages.push_back(m);
        }
        q.messages.extend(taken.unread);
        q.messages.extend(arrived);
        q.messages.extend(taken.rotated);
    }

    /// Scans one taken queue for an inspection (`out` counts it).
    fn inspect_queue(
        &self,
        taken: &mut Taken,
        (opts, now_ms): (InspectOptions, u64),
        cancel: &CancellationToken,
        out: &mut Inspection,
    ) -> Result<(), BrokerError> {
        let count = taken.count();
        guard(&taken.queue, &taken.limits, count)?;
        out.total += count;
        for _ in 0..budget(opts.max_messages, out.scanned, count) {
            if cancel.is_cancelled() {
                out.interrupted = true;
                break;
            }
            let Some(m) = taken.unread.pop_front() else {
                break;
            };
            let letter = DeadLetter::from_properties(
                &taken.queue,
                &m.properties,
                &m.body,
                opts.preview_bytes,
            );
            let delivery_count = letter.delivery_count;
            let (quorum, limit) = (taken.limits.quorum, taken.limits.delivery_limit);
            if release_for(quorum, limit, delivery_count) == Release::Rotate {
                out.rotated += 1;
            }
            out.add(letter, now_ms, opts.sample_size);
            taken.keep(m, delivery_count)?;
        }
        Ok(())
    }

    /// Purges one taken queue (`report` counts it).
    fn purge_queue(
        &self,
        taken: &mut Taken,
        (filter, now_ms): (&Filter, u64),
        cancel: &CancellationToken,
        report: &mut PurgeReport,
    ) -> Result<(), BrokerError> {
        let count = taken.count();
        guard(&taken.queue, &taken.limits, count)?;
        report.total += count;
        for _ in 0..count {
            if cancel.is_cancelled() {
                report.interrupted = true;
                break;
            }
            let Some(m) = taken.unread.pop_front() else {
                break;
            };
            let letter = DeadLetter::from_properties(&taken.queue, &m.properties, &m.body, 0);
            if report.take(&letter, filter, now_ms) {
                report.removed_one();
                continue;
            }
            taken.keep(m, letter.delivery_count)?;
        }
        Ok(())
    }

    /// Replays one taken queue of `topology` (`report` counts it). Returns `true` when a
    /// checkpoint of `observer` failed (the replay stops).
    async fn replay_queue(
        &self,
        taken: &mut Taken,
        (topology, opts, now_ms): (&DesiredTopology, &ReplayOptions, u64),
        cancel: &CancellationToken,
        observer: &mut dyn Observer,
        (routes, report): (&mut Routes, &mut ReplayReport),
    ) -> Result<bool, BrokerError> {
        let source = topology.routes.source_queue.as_str();
        let (to_read, batch) = (taken.count(), checkpoint_batch(opts.rate));
        let (mut read, mut batch_left) = (0, 0);
        while !cancel.is_cancelled()
            && !limit_reached(opts.limit, report.replayed, 0)
            && read < to_read
        {
            let Some(m) = taken.unread.pop_front() else {
                break;
            };
            let letter = DeadLetter::from_properties(&taken.queue, &m.properties, &m.body, 0);
            read += 1;
            report.scanned += 1;
            let mut route = decide(opts, &letter, now_ms, source, report);
            if let Some((exchange, key)) = &route {
                let headers = m.properties.headers.as_ref();
                let reach = (exchange.as_str(), key.as_str());
                match routes
                    .check(self, &topology.vhost, reach, headers, source)
                    .await?
                {
                    Err(why) => {
                        report.skip(why);
                        route = None;
                    }
                    Ok(()) if opts.dry_run => {
                        report.replayed += 1;
                        route = None;
                    }
                    Ok(()) => {}
                }
            }
            let Some((exchange, key)) = route else {
                taken.keep(m, letter.delivery_count)?;
                observer.progress(report);
                continue;
            };
            if batch_left == 0 {
                let this_batch = next_batch(opts.limit, batch, report.replayed);
                if let Err(why) = observer.checkpoint(report, this_batch).await {
                    tracing::warn!(queue = taken.queue, reason = %why, "checkpoint failed: stopping the replay");
                    taken.unread.push_front(m);
                    report.scanned -= 1;
                    report.matched -= 1;
                    return Ok(true);
                }
                batch_left = this_batch;
            }
            batch_left -= 1;
            let (headers, body) =
                copy_content(m.properties.headers.as_ref(), &m.body, opts, now_ms);
            let copy = Message {
                properties: Properties {
                    headers: Some(headers),
                    ..m.properties.clone()
                },
                body,
            };
            let published = {
                let mut s = self.lock();
                s.call()?;
                s.publish(&topology.vhost, &exchange, &key, copy)
            };
            match published {
                Published::Routed(_) => report.replayed += 1,
                Published::Refused => {
                    report.fail(NACKED.into());
                    taken.keep(m, letter.delivery_count)?;
                }
                Published::Unroutable => {
                    report.fail(UNROUTABLE.into());
                    taken.keep(m, letter.delivery_count)?;
                }
            }
            observer.progress(report);
        }
        observer.progress(report);
        Ok(false)
    }
}

#[async_trait::async_trait]
impl DeadLetterOps for FakeBroker {
    async fn inspect(
        &self,
        topology: &DesiredTopology,
        opts: InspectOptions,
        now_ms: u64,
        cancel: &CancellationToken,
    ) -> Result<Inspection, BrokerError> {
        let mut out = Inspection {
            resource: topology.owner.clone(),
            interrupted: cancel.is_cancelled(),
            ..Inspection::default()
        };
        if out.interrupted {
            return Ok(out);
        }
        let queues = self.lock().limits_of_all(topology, Access::Read)?;
        for (queue, limits) in queues {
            if cancel.is_cancelled() {
                out.interrupted = true;
                break;
            }
            let mut taken = self.take(&topology.vhost, &queue, limits)?;
            let scanned = self.inspect_queue(&mut taken, (opts, now_ms), cancel, &mut out);
            self.give_back(taken);
            scanned?;
            out.queues.push(queue);
        }
        Ok(out)
    }

    async fn replay(
        &self,
        topology: &DesiredTopology,
        opts: &ReplayOptions,
        now_ms: u64,
        cancel: &CancellationToken,
        observer: &mut dyn Observer,
    ) -> Result<ReplayReport, BrokerError> {
        let mut report = ReplayReport::start(topology, opts);
        if cancel.is_cancelled() {
            report.finish(true);
            return Ok(report);
        }
        let queues = self.lock().limits_of_all(topology, Access::Write)?;
        let (mut routes, mut interrupted) = (Routes::default(), false);
        for (queue, limits) in queues {
            if cancel.is_cancelled() || interrupted {
                break;
            }
            let mut taken = self.take(&topology.vhost, &queue, limits)?;
            if let Err(e) = guard(&queue, &limits, taken.count()) {
                self.give_back(taken);
                return Err(e);
            }
            report.total += taken.count();
            if taken.count() == 0 {
                observer.progress(&report);
                self.give_back(taken);
                continue;
            }
            let request = (topology, opts, now_ms);
            let state = (&mut routes, &mut report);
            let done = self
                .replay_queue(&mut taken, request, cancel, observer, state)
                .await;
            self.give_back(taken);
            interrupted = done?;
        }
        report.finish(cancel.is_cancelled() || interrupted);
        Ok(report)
    }

    async fn purge(
        &self,
        topology: &DesiredTopology,
        filter: &Filter,
        dry_run: bool,
        now_ms: u64,
        cancel: &CancellationToken,
        report: &mut PurgeReport,
    ) -> Result<(), BrokerError> {
        *report = PurgeReport::start(topology, dry_run);
        if cancel.is_cancelled() {
            report.interrupted = true;
            return Ok(());
        }
        let queues = self.lock().limits_of_all(topology, Access::Write)?;
        for (queue, limits) in queues {
            if cancel.is_cancelled() {
                report.interrupted = true;
                break;
            }
            let mut taken = self.take(&topology.vhost, &queue, limits)?;
            let done = self.purge_queue(&mut taken, (filter, now_ms), cancel, report);
            self.give_back(taken);
            done?;
        }
        Ok(())
    }

    async fn passive_queue_counts(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<QueueCounts>, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        Ok(s.vhost(vhost)?.queues.get(name).map(|q| QueueCounts {
            ready: q.messages.len() as u64,
            consumers: q.consumers,
        }))
    }

    async fn exchange_route(
        &self,
        vhost: &str,
        name: &str,
    ) -> Result<Option<ExchangeRoute>, BrokerError> {
        let mut s = self.lock();
        s.call()?;
        Ok(s.exchange_route(vhost, name))
    }
}
