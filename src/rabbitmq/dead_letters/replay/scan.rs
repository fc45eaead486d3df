//! The scan of one dead-letter queue: read, decide, publish, pace.

use std::sync::atomic::Ordering;

use lapin::message::Delivery;

use super::{Next, Pace, Run, Scan, SETTLE_EACH_PAUSE};
use crate::broker::message::Properties;
use crate::broker::BrokerError;
use crate::dlq::replay::{
    decide, limit_reached, next_batch, Observer, ReplayReport, CONFIRM_WINDOW,
    CONFIRM_WINDOW_ONE_AT_A_TIME,
};
use crate::dlq::{release_for, DeadLetter, Release};

/// Consecutive waits of [`super::IDLE`] without a delivery while the queue has ready
/// messages after which the scan reads by `basic.get` instead of its consumer: on a queue
/// with a single active consumer, ours waits behind another one for ever.
const IDLE_ROUNDS_BEFORE_GET: u32 = 4;

/// What the scan does after waiting for a delivery (short-lived: one per message, never
/// stored).
#[allow(clippy::large_enum_variant)]
enum Read {
    /// A message to decide on.
    Message(Delivery),
    /// Nothing left to read: the scan is over.
    Done,
    /// Nothing came for a while, and the queue still has ready messages: look again.
    Again,
}

