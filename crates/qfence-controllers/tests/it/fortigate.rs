//! The FortiGate driver against the FortiOS simulator (qfence-lab), over HTTPS with a pinned
//! certificate: the driver contract (probe changes nothing, perform is idempotent and proven
//! by read-back, deadlines and cancellation, error kinds) and FortiOS specifics.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_controllers::driver::Build as _;
use qfence_controllers::fortigate::{self, FortigateDriver};
use qfence_controllers::{CallContext, Driver, ErrorKind, Target};
use qfence_lab::LabTls;
use qfence_lab::fortios::{self, AccProfile, Access, FortiSim, FortiState};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId, Verdict};
use secrecy::SecretString;

struct Lab {
    sim: FortiSim,
    tls: LabTls,
}

async fn lab(state: FortiState) -> Lab {
    let tls = LabTls::self_signed(&["127.0.0.1", "localhost"]).unwrap();
    let sim = fortios::start("127.0.0.1:0".parse().unwrap(), Some(tls.clone()), state)
        .await
        .unwrap();
    Lab { sim, tls }
}

fn pin(tls: &LabTls) -> String {
    qfence_controllers::tls::fingerprint(&tls.cert_der)
}

fn driver_with(lab: &Lab, key: &str, trust: TlsTrust) -> FortigateDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: trust,
        timeout: Duration::from_secs(5),
        kind: ControllerKind::Fortigate {
            endpoint: lab.sim.url().parse().unwrap(),
            vdom: Some("root".to_owned()),
        },
    };
    fortigate::FortigateDriver::build(
        ControllerId::new("fgt").unwrap(),
        &config,
        Some(SecretString::from(key.to_owned())),
    )
    .unwrap()
}

fn driver(lab: &Lab, key: &str) -> FortigateDriver {
    driver_with(lab, key, TlsTrust::Pin(pin(&lab.tls)))
}

fn ctx() -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("orc-dc1").unwrap(),
        Duration::from_secs(5),
    )
}

fn target(cap: &str, resource: &str, site: &str) -> Target {
    Target {
        capability: cap.to_owned(),
        resource: resource.to_owned(),
        params: BTreeMap::new(),
        site: SiteId::new(site).unwrap(),
    }
}

fn vip_target(site: &str) -> Target {
    let mut t = target("vip.own", "erp-vip", site);
    t.params.insert("dc1".to_owned(), "10.1.1.5".to_owned());
    t.params.insert("dc2".to_owned(), "10.2.1.5".to_owned());
    t
}

fn policy_enabled(sim: &FortiSim, id: u32) -> bool {
    sim.state().vdoms["root"].policies[&id].enabled
}

#[tokio::test]
async fn probe_reads_the_serial_and_pins_the_certificate_without_writing() {
    let lab = lab(FortiState::example()).await;
    let before = lab.sim.state();
    let p = driver(&lab, "admin-key").probe(&ctx()).await.unwrap();
    assert_eq!(p.identity.id, "FGVM02TM00000001");
    assert_eq!(p.identity.facts["hostname"], "fgt-lab");
    assert_eq!(p.identity.facts["version"], "v7.4.5");
    assert_eq!(
        p.identity.tls_fingerprint.as_deref(),
        Some(pin(&lab.tls).as_str())
    );
    assert_eq!(lab.sim.writes(), 0, "a probe must not write");
    assert_eq!(lab.sim.state(), before);
}

