//! `decide`, story by story: each test drives the demo lab (or the PostgreSQL plan) through
//! one behaviour and asserts the exact commands, state and sentence.

mod bench;
mod sim;

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_core::dry_run::{MoveKind, dry_run, parse_assumption};
use qfence_core::{
    Action, BindingKey, BindingPos, CoreError, Decision, EvidenceKind, IntentKind, Observation,
    Observed, OpId, Outcome, Phase, Stage, StoredPlanState, TransitionKind, decide,
};
use qfence_model::{Generation, Term, Verdict};
use sim::fixtures::{self, site};

use bench::*;

// ----- verdicts -----

fn verdict(b: &Bench, s: &str) -> Verdict {
    qfence_core::Rules::default()
        .site_verdict(
            &b.cfg,
            b.plan(),
            &b.state,
            &b.obs,
            &site(s),
            b.now,
            None,
            None,
        )
        .verdict
}

#[test]
fn a_site_is_fenced_only_when_every_required_fence_reads_fenced_and_fresh() {
    let mut b = Bench::lab();
    assert_eq!(
        verdict(&b, "dc2"),
        Verdict::Unknown,
        "never read is UNKNOWN"
    );
    b.read("dc2", 0, Observed::Holds);
    b.read("dc2", 1, Observed::NotHeld);
    assert_eq!(
        verdict(&b, "dc2"),
        Verdict::Fenced,
        "a secondary fence never counts"
    );
    b.read("dc2", 0, Observed::Unknown);
    assert_eq!(
        verdict(&b, "dc2"),
        Verdict::Unknown,
        "UNKNOWN is never FENCED"
    );
    b.read("dc2", 0, Observed::NotHeld);
    assert_eq!(verdict(&b, "dc2"), Verdict::Failed);
    b.read("dc2", 0, Observed::Holds);
    b.tick(31);
    assert_eq!(
        verdict(&b, "dc2"),
        Verdict::Unknown,
        "older than freshness_seconds (30)"
    );
}

#[test]
fn an_application_fence_never_proves_a_site_stopped() {
    let mut b = Bench::pg();
    // Even marked required, db.demote does not count: only power.off does.
    let mut plan = fixtures::pg_plan();
    plan.instances.get_mut(&site("dc2")).unwrap()[0].required = true;
    b.cfg = fixtures::config_with(vec![("pg", plan)]);
    b.read("dc2", 0, Observed::Holds);
    assert_eq!(verdict(&b, "dc2"), Verdict::Unknown);
    b.read("dc2", 0, Observed::NotHeld);
    b.read("dc2", 1, Observed::Holds);
    assert_eq!(verdict(&b, "dc2"), Verdict::Fenced);
}

// ----- steady state -----

#[test]
fn steady_state_checks_health_at_the_owner_and_fences_elsewhere_then_says_no_action() {
    let mut b = Bench::lab();
    let d = b.step();
    // dc1's health; dc2's fences; dc2's readiness (the readiness watch).
    assert_eq!(
        acts(&d),
        vec![
            check("dc1", 3),
            check("dc2", 0),
            check("dc2", 1),
            check("dc2", 2),
            // The service binding is kept: checked every interval.
            check_svc(0, "dc1")
        ]
    );
    for c in &d.commands {
        assert_eq!((c.generation, c.term), (Generation(1), Term(2)));
        assert_eq!(c.plan.as_str(), "erp-db");
    }
    let d = b.step();
    assert_eq!(acts(&d), vec![]);
    assert_eq!(d.state_change, None);
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1; dc2 fenced (power.off FENCED at \
         14:02:01), ready (replication.lag at 14:02:01)"
    );
    // Each interval (10 s) the checks run again.
    b.tick(8);
    assert_eq!(
        acts(&b.step()),
        vec![
            check("dc1", 3),
            check("dc2", 0),
            check("dc2", 1),
            check("dc2", 2),
            // The service binding is kept: checked every interval.
            check_svc(0, "dc1")
        ]
    );
}

#[test]
fn a_returning_site_raises_an_alarm_and_the_shield_and_is_never_unfenced() {
    let mut b = Bench::full();
    // dc1 owns; its shield starts lowered; dc2 is fenced.
    b.world.insert(k("dc1", 7), Observed::NotHeld);
    b.step();
    b.step();
    let d = b.step();
    assert!(d.reason.starts_with("no action:"), "{}", d.reason);
    // dc2's host comes back on, and its VM with it (a host back on with its VM stopped
    // would be a standby whose resource is stopped: safe, no alarm).
    b.world.insert(k("dc2", 0), Observed::NotHeld);
    b.world.insert(k("dc2", 1), Observed::NotHeld);
    b.tick(8);
    let d = b.step();
    assert!(acts(&d).contains(&check("dc2", 0)));
    let d = b.step();
    assert_eq!(
        acts(&d),
        vec![
            Action::Alarm {
                site: Some(site("dc2")),
                detail: "dc2 not fenced (power.off FAILED at 14:02:12)".into()
            },
            Action::RaiseShield {
                binding: k("dc1", 7)
            },
        ]
    );
    assert!(b.state.alarmed.contains(&site("dc2")));
    b.world.insert(k("dc1", 7), Observed::Holds);
    // The alarm is raised once; nothing ever unfences dc2, whatever the time.
    for _ in 0..40 {
        let d = b.step();
        assert!(
            !acts(&d)
                .iter()
                .any(|a| matches!(a, Action::Alarm { .. } | Action::Unfence { .. })),
            "{d:?}"
        );
    }
    // Fenced again: the alarm clears, the shield is lowered.
    b.world.insert(k("dc2", 0), Observed::Holds);
    let mut lowered = false;
    for _ in 0..12 {
        lowered |= acts(&b.step()).contains(&Action::LowerShield {
            binding: k("dc1", 7),
        });
    }
    assert!(lowered);
    assert!(b.state.alarmed.is_empty());
}

#[test]
fn the_owner_dead_man_switch_is_renewed_each_interval_only_under_a_valid_lease() {
    let mut b = Bench::full();
    let d = b.step();
    let arm = Action::ArmDeadMan {
        binding: k("dc1", 6),
        not_after: T0.plus(Duration::from_secs(3)),
    };
    assert!(
        acts(&d).contains(&arm),
        "armed first, bounded by the lease (2 s), not the interval: {d:?}"
    );
    assert!(b.state.dead_man_armed.is_empty());
    let d = b.step();
    assert!(
        !acts(&d)
            .iter()
            .any(|a| matches!(a, Action::RenewDeadMan { .. } | Action::ArmDeadMan { .. }))
    );
    assert!(
        b.state.dead_man_armed.contains(&site("dc1")),
        "armed once the arm is done and read back running"
    );
    assert_eq!(
        b.state.dead_man_verified.get(&site("dc1")),
        Some(&T0.plus(Duration::from_secs(1)))
    );
    b.tick(9);
    let d = b.step();
    assert!(
        acts(&d).contains(&Action::RenewDeadMan {
            binding: k("dc1", 6),
            not_after: b.now.plus(Duration::from_secs(2)),
        }),
        "renewed an interval later: {d:?}"
    );
    // The lease runs out: nothing at all, and no write.
    b.tick(10);
    b.lease_until = Some(b.now);
    let d = b.decide();
    assert_eq!((acts(&d), d.state_change.is_none()), (vec![], true));
    assert_eq!(
        d.reason,
        "no action: the leader's lease (term 2) ran out at 14:02:22, so erp-db is left alone"
    );
    b.lease_until = None;
    assert!(
        acts(&b.step())
            .iter()
            .any(|a| matches!(a, Action::RenewDeadMan { .. }))
    );
}

// ----- the readiness watch -----

/// The readiness checks among `d`'s commands.
fn readiness_checks(d: &Decision) -> Vec<Action> {
    acts(d)
        .into_iter()
        .filter(|a| matches!(a, Action::Check { binding, .. } if binding.at == 2))
        .collect()
}

#[test]
fn readiness_is_watched_each_interval_at_every_site_but_the_owner() {
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc2", "dc3"]));
    eprintln!("The first decision reads dc2's and dc3's readiness, never dc1's.");
    let d = b.step();
    assert_eq!(readiness_checks(&d), vec![check("dc2", 2), check("dc3", 2)]);
    eprintln!("Within the interval (10 s) nothing is read again.");
    for _ in 0..9 {
        assert_eq!(readiness_checks(&b.step()), vec![]);
    }
    eprintln!("One interval after the last reading, both are read again.");
    let d = b.step();
    assert_eq!(readiness_checks(&d), vec![check("dc2", 2), check("dc3", 2)]);
    eprintln!("A check still in flight is not doubled, however late it is.");
    b.tick(10);
    let d = b.decide();
    for c in &d.commands {
        if let Some(k) = c.action.binding() {
            b.in_flight.insert(c.op.clone(), k.clone());
        }
    }
    assert_eq!(readiness_checks(&d), vec![check("dc2", 2), check("dc3", 2)]);
    b.tick(10);
    assert_eq!(readiness_checks(&b.decide()), vec![]);
}

