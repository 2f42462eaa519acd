//! The Redfish driver against sushy-tools, the independent Redfish emulator.

use std::time::Duration;

use qfence_controllers::driver::fence_verdict;
use qfence_controllers::redfish::RedfishDriver;
use qfence_controllers::{Driver, ErrorKind, Secret};
use qfence_model::config::{RedfishAuth, TlsTrust};
use qfence_model::{ControllerId, Grade, Verdict};

use crate::compliance::{self, Case, ctx, target};
use crate::emulators::{NODE1_UUID, NODE2_UUID, Sushy};

fn driver(s: &Sushy, tls: TlsTrust, password: &str, auth: RedfishAuth) -> RedfishDriver {
    RedfishDriver::new(
        ControllerId::new("bmc-dc1").unwrap(),
        &s.endpoint(),
        "admin",
        auth,
        &tls,
        Some(Secret::new(password.into())),
    )
    .unwrap()
}

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn redfish_passes_the_compliance_suite_against_sushy_with_its_slow_power_changes() {
    // sushy's own 1–11 s delay: the fence must poll until PowerState reads Off.
    let Some(s) = Sushy::start(None) else { return };
    let case = Case {
        driver: driver(
            &s,
            TlsTrust::CaFile(s.ca_file()),
            "password",
            RedfishAuth::Basic,
        ),
        fence: target("power.off", "node1"),
        missing: Some(target("power.off", "node9")),
        action_timeout: Duration::from_secs(30),
        slow_fence: true,
    };
    compliance::run(case).await;
}

#[tokio::test]
async fn systems_are_chosen_by_id_uuid_or_name_and_never_by_position() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    let d = driver(
        &s,
        TlsTrust::CaFile(s.ca_file()),
        "password",
        RedfishAuth::Basic,
    );
    // node2 is the last member, which fence_redfish would pick; fence node1 by name.
    let r = d
        .perform(&ctx(T), &target("power.off", "node1"))
        .await
        .unwrap();
    assert!(r.holds && r.detail.contains(NODE1_UUID), "{}", r.detail);
    let n2 = d
        .check(&ctx(T), &target("power.off", NODE2_UUID))
        .await
        .unwrap();
    assert!(!n2.holds, "node2 must still be on: {}", n2.detail);
    let by_uuid = d
        .check(&ctx(T), &target("power.off", &NODE1_UUID.to_uppercase()))
        .await
        .unwrap();
    assert!(by_uuid.holds, "{}", by_uuid.detail);
    let e = d
        .check(&ctx(T), &target("power.off", "node3"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(
        e.message.contains("node1") && e.message.contains("node2"),
        "lists what exists: {e}"
    );
    let found = d.discover(&ctx(T)).await.unwrap();
    let fence: Vec<_> = found
        .iter()
        .filter(|f| f.capability == "power.off")
        .map(|f| f.resource.as_str())
        .collect();
    assert_eq!(fence, [NODE1_UUID, NODE2_UUID]);
    // power.status is a health check: it holds while the system is on.
    assert!(
        d.check(&ctx(T), &target("power.status", "node2"))
            .await
            .unwrap()
            .holds
    );
    assert!(
        !d.check(&ctx(T), &target("power.status", "node1"))
            .await
            .unwrap()
            .holds
    );
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error_and_an_unknown_verdict() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    let d = driver(
        &s,
        TlsTrust::CaFile(s.ca_file()),
        "not-the-password",
        RedfishAuth::Basic,
    );
    let e = d.probe(&ctx(T)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(
        e.to_string().starts_with("bmc-dc1: "),
        "names the controller: {e}"
    );
    let c = d.check(&ctx(T), &target("power.off", "node1")).await;
    assert_eq!(fence_verdict(&c), Verdict::Unknown);
    let e = d
        .perform(&ctx(T), &target("power.off", "node1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(!e.message.contains("not-the-password"));
}

#[tokio::test]
async fn a_pinned_certificate_is_accepted_and_a_swapped_one_refused_with_both_fingerprints() {
    let Some(mut s) = Sushy::start(Some("0")) else {
        return;
    };
    let old = s.cert_fingerprint();
    let d = driver(
        &s,
        TlsTrust::Pin(old.clone()),
        "password",
        RedfishAuth::Basic,
    );
    let p = d.probe(&ctx(T)).await.unwrap();
    assert_eq!(p.identity.tls_fingerprint.as_deref(), Some(old.as_str()));

    s.swap_certificate();
    let new = s.cert_fingerprint();
    assert_ne!(old, new);
    // A new driver: pooled connections from before the swap must not hide the change.
    let d = driver(
        &s,
        TlsTrust::Pin(old.clone()),
        "password",
        RedfishAuth::Basic,
    );
    let e = d
        .check(&ctx(T), &target("power.off", "node1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(
        e.message.contains(&old) && e.message.contains(&new),
        "shows both: {e}"
    );
    assert_eq!(fence_verdict(&Err(e)), Verdict::Unknown);
}

#[tokio::test]
async fn the_first_contact_shows_the_fingerprint_to_pin() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    // The system roots do not trust the emulator's throw-away CA.
    let d = driver(&s, TlsTrust::SystemRoots, "password", RedfishAuth::Basic);
    let e = d.probe(&ctx(T)).await.unwrap_err();
    let fp = s.cert_fingerprint();
    assert!(
        e.message.contains(&fp),
        "the error shows the fingerprint to pin: {e}"
    );
    assert_eq!(d.seen_fingerprint().as_deref(), Some(fp.as_str()));
    // insecure works, and is warned about.
    let d = driver(&s, TlsTrust::Insecure, "password", RedfishAuth::Basic);
    let p = d.probe(&ctx(T)).await.unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("insecure")),
        "{:?}",
        p.warnings
    );
}

#[tokio::test]
async fn session_auth_falls_back_to_basic_on_a_service_without_sessions_and_says_so() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    let d = driver(
        &s,
        TlsTrust::CaFile(s.ca_file()),
        "password",
        RedfishAuth::Session,
    );
    let p = d.probe(&ctx(T)).await.unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("SessionService")),
        "{:?}",
        p.warnings
    );
    assert!(
        p.identity.id.starts_with("redfish-service:"),
        "{}",
        p.identity.id
    );
    assert!(p.identity.facts["system_uuids"].contains(NODE1_UUID));
    let status = p
        .grades
        .iter()
        .find(|g| g.capability == "power.status")
        .unwrap();
    assert_eq!(status.grade, Grade::Proven, "{}", status.reason);
    // sushy shows no accounts: the fence privilege cannot be seen.
    let fence = p
        .grades
        .iter()
        .find(|g| g.capability == "power.off")
        .unwrap();
    assert_eq!(fence.grade, Grade::Unverifiable, "{}", fence.reason);
}
