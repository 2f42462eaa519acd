//! The daemon runtime against the lab simulators, in process: steady state, a lost site failed
//! over step by step, a planned switchover, leadership loss cancelling an operation, and a
//! graceful drain.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod api_plans;
mod daemon;
mod deadman;
mod deadman_stories;
// The controller tests' emulator starter (ipmi_sim), shared rather than copied.
#[path = "../../../qfence-controllers/tests/it/emulators.rs"]
mod emulators;
mod instance_ha;
mod instance_ha_cases;
mod instance_ha_console;
mod instance_ha_real_nova;
mod ipmi_bmc;
mod lab;
mod metrics;
mod nova_cloud;
// The real Nova test peer (tools/emulators/nova), one per test run, shared with the
// controller tests' real-Nova module.
#[path = "../../../qfence-controllers/tests/it/nova_peer.rs"]
mod nova_peer;
mod registration;
mod routing;
mod scale;
mod schedule;

use std::time::Duration;

use anyhow::Result;
use qfence_core::{Action, Command, Observed, OpId, Outcome, Phase};
use qfence_lab::proxmox::VmStatus;
use qfence_lab::redfish::PowerState;
use qfence_runtime::RuntimeBackend;
use qfence_runtime::dto::VerdictDto;
use qfence_runtime::dto::{MaintenanceRequest, SwitchoverRequest};
use qfence_runtime::engine::without_times;
use qfence_runtime::events::{EventKind, VerifyOptions, read_jsonl, verify};
use qfence_runtime::{Backend, BackendError};

use lab::{Orchestrator, Sims, VIP, eventually, phase, plan};

/// Prints the event log, so a failed story shows where it stopped.
fn dump(o: &Orchestrator) {
    for e in o.engine.events() {
        eprintln!("{:>4} {:<9} {}", e.seq, e.kind.as_str(), e.message);
    }
}