#[test]
fn readiness_is_never_watched_at_the_owner_even_after_ownership_moves() {
    let mut b = Bench::lab();
    for _ in 0..25 {
        let d = b.step();
        assert!(!acts(&d).contains(&check("dc1", 2)), "{d:?}");
    }
    eprintln!("dc2 takes over; from then on dc1 is watched and dc2 is not.");
    b.intent(IntentKind::Failover { to: site("dc2") });
    walk(&mut b, 8);
    assert_eq!(
        (b.state.owner.clone(), b.state.phase.clone()),
        (site("dc2"), Phase::Steady)
    );
    let mut dc1_read = 0;
    for _ in 0..25 {
        let d = b.step();
        assert!(!acts(&d).contains(&check("dc2", 2)), "{d:?}");
        dc1_read += readiness_checks(&d).len();
    }
    assert!(dc1_read >= 2, "dc1's readiness read {dc1_read} times");
}

#[test]
fn a_readiness_reading_starts_nothing_by_itself() {
    let mut b = Bench::lab();
    b.step();
    b.step();
    let quiet = b.state.clone();
    eprintln!("dc2 reads NOT READY, then UNKNOWN, then ready: only the sentence changes.");
    for (v, words) in [
        (
            Observed::NotHeld,
            "NOT READY (replication.lag NOT READY at 14:02:11)",
        ),
        (
            Observed::Unknown,
            "readiness UNKNOWN (replication.lag UNKNOWN at 14:02:21)",
        ),
        (Observed::Holds, "ready (replication.lag at 14:02:31)"),
    ] {
        b.world.insert(k("dc2", 2), v);
        b.tick(8);
        let d = b.step();
        assert_eq!(
            acts(&d),
            vec![
                check("dc1", 3),
                check("dc2", 0),
                check("dc2", 1),
                check("dc2", 2),
                check_svc(0, "dc1")
            ]
        );
        let d = b.step();
        assert_eq!((acts(&d), d.state_change), (vec![], None));
        assert!(d.reason.ends_with(words), "{}", d.reason);
        assert_eq!(b.state, quiet);
    }
    eprintln!("A stale reading (its check hangs) says so and still starts nothing.");
    let old = b.obs[&k("dc2", 2)].at;
    b.in_flight
        .insert(OpId("erp-db/hanging-check".into()), k("dc2", 2));
    b.now = old.plus(Duration::from_secs(31));
    b.obs
        .insert(k("dc1", 3), Observation::new(Observed::Holds, b.now));
    b.obs
        .insert(k("dc2", 0), Observation::new(Observed::Holds, b.now));
    b.obs
        .insert(k("dc2", 1), Observation::new(Observed::Holds, b.now));
    b.obs
        .insert(svc(0), Observation::new(Observed::Holds, b.now));
    let d = b.decide();
    assert_eq!((acts(&d), d.state_change), (vec![], None));
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1; dc2 fenced (power.off FENCED at \
         14:03:02), readiness UNKNOWN (replication.lag stale, last read at 14:02:31)"
    );
}

#[test]
fn the_readiness_watch_goes_on_while_paused() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Pause);
    let d = b.step();
    assert!(b.state.paused);
    assert_eq!(
        acts(&d),
        vec![
            check("dc1", 3),
            check("dc2", 0),
            check("dc2", 1),
            check("dc2", 2),
            // The service binding is kept: checked every interval.
            check_svc(0, "dc1")
        ]
    );
    b.tick(9);
    let d = b.step();
    assert_eq!(readiness_checks(&d), vec![check("dc2", 2)]);
    let d = b.step();
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1 (paused); dc2 fenced (power.off FENCED \
         at 14:02:11), ready (replication.lag at 14:02:11)"
    );
}

/// Brings the lab into a failover whose readiness step is entered when the watch's last
/// reading of dc2 is `watch_age` seconds old; dc2's readiness then reads `reads`. Returns the
/// readiness step's commands.
fn failover_to_readiness(watch_age: u64, reads: Observed) -> (Bench, Vec<Action>) {
    let mut b = Bench::lab();
    b.step();
    b.tick(9);
    b.step();
    let watched = b.obs[&k("dc2", 2)].at;
    assert_eq!(watched, T0.plus(Duration::from_secs(11)));
    b.intent(IntentKind::Failover { to: site("dc2") });
    // Fences, then their read-back.
    assert_eq!(acts(&b.step()), vec![fence("dc1", 0), fence("dc1", 1)]);
    assert_eq!(acts(&b.step()), vec![check("dc1", 0), check("dc1", 1)]);
    b.now = watched.plus(Duration::from_secs(watch_age - 1));
    b.world.insert(k("dc2", 2), reads);
    let d = b.step();
    (b, acts(&d))
}

#[test]
fn a_fresh_watch_reading_counts_at_a_failovers_readiness_step() {
    // Read 30 s ago, freshness_seconds is 30: it stands, nothing is read again (dc2 would
    // read UNKNOWN now), and dc2's own fences are undone.
    let (b, a) = failover_to_readiness(30, Observed::Unknown);
    assert_eq!(
        a,
        vec![
            Action::Unfence {
                binding: k("dc2", 0)
            },
            Action::Unfence {
                binding: k("dc2", 1)
            }
        ]
    );
    assert_eq!(b.stage(), Some(Stage::Unfence));
}

#[test]
fn a_stale_watch_reading_does_not_count_at_the_readiness_step() {
    // Read 31 s ago: too old, so the step reads dc2 again, and that reading decides.
    let (mut b, a) = failover_to_readiness(31, Observed::Unknown);
    assert_eq!(a, vec![check("dc2", 2)]);
    assert_eq!(b.stage(), Some(Stage::Readiness));
    let d = b.step();
    assert_eq!(b.stage(), Some(Stage::Readiness));
    assert!(
        d.reason.contains("dc2 not ready: replication.lag UNKNOWN"),
        "{}",
        d.reason
    );
    eprintln!("Read again ready: the failover goes on.");
    let (mut b, a) = failover_to_readiness(31, Observed::Holds);
    assert_eq!(a, vec![check("dc2", 2)]);
    b.step();
    assert_eq!(b.stage(), Some(Stage::Unfence));
}

#[test]
fn a_switchover_reads_readiness_again_whatever_the_watch_read() {
    let mut b = Bench::lab();
    b.step();
    b.step();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let steps = walk(&mut b, 4);
    // Preflight reads dc2 although the watch read it a second ago; so does the readiness
    // step, after the owner is fenced.
    assert_eq!(
        steps,
        vec![
            vec![check("dc2", 2)],
            // A planned switchover stops the resource: dc1's vm.stop, not its power.
            vec![fence("dc1", 1)],
            vec![check("dc1", 0), check("dc1", 1)],
            vec![check("dc2", 2)],
        ]
    );
}

// ----- failover, step by step -----

/// Walks a failover of the lab to dc2 and returns the step-by-step command lists.
fn walk(b: &mut Bench, n: usize) -> Vec<Vec<Action>> {
    (0..n).map(|_| acts(&b.step())).collect()
}

/// Steps until `n` decisions have issued commands (a retry waits an interval), and returns
/// those command lists.
fn walk_acting(b: &mut Bench, n: usize) -> Vec<Vec<Action>> {
    let mut out = Vec::new();
    for _ in 0..300 {
        let a = acts(&b.step());
        if !a.is_empty() {
            out.push(a);
            if out.len() == n {
                break;
            }
        }
    }
    out
}

#[test]
fn operator_failover_runs_every_step_in_order_and_commits_with_a_compare_and_set() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk(&mut b, 7);
    assert_eq!(
        steps,
        vec![
            // Fences of every site but dc2 (the lab has no application fence).
            vec![fence("dc1", 0), fence("dc1", 1)],
            // Read back every fence (the required one decides).
            vec![check("dc1", 0), check("dc1", 1)],
            // Readiness at dc2.
            vec![check("dc2", 2)],
            // unfence_on_promote: dc2's own fences undone: power.on, vm.start.
            vec![
                Action::Unfence {
                    binding: k("dc2", 0)
                },
                Action::Unfence {
                    binding: k("dc2", 1)
                }
            ],
            vec![Action::Switchover {
                binding: k("dc2", 4)
            }],
            // The commit: no command, a write.
            vec![],
            // Service last.
            vec![Action::Service {
                binding: svc(0),
                site: site("dc2")
            }],
        ]
    );
    assert_eq!(b.state.owner, site("dc2"));
    assert_eq!(b.state.generation, Generation(2));
    let d = b.step();
    assert_eq!(d.reason, "erp-db now served by dc2 at generation 2");
    assert_eq!(b.state.phase, Phase::Steady);
}

#[test]
fn the_commit_is_a_compare_and_set_on_generation_plus_one() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Failover { to: site("dc2") });
    walk(&mut b, 5);
    let before = b.state.clone();
    let d = b.decide();
    let ch = d.state_change.clone().unwrap();
    assert_eq!(
        (ch.expect_generation, ch.next.generation),
        (Generation(1), Generation(2))
    );
    assert_eq!(ch.next.owner, site("dc2"));
    assert_eq!(d.reason, "committed erp-db to dc2 at generation 2");
    // A write decided on an older state is refused.
    let mut moved = before.clone();
    moved.revision += 1;
    assert!(matches!(moved.apply(&ch), Err(CoreError::Stale { .. })));
    // And the service command after it carries the new generation.
    let d = b.step();
    assert_eq!(d.commands[0].generation, Generation(2));
}

