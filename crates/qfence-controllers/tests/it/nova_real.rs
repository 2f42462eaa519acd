//! The Nova driver against a real Nova 34 (Keystone 30, fake compute hosts): the compliance
//! suite, every capability, registration's grades, the bad answers a real Nova gives, and
//! the Instance HA sequence end to end. One cloud serves the whole run (`nova_peer.rs`);
//! these tests run one at a time (nextest test group `nova`) and each starts from a reset.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_controllers::driver::Build as _;
use qfence_controllers::nova::{
    self, EvacuateRequest, EvacuationProgress, MigrationFilter, MigrationType, NovaDriver,
    ServerStatus, ServiceState, ServiceStatus,
};
use qfence_controllers::{Driver, ErrorKind};
use qfence_model::config::{ControllerConfig, ControllerKind, NovaAuth, NovaInterface, TlsTrust};
use qfence_model::{ControllerId, Grade, SiteId};
use secrecy::SecretString;
use serde_json::json;

use crate::compliance::{self, Case, ctx, target};
use crate::nova_peer::{Cloud, cloud};

fn phase(s: &str) {
    eprintln!("--- nova: {s}");
}

fn config(c: &Cloud, auth: NovaAuth, tls: TlsTrust) -> ControllerConfig {
    ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls,
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Nova {
            endpoint: c.var("KEYSTONE_URL").parse().unwrap(),
            auth,
            interface: NovaInterface::Public,
            region: Some(c.var("NOVA_REGION").to_owned()),
        },
    }
}

fn ca(c: &Cloud) -> TlsTrust {
    TlsTrust::CaFile(c.var("NOVA_CACERT").to_owned())
}

/// The orchestrator's driver: the admin's application credential, trusting the peer's CA.
pub fn appcred_driver(c: &Cloud) -> NovaDriver {
    let auth = NovaAuth::ApplicationCredential {
        id: c.var("APPCRED_ID").to_owned(),
    };
    let secret = SecretString::from(c.var("APPCRED_SECRET").to_owned());
    nova::NovaDriver::build(
        ControllerId::new("nova").unwrap(),
        &config(c, auth, ca(c)),
        Some(secret),
    )
    .unwrap()
}

fn password_driver(c: &Cloud, user: &str, project: &str, password: &str) -> NovaDriver {
    let auth = NovaAuth::Password {
        username: user.to_owned(),
        user_domain: "Default".into(),
        project: project.to_owned(),
        project_domain: "Default".into(),
    };
    let secret = SecretString::from(password.to_owned());
    nova::NovaDriver::build(
        ControllerId::new("nova").unwrap(),
        &config(c, auth, ca(c)),
        Some(secret),
    )
    .unwrap()
}

const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn nova_real_passes_the_compliance_suite() {
    let Some(c) = cloud() else { return };
    c.reset().await;
    let hosts = c.hosts();
    compliance::run(Case {
        driver: appcred_driver(c),
        fence: target("host.force_down", &hosts[2]),
        missing: Some(target("host.force_down", "no-such-host")),
        action_timeout: Duration::from_secs(30),
        slow_fence: false,
    })
    .await;
}

