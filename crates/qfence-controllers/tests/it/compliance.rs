//! The driver compliance suite: the MUST rules of `docs/specs/controller.md`, run the same way
//! against every driver, each against a real target (an independent emulator or the real
//! program). A driver's tests build a [`Case`] and call [`run`], which takes the driver and
//! drops it at the end to check that nothing it started is left running.
//!
//! Who runs it: Redfish (sushy-tools), fence agents (`fence_dummy`, `fence_redfish` on
//! sushy-tools), IPMI (`ipmi_sim`), Proxmox VE (fakepve), PostgreSQL (a real primary and
//! replica), Docker (the real Engine) and FortiGate (the FortiOS simulator): the `*_passes_the_
//! compliance_suite*` tests of each driver's module.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_controllers::driver::fence_verdict;
use qfence_controllers::{CallContext, Driver, ErrorKind, Target};
use qfence_model::{OrchestratorId, SiteId, Verdict};
use tokio::time::Instant;

/// What the suite needs to know about one driver under test.
pub struct Case<D> {
    pub driver: D,
    /// A fence binding's target whose resource is up (not fenced) when the suite starts.
    pub fence: Target,
    /// A target naming a resource that does not exist, when the driver can tell.
    pub missing: Option<Target>,
    /// The deadline for one fence or unfence, long enough for the target's slowest.
    pub action_timeout: Duration,
    /// Whether a fence takes longer than a second, so a 1 s deadline passes while it runs.
    pub slow_fence: bool,
}

pub fn orchestrator() -> OrchestratorId {
    OrchestratorId::new("orch-test").unwrap()
}

/// Tasks alive on this runtime: the driver's connection tasks, an in-process simulator's, the
/// test's own.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

pub fn ctx(timeout: Duration) -> CallContext {
    CallContext::with_timeout(orchestrator(), timeout)
}

