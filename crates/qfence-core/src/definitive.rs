//! Definitive readings: failing over without waiting out `failover_after_seconds`.
//!
//! The window tolerates readings that may be lost or late (a timeout, a partition): waiting
//! is what tells a lost site from a slow one. A definitive unhealthy reading is the target's
//! own word (the server refused the connection while its host answered: nothing listens), so
//! a plan with `failover_after_definitive: N` fails over once N such readings come in a row.
//! Any other reading in between (healthy, ambiguous, unknown) starts the count again.

use qfence_model::config::PlanConfig;

use crate::state::HealthTrack;
use crate::types::{Observation, Observed};

/// Counts the readings not counted yet into `track`, oldest first. Returns whether it changed.
pub(crate) fn count<'a>(
    track: &mut HealthTrack,
    readings: impl Iterator<Item = &'a Observation>,
) -> bool {
    let mut new: Vec<&Observation> = readings
        .filter(|o| track.definitive_at.is_none_or(|t| o.at > t))
        .collect();
    if new.is_empty() {
        return false;
    }
    new.sort_by_key(|o| o.at);
    for o in new {
        if o.value == Observed::NotHeld && o.definitive {
            track.definitive += 1;
        } else {
            track.definitive = 0;
        }
        track.definitive_at = Some(o.at);
    }
    true
}

/// Whether the plan acts on definitive readings and enough came in a row.
pub(crate) fn reached(track: &HealthTrack, plan: &PlanConfig) -> bool {
    plan.failover_after_definitive
        .is_some_and(|n| track.definitive >= n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Millis;

    #[test]
    fn only_consecutive_definitive_readings_count_and_each_once() {
        let mut t = HealthTrack::default();
        let a = Observation::definitive(Millis(1000));
        assert!(count(&mut t, [&a].into_iter()));
        assert!(!count(&mut t, [&a].into_iter()), "the same reading again");
        assert_eq!(t.definitive, 1);
        let b = Observation::new(Observed::NotHeld, Millis(2000));
        count(&mut t, [&b].into_iter());
        assert_eq!(
            t.definitive, 0,
            "an ambiguous reading starts the count again"
        );
        let c = Observation::definitive(Millis(3000));
        let d = Observation::definitive(Millis(4000));
        count(&mut t, [&d, &c].into_iter());
        assert_eq!(t.definitive, 2);
        let e = Observation::new(Observed::Unknown, Millis(5000));
        count(&mut t, [&e].into_iter());
        assert_eq!(t.definitive, 0, "a timeout is never definitive");
    }
}
