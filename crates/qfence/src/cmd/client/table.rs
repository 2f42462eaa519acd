//! Tables and times for people.

use comfy_table::{Table, presets};
use qfence_model::time;
/// `HH:MM:SS` (UTC) for progress lines, and now in Unix milliseconds.
pub use qfence_model::time::{now_unix_ms as now_ms, utc_clock as clock};

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
    format!("{}Z", time::utc(ms))
}

/// An optional time, or `-`.
pub fn maybe(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_owned(), datetime)
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
