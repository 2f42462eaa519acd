//! The safety holes issue 12 closed, one story each: a dead-man switch counts armed only
//! while its answers prove it, an abort means the same thing at every stage, and the service
//! binding is kept, not only set once. Each test fails on the code before the fix.

mod bench;
mod sim;

use std::time::Duration;

use qfence_core::{
    Action, EvidenceKind, IntentKind, Observed, Outcome, Phase, Stage, Transition, decide,
};
use qfence_model::Generation;
use sim::fixtures::site;

use bench::*;

fn has(d: &qfence_core::Decision, f: impl Fn(&Action) -> bool) -> bool {
    acts(d).iter().any(f)
}

fn alarm(a: &Action) -> bool {
    matches!(a, Action::Alarm { .. })
}

/// The full lab, stepped until dc1's switch is armed and verified.
fn armed() -> Bench {
    let mut b = Bench::full();
    b.step();
    b.step();
    assert!(b.state.dead_man_armed.contains(&site("dc1")));
    assert!(b.state.dead_man_verified.contains_key(&site("dc1")));
    b
}

// ----- the dead-man switch -----

#[test]
fn a_renewal_that_reads_back_not_running_clears_armed_at_once_alarms_and_arms_again() {
    let mut b = armed();
    eprintln!("Someone runs `ipmitool mc watchdog off`: the next renewal reads it stopped.");
    b.world.insert(k("dc1", 6), Observed::NotHeld);
    b.tick(9);
    let d = b.step();
    assert!(
        has(&d, |a| matches!(a, Action::RenewDeadMan { .. })),
        "{d:?}"
    );
    // The arm that follows will take.
    b.world.remove(&k("dc1", 6));
    let d = b.step();
    assert!(!b.state.dead_man_armed.contains(&site("dc1")));
    assert!(
        !b.state.dead_man_verified.contains_key(&site("dc1")),
        "the chain of proof is broken"
    );
    assert!(has(&d, alarm), "{d:?}");
    assert!(
        has(
            &d,
            |a| matches!(a, Action::ArmDeadMan { binding, .. } if *binding == k("dc1", 6))
        ),
        "armed again at once: {d:?}"
    );
    assert!(
        d.reason
            .contains("dc1's dead-man switch is not confirmed armed (watchdog FAILED at 14:02:12)"),
        "{}",
        d.reason
    );
    eprintln!("The arm takes: armed again, and the alarm clears.");
    let d = b.step();
    assert!(!has(&d, alarm), "one alarm per trouble: {d:?}");
    assert!(b.state.dead_man_armed.contains(&site("dc1")));
    assert!(b.state.dead_man_alarmed.is_empty());
}