#[tokio::test]
async fn grades_follow_what_the_access_profiles_show() {
    let lab = lab(FortiState::example()).await;
    let grade = |p: &qfence_controllers::Probe, cap: &str| {
        p.grades.iter().find(|g| g.capability == cap).unwrap().grade
    };
    // Admin key sees every API user; a read-only one among them makes it undecidable.
    let p = driver(&lab, "admin-key").probe(&ctx()).await.unwrap();
    assert_eq!(grade(&p, "policy.disable"), Grade::Unverifiable, "{p:?}");
    // Only writers left: inferred (never proven: FortiOS has no "who am I").
    lab.sim.edit(|s| s.keys.retain(|k, _| k != "ro-key"));
    let p = driver(&lab, "admin-key").probe(&ctx()).await.unwrap();
    assert_eq!(grade(&p, "policy.disable"), Grade::Inferred, "{p:?}");
    assert_eq!(grade(&p, "vip.own"), Grade::Inferred);
    // A firewall-only key cannot read its profile, nor the session setting.
    let p = driver(&lab, "fw-key").probe(&ctx()).await.unwrap();
    assert_eq!(grade(&p, "policy.disable"), Grade::Unverifiable, "{p:?}");
    assert!(
        p.warnings.iter().any(|w| w.contains("assumed")),
        "{:?}",
        p.warnings
    );
    // A key without firewall access fails.
    lab.sim.edit(|s| {
        s.profiles.insert(
            "fw_read".to_owned(),
            AccProfile {
                fwgrp: Access::None,
                sysgrp: Access::None,
            },
        );
    });
    lab.sim.edit(|s| {
        s.keys.insert(
            "ro-key".to_owned(),
            fortios::ApiUser {
                name: "qfence-ro".to_owned(),
                accprofile: "fw_read".to_owned(),
                vdoms: vec!["root".to_owned()],
            },
        );
    });
    let p = driver(&lab, "ro-key").probe(&ctx()).await.unwrap();
    assert_eq!(grade(&p, "policy.disable"), Grade::Failed, "{p:?}");
    let e = driver(&lab, "no-such-key").probe(&ctx()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert_eq!(lab.sim.writes(), 0);
}

#[tokio::test]
async fn policy_disable_is_verified_idempotent_and_undone() {
    let lab = lab(FortiState::example()).await;
    let d = driver(&lab, "fw-key");
    let t = target("policy.disable", "2", "dc2");
    let c = d.check(&ctx(), &t).await.unwrap();
    assert!(!c.holds, "{c:?}");
    assert_eq!(c.verdict(), Verdict::Failed);

    let r = d.perform(&ctx(), &t).await.unwrap();
    assert!(r.holds, "{r:?}");
    assert!(r.detail.contains("status=disable"), "{}", r.detail);
    assert!(!policy_enabled(&lab.sim, 2));
    assert!(policy_enabled(&lab.sim, 1), "only the named policy changes");
    assert_eq!(lab.sim.writes(), 1);

    // Already disabled: success without another write.
    let r = d.perform(&ctx(), &t).await.unwrap();
    assert!(r.holds);
    assert_eq!(lab.sim.writes(), 1);

    let u = d.undo(&ctx(), &t).await.unwrap();
    assert!(!u.holds, "the fence no longer holds: {u:?}");
    assert!(policy_enabled(&lab.sim, 2));
}

#[tokio::test]
async fn a_write_the_device_did_not_apply_is_caught_by_the_read_back() {
    let lab = lab(FortiState::example()).await;
    lab.sim.set_ignore_writes(true);
    let r = driver(&lab, "fw-key")
        .perform(&ctx(), &target("policy.disable", "1", "dc1"))
        .await
        .unwrap();
    assert!(!r.holds, "{r:?}");
    assert_eq!(r.verdict(), Verdict::Failed);
}

#[tokio::test]
async fn check_new_session_handling_means_the_fence_does_not_hold() {
    let lab = lab(FortiState::example()).await;
    lab.sim
        .edit(|s| s.vdoms.get_mut("root").unwrap().session_dirty = "check-new".into());
    let r = driver(&lab, "admin-key")
        .perform(&ctx(), &target("policy.disable", "1", "dc1"))
        .await
        .unwrap();
    assert!(!policy_enabled(&lab.sim, 1));
    assert!(!r.holds && r.detail.contains("check-new"), "{r:?}");

    // Under check-policy-option the policy's own setting decides.
    lab.sim.edit(|s| {
        let v = s.vdoms.get_mut("root").unwrap();
        v.session_dirty = "check-policy-option".into();
        v.policies.get_mut(&1).unwrap().session_dirty = "check-all".into();
    });
    let r = driver(&lab, "admin-key")
        .check(&ctx(), &target("policy.disable", "1", "dc1"))
        .await
        .unwrap();
    assert!(r.holds && r.detail.contains("policy option"), "{r:?}");
}

#[tokio::test]
async fn errors_carry_their_kind() {
    let mut lab = lab(FortiState::example()).await;
    let t = target("policy.disable", "1", "dc1");

    lab.sim.fail_next_writes(1, 500);
    let e = driver(&lab, "fw-key")
        .perform(&ctx(), &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.state_unknown, "a 500 on a write may have applied it");

    lab.sim.fail_next_writes(1, 424);
    let e = driver(&lab, "fw-key")
        .perform(&ctx(), &t)
        .await
        .unwrap_err();
    assert!(!e.state_unknown, "a 424 changed nothing: {e}");

    let e = driver(&lab, "ro-key")
        .perform(&ctx(), &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(e.message.contains("403"), "{e}");

    let e = driver(&lab, "s3cr3t-not-a-key")
        .check(&ctx(), &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(!e.to_string().contains("s3cr3t"), "never echo the key: {e}");

    let e = driver(&lab, "fw-key")
        .check(&ctx(), &target("policy.disable", "99", "dc1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);

    let e = driver(&lab, "fw-key").renew(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    let e = driver(&lab, "fw-key")
        .undo(&ctx(), &vip_target("dc1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);

    // A certificate other than the pinned one is refused before any request.
    let other = LabTls::self_signed(&["127.0.0.1"]).unwrap();
    let e = driver_with(&lab, "fw-key", TlsTrust::Pin(pin(&other)))
        .check(&ctx(), &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");

    lab.sim.shutdown().await;
    let r = driver(&lab, "fw-key").check(&ctx(), &t).await;
    assert_eq!(r.as_ref().unwrap_err().kind, ErrorKind::Unreachable);
    assert_eq!(
        qfence_controllers::driver::fence_verdict(&r),
        Verdict::Unknown
    );
}

#[tokio::test]
async fn deadline_and_cancellation_are_honoured() {
    let lab = lab(FortiState::example()).await;
    lab.sim.set_latency(Duration::from_secs(3));
    let d = driver(&lab, "fw-key");
    let t = target("policy.disable", "1", "dc1");
    let c = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(300),
    );
    let start = std::time::Instant::now();
    let e = d.perform(&c, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.state_unknown);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );

    let c = ctx();
    let cancel = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let e = d.check(&c, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled);
}

#[tokio::test]
async fn vip_own_points_the_vip_at_the_owner_site() {
    let lab = lab(FortiState::example()).await;
    let d = driver(&lab, "fw-key");
    assert!(d.check(&ctx(), &vip_target("dc1")).await.unwrap().holds);
    assert!(!d.check(&ctx(), &vip_target("dc2")).await.unwrap().holds);

    let r = d.perform(&ctx(), &vip_target("dc2")).await.unwrap();
    assert!(r.holds, "{r:?}");
    assert_eq!(
        lab.sim.state().vdoms["root"].vips["erp-vip"].mappedip,
        ["10.2.1.5"]
    );
    let writes = lab.sim.writes();
    assert!(d.perform(&ctx(), &vip_target("dc2")).await.unwrap().holds);
    assert_eq!(lab.sim.writes(), writes, "already owned: no write");
    assert!(!d.check(&ctx(), &vip_target("dc1")).await.unwrap().holds);

    // A disabled VIP is not owned by anyone, even when it maps to the site.
    lab.sim.edit(|s| {
        s.vdoms
            .get_mut("root")
            .unwrap()
            .vips
            .get_mut("erp-vip")
            .unwrap()
            .enabled = false
    });
    assert!(!d.check(&ctx(), &vip_target("dc2")).await.unwrap().holds);
    assert!(d.perform(&ctx(), &vip_target("dc2")).await.unwrap().holds);
    assert!(lab.sim.state().vdoms["root"].vips["erp-vip"].enabled);
}

#[tokio::test]
async fn discovery_and_binding_checks_name_real_objects() {
    let lab = lab(FortiState::example()).await;
    let d = driver(&lab, "fw-key");
    let found = d.discover(&ctx()).await.unwrap();
    let names: Vec<_> = found
        .iter()
        .map(|f| (f.capability.as_str(), f.resource.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("policy.disable", "1"),
            ("policy.disable", "2"),
            ("vip.own", "erp-vip")
        ]
    );
    assert!(found[0].description.contains("dc1-to-db"), "{found:?}");

    assert!(
        d.check_binding(&ctx(), &target("policy.disable", "1", "dc1"))
            .await
            .unwrap()
            .is_empty()
    );
    let p = d
        .check_binding(&ctx(), &target("policy.disable", "7", "dc1"))
        .await
        .unwrap();
    assert!(p[0].contains("does not exist"), "{p:?}");
    assert!(
        d.check_binding(&ctx(), &vip_target("dc2"))
            .await
            .unwrap()
            .is_empty()
    );
    let mut t = vip_target("dc3");
    t.params.insert("dc2".to_owned(), "not-an-ip".to_owned());
    let p = d.check_binding(&ctx(), &t).await.unwrap();
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(lab.sim.writes(), 0);
}

#[test]
fn build_needs_a_key_and_does_no_io() {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::CaFile("/nonexistent/ca.pem".to_owned()),
        timeout: Duration::from_secs(5),
        kind: ControllerKind::Fortigate {
            endpoint: "https://192.0.2.1".parse().unwrap(),
            vdom: None,
        },
    };
    let id = ControllerId::new("fgt").unwrap();
    // The CA file is only read on first use, so build succeeds.
    assert!(
        fortigate::FortigateDriver::build(
            id.clone(),
            &config,
            Some(SecretString::from("k".to_owned()))
        )
        .is_ok()
    );
    assert_eq!(
        fortigate::FortigateDriver::build(id, &config, None)
            .unwrap_err()
            .kind,
        ErrorKind::Auth
    );
}

/// The simulator itself, read raw: the envelope and codes the FortiOS documents describe.
#[tokio::test]
async fn the_simulator_speaks_the_documented_envelope() {
    let lab = lab(FortiState::example()).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(lab.tls.cert_pem.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let url = |p: &str| format!("{}/api/v2/{p}", lab.sim.url());
    let get = |p: &str, key: &str| http.get(url(p)).bearer_auth(key.to_owned()).send();

    let r = get("cmdb/firewall/policy/1?vdom=root", "fw-key")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    for k in [
        "http_method",
        "status",
        "http_status",
        "vdom",
        "path",
        "name",
        "serial",
        "version",
        "build",
    ] {
        assert!(b.get(k).is_some(), "{k} missing: {b}");
    }
    assert_eq!(
        (b["path"].as_str(), b["name"].as_str()),
        (Some("firewall"), Some("policy"))
    );
    assert_eq!(b["results"][0]["status"], "enable");

    let r = http
        .put(url("cmdb/firewall/policy/1"))
        .bearer_auth("fw-key")
        .json(&serde_json::json!({"status": "disable"}))
        .send()
        .await
        .unwrap();
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["mkey"], "1");
    assert_eq!(b["revision_changed"], true);
    assert_ne!(b["revision"], b["old_revision"]);
    let r = http
        .put(url("cmdb/firewall/policy/1"))
        .bearer_auth("fw-key")
        .json(&serde_json::json!({"status": "disable"}))
        .send()
        .await
        .unwrap();
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["revision_changed"], false, "nothing changed: {b}");

    // Bad value: 424 with the CLI's words; unknown object 404; unknown VDOM 404.
    let r = http
        .put(url("cmdb/firewall/policy/1"))
        .bearer_auth("fw-key")
        .json(&serde_json::json!({"status": "off"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 424);
    let b: serde_json::Value = r.json().await.unwrap();
    assert!(
        b["error"].as_i64().unwrap() < 0 && b["cli_error"].is_string(),
        "{b}"
    );
    assert_eq!(
        get("cmdb/firewall/policy/9", "fw-key")
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        get("cmdb/firewall/policy?vdom=nope", "fw-key")
            .await
            .unwrap()
            .status(),
        404
    );
    // The key in the URL is refused, as on FortiOS 7.4.5+; so is no key.
    let r = http
        .get(url("cmdb/firewall/policy?access_token=fw-key"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        http.get(url("monitor/system/status"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    // A profile without system access gets 403 there.
    assert_eq!(
        get("cmdb/system/accprofile", "fw-key")
            .await
            .unwrap()
            .status(),
        403
    );
}

#[tokio::test]
async fn in_an_ha_cluster_a_fence_holds_once_every_member_has_it() {
    let mut state = FortiState::example();
    state.ha_peers = vec!["FGVM02TM00000002".to_owned()];
    state.ha_sync_delay_ms = 600;
    let lab = lab(state).await;
    let d = driver(&lab, "admin-key");
    let t = target("policy.disable", "1", "dc1");

    // The primary has it at once, the peer only 600 ms later: a short deadline ends unknown.
    let short = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(250),
    );
    let e = d.perform(&short, &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.state_unknown);
    assert!(!policy_enabled(&lab.sim, 1), "the primary took it");
    let r = d.check(&ctx(), &t).await.unwrap();
    assert!(!r.holds && r.detail.contains("not all in sync"), "{r:?}");

    // Repeating the fence waits for the peer and then holds.
    let start = std::time::Instant::now();
    let r = d.perform(&ctx(), &t).await.unwrap();
    assert!(
        r.holds && r.detail.contains("2 HA members in sync"),
        "{r:?}"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );

    // A key that cannot read the HA state says so and is judged on the unit that answers.
    let r = driver(&lab, "fw-key").check(&ctx(), &t).await.unwrap();
    assert!(
        r.holds && r.detail.contains("HA sync state unreadable"),
        "{r:?}"
    );
}

#[tokio::test]
async fn concurrent_reads_share_an_ha_reading_taken_after_each_of_them() {
    let mut state = FortiState::example();
    state.ha_peers = vec!["FGVM02TM00000002".to_owned()];
    state.ha_sync_delay_ms = 600;
    let lab = lab(state).await;
    let d = driver(&lab, "admin-key");
    lab.sim.set_latency(Duration::from_millis(20));

    // 64 VIP checks at once: each needs an HA reading made after its VIP read, and one
    // reading answers all those waiting when it starts.
    let before = lab.sim.ha_reads();
    let t = vip_target("dc1");
    let c = ctx();
    let reads = futures_util::future::join_all((0..64).map(|_| d.check(&c, &t))).await;
    for r in reads {
        let r = r.unwrap();
        assert!(r.detail.contains("2 HA members in sync"), "{r:?}");
    }
    let shared = lab.sim.ha_reads() - before;
    assert!(shared <= 16, "{shared} HA readings for 64 checks");

    // A reading taken before a change never answers a read made after it: the change is
    // on the primary only, and the next check says so.
    let short = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(100),
    );
    let p = target("policy.disable", "1", "dc1");
    assert!(d.perform(&short, &p).await.is_err());
    let r = d.check(&ctx(), &t).await.unwrap();
    assert!(r.detail.contains("not all in sync"), "{r:?}");
    let before = lab.sim.ha_reads();
    d.check(&ctx(), &t).await.unwrap();
    d.check(&ctx(), &t).await.unwrap();
    assert_eq!(
        lab.sim.ha_reads() - before,
        2,
        "one after another, each reads its own"
    );
}

#[tokio::test]
async fn a_deny_policy_is_never_disabled_as_a_fence() {
    let lab = lab(FortiState::example()).await;
    lab.sim.edit(|s| {
        s.vdoms
            .get_mut("root")
            .unwrap()
            .policies
            .get_mut(&2)
            .unwrap()
            .action = "deny".into();
    });
    let d = driver(&lab, "fw-key");
    let t = target("policy.disable", "2", "dc2");
    let p = d.check_binding(&ctx(), &t).await.unwrap();
    assert!(p.iter().any(|p| p.contains("denies traffic")), "{p:?}");
    let e = d.perform(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
    assert!(
        policy_enabled(&lab.sim, 2),
        "the deny policy stays in force"
    );
    assert_eq!(lab.sim.writes(), 0);
    // Even disabled by someone else, it is not a fence.
    lab.sim.edit(|s| {
        s.vdoms
            .get_mut("root")
            .unwrap()
            .policies
            .get_mut(&2)
            .unwrap()
            .enabled = false
    });
    let r = d.check(&ctx(), &t).await.unwrap();
    assert!(!r.holds && r.detail.contains("deny policy"), "{r:?}");
}

#[tokio::test]
async fn fortigate_passes_the_compliance_suite_against_the_fortios_simulator() {
    // The simulator runs on a runtime of its own, so the suite's task count (the test's
    // runtime) sees only what the driver starts, not the simulator's connection tasks.
    let (rt, lab) = std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let lab = rt.block_on(lab(FortiState::example()));
        (rt, lab)
    })
    .join()
    .unwrap();
    let case = crate::compliance::Case {
        driver: driver(&lab, "fw-key"),
        fence: crate::compliance::target("policy.disable", "1"),
        missing: Some(crate::compliance::target("policy.disable", "999")),
        action_timeout: Duration::from_secs(10),
        slow_fence: false,
    };
    crate::compliance::run(case).await;
    assert!(policy_enabled(&lab.sim, 1), "the suite ends unfenced");
    drop(lab);
    rt.shutdown_background();
}

/// `insecure: true` goes through the shared TLS setup: it works, and the probe says it is
/// insecure in the shared wording.
#[tokio::test]
async fn insecure_tls_works_and_is_warned_about() {
    let lab = lab(FortiState::example()).await;
    let p = driver_with(&lab, "admin-key", TlsTrust::Insecure)
        .probe(&ctx())
        .await
        .unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("TLS certificate checking is OFF") && w.contains("insecure: true")),
        "{:?}",
        p.warnings
    );
    assert_eq!(
        p.identity.tls_fingerprint.as_deref(),
        Some(pin(&lab.tls).as_str()),
        "the fingerprint is shown for pinning"
    );
}
