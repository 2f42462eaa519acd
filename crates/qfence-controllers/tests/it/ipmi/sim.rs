//! The IPMI driver against OpenIPMI's `ipmi_sim` (an independent BMC implementation) with a
//! fake host whose life is the chassis power. Each test has its own instance and port, so
//! they run in parallel. Needs tools/emulators; fails when it is missing unless
//! `QFENCE_SKIP_EMULATORS=1`.

use std::time::{Duration, Instant};

use super::support::{Sim, ctx, driver, target};
use qfence_controllers::driver::Build as _;
use qfence_controllers::{Driver, ErrorKind};
use qfence_model::{Grade, Verdict};

#[tokio::test]
async fn probe_reads_the_guid_and_grades_power_control_without_fencing() {
    let Some(sim) = Sim::start(41) else { return };
    let d = driver(&sim.endpoint(), "password");

    eprintln!("phase: probe");
    let probe = d.probe(&ctx(10)).await.expect("probe");
    eprintln!("{probe:#?}");
    // Get Channel Authentication Capabilities, outside the session
    assert_eq!(probe.identity.facts["kg"], "not set");
    // start-ipmi-sim.sh enables user 1 with an empty name
    assert!(
        probe.warnings.iter().any(|w| w.contains("null name")),
        "{:?}",
        probe.warnings
    );
    assert_eq!(probe.identity.id, sim.expected_guid());
    assert_eq!(probe.identity.facts["guid_source"], "Get System GUID");
    assert_eq!(probe.identity.facts["privilege"], "ADMINISTRATOR");
    assert_eq!(probe.identity.facts["ipmi_version"], "2.0");
    assert_eq!(probe.identity.facts["power"], "on");
    let grade = |c: &str| {
        probe
            .grades
            .iter()
            .find(|g| g.capability == c)
            .unwrap_or_else(|| panic!("no grade for {c}"))
            .clone()
    };
    let power = grade("power.off");
    assert_eq!(power.grade, Grade::Proven, "{}", power.reason);
    assert!(power.reason.contains("ADMINISTRATOR"), "{}", power.reason);
    // ipmi_sim's Get Watchdog Timer answer is 6 of 8 bytes: armed cannot be read back.
    let wd = grade("watchdog");
    assert_eq!(wd.grade, Grade::Unverifiable, "{}", wd.reason);
    assert!(
        probe.warnings.iter().any(|w| w.contains("6 of 8 bytes")),
        "{:?}",
        probe.warnings
    );

    eprintln!("phase: the probe changed nothing");
    assert_eq!(sim.ipmitool_power(), "Chassis Power is on");
    assert!(!sim.host_events().contains("POWEROFF"));

    let found = d.discover(&ctx(10)).await.expect("discover");
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|f| f.resource == sim.expected_guid()));
    assert!(found[0].description.contains("power on"), "{found:?}");
}