#[test]
fn application_fences_run_first_while_the_site_may_still_be_up() {
    let mut b = Bench::pg();
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk(&mut b, 6);
    assert_eq!(
        steps,
        vec![
            vec![fence("dc1", 0)],
            vec![fence("dc1", 1)],
            vec![check("dc1", 0), check("dc1", 1)],
            vec![check("dc2", 2)],
            // unfence_on_promote is off in this plan: straight to the switchover.
            vec![Action::Switchover {
                binding: k("dc2", 3)
            }],
            vec![],
        ]
    );
    assert_eq!(b.state.owner, site("dc2"));
}

#[test]
fn an_application_fence_that_does_not_take_does_not_stop_the_failover() {
    let mut b = Bench::pg();
    b.fail.insert(k("dc1", 0), Outcome::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    let d = b.step();
    assert_eq!(acts(&d), vec![fence("dc1", 1)]);
    assert!(
        d.reason
            .contains("secondary fences did not take (dc1[0] db.demote UNKNOWN)"),
        "{}",
        d.reason
    );
}

#[test]
fn a_required_fence_reading_failed_is_retried_then_halts_before_readiness() {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk_acting(&mut b, 7);
    let fences = vec![fence("dc1", 0), fence("dc1", 1)];
    assert_eq!(steps[0], fences);
    assert_eq!(steps[1], vec![check("dc1", 0), check("dc1", 1)]);
    assert_eq!(steps[2], fences, "retry 2 of 3");
    assert_eq!(steps[3], vec![check("dc1", 0), check("dc1", 1)]);
    assert_eq!(steps[4], fences, "retry 3 of 3");
    assert_eq!(steps[5], vec![check("dc1", 0), check("dc1", 1)]);
    assert!(
        matches!(&steps[6][..], [Action::Alarm { .. }]),
        "{:?}",
        steps[6]
    );
    assert_eq!(
        walk(&mut b, 30).concat(),
        vec![],
        "halted: waits for an operator"
    );
    let t = b.state.transition().unwrap();
    assert_eq!(t.stage, Stage::Verify);
    assert_eq!(
        t.halted.as_deref(),
        Some(
            "dc1 not fenced (power.off FAILED at 14:02:26); 3 attempts made: confirm fenced, retry or abort"
        )
    );
    // Nothing past the fences ever ran.
    assert!(steps.iter().flatten().all(|a| matches!(
        a,
        Action::Fence { .. } | Action::Check { .. } | Action::Alarm { .. }
    )));
}

#[test]
fn the_retry_sentence_says_which_attempt_it_is() {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    b.step();
    let d = b.step();
    assert_eq!(
        d.reason,
        "dc1 not fenced (power.off FAILED at 14:02:02): fences again at 14:02:13 (attempt 2 of 3)"
    );
    assert_eq!(acts(&d), vec![]);
    let d = b.step();
    assert_eq!(
        d.reason,
        "no action: erp-db to dc2: fences step to be retried at 14:02:13"
    );
    b.tick(8);
    let d = b.step();
    assert_eq!(
        d.reason,
        "erp-db to dc2, fences step: dc1 power.off, dc1 vm.stop"
    );
    assert_eq!(acts(&d), vec![fence("dc1", 0), fence("dc1", 1)]);
}

#[test]
fn a_check_that_stays_unknown_is_never_proof_until_an_operator_confirms() {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk_acting(&mut b, 7);
    assert!(
        !steps
            .iter()
            .flatten()
            .any(|a| matches!(a, Action::Switchover { .. }))
    );
    assert!(b.state.transition().unwrap().halted.is_some());
    // Like `stonith_admin --confirm`: recorded with who and why.
    b.intent(IntentKind::ConfirmFenced { site: site("dc1") });
    let d = b.step();
    assert!(
        d.reason
            .starts_with("alice confirmed dc1 fenced for erp-db (test)"),
        "{}",
        d.reason
    );
    assert_eq!(acts(&d), vec![], "still halted until retried");
    let e = b.state.evidence.last().unwrap();
    assert_eq!(
        (&e.site, e.generation, &e.kind),
        (
            &site("dc1"),
            Generation(1),
            &EvidenceKind::OperatorConfirmed {
                by: "alice".into(),
                why: "test".into()
            }
        )
    );
    b.intent(IntentKind::Retry);
    let steps = walk_acting(&mut b, 6);
    // The retried verify still reads UNKNOWN; the confirmation is what stands.
    assert_eq!(steps[0], vec![check("dc1", 0), check("dc1", 1)]);
    assert_eq!(steps[1], vec![check("dc2", 2)]);
    assert_eq!(b.state.owner, site("dc2"));
    // The confirmation carries into the generation it made.
    assert!(
        b.state
            .evidence
            .iter()
            .any(|e| e.site == site("dc1") && e.generation == Generation(2))
    );
}

#[test]
fn a_confirmation_is_for_one_failover_only() {
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&[]));
    // dc1 is lost for good: its BMC never answers.
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.world.insert(k("dc1", 1), Observed::Unknown);
    // The owner cannot be confirmed fenced; once it is being given up, it can.
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.intent(IntentKind::ConfirmFenced { site: site("dc1") });
    for _ in 0..12 {
        b.step();
    }
    assert_eq!(
        (b.state.owner.clone(), b.state.phase.clone()),
        (site("dc2"), Phase::Steady)
    );
    // The confirmation stands for the new owner: no alarm about dc1 in steady state.
    for _ in 0..12 {
        let d = b.step();
        assert!(
            !acts(&d)
                .iter()
                .any(|a| matches!(a, Action::Alarm { site: Some(s), .. } if *s == site("dc1")))
        );
    }
    // A later failover (dc2 to dc3) needs its own proof for dc1.
    b.intent(IntentKind::Failover { to: site("dc3") });
    walk_acting(&mut b, 7);
    let halted = b.state.transition().unwrap().halted.clone().unwrap();
    assert!(
        halted.starts_with("dc1 not fenced (power.off UNKNOWN at"),
        "{halted}"
    );
    b.intent(IntentKind::ConfirmFenced { site: site("dc1") });
    b.intent(IntentKind::Retry);
    for _ in 0..12 {
        b.step();
    }
    assert_eq!(b.state.owner, site("dc3"));
}

#[test]
fn readiness_failing_at_the_target_stops_before_the_switchover() {
    let mut b = Bench::lab();
    b.world.insert(k("dc2", 2), Observed::NotHeld);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk_acting(&mut b, 6);
    assert_eq!(steps[2], vec![check("dc2", 2)]);
    assert_eq!(steps[3], vec![check("dc2", 2)]);
    assert_eq!(steps[4], vec![check("dc2", 2)]);
    assert!(matches!(&steps[5][..], [Action::Alarm { .. }]));
    let t = b.state.transition().unwrap();
    assert_eq!(t.stage, Stage::Readiness);
    assert_eq!(
        t.halted.as_deref(),
        Some("dc2 not ready: replication.lag NOT READY; 3 attempts made")
    );
    assert!(
        !steps
            .iter()
            .flatten()
            .any(|a| matches!(a, Action::Switchover { .. } | Action::Unfence { .. }))
    );
    // Abort: back to steady at the owner, generation unchanged.
    b.intent(IntentKind::Abort);
    let d = b.step();
    assert!(
        d.reason
            .starts_with("alice aborted erp-db's move to dc2 at its readiness step; dc1 owns it"),
        "{}",
        d.reason
    );
    assert_eq!(
        (b.state.phase.clone(), b.state.generation),
        (Phase::Steady, Generation(1))
    );
}

#[test]
fn a_switchover_that_fails_is_retried_a_bounded_number_of_times() {
    let mut b = Bench::lab();
    b.fail.insert(k("dc2", 4), Outcome::Failed);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk_acting(&mut b, 8);
    let sw = vec![Action::Switchover {
        binding: k("dc2", 4),
    }];
    assert_eq!(steps[4..7], [sw.clone(), sw.clone(), sw]);
    assert!(matches!(&steps[7][..], [Action::Alarm { .. }]));
    assert_eq!(b.state.generation, Generation(1), "never committed");
}

#[test]
fn losing_the_lease_mid_failover_stops_everything_and_the_next_leader_repeats_the_step() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    // The fences were sent; the leader loses its lease before their results are judged.
    b.tick(1);
    b.lease_until = Some(b.now);
    let d = b.decide();
    assert_eq!((acts(&d), d.state_change.is_none()), (vec![], true));
    // Not the leader at all: the same.
    b.leader = false;
    let d = b.decide();
    assert_eq!(
        d.reason,
        "no action: not the leader (term 2), so erp-db is left alone"
    );
    // A new leader, term 3, finds the fences step under way and repeats it under its term.
    b.leader = true;
    b.lease_until = None;
    b.term = Term(3);
    let d = b.step();
    assert_eq!(acts(&d), vec![fence("dc1", 0), fence("dc1", 1)]);
    assert!(d.commands.iter().all(|c| c.term == Term(3)));
    assert!(
        d.reason
            .starts_with("new leader (term 3) repeats the fences step"),
        "{}",
        d.reason
    );
    assert_eq!(b.stage(), Some(Stage::Fences));
}

