//! The Redfish driver's one session, against the lab's Redfish simulator (which enforces a
//! session limit and answers 401 to a token it does not know): many concurrent calls share
//! one session, none is left behind, a session the BMC forgot is made again, and a fence is
//! still proven by reading the power state after the reset.

use std::sync::Arc;
use std::time::Duration;

use qfence_controllers::redfish::RedfishDriver;
use qfence_controllers::secrets::Secret;
use qfence_controllers::{CallContext, Driver};

use crate::compliance::target;
use qfence_lab::TlsIdentity;
use qfence_lab::redfish::{self, Account, BmcHandle, BmcState, PowerState, Role, System};
use qfence_model::config::{RedfishAuth, TlsTrust};
use qfence_model::{ControllerId, OrchestratorId};

/// Hosts on the simulated BMC.
const HOSTS: usize = 20;

async fn bmc(max_sessions: usize) -> BmcHandle {
    let systems = (0..HOSTS)
        .map(|i| {
            System::new(
                &format!("host{i}"),
                &format!("{i:08x}-0000-4000-8000-000000000000"),
            )
        })
        .collect();
    let mut state = BmcState::new(systems, vec![Account::new("qfence", "pw", Role::Operator)]);
    state.max_sessions = max_sessions;
    state.power_delay = Duration::from_millis(50);
    redfish::start(
        "127.0.0.1:0".parse().unwrap(),
        TlsIdentity::loopback().unwrap(),
        state,
    )
    .await
    .unwrap()
}

fn driver(b: &BmcHandle) -> RedfishDriver {
    RedfishDriver::new(
        ControllerId::new("bmc-dc1").unwrap(),
        &b.base_url().parse().unwrap(),
        "qfence",
        RedfishAuth::Session,
        &TlsTrust::Pin(b.fingerprint().to_owned()),
        Some(Secret::new("pw".into())),
    )
    .unwrap()
}

fn ctx(timeout: Duration) -> CallContext {
    CallContext::with_timeout(OrchestratorId::new("orc-dc1").unwrap(), timeout)
}

async fn read(d: &RedfishDriver) -> qfence_controllers::Reading {
    d.check(
        &ctx(Duration::from_secs(5)),
        &target("power.status", "host3"),
    )
    .await
    .unwrap()
}

fn sessions(b: &BmcHandle) -> usize {
    b.snapshot().sessions.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_calls_share_one_session_and_leave_none_behind() {
    // Two slots: a driver making a session per call would be refused at once.
    let b = bmc(2).await;
    let d = Arc::new(driver(&b));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..200 {
        let d = d.clone();
        calls.spawn(async move {
            let host = format!("host{}", i % HOSTS);
            let t = ctx(Duration::from_secs(30));
            // A tenth of the calls fence (and prove it by reading back); the rest read.
            if i % 10 == 0 {
                d.perform(&t, &target("power.off", &host)).await
            } else {
                d.check(&t, &target("power.status", &host)).await
            }
        });
    }
    let mut failed = Vec::new();
    while let Some(r) = calls.join_next().await {
        if let Err(e) = r.unwrap() {
            failed.push(e.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} calls failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(sessions(&b), 1, "one session for every call");
    assert!(d.has_session());
    for i in (0..HOSTS).step_by(10) {
        assert_eq!(
            b.snapshot().system(&format!("host{i}")).unwrap().power,
            PowerState::Off
        );
    }

    d.close().await;
    assert_eq!(sessions(&b), 0, "close deleted the session");
    assert!(!d.has_session());

    // A dropped driver deletes its session too (best-effort, from a task).
    let d2 = driver(&b);
    d2.check(
        &ctx(Duration::from_secs(5)),
        &target("power.status", "host1"),
    )
    .await
    .unwrap();
    assert_eq!(sessions(&b), 1);
    drop(d2);
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while sessions(&b) > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sessions(&b),
        0,
        "the dropped driver's session was left behind"
    );
}

#[tokio::test]
async fn a_session_the_bmc_forgot_is_made_again() {
    let b = bmc(2).await;
    let d = driver(&b);
    assert!(read(&d).await.holds);
    let first = b.snapshot().sessions[0].clone();

    // Expired or deleted by an operator: the BMC answers 401 to the old token.
    b.update(|s| s.sessions.clear());
    assert!(read(&d).await.holds);
    let now = b.snapshot().sessions;
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].token, first.token, "a new session was made");

    // The next calls use it, making no other.
    assert!(read(&d).await.holds);
    assert_eq!(b.snapshot().sessions, now);
    d.close().await;
    assert_eq!(sessions(&b), 0);
}

#[tokio::test]
async fn a_call_cancelled_at_its_deadline_leaves_no_unknown_session() {
    let b = bmc(2).await;
    let d = driver(&b);
    // Slow answers: the call's deadline passes while the session is being made.
    b.faults().set_latency(Duration::from_millis(400));
    let e = d
        .check(
            &ctx(Duration::from_millis(150)),
            &target("power.status", "host1"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Timeout, "{e}");
    // The making went on without the caller and recorded what the BMC made.
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !d.has_session() && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(d.has_session(), "the session the BMC made is not recorded");
    assert_eq!(sessions(&b), 1);
    b.faults().set_latency(Duration::ZERO);
    assert!(
        d.check(
            &ctx(Duration::from_secs(5)),
            &target("power.status", "host1")
        )
        .await
        .unwrap()
        .holds
    );
    assert_eq!(sessions(&b), 1, "the recorded session was reused");
    d.close().await;
    assert_eq!(sessions(&b), 0);
}