pub fn target(capability: &str, resource: &str) -> Target {
    Target {
        capability: capability.into(),
        resource: resource.into(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    }
}

fn phase(name: &str) {
    eprintln!("--- compliance: {name}");
}

/// Runs every rule, then drops the driver. Leaves the fence target up again when the fence
/// has an undo and the driver is not slow (the deadline rule leaves a fence in flight); a
/// fence without an undo (PostgreSQL's `db.demote`) leaves it fenced.
pub async fn run<D: Driver>(case: Case<D>) {
    // Counted before the driver's first call: what is alive now is not the driver's.
    let tasks_before = alive_tasks();
    let d = &case.driver;
    let short = Duration::from_secs(15);
    let fence_cap = d
        .controller_type()
        .capability(&case.fence.capability)
        .expect("the fence capability is in the catalog");
    assert!(
        fence_cap.level.is_some(),
        "the case's fence target is a fence capability"
    );
    let has_undo = fence_cap.unfence.is_some();

    phase("the target is up, and a check says so with evidence");
    let before = d.check(&ctx(short), &case.fence).await.expect("check");
    assert!(
        !before.holds,
        "the suite needs the target up first: {}",
        before.detail
    );
    assert_eq!(before.by, orchestrator(), "evidence names the orchestrator");
    assert!(!before.detail.is_empty(), "evidence says what was read");
    assert_eq!(fence_verdict(&Ok(before.clone())), Verdict::Failed);

    phase("probe reads identity and grades every catalog capability, changing nothing");
    let probe = d.probe(&ctx(short)).await.expect("probe");
    assert!(!probe.identity.id.is_empty());
    let mut graded: Vec<&str> = probe.grades.iter().map(|g| g.capability.as_str()).collect();
    graded.sort_unstable();
    let mut catalog: Vec<&str> = d
        .controller_type()
        .capabilities()
        .iter()
        .map(|c| c.name)
        .collect();
    catalog.sort_unstable();
    assert_eq!(graded, catalog, "one grade per catalog capability");
    assert!(
        probe.grades.iter().all(|g| !g.reason.is_empty()),
        "every grade says why"
    );
    let after = d.check(&ctx(short), &case.fence).await.expect("check");
    assert!(!after.holds, "probe changed the target: {}", after.detail);

    phase("discovery offers only catalog capabilities");
    let found = d.discover(&ctx(short)).await.expect("discover");
    for f in &found {
        assert!(
            d.controller_type().capability(&f.capability).is_some(),
            "discovered {:?} is not a catalog capability",
            f.capability
        );
    }
    if !found.is_empty() {
        assert!(
            found.iter().any(|f| f.capability == case.fence.capability),
            "discovery lists resources but none for the fence capability: {found:?}"
        );
    }

    phase("binding checks accept the real resource and flag a missing one, changing nothing");
    let problems = d
        .check_binding(&ctx(short), &case.fence)
        .await
        .expect("check_binding");
    assert!(problems.is_empty(), "unexpected problems: {problems:?}");
    if let Some(missing) = &case.missing {
        let problems = d
            .check_binding(&ctx(short), missing)
            .await
            .expect("check_binding");
        assert!(!problems.is_empty(), "a missing resource was not flagged");
        let e = d
            .check(&ctx(short), missing)
            .await
            .expect_err("check of a missing resource");
        assert_eq!(fence_verdict(&Err(e)), Verdict::Unknown);
    }
    assert!(!d.check(&ctx(short), &case.fence).await.unwrap().holds);

    phase("a bulk read answers each target as its own check would, in order");
    let mut batch = vec![case.fence.clone(), case.fence.clone()];
    batch.extend(case.missing.clone());
    let t = Instant::now();
    let read = d.check_many(&ctx(short), &batch).await;
    assert_eq!(read.len(), batch.len(), "one result per target");
    for r in &read[..2] {
        let r = r.as_ref().expect("bulk check of the fence target");
        assert!(!r.holds, "{}", r.detail);
        assert_eq!(r.by, orchestrator());
    }
    if let Some(r) = read.get(2) {
        assert!(r.is_err(), "a missing resource read in bulk: {r:?}");
    }
    assert!(
        t.elapsed() < short,
        "a bulk read of {} took {:?}",
        batch.len(),
        t.elapsed()
    );
    assert!(d.check_many(&ctx(short), &[]).await.is_empty());

    phase("close ends the driver's session at once, and the next call starts a new one");
    let t = Instant::now();
    d.close().await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "close took {:?}",
        t.elapsed()
    );
    assert!(!d.check(&ctx(short), &case.fence).await.unwrap().holds);

    phase("an unknown capability is refused as unsupported, not attempted");
    let bogus = target("no.such-capability", &case.fence.resource);
    let e = d
        .perform(&ctx(short), &bogus)
        .await
        .expect_err("unknown capability");
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    let e = d
        .renew(&ctx(short), &case.fence)
        .await
        .expect_err("renew of a fence");
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    if !has_undo {
        let e = d
            .undo(&ctx(short), &case.fence)
            .await
            .expect_err("undo of a fence the catalog gives no undo");
        assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    }
    assert!(
        !d.check(&ctx(short), &case.fence).await.unwrap().holds,
        "an unsupported call acted"
    );

    phase("a cancelled call stops at once");
    let c = ctx(short);
    c.cancel.cancel();
    let t = Instant::now();
    let e = d.perform(&c, &case.fence).await.expect_err("cancelled");
    assert!(matches!(e.kind, ErrorKind::Cancelled), "{e}");
    assert!(
        !e.state_unknown,
        "nothing was sent, so nothing is unknown: {e}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        !d.check(&ctx(short), &case.fence).await.unwrap().holds,
        "a cancelled fence acted"
    );

    phase("a call past its deadline fails as a timeout without acting");
    let c = CallContext {
        deadline: Instant::now(),
        ..ctx(short)
    };
    let e = d.perform(&c, &case.fence).await.expect_err("expired");
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(
        !e.state_unknown,
        "nothing was sent, so nothing is unknown: {e}"
    );
    assert!(
        !d.check(&ctx(short), &case.fence).await.unwrap().holds,
        "an expired fence acted"
    );

    phase("fence: done only when a read-back proves it");
    let t = Instant::now();
    let r = d
        .perform(&ctx(case.action_timeout), &case.fence)
        .await
        .expect("fence");
    eprintln!("fenced in {:.1} s: {}", t.elapsed().as_secs_f64(), r.detail);
    assert!(
        r.holds,
        "perform returned a reading that does not hold: {}",
        r.detail
    );
    assert_eq!(r.by, orchestrator());
    let c = d.check(&ctx(short), &case.fence).await;
    assert_eq!(fence_verdict(&c), Verdict::Fenced, "{c:?}");

    phase("fence again: already off is success, at once");
    let t = Instant::now();
    let r = d
        .perform(&ctx(case.action_timeout), &case.fence)
        .await
        .expect("second fence");
    assert!(r.holds, "{}", r.detail);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "a repeated fence took {:?}",
        t.elapsed()
    );

    if !has_undo {
        phase("no undo: the fence stays, and nothing the driver started outlives it");
        assert!(d.check(&ctx(short), &case.fence).await.unwrap().holds);
        no_task_outlives(case, tasks_before).await;
        return;
    }

    phase("unfence: the read-back shows the condition no longer holds");
    let r = d
        .undo(&ctx(case.action_timeout), &case.fence)
        .await
        .expect("unfence");
    assert!(!r.holds, "{}", r.detail);
    let c = d.check(&ctx(short), &case.fence).await;
    assert_eq!(fence_verdict(&c), Verdict::Failed, "{c:?}");

    if case.slow_fence {
        phase(
            "a deadline that passes while the fence runs gives a timeout, state unknown, in time",
        );
        let t = Instant::now();
        let r = d.perform(&ctx(Duration::from_secs(1)), &case.fence).await;
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(1600),
            "deadline 1 s, took {took:?}"
        );
        match r {
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
                assert!(
                    e.state_unknown,
                    "a fence sent and not confirmed leaves the state unknown"
                );
                assert_eq!(fence_verdict(&Err(e)), Verdict::Unknown);
            }
            // The target may apply a fence within a second; then it must be proven.
            Ok(r) => assert!(r.holds, "{}", r.detail),
        }
    }
    no_task_outlives(case, tasks_before).await;
}

