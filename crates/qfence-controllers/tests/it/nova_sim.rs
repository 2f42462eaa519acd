//! The Nova driver against the lab's Nova + Keystone simulator (in process): the compliance
//! suite again, and the bad answers a real fake cloud cannot give cheaply: expired and
//! revoked tokens, 5xx storms, a slow API, an old microversion range, slow and failing
//! evacuations, and a thousand servers on twenty hosts.

use std::time::Duration;

use qfence_controllers::driver::Build as _;
use qfence_controllers::nova::{
    self, EvacuateRequest, EvacuationProgress, NovaDriver, ServiceState,
};
use qfence_controllers::{Driver, ErrorKind};
use qfence_lab::TlsIdentity;
use qfence_lab::faults::ErrorStorm;
use qfence_lab::nova::{self as sim, NovaHandle, NovaState};
use qfence_model::config::{ControllerConfig, ControllerKind, NovaAuth, NovaInterface, TlsTrust};
use qfence_model::{ControllerId, SiteId};
use secrecy::SecretString;
use tokio::time::Instant;

use crate::compliance::{self, Case, ctx, target};

const T: Duration = Duration::from_secs(10);

/// The simulator on a runtime of its own, so that the compliance suite's task count (the
/// test's runtime) sees only what the driver starts. Drop the pair off the test's runtime
/// ([`drop_lab`]).
fn cloud_apart(state: NovaState) -> (tokio::runtime::Runtime, NovaHandle) {
    std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let h = rt.block_on(cloud(state));
        (rt, h)
    })
    .join()
    .unwrap()
}

fn drop_lab(lab: (tokio::runtime::Runtime, NovaHandle)) {
    std::thread::spawn(move || drop(lab)).join().unwrap();
}

async fn cloud(state: NovaState) -> NovaHandle {
    sim::start(
        "127.0.0.1:0".parse().unwrap(),
        TlsIdentity::loopback().unwrap(),
        state,
    )
    .await
    .unwrap()
}

fn driver_as(h: &NovaHandle, auth: NovaAuth, secret: &str) -> NovaDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::Pin(h.fingerprint().to_owned()),
        timeout: T,
        kind: ControllerKind::Nova {
            endpoint: h.keystone_url().parse().unwrap(),
            auth,
            interface: NovaInterface::Public,
            region: None,
        },
    };
    nova::NovaDriver::build(
        ControllerId::new("nova-sim").unwrap(),
        &config,
        Some(SecretString::from(secret.to_owned())),
    )
    .unwrap()
}

fn driver(h: &NovaHandle) -> NovaDriver {
    driver_as(
        h,
        NovaAuth::ApplicationCredential {
            id: "qfence".into(),
        },
        "qfence-secret",
    )
}

fn server_on(h: &NovaHandle, host: &str) -> String {
    h.snapshot()
        .servers
        .iter()
        .find(|s| s.host == host)
        .unwrap()
        .id
        .clone()
}