fn verdict(status: &qfence_runtime::dto::StatusResponse, site: &str) -> Option<VerdictDto> {
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
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let backend = RuntimeBackend::new(&o.engine, lab::secrets());

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
                .get(&o.key("erp-db", "dc1", 3))
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
            // Every status on the way tells one story with its sentence.
            let status = backend.status().await.ok()?;
            status_agrees_with_its_sentence(&status);
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

    phase("the VIP is kept at the new owner: checked every interval, not applied again");
    // A service binding's check reads "points at the owner": the replicated owner (dc2), not
    // the configuration's first one, which would re-apply the VIP and alarm every interval.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let applied = o
        .engine
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Command && e.message.starts_with("service service[0]"))
        .count();
    assert_eq!(applied, 1, "the VIP was applied once, by the failover");
    assert_eq!(sims.vip(), ["10.2.1.5"]);

    phase("a VIP moved back by hand is pointed at the owner again, with an alarm");
    sims.fgt.edit(|s| {
        s.vdoms
            .get_mut("root")
            .unwrap()
            .vips
            .get_mut(VIP)
            .unwrap()
            .mappedip = vec!["10.1.1.5".into()];
    });
    eventually(Duration::from_secs(15), "the VIP back at dc2", || async {
        (sims.vip() == ["10.2.1.5"]).then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;
    assert!(
        o.engine
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Alarm
                && e.message.contains("pointed away from the owner dc2")),
        "an alarm says the VIP pointed away"
    );

    phase("the event log tells the story and verifies");
    let events = o.engine.events();
    let pos = |pred: &dyn Fn(&qfence_runtime::events::Event) -> bool| events.iter().position(pred);
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
    let cut_at = events[..fence_dc1]
        .iter()
        .rev()
        .find(|e| e.kind == EventKind::Result && e.message.starts_with("check UNKNOWN"))
        .map_or(events[fence_dc1].time_ms, |e| e.time_ms);
    eprintln!(
        "figures: health lost -> fence {} ms, -> commit {} ms, -> VIP moved {} ms (failover_after 4 s)",
        events[fence_dc1].time_ms - cut_at,
        events[committed].time_ms - cut_at,
        events[vip].time_ms - cut_at
    );
    assert!(
        fence_dc1 < verified && verified < promoted && promoted < committed && committed < vip,
        "fence {fence_dc1} < read-back {verified} < promote {promoted} < commit {committed} < VIP {vip}"
    );
    for e in &events {
        assert!(!e.message.contains(lab::PVE_TOKEN) && !e.message.contains(lab::BMC_PASSWORD));
    }
    let decisions: Vec<&qfence_runtime::events::Event> = events
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
    phase("the metrics count decisions, fence verdicts, check latency and the failover");
    let m = o.metrics.render();
    for needle in [
        "qfence_decisions_total{plan=\"erp-db\"}",
        // Read back at least once (the fence watch reads it again every interval after).
        "qfence_fence_results_total{controller=\"bmc-dc1\",verdict=\"FENCED\"} ",
        "qfence_check_duration_seconds_count{controller=\"pve-dc1\"}",
        "qfence_failovers_total{plan=\"erp-db\",result=\"committed\"} 1",
    ] {
        assert!(m.contains(needle), "{needle} not in\n{m}");
    }
    let records = read_jsonl(&o.events_path)?;
    let v = verify(&records, &VerifyOptions::default()).map_err(|b| anyhow::anyhow!("{b:?}"))?;
    // The engine runs on: the file holds what was read above, and maybe a record or two more.
    assert!(
        v.count as usize >= events.len(),
        "{} records, {} events",
        v.count,
        events.len()
    );

    phase("the status agrees with the sentence at every moment; the owner is never FENCED");
    // dc1 is watched until the sentence says it is fenced; then its BMC goes dark, so its
    // reading ages from FENCED to UNKNOWN while we watch: the status must turn when the
    // sentence does, not a tick before or after.
    for (what, said, cut) in [
        ("dc1 said fenced", true, false),
        ("dc1 said not fenced once its BMC went dark", false, true),
    ] {
        if cut {
            sims.bmc1
                .faults()
                .set_unreachable(Some(qfence_lab::faults::Cut::Blackhole));
        }
        eventually(Duration::from_secs(20), what, || async {
            let status = backend.status().await.ok()?;
            assert_eq!(status.plans[0].owner, "dc2");
            (status_agrees_with_its_sentence(&status) == Some(said)).then_some(())
        })
        .await
        .inspect_err(|_| dump(&o))?;
    }

    // dc1's BMC answers again, so shutting down can delete its session.
    sims.bmc1.faults().set_unreachable(None);
    phase("each BMC held one qfence session at most; shutting down deletes them");
    let sessions = |sims: &Sims| {
        (
            sims.bmc1.snapshot().sessions.len(),
            sims.bmc2.snapshot().sessions.len(),
        )
    };
    let (s1, s2) = sessions(&sims);
    assert!(s1 <= 1 && s2 <= 1, "sessions open: {s1}, {s2}");
    o.shutdown().await;
    assert_eq!(sessions(&sims), (0, 0), "sessions left behind");
    sims.stop().await;
    Ok(())
}

/// Asserts that no site the status shows contradicts the sentence beside it, and that the
/// owner is not shown FENCED by a reading from before it became the owner (the service runs
/// there). Returns what the sentence says of dc1, if it says anything.
fn status_agrees_with_its_sentence(status: &qfence_runtime::dto::StatusResponse) -> Option<bool> {
    let p = &status.plans[0];
    let reason = &p.last_reason;
    // Once committed to dc2 the new owner serves; before, dc1 is the site being fenced.
    if p.owner == "dc2" {
        assert_ne!(
            verdict(status, "dc2"),
            Some(VerdictDto::Fenced),
            "the owner dc2 runs the service, never FENCED: {reason}"
        );
    }
    let mut dc1 = None;
    for site in &p.sites {
        if let Some(said) = sentence_says_fenced(reason, &site.site) {
            assert_eq!(
                site.verdict == VerdictDto::Fenced,
                said,
                "{} shows {:?} but the sentence says: {reason}",
                site.site,
                site.verdict
            );
            if site.site == "dc1" {
                dc1 = Some(said);
            }
        }
    }
    dc1
}

/// What a sentence says of `site`: `Some(true)` for "dc1 fenced (...)", "dc1 confirmed fenced
/// by ..." or "dc1 fenced by its dead-man switch", `Some(false)` for "dc1 not fenced (...)",
/// `None` when it does not judge the site.
fn sentence_says_fenced(reason: &str, site: &str) -> Option<bool> {
    reason.split("; ").find_map(|clause| {
        let rest = clause.strip_prefix(site)?.strip_prefix(' ')?;
        let rest = rest.strip_prefix("in maintenance, ").unwrap_or(rest);
        if rest.starts_with("not fenced") {
            Some(false)
        } else if rest.starts_with("fenced") || rest.starts_with("confirmed fenced") {
            Some(true)
        } else {
            None
        }
    })
}

