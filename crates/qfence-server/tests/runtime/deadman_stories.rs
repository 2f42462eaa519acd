//! The dead-man switch's stories with the decision core in the loop (issue 12): a lost owner
//! stopped by its watchdog and failed over on that evidence (against `ipmi_sim`, whose
//! watchdog really powers its host off), a watchdog disabled behind qfence's back (no
//! promotion, an alarm), renewals keeping a healthy owner alive for many countdowns, and a
//! rolling restart of the orchestrators that never powers the owner off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use qfence_core::{EvidenceKind, Observed, Phase};
use qfence_runtime::events::EventKind;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::deadman::{config, config_for, dead_man_key};
use crate::emulators::Starter;
use crate::ipmi_bmc::{LabIpmi, UdpRelay};
use crate::lab::{self, Orchestrator, Sims, eventually, phase, plan};

fn dump(o: &Orchestrator) {
    crate::dump(o);
}

/// Waits until dc1's switch reads armed (a verified arm or renewal) and dc2 reads FENCED.
async fn armed_and_steady(o: &Orchestrator) -> Result<()> {
    eventually(
        Duration::from_secs(30),
        "dc1's dead-man switch armed by the core (Action::ArmDeadMan; a core that only renews never arms: issue 12)",
        || async {
            let rt = o.engine.runtime(&plan());
            let armed = rt
                .observations
                .get(&dead_man_key(o))
                .is_some_and(|ob| ob.value == Observed::Holds);
            armed.then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(o))
}

/// Every dc1 controller goes dark; dc1's host runs on.
fn cut_dc1(sims: &Sims) {
    for faults in [sims.pve1.faults(), sims.bmc1.faults()] {
        faults.set_unreachable(Some(qfence_lab::faults::Cut::Blackhole));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_a_lost_owner_nobody_reaches_is_stopped_by_its_ipmi_sim_watchdog_and_fails_over()
-> Result<()> {
    let Some(sim) = Starter::new("start-ipmi-sim.sh")
        .prefix("qdm")
        .arg("61")
        .env("IPMI_START_ON", "1")
        .udp_port("IPMI_PORT")
        .private_tcp_port("IPMI_VM_PORT")
        .start()
    else {
        return Ok(());
    };
    let relay = UdpRelay::start(format!("127.0.0.1:{}", sim.port("IPMI_PORT")).parse()?).await?;
    // ipmi_sim's fake host is dc1's host: when it powers off, dc1's Proxmox node does.
    let (power, line) = watch::channel(true);
    let host_log = std::path::PathBuf::from(sim.var("HOST_EVENTS"));
    let host_off: Arc<Mutex<Option<Instant>>> = Arc::default();
    let follow = {
        let host_off = host_off.clone();
        tokio::spawn(async move {
            loop {
                let log = std::fs::read_to_string(&host_log).unwrap_or_default();
                if log.contains("power-off") {
                    *host_off.lock().unwrap() = Some(Instant::now());
                    power.send_replace(false);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let sims = Sims::start_powered_by(Some(line)).await?;
    let countdown = 5;
    let o = Orchestrator::start(&config(&sims, &relay.endpoint(), countdown, false), true).await?;

    phase("dc1 owns erp-db; qfence arms dc1's watchdog through ipmi_sim");
    armed_and_steady(&o).await?;
    let detail = o.engine.runtime(&plan()).observations[&dead_man_key(&o)]
        .detail
        .clone();
    eprintln!("armed: {detail}");
    assert!(detail.contains("initial countdown 5.0 s"), "{detail}");

    phase("dc1 is lost: its BMC and Proxmox go dark, its host runs on");
    relay.set_cut(true);
    cut_dc1(&sims);
    let lost = Instant::now();
    assert!(
        host_off.lock().unwrap().is_none(),
        "the host went off before the loss"
    );

    phase("ipmi_sim's watchdog powers the host off; qfence fails over on that evidence");
    let after = eventually(
        Duration::from_secs(90),
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
    let vip_at = lost.elapsed();
    let off_at = host_off
        .lock()
        .unwrap()
        .context("the host never powered off")?
        .duration_since(lost);
    eprintln!(
        "figures: loss -> host powered off by ipmi_sim's watchdog {off_at:?}, -> VIP at dc2 {vip_at:?} \
         (countdown {countdown} s, interval 1 s, failover_after 4 s)"
    );
    assert!(off_at < vip_at, "the VIP moved while dc1's host still ran");
    assert!(
        after
            .evidence
            .iter()
            .any(|e| e.site.as_str() == "dc1"
                && matches!(e.kind, EvidenceKind::DeadManExpired { .. })),
        "dc1 counted as fenced by its dead-man switch: {:?}",
        after.evidence
    );
    assert!(
        std::fs::read_to_string(sim.var("HOST_EVENTS"))?.contains("bmc-command POWEROFF"),
        "ipmi_sim itself powered the host off (qfence sent no Chassis Control)"
    );
    follow.abort();
    o.shutdown().await;
    sims.stop().await;
    drop(sim);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_a_watchdog_disabled_behind_qfences_back_proves_nothing_and_raises_an_alarm()
-> Result<()> {
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    let countdown = 3;
    let o = Orchestrator::start(&config(&sims, &bmc.endpoint(), countdown, false), true).await?;
    armed_and_steady(&o).await?;

    phase("a firmware update stops the watchdog and refuses to set it again");
    bmc.firmware_disables_the_watchdog();
    let alarm = eventually(Duration::from_secs(10), "an alarm", || async {
        o.engine
            .events()
            .into_iter()
            .find(|e| e.kind == EventKind::Alarm && e.message.contains("dead-man"))
    })
    .await
    .inspect_err(|_| dump(&o))?;
    eprintln!("alarm: {}", alarm.message);

    phase("dc1 is lost: without a proven switch nothing is promoted");
    bmc.set_dark(true);
    cut_dc1(&sims);
    // failover_after 4 s + the longest the switch could take (stopped + interval + countdown
    // + margin) + retries: well past any proof a working switch would have given.
    tokio::time::sleep(Duration::from_secs(4 + 1 + u64::from(countdown) + 1 + 8)).await;
    let s = o.engine.plan_state(&plan())?.expect("registered");
    assert_eq!(
        s.owner.as_str(),
        "dc1",
        "promoted without proof: {:?}",
        s.phase
    );
    assert!(
        !s.evidence
            .iter()
            .any(|e| matches!(e.kind, EvidenceKind::DeadManExpired { .. })),
        "{:?}",
        s.evidence
    );
    assert!(
        !o.engine
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Command && e.message.starts_with("switchover dc2")),
        "dc2 was promoted"
    );
    assert_eq!(sims.vip(), ["10.1.1.5"]);
    assert!(
        bmc.powered() && bmc.watchdog().fired.is_none(),
        "the world: dc1's host runs"
    );
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_renewals_keep_a_healthy_owner_running_for_many_countdowns() -> Result<()> {
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    let countdown = 3;
    let o = Orchestrator::start(&config(&sims, &bmc.endpoint(), countdown, false), true).await?;
    armed_and_steady(&o).await?;
    let start = bmc.watchdog();

    phase("five countdowns pass; the owner is renewed and stays on");
    let watch_for = Duration::from_secs(5 * u64::from(countdown));
    let from = Instant::now();
    while from.elapsed() < watch_for {
        assert!(
            bmc.powered(),
            "the owner was powered off at {:?}",
            from.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let end = bmc.watchdog();
    eprintln!("renewals in {watch_for:?}: {}", end.resets - start.resets);
    assert!(end.fired.is_none() && end.running, "{end:?}");
    // At least one renewal per countdown (the core renews every interval or two).
    assert!(end.resets - start.resets >= 5, "{end:?}");
    let rt = o.engine.runtime(&plan());
    assert_eq!(rt.observations[&dead_man_key(&o)].value, Observed::Holds);
    assert_eq!(
        o.engine
            .plan_state(&plan())?
            .expect("registered")
            .owner
            .as_str(),
        "dc1"
    );
    assert!(
        !o.engine
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Alarm && e.message.contains("dead-man")),
        "no alarm while every renewal reads back"
    );
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_a_rolling_restart_of_the_orchestrators_never_powers_the_owner_off() -> Result<()> {
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    let countdown = 4;
    // One orchestrator per site and the witness: two voters stay while one restarts. Every
    // controller may be called from both sites, so a leader anywhere reaches everything
    // (the witness's leader forwards every call).
    let text = config_for(sims.config_text_for(true), &bmc.endpoint(), countdown, true).replacen(
        "  pve-dc1:\n    type: proxmox\n",
        "  pve-dc1:\n    type: proxmox\n    reach: [dc2]\n",
        1,
    );
    // Long fence timeouts (as in production, where they are tens of seconds) and a BMC at
    // dc2 that answers in 6 s: each drain waits that long for the check in flight, longer
    // than the owner's countdown.
    let text = text
        .replacen(
            "failover_after_seconds: 4\n    fence_timeout_seconds: 3\n",
            "failover_after_seconds: 12\n    fence_timeout_seconds: 9\n",
            1,
        )
        .replacen(
            "  bmc-dc2:\n    type: redfish\n",
            "  bmc-dc2:\n    type: redfish\n    timeout_seconds: 8\n",
            1,
        );
    let text = {
        // bmc-dc2's own (later) `timeout_seconds: 2` from the lab goes
        let at = text.find("  bmc-dc2:").expect("bmc-dc2");
        let t = at
            + text[at..]
                .find("    timeout_seconds: 2\n")
                .expect("its timeout");
        let mut text = text;
        text.replace_range(t..t + "    timeout_seconds: 2\n".len(), "");
        text
    };
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let mut nodes = vec![Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, true).await?];
    let seed = nodes[0].node.member().address.clone();
    for (name, at) in [("dc2-a", "dc2"), ("witness-a", "witness")] {
        nodes.push(Orchestrator::start_as(&text, name, at, &ca, Some(&seed), true).await?);
    }
    armed_and_steady(&nodes[0]).await?;
    sims.bmc2
        .faults()
        .update(|f| f.latency = Duration::from_secs(6));

    for round in 0..3 {
        let leader = eventually(Duration::from_secs(20), "a leader", || async {
            let name = nodes.iter().find_map(|n| n.node.leader())?;
            nodes.iter().position(|n| n.node.member().name == name)
        })
        .await?;
        let name = nodes[leader].node.member().name.to_string();
        phase(&format!(
            "round {round}: the leader {name} drains, then restarts"
        ));
        // The drain starts while dc2's slow BMC check is in flight.
        eventually(Duration::from_secs(10), "a check in flight", || async {
            (nodes[leader].engine.executor().in_flight_but_renewals() > 0).then_some(())
        })
        .await?;
        let o = nodes.remove(leader);
        let drain_from = Instant::now();
        let left = o.engine.drain(Duration::from_secs(12)).await;
        eprintln!(
            "{name} drained in {:?}, {left} operation(s) left",
            drain_from.elapsed()
        );
        assert!(
            bmc.powered(),
            "round {round}: the owner was powered off during the drain"
        );
        nodes.push(o.restart(&text, &ca).await?);
        let from = Instant::now();
        while from.elapsed() < Duration::from_secs(u64::from(countdown) + 2) {
            if !bmc.powered() {
                for n in &nodes {
                    eprintln!("== {} (leader {:?})", n.node.member().name, n.node.leader());
                    crate::dump(n);
                }
                panic!(
                    "round {round}: the owner was powered off {:?} after the restart: {:?}",
                    from.elapsed(),
                    bmc.watchdog()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "longest time without a renewal so far: {:?} (countdown {countdown} s)",
            bmc.watchdog().longest_gap
        );
    }
    let wd = bmc.watchdog();
    assert!(wd.fired.is_none() && wd.running, "{wd:?}");
    assert!(bmc.powered());
    for o in nodes {
        o.shutdown().await;
    }
    sims.stop().await;
    let _ = lab::site("dc1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_a_planned_switchover_disarms_the_old_owners_watchdog_and_leaves_its_host_on()
-> Result<()> {
    use qfence_runtime::dto::SwitchoverRequest;
    use qfence_runtime::{Backend, RuntimeBackend};
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    // Short enough that a switchover which stopped renewing would see the host powered off.
    let countdown = 3;
    let o = Orchestrator::start(&config(&sims, &bmc.endpoint(), countdown, false), true).await?;
    armed_and_steady(&o).await?;
    let backend = RuntimeBackend::new(&o.engine, lab::secrets());

    phase("a switchover to dc2 stops VM 101, renews dc1's switch meanwhile, then disarms it");
    backend
        .switchover(
            &crate::operator(),
            &plan(),
            &SwitchoverRequest {
                target: "dc2".into(),
                expected_generation: 1,
                reason: Some("patching dc1".into()),
            },
        )
        .await?;
    eventually(
        Duration::from_secs(60),
        "dc2 owning erp-db, steady",
        || async {
            let s = o.engine.plan_state(&plan()).ok()??;
            (s.owner.as_str() == "dc2" && matches!(s.phase, Phase::Steady)).then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    eventually(
        Duration::from_secs(10),
        "dc1's watchdog stopped",
        || async { (!bmc.watchdog().running).then_some(()) },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    assert!(
        o.engine
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Result && e.message.starts_with("disarm-dead-man done")),
        "the disarm is read back and logged"
    );

    phase("three countdowns later dc1's host is still on");
    let from = Instant::now();
    while from.elapsed() < Duration::from_secs(3 * u64::from(countdown)) {
        assert!(
            bmc.powered(),
            "dc1's host was powered off at {:?}",
            from.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(bmc.watchdog().fired.is_none(), "{:?}", bmc.watchdog());
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
