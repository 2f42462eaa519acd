//! Each controller's lane: bounded concurrency, and identical calls coalesced.
//!
//! A burst of hundreds of plans reading one host's power sends one check; a thousand plans
//! fencing one host send one `power.off`, each still verified by its own read-back. A
//! reading that began before a change started or ended is never shared after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    BMC_CHANGES, BMC_CHECKS, CHANGES_PER_CONTROLLER, CHECKS_PER_CONTROLLER, PROXMOX_CHANGES, Read,
};

/// What a shared check's waiters receive.
pub(super) type Shared = Result<Read, String>;
/// Who waits for a check's answer.
type Waiters = Arc<Mutex<Vec<oneshot::Sender<Shared>>>>;

/// One controller's lane: bounded concurrency, and identical checks coalesced.
#[derive(Debug)]
pub(super) struct Lane {
    pub(super) checks: Semaphore,
    pub(super) changes: Semaphore,
    /// Bumped when a call that may change a target starts and when it ends (a call that
    /// shares another's sends nothing, so it bumps nothing).
    epoch: AtomicU64,
    /// The joinable check in flight for each reading, with the epoch it started in.
    in_flight: Mutex<HashMap<String, (u64, Waiters)>>,
    /// Counts the changes led on this lane (joined ones are not counted).
    changes_led: AtomicU64,
    /// The joinable change in flight (queued or sent) for each identical call, with the count
    /// of changes led when it was.
    changes_in_flight: Mutex<HashMap<String, (u64, Waiters)>>,
}

impl Default for Lane {
    fn default() -> Self {
        Self::new(CHECKS_PER_CONTROLLER, CHANGES_PER_CONTROLLER)
    }
}

impl Lane {
    fn new(checks: usize, changes: usize) -> Self {
        Self {
            checks: Semaphore::new(checks),
            changes: Semaphore::new(changes),
            epoch: AtomicU64::new(0),
            in_flight: Mutex::new(HashMap::new()),
            changes_led: AtomicU64::new(0),
            changes_in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The lane of a controller of type `kind`.
    pub(super) fn for_type(kind: qfence_model::catalog::ControllerType) -> Self {
        use qfence_model::catalog::ControllerType as T;
        match kind {
            T::Redfish | T::Ipmi | T::FenceAgent => Self::new(BMC_CHECKS, BMC_CHANGES),
            T::Proxmox => Self::new(CHECKS_PER_CONTROLLER, PROXMOX_CHANGES),
            _ => Self::default(),
        }
    }

    /// Joins the check in flight for `key` if it started in this epoch (no call that may
    /// change a target has started or ended since); otherwise this check leads (and later
    /// ones may join it). A check that joins while a change runs shares a reading that also
    /// began during that change, which is what its own reading would have been; a check
    /// issued after a change ended (a fence's read-back) never shares one from before.
    pub(super) fn join_or_lead(
        &self,
        key: String,
    ) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        self.join_or_lead_in(false, key, &|| self.epoch.load(Ordering::SeqCst))
    }

    /// Joins the identical change (same verb, capability, resource, parameters and site)
    /// queued or running, if no other change has been led on this lane since it was: a
    /// thousand plans fencing one host send one `power.off`, and each still verifies it with
    /// its own read-back. A change led after it (an undo, another target) ends the sharing,
    /// so a joined answer never comes from a call ordered before a change the caller follows.
    pub(super) fn join_or_lead_change(
        &self,
        key: String,
    ) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        self.join_or_lead_in(true, key, &|| {
            self.changes_led.fetch_add(1, Ordering::SeqCst) + 1
        })
    }

    /// Joins the flight for `key` (a change's or a check's) if it carries the stamp now in
    /// force; otherwise leads a new one, stamped by `lead` (which a change's leader moves on).
    fn join_or_lead_in(
        &self,
        change: bool,
        key: String,
        lead: &dyn Fn() -> u64,
    ) -> Result<oneshot::Receiver<Shared>, Leading<'_>> {
        let (map, now) = if change {
            (&self.changes_in_flight, &self.changes_led)
        } else {
            (&self.in_flight, &self.epoch)
        };
        let mut flights = map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((stamp, waiters)) = flights.get(&key)
            && *stamp == now.load(Ordering::SeqCst)
        {
            let (tx, rx) = oneshot::channel();
            waiters.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
            return Ok(rx);
        }
        // A flight from before keeps its own waiters; it just cannot be joined.
        let waiters = Waiters::default();
        flights.insert(key.clone(), (lead(), waiters.clone()));
        Err(Leading {
            lane: self,
            key,
            waiters,
            change,
        })
    }
}

/// Marks a changing call for its lifetime.
pub(super) struct Changing<'a>(&'a Lane);

impl<'a> Changing<'a> {
    pub(super) fn start(lane: &'a Lane) -> Self {
        lane.epoch.fetch_add(1, Ordering::SeqCst);
        Self(lane)
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// The check that others may join: when it ends (or is dropped), its waiters get its answer
/// (or a closed channel, which reads UNKNOWN).
pub(super) struct Leading<'a> {
    lane: &'a Lane,
    key: String,
    waiters: Waiters,
    /// A change (its flight is in `changes_in_flight`), not a check.
    change: bool,
}

impl Leading<'_> {
    pub(super) fn finish(self, answer: &Shared) {
        for w in self.take() {
            let _ = w.send(answer.clone());
        }
    }

