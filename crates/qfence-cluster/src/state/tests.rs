//! The state machine's rules, command by command.

use super::*;
use serde_json::json;

fn plan() -> PlanId {
    PlanId::new("erp-db").unwrap()
}

fn doc(generation: u64, owner: &str) -> PlanStateDoc {
    PlanStateDoc {
        schema: 1,
        generation: Generation(generation),
        body: json!({"owner": owner, "phase": "steady"}),
    }
}

fn registered() -> ClusterState {
    let mut state = ClusterState::default();
    let r = state.apply(
        &Command::RegisterPlan {
            plan: plan(),
            config: json!({"sites": ["dc1", "dc2"]}),
            initial_state: doc(0, "dc1"),
        },
        Term(1),
    );
    assert_eq!(r, Response::Applied);
    state
}

#[test]
fn cas_with_the_current_generation_changes_owner() {
    let mut state = registered();
    let r = state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc2"),
        },
        Term(3),
    );
    assert_eq!(r, Response::Applied);
    let record = &state.plans[&plan()];
    assert_eq!(record.state, doc(1, "dc2"));
    assert_eq!(record.changed_in_term, Term(3));
}

#[test]
fn cas_with_a_stale_generation_is_a_conflict_and_changes_nothing() {
    let mut state = registered();
    state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc2"),
        },
        Term(2),
    );
    let before = state.clone();
    let r = state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc1"),
        },
        Term(2),
    );
    assert_eq!(
        r,
        Response::Conflict {
            plan: plan(),
            expected: Generation(0),
            current: Generation(1)
        }
    );
    assert_eq!(state, before);
}

#[test]
fn cas_may_keep_the_generation_but_not_skip_one() {
    let mut state = registered();
    let same = state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: PlanStateDoc {
                body: json!({"owner": "dc1", "phase": "fencing"}),
                ..doc(0, "dc1")
            },
        },
        Term(2),
    );
    assert_eq!(same, Response::Applied);
    let before = state.clone();
    let skip = state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(2, "dc2"),
        },
        Term(2),
    );
    assert!(matches!(skip, Response::Rejected { .. }), "{skip:?}");
    assert_eq!(state, before);
}

#[test]
fn cas_on_an_unknown_plan_is_rejected() {
    let mut state = ClusterState::default();
    let r = state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(0, "dc1"),
        },
        Term(1),
    );
    assert!(matches!(r, Response::Rejected { .. }));
    assert!(state.plans.is_empty());
}

#[test]
fn registering_a_known_plan_keeps_its_state() {
    let mut state = registered();
    state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc2"),
        },
        Term(2),
    );
    state.apply(
        &Command::RegisterPlan {
            plan: plan(),
            config: json!({"sites": ["dc1", "dc2", "dc3"]}),
            initial_state: doc(0, "dc1"),
        },
        Term(2),
    );
    let record = &state.plans[&plan()];
    assert_eq!(record.state.generation, Generation(1));
    assert_eq!(record.config, json!({"sites": ["dc1", "dc2", "dc3"]}));
}

#[test]
fn an_unknown_command_format_is_refused() {
    let mut state = ClusterState::default();
    let r = state.apply_request(
        &Request {
            format: 99,
            command: Command::RemoveController {
                controller: ControllerId::new("x").unwrap(),
            },
        },
        Term(1),
    );
    assert!(matches!(r, Response::Rejected { .. }));
}

#[test]
fn events_are_numbered_with_their_term_and_bounded() {
    let mut state = ClusterState::default();
    for i in 0..(EVENT_LOG_CAPACITY + 5) {
        state.apply(
            &Command::AppendEvent {
                event: EventDraft {
                    at_unix_ms: i as u64,
                    plan: None,
                    message: format!("event {i}"),
                    fields: json!({}),
                },
            },
            Term(4),
        );
    }
    assert_eq!(state.events.len(), EVENT_LOG_CAPACITY);
    assert_eq!(state.events.front().unwrap().seq, 6);
    assert_eq!(state.events.back().unwrap().term, Term(4));
    assert_eq!(state.next_event_seq, EVENT_LOG_CAPACITY as u64 + 6);
}

