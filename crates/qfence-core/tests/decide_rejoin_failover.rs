//! After a failover the old owner stays fenced until it is let rejoin (ADR 0023, "After a
//! failover"): by an operator's `rejoin` intent, refused with why when it is unsafe, or with
//! `rejoin: auto` once, when it answers again. Until it rejoined it is never a
//! failover target nor switched over to.

mod bench;
mod sim;

use qfence_core::rules::{Mutation, Rules};
use qfence_core::{Action, Decision, IntentKind, Observed, Outcome};
use qfence_model::config::RejoinPolicy;
use qfence_model::{Generation, Role};
use sim::fixtures::{self, site};

use bench::*;

/// The lab's erp-db with a `db.rejoin` binding at each site (`policy`), failed over from
/// dc1 to dc2: dc1 is lost (its BMC's power.off holds, its vm.stop reads UNKNOWN). Returns
/// dc1's rejoin index.
fn failed_over(policy: RejoinPolicy) -> (Bench, usize) {
    let mut plan = fixtures::erp_plan();
    plan.rejoin = policy;
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
    b.world.insert(k("dc1", 0), Observed::Holds);
    b.world.insert(k("dc1", 1), Observed::Unknown);
    b.step();
    b.intent(IntentKind::Failover { to: site("dc2") });
    for _ in 0..40 {
        let d = b.step();
        assert!(rejoins(&d).is_empty(), "no rejoin during a failover: {d:?}");
    }
    assert_eq!(b.state.owner, site("dc2"));
    assert!(b.state.transition().is_none());
    (b, at)
}

fn rejoins(d: &Decision) -> Vec<Action> {
    acts(d)
        .into_iter()
        .filter(|a| matches!(a, Action::Rejoin { .. }))
        .collect()
}

/// Steps until dc1 answers again: its host is on (power.off does not hold) and its vm.stop
/// reads the VM stopped.
fn host_back(b: &mut Bench) -> Vec<Decision> {
    b.world.insert(k("dc1", 0), Observed::NotHeld);
    b.world.insert(k("dc1", 1), Observed::Holds);
    let mut out = Vec::new();
    while b.obs.get(&k("dc1", 1)).unwrap().value != Observed::Holds {
        out.push(b.step());
        assert!(out.len() < 30, "dc1's power is never read");
    }
    out
}

#[test]
fn a_failover_leaves_the_old_owner_fenced_until_an_operator_lets_it_rejoin() {
    let (mut b, at) = failed_over(RejoinPolicy::Manual);
    assert!(b.state.awaiting_rejoin.contains_key(&site("dc1")));
    // It answers again, but nobody asked: nothing rejoins on its own.
    for d in host_back(&mut b) {
        assert!(rejoins(&d).is_empty(), "{d:?}");
    }
    let mut said = String::new();
    for _ in 0..30 {
        let d = b.step();
        assert!(rejoins(&d).is_empty());
        said = d.reason.to_string();
    }
    assert!(
        said.contains("; dc1 waits to rejoin as a replica of dc2 (qfence plan rejoin erp-db dc1)"),
        "{said}"
    );
    b.intent(IntentKind::Rejoin { site: site("dc1") });
    let d = b.step();
    assert_eq!(
        rejoins(&d),
        vec![Action::Rejoin {
            binding: k("dc1", at)
        }]
    );
    let said = d.reason.to_string();
    assert!(
        said.contains(&format!(
            "alice lets dc1 rejoin erp-db; rejoining dc1 as a replica of dc2 (dc1[{at}] db.rejoin)"
        )),
        "{said}"
    );
    // Done (read back a replica of dc2): dc1 no longer waits, and is said so once.
    let d = b.step();
    assert!(
        d.reason
            .to_string()
            .contains("dc1 rejoined erp-db as a replica of dc2"),
        "{}",
        d.reason
    );
    assert!(b.state.awaiting_rejoin.is_empty());
    for _ in 0..30 {
        let d = b.step();
        assert!(rejoins(&d).is_empty(), "one rejoin only");
        assert!(!d.reason.contains("waits to rejoin"), "{}", d.reason);
    }
}

#[test]
fn a_site_whose_rejoin_binding_is_taken_away_no_longer_waits() {
    let (mut b, at) = failed_over(RejoinPolicy::Manual);
    assert!(b.state.awaiting_rejoin.contains_key(&site("dc1")));
    // The operator rebuilt dc1 by hand and removed its db.rejoin binding.
    let mut plan = b.plan().clone();
    plan.instances.get_mut(&site("dc1")).unwrap().remove(at);
    b.cfg = fixtures::config_with(vec![("erp-db", plan)]);
    b.step();
    assert!(b.state.awaiting_rejoin.is_empty());
}

/// The sentence of the decision that took alice's `rejoin` of `s`, which must issue nothing.
fn refused(b: &mut Bench, s: &str) -> String {
    b.intent(IntentKind::Rejoin { site: site(s) });
    let d = b.step();
    assert!(rejoins(&d).is_empty(), "{d:?}");
    assert!(b.state.rejoin.is_empty());
    d.reason.to_string()
}