    fn take(&self) -> Vec<oneshot::Sender<Shared>> {
        {
            let map = if self.change {
                &self.lane.changes_in_flight
            } else {
                &self.lane.in_flight
            };
            let mut flights = map.lock().unwrap_or_else(|p| p.into_inner());
            if flights
                .get(&self.key)
                .is_some_and(|(_, w)| Arc::ptr_eq(w, &self.waiters))
            {
                flights.remove(&self.key);
            }
        }
        std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        // Abandoned (cancelled): the waiters' receivers see a closed channel.
        drop(self.take());
    }
}

/// Waits for a turn in `slots` until the call's deadline or its cancellation (nothing has
/// been sent to the controller when it gives up).
pub(super) async fn wait_turn<'a>(
    slots: &'a Semaphore,
    deadline: tokio::time::Instant,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<tokio::sync::SemaphorePermit<'a>, String> {
    tokio::select! {
        () = cancel.cancelled() => Err("cancelled: leadership was lost or the caller gave up".into()),
        r = tokio::time::timeout_at(deadline, slots.acquire()) => match r {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err("the controller's call slots are closed".into()),
            Err(_) => Err(format!(
                "not sent: no free call slot for this controller within {} ms",
                timeout.as_millis()
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use qfence_controllers::driver::Reading;
    use qfence_model::OrchestratorId;

    use super::*;

    fn reading(holds: bool) -> Shared {
        Ok(Ok(Reading {
            holds,
            detail: format!("holds={holds}"),
            at: std::time::UNIX_EPOCH + Duration::from_millis(1),
            by: OrchestratorId::new("dc1-a").unwrap(),
            definitive: false,
        }))
    }

    #[tokio::test]
    async fn identical_checks_share_one_answer() {
        let lane = Lane::default();
        let Err(first) = lane.join_or_lead("power".into()) else {
            panic!("the first check leads");
        };
        let Ok(second) = lane.join_or_lead("power".into()) else {
            panic!("an identical check joins");
        };
        let Err(other) = lane.join_or_lead("vm".into()) else {
            panic!("another reading leads its own");
        };
        first.finish(&reading(true));
        assert_eq!(second.await.unwrap(), reading(true));
        drop(other);
        // Once answered, the next check asks again.
        assert!(lane.join_or_lead("power".into()).is_err());
    }

    #[tokio::test]
    async fn a_check_never_joins_one_that_started_before_a_change_began_or_ended() {
        let lane = Lane::default();
        let Err(before) = lane.join_or_lead("power".into()) else {
            panic!("leads");
        };
        let Ok(early) = lane.join_or_lead("power".into()) else {
            panic!("joins");
        };
        let fence = Changing::start(&lane);
        // A change began: the flight from before it cannot be joined.
        let Err(during) = lane.join_or_lead("power".into()) else {
            panic!("a check after a change began must not join one from before it");
        };
        // Checks while the change runs share a reading that also began during it.
        let Ok(also_during) = lane.join_or_lead("power".into()) else {
            panic!("a check during a change joins one begun during it");
        };
        drop(fence);
        // The change ended: a read-back must not share a reading begun before the end.
        let Err(after) = lane.join_or_lead("power".into()) else {
            panic!("a check after a change ended must not join one from before its end");
        };
        let Ok(late) = lane.join_or_lead("power".into()) else {
            panic!("but later checks join the one after the change");
        };
        // Each flight answers its own waiters, even once replaced in the map.
        before.finish(&reading(false));
        during.finish(&reading(false));
        after.finish(&reading(true));
        assert_eq!(early.await.unwrap(), reading(false));
        assert_eq!(also_during.await.unwrap(), reading(false));
        assert_eq!(late.await.unwrap(), reading(true));
    }

    #[tokio::test]
    async fn identical_changes_share_one_call_until_another_change_is_led() {
        let lane = Lane::default();
        let Err(first) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("the first change leads");
        };
        let Ok(same) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("an identical change joins the one queued or sent");
        };
        // Another change led on the lane: the power.off from before it can no longer be
        // joined, since a caller after the undo must not take an answer ordered before it.
        let Err(undo) = lane.join_or_lead_change("undo power.off h1".into()) else {
            panic!("a different change leads its own");
        };
        let Err(again) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("a change after another change must not join one from before it");
        };
        let Ok(later) = lane.join_or_lead_change("perform power.off h1".into()) else {
            panic!("later identical changes join the newest one");
        };
        first.finish(&reading(true));
        again.finish(&reading(false));
        assert_eq!(same.await.unwrap(), reading(true));
        assert_eq!(later.await.unwrap(), reading(false));
        drop(undo);
        // Checks and changes keep separate flights.
        assert!(lane.join_or_lead("perform power.off h1".into()).is_err());
    }

    #[tokio::test]
    async fn an_abandoned_check_leaves_its_waiters_unknown_not_hanging() {
        let lane = Lane::default();
        let Err(leader) = lane.join_or_lead("power".into()) else {
            panic!("leads");
        };
        let Ok(waiter) = lane.join_or_lead("power".into()) else {
            panic!("joins");
        };
        drop(leader);
        assert!(
            waiter.await.is_err(),
            "a closed channel: the caller reads UNKNOWN"
        );
    }
}