#[test]
fn an_operator_request_made_at_a_stale_generation_is_refused() {
    let mut b = Bench::lab();
    b.state.generation = Generation(7);
    b.intent_at(IntentKind::Failover { to: site("dc2") }, Generation(6));
    let d = b.step();
    assert!(d.reason.starts_with(
        "refused alice's failover to dc2 for erp-db: it was made at generation 6, the plan is at 7"
    ), "{}", d.reason);
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(b.state.intents.is_empty());
}

#[test]
fn a_state_written_from_a_stale_generation_is_refused() {
    let b = Bench::lab();
    let mut ahead = b.state.clone();
    ahead.generation = Generation(2);
    ahead.revision = 5;
    let d = decide(&b.snapshot());
    let ch = d.state_change.unwrap_or(qfence_core::PlanStateChange {
        expect_generation: Generation(1),
        expect_revision: 0,
        next: b.state.clone(),
    });
    let e = ahead.apply(&ch).unwrap_err();
    assert_eq!(
        e.to_string(),
        "stale write refused: decided at generation 1 revision 0, but the plan is at generation 2 revision 5"
    );
    // Nor may a change jump generations.
    let mut jump = ch.clone();
    jump.expect_generation = Generation(1);
    jump.next.generation = Generation(3);
    assert!(matches!(
        b.state.apply(&jump),
        Err(CoreError::GenerationJump { .. })
    ));
}

// ----- triggers -----

#[test]
fn bad_health_restarts_in_place_first_then_fails_over_to_a_ready_site() {
    let mut b = Bench::full();
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    b.step();
    let d = b.step();
    // Bad since the first bad reading (taken at the first step), not since the decision that
    // saw it.
    assert_eq!(
        b.state.health.bad_since,
        Some(T0.plus(Duration::from_secs(1)))
    );
    assert!(
        d.reason.contains("failover due at 14:03:01"),
        "{}",
        d.reason
    );
    // Bad for recovery_after_seconds (30): restart in place, once (max_recoveries 1).
    let mut recovered = 0;
    let mut started = None;
    for _ in 0..80 {
        let d = b.step();
        recovered += acts(&d)
            .iter()
            .filter(|a| matches!(a, Action::Recover { .. }))
            .count();
        if b.state.transition().is_some() {
            started = Some((b.now, d));
            break;
        }
    }
    assert_eq!(recovered, 1);
    let (at, d) = started.expect("failover after failover_after_seconds");
    assert!(at >= T0.plus(Duration::from_secs(61)), "{at}");
    assert!(
        d.reason
            .contains("failing erp-db over from dc1 to dc2: vm.status unhealthy at"),
        "{}",
        d.reason
    );
    assert!(matches!(
        &b.state.transition().unwrap().kind,
        TransitionKind::Failover { .. }
    ));
}

#[test]
fn an_owner_site_that_cannot_be_read_is_lost_and_fails_over_without_a_restart() {
    let mut b = Bench::full();
    b.world.insert(k("dc1", 3), Observed::Unknown);
    let mut all = Vec::new();
    for _ in 0..75 {
        all.extend(acts(&b.step()));
        if b.state.transition().is_some() {
            break;
        }
    }
    assert!(!all.iter().any(|a| matches!(a, Action::Recover { .. })));
    match &b.state.transition().unwrap().kind {
        TransitionKind::Failover { cause } => {
            assert!(cause.starts_with("owner site dc1 lost"), "{cause}")
        }
        k => panic!("{k:?}"),
    }
}

#[test]
fn with_auto_failover_off_qfence_only_says_it_would() {
    let mut plan = fixtures::erp_plan();
    plan.auto_failover = false;
    let mut b = Bench::new("erp-db", plan);
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    let mut alarms = 0;
    let mut last = String::new();
    for _ in 0..90 {
        let d = b.step();
        alarms += acts(&d)
            .iter()
            .filter(|a| matches!(a, Action::Alarm { site: Some(s), .. } if *s == site("dc1")))
            .count();
        last = d.reason.to_string();
    }
    assert_eq!(b.state.phase, Phase::Steady);
    assert_eq!(alarms, 1);
    assert!(
        last.contains("should fail over (vm.status unhealthy at"),
        "{last}"
    );
    assert!(last.contains("but auto_failover is off"), "{last}");
}

#[test]
fn the_target_is_the_first_ready_site_by_priority() {
    // Three sites would need a third instance; with two, priority still decides among the
    // ready ones and an unready one is never chosen.
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    b.world.insert(k("dc2", 2), Observed::NotHeld);
    let mut last = String::new();
    for _ in 0..80 {
        last = b.step().reason.to_string();
    }
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(
        last.contains("no site is ready (dc2: replication.lag NOT READY)"),
        "{last}"
    );
    b.world.remove(&k("dc2", 2));
    for _ in 0..12 {
        b.step();
        if b.state.transition().is_some() {
            break;
        }
    }
    assert_eq!(
        b.state.transition().map(|t| t.target.clone()),
        Some(site("dc2"))
    );
}

#[test]
fn with_three_sites_every_other_site_is_fenced_and_priority_picks_the_target() {
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc3", "dc2"]));
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    // dc3 comes first by priority but is not ready: dc2 is chosen.
    b.world.insert(k("dc3", 2), Observed::NotHeld);
    let mut steps = Vec::new();
    for _ in 0..80 {
        let d = b.step();
        if b.state.transition().is_some() {
            steps.push(acts(&d));
            break;
        }
    }
    assert_eq!(b.state.transition().unwrap().target, site("dc2"));
    steps.extend(walk(&mut b, 1));
    // Every site but the target is fenced and read back: dc1 and dc3.
    assert_eq!(
        steps[0],
        vec![
            fence("dc1", 0),
            fence("dc1", 1),
            fence("dc3", 0),
            fence("dc3", 1)
        ]
    );
    assert_eq!(
        steps[1],
        vec![
            check("dc1", 0),
            check("dc1", 1),
            check("dc3", 0),
            check("dc3", 1)
        ]
    );
    // With dc3 ready too, priority picks dc3.
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc3", "dc2"]));
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    for _ in 0..80 {
        b.step();
        if b.state.transition().is_some() {
            break;
        }
    }
    assert_eq!(b.state.transition().unwrap().target, site("dc3"));
}

#[test]
fn one_unproven_site_of_three_stops_the_move() {
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&[]));
    b.world.insert(k("dc3", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps = walk_acting(&mut b, 7);
    assert!(
        !steps
            .iter()
            .flatten()
            .any(|a| matches!(a, Action::Switchover { .. }))
    );
    let halted = b.state.transition().unwrap().halted.clone().unwrap();
    assert!(
        halted.starts_with("dc3 not fenced (power.off UNKNOWN at"),
        "{halted}"
    );
}

#[test]
fn pause_stops_automatic_action_and_holds_a_transition() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Pause);
    let d = b.step();
    assert!(
        d.reason.starts_with("erp-db paused by alice"),
        "{}",
        d.reason
    );
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    for _ in 0..90 {
        b.step();
    }
    assert_eq!(b.state.phase, Phase::Steady, "no failover while paused");
    // An operator's failover is refused while paused.
    b.intent(IntentKind::Failover { to: site("dc2") });
    assert!(
        b.step()
            .reason
            .contains("the plan is paused: resume it first")
    );
    b.intent(IntentKind::Resume);
    b.step();
    assert!(!b.state.paused);
}

#[test]
fn a_planned_switchover_checks_the_target_before_touching_the_owner() {
    let mut b = Bench::lab();
    b.world.insert(k("dc2", 2), Observed::NotHeld);
    b.intent(IntentKind::Switchover { to: site("dc2") });
    assert_eq!(acts(&b.step()), vec![check("dc2", 2)]);
    let d = b.step();
    assert_eq!(acts(&d), vec![]);
    assert!(
        d.reason
            .contains("switchover of erp-db to dc2 refused, nothing touched: dc2 not ready"),
        "{}",
        d.reason
    );
    assert_eq!(b.state.phase, Phase::Steady);
    // Ready: then the owner is fenced in order and dc2 promoted.
    b.world.remove(&k("dc2", 2));
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let steps = walk(&mut b, 4);
    assert_eq!(steps[0], vec![check("dc2", 2)]);
    assert_eq!(steps[1], vec![fence("dc1", 1)]);
    assert_eq!(steps[2], vec![check("dc1", 0), check("dc1", 1)]);
    assert_eq!(steps[3], vec![check("dc2", 2)]);
}

fn renews(d: &Decision, key: &BindingKey) -> bool {
    acts(d)
        .iter()
        .any(|a| matches!(a, Action::RenewDeadMan { binding, .. } if binding == key))
}

