//! A plan whose standbys are hot (`standby: hot`): the fence watch judges a running replica
//! by its `db.standby` readings, shows "standby, replicating, lag N" and raises no alarm; a
//! standby that is writable or follows another server alarms with that reason; and a standby
//! reading never stands in for the lost owner's required fence in a failover.
//!
//! Bindings of the hot PostgreSQL plan at each site: 0 db.demote, 1 power.off (required),
//! 2 replication.lag, 3 db.promote, 4 db.health, 5 db.standby.

mod bench;
mod sim;

use qfence_core::rules::{Basis, Mutation};
use qfence_core::{Action, Observed, Rules};
use qfence_model::{Generation, Verdict};
use sim::fixtures::{self, site};

use bench::*;

fn hot() -> Bench {
    let mut b = Bench::new("pg", fixtures::pg_hot_plan());
    // dc2's host runs (its replica must), so its power fence reads FAILED.
    b.world.insert(k("dc2", 1), Observed::NotHeld);
    b
}

fn alarms(all: &[Action]) -> Vec<String> {
    all.iter()
        .filter_map(|a| match a {
            Action::Alarm { detail, .. } => Some(detail.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_replicating_hot_standby_is_shown_as_a_standby_and_raises_no_alarm() {
    let mut b = hot();
    b.detail.insert(
        k("dc2", 5),
        "standby, replicating from 10.0.1.5:5432, lag 0 bytes".into(),
    );
    let mut all = Vec::new();
    let mut shown = 0;
    for _ in 0..20 {
        let d = b.step();
        all.extend(acts(&d));
        if d.reason.starts_with("no action:") {
            assert!(
                d.reason.contains("dc2 standby (db.standby at 14:02:")
                    && d.reason
                        .contains(": standby, replicating from 10.0.1.5:5432, lag 0 bytes)"),
                "{}",
                d.reason
            );
            let dc2 = d.sites.iter().find(|v| v.site == site("dc2")).unwrap();
            assert_eq!(dc2.verdict, Verdict::Fenced);
            assert!(matches!(dc2.basis, Basis::HotStandby { .. }), "{dc2:?}");
            shown += 1;
        }
    }
    assert!(shown > 10, "steady {shown} times");
    assert_eq!(alarms(&all), Vec::<String>::new());
    assert!(b.state.alarmed.is_empty());
    // Each check asks whether dc2 follows the owner, dc1; the owner's is never read.
    assert!(all.contains(&Action::Check {
        binding: k("dc2", 5),
        points_at: Some(site("dc1")),
    }));
    assert!(!all.iter().any(|a| a.binding() == Some(&k("dc1", 5))));
}

#[test]
fn a_writable_hot_standby_alarms_with_the_reason() {
    let mut b = hot();
    b.world.insert(k("dc2", 5), Observed::NotHeld);
    b.detail.insert(
        k("dc2", 5),
        "10.0.2.5:5432 is writable: not in recovery (a primary)".into(),
    );
    let mut all = Vec::new();
    for _ in 0..10 {
        all.extend(acts(&b.step()));
    }
    let raised = alarms(&all);
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert!(
        raised[0].starts_with("dc2 not safe as a standby (db.standby at 14:02:")
            && raised[0].ends_with(": 10.0.2.5:5432 is writable: not in recovery (a primary))"),
        "{}",
        raised[0]
    );
    assert!(b.state.alarmed.contains(&site("dc2")));
    // It is a replica again: the alarm clears.
    b.world.insert(k("dc2", 5), Observed::Holds);
    b.detail.remove(&k("dc2", 5));
    for _ in 0..5 {
        b.step();
    }
    assert!(b.state.alarmed.is_empty());
}

#[test]
fn a_cold_plan_with_its_standby_host_on_is_not_judged_by_standby_readings() {
    // The same world, standby: cold (and no db.standby binding): the resource-level rule.
    let mut b = Bench::pg();
    b.world.insert(k("dc2", 1), Observed::NotHeld);
    let mut d = b.step();
    for _ in 0..5 {
        d = b.step();
    }
    let dc2 = d.sites.iter().find(|v| v.site == site("dc2")).unwrap();
    assert_eq!(dc2.basis, Basis::ResourceStopped, "{dc2:?}");
    assert!(d.reason.contains("dc2 resource stopped"), "{}", d.reason);
}

/// dc1 owns and is lost (health and power unreadable), while its db.standby reads "in
/// recovery, not writable" whenever it is read. Returns whether the plan committed to dc2.
fn lost_owner_reading_standby(rules: Rules) -> bool {
    let mut b = hot();
    b.rules = rules;
    b.world.insert(k("dc2", 1), Observed::Holds);
    b.world.insert(k("dc1", 4), Observed::Unknown);
    b.world.insert(k("dc1", 1), Observed::Unknown);
    b.world.insert(k("dc1", 5), Observed::Holds);
    for _ in 0..300 {
        b.step();
        if b.state.generation != Generation(1) {
            return true;
        }
    }
    assert!(b.state.transition().is_some(), "the failover started");
    false
}

#[test]
fn a_hot_standby_reading_never_proves_a_lost_owner_fenced() {
    assert!(
        !lost_owner_reading_standby(Rules::default()),
        "committed without dc1's power.off"
    );
    // The test can tell: with the planted rule that counts the reading, the plan commits.
    assert!(lost_owner_reading_standby(Rules {
        mutation: Mutation::HotStandbyIsAFence,
    }));
}
