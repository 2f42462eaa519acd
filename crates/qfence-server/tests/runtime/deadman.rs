//! The dead-man switch end to end (issue 12): dc1's host sits behind an IPMI BMC whose
//! watchdog is dc1's dead-man switch. The lab's BMC ([`LabIpmi`]) follows the spec (renewals
//! postpone the expiry); `ipmi_sim` shows that a watchdog really powers the host off.
//!
//! The lab runs one orchestrator process per test; "dc1 is lost" means every dc1 controller
//! goes dark while dc1's host keeps running until its watchdog stops it.

use std::time::Duration;

use anyhow::Result;
use qfence_core::{Action, BindingKey, Command, Observed, OpId, Outcome};
use qfence_runtime::events::EventKind;

use crate::ipmi_bmc::LabIpmi;
use crate::lab::{self, Orchestrator, Sims, eventually, phase, plan};

/// dc1's dead-man binding: appended after dc1's five lab bindings.
pub fn dead_man_key(o: &Orchestrator) -> BindingKey {
    o.key("erp-db", "dc1", 5)
}

/// The lab configuration with dc1's host behind the IPMI BMC at `endpoint`: its power.off
/// is dc1's required fence (instead of the Redfish BMC's) and its watchdog, with a
/// `countdown` of whole seconds, dc1's dead-man switch. `reach_dc2`: an orchestrator at dc2
/// may call the BMC too.
pub fn config(sims: &Sims, endpoint: &str, countdown: u32, reach_dc2: bool) -> String {
    config_for(sims.config_text(), endpoint, countdown, reach_dc2)
}

pub fn config_for(text: String, endpoint: &str, countdown: u32, reach_dc2: bool) -> String {
    let reach = if reach_dc2 { "    reach: [dc2]\n" } else { "" };
    let ipmi = format!(
        "  ipmi-dc1:\n    type: ipmi\n    endpoint: \"{endpoint}\"\n    site: dc1\n{reach}    \
         secret: lab-ipmi\n    username: admin\n    cipher_suite: 3\n    timeout_seconds: 2\n  pve-dc1:\n"
    );
    let fence = "{controller: bmc-dc1, capability: power.off, resource: pve-dc1-01, role: fence, required: true}";
    let switchover = "        - {controller: pve-dc1, capability: vm.start, resource: pve-dc1-01/101, role: switchover}\n";
    assert!(text.contains(fence) && text.contains(switchover));
    text.replacen("  pve-dc1:\n", &ipmi, 1)
        .replacen(fence, &fence.replace("bmc-dc1", "ipmi-dc1"), 1)
        .replacen(
            switchover,
            &format!(
                "{switchover}        - {{controller: ipmi-dc1, capability: watchdog, resource: pve-dc1-01, \
                 role: dead-man, params: {{timeout_seconds: \"{countdown}\"}}}}\n"
            ),
            1,
        )
}

/// A dead-man command for dc1's switch, as the leader of the current term would issue it.
async fn command(o: &Orchestrator, op: &str, arm: bool, not_after_in: i64) -> Result<Command> {
    let leadership = o.node.leadership().await?;
    let state = o.engine.plan_state(&plan())?.expect("registered");
    let now = o.engine.clock().now();
    let not_after = qfence_core::Millis(now.0.saturating_add_signed(not_after_in));
    let binding = dead_man_key(o);
    Ok(Command {
        op: OpId(format!("erp-db/test/{op}")),
        plan: plan(),
        generation: state.generation,
        term: leadership.term,
        action: if arm {
            Action::ArmDeadMan { binding, not_after }
        } else {
            Action::RenewDeadMan { binding, not_after }
        },
    })
}

