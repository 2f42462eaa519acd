//! Scenario tests: each reads as a story, phases introduced by a comment, and asserts on the
//! exact commands each decision issues.

use std::time::Duration;

use std::collections::{BTreeMap, BTreeSet};

use qfence_core::instance_ha::{
    Action, Aggregate, CloudState, CloudStateChange, Command, Decision, EventKind, GateKind, Halt,
    HostPhase, LOCK_REASON, LeftWhy, ServerId, ServerStatus, ServiceStatus,
};
use qfence_core::{Leadership, Observed};
use qfence_model::Term;
use qfence_model::config::HostName;

use crate::world::{Fate, Faults, NoFaults, Run, World, config, host, sid};

/// Faults a test writes down: calls refused by action and target, fence readings, servers
/// whose evacuations fail a number of times.
#[derive(Debug, Default)]
struct Scripted {
    refuse: BTreeSet<(&'static str, String)>,
    reads: BTreeMap<HostName, Observed>,
    evacuation_failures: BTreeMap<ServerId, u32>,
}

impl Faults for Scripted {
    fn fate(&mut self, cmd: &Command) -> Fate {
        let target = match &cmd.action {
            Action::Evacuate { server, .. } => server.to_string(),
            Action::Fence { host, .. } | Action::PowerOn { host, .. } => host.to_string(),
            _ => String::new(),
        };
        if self.refuse.contains(&(cmd.action.name(), target)) {
            Fate::Failed
        } else {
            Fate::Done
        }
    }

    fn read(&mut self, host: &HostName, truth: Observed) -> Observed {
        self.reads.get(host).copied().unwrap_or(truth)
    }

    fn evacuation(&mut self, server: &ServerId) -> (bool, Duration) {
        match self.evacuation_failures.get_mut(server) {
            Some(n) if *n > 0 => {
                *n -= 1;
                (false, Duration::from_secs(10))
            }
            _ => (true, Duration::from_secs(10)),
        }
    }
}

const POLL: Duration = Duration::from_secs(45);

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-c{i}")).collect()
}

fn run(hosts: &[String], per_host: usize, params: &[&str]) -> Run {
    Run::new(World::new(hosts, per_host), config(hosts, &[], params))
}

/// The commands of a decision as "action target", events left out.
fn acts(d: &Decision) -> Vec<String> {
    d.commands
        .iter()
        .filter(|c| !matches!(c.action, Action::Event { .. }))
        .map(|c| {
            let t = match &c.action {
                Action::Fence { host, .. }
                | Action::CheckFence { host, .. }
                | Action::PowerOn { host, .. }
                | Action::Disable { host, .. }
                | Action::ForceDown { host }
                | Action::Enable { host }
                | Action::ClearForcedDown { host }
                | Action::EnableReserved { host, .. } => host.to_string(),
                Action::Lock { server, .. }
                | Action::Unlock { server }
                | Action::FollowMigration { server } => server.to_string(),
                Action::Evacuate { server, to, .. } => match to {
                    Some(t) => format!("{server} to {t}"),
                    None => server.to_string(),
                },
                Action::Event { .. } => unreachable!(),
            };
            format!("{} {t}", c.action.name())
        })
        .collect()
}

fn events(d: &Decision) -> Vec<EventKind> {
    d.commands
        .iter()
        .filter_map(|c| match &c.action {
            Action::Event { event } => Some(event.kind.clone()),
            _ => None,
        })
        .collect()
}

fn all_acts(ds: &[Decision]) -> Vec<String> {
    ds.iter().flat_map(acts).collect()
}

/// Crashes a host (powered, not reporting) and lets a poll see it stale.
fn crash(r: &mut Run, h: &str) {
    r.world.h(h).crashed = true;
    r.world.advance(Duration::from_secs(40));
    r.poll();
}

fn phase(r: &Run, h: &str) -> Option<HostPhase> {
    r.state.hosts.get(h).map(|rec| rec.phase.clone())
}

fn sentence(r: &Run) -> String {
    r.last.as_ref().unwrap().sentence.to_string()
}

#[test]
fn a_quiet_cloud_is_a_routine_cycle_with_one_sentence() {
    let mut r = run(&names("dc1", 3), 2, &[]);
    let d = r.decide();
    assert!(d.commands.is_empty() && d.state_change.is_some(), "{d:?}");
    // The first cycle records who is up (the heartbeat cliff's history); the next is routine.
    let d = r.decide();
    assert!(d.commands.is_empty() && d.state_change.is_none());
    assert!(d.sentence.is_routine());
    assert_eq!(
        d.sentence.to_string(),
        "fencing decision: no action: cloud: 3 compute hosts, 3 reporting, none failed"
    );
}