#[test]
fn node_keys_must_be_32_bytes() {
    let mut state = ClusterState::default();
    let o = OrchestratorId::new("o1").unwrap();
    let bad = state.apply(
        &Command::SetNodeKey {
            orchestrator: o.clone(),
            public_key_hex: "abcd".into(),
        },
        Term(1),
    );
    assert!(matches!(bad, Response::Rejected { .. }));
    let good = state.apply(
        &Command::SetNodeKey {
            orchestrator: o.clone(),
            public_key_hex: "AB".repeat(32),
        },
        Term(1),
    );
    assert_eq!(good, Response::Applied);
    assert_eq!(state.node_keys[&o], "ab".repeat(32));
}

#[test]
fn commands_have_a_stable_tagged_encoding() {
    let request = Request::new(Command::PlanStateCas {
        plan: plan(),
        expected_generation: Generation(4),
        new_state: doc(5, "dc2"),
    });
    let text = serde_json::to_value(&request).unwrap();
    assert_eq!(
        text,
        json!({"format": 1, "command": {"type": "plan_state_cas", "plan": "erp-db",
            "expected_generation": 4,
            "new_state": {"schema": 1, "generation": 5,
                "body": {"owner": "dc2", "phase": "steady"}}}})
    );
    let back: Request = serde_json::from_value(text).unwrap();
    assert_eq!(back, request);
}

fn status(verdict: Verdict, reason: &str) -> StatusDraft {
    StatusDraft {
        format: STATUS_FORMAT,
        plan: plan(),
        sites: vec![SiteVerdict {
            site: SiteId::new("dc2").unwrap(),
            verdict,
            checked_at_ms: Some(7),
            posture: None,
        }],
        reason: reason.into(),
        at_unix_ms: 9,
        by: OrchestratorId::new("dc1-a").unwrap(),
    }
}

#[test]
fn a_published_status_is_stored_with_its_term_and_overwritten() {
    let mut state = ClusterState::default();
    let first = status(Verdict::Unknown, "checking");
    let r = state.apply(
        &Command::PublishStatus {
            status: first.clone(),
        },
        Term(2),
    );
    assert_eq!(r, Response::Applied);
    assert_eq!(
        state.statuses[&plan()],
        PublishedStatus {
            term: Term(2),
            status: first
        }
    );
    let second = status(Verdict::Fenced, "no action: dc2 fenced");
    state.apply(
        &Command::PublishStatus {
            status: second.clone(),
        },
        Term(3),
    );
    assert_eq!(state.statuses.len(), 1, "one record per plan");
    assert_eq!(state.statuses[&plan()].term, Term(3));
    assert_eq!(state.statuses[&plan()].status, second);
}

#[test]
fn a_status_of_an_unknown_format_is_refused_and_changes_nothing() {
    let mut state = ClusterState::default();
    let r = state.apply(
        &Command::PublishStatus {
            status: StatusDraft {
                format: STATUS_FORMAT + 1,
                ..status(Verdict::Fenced, "x")
            },
        },
        Term(1),
    );
    assert!(matches!(r, Response::Rejected { .. }), "{r:?}");
    assert!(state.statuses.is_empty());
}

#[test]
fn publish_status_has_a_stable_encoding_and_old_snapshots_still_read() {
    let request = Request::new(Command::PublishStatus {
        status: status(Verdict::Fenced, "no action"),
    });
    let text = serde_json::to_value(&request).unwrap();
    assert_eq!(
        text,
        json!({"format": 1, "command": {"type": "publish_status", "status": {
            "format": 1, "plan": "erp-db",
            "sites": [{"site": "dc2", "verdict": "FENCED", "checked_at_ms": 7}],
            "reason": "no action", "at_unix_ms": 9, "by": "dc1-a"}}})
    );
    let back: Request = serde_json::from_value(text).unwrap();
    assert_eq!(back, request);
    let mut old = serde_json::to_value(ClusterState::default()).unwrap();
    old.as_object_mut().unwrap().remove("statuses");
    let read: ClusterState = serde_json::from_value(old).unwrap();
    assert!(read.statuses.is_empty());
}