/// Drops the driver and waits (briefly) until every task started since `before` has ended:
/// connection tasks, sessions being closed, timers. A driver's idle keep-alive connections
/// belong to its client, so they may live between calls, but never past the driver.
async fn no_task_outlives<D: Driver>(case: Case<D>, before: usize) {
    phase("nothing the driver started outlives it, closed and dropped");
    case.driver.close().await;
    // Closing twice is harmless: nothing is left to end.
    case.driver.close().await;
    drop(case);
    let until = Instant::now() + Duration::from_secs(3);
    let mut now = alive_tasks();
    while now > before && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = alive_tasks();
    }
    assert!(
        now <= before,
        "{} task(s) started by the driver are still alive 3 s after it was dropped",
        now - before
    );
}

/// The suite checked on itself, with a driver of memory (no target): a correct one passes,
/// one that leaves a task behind is caught.
mod self_test {
    use std::sync::Mutex;
    use std::time::SystemTime;

    use qfence_controllers::{
        CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity, Probe,
        Reading,
    };
    use qfence_model::{ControllerId, ControllerType, Grade};

    use super::{Case, Target, run, target};

    #[derive(Debug)]
    struct Toy {
        id: ControllerId,
        off: Mutex<bool>,
        /// Leave a task running after each fence.
        leak: bool,
    }

    impl Toy {
        fn new(leak: bool) -> Self {
            Self {
                id: ControllerId::new("toy").unwrap(),
                off: Mutex::new(false),
                leak,
            }
        }

        fn read(&self, ctx: &CallContext, t: &Target) -> Result<Reading, DriverError> {
            if t.capability != "power.off" {
                return Err(DriverError::new(
                    ErrorKind::Unsupported,
                    &self.id,
                    &t.capability,
                    "no such capability",
                    false,
                ));
            }
            let off = *self.off.lock().unwrap();
            Ok(Reading {
                holds: off,
                detail: format!("off={off}"),
                at: SystemTime::now(),
                by: ctx.orchestrator.clone(),
                definitive: false,
            })
        }

        async fn set(
            &self,
            ctx: &CallContext,
            t: &Target,
            off: bool,
        ) -> Result<Reading, DriverError> {
            ctx.run(&self.id, "set", async {
                self.read(ctx, t)?;
                *self.off.lock().unwrap() = off;
                if self.leak {
                    tokio::spawn(tokio::time::sleep(std::time::Duration::from_secs(60)));
                }
                self.read(ctx, t)
            })
            .await
        }
    }

    impl Driver for Toy {
        fn controller_type(&self) -> ControllerType {
            ControllerType::FenceAgent
        }
        fn id(&self) -> &ControllerId {
            &self.id
        }
        async fn probe(&self, _ctx: &CallContext) -> Result<Probe, DriverError> {
            Ok(Probe {
                identity: Identity {
                    id: "toy".into(),
                    facts: Default::default(),
                    tls_fingerprint: None,
                },
                grades: vec![CapabilityGrade {
                    capability: "power.off".into(),
                    grade: Grade::Proven,
                    reason: "memory".into(),
                }],
                warnings: vec![],
            })
        }
        async fn discover(&self, _ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
            Ok(vec![])
        }
        async fn check_binding(
            &self,
            _ctx: &CallContext,
            _t: &Target,
        ) -> Result<Vec<String>, DriverError> {
            Ok(vec![])
        }
        async fn check(&self, ctx: &CallContext, t: &Target) -> Result<Reading, DriverError> {
            self.read(ctx, t)
        }
        async fn perform(&self, ctx: &CallContext, t: &Target) -> Result<Reading, DriverError> {
            self.set(ctx, t, true).await
        }
        async fn undo(&self, ctx: &CallContext, t: &Target) -> Result<Reading, DriverError> {
            self.set(ctx, t, false).await
        }
    }

    fn case(leak: bool) -> Case<Toy> {
        Case {
            driver: Toy::new(leak),
            fence: target("power.off", "node1"),
            missing: None,
            action_timeout: std::time::Duration::from_secs(5),
            slow_fence: false,
        }
    }

    #[tokio::test]
    async fn a_correct_driver_passes() {
        run(case(false)).await;
    }

    #[tokio::test]
    #[should_panic(expected = "still alive 3 s after it was dropped")]
    async fn a_driver_that_leaves_a_task_behind_is_caught() {
        run(case(true)).await;
    }
}
