//! The clock module: the one place production code reads the system clocks, and qfence's one
//! time helper. Wall-clock time as qfence writes it: milliseconds since the Unix epoch in
//! records and on the wire, and UTC dates for people. Decisions never read the clock; they
//! are given `now`. Async code waits and measures with `tokio::time` (tests pause it); the
//! few places that need the raw clocks call [`wall_clock`] or [`monotonic_now`] here, which
//! the workspace's `clippy.toml` enforces (`disallowed-methods`).
//!
//! Dates are computed here (Howard Hinnant's `civil_from_days`) rather than with a date crate:
//! qfence only ever prints UTC, so a calendar library would add a dependency for one function.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Now, by the wall clock: for stamping a reading or a record, and for comparing with times
/// other systems wrote (token expiries, replication timestamps).
#[allow(clippy::disallowed_methods)] // The clock module: the one place the wall clock is read.
pub fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// Now, by the monotonic clock: for measuring elapsed time (a latency, what is left of a
/// timeout) where `tokio::time` does not apply (outside a runtime, or where real time must be
/// measured even under a paused test clock).
#[allow(clippy::disallowed_methods)] // The clock module: the one place the monotonic clock is read.
pub fn monotonic_now() -> Instant {
    Instant::now()
}

/// Milliseconds since the Unix epoch of `t` (0 before it, saturating far after it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    unix_ms(wall_clock())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) in the proleptic Gregorian calendar to days since 1970-01-01, the
/// inverse of [`civil_from_days`] (for parsing dates other systems write).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the Unix epoch as `HH:MM:SS`, UTC.
pub fn utc_clock(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS`, UTC (callers add the zone
/// as their readers expect it: `Z`, ` UTC`).
pub fn utc(ms: u64) -> String {
    let days = i64::try_from(ms / 1000 / 86_400).unwrap_or(i64::MAX / 2);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {}", utc_clock(ms))
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the second:
/// `2023-11-14T22:13:20Z` (for records read by machines and by people alike).
pub fn utc_rfc3339(ms: u64) -> String {
    let days = i64::try_from(ms / 1000 / 86_400).unwrap_or(i64::MAX / 2);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{}Z", utc_clock(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20");
        // A leap day, and the day after a century that is not a leap year.
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        assert_eq!(utc_clock(1_700_000_061_999), "22:14:21");
        assert_eq!(utc_rfc3339(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc_rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn days_from_civil_inverts_civil_from_days() {
        for days in [-719_468, -1, 0, 11_016, 19_675, 47_541, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, i64::from(m), i64::from(d)), days);
        }
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
    }

    #[test]
    fn times_before_the_epoch_read_as_zero() {
        assert_eq!(unix_ms(UNIX_EPOCH - std::time::Duration::from_secs(1)), 0);
        assert_eq!(
            unix_ms(UNIX_EPOCH + std::time::Duration::from_millis(1_500)),
            1_500
        );
    }
}