#[test]
fn a_switch_disarmed_behind_qfences_back_is_never_taken_as_proof_that_the_site_stopped() {
    let mut b = armed();
    b.world.insert(k("dc1", 6), Observed::NotHeld);
    b.tick(9);
    b.step();
    b.step();
    eprintln!("dc1 is then cut off, and an operator fails over to dc2.");
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.world.insert(k("dc1", 6), Observed::Unknown);
    b.fail.insert(k("dc1", 6), Outcome::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..200 {
        let d = b.step();
        assert!(
            !has(&d, |a| matches!(a, Action::Switchover { .. })),
            "{}",
            d.reason
        );
    }
    assert_eq!(b.state.generation, Generation(1));
    assert!(
        !b.state
            .evidence
            .iter()
            .any(|e| matches!(e.kind, EvidenceKind::DeadManExpired { .. })),
        "{:?}",
        b.state.evidence
    );
    let t = b.state.transition().unwrap();
    assert!(t.halted.is_some(), "it waits for an operator: {t:?}");
}

#[test]
fn a_lost_owner_whose_renewals_go_unanswered_is_still_proven_stopped_by_its_switch() {
    let mut b = armed();
    let verified = b.now.plus(Duration::from_secs(9));
    b.tick(8);
    b.step();
    eprintln!("dc1 is cut off: its BMC and its switch answer nothing.");
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.world.insert(k("dc1", 6), Observed::Unknown);
    b.fail.insert(k("dc1", 6), Outcome::Unknown);
    b.tick(9);
    let d = b.step();
    assert!(has(&d, |a| matches!(a, Action::RenewDeadMan { .. })));
    let d = b.step();
    assert!(!b.state.dead_man_armed.contains(&site("dc1")), "{d:?}");
    assert!(has(&d, alarm), "not confirmed: an alarm");
    assert!(
        has(&d, |a| matches!(a, Action::RenewDeadMan { .. }))
            || !has(&d, |a| matches!(a, Action::ArmDeadMan { .. })),
        "an UNKNOWN answer is renewed again, never re-armed (an arm may stop the timer): {d:?}"
    );
    assert_eq!(
        b.state.dead_man_verified.get(&site("dc1")),
        Some(&verified),
        "the chain's latest link stands"
    );
    b.intent(IntentKind::Failover { to: site("dc2") });
    let mut done = false;
    for _ in 0..200 {
        b.step();
        if b.state.generation == Generation(2) {
            done = true;
            break;
        }
    }
    assert!(done, "{:?}", b.state.transition());
    let e = b
        .state
        .evidence
        .iter()
        .find(|e| matches!(e.kind, EvidenceKind::DeadManExpired { .. }))
        .expect("dead-man evidence");
    match &e.kind {
        EvidenceKind::DeadManExpired { last_verified, .. } => assert_eq!(*last_verified, verified),
        k => panic!("{k:?}"),
    }
}

#[test]
fn the_new_owner_switch_is_armed_while_its_service_step_runs() {
    let mut b = Bench::full();
    b.step();
    b.fail.insert(svc(0), Outcome::Failed);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let mut armed_dc2 = false;
    for _ in 0..60 {
        let d = b.step();
        armed_dc2 |= b.stage() == Some(Stage::Service)
            && has(
                &d,
                |a| matches!(a, Action::ArmDeadMan { binding, .. } if *binding == k("dc2", 6)),
            );
    }
    assert_eq!(b.stage(), Some(Stage::Service));
    assert!(armed_dc2);
    assert!(b.state.dead_man_armed.contains(&site("dc2")));
}

// ----- abort, stage by stage -----

/// An operator's failover from dc1 to dc2, in the lab, stopped at its fences step (dc1's two
/// fences issued, dc1 read running before), then moved to `stage`, and aborted.
fn abort_at(stage: Stage) -> (Bench, qfence_core::Decision) {
    let mut b = Bench::lab();
    b.step();
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    let mut t: Transition = b.state.transition().unwrap().clone();
    assert_eq!(t.stage, Stage::Fences);
    assert_eq!(t.fenced, vec![k("dc1", 0), k("dc1", 1)]);
    t.stage = stage;
    t.entered = false;
    t.pending.clear();
    if stage >= Stage::Commit {
        b.state.generation = Generation(2);
        b.state.owner = site("dc2");
    }
    b.state.phase = Phase::Transition(t);
    b.tick(1);
    b.intent(IntentKind::Abort);
    let d = b.decide();
    (b, d)
}

fn unfences(d: &qfence_core::Decision) -> Vec<Action> {
    acts(d)
        .into_iter()
        .filter(|a| matches!(a, Action::Unfence { .. }))
        .collect()
}

#[test]
fn an_abort_before_the_switchover_returns_to_the_old_owner_and_undoes_its_fences() {
    for stage in [
        Stage::AppFences,
        Stage::Fences,
        Stage::Verify,
        Stage::Readiness,
        Stage::Unfence,
    ] {
        let (b, d) = abort_at(stage);
        assert_eq!(b.state.phase, Phase::Steady, "{stage:?}");
        assert_eq!(b.state.owner, site("dc1"));
        assert!(b.state.renewals_stopped.is_empty(), "renewals resume");
        assert_eq!(
            unfences(&d),
            vec![
                Action::Unfence {
                    binding: k("dc1", 0)
                },
                Action::Unfence {
                    binding: k("dc1", 1)
                }
            ],
            "{stage:?}"
        );
        assert!(
            d.reason.starts_with(&format!(
                "alice aborted erp-db's move to dc2 at its {} step; dc1 owns it, undoing this \
                 move's fences there (dc1 power.off, dc1 vm.stop)",
                stage.as_str()
            )),
            "{}",
            d.reason
        );
    }
}

#[test]
fn an_abort_at_preflight_touches_nothing() {
    let mut b = Bench::lab();
    b.step();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    b.step();
    assert_eq!(b.stage(), Some(Stage::Preflight));
    b.tick(1);
    b.intent(IntentKind::Abort);
    let d = b.decide();
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(unfences(&d).is_empty());
    assert!(
        d.reason
            .starts_with("alice aborted erp-db's move to dc2 at its preflight step; dc1 owns it")
    );
}

#[test]
fn an_abort_undoes_only_the_fences_this_move_took_and_none_still_under_way() {
    let mut b = Bench::lab();
    b.step();
    eprintln!("dc1's vm.stop already reads holding: this move does not take it.");
    b.read("dc1", 1, Observed::Holds);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let d = b.decide();
    assert_eq!(b.state.transition().unwrap().fenced, vec![k("dc1", 0)]);
    // The power.off is still under way when the abort comes.
    let op = d
        .commands
        .iter()
        .find(|c| c.action == fence("dc1", 0))
        .unwrap()
        .op
        .clone();
    b.in_flight.insert(op, k("dc1", 0));
    b.tick(1);
    b.intent(IntentKind::Abort);
    let d = b.decide();
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(unfences(&d).is_empty(), "{d:?}");
    assert!(
        d.reason
            .contains("not undone: dc1 power.off still under way"),
        "{}",
        d.reason
    );
}

#[test]
fn an_abort_from_the_switchover_on_is_refused_the_move_only_rolls_forward() {
    for (stage, why) in [
        (
            Stage::Switchover,
            "dc2 may already run the promoted copy (switchover step)",
        ),
        (Stage::Commit, "dc2 owns it at generation 2 (commit step)"),
        (Stage::Service, "dc2 owns it at generation 2 (service step)"),
    ] {
        let (b, d) = abort_at(stage);
        assert!(b.state.transition().is_some(), "{stage:?}: still moving");
        assert!(unfences(&d).is_empty());
        assert!(
            d.reason.starts_with(&format!(
                "refused alice's abort for erp-db: {why}: the move can only roll forward; pause \
                 it, or fail over again once it is done"
            )),
            "{}",
            d.reason
        );
    }
}

// ----- the service binding is kept -----

#[test]
fn a_vip_moved_by_hand_is_pointed_back_at_the_owner_with_an_alarm() {
    let mut b = Bench::lab();
    b.step();
    b.world.insert(svc(0), Observed::NotHeld);
    b.tick(9);
    let d = b.step();
    assert!(acts(&d).contains(&check_svc(0, "dc1")));
    b.world.remove(&svc(0));
    let d = b.step();
    assert!(
        acts(&d).contains(&Action::Service {
            binding: svc(0),
            site: site("dc1")
        }),
        "{d:?}"
    );
    assert!(has(&d, alarm));
    assert!(
        d.reason.contains("service[0] vip.own points away from dc1"),
        "{}",
        d.reason
    );
    eprintln!("Once re-applied, only the next interval's check looks again.");
    let d = b.step();
    assert!(
        !has(&d, |a| matches!(
            a,
            Action::Service { .. } | Action::Alarm { .. }
        )),
        "{d:?}"
    );
}

#[test]
fn a_paused_plan_leaves_a_moved_vip_alone_and_says_so() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Pause);
    b.world.insert(svc(0), Observed::NotHeld);
    b.step();
    let d = b.step();
    assert!(!has(&d, |a| matches!(a, Action::Service { .. })));
    assert!(
        d.reason.contains("paused, so it is left as it is"),
        "{}",
        d.reason
    );
}