pub(crate) fn operator() -> qfence_runtime::Caller {
    qfence_runtime::Caller {
        name: "alice".into(),
        access: qfence_runtime::Access::Operator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_switchover_moves_erp_db_to_dc2_and_refuses_a_stale_generation() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let backend = RuntimeBackend::new(&o.engine, lab::secrets());

    phase("steady state first");
    eventually(Duration::from_secs(20), "dc2 FENCED", || async {
        let status = backend.status().await.ok()?;
        (verdict(&status, "dc2") == Some(VerdictDto::Fenced)).then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;

    phase("a request made against an old generation is refused and changes nothing");
    let stale = backend
        .switchover(
            &operator(),
            &plan(),
            &SwitchoverRequest {
                target: "dc2".into(),
                expected_generation: 7,
                reason: None,
            },
        )
        .await;
    assert!(
        matches!(
            stale,
            Err(BackendError::StaleGeneration {
                expected: 7,
                current: 1,
                ..
            })
        ),
        "{stale:?}"
    );
    let refused = backend
        .switchover(
            &operator(),
            &plan(),
            &SwitchoverRequest {
                target: "dc1".into(),
                expected_generation: 1,
                reason: None,
            },
        )
        .await;
    assert!(
        matches!(refused, Err(BackendError::Refused(_))),
        "{refused:?}"
    );
    assert!(
        o.engine
            .plan_state(&plan())?
            .expect("registered")
            .intents
            .is_empty()
    );

    phase("alice asks for a switchover to dc2");
    let accepted = backend
        .switchover(
            &operator(),
            &plan(),
            &SwitchoverRequest {
                target: "dc2".into(),
                expected_generation: 1,
                reason: Some("patching dc1".into()),
            },
        )
        .await?;
    assert_eq!(accepted.generation, 1);

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
    assert_eq!(after.generation.0, 2);

    phase("the switchover stopped VM 101 at dc1, not its host: both hosts are on");
    assert_eq!(
        sims.bmc1.snapshot().systems[0].power,
        PowerState::On,
        "a planned switchover must not power dc1's host off"
    );
    assert_eq!(
        sims.bmc2.snapshot().systems[0].power,
        PowerState::On,
        "dc2's host runs the promoted VM"
    );
    assert_eq!(
        sims.pve1.snapshot().vm(101).map(|v| v.status),
        Some(VmStatus::Stopped),
        "VM 101 runs at dc2 only"
    );
    assert_eq!(
        sims.pve2.snapshot().vm(101).map(|v| v.status),
        Some(VmStatus::Running)
    );
    assert_eq!(sims.vip(), ["10.2.1.5"], "the VIP points at dc2");

    let events = o.engine.events();
    let asked = events
        .iter()
        .position(|e| e.kind == EventKind::Operator && e.actor == "token:alice")
        .expect("the request is in the log with its actor");
    let stopped = events
        .iter()
        .position(|e| e.kind == EventKind::Command && e.message.starts_with("fence dc1[1]"))
        .expect("dc1's VM stopped through its vm.stop fence");
    assert!(asked < stopped);
    assert!(
        !events
            .iter()
            .any(|e| e.kind == EventKind::Command && e.message.starts_with("fence dc1[0]")),
        "dc1's power.off was never run"
    );
    assert!(
        events.iter().any(|e| e
            .message
            .contains("the switchover stopped the resource (dc1 vm.stop FENCED)")),
        "the commit says the resource was stopped and the site left on"
    );

    phase("in steady state dc1 reads as a standby whose resource is stopped, no alarm");
    let status = eventually(
        Duration::from_secs(20),
        "dc1 shown resource-stopped",
        || async {
            let status = backend.status().await.ok()?;
            status.plans[0]
                .last_reason
                .contains("dc1 resource stopped (vm.stop FENCED")
                .then_some(status)
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    assert_eq!(status.plans[0].owner, "dc2");
    assert_eq!(verdict(&status, "dc1"), Some(VerdictDto::Fenced));
    assert!(
        !o.engine
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Alarm && e.message.contains("dc1 not fenced")),
        "no alarm for a standby whose resource is proven stopped"
    );
    assert_eq!(
        sims.bmc1.snapshot().systems[0].power,
        PowerState::On,
        "still on"
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

/// A fence of dc1 through a BMC that answers slowly, as the leader of the current term would
/// issue it.
async fn slow_fence(
    o: &Orchestrator,
    sims: &Sims,
) -> Result<(Command, tokio_util::sync::CancellationToken)> {
    sims.bmc1
        .faults()
        .update(|f| f.latency = Duration::from_secs(5));
    o.engine.register().await?;
    let leadership = o.node.leadership().await?;
    let state = o.engine.plan_state(&plan())?.expect("registered");
    let command = Command {
        op: OpId("erp-db/test/fence".into()),
        plan: plan(),
        generation: state.generation,
        term: leadership.term,
        action: Action::Fence {
            binding: o.key("erp-db", "dc1", 0),
        },
    };
    Ok((command, leadership.token))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_leadership_cancels_an_operation_in_flight() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;

    phase("a fence of dc1 starts through a slow BMC");
    let (command, token) = slow_fence(&o, &sims).await?;
    let started = tokio::time::Instant::now();
    o.engine.executor().start(command.clone(), &token);
    assert_eq!(o.engine.executor().in_flight(), 1);

    phase("one operation per target: a second command on the same binding is not started");
    let mut again = command.clone();
    again.op = OpId("erp-db/test/fence-again".into());
    o.engine.executor().start(again.clone(), &token);
    assert_eq!(o.engine.executor().in_flight(), 1);

    phase("leadership is lost: the node stops, and its leadership token with it");
    tokio::time::sleep(Duration::from_millis(300)).await;
    o.node.shutdown().await;
    assert!(token.is_cancelled());
    let result = eventually(Duration::from_secs(3), "the cancelled result", || async {
        o.engine.runtime(&plan()).results.get(&command.op).cloned()
    })
    .await?;
    assert_eq!(
        result.outcome,
        Outcome::Unknown,
        "a cancelled fence proves nothing"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "it did not wait for the BMC"
    );
    assert_eq!(o.engine.executor().in_flight(), 0);
    assert!(!o.engine.runtime(&plan()).results.contains_key(&again.op));
    assert_eq!(
        sims.bmc1.snapshot().systems[0].power,
        PowerState::On,
        "the slow request never reached the BMC's reset"
    );
    let events = o.engine.events();
    assert!(
        events.iter().any(|e| e.kind == EventKind::Result
            && e.message.contains("fence UNKNOWN")
            && e.message.contains("cancelled")),
        "the log says the fence was cancelled"
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_starts_nothing_new_and_waits_for_what_runs() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;

    phase("a slow fence is in flight when the drain starts");
    let (command, token) = slow_fence(&o, &sims).await?;
    sims.bmc1
        .faults()
        .update(|f| f.latency = Duration::from_millis(200));
    o.engine.executor().start(command.clone(), &token);
    assert_eq!(
        o.engine.drain(Duration::from_millis(100)).await,
        1,
        "a short drain gives up"
    );

    phase("while draining, a cycle decides but starts no operation");
    o.engine.tick().await;
    assert_eq!(o.engine.executor().in_flight(), 1);
    assert!(
        o.engine.runtime(&plan()).last_reason.is_some(),
        "it still decided"
    );

    phase("a longer drain waits for the fence to finish");
    assert_eq!(o.engine.drain(Duration::from_secs(10)).await, 0);
    let result = o
        .engine
        .runtime(&plan())
        .results
        .get(&command.op)
        .cloned()
        .expect("finished");
    assert_eq!(result.outcome, Outcome::Done);
    assert_eq!(sims.bmc1.snapshot().systems[0].power, PowerState::Off);

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_orchestrator_per_site_dc2_calls_are_forwarded_and_the_failover_completes()
-> Result<()> {
    let sims = Sims::start().await?;
    // examples/lab.yaml as it is: pve-dc2 may only be called from dc2.
    let text = sims.config_text_for(false);
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let dc1 = Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, true).await?;
    let seed = dc1.node.member().address.clone();
    let dc2 = Orchestrator::start_as(&text, "dc2-a", "dc2", &ca, Some(&seed), true).await?;
    assert_eq!(
        dc1.node.leader().map(|l| l.to_string()).as_deref(),
        Some("dc1-a")
    );

    phase("steady state, then dc1's host loses power");
    eventually(
        Duration::from_secs(20),
        "dc2's VM read by dc2-a",
        || async {
            dc1.engine
                .runtime(&plan())
                .observations
                .get(&dc1.key("erp-db", "dc2", 1))
                .filter(|o| o.value == Observed::Holds && o.detail.contains("read by dc2-a"))
                .map(|_| ())
        },
    )
    .await
    .inspect_err(|_| dump(&dc1))?;

    phase("the follower dc2-a answers status with the leader's verdicts and sentence");
    let leader_api = RuntimeBackend::new(&dc1.engine, lab::secrets());
    let follower_api = RuntimeBackend::new(&dc2.engine, lab::secrets());
    let seen = eventually(
        Duration::from_secs(20),
        "dc2 FENCED in the follower's status",
        || async {
            let s = follower_api.status().await.ok()?;
            (verdict(&s, "dc2") == Some(VerdictDto::Fenced)).then_some(s)
        },
    )
    .await
    .inspect_err(|_| dump(&dc1))?;
    assert!(!seen.leader.is_self);
    assert_eq!(seen.leader.leader.as_deref(), Some("dc1-a"));
    let reason = &seen.plans[0].last_reason;
    assert!(
        reason.contains("[leader dc1-a's view as of ") && !reason.contains("STALE"),
        "{reason}"
    );
    assert!(
        !reason.contains("not the leader"),
        "the follower's own sentence is not shown: {reason}"
    );
    let leader_reason = leader_api.status().await?.plans[0].last_reason.clone();
    let published = reason.split(" [leader ").next().unwrap_or_default();
    assert_eq!(
        without_times(published).split(':').next(),
        without_times(&leader_reason).split(':').next(),
        "the follower shows the leader's sentence"
    );
    assert!(
        seen.plans[0]
            .sites
            .iter()
            .find(|s| s.site == "dc2")
            .and_then(|s| s.checked_at_ms)
            .is_some(),
        "the proving check's time travels with the verdict"
    );
    assert!(sims.bmc1.set_power("pve-dc1-01", PowerState::Off));

    phase("the leader at dc1 fails over; dc2's own orchestrator promotes the VM");
    let after = eventually(
        Duration::from_secs(60),
        "dc2 owning erp-db with the VIP",
        || async {
            let s = dc1.engine.plan_state(&plan()).ok()??;
            (s.owner.as_str() == "dc2"
                && matches!(s.phase, Phase::Steady)
                && sims.vip() == ["10.2.1.5"])
            .then_some(s)
        },
    )
    .await
    .inspect_err(|_| dump(&dc1))?;
    assert_eq!(after.generation.0, 2);
    assert_eq!(
        sims.pve2.snapshot().vm(101).map(|v| v.status),
        Some(VmStatus::Running)
    );
    let events = dc1.engine.events();
    assert!(
        events.iter().any(|e| e.kind == EventKind::Result
            && e.data["binding"] == "dc2[4]"
            && e.message.contains("read by dc2-a")),
        "the promotion ran at dc2-a"
    );
    assert_eq!(
        dc2.engine.plan_state(&plan())?.map(|s| s.generation.0),
        Some(2),
        "dc2-a's replica has the new owner"
    );
    phase("after the failover the follower shows dc1 FENCED, as the leader saw it");
    eventually(
        Duration::from_secs(20),
        "dc1 FENCED in the follower's status",
        || async {
            let s = follower_api.status().await.ok()?;
            (s.plans[0].owner == "dc2"
                && verdict(&s, "dc1") == Some(VerdictDto::Fenced)
                && s.plans[0].last_reason.contains("[leader dc1-a's view"))
            .then_some(())
        },
    )
    .await
    .inspect_err(|_| dump(&dc1))?;
    assert!(
        dc2.engine
            .events()
            .iter()
            .all(|e| e.kind == EventKind::Decision),
        "a follower decides (and says it does not lead) but executes nothing of its own"
    );

    phase("shut down the follower, then the leader (now without a quorum: must not hang)");
    dc2.shutdown().await;
    dc1.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_in_maintenance_is_shown_never_moved_to_and_logged() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let backend = RuntimeBackend::new(&o.engine, lab::secrets());
    let dc = |s: &str| qfence_model::SiteId::new(s).unwrap();
    let req = |enabled: bool, expected_generation: u64| MaintenanceRequest {
        enabled,
        expected_generation,
        reason: Some("replacing a disk".into()),
    };

    phase("steady state first");
    eventually(Duration::from_secs(20), "dc2 FENCED", || async {
        let status = backend.status().await.ok()?;
        (verdict(&status, "dc2") == Some(VerdictDto::Fenced)).then_some(())
    })
    .await
    .inspect_err(|_| dump(&o))?;
    let revision = o.engine.plan_state(&plan())?.expect("registered").revision;

    phase("the owner cannot go into maintenance; a stale generation is refused");
    let owner = backend
        .set_maintenance(&operator(), &plan(), &dc("dc1"), &req(true, 1))
        .await;
    match owner {
        Err(BackendError::Refused(why)) => assert_eq!(
            why,
            "dc1 owns erp-db: switch over to another site before putting it in maintenance"
        ),
        other => panic!("{other:?}"),
    }
    let stale = backend
        .set_maintenance(&operator(), &plan(), &dc("dc2"), &req(true, 7))
        .await;
    assert!(
        matches!(
            stale,
            Err(BackendError::StaleGeneration {
                expected: 7,
                current: 1,
                ..
            })
        ),
        "{stale:?}"
    );
    assert!(
        o.engine
            .plan_state(&plan())?
            .unwrap()
            .maintenance
            .is_empty()
    );

    phase("dc2 goes into maintenance: replicated, shown, logged; the generation stays");
    let accepted = backend
        .set_maintenance(&operator(), &plan(), &dc("dc2"), &req(true, 1))
        .await?;
    assert_eq!(accepted.generation, 1);
    assert_eq!(accepted.operation, "maintenance");
    let state = o.engine.plan_state(&plan())?.unwrap();
    assert!(state.in_maintenance(&dc("dc2")));
    assert!(state.revision > revision);
    let status = backend.status().await?;
    let sites: Vec<(String, bool)> = status.plans[0]
        .sites
        .iter()
        .map(|s| (s.site.clone(), s.maintenance))
        .collect();
    assert_eq!(
        sites,
        vec![("dc1".to_owned(), false), ("dc2".to_owned(), true)]
    );
    assert_eq!(backend.plan(&plan()).await?.maintenance, vec!["dc2"]);
    let logged = o
        .engine
        .events()
        .into_iter()
        .find(|e| e.kind == EventKind::Operator && e.message.contains("maintenance"))
        .expect("the change is in the event log");
    assert_eq!(logged.actor, "token:alice");
    assert_eq!(
        logged.message,
        "dc2 in maintenance for erp-db, set by alice: replacing a disk"
    );
    let reason = eventually(Duration::from_secs(20), "the sentence says it", || async {
        let s = backend.status().await.ok()?;
        let r = s.plans[0].last_reason.clone();
        // A tick with a check in flight says "checking health" first: wait for a quiet one.
        (r.contains("dc2 in maintenance, fenced (power.off FENCED") && r.starts_with("no action"))
            .then_some(r)
    })
    .await
    .inspect_err(|_| dump(&o))?;
    // Routine: nothing but the owner's health check, which is due at every full tick.
    assert!(
        reason.starts_with("no action: erp-db owned by dc1")
            || reason.starts_with("checking health (1 check); erp-db owned by dc1"),
        "{reason}"
    );

    phase("a switchover or failover to it is refused, nothing recorded");
    let refused = backend
        .switchover(
            &operator(),
            &plan(),
            &SwitchoverRequest {
                target: "dc2".into(),
                expected_generation: 1,
                reason: None,
            },
        )
        .await;
    match refused {
        Err(BackendError::Refused(why)) => assert_eq!(
            why,
            "dc2 is in maintenance for plan erp-db: take it out of maintenance first"
        ),
        other => panic!("{other:?}"),
    }
    let refused = backend
        .failover(
            &operator(),
            &plan(),
            &qfence_runtime::dto::FailoverRequest {
                target: None,
                expected_generation: 1,
                reason: None,
            },
        )
        .await;
    match refused {
        Err(BackendError::Refused(why)) => assert_eq!(
            why,
            "no site to fail over to for plan erp-db: dc2 in maintenance"
        ),
        other => panic!("{other:?}"),
    }
    assert!(o.engine.plan_state(&plan())?.unwrap().intents.is_empty());

    phase("out of maintenance");
    backend
        .set_maintenance(&operator(), &plan(), &dc("dc2"), &req(false, 1))
        .await?;
    assert!(
        o.engine
            .plan_state(&plan())?
            .unwrap()
            .maintenance
            .is_empty()
    );
    let status = backend.status().await?;
    assert!(status.plans[0].sites.iter().all(|s| !s.maintenance));

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