#[test]
fn create_plan_adds_a_new_plan_and_never_touches_a_known_one() {
    let mut state = ClusterState::default();
    let r = state.apply(
        &Command::CreatePlan {
            plan: plan(),
            config: json!({"source": "api"}),
            initial_state: doc(1, "dc1"),
        },
        Term(2),
    );
    assert_eq!(r, Response::Applied);
    assert_eq!(state.plans[&plan()].state, doc(1, "dc1"));
    assert_eq!(state.plans[&plan()].changed_in_term, Term(2));
    let before = state.clone();
    let again = state.apply(
        &Command::CreatePlan {
            plan: plan(),
            config: json!({"source": "api", "other": true}),
            initial_state: doc(1, "dc2"),
        },
        Term(3),
    );
    assert!(matches!(again, Response::Rejected { .. }), "{again:?}");
    assert_eq!(state, before);
}

#[test]
fn apply_plan_config_replaces_config_and_state_in_one_step_at_the_next_generation() {
    let mut state = registered();
    let r = state.apply(
        &Command::ApplyPlanConfig {
            plan: plan(),
            expected_generation: Generation(0),
            config: json!({"sites": ["dc1", "dc2", "dc3"]}),
            new_state: Some(doc(1, "dc1")),
        },
        Term(5),
    );
    assert_eq!(r, Response::Applied);
    let record = &state.plans[&plan()];
    assert_eq!(record.config, json!({"sites": ["dc1", "dc2", "dc3"]}));
    assert_eq!(record.state, doc(1, "dc1"));
    assert_eq!(record.changed_in_term, Term(5));
}

#[test]
fn apply_plan_config_with_a_stale_generation_changes_nothing() {
    let mut state = registered();
    state.apply(
        &Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc2"),
        },
        Term(2),
    );
    let before = state.clone();
    let r = state.apply(
        &Command::ApplyPlanConfig {
            plan: plan(),
            expected_generation: Generation(0),
            config: json!({"sites": ["dc1"]}),
            new_state: Some(doc(1, "dc1")),
        },
        Term(2),
    );
    assert_eq!(
        r,
        Response::Conflict {
            plan: plan(),
            expected: Generation(0),
            current: Generation(1)
        }
    );
    assert_eq!(state, before, "neither the config nor the state moved");
}

#[test]
fn apply_plan_config_must_move_the_generation_on_by_exactly_one() {
    let mut state = registered();
    let before = state.clone();
    for g in [0, 2] {
        let r = state.apply(
            &Command::ApplyPlanConfig {
                plan: plan(),
                expected_generation: Generation(0),
                config: json!({"x": g}),
                new_state: Some(doc(g, "dc1")),
            },
            Term(2),
        );
        assert!(matches!(r, Response::Rejected { .. }), "{g}: {r:?}");
        assert_eq!(state, before, "a rejected apply changes nothing");
    }
}

#[test]
fn apply_plan_config_without_a_state_keeps_the_state_and_its_generation() {
    let mut state = registered();
    let r = state.apply(
        &Command::ApplyPlanConfig {
            plan: plan(),
            expected_generation: Generation(0),
            config: json!({"staged": {"spec": {}}}),
            new_state: None,
        },
        Term(4),
    );
    assert_eq!(r, Response::Applied);
    let record = &state.plans[&plan()];
    assert_eq!(record.config, json!({"staged": {"spec": {}}}));
    assert_eq!(record.state, doc(0, "dc1"));
    assert_eq!(record.changed_in_term, Term(1), "the state was not changed");
    let unknown = ClusterState::default().apply(
        &Command::ApplyPlanConfig {
            plan: plan(),
            expected_generation: Generation(0),
            config: json!({}),
            new_state: None,
        },
        Term(4),
    );
    assert!(matches!(unknown, Response::Rejected { .. }));
}

