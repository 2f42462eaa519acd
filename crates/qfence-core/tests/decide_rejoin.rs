//! After a planned switchover the old owner's stopped copy is rejoined as a replica of the
//! new owner (ADR 0023): once, after the commit (so after the promotion was read back), at
//! the old owner only; a failover leaves it fenced for an operator.

mod bench;
mod sim;

use qfence_core::{Action, IntentKind, Observed};
use qfence_model::Role;
use sim::fixtures::{self, site};

use bench::*;

/// The lab's erp-db with a `db.rejoin` binding at each site: its index at dc1.
fn with_rejoin() -> (Bench, usize) {
    let mut plan = fixtures::erp_plan();
    let mut at = 0;
    for dc in ["dc1", "dc2"] {
        let inst = plan.instances.get_mut(&site(dc)).unwrap();
        inst.push(fixtures::bind(
            &format!("pg-{dc}"),
            "db.rejoin",
            "self",
            Role::Rejoin,
        ));
        at = inst.len() - 1;
    }
    let mut b = Bench::new("erp-db", plan);
    // dc1's host is on: its power.off reads not holding, as a live host does.
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.step();
    b.step();
    (b, at)
}

fn rejoins(steps: &[Vec<Action>]) -> Vec<(usize, Action)> {
    steps
        .iter()
        .enumerate()
        .flat_map(|(i, a)| a.iter().map(move |a| (i, a.clone())))
        .filter(|(_, a)| matches!(a, Action::Rejoin { .. }))
        .collect()
}

#[test]
fn a_committed_switchover_rejoins_the_old_owner_once_after_the_promotion() {
    let (mut b, at) = with_rejoin();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    let mut steps = Vec::new();
    let mut sentences = Vec::new();
    let mut promoted = None;
    let mut steady = None;
    for i in 0..30 {
        let d = b.step();
        if d.commands
            .iter()
            .any(|c| matches!(c.action, Action::Switchover { .. }))
        {
            promoted.get_or_insert(i);
        }
        if b.state.transition().is_none() {
            steady.get_or_insert(i);
        }
        steps.push(acts(&d));
        sentences.push(d.reason.to_string());
    }
    let r = rejoins(&steps);
    assert_eq!(
        r.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        vec![Action::Rejoin {
            binding: k("dc1", at)
        }],
        "one rejoin, at dc1 only: {steps:?}"
    );
    let (when, _) = r[0];
    let (promoted, steady) = (promoted.unwrap(), steady.unwrap());
    assert!(
        when > promoted && when >= steady,
        "{when} {promoted} {steady}"
    );
    assert_eq!(b.state.owner, site("dc2"));
    assert!(b.state.rejoin.is_empty());
    assert!(
        sentences[when].contains(&format!(
            "rejoining dc1 as a replica of dc2 (dc1[{at}] db.rejoin); erp-db owned by dc2"
        )),
        "{}",
        sentences[when]
    );
}

#[test]
fn a_failover_never_rejoins_the_old_owner() {
    let (mut b, _) = with_rejoin();
    // dc1 is lost: its BMC reads it off.
    b.world.insert(k("dc1", 0), Observed::Holds);
    b.intent(IntentKind::Failover { to: site("dc2") });
    let steps: Vec<_> = (0..40).map(|_| acts(&b.step())).collect();
    assert_eq!(b.state.owner, site("dc2"), "{steps:?}");
    assert!(rejoins(&steps).is_empty(), "{steps:?}");
    assert!(b.state.rejoin.is_empty());
}

#[test]
fn an_escalated_switchover_never_rejoins_the_old_owner() {
    let (mut b, _) = with_rejoin();
    b.intent(IntentKind::Switchover { to: site("dc2") });
    // vm.stop "succeeds" but the VM still runs: the move escalates; the host then powers off.
    b.world.insert(k("dc1", 1), Observed::NotHeld);
    let mut steps = Vec::new();
    for _ in 0..40 {
        if b.state.transition().is_some_and(|t| t.escalated) {
            b.world.insert(k("dc1", 0), Observed::Holds);
        }
        steps.push(acts(&b.step()));
    }
    assert_eq!(b.state.owner, site("dc2"), "{steps:?}");
    assert!(rejoins(&steps).is_empty(), "{steps:?}");
}
