//! When something periodic is due, tolerant of the tick's jitter.
//!
//! The runtime decides every plan once per tick, and full ticks come exactly one interval (the
//! shortest plan's) apart. A reading is stamped when its check started, which is a few
//! milliseconds after its tick; the next tick's decision comes a few milliseconds after that
//! tick. Comparing "last reading + interval <= now" exactly therefore fails about half the
//! time and the check slips to the tick after next: checks every other interval, and a
//! failover one check later than `failover_after_seconds`. [`elapsed`] gives the comparison a
//! slack of a quarter of the interval, at most [`MAX_SLACK`]: far above a tick's jitter, far
//! below the next tick, so a check comes once per interval and a span is never cut by more
//! than the slack.

use std::time::Duration;

use crate::types::Millis;

/// The largest slack, whatever the interval: a plan with a long interval still checks within
/// a quarter of a second of it (ticks may be shorter than its interval when another plan's
/// interval is shorter).
pub const MAX_SLACK: Duration = Duration::from_millis(250);

/// The tolerance for a plan that checks every `interval`.
pub fn slack(interval: Duration) -> Duration {
    (interval / 4).min(MAX_SLACK)
}

/// Whether `span` has passed since `since` at `now`, give or take [`slack`] of `interval`.
pub fn elapsed(now: Millis, since: Millis, span: Duration, interval: Duration) -> bool {
    since.plus(span) <= now.plus(slack(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Millis {
        Millis(ms)
    }

    #[test]
    fn a_tick_a_little_earlier_than_the_last_reading_plus_the_interval_counts() {
        let i = Duration::from_secs(1);
        // Read 7 ms after its tick, the next tick decided 3 ms after it.
        assert!(elapsed(at(11_003), at(10_007), i, i));
        // Half an interval on is not an interval.
        assert!(!elapsed(at(10_500), at(10_007), i, i));
    }

    #[test]
    fn the_slack_is_a_quarter_interval_at_most_a_quarter_second() {
        assert_eq!(slack(Duration::from_millis(200)), Duration::from_millis(50));
        assert_eq!(slack(Duration::from_secs(1)), Duration::from_millis(250));
        assert_eq!(slack(Duration::from_secs(60)), MAX_SLACK);
    }
}