#[tokio::test]
async fn nova_real_every_capability_works_and_the_typed_reads_carry_metadata() {
    let Some(c) = cloud() else { return };
    c.reset().await;
    let admin = c.admin().await;
    let hosts = c.hosts();
    let d = appcred_driver(c);
    let ids = admin.boot_on("cap", &hosts[0], 1).await;
    let server = &ids[0];

    phase(
        "host.status holds on a healthy host; host.disable disables with the reason, undo enables",
    );
    let st = d
        .check(&ctx(LONG), &target("host.status", &hosts[1]))
        .await
        .unwrap();
    assert!(st.holds, "{}", st.detail);
    let mut t = target("host.disable", &hosts[1]);
    t.params
        .insert("reason".into(), "qfence: maintenance test".into());
    let r = d.perform(&ctx(LONG), &t).await.unwrap();
    assert!(
        r.holds && r.detail.contains("qfence: maintenance test"),
        "{}",
        r.detail
    );
    let s = d.compute_service(&ctx(LONG), &hosts[1]).await.unwrap();
    assert_eq!(s.status, ServiceStatus::Disabled);
    assert_eq!(
        s.disabled_reason.as_deref(),
        Some("qfence: maintenance test")
    );
    let st = d
        .check(&ctx(LONG), &target("host.status", &hosts[1]))
        .await
        .unwrap();
    assert!(!st.holds, "a disabled host is not healthy: {}", st.detail);
    assert!(
        d.perform(&ctx(LONG), &t).await.unwrap().holds,
        "again: already disabled"
    );
    let r = d.undo(&ctx(LONG), &t).await.unwrap();
    assert!(!r.holds, "{}", r.detail);

    phase("server.lock locks with the reason (2.73), undo unlocks");
    let mut t = target("server.lock", server);
    t.params
        .insert("reason".into(), "qfence: evacuating".into());
    let r = d.perform(&ctx(LONG), &t).await.unwrap();
    assert!(r.holds, "{}", r.detail);
    let s = d.server(&ctx(LONG), server).await.unwrap();
    assert_eq!(s.locked_reason.as_deref(), Some("qfence: evacuating"));
    let r = d.undo(&ctx(LONG), &t).await.unwrap();
    assert!(!r.holds, "{}", r.detail);

    phase("server.evacuate holds for a server ACTIVE on a healthy host, and then does nothing");
    let t = target("server.evacuate", server);
    let r = d.check(&ctx(LONG), &t).await.unwrap();
    assert!(r.holds, "{}", r.detail);
    let r = d.perform(&ctx(LONG), &t).await.unwrap();
    assert!(r.holds && r.detail.contains(&hosts[0]), "{}", r.detail);

    phase("typed reads: the server's flavor with extra specs, its image's properties, aggregates");
    let s = d.server(&ctx(LONG), server).await.unwrap();
    assert_eq!(s.host.as_deref(), Some(hosts[0].as_str()));
    assert_eq!(s.flavor.name, "m1.tiny");
    assert_eq!(
        s.flavor.extra_specs.get("evacuable").map(String::as_str),
        Some("true")
    );
    let image = d
        .image(&ctx(LONG), s.image.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        image.properties.get("evacuable").map(String::as_str),
        Some("true"),
        "{image:?}"
    );
    let flavors = d.flavors(&ctx(LONG)).await.unwrap();
    let tiny = flavors.iter().find(|f| f.name == "m1.tiny").unwrap();
    assert_eq!(
        tiny.extra_specs.get("evacuable").map(String::as_str),
        Some("true")
    );
    assert_eq!(d.flavor(&ctx(LONG), &tiny.id).await.unwrap(), *tiny);
    let aggs = d.aggregates(&ctx(LONG)).await.unwrap();
    let ha = aggs.iter().find(|a| a.name == "ha-hosts").unwrap();
    assert_eq!(
        ha.metadata.get("evacuable").map(String::as_str),
        Some("true")
    );
    assert_eq!(ha.hosts.len(), hosts.len());
    let on = d.servers_on_host(&ctx(LONG), &hosts[0]).await.unwrap();
    assert_eq!(on.iter().map(|s| &s.id).collect::<Vec<_>>(), [server]);
    assert!(
        d.servers_on_host(&ctx(LONG), &hosts[1])
            .await
            .unwrap()
            .is_empty()
    );
    let range = d.version_range(&ctx(LONG)).await.unwrap();
    assert!(range.max >= nova::Microversion::new(2, 95), "{range}");

    phase("discovery lists every host and server for their capabilities");
    let found = d.discover(&ctx(LONG)).await.unwrap();
    for h in &hosts {
        assert!(
            found
                .iter()
                .any(|f| f.capability == "host.force_down" && &f.resource == h)
        );
    }
    assert!(
        found
            .iter()
            .any(|f| f.capability == "server.evacuate" && &f.resource == server)
    );
}