/// Stops a host's heartbeat and waits until Nova would read it down (1 s).
async fn fail_host(h: &NovaHandle, host: &str) {
    h.update(|s| {
        s.service_down_time = Duration::from_millis(300);
        s.stop_heartbeat(host);
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
}

#[tokio::test]
async fn nova_sim_passes_the_compliance_suite() {
    let lab = cloud_apart(NovaState::new(3, 2));
    compliance::run(Case {
        driver: driver(&lab.1),
        fence: target("host.force_down", "compute-2"),
        missing: Some(target("host.force_down", "compute-9")),
        action_timeout: T,
        slow_fence: false,
    })
    .await;
    drop_lab(lab);
}

#[tokio::test]
async fn nova_sim_a_token_is_reused_renewed_before_expiry_and_once_after_a_revocation() {
    let h = cloud(NovaState::new(2, 1)).await;
    let d = driver(&h);
    for _ in 0..5 {
        d.compute_services(&ctx(T)).await.unwrap();
    }
    assert_eq!(h.logins(), 1, "one token serves every call");
    h.revoke_tokens();
    d.compute_services(&ctx(T))
        .await
        .expect("a 401 is answered by one new login");
    assert_eq!(h.logins(), 2);
    // A token that lives 2 s is renewed shortly before it ends, without a 401.
    h.update(|s| s.token_lifetime = Duration::from_secs(2));
    h.revoke_tokens();
    d.compute_services(&ctx(T)).await.unwrap();
    let n = h.logins();
    tokio::time::sleep(Duration::from_millis(1900)).await;
    d.compute_services(&ctx(T)).await.unwrap();
    assert_eq!(h.logins(), n + 1, "renewed before it expired");
    // Credentials Keystone refuses: Auth, and no retry storm.
    let bad = driver_as(
        &h,
        NovaAuth::ApplicationCredential {
            id: "qfence".into(),
        },
        "wrong",
    );
    let e = bad.compute_services(&ctx(T)).await.unwrap_err();
    assert_eq!((e.kind, e.state_unknown), (ErrorKind::Auth, false), "{e}");
}

#[tokio::test]
async fn nova_sim_5xx_storms_slow_answers_and_cuts_map_to_the_contract() {
    let h = cloud(NovaState::new(2, 1)).await;
    let d = driver(&h);
    d.compute_services(&ctx(T)).await.unwrap();

    // Two 503s on a read are resent through; a storm that lasts is an error.
    h.faults().set_error_storm(Some(ErrorStorm {
        status: 503,
        remaining: Some(2),
    }));
    d.compute_services(&ctx(T))
        .await
        .expect("resent past two 503s");
    h.faults().set_error_storm(Some(ErrorStorm {
        status: 500,
        remaining: None,
    }));
    let e = d.compute_services(&ctx(T)).await.unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Protocol, false),
        "{e}"
    );
    // A write answered 503 may or may not have been applied: state unknown, verdict UNKNOWN.
    h.faults().clear();
    let svc = d.compute_service(&ctx(T), "compute-1").await.unwrap();
    h.faults().set_error_storm(Some(ErrorStorm {
        status: 503,
        remaining: None,
    }));
    let e = d
        .perform(&ctx(T), &target("host.force_down", "compute-1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    h.faults().clear();
    assert!(!svc.forced_down);

    // A slow API: the call's deadline holds.
    h.faults().set_latency(Duration::from_secs(3));
    let t = Instant::now();
    let e = d
        .compute_services(&ctx(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(
        t.elapsed() < Duration::from_millis(1600),
        "{:?}",
        t.elapsed()
    );
    h.faults().clear();

    // Unreachable, and an impostor certificate under a pin.
    h.faults()
        .set_unreachable(Some(qfence_lab::faults::Cut::Refuse));
    let e = d.compute_services(&ctx(T)).await.unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::Unreachable | ErrorKind::Protocol),
        "{e}"
    );
    h.faults().clear();
    h.faults().set_wrong_certificate(true);
    let fresh = driver(&h);
    let e = fresh.compute_services(&ctx(T)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    h.faults().clear();

    // Refusals: 404 for an unknown server, 403 for a member without admin.
    let e = d
        .server(&ctx(T), "00000000-0000-4000-8000-000000000000")
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Rejected, false),
        "{e}"
    );
    let member = driver_as(
        &h,
        NovaAuth::Password {
            username: "demo".into(),
            user_domain: "Default".into(),
            project: "demo".into(),
            project_domain: "Default".into(),
        },
        "demo-secret",
    );
    let e = member.compute_services(&ctx(T)).await.unwrap_err();
    assert!(
        e.kind == ErrorKind::Rejected && e.message.contains("403"),
        "{e}"
    );
}

#[tokio::test]
async fn nova_sim_the_microversion_is_negotiated_down_or_refused() {
    let mut state = NovaState::new(3, 1);
    state.max_microversion = (2, 25);
    let h = cloud(state).await;
    let d = driver(&h);
    let e = d
        .perform(&ctx(T), &target("host.force_down", "compute-1"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Unsupported, false),
        "{e}"
    );
    assert!(
        e.message.contains("2.53") && e.message.contains("2.1-2.25"),
        "{e}"
    );
    let p = d.probe(&ctx(T)).await.unwrap();
    assert!(
        p.grades
            .iter()
            .all(|g| g.grade == qfence_model::Grade::Failed || g.capability == "server.evacuate"),
        "{p:#?}"
    );
    // Evacuation falls back to 2.14 (Nova checks shared storage itself).
    fail_host(&h, "compute-1").await;
    let id = server_on(&h, "compute-1");
    let e = d
        .evacuate(&ctx(T), &id, &EvacuateRequest::default())
        .await
        .unwrap();
    assert_eq!(e.microversion, nova::Microversion::new(2, 14));
    match d.follow_evacuation(&ctx(T), &e).await.unwrap() {
        EvacuationProgress::Done { server, .. } => {
            assert_ne!(server.host.as_deref(), Some("compute-1"));
            assert!(
                server.flavor.extra_specs.is_empty(),
                "no embedded flavor below 2.47"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nova_sim_slow_failing_and_repeatedly_failing_evacuations() {
    let h = cloud(NovaState::new(3, 2)).await;
    let d = driver(&h);
    fail_host(&h, "compute-1").await;
    d.force_down(&ctx(T), "compute-1").await.unwrap();
    let ids: Vec<String> = h
        .snapshot()
        .servers
        .iter()
        .filter(|s| s.host == "compute-1")
        .map(|s| s.id.clone())
        .collect();

    // Slow: a deadline that passes first leaves the outcome unknown, never done.
    h.update(|s| s.evacuation.duration = Duration::from_secs(3));
    let e = d
        .evacuate(&ctx(T), &ids[0], &EvacuateRequest::default())
        .await
        .unwrap();
    let err = d
        .follow_evacuation(&ctx(Duration::from_secs(1)), &e)
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.state_unknown),
        (ErrorKind::Timeout, true),
        "{err}"
    );
    match d.follow_evacuation(&ctx(T), &e).await.unwrap() {
        EvacuationProgress::Done { server, .. } => {
            assert_ne!(server.host.as_deref(), Some("compute-1"))
        }
        other => panic!("{other:?}"),
    }

    // Fails every time (`error`, the server in ERROR on its old host): each retry fails too.
    h.update(|s| {
        s.evacuation.duration = Duration::from_millis(100);
        s.evacuation.always_fail.insert(ids[1].clone());
    });
    for attempt in 1..=3 {
        let e = d
            .evacuate(&ctx(T), &ids[1], &EvacuateRequest::default())
            .await
            .unwrap();
        match d.follow_evacuation(&ctx(T), &e).await.unwrap() {
            EvacuationProgress::Failed { migration, server } => {
                assert!(
                    migration.status.failed(),
                    "attempt {attempt}: {migration:?}"
                );
                assert_eq!(server.host.as_deref(), Some("compute-1"));
                assert!(server.fault.is_some(), "{server:?}");
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
    // The capability refuses with the reading: not a recovery, not unknown.
    let err = d
        .perform(&ctx(T), &target("server.evacuate", &ids[1]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Rejected, "{err}");

    // Fails on the destination (`failed`): the server is in ERROR there, where it was rebuilt.
    let third = server_on(&h, "compute-2");
    fail_host(&h, "compute-2").await;
    h.update(|s| s.evacuation.fail_next = 1);
    let e = d
        .evacuate(&ctx(T), &third, &EvacuateRequest::default())
        .await
        .unwrap();
    match d.follow_evacuation(&ctx(T), &e).await.unwrap() {
        EvacuationProgress::Failed { migration, server } => {
            assert_eq!(migration.status, nova::MigrationStatus::Failed);
            assert_eq!(server.status, nova::ServerStatus::Error);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nova_sim_a_thousand_servers_on_twenty_hosts_one_host_evacuated() {
    let h = cloud(NovaState::new(20, 50)).await;
    let d = driver(&h);
    let t = Instant::now();
    let found = d.discover(&ctx(T)).await.unwrap();
    assert_eq!(found.len(), 20 * 3 + 1000 * 2);
    let on = d.servers_on_host(&ctx(T), "compute-7").await.unwrap();
    assert_eq!(on.len(), 50);
    assert!(on.iter().all(|s| s.host.as_deref() == Some("compute-7")));
    eprintln!(
        "listed 1,000 servers and one host's 50 in {:.2} s",
        t.elapsed().as_secs_f64()
    );

    fail_host(&h, "compute-7").await;
    let s = d.compute_service(&ctx(T), "compute-7").await.unwrap();
    assert_eq!(s.state, ServiceState::Down);
    d.disable_service(&ctx(T), "compute-7", "qfence: failed")
        .await
        .unwrap();
    d.force_down(&ctx(T), "compute-7").await.unwrap();
    h.update(|s| s.evacuation.duration = Duration::from_millis(200));
    let mut evacs = Vec::new();
    for s in &on {
        evacs.push(
            d.evacuate(&ctx(T), &s.id, &EvacuateRequest::default())
                .await
                .unwrap(),
        );
    }
    for e in &evacs {
        match d.follow_evacuation(&ctx(T), e).await.unwrap() {
            EvacuationProgress::Done { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(
        d.servers_on_host(&ctx(T), "compute-7")
            .await
            .unwrap()
            .is_empty()
    );
    eprintln!("50 servers evacuated in {:.2} s", t.elapsed().as_secs_f64());
    // Forced-up is refused while the done records remain; the host's restart clears them.
    let e = d.clear_forced_down(&ctx(T), "compute-7").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    h.update(|s| s.restart_host("compute-7"));
    d.clear_forced_down(&ctx(T), "compute-7").await.unwrap();
}

#[tokio::test]
async fn nova_sim_schedulers_are_read_apart_from_the_compute_hosts() {
    let h = cloud(NovaState::new(2, 1)).await;
    let d = driver(&h);
    let s = d.scheduler_services(&ctx(T)).await.unwrap();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].binary, "nova-scheduler");
    assert_eq!(s[0].state, ServiceState::Up);
    let computes = d.compute_services(&ctx(T)).await.unwrap();
    assert_eq!(computes.len(), 2, "the scheduler is not a compute host");
    assert!(computes.iter().all(|c| c.binary == "nova-compute"));

    h.update(|s| s.scheduler_up = false);
    let s = d.scheduler_services(&ctx(T)).await.unwrap();
    assert_eq!(s[0].state, ServiceState::Down);
}
