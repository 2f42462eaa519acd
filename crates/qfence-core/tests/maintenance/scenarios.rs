//! Each step of a preparation, cancel, timeout and resumption, with exact command lists.

use std::collections::BTreeMap;

use qfence_core::maintenance::{
    Action, AgentAlgorithm, Event, JobKind, Operation, OrchestratorStatus, Pending, Request, Step,
    StoredMaintenanceState, decide, request,
};
use qfence_model::Term;

use crate::fixture::{Fx, T0, actions, at, c, h, job, o};

fn prepare(name: &str, algorithm: Option<AgentAlgorithm>) -> Request {
    Request::Prepare {
        orchestrator: o(name),
        algorithm,
    }
}

fn migrate(agent: &str, to: &[&str], avoid: &[&str], algorithm: AgentAlgorithm) -> Action {
    Action::MigrateAgent {
        agent: h(agent),
        from: o("o1"),
        to: to.iter().map(|x| o(x)).collect(),
        avoid: avoid.iter().map(|x| o(x)).collect(),
        algorithm,
    }
}

fn preparation(fx: &Fx) -> qfence_core::maintenance::Preparation {
    match &fx.state.operation {
        Some(Operation::Prepare(p)) => p.clone(),
        other => panic!("no preparation: {other:?}"),
    }
}

/// o1 with two agents of dc1, the session of one dc1 controller, o3 leading.
fn busy_o1() -> Fx {
    let mut fx = Fx::three();
    fx.agent("h1", &["o1", "o2"], Some("o1"))
        .agent("h2", &["o1", "o2"], Some("o1"))
        .agent("h3", &["o3"], Some("o3"))
        .controller("bmc-dc1", &["dc1"], Some("o1"))
        .controller("bmc-dc2", &["dc2"], Some("o3"));
    fx
}

#[test]
fn prepare_goes_read_only_first_and_waits_for_the_read_only_report() {
    let mut fx = busy_o1();
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    assert_eq!(
        actions(&d),
        vec![
            Action::GoReadOnly {
                orchestrator: o("o1")
            },
            Action::Event {
                event: Event::PreparationStarted {
                    orchestrator: o("o1"),
                    algorithm: AgentAlgorithm::Static
                }
            },
        ]
    );
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 prepares for maintenance (static): it goes read-only; o1 preparing: \
         waiting for it to report read-only"
    );
    fx.write(&d);
    assert_eq!(
        fx.state.status_of(&o("o1")),
        OrchestratorStatus::PreparingForMaintenance
    );
    let p = preparation(&fx);
    assert_eq!(p.step, Step::DrainingJobs);
    assert_eq!(
        p.deadline,
        at(3600),
        "maintenance_timeout is 60 min by default"
    );
    // Not yet read-only: the next cycle asks again and does nothing else.
    fx.now = at(1);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![Action::GoReadOnly {
            orchestrator: o("o1")
        }]
    );
    assert!(d.state_change.is_none());
}

#[test]
fn jobs_are_drained_before_anything_moves() {
    let mut fx = busy_o1();
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.read_only.insert(o("o1"));
    fx.jobs.insert(
        o("o1"),
        vec![
            job(JobKind::Failover, "erp-db"),
            job(JobKind::Fence, "compute-3"),
        ],
    );
    fx.now = at(3);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![]);
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 preparing (draining jobs): waiting for 2 (failover erp-db, fence \
         compute-3)"
    );
    // The failover finished, the fence too: agents get their migrate messages.
    fx.jobs.clear();
    fx.now = at(6);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![
            migrate("h1", &["o2"], &["o1"], AgentAlgorithm::Static),
            migrate("h2", &["o2"], &["o1"], AgentAlgorithm::Static),
        ]
    );
    fx.write(&d);
    assert_eq!(preparation(&fx).step, Step::MigratingAgents);
}

