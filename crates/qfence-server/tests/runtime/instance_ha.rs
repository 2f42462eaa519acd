//! Instance HA through the real runtime (ADR 0025): the Nova simulator as the cloud, a Redfish
//! simulator as every compute host's BMC, one orchestrator running the Instance HA loop
//! ([`super::nova_cloud`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use qfence_lab::nova::VmState;
use qfence_lab::redfish::PowerState;
use qfence_runtime::events::EventKind;
use qfence_runtime::{Access, Backend, InstanceHa, Metrics, RuntimeBackend, TokenStore};
use tower::ServiceExt as _;

use super::lab::{Orchestrator, eventually, phase, secrets};
use super::nova_cloud::{
    Cloud, HOSTS, SERVERS_PER_HOST, config, dump, host, iha_events, start, start_cloud,
};

const VIEWER: &str = "viewer-token";

/// `GET path` on the API's router over `backend`, as a viewer: the status and the JSON body.
async fn get(backend: &RuntimeBackend, path: &str) -> (StatusCode, serde_json::Value) {
    let tokens = TokenStore::default().with_token(Access::Viewer, "grafana", VIEWER);
    let app = qfence_server::router(
        Arc::new(backend.clone()),
        tokens,
        Metrics::new(),
        &qfence_server::ApiConfig::default(),
    );
    let req = Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"))
        .body(Body::empty())
        .expect("a request");
    let resp = app.oneshot(req).await.expect("an answer");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

/// Where `needle` first appears in the log, after position `from`.
fn position(events: &[String], from: usize, needle: &str) -> Option<usize> {
    events
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, e)| e.contains(needle))
        .map(|(i, _)| i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_compute_host_is_fenced_evacuated_powered_on_and_re_enabled() -> Result<()> {
    let cloud = start_cloud().await?;
    let (o, backend) = start(&config(&cloud, "", &[])).await?;

    phase("steady: every host up, the loop quiet");
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("compute-2's nova-compute dies; the API shows its incident under way");
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    let busy = eventually(
        Duration::from_secs(30),
        "compute-2 in an incident",
        || async {
            let (status, hosts) = get(&backend, "/api/v1/instance-ha/hosts").await;
            assert_eq!(status, StatusCode::OK, "{hosts}");
            let h = hosts
                .as_array()?
                .iter()
                .find(|h| h["host"] == "compute-2")?
                .clone();
            h["incident"].as_u64().map(|_| h)
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    assert_eq!(busy["cloud"], "overcloud");
    assert!(
        !matches!(busy["state"].as_str(), Some("up" | "failed" | "disabled")),
        "a phase: {busy}"
    );
    eventually(
        Duration::from_secs(60),
        "compute-2 back in service",
        || async {
            let snap = cloud.nova.snapshot();
            let h = snap.host("compute-2")?;
            let power = cloud.bmc.snapshot().system("compute-2")?.power;
            let events = iha_events(&o);
            let recovered = events
                .iter()
                .any(|e| e.contains("compute-2: back in service"));
            (recovered && !h.disabled && !h.forced_down && h.alive && power == PowerState::On)
                .then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;

    phase("its servers run elsewhere, ACTIVE; the log tells each step in order");
    let snap = cloud.nova.snapshot();
    assert_eq!(
        cloud.servers_on("compute-2"),
        0,
        "every server left compute-2"
    );
    assert_eq!(snap.servers.len(), HOSTS * SERVERS_PER_HOST);
    assert!(
        snap.servers.iter().all(|s| s.vm_state == VmState::Active),
        "every server ACTIVE: {:?}",
        snap.servers
    );
    let events = iha_events(&o);
    let mut at = 0;
    for step in [
        "compute-2: host down",
        "command instance-ha overcloud: fence compute-2",
        "compute-2: fenced, read back",
        "command instance-ha overcloud: force-down compute-2",
        "command instance-ha overcloud: disable compute-2: qfence instance-ha: evacuating since",
        "compute-2: evacuating 2 server(s)",
        "command instance-ha overcloud: evacuate",
        "compute-2: evacuated: 2 done, 0 unsuccessful",
        "command instance-ha overcloud: power-on compute-2",
        "command instance-ha overcloud: clear-forced-down compute-2",
        "command instance-ha overcloud: enable compute-2",
        "compute-2: back in service",
    ] {
        at = position(&events, at, step).unwrap_or_else(|| {
            dump(&o);
            panic!("no {step:?} after record {at}")
        });
    }
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("decision fencing decision")),
        "the decisions' sentences are recorded"
    );

    phase("the API shows the cloud: compute-2 up again, its incident over");
    let (status, s) = get(&backend, "/api/v1/instance-ha").await;
    assert_eq!(status, StatusCode::OK);
    let c = &s["clouds"][0];
    assert_eq!(c["cloud"], "overcloud");
    assert!(c["leading"] == true && c["nova_reachable"] == true, "{c}");
    assert!(
        c["last_decision"]
            .as_str()
            .is_some_and(|d| d.starts_with("fencing decision")),
        "{c}"
    );
    let hosts = c["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), HOSTS);
    assert!(hosts.iter().all(|h| h["state"] == "up"), "{hosts:?}");
    let (_, evacuations) = get(&backend, "/api/v1/instance-ha/evacuations").await;
    assert_eq!(
        evacuations,
        serde_json::json!([]),
        "a finished incident leaves no evacuation"
    );
    let metrics = o.metrics.render();
    assert!(
        metrics.contains("qfence_instance_ha_hosts{cloud=\"overcloud\",state=\"evacuating\"} 0"),
        "no host is being processed any more: {metrics}"
    );
    assert!(
        metrics.contains(
            "qfence_instance_ha_evacuations_total{cloud=\"overcloud\",outcome=\"done\"} 2"
        ),
        "{metrics}"
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_threshold_nothing_is_fenced_or_evacuated_and_an_event_has_the_figures()
-> Result<()> {
    let cloud = start_cloud().await?;
    // The heartbeat cliff would close too; this test is about the threshold alone.
    let (o, backend) = start(&config(&cloud, "    heartbeat_cliff_percent: 100\n", &[])).await?;
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("three of four hosts die at once: 75 % is over the threshold of 50 %");
    for n in 1..=3 {
        cloud.nova.update(|s| s.stop_heartbeat(&host(n)));
    }
    let alarm = eventually(Duration::from_secs(30), "the threshold's alarm", || async {
        o.engine
            .events()
            .into_iter()
            .find(|e| e.kind == EventKind::Alarm && e.message.contains("gate threshold closed"))
    })
    .await
    .inspect_err(|_| dump(&o))?;
    assert!(
        alarm
            .message
            .contains("3 of 4 hosts failed (75 %), over the threshold of 50 %"),
        "{}",
        alarm.message
    );

    phase("polls later, nothing was fenced, forced down or evacuated");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let bmc = cloud.bmc.snapshot();
    assert!(
        bmc.systems.iter().all(|s| s.power == PowerState::On),
        "no host was powered off"
    );
    let snap = cloud.nova.snapshot();
    assert!(snap.hosts.iter().all(|h| !h.forced_down && !h.disabled));
    for n in 1..=HOSTS {
        assert_eq!(cloud.servers_on(&host(n)), SERVERS_PER_HOST);
    }
    assert!(snap.migrations.is_empty(), "no evacuation was asked for");
    let events = iha_events(&o);
    assert!(
        !events.iter().any(|e| e.contains(": fence ")),
        "no fence command: {events:#?}"
    );
    let s = backend.instance_ha().await?;
    assert!(s.clouds[0].gates_closed.contains(&"threshold".to_owned()));
    assert!(
        o.metrics.render().contains(
            "qfence_instance_ha_gate_trips_total{cloud=\"overcloud\",gate=\"threshold\"} 1"
        )
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_fence_is_never_evacuated_and_the_event_says_so() -> Result<()> {
    let cloud = start_cloud().await?;
    let (o, backend) = start(&config(&cloud, "", &["compute-4"])).await?;
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("compute-4, which has no fence binding, dies");
    cloud.nova.update(|s| s.stop_heartbeat("compute-4"));
    let alarm = eventually(Duration::from_secs(30), "the no-fence alarm", || async {
        o.engine.events().into_iter().find(|e| {
            e.kind == EventKind::Alarm && e.message.contains("compute-4: no fence, never evacuated")
        })
    })
    .await
    .inspect_err(|_| dump(&o))?;
    assert!(
        alarm.message.contains("no fence is configured for it"),
        "{}",
        alarm.message
    );

    phase("polls later, its servers are where they were and it is not forced down");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(cloud.servers_on("compute-4"), SERVERS_PER_HOST);
    let snap = cloud.nova.snapshot();
    let h = snap.host("compute-4").expect("a host");
    assert!(!h.forced_down && !h.disabled);
    assert!(snap.migrations.is_empty());
    let events = iha_events(&o);
    assert!(
        !events
            .iter()
            .any(|e| e.contains("compute-4") && e.starts_with("command")),
        "no command on compute-4: {events:#?}"
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_loop_resumes_the_host_from_the_replicated_state_and_never_fences_twice()
-> Result<()> {
    let cloud = start_cloud().await?;
    let o = Orchestrator::start(&config(&cloud, "", &[]), true).await?;
    let backend = RuntimeBackend::new(&o.engine, secrets());
    let first = o.stop.child_token();
    tokio::spawn(InstanceHa::new(&o.engine, o.drivers.clone()).run(first.clone()));

    phase("compute-2 dies; the first loop proves its fence and stops there");
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    eventually(
        Duration::from_secs(30),
        "compute-2's fence proven",
        || async {
            let s = backend.instance_ha().await.ok()?;
            let h = s
                .clouds
                .first()?
                .hosts
                .iter()
                .find(|h| h.host == "compute-2")?
                .clone();
            h.fenced_at_ms.map(|_| ())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    first.cancel();
    let record = InstanceHa::new(&o.engine, o.drivers.clone())
        .cloud_state(&qfence_model::CloudId::new("overcloud")?)?
        .expect("a replicated state");
    let host = qfence_model::config::HostName::new("compute-2").map_err(anyhow::Error::msg)?;
    assert!(
        record.hosts[&host].fenced(),
        "the proof is in the replicated record"
    );

    phase("a new loop, with nothing of the first in memory, finishes the incident");
    tokio::spawn(InstanceHa::new(&o.engine, o.drivers.clone()).run(o.stop.clone()));
    eventually(
        Duration::from_secs(60),
        "compute-2 back in service",
        || async {
            iha_events(&o)
                .iter()
                .any(|e| e.contains("compute-2: back in service"))
                .then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    let fences = iha_events(&o)
        .iter()
        .filter(|e| e.starts_with("command instance-ha overcloud: fence compute-2"))
        .count();
    assert_eq!(fences, 1, "compute-2 was fenced once");
    assert_eq!(cloud.servers_on("compute-2"), 0);

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

/// Where Debian's fence-agents installs `fence_kdump_send`, if it is installed.
fn fence_kdump_send() -> Option<std::path::PathBuf> {
    [
        "/usr/libexec/fence-agents/fence_kdump_send",
        "/usr/sbin/fence_kdump_send",
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.is_file())
}

/// `check_kdump` on a free UDP port, a dump ending 4 s after its last message, and
/// `host`'s fence_kdump messages coming from 127.0.0.1.
fn kdump_config(cloud: &Cloud, port: u16, host: &str) -> String {
    let extra = format!(
        "    check_kdump: true\n    kdump_port: {port}\n    kdump_timeout_seconds: 4\n    \
         kdump_max_wait_seconds: 120\n"
    );
    config(cloud, &extra, &[]).replace(
        &format!("      {host}: {{controller: bmc,"),
        &format!("      {host}: {{address: 127.0.0.1, controller: bmc,"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_sending_fence_kdump_messages_is_fenced_only_after_its_dump_ends() -> Result<()> {
    let Some(sender) = fence_kdump_send() else {
        super::emulators::missing("fence_kdump_send (fence-agents)");
        return Ok(());
    };
    let cloud = start_cloud().await?;
    let port = super::emulators::free_udp_port();
    let config = kdump_config(&cloud, port, "compute-2");
    assert!(config.contains("address: 127.0.0.1"), "{config}");
    let (o, backend) = start(&config).await?;
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("compute-2 panics into its kdump kernel: its heartbeats stop, fence_kdump_send runs");
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    let mut kdump = tokio::process::Command::new(&sender)
        .args(["-p", &port.to_string(), "-i", "1", "-c", "0", "127.0.0.1"])
        .kill_on_drop(true)
        .spawn()?;
    eventually(Duration::from_secs(30), "the kdump event", || async {
        iha_events(&o)
            .iter()
            .any(|e| e.contains("compute-2: fence_kdump messages: the fence waits for the dump"))
            .then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("while the messages come, longer than kdump_timeout_seconds, it is not fenced");
    tokio::time::sleep(Duration::from_secs(7)).await;
    let s = backend.instance_ha().await?;
    let sentence = s.clouds[0].last_decision.clone().unwrap_or_default();
    assert!(
        sentence.contains("compute-2 is dumping its kernel (fence_kdump)"),
        "{sentence}"
    );
    assert!(
        !iha_events(&o)
            .iter()
            .any(|e| e.starts_with("command instance-ha overcloud: fence compute-2")),
        "no fence during the dump"
    );
    assert_eq!(
        cloud.bmc.snapshot().system("compute-2").map(|s| s.power),
        Some(PowerState::On)
    );

    phase("the dump ends (no more messages): the host is fenced, its record says kdump");
    kdump.kill().await?;
    eventually(Duration::from_secs(30), "compute-2 fenced", || async {
        iha_events(&o)
            .iter()
            .any(|e| e.contains("compute-2: fenced, read back"))
            .then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;
    eventually(
        Duration::from_secs(20),
        "the disable with its reason",
        || async {
            iha_events(&o)
                .iter()
                .find(|e| e.starts_with("command instance-ha overcloud: disable compute-2"))
                .cloned()
        },
    )
    .await
    .map(|e| assert!(e.contains(", kdump)"), "{e}"))
    .inspect_err(|_| dump(&o))?;

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_that_are_not_fence_kdump_messages_never_hold_a_fence_back() -> Result<()> {
    let cloud = start_cloud().await?;
    let port = super::emulators::free_udp_port();
    let (o, backend) = start(&kdump_config(&cloud, port, "compute-3")).await?;
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("compute-3 dies; from its address come datagrams with a wrong magic, version or size");
    cloud.nova.update(|s| s.stop_heartbeat("compute-3"));
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let noise = tokio::spawn(async move {
        let bad: [&[u8]; 3] = [
            &[0xef, 0xbe, 0xad, 0xde, 1, 0, 0, 0],
            &[0x40, 0x2a, 0x30, 0x1b, 2, 0, 0, 0],
            &[0x40, 0x2a, 0x30],
        ];
        for d in bad.iter().cycle() {
            let _ = socket.send_to(d, ("127.0.0.1", port)).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });

    phase("they are refused: compute-3 is fenced after kdump_timeout_seconds, not as dumping");
    eventually(Duration::from_secs(40), "compute-3 fenced", || async {
        iha_events(&o)
            .iter()
            .any(|e| e.contains("compute-3: fenced, read back"))
            .then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;
    noise.abort();
    let events = iha_events(&o);
    assert!(
        !events
            .iter()
            .any(|e| e.contains("compute-3: fence_kdump messages")),
        "no kdump seen: {events:#?}"
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_a_site_the_cluster_lost_is_left_to_the_site_failover() -> Result<()> {
    let cloud = start_cloud().await?;
    // dc1 and dc2 with an orchestrator each, and a witness: dc1-a keeps the quorum alone with
    // the witness. compute-3 and compute-4 are dc2's.
    let text = config(&cloud, "", &[])
        .replacen(
            "sites:\n  dc1: {}\n",
            "sites:\n  dc1: {}\n  dc2: {}\n  witness: {witness: true}\n",
            1,
        )
        .replacen(
            "orchestrators:\n",
            "orchestrators:\n  dc2-a: {site: dc2, address: \"127.0.0.1:7402\"}\n  witness-a: \
             {site: witness, address: \"127.0.0.1:7403\"}\n",
            1,
        )
        .replace("resource: compute-3}", "resource: compute-3, site: dc2}")
        .replace("resource: compute-4}", "resource: compute-4, site: dc2}");
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let dc1 = Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, true).await?;
    let seed = dc1.node.member().address.clone();
    let dc2 = Orchestrator::start_as(&text, "dc2-a", "dc2", &ca, Some(&seed), true).await?;
    let witness =
        Orchestrator::start_as(&text, "witness-a", "witness", &ca, Some(&seed), true).await?;
    tokio::spawn(InstanceHa::new(&dc1.engine, dc1.drivers.clone()).run(dc1.stop.clone()));
    let backend = RuntimeBackend::new(&dc1.engine, secrets());
    eventually(Duration::from_secs(30), "dc1-a deciding", || async {
        let s = backend.instance_ha().await.ok()?;
        let c = s.clouds.first()?;
        (c.leading && c.last_decision.is_some()).then_some(())
    })
    .await
    .inspect_err(|_| dump(&dc1))?;

    phase("dc2 is cut off: its orchestrator stops answering, and compute-3 stops reporting");
    dc2.shutdown().await;
    cloud.nova.update(|s| s.stop_heartbeat("compute-3"));
    let alarm = eventually(Duration::from_secs(30), "the site-lost gate", || async {
        dc1.engine
            .events()
            .into_iter()
            .find(|e| e.kind == EventKind::Alarm && e.message.contains("gate site lost closed"))
    })
    .await
    .inspect_err(|_| dump(&dc1))?;
    assert!(
        alarm
            .message
            .contains("site dc2 is lost to the orchestrator cluster"),
        "{}",
        alarm.message
    );

    phase("polls later, compute-3 was not fenced: a lost site is the site failover's");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        cloud.bmc.snapshot().system("compute-3").map(|s| s.power),
        Some(PowerState::On)
    );
    let events = iha_events(&dc1);
    assert!(
        !events.iter().any(|e| e.contains(": fence compute-3")),
        "no fence command: {events:#?}"
    );
    assert_eq!(cloud.servers_on("compute-3"), SERVERS_PER_HOST);

    witness.shutdown().await;
    dc1.shutdown().await;
    cloud.stop().await;
    Ok(())
}