/// Runs `command` through the executor and waits for its result and the observation.
async fn run(o: &Orchestrator, command: Command) -> Result<(Outcome, Option<(Observed, String)>)> {
    let token = o.node.leadership().await?.token;
    o.engine.executor().start(command.clone(), &token);
    let result = eventually(Duration::from_secs(10), "the result", || async {
        o.engine.runtime(&plan()).results.get(&command.op).cloned()
    })
    .await?;
    let seen = o
        .engine
        .runtime(&plan())
        .observations
        .get(&dead_man_key(o))
        .filter(|ob| ob.at >= result.at)
        .map(|ob| (ob.value, ob.detail.clone()));
    Ok((result.outcome, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_arm_and_renew_read_the_watchdog_back_and_never_act_after_not_after() -> Result<()>
{
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    let o = Orchestrator::start(&config(&sims, &bmc.endpoint(), 30, false), false).await?;
    o.engine.register().await?;

    phase("a renewal of a watchdog never set is refused, not taken as armed");
    let (outcome, seen) = run(&o, command(&o, "renew-unset", false, 5_000).await?).await?;
    assert_eq!(outcome, Outcome::Failed);
    let (value, detail) = seen.expect("the refusal is the observation");
    assert_eq!(value, Observed::Unknown);
    assert!(detail.contains("never set"), "{detail}");

    phase("arming sets the binding's countdown and starts the timer; read back: holds");
    let (outcome, seen) = run(&o, command(&o, "arm", true, 5_000).await?).await?;
    let (value, detail) = seen.expect("observed");
    assert_eq!(
        (outcome, value),
        (Outcome::Done, Observed::Holds),
        "{detail}"
    );
    assert!(
        detail.contains("initial countdown 30.0 s") && detail.contains("timer running"),
        "{detail}"
    );
    let wd = bmc.watchdog();
    assert!(wd.running && wd.initial == 300 && wd.action == 2, "{wd:?}");

    phase("a renewal restarts the countdown and reads back holds");
    let (outcome, seen) = run(&o, command(&o, "renew", false, 5_000).await?).await?;
    assert_eq!(
        (outcome, seen.map(|s| s.0)),
        (Outcome::Done, Some(Observed::Holds))
    );
    assert_eq!(bmc.watchdog().resets, 2);

    phase("past not_after nothing is sent");
    let before = bmc.watchdog();
    let (outcome, _) = run(&o, command(&o, "late", false, -1).await?).await?;
    assert_eq!(outcome, Outcome::Unknown);
    assert_eq!(
        bmc.watchdog().resets,
        before.resets,
        "a late renewal reached the BMC"
    );

    phase("disarmed behind qfence's back: the renewal reads NOT HELD and is not done");
    bmc.watchdog_off_behind_qfences_back();
    let (outcome, seen) = run(&o, command(&o, "renew-off", false, 5_000).await?).await?;
    let (value, detail) = seen.expect("observed");
    assert_eq!(
        (outcome, value),
        (Outcome::Failed, Observed::NotHeld),
        "{detail}"
    );
    assert!(detail.contains("action none"), "{detail}");
    let events = o.engine.events();
    assert!(
        events.iter().any(|e| e.kind == EventKind::Result
            && e.message.starts_with("renew-dead-man failed: read back")),
        "the failed renewal is logged"
    );

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadman_a_forwarded_renewal_delayed_past_its_deadline_is_not_executed() -> Result<()> {
    let bmc = LabIpmi::start().await?;
    let sims = Sims::start_powered_by(Some(bmc.power_line())).await?;
    // Only dc2 may call the BMC here, so the leader at dc1 forwards every dead-man call.
    let text = config(&sims, &bmc.endpoint(), 30, true).replacen(
        "    site: dc1\n    reach: [dc2]\n    secret: lab-ipmi",
        "    site: dc2\n    secret: lab-ipmi",
        1,
    );
    let ca = qfence_cluster::tls::CertificateAuthority::generate("lab")?;
    let dc1 = Orchestrator::start_as(&text, "dc1-a", "dc1", &ca, None, false).await?;
    let seed = dc1.node.member().address.clone();
    let dc2 = Orchestrator::start_as(&text, "dc2-a", "dc2", &ca, Some(&seed), false).await?;
    dc1.engine.register().await?;
    let dc2_id = qfence_model::OrchestratorId::new("dc2-a")?;
    let controller = qfence_model::ControllerId::new("ipmi-dc1")?;
    let state = dc1.engine.plan_state(&plan())?.expect("registered");
    let wire = |not_after: qfence_core::Millis| qfence_call::Call {
        not_after_unix_ms: Some(not_after.0),
        ..qfence_call::Call::new(
            qfence_call::Verb::Perform,
            qfence_call::Target {
                capability: "watchdog".into(),
                resource: "pve-dc1-01".into(),
                params: [("timeout_seconds".to_owned(), "30".to_owned())].into(),
                site: lab::site("dc1"),
            },
            Duration::from_millis(2000),
        )
    };
    let wait_replicated = || async {
        eventually(Duration::from_secs(10), "dc2-a knows the plan", || async {
            dc2.engine.plan_state(&plan()).ok()?.map(|_| ())
        })
        .await
    };
    wait_replicated().await?;

    phase("a forwarded arm delivered in time runs at dc2-a");
    let deadline = dc1.engine.clock().after(Duration::from_secs(3));
    let signed = dc1
        .node
        .sign_call(
            &controller,
            Some((plan(), state.generation)),
            &wire(deadline),
        )
        .await?;
    let reply = dc1.node.send_signed(&dc2_id, &signed).await?;
    assert!(
        matches!(reply, qfence_cluster::forward::ForwardReply::Done { .. }),
        "{reply:?}"
    );
    assert_eq!(bmc.watchdog().sets, 1);

    phase("the same call held in transit past its deadline is refused, not run");
    let deadline = dc1.engine.clock().after(Duration::from_millis(300));
    let signed = dc1
        .node
        .sign_call(
            &controller,
            Some((plan(), state.generation)),
            &wire(deadline),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let reply = dc1.node.send_signed(&dc2_id, &signed).await?;
    match &reply {
        qfence_cluster::forward::ForwardReply::Failed { error } => {
            assert!(error.contains("after its deadline"), "{error}");
        }
        other => panic!("a late call must not run: {other:?}"),
    }
    assert_eq!(bmc.watchdog().sets, 1, "the late call reached the BMC");

    phase("through the executor: a renewal whose not_after passes while forwarded is UNKNOWN");
    let (outcome, _) = run(&dc1, command(&dc1, "late", false, -1).await?).await?;
    assert_eq!(outcome, Outcome::Unknown);
    assert_eq!(bmc.watchdog().resets, 1);

    dc2.shutdown().await;
    dc1.shutdown().await;
    sims.stop().await;
    Ok(())
}