#[test]
fn a_switchover_that_stops_the_vm_renews_the_owners_dead_man_switch_then_disarms_it() {
    let mut b = Bench::full();
    // dc1's host is on (its power.off does not hold) and stays on.
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.step();
    b.tick(9);
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let d = b.step();
    assert_eq!(b.stage(), Some(Stage::Preflight));
    assert!(renews(&d, &k("dc1", 6)), "{d:?}");
    // The VM is stopped, read back and the switch renewed meanwhile: dc1's host stays on,
    // so its watchdog must neither fire nor stand as evidence.
    let mut disarmed = None;
    for _ in 0..40 {
        let d = b.step();
        assert!(b.state.renewals_stopped.is_empty(), "{}", d.reason);
        assert!(
            !acts(&d).contains(&fence("dc1", 0)),
            "no power.off: {}",
            d.reason
        );
        if let Some(a) = acts(&d)
            .into_iter()
            .find(|a| matches!(a, Action::DisarmDeadMan { .. }))
        {
            // Issued with the commit, when no renewal of it is under way.
            assert_eq!(b.state.owner, site("dc2"), "{}", d.reason);
            assert!(!renews(&d, &k("dc1", 6)), "{d:?}");
            disarmed = Some(a);
            break;
        }
        b.tick(4);
    }
    assert_eq!(
        disarmed,
        Some(Action::DisarmDeadMan {
            binding: k("dc1", 6)
        })
    );
    // The new owner arms its own; the old one is never renewed again.
    let mut armed = false;
    for _ in 0..20 {
        let d = b.step();
        assert!(!renews(&d, &k("dc1", 6)), "{d:?}");
        armed |= acts(&d)
            .iter()
            .any(|a| matches!(a, Action::ArmDeadMan { binding, .. } if *binding == k("dc2", 6)));
    }
    assert!(armed);
}

#[test]
fn a_switchover_that_escalates_stops_renewing_the_owners_switch_and_disarms_nothing() {
    let mut b = Bench::full();
    // dc1's host is on and its VM never reads stopped: the resource proof does not come.
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.world.insert(k("dc1", 1), Observed::NotHeld);
    b.step();
    b.tick(9);
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let mut escalated_at = None;
    for _ in 0..40 {
        let d = b.step();
        if escalated_at.is_none() && d.reason.contains("escalating") {
            escalated_at = Some(b.now);
            assert_eq!(b.state.renewals_stopped.get(&site("dc1")), Some(&b.now));
            assert!(acts(&d).contains(&fence("dc1", 0)), "{d:?}");
            // The power fence takes.
            b.world.insert(k("dc1", 0), Observed::Holds);
        } else if escalated_at.is_some() {
            assert!(!renews(&d, &k("dc1", 6)), "{d:?}");
        }
        assert!(
            !acts(&d)
                .iter()
                .any(|a| matches!(a, Action::DisarmDeadMan { .. })),
            "{d:?}"
        );
    }
    assert!(escalated_at.is_some());
    assert_eq!(b.state.owner, site("dc2"));
}

#[test]
fn a_lost_owner_counts_as_fenced_once_its_dead_man_switch_has_provably_fired() {
    let mut b = Bench::full();
    b.step();
    b.step();
    assert!(b.state.dead_man_armed.contains(&site("dc1")));
    // dc1 is cut off: its BMC reads UNKNOWN.
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let started = b.now.plus(Duration::from_secs(1));
    let mut waited = String::new();
    for _ in 0..8 {
        let d = b.step();
        if d.reason.contains("waiting for dc1's dead-man switch") {
            waited = d.reason.to_string();
            break;
        }
    }
    // Renewals stopped at the start; the last could act an interval later; the switch fires
    // 60 s after that; plus a margin of one interval: 80 s.
    let fires = started.plus(Duration::from_secs(80));
    assert!(
        waited.ends_with(&format!(
            "waiting for dc1's dead-man switch to fire by {fires}"
        )),
        "{waited}"
    );
    assert_eq!(b.state.generation, Generation(1));
    while b.now.plus(Duration::from_secs(1)) < fires {
        let d = b.step();
        assert!(
            !acts(&d)
                .iter()
                .any(|a| matches!(a, Action::Switchover { .. })),
            "{d:?}"
        );
    }
    let d = b.step();
    assert!(
        d.reason.starts_with(&format!(
            "dc1 counts as fenced: its dead-man switch fired by {fires}"
        )),
        "{}",
        d.reason
    );
    assert!(matches!(
        b.state.evidence.last().unwrap().kind,
        EvidenceKind::DeadManExpired { .. }
    ));
    for _ in 0..6 {
        b.step();
    }
    assert_eq!(b.state.owner, site("dc2"));
}

#[test]
fn a_dead_man_switch_never_seen_armed_proves_nothing() {
    let mut b = Bench::full();
    b.fail.insert(k("dc1", 6), Outcome::Failed);
    b.step();
    b.step();
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..200 {
        b.step();
    }
    assert_eq!(b.state.generation, Generation(1));
    assert!(b.state.transition().unwrap().halted.is_some());
}

// ----- persistence, sentences, dry run -----

#[test]
fn the_plan_state_is_stored_versioned_and_reads_back() {
    let mut b = Bench::lab();
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    let stored = StoredPlanState::from(b.state.clone());
    let json = serde_json::to_value(&stored).unwrap();
    assert_eq!(json["v"], "1");
    assert_eq!(json["phase"]["phase"], "transition");
    assert_eq!(json["phase"]["stage"], "fences");
    let back: StoredPlanState = serde_json::from_value(json).unwrap();
    assert_eq!(back.into_current(), b.state);
}

#[test]
fn every_decision_has_exactly_one_sentence() {
    let mut b = Bench::full();
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..20 {
        let d = b.step();
        assert!(!d.reason.is_empty());
        assert!(
            !d.reason.contains('\n') && !d.reason.contains(". "),
            "{}",
            d.reason
        );
    }
}

#[test]
fn the_dry_run_lists_every_step_of_a_failover_in_order_with_where_it_may_run() {
    let cfg = fixtures::lab();
    let r = dry_run(&cfg, "erp-db", &BTreeMap::new(), "dc2", MoveKind::Failover).unwrap();
    assert!(r.completes, "{}", r.outcome);
    let lines = r.lines();
    let expected = [
        "Dry run: failover of erp-db from dc1 to dc2 (assuming every command is done and every check holds)",
        "  1. fences              fence       dc1      bmc-dc1 power.off pve-dc1-01  run from: dc1, dc2",
        "  2. fences              fence       dc1      pve-dc1 vm.stop pve-dc1-01/101  run from: dc1",
        "  3. verify              check       dc1      bmc-dc1 power.off pve-dc1-01  run from: dc1, dc2",
        "  4. verify              check       dc1      pve-dc1 vm.stop pve-dc1-01/101  run from: dc1",
        "  5. readiness           check       dc2      pve-dc2 replication.lag 101-1  run from: dc2",
        "  6. unfence             unfence     dc2      bmc-dc2 power.on pve-dc2-01  run from: dc2, dc1",
        "  7. unfence             unfence     dc2      pve-dc2 vm.start pve-dc2-01/101  run from: dc2",
        "  8. switchover          switchover  dc2      pve-dc2 vm.start pve-dc2-01/101  run from: dc2",
        "  9. commit              commit      dc2      owner dc2 at generation 2 (compare-and-set on generation 1)",
        " 10. service             service     -        fgt-edge vip.own vip-erp-db  run from: dc1, dc2  point at dc2",
        "Completes: erp-db now served by dc2 at generation 2",
    ];
    assert_eq!(lines, expected);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["steps"][0]["run_from"],
        serde_json::json!(["dc1", "dc2"])
    );
}

#[test]
fn the_dry_run_shows_where_a_move_would_stop() {
    let cfg = fixtures::lab();
    let assumed: BTreeMap<_, _> = [parse_assumption("dc1[0]=unknown").unwrap()].into();
    assert_eq!(
        assumed.get(&BindingPos::site(&site("dc1"), 0)),
        Some(&Observed::Unknown)
    );
    let r = dry_run(&cfg, "erp-db", &assumed, "dc2", MoveKind::Failover).unwrap();
    assert!(!r.completes);
    assert!(
        r.lines()[0].ends_with("every check holds, except dc1[0]=unknown)"),
        "{:?}",
        r.lines()
    );
    assert!(
        r.outcome.contains("stopped at its verify step"),
        "{}",
        r.outcome
    );
    assert!(!r.steps.iter().any(|s| s.action == "switchover"));
    assert!(matches!(
        dry_run(&cfg, "erp-db", &BTreeMap::new(), "dc1", MoveKind::Failover),
        Err(CoreError::AlreadyOwner { .. })
    ));
    assert_eq!(
        parse_assumption("dc1[x]=unknown").unwrap_err(),
        "\"dc1[x]\" is not a binding: write SITE[INDEX] or service[INDEX], e.g. dc1[0]"
    );
    assert!(parse_assumption("dc1[0]=maybe").is_err());
    let nine: BTreeMap<_, _> = [parse_assumption("dc1[9]=holds").unwrap()].into();
    let e = dry_run(&cfg, "erp-db", &nine, "dc2", MoveKind::Failover).unwrap_err();
    assert_eq!(e.to_string(), "plan \"erp-db\" has no binding dc1[9]");
    let e = dry_run(&cfg, "erp-db", &BTreeMap::new(), "dc9", MoveKind::Failover).unwrap_err();
    assert_eq!(
        e.to_string(),
        "site \"dc9\" is not a site of plan \"erp-db\" (its sites: dc1, dc2)"
    );
}

