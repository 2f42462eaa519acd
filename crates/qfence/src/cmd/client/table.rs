//! Tables and times for people.

use comfy_table::{Table, presets};

/// A borderless table with a header, aligned for terminals and pipes alike.
pub fn new(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING).set_header(header.to_vec());
    t
}

/// Prints a table, with no trailing blanks.
pub fn print(t: &Table) {
    for line in t.to_string().lines() {
        println!("{}", line.trim_end());
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SSZ` (UTC).
pub fn datetime(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil(secs / 86_400);
    format!("{y:04}-{m:02}-{d:02} {}Z", clock(ms))
}

/// Milliseconds since the Unix epoch as `HH:MM:SS` (UTC): progress lines.
pub fn clock(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// An optional time, or `-`.
pub fn maybe(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_owned(), datetime)
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil(days: u64) -> (i64, u32, u32) {
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(datetime(0), "1970-01-01 00:00:00Z");
        assert_eq!(datetime(1_700_000_000_000), "2023-11-14 22:13:20Z");
        // A leap day.
        assert_eq!(datetime(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(clock(1_700_000_061_999), "22:14:21");
    }
}
