//! Compute API microversions: the server's range, read from its version document, and the
//! microversion each call sends (`OpenStack-API-Version: compute X.Y`).
//!
//! Each call uses the *lowest* microversion that has what it needs, so the driver works with
//! as old a Nova as possible and a newer Nova's changes of behaviour (2.95's evacuated
//! servers landing `SHUTOFF`) never reach it unasked. Why each one:
//!
//! | call | microversion | because |
//! |---|---|---|
//! | `GET/PUT /os-services` | 2.53 | service ids are UUIDs and one `PUT /os-services/{id}` sets `status`, `disabled_reason` and `forced_down` (forced-down itself is 2.11) |
//! | `GET /servers/detail`, `GET /servers/{id}` | 2.73, else 2.47, else 2.1 | `locked_reason` (2.73); the flavor embedded with its `extra_specs` (2.47) |
//! | `lock` with a reason | 2.73 | `locked_reason` in the lock action; unlock is 2.1 |
//! | `evacuate` | 2.29, else 2.14, else 2.1 | 2.29 has the scheduler check a requested target host; 2.14 dropped `onSharedStorage` (Nova checks the storage itself); below it `onSharedStorage` is required. Never 2.95 or later, where an evacuated server lands `SHUTOFF` |
//! | `GET /os-migrations` | 2.59, else 2.23 | each record's `uuid` and paging (2.59); `migration_type` (2.23), without which an evacuation's record cannot be told apart |
//! | `GET /flavors/detail` | 2.61 | `extra_specs` in the listing |
//! | `GET /os-aggregates` | 2.41 | each aggregate's `uuid` |

use std::fmt;

/// A compute API microversion, `MAJOR.MINOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    pub major: u16,
    pub minor: u16,
}

impl Microversion {
    pub const fn new(major: u16, minor: u16) -> Self {
        Self { major, minor }
    }

    /// `"2.53"`; `None` for anything else (an empty string is what Nova shows for a v2.0
    /// endpoint without microversions).
    pub fn parse(s: &str) -> Option<Self> {
        let (major, minor) = s.trim().split_once('.')?;
        Some(Self::new(major.parse().ok()?, minor.parse().ok()?))
    }
}

impl fmt::Display for Microversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The microversions a compute endpoint offers (`min_version`..=`version` of its document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    pub min: Microversion,
    pub max: Microversion,
}

impl VersionRange {
    pub fn contains(&self, v: Microversion) -> bool {
        self.min <= v && v <= self.max
    }

    /// The first of `wanted` (in order of preference) the server offers.
    pub fn choose(&self, wanted: &[Microversion]) -> Option<Microversion> {
        wanted.iter().copied().find(|v| self.contains(*v))
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// Listing and changing compute services by id, forced-down included.
pub const SERVICES: Microversion = Microversion::new(2, 53);
/// Reading servers, in order of preference: lock reasons (2.73); embedded flavors with
/// extra specs (2.47); the base (flavor by id only).
pub const SERVERS: [Microversion; 3] = [
    Microversion::new(2, 73),
    Microversion::new(2, 47),
    Microversion::new(2, 1),
];
/// Locking with a reason.
pub const LOCK_REASON: Microversion = Microversion::new(2, 73);
/// Actions without a newer need (unlock).
pub const BASE: Microversion = Microversion::new(2, 1);
/// Evacuation, in order of preference: scheduler-checked target host (2.29); Nova checks
/// shared storage itself (2.14); `onSharedStorage` given by the caller (2.1).
pub const EVACUATE: [Microversion; 3] = [
    Microversion::new(2, 29),
    Microversion::new(2, 14),
    Microversion::new(2, 1),
];
/// From this one on an evacuated server lands `SHUTOFF`: the driver never sends it.
pub const EVACUATE_STOPS_SERVERS: Microversion = Microversion::new(2, 95);
/// Below this one, `onSharedStorage` must be sent with an evacuation.
pub const EVACUATE_CHECKS_STORAGE: Microversion = Microversion::new(2, 14);
/// Migration records, in order of preference: with uuids and paging (2.59); with their
/// `migration_type` (2.23), below which an evacuation's record cannot be told apart.
pub const MIGRATIONS: [Microversion; 2] = [Microversion::new(2, 59), Microversion::new(2, 23)];
/// Flavors with their extra specs.
pub const FLAVORS: Microversion = Microversion::new(2, 61);
/// Aggregates with uuids.
pub const AGGREGATES: Microversion = Microversion::new(2, 41);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_compare_and_choose() {
        let v = |s| Microversion::parse(s).unwrap();
        assert_eq!(v("2.53"), Microversion::new(2, 53));
        assert!(v("2.9") < v("2.10"), "compared as numbers, not text");
        assert_eq!(Microversion::parse(""), None);
        assert_eq!(Microversion::parse("2"), None);
        let nova34 = VersionRange {
            min: v("2.1"),
            max: v("2.104"),
        };
        assert_eq!(nova34.choose(&EVACUATE), Some(v("2.29")));
        let old = VersionRange {
            min: v("2.1"),
            max: v("2.20"),
        };
        assert_eq!(old.choose(&EVACUATE), Some(v("2.14")));
        assert!(!old.contains(SERVICES));
        assert!(EVACUATE.iter().all(|m| *m < EVACUATE_STOPS_SERVERS));
        assert_eq!(nova34.to_string(), "2.1-2.104");
    }
}