/// Regression (found by the failover_scale benchmark): an orchestrator whose health checks were
/// queued behind hundreds of others saw the owner's last reading go stale and failed a healthy
/// site over. A stale reading with its check still on the way is waited for; only the check's
/// own answer (UNKNOWN when the site is gone) makes the owner lost.
#[test]
fn a_late_orchestrator_does_not_read_a_healthy_owner_as_lost() {
    let mut b = Bench::full();
    for _ in 0..3 {
        b.step();
    }
    assert!(b.state.transition().is_none());
    eprintln!(
        "The runtime falls behind on the owner's health check, which stays queued for two \
         minutes, while the other sites' checks are answered."
    );
    let mut all = Vec::new();
    for _ in 0..120 {
        b.tick(1);
        let d = b.decide();
        for c in &d.commands {
            match (&c.action, c.action.binding()) {
                (_, Some(key)) if *key == k("dc1", 3) => {
                    b.in_flight.insert(c.op.clone(), key.clone());
                }
                (Action::Check { binding, .. }, _) => {
                    let v = b.world.get(binding).copied().unwrap_or(Observed::Holds);
                    b.obs.insert(binding.clone(), Observation::new(v, b.now));
                }
                _ => {}
            }
        }
        assert!(!d.reason.contains("health bad"), "{}", d.reason);
        all.extend(acts(&d));
    }
    assert!(b.state.transition().is_none(), "{:?}", b.state.transition());
    assert!(
        !all.iter().any(|a| matches!(
            a,
            Action::Fence { .. }
                | Action::Unfence { .. }
                | Action::Recover { .. }
                | Action::Switchover { .. }
                | Action::Service { .. }
        )),
        "nothing but routine work while late: {all:?}"
    );
    eprintln!("The owner's health check finally answers UNKNOWN: now the owner is lost.");
    b.in_flight.clear();
    b.world.insert(k("dc1", 3), Observed::Unknown);
    for _ in 0..75 {
        b.step();
        if b.state.transition().is_some() {
            break;
        }
    }
    match &b.state.transition().expect("a lost owner fails over").kind {
        TransitionKind::Failover { cause } => {
            assert!(cause.starts_with("owner site dc1 lost"), "{cause}")
        }
        k => panic!("{k:?}"),
    }
}

// ----- site maintenance -----

fn put_in_maintenance(b: &mut Bench, s: &str) {
    let name = b.plan.as_str().to_owned();
    let next = b
        .state
        .with_maintenance(b.plan(), &name, &site(s), true)
        .expect("accepted");
    b.state = next;
}

#[test]
fn the_owner_and_the_target_of_a_move_cannot_go_into_maintenance() {
    let mut b = Bench::lab();
    let plan = b.plan().clone();
    assert_eq!(
        b.state
            .with_maintenance(&plan, "erp-db", &site("dc1"), true)
            .unwrap_err()
            .to_string(),
        "dc1 owns erp-db: switch over to another site before putting it in maintenance"
    );
    assert_eq!(
        b.state
            .with_maintenance(&plan, "erp-db", &site("dc7"), true)
            .unwrap_err(),
        CoreError::UnknownSite {
            plan: "erp-db".into(),
            site: "dc7".into(),
            sites: "dc1, dc2".into()
        }
    );
    // Taking the owner "out" is harmless: nothing changes.
    assert_eq!(
        b.state
            .with_maintenance(&plan, "erp-db", &site("dc1"), false)
            .unwrap(),
        b.state
    );
    b.intent(IntentKind::Failover { to: site("dc2") });
    b.step();
    assert_eq!(b.stage(), Some(Stage::Fences));
    assert_eq!(
        b.state
            .with_maintenance(&plan, "erp-db", &site("dc2"), true)
            .unwrap_err()
            .to_string(),
        "dc2 is the target of erp-db's move under way: abort it or let it finish before \
         putting dc2 in maintenance"
    );
    // Once the move is done the old owner, now a standby, may go into maintenance.
    walk(&mut b, 12);
    assert_eq!(b.state.owner, site("dc2"));
    assert_eq!(b.state.phase, Phase::Steady);
    let next = b
        .state
        .with_maintenance(&plan, "erp-db", &site("dc1"), true)
        .unwrap();
    assert!(next.in_maintenance(&site("dc1")));
    assert_eq!(
        next.with_maintenance(&plan, "erp-db", &site("dc1"), false)
            .unwrap()
            .maintenance,
        Default::default()
    );
}

#[test]
fn a_site_in_maintenance_is_checked_and_shown_but_raises_no_alarm() {
    let mut b = Bench::lab();
    put_in_maintenance(&mut b, "dc2");
    // The same checks as ever: dc1's health, dc2's fences and readiness.
    let d = b.step();
    assert_eq!(
        acts(&d),
        vec![
            check("dc1", 3),
            check("dc2", 0),
            check("dc2", 1),
            check("dc2", 2),
            // The service binding is kept: checked every interval.
            check_svc(0, "dc1")
        ]
    );
    let d = b.step();
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1; dc2 in maintenance, fenced \
         (power.off FENCED at 14:02:01), ready (replication.lag at 14:02:01)"
    );
    // An operator at work powers dc2 on, its VM too: shown, but no alarm.
    b.world.insert(k("dc2", 0), Observed::NotHeld);
    b.world.insert(k("dc2", 1), Observed::NotHeld);
    b.tick(8);
    b.step();
    let d = b.step();
    assert_eq!(acts(&d), vec![]);
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1; dc2 in maintenance, not fenced \
         (power.off FAILED at 14:02:11), ready (replication.lag at 14:02:11)"
    );
    assert!(b.state.alarmed.is_empty());
    // Out of maintenance, the same reading raises the alarm at once.
    b.state.maintenance.clear();
    let d = b.step();
    assert_eq!(
        acts(&d),
        vec![Action::Alarm {
            site: Some(site("dc2")),
            detail: "dc2 not fenced (power.off FAILED at 14:02:11)".into()
        }]
    );
}

#[test]
fn a_switchover_or_failover_to_a_site_in_maintenance_is_refused_and_touches_nothing() {
    let mut b = Bench::lab();
    b.step();
    put_in_maintenance(&mut b, "dc2");
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let d = b.step();
    assert_eq!(acts(&d), vec![]);
    assert_eq!(
        d.reason,
        "refused alice's switchover to dc2 for erp-db: dc2 is in maintenance: take it out of \
         maintenance first; erp-db owned by dc1 at generation 1; dc2 in maintenance, fenced \
         (power.off FENCED at 14:02:01), ready (replication.lag at 14:02:01)"
    );
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(b.state.intents.is_empty());
    b.intent(IntentKind::Failover { to: site("dc2") });
    let d = b.step();
    assert!(
        d.reason.starts_with(
            "refused alice's failover to dc2 for erp-db: dc2 is in maintenance: take it out \
             of maintenance first; "
        ),
        "{}",
        d.reason
    );
    assert_eq!(b.state.phase, Phase::Steady);
    // Out of maintenance, the same request goes through.
    b.state.maintenance.clear();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    b.step();
    assert_eq!(b.stage(), Some(Stage::Preflight));
}

#[test]
fn an_automatic_failover_with_the_only_other_site_in_maintenance_does_nothing_and_says_why() {
    let mut b = Bench::lab();
    put_in_maintenance(&mut b, "dc2");
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    let mut all = Vec::new();
    let mut last = String::new();
    for _ in 0..90 {
        let d = b.step();
        all.extend(acts(&d));
        last = d.reason.to_string();
    }
    assert_eq!(b.state.phase, Phase::Steady);
    // Nothing is fenced, nothing promoted, no alarm.
    assert!(
        !all.iter().any(|a| matches!(
            a,
            Action::Fence { .. } | Action::Switchover { .. } | Action::Alarm { .. }
        )),
        "{all:?}"
    );
    assert!(
        last.starts_with("no action: erp-db should fail over (vm.status unhealthy at "),
        "{last}"
    );
    assert!(
        last.contains(") but no site to fail over to: dc2 is in maintenance; "),
        "{last}"
    );
}

#[test]
fn the_failover_order_is_priority_then_name_without_the_owner_or_a_site_in_maintenance() {
    // The one order both the core's automatic failover and the API (a failover that names no
    // target goes to the first candidate) take.
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc3"]));
    let order = qfence_core::failover_order(b.plan(), &b.state);
    assert_eq!(order.candidates, vec![site("dc3"), site("dc2")]);
    assert!(order.in_maintenance.is_empty());
    put_in_maintenance(&mut b, "dc3");
    let order = qfence_core::failover_order(b.plan(), &b.state);
    assert_eq!(order.candidates, vec![site("dc2")]);
    assert_eq!(order.in_maintenance, vec![site("dc3")]);
    put_in_maintenance(&mut b, "dc2");
    let order = qfence_core::failover_order(b.plan(), &b.state);
    assert!(order.candidates.is_empty());
    assert_eq!(order.in_maintenance, vec![site("dc3"), site("dc2")]);
}

