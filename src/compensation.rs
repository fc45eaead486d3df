//! The compensation success ratio of a DeadLetterQueue (`dlq_compensation_success_ratio`):
//! messages replayed ÷ messages dead-lettered into its dead-letter queues over the last
//! [`WINDOW_MS`] (one hour). Pure: the caller passes the times.
//!
//! **Source of the dead-lettered count.** RabbitMQ 3.10.8 has no per-queue counter of
//! dead-lettered arrivals: a queue's `message_stats.publish` (management API) counts only
//! messages a client channel published into it (the consumer helper's republish to the
//! dead-letter exchange, but also the copies an inspection or a replay rotates back into
//! the same queue), and none of the messages the broker dead-letters itself (a reject, a
//! delivery limit, a TTL) — checked by hand: four TTL-expired messages reached a classic
//! dead-letter queue with no `publish` count; with `disable_stats=true`, which the depth
//! listing uses, `message_stats` is absent altogether. The broker's
//! `rabbitmq_global_messages_dead_lettered_*_total` counters are per node, not per queue.
//!
//! So arrivals are derived from what the depth collector already reads, by conservation
//! of messages over the window: `arrived = D(end) − D(start) + replayed`, where `D` is
//! the summed depth of the DeadLetterQueue's dead-letter queues (one listing per vhost
//! per interval, [`crate::collector`]) at the first and last samples of the window, and
//! `replayed` what the operator's DeadLetterReplays removed between those two samples.
//! It is exact when nothing else takes messages out of the dead-letter queues; messages
//! removed otherwise (`dlq purge`, a `dlq replay` from the CLI, a consumer, the
//! retention TTL, `DropHead` overflow) are not seen, so the count is then a lower bound
//! and the ratio an upper bound. The depths lag the broker by its statistics interval
//! (5 s by default) while a replay's removals are dated when they happen: for one poll
//! after a replay the arrivals may look higher by what it removed (the next sample
//! corrects it).
//!
//! The ratio is absent (`None`) until two samples span some time, and whenever nothing
//! arrived in the window (`arrived ≤ 0`): "no dead letters" is not "0 % compensated".
//! It is not capped at 1: replaying a backlog older than the window gives a ratio above 1.

use std::collections::VecDeque;

/// Window of the ratio: one hour, in milliseconds.
pub const WINDOW_MS: u64 = 3_600_000;

/// Depth samples and replays of one DeadLetterQueue over the last window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    window_ms: u64,
    /// `(t_ms, dead-letter depth)`, oldest first: the newest sample at or before the
    /// window's start, then every later one.
    depths: VecDeque<(u64, u64)>,
    /// `(t_ms, messages replayed)`, oldest first.
    replayed: VecDeque<(u64, u64)>,
}

impl Default for Window {
    fn default() -> Self {
        Window::new(WINDOW_MS)
    }
}

impl Window {
    /// An empty window of `window_ms` milliseconds.
    pub fn new(window_ms: u64) -> Self {
        Window {
            window_ms,
            depths: VecDeque::new(),
            replayed: VecDeque::new(),
        }
    }

    /// Records the summed depth of the dead-letter queues (messages) sampled at `t_ms`
    /// (ms since the Unix epoch). A sample older than the newest one is ignored (a clock
    /// that stepped back must not reorder the window).
    pub fn depth(&mut self, t_ms: u64, depth: u64) {
        if self.depths.back().is_some_and(|(t, _)| *t > t_ms) {
            return;
        }
        self.depths.push_back((t_ms, depth));
        self.prune(t_ms);
    }

    /// Records `n` messages replayed (copy confirmed, original removed from a dead-letter
    /// queue) at `t_ms`.
    pub fn replayed(&mut self, t_ms: u64, n: u64) {
        if n > 0 {
            self.replayed.push_back((t_ms, n));
            self.prune(t_ms);
        }
    }

    /// Forgets what is older than the window ending at `now_ms`, keeping the newest depth
    /// sample at or before its start (the window's starting point).
    fn prune(&mut self, now_ms: u64) {
        let start = now_ms.saturating_sub(self.window_ms);
        while self.depths.len() >= 2 && self.depths[1].0 <= start {
            self.depths.pop_front();
        }
        // Replays before the first sample (or, with none, before the window) count nowhere.
        let from = self.depths.front().map_or(start, |(t, _)| (*t).max(start));
        while self.replayed.front().is_some_and(|(t, _)| *t < from) {
            self.replayed.pop_front();
        }
    }

