//! Every refusal of `prepare-maintenance` and `cancel-maintenance`: typed, with its sentence
//! and code, and nothing written.

use qfence_core::maintenance::{OrchestratorStatus, Refusal, Request, request};
use qfence_model::Term;

use crate::fixture::{Fx, o};

fn prepare(fx: &Fx, name: &str) -> Result<(), Refusal> {
    let r = Request::Prepare {
        orchestrator: o(name),
        algorithm: None,
    };
    request(&fx.snap(), &r).map(|_| ())
}

fn says(r: &Refusal, code: &str, sentence: &str) {
    assert_eq!(r.code(), code);
    assert_eq!(r.to_string(), sentence);
}

#[test]
fn refused_when_no_other_orchestrator_is_up() {
    let mut fx = Fx::three();
    fx.orchestrators.remove(&o("o3"));
    fx.me = o("o1");
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = false;
    let r = prepare(&fx, "o1").unwrap_err();
    says(
        &r,
        "no_other_orchestrator_up",
        "refused: no orchestrator but o1 is Up to take its agents and controller sessions",
    );
    // A witness takes no agents nor sessions: it does not count.
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = true;
    fx.orchestrators.get_mut(&o("o2")).unwrap().witness = true;
    assert_eq!(prepare(&fx, "o1").unwrap_err().code(), r.code());
    // Nor one in maintenance.
    fx.orchestrators.get_mut(&o("o2")).unwrap().witness = false;
    fx.state
        .status
        .insert(o("o2"), OrchestratorStatus::Maintenance);
    assert_eq!(prepare(&fx, "o1").unwrap_err().code(), r.code());
}

#[test]
fn refused_when_another_is_already_preparing() {
    let mut fx = Fx::three();
    let d = request(
        &fx.snap(),
        &Request::Prepare {
            orchestrator: o("o1"),
            algorithm: None,
        },
    )
    .unwrap();
    fx.write(&d);
    says(
        &prepare(&fx, "o2").unwrap_err(),
        "another_orchestrator_preparing",
        "refused: o1 is already preparing for maintenance; one at a time",
    );
    says(
        &prepare(&fx, "o1").unwrap_err(),
        "orchestrator_not_up",
        "refused: o1 is PreparingForMaintenance, and only an Up orchestrator can prepare for \
         maintenance",
    );
}

#[test]
fn refused_naming_the_controllers_left_without_an_up_caller() {
    let mut fx = Fx::three();
    fx.controller("bmc-a", &["dc1"], Some("o1"))
        .controller("bmc-b", &["dc2"], Some("o3"))
        .controller("pve", &["dc2", "dc1"], Some("o3"));
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = false;
    says(
        &prepare(&fx, "o1").unwrap_err(),
        "controllers_without_caller",
        "refused: without o1, no Up orchestrator would be allowed to call bmc-a (its site and \
         reach)",
    );
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = true;
    assert_eq!(prepare(&fx, "o1"), Ok(()));
    says(
        &prepare(&fx, "o3").unwrap_err(),
        "controllers_without_caller",
        "refused: without o3, no Up orchestrator would be allowed to call bmc-b (its site and \
         reach)",
    );
}

#[test]
fn refused_naming_the_agents_left_without_an_orchestrator() {
    let mut fx = Fx::three();
    fx.agent("h1", &["o1", "o2"], Some("o1"))
        .agent("h7", &["o3"], Some("o3"));
    says(
        &prepare(&fx, "o3").unwrap_err(),
        "agents_without_target",
        "refused: without o3, no Up orchestrator would be allowed for agents h7",
    );
    assert_eq!(prepare(&fx, "o1"), Ok(()));
}

#[test]
fn refused_when_too_few_voters_able_to_renew_the_dead_man_switches_would_be_left() {
    let mut fx = Fx::three();
    fx.orchestrators.get_mut(&o("o3")).unwrap().renews = false;
    says(
        &prepare(&fx, "o1").unwrap_err(),
        "dead_man_quorum_lost",
        "refused: without o1, 1 of 3 voters could renew the dead-man switches (o2), and a \
         quorum needs 2",
    );
    // A voter in maintenance renews nothing either.
    fx.orchestrators.get_mut(&o("o3")).unwrap().renews = true;
    fx.state
        .status
        .insert(o("o2"), OrchestratorStatus::Maintenance);
    says(
        &prepare(&fx, "o1").unwrap_err(),
        "dead_man_quorum_lost",
        "refused: without o1, 1 of 3 voters could renew the dead-man switches (o3), and a \
         quorum needs 2",
    );
}

#[test]
fn refused_for_an_unknown_name_a_follower_or_a_cancel_of_an_up_orchestrator() {
    let mut fx = Fx::three();
    says(
        &prepare(&fx, "o9").unwrap_err(),
        "unknown_orchestrator",
        "refused: o9 is not an orchestrator of this cluster",
    );
    let cancel = Request::Cancel {
        orchestrator: o("o2"),
        rebalance: true,
    };
    says(
        &request(&fx.snap(), &cancel).unwrap_err(),
        "orchestrator_not_in_maintenance",
        "refused: o2 is Up, neither preparing for maintenance nor in it",
    );
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = false;
    says(
        &prepare(&fx, "o2").unwrap_err(),
        "orchestrator_not_answering",
        "refused: o2 does not answer, so it could never report itself read-only; it needs no \
         maintenance mode to be restarted",
    );
    fx.leader = false;
    assert_eq!(
        prepare(&fx, "o1"),
        Err(Refusal::NotLeader { term: Term(5) })
    );
}