#[test]
fn a_leading_target_hands_the_leadership_over_and_the_new_leader_resumes() {
    let mut fx = busy_o1();
    fx.me = o("o1");
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    assert_eq!(
        actions(&d)[2..],
        [Action::HandOverLeadership {
            from: o("o1"),
            to: o("o2")
        }]
    );
    fx.write(&d);
    assert_eq!(preparation(&fx).step, Step::HandingOver);
    // Not yet taken: not asked again before the retry time.
    fx.now = at(5);
    assert_eq!(actions(&decide(&fx.snap())), vec![]);
    fx.now = at(30);
    assert_eq!(
        actions(&decide(&fx.snap())),
        vec![Action::HandOverLeadership {
            from: o("o1"),
            to: o("o2")
        }]
    );
    // o2 leads in term 6: it says it resumes, and migrates.
    fx.me = o("o2");
    fx.term = 6;
    fx.now = at(31);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![
            Action::Event {
                event: Event::Resumed {
                    orchestrator: o("o1"),
                    step: Step::HandingOver,
                    term: Term(6)
                }
            },
            migrate("h1", &["o2"], &["o1"], AgentAlgorithm::Static),
            migrate("h2", &["o2"], &["o1"], AgentAlgorithm::Static),
        ]
    );
}

#[test]
fn agents_move_at_a_bounded_rate_and_those_without_effect_are_sent_again() {
    let mut fx = Fx::three();
    fx.settings.migrate_per_second = 2;
    for i in 0..5 {
        fx.agent(&format!("h{i}"), &["o1", "o2"], Some("o1"));
    }
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    let m = |a| migrate(a, &["o2"], &["o1"], AgentAlgorithm::Static);
    assert_eq!(actions(&d)[2..], [m("h0"), m("h1")]);
    fx.write(&d);
    // Within the same second: nothing more.
    fx.now = T0.plus(std::time::Duration::from_millis(900));
    assert_eq!(actions(&decide(&fx.snap())), vec![]);
    // h0 moved; a second later the next two.
    fx.agents.get_mut(&h("h0")).unwrap().connected = Some(o("o2"));
    fx.now = at(1);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![m("h2"), m("h3")]);
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 preparing (migrating agents): 2 migrate messages sent, 1 moving, 1 left"
    );
    fx.write(&d);
    fx.now = at(2);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![m("h4")]);
    fx.write(&d);
    // h1 never moved: sent again once `retry` (30 s) passed.
    for a in ["h2", "h3", "h4"] {
        fx.agents.get_mut(&h(a)).unwrap().connected = Some(o("o2"));
    }
    fx.now = at(29);
    assert_eq!(actions(&decide(&fx.snap())), vec![]);
    fx.now = at(30);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![m("h1")]);
    fx.write(&d);
    assert_eq!(preparation(&fx).migrations[&h("h1")].attempts, 2);
}

#[test]
fn roundrobin_spreads_the_agents_evenly_over_the_orchestrators_allowed_for_them() {
    let mut fx = Fx::three();
    fx.orchestrators
        .insert(o("o4"), crate::fixture::orch("dc1"));
    for i in 0..9 {
        fx.agent(&format!("h{i}"), &["o1", "o2", "o4"], Some("o1"));
    }
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", Some(AgentAlgorithm::RoundRobin))).unwrap();
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for a in actions(&d) {
        if let Action::MigrateAgent {
            to,
            avoid,
            algorithm,
            ..
        } = a
        {
            assert_eq!(avoid, vec![o("o1")]);
            assert_eq!(algorithm, AgentAlgorithm::RoundRobin);
            assert_eq!(to.len(), 2);
            *got.entry(to[0].to_string()).or_default() += 1;
        }
    }
    assert_eq!(got, BTreeMap::from([("o2".into(), 5), ("o4".into(), 4)]));
}