#[test]
fn an_automatic_failover_picks_the_next_site_when_the_first_is_in_maintenance() {
    // dc3 comes first by priority, is ready, and is in maintenance: dc2 is chosen.
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc3", "dc2"]));
    put_in_maintenance(&mut b, "dc3");
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    let mut started = None;
    for _ in 0..80 {
        let d = b.step();
        if b.state.transition().is_some() {
            started = Some(d);
            break;
        }
    }
    let d = started.expect("a failover");
    assert_eq!(b.state.transition().unwrap().target, site("dc2"));
    assert!(
        d.reason
            .contains("failing erp-db over from dc1 to dc2: vm.status unhealthy at"),
        "{}",
        d.reason
    );
    // A site in maintenance is still fenced and read back like every site given up.
    let steps = walk(&mut b, 1);
    assert_eq!(
        steps[0],
        vec![
            check("dc1", 0),
            check("dc1", 1),
            check("dc3", 0),
            check("dc3", 1)
        ]
    );
    walk(&mut b, 10);
    assert_eq!(b.state.owner, site("dc2"));
    assert!(b.state.in_maintenance(&site("dc3")));
    // Not ready at dc2, dc3 in maintenance: both named.
    let mut b = Bench::new("erp-db", fixtures::erp_plan_three(&["dc3", "dc2"]));
    put_in_maintenance(&mut b, "dc3");
    b.world.insert(k("dc1", 3), Observed::NotHeld);
    b.world.insert(k("dc2", 2), Observed::NotHeld);
    let mut last = String::new();
    for _ in 0..80 {
        last = b.step().reason.to_string();
    }
    assert_eq!(b.state.phase, Phase::Steady);
    assert!(
        last.contains(
            "but no site is ready (dc2: replication.lag NOT READY), and dc3 is in maintenance"
        ),
        "{last}"
    );
}

#[test]
fn a_plan_state_written_before_maintenance_existed_reads_back_with_no_site_in_it() {
    // A document as a leader without the field wrote it.
    let old = r#"{"v":"1","owner":"dc2","generation":4,"owner_since":1699970520000,
        "revision":17,"phase":{"phase":"steady"},"paused":false,
        "health":{"bad_since":null,"recoveries":0,"last_recovery":null,"alarmed":false},
        "evidence":[],"renewals_stopped":{},"dead_man_armed":["dc2"],"alarmed":[],
        "intents":[]}"#;
    let s = serde_json::from_str::<StoredPlanState>(old)
        .unwrap()
        .into_current();
    assert_eq!(s.owner, site("dc2"));
    assert_eq!((s.generation, s.revision), (Generation(4), 17));
    assert!(s.maintenance.is_empty());
    // Written again, the field is there and reads back.
    let mut s2 = s.clone();
    s2.maintenance.insert(site("dc1"));
    let json = serde_json::to_value(StoredPlanState::from(s2.clone())).unwrap();
    assert_eq!(json["maintenance"], serde_json::json!(["dc1"]));
    let back: StoredPlanState = serde_json::from_value(json).unwrap();
    assert_eq!(back.into_current(), s2);
}

// ----- the verdicts a decision shows beside its sentence -----