#[test]
fn step_8_a_failed_host_is_fenced_read_back_forced_down_disabled_and_evacuated() {
    let mut r = run(&names("dc1", 4), 2, &[]);
    r.world.add_server("paused", "dc1-c1", ServerStatus::Paused);
    r.world.add_server("error", "dc1-c1", ServerStatus::Error);
    r.poll();
    r.settle(&mut NoFaults, 3);

    // dc1-c1 hangs: its reports stop, and 40 s later the poll sees it stale (DELTA 30).
    crash(&mut r, "dc1-c1");
    let d = r.decide();
    assert_eq!(acts(&d), ["fence dc1-c1"]);
    assert_eq!(
        events(&d),
        [
            EventKind::HostDown,
            EventKind::FencingStarted { attempt: 1 }
        ]
    );
    assert!(
        d.sentence.to_string().starts_with(
            "fencing decision: cloud: 4 compute hosts, 3 reporting, 1 failed; dc1-c1 failed (no report since"
        ),
        "{}",
        d.sentence
    );
    assert!(
        d.sentence
            .to_string()
            .ends_with("fencing dc1-c1 (power.off on bmc-dc1-c1, attempt 1 of 3)"),
        "{}",
        d.sentence
    );

    // The fence's answer proves nothing: it is read back.
    r.execute(&mut NoFaults);
    assert_eq!(acts(&r.decide()), ["check-fence dc1-c1"]);
    r.execute(&mut NoFaults);
    // Forced down before it is disabled: a disable of a service Nova still reads up would
    // wait on an RPC call to the dead host's nova-compute.
    assert_eq!(acts(&r.decide()), ["force-down dc1-c1"]);
    r.execute(&mut NoFaults);
    let d = r.decide();
    assert_eq!(acts(&d), ["disable dc1-c1"]);
    let reason = d
        .commands
        .iter()
        .find_map(|c| match &c.action {
            Action::Disable { reason, .. } => Some(reason),
            _ => None,
        })
        .unwrap();
    assert!(
        reason
            .to_string()
            .starts_with("qfence instance-ha: evacuating since 2023-11-14T"),
        "{reason}"
    );
    r.execute(&mut NoFaults);

    // ACTIVE, ERROR and STOPPED servers are evacuated, each locked first; a PAUSED one is not.
    let d = r.decide();
    assert_eq!(
        acts(&d),
        ["lock dc1-c1-s0", "lock dc1-c1-s1", "lock error"],
        "{}",
        d.sentence
    );
    r.execute(&mut NoFaults);
    assert_eq!(
        acts(&r.decide()),
        ["evacuate dc1-c1-s0", "evacuate dc1-c1-s1", "evacuate error"]
    );
    r.execute(&mut NoFaults);
    assert_eq!(
        acts(&r.decide()),
        ["unlock dc1-c1-s0", "unlock dc1-c1-s1", "unlock error"]
    );
    r.execute(&mut NoFaults);

    // Step 9: evacuated, and once a poll shows Nova's evacuations ended, powered on through
    // its binding.
    let d = r.decide();
    assert!(acts(&d).is_empty(), "{}", d.sentence);
    assert!(
        d.sentence
            .to_string()
            .contains("waiting for a poll of Nova to show its evacuations"),
        "{}",
        d.sentence
    );
    r.world.advance(Duration::from_secs(15));
    r.poll();
    let d = r.decide();
    assert_eq!(acts(&d), ["power-on dc1-c1"], "{}", d.sentence);
    r.execute(&mut NoFaults);

    // Step 10: forced down stays until it reports again; then cleared, then enabled.
    let d = r.decide();
    assert!(acts(&d).is_empty());
    assert!(
        d.sentence
            .to_string()
            .contains("waiting for it to report again"),
        "{}",
        d.sentence
    );
    r.world.advance(Duration::from_secs(25));
    r.poll();
    assert_eq!(acts(&r.decide()), ["clear-forced-down dc1-c1"]);
    r.execute(&mut NoFaults);
    assert_eq!(acts(&r.decide()), ["enable dc1-c1"]);
    r.execute(&mut NoFaults);
    r.poll();
    let d = r.decide();
    assert!(
        d.sentence.to_string().contains("dc1-c1 is back in service"),
        "{}",
        d.sentence
    );
    assert!(r.state.hosts.is_empty());
    let w = &r.world;
    assert!(w.servers[&sid("paused")].host == host("dc1-c1"));
    for s in ["dc1-c1-s0", "dc1-c1-s1", "error"] {
        assert_ne!(w.servers[&sid(s)].host, host("dc1-c1"), "{s}");
        assert!(!w.servers[&sid(s)].locked);
    }
    let c1 = &w.hosts["dc1-c1"];
    assert!(c1.powered && c1.status == ServiceStatus::Enabled && !c1.forced_down);
}

/// Lets time pass with polls every 45 s, deciding and running everything.
fn pass(r: &mut Run, secs: u64, faults: &mut dyn Faults) {
    r.run_for(Duration::from_secs(secs), POLL, faults);
}

/// The commands issued since `from` (in the run's log), as `acts` writes them.
fn issued_since(r: &Run, from: usize) -> Vec<String> {
    let d = Decision {
        commands: r.issued[from..].iter().map(|(_, c)| c.clone()).collect(),
        state_change: None,
        sentence: r.last.as_ref().unwrap().sentence.clone(),
    };
    acts(&d)
}

fn events_since(r: &Run, from: usize) -> Vec<EventKind> {
    r.issued[from..]
        .iter()
        .filter_map(|(_, c)| match &c.action {
            Action::Event { event } => Some(event.kind.clone()),
            _ => None,
        })
        .collect()
}

fn fences_of(r: &Run, from: usize, h: &str) -> usize {
    issued_since(r, from)
        .iter()
        .filter(|a| *a == &format!("fence {h}"))
        .count()
}

fn quiet(r: &mut Run) {
    r.poll();
    r.settle(&mut NoFaults, 3);
}

#[test]
fn step_1_a_host_without_servers_is_never_fenced() {
    let mut r = run(&names("dc1", 4), 0, &[]);
    r.world.add_server("x", "dc1-c0", ServerStatus::Active);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c2");
    pass(&mut r, 120, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c2"), 0);
    assert!(r.state.hosts.is_empty());
    // The failure is still recorded.
    assert!(r.state.failed.contains_key("dc1-c2"));
}

#[test]
fn step_1_with_tagged_flavors_only_hosts_with_tagged_servers_count_and_only_those_move() {
    let mut r = run(&names("dc1", 4), 0, &[]);
    r.world.flavors.insert(
        "m1.ha".into(),
        BTreeMap::from([("evacuable".to_owned(), "true".to_owned())]),
    );
    r.world
        .add_server("plain-a", "dc1-c1", ServerStatus::Active);
    r.world.add_server("ha-a", "dc1-c1", ServerStatus::Active);
    r.world.servers.get_mut(&sid("ha-a")).unwrap().flavor = "m1.ha".into();
    r.world
        .add_server("plain-b", "dc1-c2", ServerStatus::Active);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    crash(&mut r, "dc1-c2");
    pass(&mut r, 200, &mut NoFaults);
    let done = issued_since(&r, from);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1, "{done:?}");
    assert_eq!(fences_of(&r, from, "dc1-c2"), 0, "{done:?}");
    assert!(done.contains(&"evacuate ha-a".to_owned()), "{done:?}");
    assert!(!done.iter().any(|a| a.contains("plain")), "{done:?}");
    assert_eq!(r.world.servers[&sid("plain-a")].host, host("dc1-c1"));
}

