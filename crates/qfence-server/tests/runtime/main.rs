//! The daemon runtime against the lab simulators, in process: steady state, a lost site failed
//! over step by step, a planned switchover, leadership loss cancelling an operation, and a
//! graceful drain.

mod lab;

use std::time::Duration;

use anyhow::Result;
use qfence_core::{BindingKey, Observed, Phase};
use qfence_lab::proxmox::VmStatus;
use qfence_lab::redfish::PowerState;
use qfence_server::Backend;
use qfence_server::dto::VerdictDto;
use qfence_server::events::{EventKind, VerifyOptions, read_jsonl, verify};
use qfence_server::runtime::RuntimeBackend;
use qfence_server::runtime::engine::without_times;

use lab::{Orchestrator, Sims, eventually, phase, plan};

/// Prints the event log, so a failed story shows where it stopped.
fn dump(o: &Orchestrator) {
    for e in o.engine.events() {
        eprintln!("{:>4} {:<9} {}", e.seq, e.kind.as_str(), e.message);
    }
}

fn verdict(status: &qfence_server::dto::StatusResponse, site: &str) -> Option<VerdictDto> {
    status
        .plans
        .first()?
        .sites
        .iter()
        .find(|s| s.site == site)
        .map(|s| s.verdict)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_site_fails_over_step_by_step_and_the_vip_follows() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), None).await?;
    let backend = RuntimeBackend::new(&o.engine, sims.config_text(), lab::secrets());

    phase("steady state: dc1 owns erp-db and is healthy, dc2 reads FENCED");
    eventually(
        Duration::from_secs(20),
        "dc2 FENCED and dc1 healthy",
        || async {
            let status = backend.status().await.ok()?;
            let health = o
                .engine
                .runtime(&plan())
                .observations
                .get(&BindingKey::site(&lab::site("dc1"), 3))
                .map(|o| o.value);
            (verdict(&status, "dc2") == Some(VerdictDto::Fenced) && health == Some(Observed::Holds))
                .then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    let before = o.engine.plan_state(&plan())?.expect("registered");
    assert_eq!(before.owner.as_str(), "dc1");
    assert_eq!(before.generation.0, 1);
    assert_eq!(sims.vip(), ["10.1.1.5"]);

    phase("cut dc1: its host loses power, so its Proxmox API goes dark");
    assert!(sims.bmc1.set_power("pve-dc1-01", PowerState::Off));

    phase("the engine fails over to dc2 and the VIP follows");
    let after = eventually(
        Duration::from_secs(60),
        "dc2 owning erp-db with the VIP",
        || async {
            let s = o.engine.plan_state(&plan()).ok()??;
            (s.owner.as_str() == "dc2"
                && matches!(s.phase, Phase::Steady)
                && sims.vip() == ["10.2.1.5"])
            .then_some(s)
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    assert_eq!(after.generation.0, before.generation.0 + 1);
    assert_eq!(
        sims.bmc1.snapshot().systems[0].power,
        PowerState::Off,
        "dc1 stays fenced"
    );
    assert_eq!(
        sims.bmc2.snapshot().systems[0].power,
        PowerState::On,
        "dc2 was unfenced"
    );
    assert_eq!(
        sims.pve2.snapshot().vm(101).map(|v| v.status),
        Some(VmStatus::Running)
    );

    phase("the event log tells the story and verifies");
    let events = o.engine.events();
    let pos = |pred: &dyn Fn(&qfence_server::events::Event) -> bool| events.iter().position(pred);
    let fence_dc1 = pos(&|e| e.kind == EventKind::Command && e.message.starts_with("fence dc1[0]"))
        .expect("dc1's BMC fence was commanded");
    let verified = pos(&|e| {
        e.kind == EventKind::Result
            && e.data["binding"] == "dc1[0]"
            && e.message.starts_with("check holds: PowerState=Off")
    })
    .expect("dc1's fence read back");
    let promoted =
        pos(&|e| e.kind == EventKind::Command && e.message.starts_with("switchover dc2"))
            .expect("dc2 promoted");
    let committed = pos(&|e| e.message.contains("committed: owner dc2 at generation 2"))
        .expect("the new owner committed");
    let vip = pos(&|e| {
        e.kind == EventKind::Command && e.message.starts_with("service service[0] -> dc2")
    })
    .expect("the VIP moved");
    assert!(
        fence_dc1 < verified && verified < promoted && promoted < committed && committed < vip,
        "fence {fence_dc1} < read-back {verified} < promote {promoted} < commit {committed} < VIP {vip}"
    );
    for e in &events {
        assert!(!e.message.contains(lab::PVE_TOKEN) && !e.message.contains(lab::BMC_PASSWORD));
    }
    let decisions: Vec<&qfence_server::events::Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::Decision)
        .collect();
    for pair in decisions.windows(2) {
        let acted = pair[1].data["state_change"] == true
            || pair[1].data["commands"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| !c.as_str().unwrap_or("").starts_with("check "))
            });
        assert!(
            acted || without_times(&pair[0].message) != without_times(&pair[1].message),
            "an unchanged sentence is not written twice in a row: {:?}",
            pair[1].message
        );
    }
    let records = read_jsonl(&o.events_path)?;
    let v = verify(&records, &VerifyOptions::default()).map_err(|b| anyhow::anyhow!("{b:?}"))?;
    assert_eq!(v.count as usize, events.len());

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