#[test]
fn remove_plan_compares_the_generation_and_drops_the_published_status() {
    let mut state = registered();
    state.apply(
        &Command::PublishStatus {
            status: status(Verdict::Fenced, "no action"),
        },
        Term(1),
    );
    let before = state.clone();
    let stale = state.apply(
        &Command::RemovePlan {
            plan: plan(),
            expected_generation: Generation(7),
        },
        Term(1),
    );
    assert_eq!(
        stale,
        Response::Conflict {
            plan: plan(),
            expected: Generation(7),
            current: Generation(0)
        }
    );
    assert_eq!(state, before);
    let r = state.apply(
        &Command::RemovePlan {
            plan: plan(),
            expected_generation: Generation(0),
        },
        Term(1),
    );
    assert_eq!(r, Response::Applied);
    assert!(state.plans.is_empty());
    assert!(state.statuses.is_empty());
    let again = state.apply(
        &Command::RemovePlan {
            plan: plan(),
            expected_generation: Generation(0),
        },
        Term(1),
    );
    assert!(matches!(again, Response::Rejected { .. }));
}

#[test]
fn plan_config_commands_have_a_stable_tagged_encoding() {
    let request = Request::new(Command::ApplyPlanConfig {
        plan: plan(),
        expected_generation: Generation(4),
        config: json!({"source": "api"}),
        new_state: Some(doc(5, "dc2")),
    });
    let text = serde_json::to_value(&request).unwrap();
    assert_eq!(
        text,
        json!({"format": 1, "command": {"type": "apply_plan_config", "plan": "erp-db",
            "expected_generation": 4, "config": {"source": "api"},
            "new_state": {"schema": 1, "generation": 5,
                "body": {"owner": "dc2", "phase": "steady"}}}})
    );
    assert_eq!(serde_json::from_value::<Request>(text).unwrap(), request);
    let remove = Request::new(Command::RemovePlan {
        plan: plan(),
        expected_generation: Generation(2),
    });
    assert_eq!(
        serde_json::to_value(&remove).unwrap(),
        json!({"format": 1, "command": {"type": "remove_plan", "plan": "erp-db",
            "expected_generation": 2}})
    );
}

#[test]
fn a_batch_of_statuses_publishes_each_plan_with_the_entry_term() {
    let mut state = ClusterState::default();
    let other = PlanId::new("crm").unwrap();
    state.apply(
        &Command::PublishStatus {
            status: status(Verdict::Unknown, "checking"),
        },
        Term(2),
    );
    let a = status(Verdict::Fenced, "no action");
    let b = StatusDraft {
        plan: other.clone(),
        ..status(Verdict::Failed, "fencing")
    };
    let r = state.apply(
        &Command::PublishStatuses {
            statuses: vec![a.clone(), b.clone()],
        },
        Term(4),
    );
    assert_eq!(r, Response::Applied);
    assert_eq!(state.statuses.len(), 2);
    assert_eq!(
        state.statuses[&plan()],
        PublishedStatus {
            term: Term(4),
            status: a
        }
    );
    assert_eq!(state.statuses[&other].status, b);
    assert_eq!(state.statuses[&other].term, Term(4));
}

#[test]
fn a_batch_with_one_status_of_an_unknown_format_changes_nothing() {
    let mut state = ClusterState::default();
    let r = state.apply(
        &Command::PublishStatuses {
            statuses: vec![
                status(Verdict::Fenced, "no action"),
                StatusDraft {
                    format: STATUS_FORMAT + 1,
                    plan: PlanId::new("crm").unwrap(),
                    ..status(Verdict::Fenced, "x")
                },
            ],
        },
        Term(1),
    );
    let Response::Rejected { reason } = r else {
        panic!("{r:?}");
    };
    assert!(reason.contains("plan crm"), "{reason}");
    assert!(state.statuses.is_empty(), "all or nothing");
}