    /// `(replayed, arrived)` between the first and the last depth sample: replays dated
    /// after the first sample and at or before the last, and `D(last) − D(first) +
    /// replayed` (negative when more left than the replays account for). `None` before
    /// two samples span some time.
    pub fn counts(&self) -> Option<(u64, i128)> {
        let (t0, d0) = *self.depths.front()?;
        let (t1, d1) = *self.depths.back()?;
        if t1 <= t0 {
            return None;
        }
        let replayed: u64 = self
            .replayed
            .iter()
            .filter(|(t, _)| *t > t0 && *t <= t1)
            .map(|(_, n)| *n)
            .fold(0u64, u64::saturating_add);
        let arrived = i128::from(d1) - i128::from(d0) + i128::from(replayed);
        Some((replayed, arrived))
    }

    /// Messages replayed ÷ messages dead-lettered over the window (module doc); `None`
    /// when nothing was dead-lettered in it or it spans no time yet.
    pub fn ratio(&self) -> Option<f64> {
        let (replayed, arrived) = self.counts()?;
        if arrived <= 0 {
            return None;
        }
        Some(replayed as f64 / arrived as f64)
    }

    /// `true` when the window holds nothing (it can be dropped).
    pub fn is_empty(&self) -> bool {
        self.depths.is_empty() && self.replayed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn absent_until_two_samples_and_while_nothing_arrives() {
        let mut w = Window::default();
        assert_eq!(w.ratio(), None);
        w.depth(0, 10);
        assert_eq!(w.ratio(), None, "one sample spans no time");
        w.depth(MIN, 10);
        assert_eq!(w.counts(), Some((0, 0)));
        assert_eq!(w.ratio(), None, "nothing dead-lettered: absent, not 0");
        w.depth(2 * MIN, 7);
        assert_eq!(
            w.ratio(),
            None,
            "a depth that fell by itself is not arrivals"
        );
    }

    #[test]
    fn arrivals_are_depth_growth_plus_what_was_replayed() {
        let mut w = Window::default();
        w.depth(0, 0);
        w.depth(MIN, 40);
        // 40 arrived, nothing replayed: 0, not absent.
        assert_eq!(w.ratio(), Some(0.0));
        // A replay takes 30 out; 20 more arrive meanwhile: depth 40 - 30 + 20 = 30.
        w.replayed(MIN + 1_000, 30);
        w.depth(2 * MIN, 30);
        assert_eq!(w.counts(), Some((30, 60)));
        assert_eq!(w.ratio(), Some(0.5));
        // The whole backlog replayed and nothing new: 60 arrived, 60 replayed.
        w.replayed(2 * MIN + 1, 30);
        w.depth(3 * MIN, 0);
        assert_eq!(w.ratio(), Some(1.0));
    }

    #[test]
    fn a_replay_is_counted_from_the_sample_that_follows_it() {
        let mut w = Window::default();
        w.depth(0, 100);
        w.depth(MIN, 110);
        // Replayed after the last sample: not in the span yet.
        w.replayed(MIN + 5, 100);
        assert_eq!(w.counts(), Some((0, 10)));
        // The next sample still shows the old depth (statistics lag): the removal looks
        // like arrivals for one poll ...
        w.depth(2 * MIN, 110);
        assert_eq!(w.counts(), Some((100, 110)));
        // ... and the sample after it corrects it.
        w.depth(3 * MIN, 10);
        assert_eq!(w.counts(), Some((100, 10)));
        assert_eq!(
            w.ratio(),
            Some(10.0),
            "an old backlog replayed: above 1, not capped"
        );
    }

    #[test]
    fn the_window_keeps_one_hour_from_the_last_sample_before_it() {
        let mut w = Window::new(60 * MIN);
        w.depth(0, 0);
        w.replayed(5 * MIN, 5);
        w.depth(10 * MIN, 20);
        w.depth(50 * MIN, 20);
        assert_eq!(w.counts(), Some((5, 25)));
        // At 70 min the window starts at 10 min: the 0-min sample and the replay at 5 min
        // are gone; the 10-min sample is the starting point.
        w.depth(70 * MIN, 26);
        assert_eq!(w.counts(), Some((0, 6)));
        assert_eq!(w.ratio(), Some(0.0));
        // Long after: only the last sample at or before the start, and the newest.
        w.depth(200 * MIN, 26);
        assert_eq!(w.depths.len(), 2);
        assert_eq!(w.ratio(), None);
        // A sample from a clock that stepped back is ignored.
        w.depth(100 * MIN, 0);
        assert_eq!(w.depths.back(), Some(&(200 * MIN, 26)));
        assert!(!w.is_empty());
    }

    #[test]
    fn replays_without_depth_samples_expire_with_the_window() {
        let mut w = Window::new(60 * MIN);
        w.replayed(0, 3);
        w.replayed(90 * MIN, 4);
        assert_eq!(w.replayed.len(), 1);
        assert_eq!(w.ratio(), None);
        w.replayed(91 * MIN, 0);
        assert_eq!(w.replayed.len(), 1, "zero is not recorded");
    }
}