#[test]
fn step_1_with_tagged_aggregates_only_their_hosts_are_eligible() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    r.world.aggregates.push(Aggregate {
        name: "ha".into(),
        hosts: [host("dc1-c0"), host("dc1-c1")].into(),
        metadata: BTreeMap::from([("evacuable".to_owned(), "true".to_owned())]),
        zone: None,
    });
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    crash(&mut r, "dc1-c3");
    pass(&mut r, 60, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
    assert_eq!(fences_of(&r, from, "dc1-c3"), 0);
}

#[test]
fn step_2_a_disabled_host_is_left_alone() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    r.world.h("dc1-c2").status = ServiceStatus::Disabled;
    r.world.h("dc1-c2").reason = Some("maintenance by alice".into());
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c2");
    pass(&mut r, 120, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c2"), 0);
    assert!(!r.state.failed.contains_key("dc1-c2"));
}

#[test]
fn step_3_an_enabled_host_fails_when_down_or_not_updated_for_delta() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    // 25 s without a report is within DELTA (30 s): not failed.
    r.world.h("dc1-c1").crashed = true;
    r.world.advance(Duration::from_secs(25));
    r.poll();
    let d = r.decide();
    assert!(acts(&d).is_empty(), "{}", d.sentence);
    // 35 s is past it, though Nova still says `up` (service_down_time is 60 s).
    r.world.advance(Duration::from_secs(10));
    r.poll();
    assert_eq!(
        r.view
            .computes
            .iter()
            .find(|c| c.host == host("dc1-c1"))
            .unwrap()
            .state,
        qfence_core::instance_ha::ServiceState::Up
    );
    let d = r.decide();
    assert_eq!(acts(&d), ["fence dc1-c1"], "{}", d.sentence);
    // A host Nova reports `down` has failed at once, whatever its updated_at.
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    r.poll();
    r.view
        .computes
        .iter_mut()
        .find(|c| c.host == host("dc1-c3"))
        .unwrap()
        .state = qfence_core::instance_ha::ServiceState::Down;
    let d = r.decide();
    assert_eq!(acts(&d), ["fence dc1-c3"], "{}", d.sentence);
}