/// What a sentence says of `site`: `Some(true)` for "dc1 fenced (...)", "dc1 confirmed fenced
/// by ..." or "dc1 fenced by its dead-man switch", `Some(false)` for "dc1 not fenced (...)",
/// `None` when no clause starts with the site.
fn says_fenced(reason: &str, site: &str) -> Option<bool> {
    let reason = reason.strip_prefix("no action: ").unwrap_or(reason);
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

/// The decision's verdict of `s`.
fn shown(d: &Decision, s: &str) -> Verdict {
    d.sites
        .iter()
        .find(|v| v.site == site(s))
        .unwrap_or_else(|| panic!("{s} has a verdict in {d:?}"))
        .verdict
}

/// Asserts the decision's verdicts name every site and agree with its sentence; returns how
/// many sites the sentence judged.
fn agrees(b: &Bench, d: &Decision) -> usize {
    let sites: Vec<_> = b.plan().sites().cloned().collect();
    assert_eq!(
        d.sites.iter().map(|v| v.site.clone()).collect::<Vec<_>>(),
        sites
    );
    let mut judged = 0;
    for s in &sites {
        if let Some(said) = says_fenced(&d.reason, s.as_str()) {
            assert_eq!(
                shown(d, s.as_str()) == Verdict::Fenced,
                said,
                "{s}: {:?} beside {:?}",
                shown(d, s.as_str()),
                d.reason
            );
            judged += 1;
        }
    }
    judged
}

#[test]
fn the_new_owner_is_never_shown_fenced_by_a_reading_from_before_its_promotion() {
    let mut b = Bench::lab();
    b.step();
    let d = b.step();
    assert_eq!(agrees(&b, &d), 1, "{}", d.reason);
    assert_eq!(shown(&d, "dc2"), Verdict::Fenced, "{}", d.reason);
    // dc1 owns: its fences are not read in steady state, nothing shows it fenced.
    assert_eq!(shown(&d, "dc1"), Verdict::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..8 {
        let d = b.step();
        agrees(&b, &d);
        if b.state.owner == site("dc2") {
            // dc2's power.off reading (Holds, a few seconds old, fresh) was taken before it
            // was powered on and promoted: it says nothing of the owner now.
            assert_ne!(shown(&d, "dc2"), Verdict::Fenced, "{}", d.reason);
        }
    }
    assert_eq!(b.state.owner, site("dc2"));
    assert!(b.state.owner_since > b.obs[&k("dc2", 0)].at);
    assert_eq!(
        verdict(&b, "dc2"),
        Verdict::Fenced,
        "the rule alone would still say FENCED"
    );
    let d = b.step();
    assert_eq!(agrees(&b, &d), 1, "{}", d.reason);
    assert_eq!(shown(&d, "dc1"), Verdict::Fenced);
    assert_eq!(shown(&d, "dc2"), Verdict::Unknown);
    // A reading since its promotion counts: the host is on, "not fenced".
    b.read("dc2", 0, Observed::NotHeld);
    let d = b.step();
    agrees(&b, &d);
    assert_eq!(shown(&d, "dc2"), Verdict::Failed);
}

#[test]
fn a_fence_proven_by_evidence_is_fenced_in_the_sentence_and_the_verdict_alike() {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..300 {
        let d = b.step();
        agrees(&b, &d);
        if b.state.transition().is_some_and(|t| t.halted.is_some()) {
            break;
        }
    }
    assert!(b.state.transition().unwrap().halted.is_some());
    b.intent(IntentKind::ConfirmFenced { site: site("dc1") });
    let d = b.step();
    agrees(&b, &d);
    b.intent(IntentKind::Retry);
    for _ in 0..10 {
        let d = b.step();
        agrees(&b, &d);
    }
    assert_eq!(b.state.owner, site("dc2"));
    assert_eq!(b.state.phase, Phase::Steady);
    // dc1's BMC still reads UNKNOWN; the confirmation stands, and both say so.
    let d = b.step();
    assert_eq!(agrees(&b, &d), 1, "{}", d.reason);
    assert!(
        d.reason.contains("dc1 confirmed fenced by alice (test)"),
        "{}",
        d.reason
    );
    let dc1 = d.sites.iter().find(|v| v.site == site("dc1")).unwrap();
    assert_eq!(dc1.verdict, Verdict::Fenced);
    assert!(matches!(
        dc1.basis,
        qfence_core::rules::Basis::Evidence(EvidenceKind::OperatorConfirmed { .. })
    ));
    assert_eq!(dc1.readings[0].verdict, Verdict::Unknown);
}

#[test]
fn a_verify_step_judges_readings_since_it_began_and_shows_that_verdict() {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let mut judged = 0;
    for _ in 0..40 {
        let d = b.step();
        judged += agrees(&b, &d);
    }
    assert!(judged > 0, "the retries' sentences name dc1");
    assert!(b.state.transition().unwrap().halted.is_some());
}

#[test]
fn a_verify_step_that_cannot_read_back_shows_unknown_though_an_older_reading_holds() {
    let mut plan = fixtures::erp_plan();
    plan.freshness = Duration::from_secs(120);
    let mut b = Bench::new("erp-db", plan);
    // dc1's BMC was read off a moment before the failover (still fresh: 120 s here), and its
    // read-back in the verify step never answers: only readings since the step began prove
    // anything.
    b.read("dc1", 0, Observed::Holds);
    let before = b.obs[&k("dc1", 0)].clone();
    b.intent(IntentKind::Failover { to: site("dc2") });
    let mut contradiction = None;
    for _ in 0..300 {
        b.tick(1);
        let d = b.decide();
        b.run(&d);
        for c in &d.commands {
            if c.action == check("dc1", 0) {
                b.obs.insert(k("dc1", 0), before.clone());
                b.results.remove(&c.op);
            }
        }
        agrees(&b, &d);
        if says_fenced(&d.reason, "dc1") == Some(false) {
            contradiction = Some(d);
            break;
        }
    }
    let d = contradiction.expect("the verify step says dc1 is not proven");
    assert!(
        d.reason
            .starts_with("dc1 not fenced (power.off UNKNOWN at "),
        "{}",
        d.reason
    );
    assert_eq!(shown(&d, "dc1"), Verdict::Unknown);
    // What the status used to show: the site rule judged again without the step's start.
    assert_eq!(verdict(&b, "dc1"), Verdict::Fenced);
}

// ----- a planned switchover stops the resource, not the host -----

/// The lab with dc1's host on (its power.off reads not holding, as a live host does), asked
/// to switch over to dc2, walked through preflight.
fn switchover_with_dc1_up() -> Bench {
    let mut b = Bench::lab();
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.step();
    b.step();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    assert_eq!(acts(&b.step()), vec![check("dc2", 2)], "preflight");
    b
}

fn never_powers_off(steps: &[Vec<Action>], s: &str) {
    assert!(
        !steps.iter().flatten().any(|a| *a == fence(s, 0)),
        "{s}'s power.off was run: {steps:?}"
    );
}

#[test]
fn a_planned_switchover_stops_the_vm_and_leaves_the_old_owners_host_on() {
    let mut b = switchover_with_dc1_up();
    let mut steps = Vec::new();
    let mut sentences = Vec::new();
    for _ in 0..7 {
        let d = b.step();
        steps.push(acts(&d));
        sentences.push(d.reason.to_string());
    }
    assert_eq!(
        steps,
        vec![
            // Only dc1's resource-level fence: vm.stop.
            vec![fence("dc1", 1)],
            // Every fence read back; vm.stop decides.
            vec![check("dc1", 0), check("dc1", 1)],
            vec![check("dc2", 2)],
            vec![
                Action::Unfence {
                    binding: k("dc2", 0)
                },
                Action::Unfence {
                    binding: k("dc2", 1)
                }
            ],
            vec![Action::Switchover {
                binding: k("dc2", 4)
            }],
            vec![],
            vec![Action::Service {
                binding: svc(0),
                site: site("dc2")
            }],
        ]
    );
    assert_eq!(
        sentences[5],
        "committed erp-db to dc2 at generation 2; the switchover stopped the resource (dc1 \
         vm.stop FENCED) and did not power the site off"
    );
    let t = b.state.transition().expect("service step");
    assert!(!t.escalated);
    assert_eq!(
        t.fenced,
        vec![k("dc1", 1)],
        "an abort would undo vm.stop only"
    );
    assert_eq!(b.state.owner, site("dc2"));
    // Steady at dc2: dc1 is a standby whose resource is stopped, with no alarm.
    let mut all = Vec::new();
    let mut seen = 0;
    for _ in 0..30 {
        let d = b.step();
        all.push(acts(&d));
        if d.reason.starts_with("no action: erp-db owned by dc2") {
            assert!(
                d.reason
                    .contains("dc1 resource stopped (vm.stop FENCED at "),
                "{}",
                d.reason
            );
            let dc1 = d.sites.iter().find(|v| v.site == site("dc1")).unwrap();
            assert_eq!(dc1.verdict, Verdict::Fenced);
            assert_eq!(dc1.basis, qfence_core::rules::Basis::ResourceStopped);
            seen += 1;
        }
    }
    assert!(seen > 10, "steady at dc2 {seen} times");
    never_powers_off(&all, "dc1");
    assert!(
        !all.iter()
            .flatten()
            .any(|a| matches!(a, Action::Alarm { .. })),
        "{all:?}"
    );
    assert!(b.state.alarmed.is_empty());
}

#[test]
fn a_switchover_whose_vm_does_not_read_stopped_escalates_to_the_power_fence() {
    let mut b = switchover_with_dc1_up();
    // vm.stop "succeeds" but the read-back shows the VM still running.
    b.world.insert(k("dc1", 1), Observed::NotHeld);
    assert_eq!(acts(&b.step()), vec![fence("dc1", 1)]);
    assert_eq!(acts(&b.step()), vec![check("dc1", 0), check("dc1", 1)]);
    let d = b.step();
    // Escalated at once, in the same decision: the required fences, as a failover.
    assert_eq!(acts(&d), vec![fence("dc1", 0), fence("dc1", 1)]);
    assert!(
        d.reason
            == ("erp-db to dc2: dc1's resource not proven stopped (vm.stop FAILED at 14:02:05): \
             escalating to the required fences, verified as in a failover; erp-db to dc2, \
             fences step: dc1 power.off, dc1 vm.stop"),
        "{}",
        d.reason
    );
    let t = b.state.transition().unwrap();
    assert!(t.escalated);
    assert_eq!(t.fenced, vec![k("dc1", 1), k("dc1", 0)]);
    // The host powers off; its power.off reads holding: the move goes on as a failover's.
    b.world.insert(k("dc1", 0), Observed::Holds);
    assert_eq!(acts(&b.step()), vec![check("dc1", 0), check("dc1", 1)]);
    assert_eq!(acts(&b.step()), vec![check("dc2", 2)]);
    assert_eq!(b.stage(), Some(Stage::Readiness));
    let d = walk_acting(&mut b, 3);
    assert!(
        d.iter()
            .flatten()
            .any(|a| matches!(a, Action::Service { .. }))
    );
    assert_eq!(b.state.owner, site("dc2"));
}

#[test]
fn a_switchover_whose_vm_stop_answers_unknown_escalates_rather_than_promote() {
    let mut b = switchover_with_dc1_up();
    b.world.insert(k("dc1", 1), Observed::Unknown);
    b.step();
    b.step();
    let d = b.step();
    assert!(acts(&d).contains(&fence("dc1", 0)), "{d:?}");
    assert!(b.state.transition().unwrap().escalated);
    // Until dc1's power.off holds, nothing is promoted.
    for _ in 0..60 {
        let d = b.step();
        assert!(
            !acts(&d)
                .iter()
                .any(|a| matches!(a, Action::Switchover { .. } | Action::Unfence { .. })),
            "{d:?}"
        );
    }
}

#[test]
fn a_switchover_does_not_stand_on_a_stopped_vm_while_a_restart_is_under_way_there() {
    let mut b = Bench::full();
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.step();
    b.step();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    for _ in 0..5 {
        if b.stage() == Some(Stage::Verify) {
            break;
        }
        b.step();
    }
    assert_eq!(b.stage(), Some(Stage::Verify));
    // A restart in place (vm.start, recovery) sent before the move is still on its way.
    b.in_flight
        .insert(OpId("erp-db/late-recover".into()), k("dc1", 5));
    let d = b.step();
    assert!(
        d.reason
            .contains("dc1's resource may be starting again (dc1 vm.start is under way)"),
        "{}",
        d.reason
    );
    assert!(acts(&d).contains(&fence("dc1", 0)), "escalated: {d:?}");
}

#[test]
fn a_failover_still_needs_the_required_fence_when_the_vm_reads_stopped() {
    let mut b = Bench::lab();
    // dc1's VM reads stopped but its host's power is UNKNOWN (its BMC unreachable).
    b.world.insert(k("dc1", 0), Observed::Unknown);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps: Vec<Vec<Action>> = (0..200).map(|_| acts(&b.step())).collect();
    assert_eq!(steps[0], vec![fence("dc1", 0), fence("dc1", 1)]);
    assert!(
        !steps
            .iter()
            .flatten()
            .any(|a| matches!(a, Action::Switchover { .. } | Action::Unfence { .. })),
        "a failover never stands on the resource-level proof: {steps:?}"
    );
    let t = b.state.transition().expect("still moving");
    assert!(!t.escalated);
    assert!(
        t.halted
            .as_deref()
            .is_some_and(|h| h.contains("dc1 not fenced (power.off UNKNOWN")),
        "{t:?}"
    );
}

#[test]
fn a_standby_with_its_resource_stopped_reads_so_and_raises_no_alarm() {
    let mut b = Bench::lab();
    // dc2's host is on (a hot standby), its VM stopped.
    b.world.insert(k("dc2", 0), Observed::NotHeld);
    b.step();
    let d = b.step();
    assert_eq!(
        d.reason,
        "no action: erp-db owned by dc1 at generation 1; dc2 resource stopped (vm.stop \
         FENCED at 14:02:01), ready (replication.lag at 14:02:01)"
    );
    assert!(b.state.alarmed.is_empty());
    // Its VM starts behind qfence's back: now it is not safe, and says so once.
    b.world.insert(k("dc2", 1), Observed::NotHeld);
    b.tick(9);
    b.step();
    let d = b.step();
    assert_eq!(
        acts(&d),
        vec![Action::Alarm {
            site: Some(site("dc2")),
            detail: "dc2 not fenced (power.off FAILED at 14:02:12)".into()
        }]
    );
}