#[test]
fn sessions_move_after_the_agents_to_the_least_loaded_allowed_caller_then_maintenance() {
    let mut fx = busy_o1();
    fx.controller("pve-dc1", &["dc1", "dc2"], Some("o1"))
        .controller("bmc-o2", &["dc1"], Some("o2"));
    for a in ["h1", "h2"] {
        fx.agents.get_mut(&h(a)).unwrap().connected = Some(o("o2"));
    }
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    // o2 holds one, o3 one: bmc-dc1 may go to o2 only, pve-dc1 goes to o3 (o2 now has two).
    assert_eq!(
        actions(&d)[2..],
        [
            Action::MoveSession {
                controller: c("bmc-dc1"),
                from: o("o1"),
                to: o("o2")
            },
            Action::MoveSession {
                controller: c("pve-dc1"),
                from: o("o1"),
                to: o("o3")
            },
        ]
    );
    fx.write(&d);
    assert_eq!(preparation(&fx).step, Step::MovingSessions);
    fx.controllers.get_mut(&c("bmc-dc1")).unwrap().holder = Some(o("o2"));
    fx.controllers.get_mut(&c("pve-dc1")).unwrap().holder = Some(o("o3"));
    fx.now = at(2);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![Action::Event {
            event: Event::EnteredMaintenance {
                orchestrator: o("o1")
            }
        }]
    );
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 is in maintenance: it holds nothing"
    );
    fx.write(&d);
    assert_eq!(
        fx.state.status_of(&o("o1")),
        OrchestratorStatus::Maintenance
    );
    assert_eq!(fx.state.operation, None);
    // In maintenance it stays read-only, even after a restart forgot it.
    fx.read_only.clear();
    assert_eq!(
        actions(&decide(&fx.snap())),
        vec![Action::GoReadOnly {
            orchestrator: o("o1")
        }]
    );
}

#[test]
fn the_last_step_waits_when_a_controller_lost_its_other_caller_meanwhile() {
    let mut fx = Fx::three();
    fx.controller("bmc-dc1", &["dc1"], Some("o2"));
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    assert_eq!(
        fx.state.status_of(&o("o1")),
        OrchestratorStatus::Maintenance,
        "nothing held: straight to maintenance"
    );
    // Again from the start, o2 dying in between.
    let mut fx = Fx::three();
    fx.controller("bmc-dc1", &["dc1"], Some("o2"));
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.orchestrators.get_mut(&o("o2")).unwrap().alive = false;
    fx.read_only.insert(o("o1"));
    fx.now = at(1);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![]);
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 stays preparing: refused: without o1, no Up orchestrator would be \
         allowed to call bmc-dc1 (its site and reach)"
    );
}

#[test]
fn cancel_during_preparation_rolls_back_and_names_what_was_pending() {
    let mut fx = busy_o1();
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.read_only.insert(o("o1"));
    fx.jobs
        .insert(o("o1"), vec![job(JobKind::Evacuation, "compute-7")]);
    let cancel = Request::Cancel {
        orchestrator: o("o1"),
        rebalance: false,
    };
    let d = request(&fx.snap(), &cancel).unwrap();
    let pending = Pending {
        jobs: vec![job(JobKind::Evacuation, "compute-7")],
        leadership: false,
        agents: vec![h("h1"), h("h2")],
        sessions: vec![c("bmc-dc1")],
    };
    assert_eq!(
        actions(&d),
        vec![
            Action::EndReadOnly {
                orchestrator: o("o1")
            },
            Action::Event {
                event: Event::Cancelled {
                    orchestrator: o("o1"),
                    rebalance: false,
                    pending
                }
            },
        ]
    );
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1 back Up (cancelled; pending: 1 jobs (evacuation compute-7), 2 agents \
         (h1, h2), 1 controller sessions (bmc-dc1))"
    );
    fx.write(&d);
    assert_eq!(fx.state.status_of(&o("o1")), OrchestratorStatus::Up);
    assert_eq!(fx.state.operation, None);
    assert!(
        request(&fx.snap(), &cancel).is_err(),
        "an Up orchestrator cannot be cancelled again"
    );
}

