//! Instance HA's settings through the real runtime against the Nova simulator (issue 15's
//! scenario list): smart evacuation giving up after five failures, `leave_disabled`,
//! `force_enable` and reserved hosts. The cloud and its wiring are `instance_ha.rs`'s; the
//! core's own scenario tests (`qfence-core/tests/instance_ha`) cover the same rules on a
//! model cloud, these show the runtime carries them out against Nova's API.

use std::time::Duration;

use anyhow::Result;
use qfence_lab::redfish::PowerState;
use qfence_runtime::Backend;
use qfence_runtime::events::EventKind;

use super::lab::{Orchestrator, eventually, phase};
use super::nova_cloud::{Cloud, config, dump, iha_events, start, start_cloud};

/// Waits for the loop's first decision: the cloud was read once, nothing is failed.
async fn first_decision(o: &Orchestrator, backend: &qfence_runtime::RuntimeBackend) -> Result<()> {
    eventually(Duration::from_secs(20), "a first decision", || async {
        let s = backend.instance_ha().await.ok()?;
        s.clouds.first()?.last_decision.clone()
    })
    .await
    .inspect_err(|_| dump(o))?;
    Ok(())
}

/// Waits up to a minute for an Instance HA record containing `needle`; dumps the log if none.
async fn record_with(o: &Orchestrator, needle: &str) -> Result<String> {
    let found = eventually(Duration::from_secs(60), needle, || async {
        iha_events(o).into_iter().find(|e| e.contains(needle))
    })
    .await
    .inspect_err(|_| dump(o))?;
    Ok(found)
}

/// The ids of the servers on `host` now.
fn servers_of(cloud: &Cloud, host: &str) -> Vec<String> {
    cloud
        .nova
        .snapshot()
        .servers
        .iter()
        .filter(|s| s.host == host)
        .map(|s| s.id.clone())
        .collect()
}

/// How many evacuations of `server` the loop started.
fn evacuations_of(o: &Orchestrator, server: &str) -> usize {
    let needle = format!("overcloud: evacuate {server} from");
    iha_events(o).iter().filter(|e| e.contains(&needle)).count()
}