impl Run<'_> {
    /// The scan proper: reads (consumer deliveries), decides, publishes and settles until
    /// every message there at the start was read, the queue is empty, `--limit` is
    /// reached, or `cancel` fires (or a checkpoint failed).
    pub(super) async fn scan(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
        pace: Pace,
    ) -> Result<(), BrokerError> {
        loop {
            if self.cancel.is_cancelled()
                || self.interrupted.load(Ordering::SeqCst)
                || limit_reached(self.opts.limit, report.replayed, state.in_flight.len())
                || state.read >= state.to_read
            {
                return Ok(());
            }
            // Kept messages fill the consumer's prefetch window: a fresh consumer gets a
            // fresh window while the old one's messages stay held (RabbitMQ keeps a
            // cancelled consumer's unacknowledged messages with the channel).
            if !state.one_at_a_time && state.held_here >= usize::from(pace.prefetch) / 2 {
                self.stop_consuming(state).await?;
                state.consumer = Some(self.consume().await?);
                state.held_here = 0;
            }
            let delivery = match self.read(state, report).await? {
                Read::Message(d) => d,
                Read::Done => return Ok(()),
                Read::Again => continue,
            };
            let props = Properties::from(&delivery.properties);
            let letter = DeadLetter::from_properties(self.queue, &props, &delivery.data, 0);
            state.read += 1;
            report.scanned += 1;
            match self.route_of(state, report, &letter, &props).await? {
                None => {
                    self.keep_in(
                        state,
                        delivery.delivery_tag,
                        letter.delivery_count,
                        &delivery.properties,
                        &delivery.data,
                    )
                    .await?
                }
                Some(route) => {
                    let count = letter.delivery_count;
                    if !self
                        .send(state, report, observer, (delivery, count), route, pace)
                        .await?
                    {
                        return Ok(());
                    }
                }
            }
            observer.progress(report);
        }
    }

    /// The next delivery: one a cancelled consumer left, else from the consumer or
    /// `basic.get`. When the queue is empty, or nothing came for a while and it has no
    /// ready message left (others may have taken some of those counted at the start), the
    /// copies in flight are settled and the scan is over.
    async fn read(&self, state: &mut Scan, report: &mut ReplayReport) -> Result<Read, BrokerError> {
        if let Some(d) = state.pending.pop_front() {
            return Ok(Read::Message(d));
        }
        match self.next_delivery(state).await? {
            Next::Delivery(d) => {
                state.idle_rounds = 0;
                Ok(Read::Message(d))
            }
            Next::Empty => {
                while !state.in_flight.is_empty() {
                    self.settle_oldest(state, report).await?;
                }
                Ok(Read::Done)
            }
            Next::Idle => {
                while !state.in_flight.is_empty() {
                    self.settle_oldest(state, report).await?;
                }
                self.flush_acks(state).await?;
                if self.cancel.is_cancelled() || self.ready().await? == 0 {
                    return Ok(Read::Done);
                }
                state.idle_rounds += 1;
                if state.idle_rounds >= IDLE_ROUNDS_BEFORE_GET && !state.one_at_a_time {
                    // Messages are ready and none comes: another consumer holds the queue
                    // (`x-single-active-consumer`). `basic.get` is not subject to it.
                    self.stop_consuming(state).await?;
                    state.one_at_a_time = true;
                }
                Ok(Read::Again)
            }
        }
    }

    /// Where the copy of `letter` (with neutral properties `props`) goes, or `None` when
    /// it stays: not taken ([`decide`]), its route resolved from the broker's bindings
    /// reaching another queue than the source queue (skipped), or a dry run (counted as
    /// would-be replayed).
    ///
    /// # Errors
    /// The management API's errors while resolving the route.
    async fn route_of(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        letter: &DeadLetter,
        props: &Properties,
    ) -> Result<Option<(String, String)>, BrokerError> {
        let Some(route) = decide(self.opts, letter, self.now_ms, self.source, report) else {
            return Ok(None);
        };
        let reach = (route.0.as_str(), route.1.as_str());
        let headers = props.headers.as_ref();
        match state
            .routes
            .check(self.broker, self.vhost, reach, headers, self.source)
            .await?
        {
            Err(why) => {
                // Never sent where it does not belong: skipped, it stays.
                report.skip(why);
                Ok(None)
            }
            Ok(()) if self.opts.dry_run => {
                // Would be replayed: counted, and it stays.
                report.replayed += 1;
                Ok(None)
            }
            Ok(()) => Ok(Some(route)),
        }
    }

    /// Publishes the copy of `delivery` (with delivery count `count`) along `route`: a
    /// checkpoint first when a batch starts, the crash window kept, then the confirm
    /// window and the pace. Returns `false` when the checkpoint failed: the delivery is
    /// put back (uncounted) and the replay stops.
    async fn send(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        observer: &mut dyn Observer,
        (delivery, count): (Delivery, u64),
        route: (String, String),
        pace: Pace,
    ) -> Result<bool, BrokerError> {
        if state.batch_left == 0 {
            // Every earlier copy settled, then the checkpoint, then the batch.
            self.settle_all(state, report).await?;
            let this_batch = next_batch(self.opts.limit, pace.batch, report.replayed);
            if let Err(why) = observer.checkpoint(report, this_batch).await {
                tracing::warn!(queue = self.queue, reason = %why, "checkpoint failed: stopping the replay");
                self.interrupted.store(true, Ordering::SeqCst);
                state.pending.push_front(delivery);
                state.read -= 1;
                report.scanned -= 1;
                report.matched -= 1;
                return Ok(false);
            }
            state.batch_left = this_batch;
        }
        if state.unproven >= self.opts.max_in_flight.max(1) {
            // The crash window is full ([`crash_bound`](crate::dlq::replay::crash_bound)).
            self.settle_all(state, report).await?;
        }
        state.batch_left -= 1;
        state.unproven += 1;
        let confirm = self
            .publish_copy(state, &route, &delivery.properties, &delivery.data)
            .await?;
        state.in_flight.push_back(super::InFlight {
            confirm,
            tag: delivery.delivery_tag,
            count,
            properties: delivery.properties,
            body: delivery.data,
            route,
        });
        self.keep_window(state, report, count).await?;
        if let Some(p) = pace.pause {
            self.pace(state, report, p).await?;
        }
        Ok(true)
    }

    /// After a copy went out: keeps the copies in flight within the confirm window.
    ///
    /// Read one at a time (a quorum queue with a delivery limit), an original whose copy
    /// is in flight is as exposed as the message in hand: a crash returns it with a
    /// delivery counted. One (with delivery count `count`) that a single return could push
    /// past the limit is settled at once; the others (like the held ones,
    /// [`release_for`]) keep a spare return, and at most
    /// [`CONFIRM_WINDOW_ONE_AT_A_TIME`] are in flight.
    async fn keep_window(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        count: u64,
    ) -> Result<(), BrokerError> {
        let window = if state.one_at_a_time {
            CONFIRM_WINDOW_ONE_AT_A_TIME
        } else {
            CONFIRM_WINDOW
        };
        let at_risk = state.one_at_a_time
            && release_for(self.limits.quorum, self.limits.delivery_limit, count)
                == Release::Rotate;
        if at_risk {
            while !state.in_flight.is_empty() {
                self.settle_oldest(state, report).await?;
            }
            self.flush_acks(state).await?;
        } else if state.in_flight.len() >= window {
            self.settle_oldest(state, report).await?;
        }
        Ok(())
    }

    /// At a limited rate (`pause` between copies): the copies are settled before each
    /// pause of 10 ms or more, so an interruption or a crash finds few unsettled; above
    /// 100/s, once a tenth of a second's worth is in flight (a settle per copy would cap
    /// the rate at one round trip each). Then waits for the next slot.
    async fn pace(
        &self,
        state: &mut Scan,
        report: &mut ReplayReport,
        pause: std::time::Duration,
    ) -> Result<(), BrokerError> {
        let in_flight_max = if pause >= SETTLE_EACH_PAUSE {
            0
        } else {
            (0.1 / pause.as_secs_f64()) as usize
        };
        while state.in_flight.len() > in_flight_max {
            self.settle_oldest(state, report).await?;
        }
        if state.in_flight.is_empty() {
            self.flush_acks(state).await?;
        }
        // Paced from the last slot, not from now: the settling above counts as part of
        // the pause (else `--rate 1000` gave ~270/s).
        let now = tokio::time::Instant::now();
        // Late wake-ups are made up for, up to a tenth of a second's worth.
        let floor = now
            .checked_sub(pause.max(std::time::Duration::from_millis(100)))
            .unwrap_or(now);
        let slot = state
            .next_slot
            .map_or(now + pause, |t| t.max(floor) + pause);
        state.next_slot = Some(slot);
        self.pause_until(slot).await;
        Ok(())
    }
}