#[test]
fn step_4_over_the_threshold_nothing_is_fenced_and_an_event_gives_the_figures() {
    let mut r = run(&names("dc1", 4), 1, &["heartbeat_cliff_percent: 100"]);
    quiet(&mut r);
    for h in ["dc1-c0", "dc1-c1", "dc1-c2"] {
        r.world.h(h).crashed = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let d = r.decide();
    assert!(acts(&d).is_empty());
    assert!(events(&d).contains(&EventKind::GateClosed {
        gate: GateKind::Threshold,
        detail: "3 of 4 hosts failed (75 %), over the threshold of 50 %".into()
    }));
    assert!(
        d.sentence.to_string().contains(
            "not fencing or evacuating dc1-c0, dc1-c1, dc1-c2: 3 of 4 hosts failed (75 %), over \
             the threshold of 50 %"
        ),
        "{}",
        d.sentence
    );
}

#[test]
fn step_4_hosts_forced_down_from_earlier_cycles_count_so_a_slow_cascade_is_caught() {
    let mut r = run(&names("dc1", 4), 1, &["leave_disabled: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    // One host a few minutes: each alone is 1 of 4, but those left forced down still count.
    crash(&mut r, "dc1-c0");
    pass(&mut r, 120, &mut NoFaults);
    crash(&mut r, "dc1-c1");
    pass(&mut r, 120, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c0"), 1);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
    crash(&mut r, "dc1-c2");
    pass(&mut r, 120, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c2"), 0, "{}", sentence(&r));
    assert!(
        sentence(&r).contains("3 of 4 hosts failed (75 %)"),
        "{}",
        sentence(&r)
    );
}

#[test]
fn step_5_disabled_records_failures_and_does_nothing_else() {
    let mut r = run(&names("dc1", 4), 1, &["disabled: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    pass(&mut r, 120, &mut NoFaults);
    assert!(
        issued_since(&r, from).is_empty(),
        "{:?}",
        issued_since(&r, from)
    );
    assert!(r.state.failed.contains_key("dc1-c1"));
    assert!(events_since(&r, from).contains(&EventKind::HostDown));
    assert!(
        sentence(&r).contains("Instance HA is disabled: dc1-c1 failure recorded, nothing done"),
        "{}",
        sentence(&r)
    );
}

fn with_spare(params: &[&str]) -> Run {
    let mut hosts = names("dc1", 3);
    hosts.push("dc1-spare".into());
    let mut r = Run::new(World::new(&hosts, 1), config(&hosts, &[], params));
    r.world.servers.remove(&sid("dc1-spare-s0"));
    let spare = r.world.h("dc1-spare");
    spare.status = ServiceStatus::Disabled;
    spare.reason = Some("Reserved for instance HA".into());
    r.world.aggregates.push(Aggregate {
        name: "rack-1".into(),
        hosts: [host("dc1-c1"), host("dc1-spare")].into(),
        metadata: BTreeMap::new(),
        zone: None,
    });
    r
}

#[test]
fn step_6_a_reserved_host_is_enabled_for_a_failed_host_and_can_be_the_target() {
    let mut r = with_spare(&["reserved_hosts: true", "evacuate_to_reserved: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    pass(&mut r, 90, &mut NoFaults);
    let done = issued_since(&r, from);
    let i = done
        .iter()
        .position(|a| a == "enable-reserved dc1-spare")
        .expect("spare enabled");
    let j = done
        .iter()
        .position(|a| a == "evacuate dc1-c1-s0 to dc1-spare")
        .unwrap_or_else(|| panic!("{done:?}"));
    assert!(i < j);
    assert_eq!(r.world.servers[&sid("dc1-c1-s0")].host, host("dc1-spare"));
    assert!(
        events_since(&r, from).contains(&EventKind::ReservedHostEnabled {
            spare: host("dc1-spare")
        })
    );
}

#[test]
fn step_6_without_a_matching_reserved_host_the_evacuation_goes_on() {
    let mut r = with_spare(&["reserved_hosts: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    // dc1-c2 shares no aggregate with the spare; both are in az1, so the zone matches.
    r.world.h("dc1-spare").zone = "az9".into();
    crash(&mut r, "dc1-c2");
    pass(&mut r, 90, &mut NoFaults);
    assert!(events_since(&r, from).contains(&EventKind::NoReservedHost));
    assert!(issued_since(&r, from).contains(&"evacuate dc1-c2-s0".to_owned()));
}

#[test]
fn step_7_a_host_without_a_fence_binding_is_never_evacuated() {
    let hosts = names("dc1", 4);
    let mut r = Run::new(World::new(&hosts, 1), config(&hosts, &["dc1-c1"], &[]));
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    pass(&mut r, 200, &mut NoFaults);
    assert!(
        issued_since(&r, from).is_empty(),
        "{:?}",
        issued_since(&r, from)
    );
    let no_fence: Vec<_> = events_since(&r, from)
        .into_iter()
        .filter(|e| matches!(e, EventKind::NoFence { .. }))
        .collect();
    assert_eq!(
        no_fence,
        [EventKind::NoFence {
            why: "host_rules[0] names controller \"bmc-dc1-c1\", which is not configured".into()
        }],
        "one event, not one a cycle"
    );
    assert!(
        sentence(&r).contains("dc1-c1 failed but has no fence"),
        "{}",
        sentence(&r)
    );
}

#[test]
fn step_7_kdump_messages_hold_the_fence_until_the_dump_ends_and_prove_nothing() {
    let mut r = run(&names("dc1", 4), 1, &["check_kdump: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    // The host crashes into kdump: fence_kdump_send every 10 s for 100 s.
    let until = r.now().plus(Duration::from_secs(100));
    r.world.h("dc1-c1").kdump_until = Some(until);
    crash(&mut r, "dc1-c1");
    let d = r.decide();
    assert!(acts(&d).is_empty());
    assert!(
        d.sentence
            .to_string()
            .contains("dc1-c1 is dumping its kernel"),
        "{}",
        d.sentence
    );
    assert_eq!(phase(&r, "dc1-c1"), Some(HostPhase::KdumpWait));
    // Still dumping 50 s later: no fence.
    pass(&mut r, 50, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    // The dump ends (messages stop); KDUMP_TIMEOUT later the host is fenced, and proven by
    // read-back like any other.
    pass(&mut r, 90, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
    let done = issued_since(&r, from);
    assert!(done.contains(&"check-fence dc1-c1".to_owned()));
    assert!(events_since(&r, from).contains(&EventKind::Kdump));
    let reason = r.issued[from..]
        .iter()
        .find_map(|(_, c)| match &c.action {
            Action::Disable { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .unwrap();
    assert!(reason.contains(", kdump)"), "{reason}");
}

#[test]
fn step_7_without_kdump_messages_the_fence_waits_kdump_timeout() {
    let mut r = run(
        &names("dc1", 4),
        1,
        &["check_kdump: true", "kdump_timeout_seconds: 30"],
    );
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    r.decide();
    r.world.advance(Duration::from_secs(20));
    r.decide();
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    r.world.advance(Duration::from_secs(15));
    let d = r.decide();
    assert_eq!(acts(&d), ["fence dc1-c1"], "{}", d.sentence);
}

#[test]
fn step_9_leave_disabled_leaves_the_host_disabled_until_an_operator_brings_it_back() {
    let mut r = run(&names("dc1", 4), 1, &["leave_disabled: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    pass(&mut r, 120, &mut NoFaults);
    let done = issued_since(&r, from);
    assert!(done.contains(&"evacuate dc1-c1-s0".to_owned()));
    assert!(
        !done
            .iter()
            .any(|a| a.starts_with("power-on") || a.starts_with("enable "))
    );
    assert_eq!(
        phase(&r, "dc1-c1"),
        Some(HostPhase::LeftDisabled {
            why: LeftWhy::Asked
        })
    );
    let c1 = &r.world.hosts["dc1-c1"];
    assert!(c1.forced_down && c1.status == ServiceStatus::Disabled && !c1.powered);
    assert!(c1.reason.as_deref().unwrap().contains("left disabled"));
    // The operator powers it on, clears forced-down and enables it: the incident ends.
    let h = r.world.h("dc1-c1");
    h.powered = true;
    h.crashed = false;
    h.forced_down = false;
    h.status = ServiceStatus::Enabled;
    h.reason = None;
    pass(&mut r, 60, &mut NoFaults);
    assert!(r.state.hosts.is_empty());
    assert!(events_since(&r, from).contains(&EventKind::ReturnedByOperator));
}

#[test]
fn step_9_by_default_the_host_is_powered_on_and_enabled_after_its_evacuation() {
    let mut r = run(&names("dc1", 4), 2, &[]);
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    pass(&mut r, 180, &mut NoFaults);
    let done = issued_since(&r, from);
    let at = |s: &str| {
        done.iter()
            .position(|a| a == s)
            .unwrap_or_else(|| panic!("{s}: {done:?}"))
    };
    assert!(at("evacuate dc1-c1-s1") < at("power-on dc1-c1"));
    assert!(at("power-on dc1-c1") < at("clear-forced-down dc1-c1"));
    assert!(at("clear-forced-down dc1-c1") < at("enable dc1-c1"));
    assert!(r.state.hosts.is_empty());
    let c1 = &r.world.hosts["dc1-c1"];
    assert!(c1.powered && !c1.forced_down && c1.status == ServiceStatus::Enabled);
}

#[test]
fn step_11_smart_evacuation_follows_each_migration_and_retries_a_failed_one() {
    let mut r = run(&names("dc1", 4), 2, &["smart_evacuation: true"]);
    quiet(&mut r);
    let from = r.issued.len();
    let mut f = Scripted::default();
    f.evacuation_failures.insert(sid("dc1-c1-s0"), 2);
    crash(&mut r, "dc1-c1");
    pass(&mut r, 300, &mut f);
    let done = issued_since(&r, from);
    let evacuations = done.iter().filter(|a| *a == "evacuate dc1-c1-s0").count();
    assert_eq!(evacuations, 3, "{done:?}");
    assert!(done.iter().any(|a| a == "follow-migration dc1-c1-s0"));
    assert!(r.state.hosts.is_empty(), "{}", sentence(&r));
    assert_ne!(r.world.servers[&sid("dc1-c1-s0")].host, host("dc1-c1"));
}

#[test]
fn step_11_smart_evacuation_reads_an_evacuation_in_the_decision_that_sees_it_accepted() {
    // A read is due (evacuation_poll_seconds passed since the poll); nothing but a result may
    // wake the runtime's loop before its next poll, so waiting a decision costs up to a poll.
    let mut r = run(
        &names("dc1", 4),
        1,
        &["smart_evacuation: true", "evacuation_poll_seconds: 1"],
    );
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    let mut sent = false;
    for _ in 0..40 {
        let d = r.decide();
        r.execute(&mut NoFaults);
        if acts(&d).contains(&"evacuate dc1-c1-s0".to_owned()) {
            sent = true;
            break;
        }
    }
    assert!(sent, "the evacuation was sent: {}", sentence(&r));
    // Its answer (accepted) is in: this decision follows it and reads its migration at once.
    let d = r.decide();
    assert!(
        acts(&d).contains(&"follow-migration dc1-c1-s0".to_owned()),
        "{:?}",
        acts(&d)
    );
}

#[test]
fn step_11_smart_evacuation_gives_a_host_up_after_five_failures_of_one_server() {
    let mut r = run(
        &names("dc1", 4),
        3,
        &["smart_evacuation: true", "force_enable: true"],
    );
    quiet(&mut r);
    let from = r.issued.len();
    r.world.cursed.insert(sid("dc1-c1-s1"));
    crash(&mut r, "dc1-c1");
    pass(&mut r, 600, &mut NoFaults);
    let done = issued_since(&r, from);
    assert_eq!(
        done.iter().filter(|a| *a == "evacuate dc1-c1-s1").count(),
        5,
        "{done:?}"
    );
    assert!(
        !done
            .iter()
            .any(|a| a.starts_with("power-on") || a == "enable dc1-c1"),
        "force_enable never re-enables after a smart evacuation failure: {done:?}"
    );
    assert_eq!(
        phase(&r, "dc1-c1"),
        Some(HostPhase::Halted {
            why: Halt::SmartEvacuationFailed {
                server: sid("dc1-c1-s1")
            }
        })
    );
    let steps = events_since(&r, from)
        .into_iter()
        .find_map(|e| match e {
            EventKind::SmartEvacuationFailed { steps, .. } => Some(steps),
            _ => None,
        })
        .expect("the operator's event");
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[2], "set dc1-c1's forced-down flag to false");
    let c1 = &r.world.hosts["dc1-c1"];
    assert!(c1.forced_down && c1.status == ServiceStatus::Disabled);
    assert!(
        c1.reason.as_deref().unwrap().contains("FAILED"),
        "{:?}",
        c1.reason
    );
    // No server is left locked by qfence.
    assert!(
        r.world.servers.values().all(|s| !s.locked),
        "{:?}",
        r.world.servers
    );
}

#[test]
fn step_11_workers_bound_the_evacuations_under_way() {
    let mut r = run(
        &names("dc1", 3),
        6,
        &["smart_evacuation: true", "workers: 2"],
    );
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    let mut most = 0;
    for _ in 0..60 {
        r.world.advance(Duration::from_secs(2));
        r.poll();
        r.settle(&mut NoFaults, 10);
        let under_way = r
            .state
            .hosts
            .values()
            .flat_map(|h| h.servers.values())
            .filter(|e| {
                matches!(
                    e.state,
                    qfence_core::instance_ha::EvacState::Requested { .. }
                        | qfence_core::instance_ha::EvacState::Following { .. }
                )
            })
            .count();
        most = most.max(under_way);
        assert!(under_way <= 2, "{under_way} evacuations at once");
    }
    assert_eq!(most, 2);
    assert!(r.world.servers.values().all(|s| s.host != host("dc1-c1")));
}

#[test]
fn step_12_force_enable_re_enables_despite_unsuccessful_evacuations() {
    for force in [false, true] {
        let flag = format!("force_enable: {force}");
        let mut r = run(&names("dc1", 4), 2, &[&flag]);
        quiet(&mut r);
        let from = r.issued.len();
        let mut f = Scripted::default();
        f.refuse.insert(("evacuate", "dc1-c1-s0".into()));
        crash(&mut r, "dc1-c1");
        pass(&mut r, 200, &mut f);
        let done = issued_since(&r, from);
        assert_eq!(
            done.contains(&"power-on dc1-c1".to_owned()),
            force,
            "{done:?}"
        );
        assert_eq!(
            done.contains(&"enable dc1-c1".to_owned()),
            force,
            "{done:?}"
        );
        if !force {
            assert_eq!(
                phase(&r, "dc1-c1"),
                Some(HostPhase::LeftDisabled {
                    why: LeftWhy::Unsuccessful
                })
            );
        }
    }
}

#[test]
fn gate_observer_health_nothing_is_done_while_qfence_cannot_trust_its_view() {
    for case in ["nova", "quorum", "old view"] {
        let mut r = run(&names("dc1", 4), 1, &[]);
        quiet(&mut r);
        crash(&mut r, "dc1-c1");
        match case {
            "nova" => r.observer.nova_reachable = false,
            "quorum" => r.observer.quorum = false,
            _ => r.world.advance(Duration::from_secs(90)),
        }
        let d = r.decide();
        assert!(acts(&d).is_empty(), "{case}: {}", d.sentence);
        assert!(
            d.sentence.to_string().contains("doing nothing"),
            "{}",
            d.sentence
        );
        assert!(events(&d).iter().any(|e| matches!(
            e,
            EventKind::GateClosed {
                gate: GateKind::Observer,
                ..
            }
        )));
        // Trusting it again: the host is taken on.
        r.observer.nova_reachable = true;
        r.observer.quorum = true;
        r.poll();
        let d = r.decide();
        assert_eq!(acts(&d), ["fence dc1-c1"], "{case}: {}", d.sentence);
        assert!(events(&d).contains(&EventKind::GateOpened {
            gate: GateKind::Observer
        }));
    }
}

#[test]
fn gate_heartbeat_cliff_holds_fencing_for_its_cycles_then_expires() {
    let mut r = run(&names("dc1", 6), 1, &["threshold_percent: 100"]);
    quiet(&mut r);
    let from = r.issued.len();
    // A switch goes: four of six hosts stop reporting at once.
    for h in ["dc1-c0", "dc1-c1", "dc1-c2", "dc1-c3"] {
        r.world.h(h).partitioned = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let d = r.decide();
    assert!(acts(&d).is_empty());
    assert!(
        d.sentence.to_string().contains("heartbeat cliff"),
        "{}",
        d.sentence
    );
    // Three polls (135 s) later, still gone: the cliff expires and they are fenced.
    pass(&mut r, 90, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c0"), 0);
    pass(&mut r, 60, &mut NoFaults);
    for h in ["dc1-c0", "dc1-c1", "dc1-c2", "dc1-c3"] {
        assert_eq!(fences_of(&r, from, h), 1, "{h}");
    }
    assert!(events_since(&r, from).contains(&EventKind::GateOpened {
        gate: GateKind::HeartbeatCliff
    }));
}

#[test]
fn gate_all_services_stale_nothing_is_done_while_nova_cannot_report() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    let from = r.issued.len();
    r.world.recording = false;
    r.world.h("dc1-c1").crashed = true;
    pass(&mut r, 200, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    assert!(
        sentence(&r).contains("all 4 compute services are stale"),
        "{}",
        sentence(&r)
    );
}

#[test]
fn gate_a_host_being_processed_is_never_taken_on_again() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    let from = r.issued.len();
    // Its BMC always reads it on: three attempts, then it stops for an operator.
    let mut f = Scripted::default();
    f.reads.insert(host("dc1-c1"), Observed::NotHeld);
    crash(&mut r, "dc1-c1");
    pass(&mut r, 400, &mut f);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 3);
    assert_eq!(
        phase(&r, "dc1-c1"),
        Some(HostPhase::Halted {
            why: Halt::FenceNotProven
        })
    );
    assert!(
        !issued_since(&r, from)
            .iter()
            .any(|a| a.starts_with("evacuate"))
    );
    assert!(
        events_since(&r, from)
            .iter()
            .any(|e| matches!(e, EventKind::FenceNotProven { .. }))
    );
}

#[test]
fn gate_max_hosts_per_cycle_caps_the_fences_started_in_one_poll() {
    let mut r = run(
        &names("dc1", 6),
        1,
        &[
            "max_hosts_per_cycle: 2",
            "threshold_percent: 100",
            "heartbeat_cliff_percent: 100",
        ],
    );
    quiet(&mut r);
    let from = r.issued.len();
    for h in ["dc1-c0", "dc1-c1", "dc1-c2"] {
        r.world.h(h).crashed = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let ds = r.settle(&mut NoFaults, 10);
    let fenced: Vec<_> = all_acts(&ds)
        .into_iter()
        .filter(|a| a.starts_with("fence "))
        .collect();
    assert_eq!(fenced, ["fence dc1-c0", "fence dc1-c1"]);
    assert!(
        ds[0]
            .sentence
            .to_string()
            .contains("dc1-c2 waits for the next cycle"),
        "{}",
        ds[0].sentence
    );
    pass(&mut r, 45, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c2"), 1);
}

#[test]
fn gate_aggregate_limit_leaves_an_aggregate_with_too_many_failures_alone() {
    let mut r = run(
        &names("dc1", 6),
        1,
        &["threshold_percent: 100", "heartbeat_cliff_percent: 100"],
    );
    r.world.aggregates.push(Aggregate {
        name: "rack-1".into(),
        hosts: [host("dc1-c0"), host("dc1-c1"), host("dc1-c2")].into(),
        metadata: BTreeMap::from([("qfence:max_failures".to_owned(), "1".to_owned())]),
        zone: None,
    });
    quiet(&mut r);
    let from = r.issued.len();
    for h in ["dc1-c0", "dc1-c1", "dc1-c4"] {
        r.world.h(h).crashed = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let ds = r.settle(&mut NoFaults, 10);
    assert_eq!(fences_of(&r, from, "dc1-c0"), 0);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    assert_eq!(fences_of(&r, from, "dc1-c4"), 1);
    assert!(
        ds[0]
            .sentence
            .to_string()
            .contains("2 hosts of aggregate rack-1 failed, more than its limit of 1"),
        "{}",
        ds[0].sentence
    );
}

#[test]
fn gate_no_scheduler_up_nothing_is_fenced_or_evacuated() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    let from = r.issued.len();
    r.world.schedulers_up = false;
    crash(&mut r, "dc1-c1");
    pass(&mut r, 90, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    assert!(
        sentence(&r).contains("no nova-scheduler is up"),
        "{}",
        sentence(&r)
    );
    r.world.schedulers_up = true;
    pass(&mut r, 60, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
}

#[test]
fn gate_sites_a_site_lost_as_a_whole_is_left_to_site_failover() {
    let mut hosts = names("dc1", 3);
    hosts.extend(names("dc2", 3));
    let mut r = Run::new(
        World::new(&hosts, 1),
        config(
            &hosts,
            &[],
            &["threshold_percent: 80", "heartbeat_cliff_percent: 100"],
        ),
    );
    quiet(&mut r);
    let from = r.issued.len();
    for h in ["dc2-c0", "dc2-c1", "dc2-c2", "dc1-c1"] {
        r.world.h(h).crashed = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let ds = r.settle(&mut NoFaults, 10);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
    for h in ["dc2-c0", "dc2-c1", "dc2-c2"] {
        assert_eq!(fences_of(&r, from, h), 0, "{h}");
    }
    assert!(
        ds[0].sentence.to_string().contains(
            "every host of site dc2 failed: a site lost as a whole is its site failover's job"
        ),
        "{}",
        ds[0].sentence
    );
    // The orchestrator cluster's own view of a lost site counts too.
    let mut r = Run::new(
        World::new(&hosts, 1),
        config(&hosts, &[], &["threshold_percent: 80"]),
    );
    quiet(&mut r);
    r.observer
        .lost_sites
        .insert(qfence_model::SiteId::new("dc2").unwrap());
    crash(&mut r, "dc2-c0");
    let d = r.decide();
    assert!(acts(&d).is_empty(), "{}", d.sentence);
    assert!(
        d.sentence
            .to_string()
            .contains("site dc2 is lost to the orchestrator cluster")
    );
}

#[test]
fn gate_sites_a_site_over_the_threshold_is_held_back_while_the_other_goes_on() {
    let mut hosts = names("dc1", 4);
    hosts.extend(names("dc2", 4));
    let mut r = Run::new(
        World::new(&hosts, 1),
        config(
            &hosts,
            &[],
            &["threshold_percent: 50", "heartbeat_cliff_percent: 100"],
        ),
    );
    quiet(&mut r);
    let from = r.issued.len();
    for h in ["dc2-c0", "dc2-c1", "dc2-c2", "dc1-c0"] {
        r.world.h(h).crashed = true;
    }
    r.world.advance(Duration::from_secs(40));
    r.poll();
    let ds = r.settle(&mut NoFaults, 10);
    // 4 of 8 is not over 50 %, but 3 of dc2's 4 is.
    assert_eq!(fences_of(&r, from, "dc1-c0"), 1);
    assert_eq!(fences_of(&r, from, "dc2-c0"), 0);
    assert!(
        ds[0]
            .sentence
            .to_string()
            .contains("3 of 4 hosts of site dc2 failed (75 %)"),
        "{}",
        ds[0].sentence
    );
}

#[test]
fn gate_fence_proof_a_host_read_powered_on_while_evacuated_is_stopped() {
    let mut r = run(
        &names("dc1", 4),
        8,
        &["smart_evacuation: true", "workers: 1"],
    );
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    r.run_for(Duration::from_secs(20), POLL, &mut NoFaults);
    assert_eq!(phase(&r, "dc1-c1"), Some(HostPhase::Evacuating));
    // Someone powers it on; the fence watch reads it on.
    r.world.h("dc1-c1").powered = true;
    let from = r.issued.len();
    r.run_for(Duration::from_secs(120), POLL, &mut NoFaults);
    assert_eq!(
        phase(&r, "dc1-c1"),
        Some(HostPhase::Halted {
            why: Halt::PoweredOnWhileEvacuated
        }),
        "{}",
        sentence(&r)
    );
    assert!(events_since(&r, from).contains(&EventKind::PoweredOnWhileEvacuated));
    assert_eq!(
        fences_of(&r, from, "dc1-c1"),
        0,
        "never fenced twice in one incident"
    );
}

#[test]
fn gate_fence_proof_evacuations_wait_for_a_fresh_read_back() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    // Fenced, read back and isolated...
    for _ in 0..5 {
        r.decide();
        r.execute(&mut NoFaults);
    }
    assert_eq!(phase(&r, "dc1-c1"), Some(HostPhase::Evacuating));
    // ... but the BMC cannot be read any more, and the reading ages past two polls.
    let mut f = Scripted::default();
    f.reads.insert(host("dc1-c1"), Observed::Unknown);
    r.queue.clear();
    r.world.advance(Duration::from_secs(100));
    r.poll();
    let from = r.issued.len();
    r.settle(&mut f, 10);
    assert!(
        !issued_since(&r, from)
            .iter()
            .any(|a| a.starts_with("evacuate"))
    );
    assert!(
        sentence(&r).contains("wait for a fresh read-back of its fence"),
        "{}",
        sentence(&r)
    );
}

fn new_leader(r: &mut Run) {
    r.term = Term(r.term.0 + 1);
    // The old leader's operations are gone with it.
    r.queue.clear();
    r.results.clear();
}

#[test]
fn resume_a_new_leader_never_fences_a_host_past_its_fence_again() {
    let mut r = run(
        &names("dc1", 4),
        3,
        &["smart_evacuation: true", "workers: 1"],
    );
    quiet(&mut r);
    let from = r.issued.len();
    crash(&mut r, "dc1-c1");
    r.run_for(Duration::from_secs(15), POLL, &mut NoFaults);
    assert_eq!(phase(&r, "dc1-c1"), Some(HostPhase::Evacuating));
    new_leader(&mut r);
    let d = r.decide();
    assert!(
        d.sentence
            .to_string()
            .contains("new leader (term 2) resumes dc1-c1 at evacuating"),
        "{}",
        d.sentence
    );
    r.run_for(Duration::from_secs(300), POLL, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 1);
    assert!(r.state.hosts.is_empty(), "{}", sentence(&r));
    assert!(
        r.world
            .servers
            .values()
            .all(|s| s.host != host("dc1-c1") && !s.locked)
    );
}

#[test]
fn resume_a_new_leader_reads_a_half_done_fence_back_before_fencing_again() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    let d = r.decide();
    assert_eq!(acts(&d), ["fence dc1-c1"]);
    // The fence ran, but its leader died before it heard back.
    r.execute(&mut NoFaults);
    new_leader(&mut r);
    let d = r.decide();
    assert_eq!(acts(&d), ["check-fence dc1-c1"], "{}", d.sentence);
    r.execute(&mut NoFaults);
    let d = r.decide();
    assert_eq!(acts(&d), ["force-down dc1-c1"], "{}", d.sentence);
}

#[test]
fn resume_leftover_locks_are_released() {
    let mut r = run(&names("dc1", 4), 2, &[]);
    // A leader locked a server and died; the state knows nothing of it (an old qfence, a lost
    // record). A server an operator locked for another reason is left alone.
    for (s, why) in [
        ("dc1-c0-s0", LOCK_REASON),
        ("dc1-c2-s1", "alice: debugging"),
    ] {
        let srv = r.world.servers.get_mut(&sid(s)).unwrap();
        srv.locked = true;
        srv.locked_reason = Some(why.to_owned());
    }
    r.poll();
    let d = r.decide();
    assert_eq!(acts(&d), ["unlock dc1-c0-s0"]);
    assert!(
        d.sentence
            .to_string()
            .contains("releasing 1 leftover qfence lock")
    );
    // Not again before the next poll shows it.
    r.world.advance(Duration::from_secs(1));
    assert!(acts(&r.decide()).is_empty());
    r.execute(&mut NoFaults);
    r.poll();
    r.decide();
    assert!(!r.world.servers[&sid("dc1-c0-s0")].locked);
    assert!(r.world.servers[&sid("dc1-c2-s1")].locked);
    assert!(r.state.released.is_empty());
}

#[test]
fn resume_a_lock_whose_leader_died_is_settled_from_the_view_and_released() {
    let mut r = run(&names("dc1", 4), 1, &["smart_evacuation: true"]);
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    // Fence, check, disable, force down, lock.
    for _ in 0..5 {
        r.decide();
        r.execute(&mut NoFaults);
    }
    assert!(r.world.servers[&sid("dc1-c1-s0")].locked);
    new_leader(&mut r);
    r.poll();
    r.run_for(Duration::from_secs(200), POLL, &mut NoFaults);
    assert!(r.state.hosts.is_empty(), "{}", sentence(&r));
    assert!(!r.world.servers[&sid("dc1-c1-s0")].locked);
}

#[test]
fn a_deposed_leaders_write_is_refused_by_the_compare_and_set() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    let old = r.state.clone();
    crash(&mut r, "dc1-c1");
    r.decide();
    let stale = r.decide_on(
        &old,
        Leadership {
            leader: true,
            term: Term(1),
            lease_until: r.now().plus(Duration::from_secs(10)),
        },
    );
    let ch: &CloudStateChange = stale.state_change.as_ref().unwrap();
    assert!(r.state.apply(ch).is_err());
    // Not the leader, or a lease run out: nothing issued, nothing written.
    let mut lease = r.leadership();
    lease.lease_until = r.now();
    let d = r.decide_on(&r.state.clone(), lease);
    assert!(d.commands.is_empty() && d.state_change.is_none());
    assert!(d.sentence.to_string().contains("lease (term 1) ran out"));
}

#[test]
fn an_orphan_host_disabled_by_qfence_is_adopted_and_its_fence_read_back() {
    let mut r = run(&names("dc1", 4), 1, &[]);
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    for _ in 0..4 {
        r.decide();
        r.execute(&mut NoFaults);
    }
    // The state is lost (a new cluster); Nova still says qfence was evacuating dc1-c1 (and
    // reads it stale once its isolating writes are older than delta_seconds).
    r.state = CloudState::default();
    r.queue.clear();
    r.results.clear();
    r.world.advance(Duration::from_secs(35));
    r.poll();
    let d = r.decide();
    assert_eq!(acts(&d), ["check-fence dc1-c1"], "{}", d.sentence);
    assert!(
        d.sentence
            .to_string()
            .contains("disabled by qfence with no record")
    );
    r.execute(&mut NoFaults);
    let from = r.issued.len();
    r.run_for(Duration::from_secs(200), POLL, &mut NoFaults);
    assert_eq!(
        fences_of(&r, from, "dc1-c1"),
        0,
        "read back off: not fenced again"
    );
    assert!(r.state.hosts.is_empty(), "{}", sentence(&r));
}

#[test]
fn a_fence_read_back_while_disabled_is_recorded_so_no_leader_fences_the_host_again() {
    let hosts = names("dc1", 4);
    let mut r = run(&hosts, 1, &[]);
    r.disabled_config = Some(config(&hosts, &[], &["disabled: true"]));
    quiet(&mut r);
    crash(&mut r, "dc1-c1");
    assert_eq!(acts(&r.decide()), ["fence dc1-c1"]);
    r.execute(&mut NoFaults);
    assert_eq!(acts(&r.decide()), ["check-fence dc1-c1"]);
    // An operator disables Instance HA while the read-back is out; it comes back off.
    r.disabled = true;
    r.execute(&mut NoFaults);
    let d = r.decide();
    assert!(acts(&d).is_empty(), "{}", d.sentence);
    assert!(
        d.sentence
            .to_string()
            .contains("dc1-c1 fenced (read back off"),
        "{}",
        d.sentence
    );
    assert_eq!(phase(&r, "dc1-c1"), Some(HostPhase::Isolating));
    // A new leader, Instance HA enabled again: the host goes on from its proof.
    r.disabled = false;
    new_leader(&mut r);
    let from = r.issued.len();
    r.run_for(Duration::from_secs(120), POLL, &mut NoFaults);
    assert_eq!(fences_of(&r, from, "dc1-c1"), 0);
    assert!(issued_since(&r, from).contains(&"evacuate dc1-c1-s0".to_owned()));
}

#[test]
fn the_spec_lists_every_gate_with_its_fail_mode() {
    use qfence_core::instance_ha::FailMode;
    const SPEC: &str = include_str!("../../../../docs/specs/instance-ha.md");
    for g in GateKind::ALL {
        let row = SPEC
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", g.name())))
            .unwrap_or_else(|| panic!("no row for the gate {:?} in the spec", g.name()));
        let mode = match g.fail_mode() {
            FailMode::Open => "fail-open",
            FailMode::Closed => "fail-closed",
        };
        assert!(row.contains(mode), "{}: {row}", g.name());
    }
}