/// Asserts `host` is disabled, forced down and powered off, `why` in its disabled reason.
fn left_out(cloud: &Cloud, host: &str) {
    let snap = cloud.nova.snapshot();
    let h = snap.host(host).expect("a host");
    assert!(h.disabled && h.forced_down, "{h:?}");
    let power = cloud.bmc.snapshot().system(host).expect("a system").power;
    assert_eq!(power, PowerState::Off, "{host} stays off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smart_evacuation_gives_a_host_up_after_five_failures_and_lists_the_operators_steps()
-> Result<()> {
    let cloud = start_cloud().await?;
    let servers = servers_of(&cloud, "compute-2");
    let stuck = servers[0].clone();
    cloud
        .nova
        .update(|s| s.evacuation.always_fail.insert(stuck.clone()));
    let (o, backend) = start(&config(&cloud, "    smart_evacuation: true\n", &[])).await?;
    first_decision(&o, &backend).await?;

    phase("compute-2 dies; one of its servers fails every evacuation");
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    let gave_up = eventually(Duration::from_secs(60), "smart evacuation gives up", || {
        let events = o.engine.events();
        async move {
            events.into_iter().find(|e| {
                e.kind == EventKind::Alarm && e.message.contains("smart evacuation gave up")
            })
        }
    })
    .await
    .inspect_err(|_| dump(&o))?;
    assert!(gave_up.message.contains(&stuck), "{}", gave_up.message);
    assert!(
        gave_up.message.contains("the operator must: "),
        "the seed's steps: {}",
        gave_up.message
    );

    phase("five tries of the stuck server, the other evacuated; the host left out");
    assert_eq!(evacuations_of(&o, &stuck), 5, "{:#?}", iha_events(&o));
    let snap = cloud.nova.snapshot();
    let other = snap.server(&servers[1]).expect("a server");
    assert_ne!(other.host, "compute-2", "the other server moved");
    // A few polls later nothing brought the host back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    left_out(&cloud, "compute-2");
    let events = iha_events(&o);
    assert!(
        !events
            .iter()
            .any(|e| e.contains("overcloud: power-on compute-2")
                || e.contains("overcloud: enable compute-2")),
        "never powered on or enabled: {events:#?}"
    );
    assert_eq!(evacuations_of(&o, &stuck), 5, "no sixth try");

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_disabled_keeps_an_evacuated_host_off_disabled_and_forced_down() -> Result<()> {
    let cloud = start_cloud().await?;
    let (o, backend) = start(&config(&cloud, "    leave_disabled: true\n", &[])).await?;
    first_decision(&o, &backend).await?;

    phase("compute-3 dies: fenced and evacuated, then left as it is");
    cloud.nova.update(|s| s.stop_heartbeat("compute-3"));
    record_with(
        &o,
        "compute-3: left disabled and forced down: leave_disabled",
    )
    .await?;
    // Without smart evacuation an accepted evacuation counts as done; Nova finishes it after.
    eventually(
        Duration::from_secs(10),
        "every server off compute-3",
        || async { (cloud.servers_on("compute-3") == 0).then_some(()) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    left_out(&cloud, "compute-3");
    let events = iha_events(&o);
    assert!(
        !events
            .iter()
            .any(|e| e.contains("overcloud: power-on compute-3")),
        "{events:#?}"
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

/// A server of `host` busy with another operation: Nova refuses its evacuation (409), so the
/// host's evacuation ends with one unsuccessful.
fn busy_server_on(cloud: &Cloud, host: &str) -> String {
    let id = servers_of(cloud, host)[0].clone();
    cloud.nova.update(|s| {
        s.server_mut(&id).expect("a server").task_state = Some("rebooting".into());
    });
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsuccessful_evacuation_leaves_the_host_out_unless_force_enable() -> Result<()> {
    phase("without force_enable: compute-2 is left disabled, forced down and off");
    let cloud = start_cloud().await?;
    busy_server_on(&cloud, "compute-2");
    let (o, backend) = start(&config(&cloud, "", &[])).await?;
    first_decision(&o, &backend).await?;
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    record_with(
        &o,
        "compute-2: left disabled and forced down: some evacuations were unsuccessful",
    )
    .await?;
    assert!(
        iha_events(&o)
            .iter()
            .any(|e| e.contains("compute-2: evacuated: 1 done, 1 unsuccessful")),
        "{:#?}",
        iha_events(&o)
    );
    left_out(&cloud, "compute-2");
    o.shutdown().await;
    cloud.stop().await;

    phase("with force_enable: the same host is powered on and back in service");
    let cloud = start_cloud().await?;
    busy_server_on(&cloud, "compute-2");
    let (o, backend) = start(&config(&cloud, "    force_enable: true\n", &[])).await?;
    first_decision(&o, &backend).await?;
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    record_with(&o, "compute-2: back in service").await?;
    let events = iha_events(&o);
    assert!(
        events
            .iter()
            .any(|e| e.contains("compute-2: evacuated: 1 done, 1 unsuccessful")),
        "{events:#?}"
    );
    let snap = cloud.nova.snapshot();
    let h = snap.host("compute-2").expect("a host");
    assert!(!h.disabled && !h.forced_down, "{h:?}");
    let power = cloud
        .bmc
        .snapshot()
        .system("compute-2")
        .expect("a system")
        .power;
    assert_eq!(power, PowerState::On);
    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_host_is_enabled_for_a_failed_one_and_takes_its_servers() -> Result<()> {
    let cloud = start_cloud().await?;
    // compute-4 is the spare: disabled by an operator with a reason that says reserved, and
    // in the same aggregate as every host.
    cloud.nova.update(|s| {
        let h = s.host_mut("compute-4").expect("a host");
        h.disabled = true;
        h.disabled_reason = Some("reserved for instance HA".into());
    });
    let extra = "    reserved_hosts: true\n    evacuate_to_reserved: true\n";
    let (o, backend) = start(&config(&cloud, extra, &[])).await?;
    first_decision(&o, &backend).await?;

    phase("compute-1 dies: compute-4 is enabled first, then takes compute-1's servers");
    let servers = servers_of(&cloud, "compute-1");
    cloud.nova.update(|s| s.stop_heartbeat("compute-1"));
    record_with(&o, "compute-1: back in service").await?;
    let events = iha_events(&o);
    let enabled = events
        .iter()
        .position(|e| e.contains("overcloud: enable-reserved compute-4 for compute-1"))
        .unwrap_or_else(|| panic!("the spare is enabled: {events:#?}"));
    let evacuated = events
        .iter()
        .position(|e| e.contains("overcloud: evacuate") && e.contains("to compute-4"))
        .unwrap_or_else(|| panic!("evacuated to the spare: {events:#?}"));
    assert!(enabled < evacuated, "{events:#?}");
    let snap = cloud.nova.snapshot();
    for id in &servers {
        assert_eq!(snap.server(id).expect("a server").host, "compute-4");
    }
    let spare = snap.host("compute-4").expect("a host");
    assert!(!spare.disabled, "the spare serves now: {spare:?}");

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}