#[test]
fn a_rejoin_is_refused_with_why_when_it_is_unsafe() {
    let (mut b, _) = failed_over(RejoinPolicy::Manual);
    let lost = refused(&mut b, "dc1");
    assert!(
        lost.contains(
            "refused alice's rejoin of dc1 for erp-db: dc1 does not answer yet (vm.stop UNKNOWN at"
        ) && lost.contains("bring its host up with the database not started at boot"),
        "{lost}"
    );
    host_back(&mut b);
    let owner = refused(&mut b, "dc2");
    assert!(owner.contains("dc2 owns the plan"), "{owner}");
    let unknown = refused(&mut b, "dc9");
    assert!(
        unknown.contains("dc9 is not a site of this plan"),
        "{unknown}"
    );

    b.intent_at(IntentKind::Rejoin { site: site("dc1") }, Generation(1));
    let d = b.step();
    assert!(rejoins(&d).is_empty());
    assert!(
        d.reason
            .to_string()
            .contains("it was made at generation 1, the plan is at 2"),
        "{}",
        d.reason
    );

    b.intent(IntentKind::Pause);
    b.step();
    let paused = refused(&mut b, "dc1");
    assert!(paused.contains("the plan is paused"), "{paused}");
    b.intent(IntentKind::Resume);
    b.step();

    let name = b.plan.as_str().to_owned();
    b.state = b
        .state
        .with_maintenance(b.plan(), &name, &site("dc1"), true)
        .unwrap();
    let maintenance = refused(&mut b, "dc1");
    assert!(
        maintenance.contains("dc1 is in maintenance"),
        "{maintenance}"
    );
    b.state = b
        .state
        .with_maintenance(b.plan(), &name, &site("dc1"), false)
        .unwrap();

    // Back at dc1 by an operator's failover (the last resort): dc2 now waits, and a rejoin
    // during that move is refused.
    b.intent(IntentKind::Failover { to: site("dc1") });
    b.world.insert(k("dc2", 0), Observed::Holds);
    b.step();
    assert!(b.state.transition().is_some());
    let moving = refused(&mut b, "dc2");
    assert!(moving.contains("a move to dc1 is under way"), "{moving}");
}

#[test]
fn a_site_never_given_up_or_without_a_rejoin_binding_is_refused() {
    let mut b = Bench::lab();
    b.step();
    // dc2 never owned the plan: there is no copy of it to rejoin.
    let mut plan = fixtures::erp_plan();
    plan.instances
        .get_mut(&site("dc2"))
        .unwrap()
        .push(fixtures::bind("pg-dc2", "db.rejoin", "self", Role::Rejoin));
    let mut with = Bench::new("erp-db", plan);
    with.step();
    let never = refused(&mut with, "dc2");
    assert!(
        never.contains("dc2 is not an old owner waiting to rejoin"),
        "{never}"
    );
    let none = refused(&mut b, "dc2");
    assert!(none.contains("dc2 has no rejoin binding"), "{none}");
}

#[test]
fn rejoin_auto_rejoins_once_when_the_host_reads_up_again() {
    let (mut b, at) = failed_over(RejoinPolicy::Auto);
    // Lost: nothing to run it on.
    for _ in 0..20 {
        assert!(rejoins(&b.step()).is_empty());
    }
    // The rejoin fails (say pg_rewind and the re-clone both did): it is not tried again.
    b.fail.insert(k("dc1", at), Outcome::Failed);
    let mut issued = Vec::new();
    for d in host_back(&mut b) {
        issued.extend(rejoins(&d));
        if !rejoins(&d).is_empty() {
            assert!(
                d.reason
                    .to_string()
                    .contains("dc1 answers again: erp-db rejoins it (rejoin: auto)"),
                "{}",
                d.reason
            );
        }
    }
    for _ in 0..40 {
        issued.extend(rejoins(&b.step()));
    }
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert!(b.state.awaiting_rejoin.contains_key(&site("dc1")));
    // The operator asks again once the cause is fixed.
    b.fail.clear();
    b.intent(IntentKind::Rejoin { site: site("dc1") });
    assert_eq!(rejoins(&b.step()).len(), 1);
    b.step();
    assert!(b.state.awaiting_rejoin.is_empty());
}

#[test]
fn an_old_owner_still_to_rejoin_is_never_failed_over_or_switched_to() {
    for planted in [false, true] {
        let (mut b, _) = failed_over(RejoinPolicy::Manual);
        if planted {
            b.rules = Rules {
                mutation: Mutation::RejoinIgnored,
            };
        }
        host_back(&mut b);
        b.intent(IntentKind::Switchover { to: site("dc1") });
        let d = b.step();
        let said = d.reason.to_string();
        assert_eq!(
            said.contains("dc1's copy is still to rejoin as a replica of dc2: rejoin it first"),
            !planted,
            "{said}"
        );
        if planted {
            continue;
        }
        // dc2's health goes bad for good: with dc1 the only other site, there is nowhere to go.
        b.world.insert(k("dc2", 3), Observed::NotHeld);
        let mut said = String::new();
        for _ in 0..120 {
            let d = b.step();
            assert!(b.state.transition().is_none(), "{d:?}");
            said = d.reason.to_string();
        }
        assert!(said.contains("dc1 is still to rejoin"), "{said}");
    }
    // The planted bug fails dc2 over to dc1's diverged copy: the rule above is what stops it.
    let (mut b, _) = failed_over(RejoinPolicy::Manual);
    b.rules = Rules {
        mutation: Mutation::RejoinIgnored,
    };
    host_back(&mut b);
    b.world.insert(k("dc2", 3), Observed::NotHeld);
    let moved = (0..120).any(|_| {
        b.step();
        b.state
            .transition()
            .is_some_and(|t| t.target == site("dc1"))
    });
    assert!(moved, "the planted bug must move the plan to dc1");
}