#[test]
fn cancel_with_rebalance_brings_agents_back_until_it_holds_its_share() {
    let mut fx = Fx::three();
    fx.settings.migrate_per_second = 3;
    for i in 0..8 {
        fx.agent(&format!("h{i}"), &["o1", "o2"], Some("o2"));
    }
    fx.agent("h9", &["o3"], Some("o3"));
    fx.state
        .status
        .insert(o("o1"), OrchestratorStatus::Maintenance);
    fx.read_only.insert(o("o1"));
    let cancel = Request::Cancel {
        orchestrator: o("o1"),
        rebalance: true,
    };
    let d = request(&fx.snap(), &cancel).unwrap();
    let back = |a: &str| Action::MigrateAgent {
        agent: h(a),
        from: o("o2"),
        to: vec![o("o1"), o("o2")],
        avoid: vec![],
        algorithm: AgentAlgorithm::Static,
    };
    assert_eq!(
        actions(&d),
        vec![
            Action::EndReadOnly {
                orchestrator: o("o1")
            },
            Action::Event {
                event: Event::Cancelled {
                    orchestrator: o("o1"),
                    rebalance: true,
                    pending: Pending::default()
                }
            },
            back("h0"),
            back("h1"),
            back("h2"),
        ]
    );
    fx.write(&d);
    let Some(Operation::Rebalance(r)) = &fx.state.operation else {
        panic!("no rebalance: {:?}", fx.state.operation)
    };
    assert_eq!(r.agents.len(), 4, "its share: 8 agents over o1 and o2");
    fx.read_only.clear();
    fx.now = at(1);
    let d = decide(&fx.snap());
    assert_eq!(actions(&d), vec![back("h3")]);
    fx.write(&d);
    for a in ["h0", "h1", "h2", "h3"] {
        fx.agents.get_mut(&h(a)).unwrap().connected = Some(o("o1"));
    }
    fx.now = at(2);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![Action::Event {
            event: Event::Rebalanced {
                orchestrator: o("o1"),
                agents: 4
            }
        }]
    );
    fx.write(&d);
    assert_eq!(fx.state.operation, None);
}

#[test]
fn a_preparation_not_done_by_its_timeout_is_rolled_back_with_what_was_pending() {
    let mut fx = busy_o1();
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.read_only.insert(o("o1"));
    fx.jobs
        .insert(o("o1"), vec![job(JobKind::Failover, "erp-db")]);
    fx.now = at(3599);
    assert_eq!(actions(&decide(&fx.snap())), vec![]);
    fx.now = at(3600);
    let d = decide(&fx.snap());
    let pending = Pending {
        jobs: vec![job(JobKind::Failover, "erp-db")],
        leadership: false,
        agents: vec![h("h1"), h("h2")],
        sessions: vec![c("bmc-dc1")],
    };
    assert_eq!(
        actions(&d),
        vec![
            Action::EndReadOnly {
                orchestrator: o("o1")
            },
            Action::Event {
                event: Event::TimedOut {
                    orchestrator: o("o1"),
                    pending
                }
            },
        ]
    );
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: o1's preparation timed out and was rolled back, still pending: 1 jobs \
         (failover erp-db), 2 agents (h1, h2), 1 controller sessions (bmc-dc1)"
    );
    fx.write(&d);
    assert_eq!(fx.state.status_of(&o("o1")), OrchestratorStatus::Up);
}

