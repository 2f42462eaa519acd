//! The simulator's own rules, without HTTP.

use super::*;

/// A cluster with VM 101 on n1 replicating to n2 every 10 s, driven by hand.
fn shared(flapping: Option<Flapping>) -> Shared {
    let mut state = PveState::single_node("c", "n1", "pw");
    state.nodes.push(Node::new("n2", 2, "10.0.0.2"));
    state.vms.push(Vm::new(101, "db", "n1", VmStatus::Running));
    let mut job = ReplicationJob::new("101-1", 101, "n2", Duration::from_secs(10));
    job.flapping = flapping;
    state.replication.push(job);
    Shared {
        state: Mutex::new(state),
        tickets: Mutex::new(BTreeMap::new()),
        due: Mutex::new(BTreeMap::new()),
        flap_position: Mutex::new(BTreeMap::new()),
        next_pid: Mutex::new(1000),
        clock: Clock::new(),
        faults: Faults::new(),
        reads: VmReads::default(),
    }
}

fn status(s: &Shared) -> ReplicationStatus {
    s.lock().replication[0].status.clone()
}

#[test]
fn a_job_syncs_once_per_interval_and_backs_off_while_failing() {
    let s = shared(None);
    let t0 = s.clock.start;
    replicate_due(&s, t0);
    let first = status(&s);
    assert_eq!(
        (first.fail_count, first.last_sync),
        (0, s.clock.epoch_at(t0))
    );

    // Not due again before the interval.
    replicate_due(&s, t0 + Duration::from_secs(9));
    assert_eq!(status(&s).last_try, first.last_try);

    // Target down: each failure pushes the next try further (1, 2, ... intervals).
    s.lock().nodes[1].reachable = false;
    replicate_due(&s, t0 + Duration::from_secs(10));
    assert_eq!(status(&s).fail_count, 1);
    replicate_due(&s, t0 + Duration::from_secs(19));
    assert_eq!(status(&s).fail_count, 1, "backoff: next try at 20 s");
    replicate_due(&s, t0 + Duration::from_secs(20));
    let failing = status(&s);
    assert_eq!(failing.fail_count, 2);
    assert_eq!(failing.last_sync, first.last_sync, "last_sync ages");
    assert!(failing.error.is_some());

    // Source node down: no attempt is made or recorded.
    s.lock().nodes[1].reachable = true;
    s.lock().nodes[0].powered = false;
    replicate_due(&s, t0 + Duration::from_secs(60));
    assert_eq!(status(&s).fail_count, 2);
    assert_eq!(status(&s).last_try, failing.last_try);

    s.lock().nodes[0].powered = true;
    replicate_due(&s, t0 + Duration::from_secs(61));
    let healed = status(&s);
    assert_eq!((healed.fail_count, healed.error.clone()), (0, None));
    assert_eq!(
        healed.last_sync,
        s.clock.epoch_at(t0 + Duration::from_secs(61))
    );
}

#[test]
fn flapping_fails_then_succeeds_in_a_fixed_cycle() {
    let s = shared(Some(Flapping {
        fail: 2,
        succeed: 1,
    }));
    let t0 = s.clock.start;
    let mut counts = Vec::new();
    let mut at = t0;
    for _ in 0..6 {
        replicate_due(&s, at);
        counts.push(status(&s).fail_count);
        // Jump past any backoff.
        at += Duration::from_secs(100);
    }
    assert_eq!(counts, vec![1, 2, 0, 1, 2, 0]);
}

#[test]
fn privsep_tokens_get_the_intersection_and_propagation_is_honoured() {
    let mut state = PveState::single_node("c", "n1", "pw");
    state.users.push(User {
        userid: "f@pve".into(),
        password: None,
        acl: vec![Acl::new("/vms", &["VM.Audit", "VM.PowerMgmt"], true)],
    });
    state.tokens.push(ApiToken {
        userid: "f@pve".into(),
        name: "t".into(),
        secret: "s".into(),
        privsep: true,
        acl: vec![Acl::new("/vms/101", &["VM.PowerMgmt", "Sys.Audit"], false)],
    });
    let token = Principal::Token {
        userid: "f@pve".into(),
        name: "t".into(),
    };
    let user = Principal::User("f@pve".into());
    assert!(allowed(&state, &user, "/vms/102", "VM.PowerMgmt"));
    assert!(allowed(&state, &token, "/vms/101", "VM.PowerMgmt"));
    assert!(
        !allowed(&state, &token, "/vms/101", "VM.Audit"),
        "not in the token's ACL"
    );
    assert!(
        !allowed(&state, &token, "/vms/101", "Sys.Audit"),
        "not in the user's ACL"
    );
    assert!(
        !allowed(&state, &token, "/vms/102", "VM.PowerMgmt"),
        "no propagation"
    );
    assert!(
        !allowed(&state, &user, "/", "VM.Audit"),
        "ACLs do not flow upwards"
    );
}
