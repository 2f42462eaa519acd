//! The acceptance case at the core's level: three orchestrators (two at dc1, one at
//! dc2) and 300 agents, the decisions run to the end by a small executor in which agents obey
//! their migrate messages. The runtime's own test (real connections, real restarts) is later
//! work; this one pins what the core asks of it.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_core::Millis;
use qfence_core::maintenance::{
    Action, AgentAlgorithm, Decision, JobKind, OrchestratorStatus, Request, decide, request,
};

use crate::fixture::{Fx, at, job, o, orch};

/// Runs one decision's commands as a well-behaved cluster would.
fn execute(fx: &mut Fx, d: &Decision) {
    for c in &d.commands {
        match &c.action {
            Action::GoReadOnly { orchestrator } => {
                fx.read_only.insert(orchestrator.clone());
            }
            Action::EndReadOnly { orchestrator } => {
                fx.read_only.remove(orchestrator);
            }
            Action::MigrateAgent { agent, to, .. } => {
                fx.agents.get_mut(agent).unwrap().connected = Some(to[0].clone());
            }
            Action::MoveSession { controller, to, .. } => {
                fx.controllers.get_mut(controller).unwrap().holder = Some(to.clone());
            }
            Action::HandOverLeadership { to, .. } => {
                fx.me = to.clone();
                fx.term += 1;
            }
            Action::Event { .. } => {}
        }
    }
}

/// o1, o2 (and `extra` more) at dc1, o3 at dc2; 100 agents on each of o1, o2 and o3.
fn cluster(extra: &[&str]) -> Fx {
    let mut fx = Fx::three();
    for e in extra {
        fx.orchestrators.insert(o(e), orch("dc1"));
    }
    let mut dc1: Vec<&str> = vec!["o1", "o2"];
    dc1.extend(extra);
    for i in 0..300 {
        let (allowed, on): (Vec<&str>, &str) = match i / 100 {
            0 => (dc1.clone(), "o1"),
            1 => (dc1.clone(), "o2"),
            _ => (vec!["o3"], "o3"),
        };
        fx.agent(&format!("h{i:03}"), &allowed, Some(on));
    }
    fx.controller("bmc-dc1", &["dc1"], Some("o1")).controller(
        "pve-dc2",
        &["dc2", "dc1"],
        Some("o3"),
    );
    fx
}

/// Prepares o1 (the leader) with `algorithm`, decides every 100 ms until it is in maintenance,
/// and returns how many agents each orchestrator received and the most migrate messages sent
/// in any one second.
fn run(mut fx: Fx, algorithm: AgentAlgorithm) -> (BTreeMap<String, usize>, usize, Millis) {
    fx.me = o("o1");
    fx.jobs
        .insert(o("o1"), vec![job(JobKind::Failover, "erp-db")]);
    let before: BTreeMap<_, _> = fx.agents.clone();
    let d = request(
        &fx.snap(),
        &Request::Prepare {
            orchestrator: o("o1"),
            algorithm: Some(algorithm),
        },
    )
    .unwrap();
    fx.write(&d);
    execute(&mut fx, &d);
    let mut sent_at: Vec<Millis> = Vec::new();
    let mut step = 0;
    while fx.state.status_of(&o("o1")) != OrchestratorStatus::Maintenance {
        step += 1;
        assert!(
            step < 2000,
            "never reached maintenance: {}",
            decide(&fx.snap()).sentence
        );
        fx.now = fx.now.plus(Duration::from_millis(100));
        // The failover finishes after two seconds; nothing moves before.
        if fx.now >= at(2) {
            fx.jobs.clear();
        }
        let d = decide(&fx.snap());
        for c in &d.commands {
            if let Action::MigrateAgent { .. } | Action::HandOverLeadership { .. } = c.action {
                assert!(fx.jobs.is_empty(), "{c} while a job runs");
                assert!(fx.read_only.contains(&o("o1")), "{c} before read-only");
                sent_at.push(fx.now);
            }
        }
        fx.write(&d);
        execute(&mut fx, &d);
        // No agent is ever without a connection, and none goes to another site.
        for (h, a) in &fx.agents {
            let on = a.connected.as_ref().expect("connected");
            assert!(before[h].allowed.contains(on), "{h} went to {on}");
        }
    }
    assert_ne!(fx.me, o("o1"), "the leadership was handed over");
    assert!(fx.agents.values().all(|a| a.connected != Some(o("o1"))));
    assert_eq!(
        fx.controllers[&crate::fixture::c("bmc-dc1")].holder,
        Some(o("o2"))
    );
    let peak = sent_at
        .iter()
        .map(|t| {
            sent_at
                .iter()
                .filter(|u| **u >= *t && u.since(*t) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let mut received = BTreeMap::new();
    for (h, a) in &fx.agents {
        if before[h].connected == Some(o("o1")) {
            *received
                .entry(a.connected.clone().unwrap().to_string())
                .or_default() += 1;
        }
    }
    (received, peak, fx.now)
}

#[test]
fn three_hundred_agents_move_off_one_orchestrator_at_a_bounded_rate() {
    for algorithm in [
        AgentAlgorithm::Static,
        AgentAlgorithm::RoundRobin,
        AgentAlgorithm::Shuffle,
    ] {
        let (received, peak, done) = run(cluster(&[]), algorithm);
        eprintln!(
            "{algorithm}: {received:?}, peak {peak} messages/s, in maintenance {:.1} s after \
             the request",
            done.since(at(0)).as_secs_f64()
        );
        // The only other orchestrator allowed for o1's dc1 agents is o2.
        assert_eq!(
            received,
            BTreeMap::from([("o2".into(), 100)]),
            "{algorithm}"
        );
        // One handover and 20 migrate messages a second at most (the default rate).
        assert!(peak <= 21, "{algorithm}: {peak} messages in one second");
        // Two seconds of draining, then 100 agents at 20 a second: about five more.
        assert!(
            done <= at(9),
            "{algorithm}: done at {}",
            done.since(at(0)).as_secs()
        );
    }
}

#[test]
fn with_roundrobin_no_orchestrator_receives_more_than_its_share_by_more_than_one() {
    let (received, _, _) = run(cluster(&["o4", "o5"]), AgentAlgorithm::RoundRobin);
    // 100 agents over o2, o4 and o5: 33 or 34 each.
    assert_eq!(received.values().sum::<usize>(), 100);
    assert!(
        received.values().all(|n| (33..=34).contains(n)),
        "{received:?}"
    );
    // Static sends every one to the first left in each agent's list.
    let (received, _, _) = run(cluster(&["o4", "o5"]), AgentAlgorithm::Static);
    assert_eq!(received, BTreeMap::from([("o2".into(), 100)]));
}