#[test]
fn a_failover_whose_service_step_fails_keeps_retrying_until_the_vip_is_at_the_owner() {
    let mut b = Bench::lab();
    b.fail.insert(svc(0), Outcome::Failed);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let mut retries = 0;
    for _ in 0..120 {
        let d = b.step();
        if d.reason.contains(
            "service[0] vip.own FAILED: the service does not point at the owner dc2 yet; the \
             service step is retried at",
        ) {
            retries += 1;
        }
    }
    let t = b.state.transition().unwrap();
    assert!(t.halted.is_none(), "never halts: {t:?}");
    assert_eq!(b.state.owner, site("dc2"));
    // max_retries is 2: a halting step would have stopped after 3 attempts.
    assert!(retries > 3, "{retries}");
    b.fail.clear();
    for _ in 0..12 {
        b.step();
    }
    assert_eq!(b.state.phase, Phase::Steady);
    assert_eq!(b.state.owner, site("dc2"));
}

#[test]
fn the_real_rules_are_what_production_runs() {
    // decide() is decide_with(the default rules): no planted bug reaches production.
    let b = Bench::lab();
    let d = decide(&b.snapshot());
    assert_eq!(
        d,
        qfence_core::decide_with(&b.snapshot(), &qfence_core::Rules::default())
    );
}

#[test]
fn an_abort_while_a_switchover_step_re_verifies_its_proof_is_still_refused() {
    let (mut b, _) = abort_at(Stage::Fences);
    // A fresh move, sent back from its switchover step to read the fences again.
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    let mut t = b.state.transition().unwrap().clone();
    t.stage = Stage::Verify;
    t.after_verify = Stage::Switchover;
    t.entered = false;
    t.pending.clear();
    b.state.phase = Phase::Transition(t);
    b.tick(1);
    b.intent(IntentKind::Abort);
    let d = b.decide();
    assert!(b.state.transition().is_some());
    assert!(
        d.reason.starts_with(
            "refused alice's abort for erp-db: dc2 may already run the promoted copy (verify \
             step): the move can only roll forward"
        ),
        "{}",
        d.reason
    );
}
