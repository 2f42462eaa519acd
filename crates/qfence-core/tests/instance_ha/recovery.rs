//! Steps 9 and 10 against what a real Nova does to a host coming back (found by the end-to-end
//! test against Nova 34, `qfence-server/tests/runtime/instance_ha_real_nova.rs`): its
//! restarted nova-compute marks the evacuation records from it completed, also those still
//! under way (they end `done` later); Nova refuses to clear forced-down while a record from it
//! reads `done`; every write to a service moves its `updated_at`, as a report does (`world.rs`
//! models all three).

use std::time::Duration;

use qfence_core::instance_ha::{Action, MigrationStatus, ServerId, ServiceStatus};
use qfence_core::{Observed, Outcome};
use qfence_model::config::HostName;

use crate::world::{Faults, NoFaults, Run, World, config};

const POLL: Duration = Duration::from_secs(5);

fn run(params: &[&str]) -> Run {
    let hosts: Vec<String> = (0..4).map(|i| format!("dc1-c{i}")).collect();
    let mut params = params.to_vec();
    params.push("poll_seconds: 5");
    let mut r = Run::new(World::new(&hosts, 2), config(&hosts, &[], &params));
    r.poll();
    r.settle(&mut NoFaults, 3);
    r
}

/// The commands issued since `from` on `host`, as "action host", in order.
fn host_acts(r: &Run, from: usize, host: &str) -> Vec<&'static str> {
    r.issued[from..]
        .iter()
        .filter_map(|(_, c)| match &c.action {
            Action::PowerOn { host: h, .. }
            | Action::Enable { host: h }
            | Action::ClearForcedDown { host: h }
                if h.as_str() == host =>
            {
                Some(c.action.name())
            }
            _ => None,
        })
        .collect()
}

/// The world's evacuation records from `host`.
fn records(r: &Run, host: &str) -> Vec<MigrationStatus> {
    r.world
        .migrations
        .iter()
        .filter(|m| m.source.as_str() == host)
        .map(|m| m.status.clone())
        .collect()
}

fn refused_clears(r: &Run) -> usize {
    r.executed
        .iter()
        .filter(|(c, o, _)| {
            matches!(c.action, Action::ClearForcedDown { .. }) && *o == Outcome::Failed
        })
        .count()
}

#[test]
fn step_10_forced_down_is_cleared_once_nova_cleaned_up_the_evacuations_then_it_is_enabled() {
    let mut r = run(&[]);
    let from = r.issued.len();
    r.world.h("dc1-c1").crashed = true;
    r.run_for(Duration::from_secs(240), POLL, &mut NoFaults);
    assert!(
        r.state.hosts.is_empty(),
        "back in service: {:?}",
        r.state.hosts
    );
    assert_eq!(
        host_acts(&r, from, "dc1-c1"),
        ["power-on", "clear-forced-down", "enable"],
        "the clear waits for the host's nova-compute (its own writes move updated_at too), \
         and the enable for the clear"
    );
    assert_eq!(refused_clears(&r), 0, "no clear was refused");
    let records = records(&r, "dc1-c1");
    assert_eq!(records.len(), 2);
    assert!(
        records.iter().all(|s| *s == MigrationStatus::Completed),
        "{records:?}"
    );
    let c1 = &r.world.hosts["dc1-c1"];
    assert!(c1.powered && !c1.forced_down && c1.status == ServiceStatus::Enabled);
}

/// Evacuations that take a minute each.
struct Slow;

impl Faults for Slow {
    fn read(&mut self, _host: &HostName, truth: Observed) -> Observed {
        truth
    }

    fn evacuation(&mut self, _server: &ServerId) -> (bool, Duration) {
        (true, Duration::from_secs(60))
    }
}

#[test]
fn step_9_a_host_is_powered_on_only_once_nova_finished_its_evacuations() {
    // Without smart evacuation an evacuation is done once Nova accepts it; the host is still
    // powered on only once Nova's records from it ended, or its restarted nova-compute would
    // complete records whose rebuild then ends `done`, and forced-down could not be cleared.
    let mut r = run(&[]);
    let from = r.issued.len();
    r.world.h("dc1-c1").crashed = true;
    r.run_for(Duration::from_secs(60), POLL, &mut Slow);
    assert!(
        r.issued[from..]
            .iter()
            .any(|(_, c)| matches!(c.action, Action::Evacuate { .. })),
        "evacuating by now"
    );
    assert_eq!(host_acts(&r, from, "dc1-c1"), Vec::<&str>::new());
    assert!(
        r.last
            .as_ref()
            .unwrap()
            .sentence
            .to_string()
            .contains("dc1-c1: waiting for Nova to finish 2 evacuation(s) before it is powered on"),
        "{}",
        r.last.as_ref().unwrap().sentence
    );
    r.run_for(Duration::from_secs(240), POLL, &mut Slow);
    assert!(
        r.state.hosts.is_empty(),
        "back in service: {:?}",
        r.state.hosts
    );
    assert_eq!(
        host_acts(&r, from, "dc1-c1"),
        ["power-on", "clear-forced-down", "enable"]
    );
    assert_eq!(refused_clears(&r), 0);
    assert!(
        records(&r, "dc1-c1")
            .iter()
            .all(|s| *s == MigrationStatus::Completed)
    );
}

#[test]
fn a_resumed_loop_waits_for_an_evacuation_nova_still_runs_instead_of_asking_again() {
    // A loop (or leader) sent the evacuations and was gone before it heard Nova's answers; the
    // next finds the servers rebuilding. Asking again is refused (409: task_state
    // rebuilding), and counting that refusal as a failed evacuation left the host out for an
    // operator though every server was moving (the runtime's restart test caught it).
    let mut r = run(&[]);
    r.world.h("dc1-c1").crashed = true;
    let evacuate_sent = |r: &Run| {
        r.issued
            .iter()
            .any(|(_, c)| matches!(c.action, Action::Evacuate { .. }))
    };
    for _ in 0..40 {
        if evacuate_sent(&r) {
            break;
        }
        r.world.advance(Duration::from_secs(1));
        r.poll();
        r.decide();
        r.execute(&mut Slow);
    }
    assert!(evacuate_sent(&r), "{}", r.decide().sentence);
    // The evacuations ran in Nova; their answers are lost with the loop.
    r.queue.clear();
    r.results.clear();
    let from = r.executed.len();
    r.run_for(Duration::from_secs(300), POLL, &mut Slow);
    let refused = r.executed[from..]
        .iter()
        .filter(|(c, o, _)| matches!(c.action, Action::Evacuate { .. }) && *o == Outcome::Failed)
        .count();
    assert_eq!(refused, 0, "no evacuation asked again while Nova ran it");
    assert!(
        r.state.hosts.is_empty(),
        "back in service: {:?}",
        r.state.hosts
    );
    assert!(
        r.world
            .servers
            .values()
            .all(|s| s.host.as_str() != "dc1-c1"),
        "every server moved"
    );
}
