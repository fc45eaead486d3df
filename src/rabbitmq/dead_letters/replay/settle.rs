//! Settling a queue's replay: waiting for the publisher confirms, acknowledging the
//! originals (deferred `multiple` acks where safe), and keeping what stays.

use futures::StreamExt;
use lapin::options::BasicAckOptions;
use lapin::{BasicProperties, Confirmation};

use super::super::{keep, Held};
use super::{copy_failure, InFlight, Pending, Run, Scan, ACK_EVERY};
use crate::broker::BrokerError;
use crate::dlq::replay::{refused, ReplayReport};
use crate::rabbitmq::amqp::map_error;

impl Run<'_> {
    /// Waits for the oldest copy's confirm: acked, the original is acked (replayed);
    /// otherwise the original stays (failed).
    pub(super) async fn settle_oldest(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
    ) -> Result<(), BrokerError> {
        let Some(mut f) = state.in_flight.pop_front() else {
            return Ok(());
        };
        let failure = match f.take_confirm().wait().await {
            Ok(c) => copy_failure(&c),
            Err(e) => {
                // The publishing channel failed. If the channel holding the messages is
                // fine, the broker refused one publish by closing the publishing channel
                // (an internal exchange, no write permission), which lost every copy in
                // flight with it; otherwise the connection is gone: an error.
                if !self.channel.status().connected() {
                    return Err(map_error(self.conn, &e));
                }
                return self.isolate_refused(state, report, f).await;
            }
        };
        match failure {
            None => {
                self.ack_replayed(state, f.tag).await?;
                report.replayed += 1;
            }
            Some(why) => {
                report.fail(why);
                self.keep_in(state, f.tag, f.count, &f.properties, &f.body)
                    .await?;
            }
        }
        Ok(())
    }

    /// After the broker closed the publishing channel on `first` (the oldest copy in
    /// flight): settles the rest of the window — confirmed copies are replayed, the
    /// others were lost with the channel — then publishes each copy lost with it again,
    /// alone, on a new channel: the one the broker refuses again fails with its reason,
    /// the others are replayed. No deferred multiple ack may cover an unsettled original
    /// meanwhile: every ack here is single.
    pub(super) async fn isolate_refused(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        first: InFlight,
    ) -> Result<(), BrokerError> {
        state.publisher = None;
        self.send_deferred(state).await?;
        let mut lost = vec![first];
        while let Some(mut f) = state.in_flight.pop_front() {
            match f.take_confirm().wait().await {
                Ok(Confirmation::Ack(None)) => {
                    self.send_ack(state, f.tag, false).await?;
                    report.replayed += 1;
                }
                Ok(_) | Err(_) => lost.push(f),
            }
        }
        for mut f in lost {
            f.confirm = self
                .publish_copy(state, &f.route, &f.properties, &f.body)
                .await?;
            let why = match f.take_confirm().wait().await {
                Ok(c) => copy_failure(&c),
                Err(e) => {
                    if !self.channel.status().connected() {
                        return Err(map_error(self.conn, &e));
                    }
                    state.publisher = None;
                    Some(refused(&map_error(self.conn, &e)))
                }
            };
            match why {
                None => {
                    self.send_ack(state, f.tag, false).await?;
                    report.replayed += 1;
                }
                Some(why) => {
                    report.fail(why);
                    self.keep_in(state, f.tag, f.count, &f.properties, &f.body)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// A message that stays ([`Run::stays`]), with the scan's bookkeeping: a held one
    /// fills the consumer's window.
    pub(super) async fn keep_in(
        &self,
        state: &mut Scan,
        tag: u64,
        count: u64,
        properties: &BasicProperties,
        body: &[u8],
    ) -> Result<(), BrokerError> {
        let before = state.requeue.len();
        self.stays(tag, count, properties, body, &mut state.requeue)
            .await?;
        // Rotated (acked, its copy behind the messages still to read), or held.
        if state.requeue.len() > before {
            state.held_here += 1;
            state.min_held = Some(state.min_held.map_or(tag, |m| m.min(tag)));
        }
        Ok(())
    }

    /// Acknowledges the original of a confirmed copy. While no message held for the
    /// final requeue has a lower delivery tag, acks are deferred and sent as one
    /// `basic.ack` with `multiple` every [`ACK_EVERY`] (every lower unacknowledged tag
    /// is then a replayed original: the copies settle in delivery order); otherwise one by
    /// one. Each ack's write is checked later ([`Scan::acks`]).
    pub(super) async fn ack_replayed(&self, state: &mut Scan, tag: u64) -> Result<(), BrokerError> {
        // Read one at a time, every original is acked at once: a crash must not return
        // (with a delivery counted) originals whose copies were confirmed long ago.
        if !state.one_at_a_time && state.min_held.is_none_or(|m| m > tag) {
            state.ack_upto = Some(tag);
            state.deferred += 1;
            if state.deferred >= ACK_EVERY {
                self.send_deferred(state).await?;
            }
            return Ok(());
        }
        self.send_deferred(state).await?;
        self.send_ack(state, tag, false).await
    }

    /// Settles every copy in flight, writes every ack and waits for the broker's reply to
    /// a passive declare on the consuming channel: the broker has then handled every ack
    /// sent before it (a channel handles its methods in order), so no copy published so
    /// far can be duplicated by a crash any more ([`crash_bound`](crate::dlq::replay::crash_bound)).
    pub(super) async fn settle_all(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
    ) -> Result<(), BrokerError> {
        while !state.in_flight.is_empty() {
            self.settle_oldest(state, report).await?;
        }
        self.flush_acks(state).await?;
        self.ready().await?;
        state.unproven = 0;
        Ok(())
    }

    /// Sends the deferred multiple ack, if any.
    pub(super) async fn send_deferred(&self, state: &mut Scan) -> Result<(), BrokerError> {
        if let Some(upto) = state.ack_upto.take() {
            state.deferred = 0;
            self.send_ack(state, upto, true).await?;
        }
        Ok(())
    }

    /// Sends the deferred ack and waits until every ack is written.
    pub(super) async fn flush_acks(&self, state: &mut Scan) -> Result<(), BrokerError> {
        self.send_deferred(state).await?;
        while let Some(r) = state.acks.next().await {
            r.map_err(|e| map_error(self.conn, &e))?;
        }
        Ok(())
    }

    /// Queues `basic.ack` for `tag` (`multiple`: and every lower tag); its write is
    /// awaited later, with the finished ones checked now.
    pub(super) async fn send_ack(
        &self,
        state: &mut Scan,
        tag: u64,
        multiple: bool,
    ) -> Result<(), BrokerError> {
        let channel = self.channel.clone();
        let mut ack: Pending<()> =
            Box::pin(async move { channel.basic_ack(tag, BasicAckOptions { multiple }).await });
        if let std::task::Poll::Ready(r) = futures::poll!(ack.as_mut()) {
            r.map_err(|e| map_error(self.conn, &e))?;
        } else {
            state.acks.push(ack);
        }
        while let Some(Some(r)) = futures::FutureExt::now_or_never(state.acks.next()) {
            r.map_err(|e| map_error(self.conn, &e))?;
        }
        Ok(())
    }

    /// A message that stays in the dead-letter queue ([`keep`]).
    pub(super) async fn stays(
        &self,
        tag: u64,
        count: u64,
        properties: &BasicProperties,
        body: &[u8],
        requeue: &mut Vec<u64>,
    ) -> Result<(), BrokerError> {
        let held = Held {
            tag,
            count,
            properties,
            body,
        };
        let facts = (self.limits.quorum, self.limits.delivery_limit);
        keep(self.conn, self.channel, self.queue, facts, held, requeue).await
    }
}