#[tokio::test]
async fn power_off_is_verified_by_read_back_idempotent_and_undone_by_power_on() {
    let Some(sim) = Sim::start(42) else { return };
    let d = driver(&sim.endpoint(), "password");
    let off = target("power.off", &[]);

    eprintln!("phase: check while on");
    let r = d.check(&ctx(10), &off).await.expect("check");
    assert!(!r.holds, "{}", r.detail);
    assert_eq!(r.verdict(), Verdict::Failed);

    eprintln!("phase: fence");
    let t = Instant::now();
    let r = d.perform(&ctx(20), &off).await.expect("power off");
    eprintln!("fenced in {:?}: {}", t.elapsed(), r.detail);
    assert!(r.holds, "{}", r.detail);
    assert!(r.detail.contains("Chassis power off"), "{}", r.detail);
    assert_eq!(r.by.as_str(), "orch-1");
    assert_eq!(sim.ipmitool_power(), "Chassis Power is off");
    assert!(
        sim.host_events().contains("power-off"),
        "{}",
        sim.host_events()
    );

    eprintln!("phase: fence again: already off is success");
    let r = d.perform(&ctx(10), &off).await.expect("power off again");
    assert!(r.holds);
    assert!(r.detail.starts_with("already off"), "{}", r.detail);
    assert_eq!(
        d.check(&ctx(10), &off).await.unwrap().verdict(),
        Verdict::Fenced
    );

    eprintln!("phase: unfence");
    let r = d.undo(&ctx(20), &off).await.expect("power on");
    assert!(!r.holds, "{}", r.detail);
    assert_eq!(sim.ipmitool_power(), "Chassis Power is on");
    let r = d.undo(&ctx(10), &off).await.expect("power on again");
    assert!(r.detail.starts_with("already on"), "{}", r.detail);

    let e = d.renew(&ctx(10), &off).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

#[tokio::test]
async fn watchdog_expiry_powers_the_host_off_once_renewals_stop() {
    let Some(sim) = Sim::start(43) else { return };
    let d = driver(&sim.endpoint(), "password");
    let wd = target("watchdog", &[("timeout_seconds", "5")]);
    let off = target("power.off", &[]);

    eprintln!("phase: arm with a 5 s countdown");
    let r = d.perform(&ctx(10), &wd).await.expect("arm");
    assert!(r.holds, "{}", r.detail);
    assert!(r.detail.contains("action power-down"), "{}", r.detail);
    assert!(r.detail.contains("5.0 s"), "{}", r.detail);

    // ipmi_sim 2.0.33 accepts Reset Watchdog Timer but does not move a running timer's
    // expiry (its timer is already queued), so renewals cannot postpone expiry there; this
    // test renews inside the first countdown and proves the expiry, not the postponement.
    eprintln!("phase: renew twice inside the countdown");
    let armed = Instant::now();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let r = d.renew(&ctx(10), &wd).await.expect("renew");
        assert!(r.holds, "{}", r.detail);
        let p = d.check(&ctx(10), &off).await.expect("power read");
        assert!(!p.holds, "host went off while renewed: {}", p.detail);
    }
    assert!(!sim.host_events().contains("POWEROFF"));

    eprintln!("phase: stop renewing; expect the BMC to power the host off");
    let off_at = loop {
        let p = d.check(&ctx(10), &off).await.expect("power read");
        if p.holds {
            break armed.elapsed();
        }
        assert!(
            armed.elapsed() < Duration::from_secs(15),
            "the watchdog did not power the host off within 15 s of arming"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("power read off {off_at:?} after arming");
    assert!(
        off_at >= Duration::from_secs(4) && off_at <= Duration::from_secs(11),
        "expiry {off_at:?} after arming, expected 5 s (ipmi_sim) to 8 s (a BMC honouring the last renewal)"
    );
    // The BMC itself told the host to power off: qfence sent no Chassis Control.
    assert!(
        sim.host_events().contains("bmc-command POWEROFF"),
        "{}",
        sim.host_events()
    );
    assert_eq!(sim.ipmitool_power(), "Chassis Power is off");
    assert!(
        sim.host_events().contains("power-off"),
        "{}",
        sim.host_events()
    );
}

#[tokio::test]
async fn a_disarmed_watchdog_does_not_fire_and_a_plain_check_is_unknown_on_ipmi_sim() {
    let Some(sim) = Sim::start(44) else { return };
    let d = driver(&sim.endpoint(), "password");
    let wd = target("watchdog", &[("timeout_seconds", "3")]);
    let off = target("power.off", &[]);

    eprintln!("phase: renewing before arming is refused");
    let e = d.renew(&ctx(10), &wd).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(!e.state_unknown);

    eprintln!("phase: arm, then check: ipmi_sim's short answer gives UNKNOWN, not a guess");
    assert!(d.perform(&ctx(10), &wd).await.expect("arm").holds);
    let e = d.check(&ctx(10), &wd).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
    assert!(e.state_unknown);
    assert!(e.message.contains("too short"), "{e}");

    eprintln!("phase: disarm and wait past the countdown");
    let r = d.undo(&ctx(10), &wd).await.expect("disarm");
    assert!(!r.holds, "{}", r.detail);
    assert!(r.detail.contains("action none"), "{}", r.detail);
    let r = d
        .check(&ctx(10), &wd)
        .await
        .expect("a disarmed check reads");
    assert!(!r.holds);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = d.check(&ctx(10), &off).await.expect("power read");
    assert!(
        !p.holds,
        "a disarmed watchdog powered the host off: {}",
        p.detail
    );
    assert!(!sim.host_events().contains("POWEROFF"));
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error_that_changes_nothing() {
    let Some(sim) = Sim::start(45) else { return };
    let d = driver(&sim.endpoint(), "not-the-password");
    let e = d
        .perform(&ctx(10), &target("power.off", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(!e.state_unknown);
    assert!(!e.message.contains("not-the-password"), "{e}");
    assert_eq!(sim.ipmitool_power(), "Chassis Power is on");

    let d = super::support::driver(&sim.endpoint(), "password");
    let probe_ok = d.probe(&ctx(10)).await;
    assert!(probe_ok.is_ok(), "{probe_ok:?}");
}

#[tokio::test]
async fn an_unknown_user_is_an_auth_error() {
    let Some(sim) = Sim::start(46) else { return };
    let d = qfence_controllers::ipmi::IpmiDriver::build(
        qfence_model::ControllerId::new("bmc-dc1").unwrap(),
        &super::support::config(&sim.endpoint(), "nobody"),
        Some(secrecy::SecretString::from("password".to_owned())),
    )
    .unwrap();
    let e = d.probe(&ctx(10)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
}

#[tokio::test]
async fn ipmi_passes_the_compliance_suite_against_ipmi_sim() {
    let Some(sim) = Sim::start(47) else { return };
    let case = crate::compliance::Case {
        driver: driver(&sim.endpoint(), "password"),
        fence: crate::compliance::target("power.off", "node1"),
        // One BMC, one host: there is no other resource to name.
        missing: None,
        action_timeout: Duration::from_secs(15),
        slow_fence: false,
    };
    crate::compliance::run(case).await;
    drop(sim);
}
