//! The AMQP side of a queue's replay: the consumer, `basic.get`, the publishing channel
//! and connection, passive declares, and the pause between copies.

use futures::StreamExt;
use lapin::options::{
    BasicCancelOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation};

use super::super::convert::{headers_of, to_field_table};
use super::{Next, Pending, Run, Scan, Sent, IDLE};
use crate::broker::BrokerError;
use crate::dlq::repair::copy_content;
use crate::rabbitmq::amqp::{connect_vhost, map_error};

impl Run<'_> {
    /// Publishes the copy of a message (`properties`, `body`) along `route` on the
    /// publishing channel. Its frames are queued on the first poll; its write and its
    /// confirm are awaited later, in order, by `settle_oldest` (one wait per message would
    /// cap the rate at one round trip each).
    ///
    /// The copy is the original's properties with the headers and body of
    /// [`copy_content`] (the replay's headers; a repair's edits and body).
    ///
    /// # Errors
    /// The publishing channel cannot be opened; a header that does not fit AMQP 0-9-1
    /// (none read from a message can fail, only names and short strings over 255 bytes).
    pub(super) async fn publish_copy(
        &self,
        state: &mut Scan,
        route: &(String, String),
        properties: &BasicProperties,
        body: &[u8],
    ) -> Result<Sent<Confirmation>, BrokerError> {
        let original = properties.headers().as_ref().map(headers_of);
        let (headers, body) = copy_content(original.as_ref(), body, self.opts, self.now_ms);
        let table = to_field_table(&headers).map_err(|why| BrokerError::Amqp {
            reason: format!(
                "queue {:?}: the copy's headers do not fit AMQP: {why}",
                self.queue
            ),
        })?;
        let copy = properties.clone().with_headers(table);
        let channel = self.publisher(state).await?;
        let (exchange, routing_key) = route.clone();
        let mut confirm: Pending<Confirmation> = Box::pin(async move {
            channel
                .basic_publish(
                    exchange.as_str().into(),
                    routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    &body,
                    copy,
                )
                .await?
                .await
        });
        Ok(match futures::poll!(confirm.as_mut()) {
            std::task::Poll::Ready(done) => Sent::Done(done),
            std::task::Poll::Pending => Sent::Waiting(confirm),
        })
    }

    /// The channel copies are published on (confirm mode), on a connection of its own,
    /// both opened on first use and again after the broker closed them. Copies never go
    /// out on the connection holding the messages: a publish the broker refuses closes
    /// its channel, and a copy pipelined behind it can reach the broker after the close
    /// and close the whole connection (`504 CHANNEL_ERROR - expected 'channel.open'`);
    /// either would return every held message with a delivery counted.
    ///
    /// That close can still be on its way when a new channel is asked for (the connection
    /// looks connected, then fails the channel's opening): the channel is then opened
    /// once more, on a new connection.
    pub(super) async fn publisher(&self, state: &mut Scan) -> Result<Channel, BrokerError> {
        if let Some(p) = state.publisher.as_ref().filter(|p| p.status().connected()) {
            return Ok(p.clone());
        }
        let p = match self.open_publisher(state).await {
            Ok(p) => p,
            Err(_) => {
                state.publishing = None;
                self.open_publisher(state).await?
            }
        };
        state.publisher = Some(p.clone());
        Ok(p)
    }

    /// A channel in confirm mode on the publishing connection, which is (re)opened when
    /// there is none or it is no longer connected.
    pub(super) async fn open_publisher(&self, state: &mut Scan) -> Result<Channel, BrokerError> {
        let amqp = |e: lapin::Error| map_error(self.conn, &e);
        if !state
            .publishing
            .as_ref()
            .is_some_and(|c| c.status().connected())
        {
            state.publishing = Some(connect_vhost(self.conn, self.vhost).await?);
        }
        let Some(connection) = state.publishing.as_ref() else {
            return Err(BrokerError::Amqp {
                reason: "no publishing connection".into(),
            });
        };
        let p = connection.create_channel().await.map_err(amqp)?;
        p.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(amqp)?;
        Ok(p)
    }

    /// Starts a consumer on the queue (manual acknowledgements).
    pub(super) async fn consume(&self) -> Result<lapin::Consumer, BrokerError> {
        super::super::consume_held(self.channel, self.queue)
            .await
            .map_err(|e| map_error(self.conn, &e))
    }

    /// Cancels the current consumer and keeps the deliveries it still had in
    /// [`Scan::pending`] (they are held: read later, or given back).
    pub(super) async fn stop_consuming(&self, state: &mut Scan) -> Result<(), BrokerError> {
        let Some(mut consumer) = state.consumer.take() else {
            return Ok(());
        };
        self.channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await
            .map_err(|e| map_error(self.conn, &e))?;
        // After cancel-ok the stream yields what it had buffered, then ends.
        while let Some(d) = consumer.next().await {
            state
                .pending
                .push_back(d.map_err(|e| map_error(self.conn, &e))?);
        }
        Ok(())
    }

    /// The next delivery: from the consumer, or [`Next::Idle`] after [`IDLE`] without
    /// one; one at a time, by `basic.get`, or [`Next::Empty`].
    ///
    /// # Errors
    /// The channel's error, or the broker cancelling the consumer (the queue deleted).
    pub(super) async fn next_delivery(&self, state: &mut Scan) -> Result<Next, BrokerError> {
        if state.one_at_a_time {
            let got = self
                .channel
                .basic_get(self.queue.into(), BasicGetOptions { no_ack: false })
                .await
                .map_err(|e| map_error(self.conn, &e))?;
            return Ok(got.map_or(Next::Empty, |m| Next::Delivery(m.delivery)));
        }
        let Some(consumer) = state.consumer.as_mut() else {
            return Ok(Next::Idle);
        };
        match tokio::time::timeout(IDLE, consumer.next()).await {
            Ok(Some(d)) => d
                .map(Next::Delivery)
                .map_err(|e| map_error(self.conn, &e)),
            Ok(None) => Err(BrokerError::Amqp {
                reason: format!(
                    "queue {:?}: the broker cancelled the replay's consumer (was the queue deleted?)",
                    self.queue
                ),
            }),
            Err(_idle) => Ok(Next::Idle),
        }
    }

    /// Messages ready in the queue (a passive declare: current, not the statistics).
    pub(super) async fn ready(&self) -> Result<u64, BrokerError> {
        let declared = self
            .channel
            .queue_declare(
                self.queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| map_error(self.conn, &e))?;
        Ok(u64::from(declared.message_count()))
    }

    /// Sleeps until `until`, or less when `cancel` fires meanwhile.
    pub(super) async fn pause_until(&self, until: tokio::time::Instant) {
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            () = self.cancel.cancelled() => {}
        }
    }
}