#[test]
fn a_restart_mid_preparation_resumes_from_the_stored_state() {
    let mut fx = busy_o1();
    fx.read_only.insert(o("o1"));
    let d = request(&fx.snap(), &prepare("o1", Some(AgentAlgorithm::Shuffle))).unwrap();
    fx.write(&d);
    fx.now = at(1);
    let d = decide(&fx.snap());
    fx.write(&d);
    // The whole cluster restarts: the state is read back from its stored form, the target
    // has forgotten it was read-only, and o2 now leads in term 9.
    let stored = serde_json::to_string(&StoredMaintenanceState::from(fx.state.clone())).unwrap();
    assert!(stored.starts_with(r#"{"v":"1","#), "{stored}");
    let back: StoredMaintenanceState = serde_json::from_str(&stored).unwrap();
    fx.state = back.into_current();
    assert_eq!(preparation(&fx).algorithm, AgentAlgorithm::Shuffle);
    fx.read_only.clear();
    fx.me = o("o2");
    fx.term = 9;
    fx.now = at(10);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d),
        vec![
            Action::Event {
                event: Event::Resumed {
                    orchestrator: o("o1"),
                    step: Step::MigratingAgents,
                    term: Term(9)
                }
            },
            Action::GoReadOnly {
                orchestrator: o("o1")
            },
        ]
    );
    fx.write(&d);
    assert_eq!(preparation(&fx).term, Term(9));
    // Read-only again: the migrate messages already sent are not repeated before `retry`.
    fx.read_only.insert(o("o1"));
    fx.now = at(11);
    assert_eq!(actions(&decide(&fx.snap())), vec![]);
    fx.now = at(31);
    let d = decide(&fx.snap());
    assert_eq!(
        actions(&d)
            .iter()
            .filter(|a| matches!(a, Action::MigrateAgent { .. }))
            .count(),
        2
    );
}

#[test]
fn a_restart_after_the_deadline_rolls_back_instead_of_resuming() {
    let mut fx = busy_o1();
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.me = o("o2");
    fx.term = 6;
    fx.now = at(4000);
    let d = decide(&fx.snap());
    let names: Vec<&str> = d.commands.iter().map(|c| c.action.name()).collect();
    assert_eq!(names, ["event", "end-read-only", "event"]);
    assert!(matches!(
        &d.commands[2].action,
        Action::Event {
            event: Event::TimedOut { .. }
        }
    ));
    fx.write(&d);
    assert_eq!(fx.state.status_of(&o("o1")), OrchestratorStatus::Up);
}

#[test]
fn a_follower_and_an_expired_lease_decide_nothing() {
    let mut fx = busy_o1();
    fx.leader = false;
    let d = decide(&fx.snap());
    assert!(d.commands.is_empty() && d.state_change.is_none());
    assert!(d.sentence.is_routine());
    fx.leader = true;
    let mut s = fx.snap();
    s.now = s.leadership.lease_until;
    let d = decide(&s);
    assert_eq!(
        d.sentence.to_string(),
        "maintenance: lease of term 5 ran out at 14:02:09: nothing decided"
    );
}

#[test]
fn the_list_shows_status_jobs_agents_and_sessions_and_a_preparation_its_progress() {
    use qfence_core::maintenance::{progress, rows};
    let mut fx = busy_o1();
    fx.settings.migrate_per_second = 1;
    fx.read_only.insert(o("o1"));
    fx.jobs
        .insert(o("o2"), vec![job(JobKind::Fence, "compute-3")]);
    assert_eq!(progress(&fx.snap()), None);
    let d = request(&fx.snap(), &prepare("o1", None)).unwrap();
    fx.write(&d);
    fx.agents.get_mut(&h("h1")).unwrap().connected = Some(o("o2"));
    let s = fx.snap();
    let r = rows(&s);
    let line = |n: &str| r.iter().find(|x| x.orchestrator == o(n)).unwrap().clone();
    let o1 = line("o1");
    assert_eq!(
        (
            o1.status,
            o1.read_only,
            o1.jobs,
            o1.agents,
            o1.sessions,
            o1.leader
        ),
        (
            OrchestratorStatus::PreparingForMaintenance,
            true,
            0,
            1,
            1,
            false
        )
    );
    let o2 = line("o2");
    assert_eq!(
        (o2.status, o2.jobs, o2.agents),
        (OrchestratorStatus::Up, 1, 1)
    );
    assert!(line("o3").leader);
    let p = progress(&s).unwrap();
    assert_eq!(
        (
            p.step,
            p.agents_moved,
            p.agents_left,
            p.sessions_left,
            p.deadline
        ),
        (Step::MigratingAgents, 1, 1, 1, at(3600))
    );
}