#[test]
fn publish_statuses_has_a_stable_encoding() {
    let request = Request::new(Command::PublishStatuses {
        statuses: vec![status(Verdict::Fenced, "no action")],
    });
    let text = serde_json::to_value(&request).unwrap();
    assert_eq!(
        text,
        json!({"format": 1, "command": {"type": "publish_statuses", "statuses": [{
            "format": 1, "plan": "erp-db",
            "sites": [{"site": "dc2", "verdict": "FENCED", "checked_at_ms": 7}],
            "reason": "no action", "at_unix_ms": 9, "by": "dc1-a"}]}})
    );
    let back: Request = serde_json::from_value(text).unwrap();
    assert_eq!(back, request);
}

#[test]
fn a_controller_test_is_kept_per_registered_controller_and_goes_with_it() {
    let mut state = ClusterState::default();
    let c = ControllerId::new("bmc-dc1").unwrap();
    let test = |at: u64| ControllerTestRecord {
        at_unix_ms: at,
        by: OrchestratorId::new("dc1-a").unwrap(),
        grades: json!([{"capability": "power.off", "grade": "proven"}]),
        identity: None,
    };
    let unknown = state.apply(
        &Command::RecordControllerTest {
            controller: c.clone(),
            test: test(1),
        },
        Term(1),
    );
    assert!(matches!(unknown, Response::Rejected { .. }));
    assert!(state.controller_tests.is_empty());
    state.apply(
        &Command::RegisterController {
            controller: ControllerRecord {
                id: c.clone(),
                site: SiteId::new("dc1").unwrap(),
                reach: vec![],
                config: json!({}),
            },
        },
        Term(1),
    );
    for at in [1, 2] {
        let r = state.apply(
            &Command::RecordControllerTest {
                controller: c.clone(),
                test: test(at),
            },
            Term(1),
        );
        assert_eq!(r, Response::Applied);
    }
    assert_eq!(state.controller_tests[&c], test(2), "the last one is kept");
    state.apply(
        &Command::RemoveController {
            controller: c.clone(),
        },
        Term(1),
    );
    assert!(state.controller_tests.is_empty());
    let mut old = serde_json::to_value(ClusterState::default()).unwrap();
    old.as_object_mut().unwrap().remove("controller_tests");
    let read: ClusterState = serde_json::from_value(old).unwrap();
    assert!(read.controller_tests.is_empty());
}

#[test]
fn plan_state_docs_refuse_an_unknown_schema() {
    let d = doc(0, "dc1");
    let ok: serde_json::Value = d.decode(1).unwrap();
    assert_eq!(ok["owner"], "dc1");
    assert!(matches!(
        d.decode::<serde_json::Value>(2),
        Err(DocError::Schema {
            expected: 2,
            found: 1
        })
    ));
}

#[test]
fn a_cloud_state_is_written_only_on_the_revision_it_was_decided_on() {
    let cloud = CloudId::new("overcloud").unwrap();
    let at = |revision: u64, expected: u64| Command::CloudStateCas {
        cloud: cloud.clone(),
        expected_revision: expected,
        new_state: CloudStateDoc {
            schema: 1,
            revision,
            body: json!({"revision": revision}),
            changed_in_term: Term(0),
        },
    };
    let mut state = ClusterState::default();
    assert_eq!(state.apply(&at(1, 0), Term(3)), Response::Applied);
    assert_eq!(state.clouds[&cloud].revision, 1);
    assert_eq!(
        state.clouds[&cloud].changed_in_term,
        Term(3),
        "the term is the log entry's"
    );
    // A deposed leader decided on revision 0 too: refused, nothing changed.
    assert!(matches!(
        state.apply(&at(1, 0), Term(2)),
        Response::Rejected { .. }
    ));
    // A skipped revision is refused.
    assert!(matches!(
        state.apply(&at(3, 1), Term(3)),
        Response::Rejected { .. }
    ));
    assert_eq!(state.apply(&at(2, 1), Term(3)), Response::Applied);
    assert_eq!(state.clouds[&cloud].body["revision"], 2);
    let mut old = serde_json::to_value(ClusterState::default()).unwrap();
    old.as_object_mut().unwrap().remove("clouds");
    let read: ClusterState = serde_json::from_value(old).unwrap();
    assert!(read.clouds.is_empty(), "a snapshot from before reads");
}