#[tokio::test]
async fn nova_real_registration_grades_by_role_and_names_the_cloud() {
    let Some(c) = cloud() else { return };
    let hosts = c.hosts();

    phase("the admin's application credential: listing proven, changes and evacuate inferred");
    let p = appcred_driver(c).probe(&ctx(LONG)).await.unwrap();
    eprintln!("{p:#?}");
    let grades: BTreeMap<&str, Grade> = p
        .grades
        .iter()
        .map(|g| (g.capability.as_str(), g.grade))
        .collect();
    assert_eq!(grades["host.status"], Grade::Proven);
    assert_eq!(grades["host.force_down"], Grade::Inferred);
    assert_eq!(grades["host.disable"], Grade::Inferred);
    assert_eq!(grades["server.evacuate"], Grade::Inferred);
    assert_eq!(grades["server.lock"], Grade::Inferred);
    assert_eq!(p.identity.facts["region"], c.var("NOVA_REGION"));
    assert_eq!(p.identity.facts["microversions"], "2.1-2.104");
    assert_eq!(p.identity.facts["auth"], "application credential");
    assert!(
        p.identity.id.contains(c.var("NOVA_URL")),
        "{}",
        p.identity.id
    );
    assert!(p.identity.tls_fingerprint.is_some());

    phase("the admin's password: the same cloud and project, so the same identity");
    let pw = password_driver(
        c,
        c.var("ADMIN_USER"),
        c.var("ADMIN_PROJECT"),
        c.var("ADMIN_PASSWORD"),
    );
    let q = pw.probe(&ctx(LONG)).await.unwrap();
    assert_eq!(
        q.identity.id, p.identity.id,
        "a second controller for one cloud is seen as one"
    );
    assert_eq!(q.identity.facts["auth"], "password");

    phase(
        "a project member without the admin role: services failed (403), evacuate failed, lock inferred",
    );
    let member = password_driver(
        c,
        c.var("MEMBER_USER"),
        c.var("MEMBER_PROJECT"),
        c.var("MEMBER_PASSWORD"),
    );
    let m = member.probe(&ctx(LONG)).await.unwrap();
    let grades: BTreeMap<&str, (Grade, &str)> = m
        .grades
        .iter()
        .map(|g| (g.capability.as_str(), (g.grade, g.reason.as_str())))
        .collect();
    for cap in [
        "host.status",
        "host.force_down",
        "host.disable",
        "server.evacuate",
    ] {
        assert_eq!(grades[cap].0, Grade::Failed, "{cap}: {}", grades[cap].1);
    }
    assert!(
        grades["host.status"].1.contains("403"),
        "{}",
        grades["host.status"].1
    );
    assert_eq!(grades["server.lock"].0, Grade::Inferred);
    assert!(
        m.warnings.iter().any(|w| w.contains("no admin role")),
        "{:?}",
        m.warnings
    );
    assert_ne!(m.identity.id, p.identity.id, "another project");
    let e = member
        .check(&ctx(LONG), &target("host.status", &hosts[0]))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Rejected, false),
        "{e}"
    );

    phase("a wrong password is an authentication error, said as such");
    let bad = password_driver(
        c,
        c.var("ADMIN_USER"),
        c.var("ADMIN_PROJECT"),
        "not-the-password",
    );
    let e = bad.probe(&ctx(LONG)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(
        e.message.contains("401") && !e.message.contains("not-the-password"),
        "{e}"
    );
    let e = bad
        .perform(&ctx(LONG), &target("host.force_down", &hosts[0]))
        .await
        .unwrap_err();
    assert_eq!((e.kind, e.state_unknown), (ErrorKind::Auth, false), "{e}");

    phase("a pin of another certificate is refused before any credential is sent");
    let pinned = nova::NovaDriver::build(
        ControllerId::new("nova").unwrap(),
        &config(
            c,
            NovaAuth::ApplicationCredential {
                id: c.var("APPCRED_ID").to_owned(),
            },
            TlsTrust::Pin("00".repeat(32)),
        ),
        Some(SecretString::from(c.var("APPCRED_SECRET").to_owned())),
    )
    .unwrap();
    let e = pinned.probe(&ctx(LONG)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    phase("the pin of the peer's certificate is accepted");
    let fp = p.identity.tls_fingerprint.clone().unwrap();
    let pinned = nova::NovaDriver::build(
        ControllerId::new("nova").unwrap(),
        &config(
            c,
            NovaAuth::ApplicationCredential {
                id: c.var("APPCRED_ID").to_owned(),
            },
            TlsTrust::Pin(fp),
        ),
        Some(SecretString::from(c.var("APPCRED_SECRET").to_owned())),
    )
    .unwrap();
    pinned.probe(&ctx(LONG)).await.unwrap();
}

#[tokio::test]
async fn nova_real_refusals_are_rejected_and_a_failed_evacuation_is_failed_never_done() {
    let Some(c) = cloud() else { return };
    c.reset().await;
    let admin = c.admin().await;
    let hosts = c.hosts();
    let d = appcred_driver(c);
    let (down, others) = (&hosts[1], [&hosts[0], &hosts[2]]);
    let ids = admin.boot_on("refuse", down, 2).await;

    phase("evacuating a server whose host is up: 400, refused, nothing changed");
    let e = d
        .evacuate(&ctx(LONG), &ids[0], &EvacuateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Rejected, false),
        "{e}"
    );
    assert!(e.message.contains("400"), "{e}");

    phase("a paused server on a forced-down host: 409 conflicting state");
    let (code, v) = admin.action(&ids[1], json!({"pause": null})).await;
    assert_eq!(code, 202, "{v}");
    for _ in 0..60 {
        if d.server(&ctx(LONG), &ids[1]).await.unwrap().status == ServerStatus::Paused {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let s = d.force_down(&ctx(LONG), down).await.unwrap();
    assert!(
        s.forced_down && s.state == ServiceState::Down,
        "{}",
        s.describe()
    );
    let e = d
        .evacuate(&ctx(LONG), &ids[1], &EvacuateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Rejected, false),
        "{e}"
    );
    assert!(
        e.message.contains("409") && e.message.contains("paused"),
        "{e}"
    );

    phase("no other host enabled: Nova accepts the evacuation, then it fails (error), never done");
    for h in others {
        d.disable_service(&ctx(LONG), h, "qfence test: no room")
            .await
            .unwrap();
    }
    let evac = d
        .evacuate(&ctx(LONG), &ids[0], &EvacuateRequest::default())
        .await
        .expect("Nova accepts it");
    let end = d.follow_evacuation(&ctx(LONG), &evac).await.unwrap();
    let EvacuationProgress::Failed { migration, server } = end else {
        panic!("an evacuation with nowhere to go ended {end:?}");
    };
    assert!(migration.status.failed(), "{migration:?}");
    assert_eq!(server.status, ServerStatus::Error);
    assert_eq!(
        server.host.as_deref(),
        Some(down.as_str()),
        "it stays on its old host"
    );
    assert!(
        server
            .fault
            .as_deref()
            .unwrap_or("")
            .contains("No valid host"),
        "{server:?}"
    );

    phase("the capability says the same: a refusal with the reading, not a recovery");
    let e = d
        .perform(&ctx(LONG), &target("server.evacuate", &ids[0]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.message.contains("failed"), "{e}");
    let r = d
        .check(&ctx(LONG), &target("server.evacuate", &ids[0]))
        .await
        .unwrap();
    assert!(!r.holds, "{}", r.detail);

    phase("clearing forced-down works: failed evacuations leave no done records");
    let s = d.clear_forced_down(&ctx(LONG), down).await.unwrap();
    assert!(!s.forced_down, "{}", s.describe());
    for h in others {
        d.enable_service(&ctx(LONG), h).await.unwrap();
    }
}

#[tokio::test]
async fn nova_real_end_to_end_a_killed_host_is_fenced_and_its_servers_evacuated() {
    let Some(c) = cloud() else { return };
    c.reset().await;
    let admin = c.admin().await;
    let hosts = c.hosts();
    let d = appcred_driver(c);
    let mut on = BTreeMap::new();
    for (i, h) in hosts.iter().enumerate() {
        on.insert(h.clone(), admin.boot_on(&format!("e2e{i}"), h, 2).await);
    }
    let failed = &hosts[0];
    let victims = &on[failed];

    phase("kill the host's nova-compute; the driver reads its service down");
    let killed = std::time::Instant::now();
    c.kill_compute(failed);
    let down_time: u64 = c.var("NOVA_SERVICE_DOWN_TIME").parse().unwrap();
    let s = loop {
        let s = d.compute_service(&ctx(LONG), failed).await.unwrap();
        if s.state == ServiceState::Down {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(down_time + 40),
            "{}",
            s.describe()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "down after {:.1} s: {}",
        killed.elapsed().as_secs_f64(),
        s.describe()
    );
    assert!(!s.forced_down && s.status == ServiceStatus::Enabled);

    phase("disable it with a reason, force it down (read back each time)");
    let s = d
        .disable_service(&ctx(LONG), failed, "qfence: host failed, evacuating")
        .await
        .unwrap();
    assert_eq!(
        s.disabled_reason.as_deref(),
        Some("qfence: host failed, evacuating")
    );
    let s = d.force_down(&ctx(LONG), failed).await.unwrap();
    assert!(
        s.forced_down && s.state == ServiceState::Down,
        "{}",
        s.describe()
    );

    phase("its servers, each checked by its own host field");
    let mut listed: Vec<String> = d
        .servers_on_host(&ctx(LONG), failed)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    listed.sort();
    let mut want = victims.clone();
    want.sort();
    assert_eq!(listed, want);

    phase("evacuate each, follow its migration record to done");
    let t = std::time::Instant::now();
    let mut evacs = Vec::new();
    for id in victims {
        d.lock(&ctx(LONG), id, "qfence: evacuating").await.unwrap();
        evacs.push(
            d.evacuate(&ctx(LONG), id, &EvacuateRequest::default())
                .await
                .unwrap(),
        );
    }
    for e in &evacs {
        match d.follow_evacuation(&ctx(LONG), e).await.unwrap() {
            EvacuationProgress::Done { migration, server } => {
                assert_eq!(migration.kind, MigrationType::Evacuation);
                assert_eq!(migration.source_compute.as_deref(), Some(failed.as_str()));
                assert!(migration.status.succeeded(), "{migration:?}");
                assert_eq!(server.status, ServerStatus::Active, "{}", server.describe());
                assert_ne!(server.host.as_deref(), Some(failed.as_str()));
                eprintln!("{} -> {}", e.server, server.describe());
            }
            other => panic!("evacuation of {} ended {other:?}", e.server),
        }
        d.unlock(&ctx(LONG), &e.server).await.unwrap();
    }
    eprintln!(
        "{} servers evacuated in {:.1} s ({:.1} s after the kill)",
        evacs.len(),
        t.elapsed().as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );

    phase("read back: every server ACTIVE on another host, none left on the failed one");
    assert!(
        d.servers_on_host(&ctx(LONG), failed)
            .await
            .unwrap()
            .is_empty()
    );
    for id in victims {
        let r = d
            .check(&ctx(LONG), &target("server.evacuate", id))
            .await
            .unwrap();
        assert!(r.holds, "{}", r.detail);
    }
    let records = d
        .migrations(
            &ctx(LONG),
            &MigrationFilter {
                source_compute: Some(failed.clone()),
                kind: Some(MigrationType::Evacuation),
                ..MigrationFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(records.len(), victims.len(), "{records:?}");
    assert!(records.iter().all(|m| m.status.succeeded()));

    phase("clearing forced-down is refused while the done records remain");
    let e = d.clear_forced_down(&ctx(LONG), failed).await.unwrap_err();
    assert_eq!(
        (e.kind, e.state_unknown),
        (ErrorKind::Rejected, false),
        "{e}"
    );
    assert!(e.message.contains("done"), "{e}");
}
