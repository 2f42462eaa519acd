//! The Instance HA page in the browser, over the real runtime with the Nova simulator (the
//! runtime tests' `nova_cloud.rs`): an operator watching the page sees a dead compute host
//! fenced and its servers evacuated, without reloading.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use qfence_runtime::Metrics;
use qfence_server::ApiConfig;
use serde::Deserialize;

use crate::harness::{self, Browser, VIEWER, phase, tokens};
use crate::nova_cloud::{config, dump, start, start_cloud};
use crate::{mark_page, same_page};

/// What the page shows of compute-2 and the evacuations.
#[derive(Debug, Deserialize, PartialEq)]
struct Shown {
    /// compute-2's state, once its row is there.
    state: Option<String>,
    /// Each evacuation: (server, state, to host).
    evacuations: Vec<(String, String, String)>,
}

const READ: &str = "var r = document.querySelector(\"tr[data-host='compute-2']\");
    var ev = Array.from(document.querySelectorAll('table.iha-evacuations tr[data-server]'))
      .map(function (t) {
        return [t.getAttribute('data-server'), t.getAttribute('data-state'),
                t.cells[2].textContent];
      });
    return { state: r ? r.getAttribute('data-state') : null, evacuations: ev };";

async fn shown(b: &Browser) -> Result<Shown> {
    let v = b.driver.execute(READ, vec![]).await?;
    Ok(serde_json::from_value(v.json().clone())?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_ha_page_follows_a_dead_host_until_its_servers_are_evacuated() -> Result<()> {
    let cloud = start_cloud().await?;
    // Left disabled after its evacuation, so the incident stays on the page at its end.
    let (o, backend) = start(&config(&cloud, "    leave_disabled: true\n", &[])).await?;
    let app = qfence_server::router(
        Arc::new(backend),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let served = harness::serve(app).await?;
    let b = Browser::start(&served.base, "instance-ha").await?;
    b.sign_in(VIEWER).await?;

    phase("a viewer opens Instance HA from the menu: every host up, nothing evacuated");
    b.click("header.top a[href='/instance-ha']").await?;
    b.wait_for("tr[data-host='compute-2'][data-state='up']")
        .await?;
    b.wait_for_text("#cloud-overcloud", "enabled").await?;
    b.wait_for_text("#live-state", "live").await?;
    mark_page(&b).await?;
    b.screenshot("1-steady").await?;
    let doomed: Vec<String> = cloud
        .nova
        .snapshot()
        .servers
        .iter()
        .filter(|s| s.host == "compute-2")
        .map(|s| s.id.clone())
        .collect();

    phase("compute-2's nova-compute dies: the page follows it to the end of its evacuation");
    // A slow BMC keeps the fence under way for seconds: longer than the page's live updates
    // take (1 s), so the page must show it between `up` and the end.
    cloud.bmc.faults().set_latency(Duration::from_millis(600));
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    let mut states: Vec<String> = Vec::new();
    let started = Instant::now();
    let end = loop {
        let now = shown(&b).await?;
        if let Some(s) = &now.state
            && states.last() != Some(s)
        {
            eprintln!("{:>6} ms: compute-2 {s}", started.elapsed().as_millis());
            states.push(s.clone());
            if states.len() == 2 {
                b.screenshot("2-incident").await?;
            }
        }
        let evacuated = now.evacuations.len() == doomed.len()
            && now
                .evacuations
                .iter()
                .all(|(_, state, to)| state == "done" && !to.is_empty());
        if now.state.as_deref() == Some("left disabled") && evacuated {
            break now;
        }
        if started.elapsed() > Duration::from_secs(60) {
            dump(&o);
            bail!("compute-2 not shown evacuated within 60 s: {now:?}, states {states:?}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    };
    b.screenshot("3-evacuated").await?;
    eprintln!("compute-2 as the page showed it: {states:?}");
    ensure!(same_page(&b).await?, "the page was updated in place");
    ensure!(
        states.first().map(String::as_str) == Some("up") && states.len() >= 3,
        "the page showed the incident on its way, not only its end: {states:?}"
    );

    phase("each server is listed going where Nova placed it");
    let snap = cloud.nova.snapshot();
    for (server, _, to) in &end.evacuations {
        ensure!(doomed.contains(server), "{server} was on compute-2");
        let now_on = &snap
            .servers
            .iter()
            .find(|s| &s.id == server)
            .expect("the server")
            .host;
        ensure!(to == now_on, "{server}: the page says {to}, Nova {now_on}");
    }
    b.screenshot_of("#cloud-overcloud", "4-cloud").await?;

    b.quit().await?;
    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}
