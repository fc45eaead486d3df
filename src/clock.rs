//! The one clock of the operator: the current time in milliseconds since the Unix epoch
//! ([`now_ms`]), and an injectable [`Clock`] for code whose tests fix the time.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A clock returning the current time as a Kubernetes [`Time`] (injected so tests are
/// deterministic: `Arc::new(|| fixed_time)`). Call it: `(clock)()`.
pub type Clock = Arc<dyn Fn() -> Time + Send + Sync>;

/// The system clock.
pub fn system() -> Clock {
    Arc::new(|| Time(k8s_openapi::jiff::Timestamp::now()))
}

/// Milliseconds since the Unix epoch, now (0 for a system clock set before 1970,
/// `u64::MAX` beyond the year 584 million).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `t` in milliseconds since the Unix epoch (0 for a time before 1970).
pub fn epoch_ms(t: &Time) -> u64 {
    u64::try_from(t.0.as_millisecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_and_now_ms_agree() {
        let before = now_ms();
        let t = epoch_ms(&(system())());
        let after = now_ms();
        // 2020-09-13, well in the past: a clock at 0 or a unit mix-up fails.
        assert!(before > 1_600_000_000_000, "{before}");
        assert!(before <= t && t <= after, "{before} {t} {after}");
    }

    #[test]
    fn epoch_ms_of_a_fixed_time() {
        let t = Time(k8s_openapi::jiff::Timestamp::from_millisecond(1_234_567).expect("time"));
        assert_eq!(epoch_ms(&t), 1_234_567);
        let before_1970 = Time(k8s_openapi::jiff::Timestamp::from_millisecond(-5).expect("time"));
        assert_eq!(epoch_ms(&before_1970), 0);
    }
}
