//! The `instance_ha:` section: the example loads, every mistake is reported at once with its
//! path, and a host's fence resolves from its own entry or the first rule that matches it.

use qfence_model::config::{HostName, NoFence, Severity, load_str};

const EXAMPLE: &str = include_str!("../../../examples/instance-ha.yaml");

fn show(issues: &[qfence_model::config::Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{} {}\n", i.severity, i))
        .collect()
}

#[test]
fn the_example_loads_and_resolves_each_hosts_fence() {
    let l = load_str(EXAMPLE, "instance-ha.yaml").unwrap_or_else(|e| panic!("{}", show(&e)));
    assert!(l.warnings.is_empty(), "{}", show(&l.warnings));
    let c = &l.config;
    let cloud = c.cloud("overcloud").unwrap();
    assert_eq!(cloud.poll.as_secs(), 45);
    assert_eq!(cloud.workers, 4);
    assert!(cloud.smart_evacuation && cloud.check_kdump && cloud.reserved_hosts);
    let fence = |h: &str| c.host_fence(cloud, &HostName::new(h).unwrap());
    // A rule with a templated controller.
    let f = fence("compute-2.cloud.example").unwrap();
    assert_eq!(f.binding.controller.as_str(), "bmc-compute-2");
    assert_eq!(f.binding.resource, "1");
    assert_eq!(f.site.as_str(), "dc1");
    // The first matching rule wins; a host entry's site wins over the rule's.
    assert_eq!(
        fence("compute-10.cloud.example").unwrap().site.as_str(),
        "dc2"
    );
    let f = fence("compute-11.cloud.example").unwrap();
    assert_eq!(
        (f.binding.controller.as_str(), f.site.as_str()),
        ("bmc-compute-11", "dc2")
    );
    // fence_kdump messages from its address are legacy-0's.
    assert_eq!(cloud.kdump_port, 7410);
    let legacy = &cloud.hosts["legacy-0.cloud.example"];
    assert_eq!(legacy.address, Some("192.0.2.40".parse().unwrap()));
    // Its own entry.
    let f = fence("rack7-0.cloud.example").unwrap();
    assert_eq!(
        (f.binding.controller.as_str(), f.binding.resource.as_str()),
        ("pdu-rack-7", "3")
    );
    // A rule naming a controller that is not configured, and a host no rule matches.
    assert_eq!(
        fence("compute-3.cloud.example"),
        Err(NoFence::UnknownController {
            rule: 1,
            controller: "bmc-compute-3".into()
        })
    );
    assert_eq!(
        fence("storage-0.cloud.example"),
        Err(NoFence::NotConfigured)
    );
}

#[test]
fn defaults_are_the_seeds() {
    let text = EXAMPLE.replace(
        &EXAMPLE[EXAMPLE.find("    poll_seconds").unwrap()..EXAMPLE.find("    hosts:").unwrap()],
        "",
    );
    let l = load_str(&text, "x").unwrap_or_else(|e| panic!("{}", show(&e)));
    let cloud = l.config.cloud("overcloud").unwrap().clone();
    assert_eq!(cloud.poll.as_secs(), 45);
    assert_eq!(cloud.delta.as_secs(), 30);
    assert_eq!(cloud.threshold_percent, 50);
    assert!(!cloud.disabled && !cloud.reserved_hosts && !cloud.check_kdump);
    assert_eq!(cloud.kdump_timeout.as_secs(), 30);
    assert_eq!(cloud.kdump_port, 7410);
    assert!(!cloud.leave_disabled && !cloud.smart_evacuation && !cloud.force_enable);
    assert_eq!((cloud.workers, cloud.evacuation_retries), (4, 5));
    assert_eq!(cloud.max_hosts_per_cycle, 10);
    assert_eq!(cloud.evacuation_timeout.as_secs(), 300);
    assert_eq!(cloud.evacuable_tag, "evacuable");
    assert_eq!(cloud.aggregate_max_failures, None);
}

/// One cloud with a mistake of every kind, each at a known path.
const BROKEN: &str = r#"
cluster: {name: t}
sites: {dc1: {}, dc2: {}, witness: {witness: true}}
orchestrators:
  o1: {site: dc1, address: "127.0.0.1:7401"}
controllers:
  nova: {type: nova, endpoint: "https://k:5000/v3", site: dc1, secret: nv, username: u, project: p}
  bmc-a: {type: redfish, endpoint: "https://b", site: dc1, secret: s, username: u}
  fgt: {type: fortigate, endpoint: "https://f", site: dc1, secret: s}
  pg: {type: postgres, endpoint: "postgresql://p/db", site: dc1, secret: s, username: u}
instance_ha:
  bad:
    nova: bmc-a
    threshold_percent: 0
    heartbeat_cliff_percent: 150
    workers: 0
    evacuate_to_reserved: true
    kdump_timeout_seconds: 60
    kdump_max_wait_seconds: 30
    kdump_port: 70000
    delta_seconds: 10
    colour: blue
    hosts:
      h1: {controller: nope, capability: power.off, resource: "1"}
      h2: {controller: fgt, capability: policy.disable, resource: "7"}
      h3: {controller: nova, capability: power.off, resource: "1"}
      h4: {controller: pg, capability: db.demote, resource: self}
      h5: {controller: bmc-a, capability: power.off}
      h6: {site: witness}
      "-bad": {}
      h7: {controller: "bmc-{short}", capability: power.off, resource: "1"}
      h8: {address: 192.0.2.8}
      h9: {address: 192.0.2.8}
      h10: {address: compute-10}
    host_rules:
      - {match: "compute-*", controller: bmc-a, capability: power.off, resource: "1"}
      - {match: "x-*", controller: "ipmi-{short}", capability: power.off, resource: "1"}
      - {match: "c[0-9]", controller: "bmc-{short}", capability: power.off, resource: "1"}
      - {match: "y-*", controller: "bmc-{short}", capability: power.of, resource: "1", site: dc9}
  other:
    nova: missing
"#;

#[test]
fn every_mistake_in_a_cloud_is_reported_at_once_with_its_path() {
    let issues = load_str(BROKEN, "broken.yaml").unwrap_err();
    let got: Vec<(Severity, &str, &str)> = issues
        .iter()
        .map(|i| (i.severity, i.path.as_str(), i.message.as_str()))
        .collect();
    let expect: &[(&str, &str)] = &[
        ("instance_ha.bad.colour", "unknown key \"colour\""),
        (
            "instance_ha.bad.delta_seconds",
            "delta_seconds (10) is less than two",
        ),
        (
            "instance_ha.bad.evacuate_to_reserved",
            "needs reserved_hosts: true",
        ),
        (
            "instance_ha.bad.heartbeat_cliff_percent",
            "150 is out of range: expected from 1 to 100",
        ),
        (
            "instance_ha.bad.host_rules[0].resource",
            "would be fenced through the same resource",
        ),
        (
            "instance_ha.bad.host_rules[1].controller",
            "no controller's name fits the template",
        ),
        (
            "instance_ha.bad.host_rules[2].match",
            "is not a host name pattern",
        ),
        (
            "instance_ha.bad.host_rules[3].capability",
            "\"power.of\" is not one of its capabilities",
        ),
        ("instance_ha.bad.host_rules[3].site", "unknown site \"dc9\""),
        ("instance_ha.bad.hosts.-bad", "is not a host name"),
        (
            "instance_ha.bad.hosts.h1.controller",
            "unknown controller \"nope\"",
        ),
        (
            "instance_ha.bad.hosts.h2.capability",
            "a network fence here, which cannot prove a compute host stopped",
        ),
        (
            "instance_ha.bad.hosts.h3.capability",
            "Nova cannot power a host off",
        ),
        (
            "instance_ha.bad.hosts.h4.capability",
            "an application fence here",
        ),
        (
            "instance_ha.bad.hosts.h5.resource",
            "missing: a host's fence needs controller, capability and resource together",
        ),
        (
            "instance_ha.bad.hosts.h6.site",
            "\"witness\" is a witness site",
        ),
        (
            "instance_ha.bad.hosts.h7.controller",
            "a host's own fence names its controller, without {host} or {short}",
        ),
        (
            "instance_ha.bad.kdump_timeout_seconds",
            "kdump_timeout_seconds (60) must be less than kdump_max_wait_seconds (30)",
        ),
        (
            "instance_ha.bad.hosts.h9.address",
            "address 192.0.2.8 is also host \"h8\"'s",
        ),
        (
            "instance_ha.bad.hosts.h10.address",
            "\"compute-10\" is not an IP address",
        ),
        (
            "instance_ha.bad.kdump_port",
            "70000 is out of range: expected from 1 to 65535",
        ),
        (
            "instance_ha.bad.nova",
            "controller \"bmc-a\" is a redfish controller; nova: needs a nova one",
        ),
        (
            "instance_ha.bad.threshold_percent",
            "0 is out of range: expected from 1 to 100",
        ),
        (
            "instance_ha.bad.workers",
            "0 is out of range: expected at least 1",
        ),
        (
            "instance_ha.other.nova",
            "unknown controller \"missing\"; nova controllers: nova",
        ),
    ];
    for (path, words) in expect {
        assert!(
            got.iter().any(|(_, p, m)| p == path && m.contains(words)),
            "missing {path}: {words}\ngot:\n{}",
            show(&issues)
        );
    }
    let errors = got.iter().filter(|(s, _, _)| *s == Severity::Error).count();
    assert_eq!(errors, expect.len() - 1, "{}", show(&issues));
}

mod damaged {
    use proptest::prelude::*;
    use qfence_model::ControllerType;
    use qfence_model::config::load_str;

    use super::EXAMPLE;

    #[derive(Debug, Clone)]
    enum Edit {
        Drop(usize),
        Repeat(usize),
        Swap(usize, usize),
    }

    fn edits() -> impl Strategy<Value = Vec<Edit>> {
        let n = EXAMPLE.lines().count();
        prop::collection::vec(
            prop_oneof![
                (0..n).prop_map(Edit::Drop),
                (0..n).prop_map(Edit::Repeat),
                (0..n, 0..n).prop_map(|(a, b)| Edit::Swap(a, b)),
            ],
            1..4,
        )
    }

    fn apply(edits: &[Edit]) -> String {
        let mut lines: Vec<&str> = EXAMPLE.lines().collect();
        for e in edits {
            let n = lines.len();
            if n == 0 {
                break;
            }
            match *e {
                Edit::Drop(i) => {
                    lines.remove(i % n);
                }
                Edit::Repeat(i) => {
                    let l = lines[i % n];
                    lines.insert(i % n, l);
                }
                Edit::Swap(a, b) => lines.swap(a % n, b % n),
            }
        }
        lines.join("\n")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn a_damaged_example_never_panics_and_what_loads_resolves(edits in edits()) {
            match load_str(&apply(&edits), "instance-ha.yaml") {
                Ok(l) => {
                    let c = l.config.config();
                    for cloud in c.instance_ha.values() {
                        let nova = &c.controllers[&cloud.nova];
                        prop_assert_eq!(nova.controller_type(), ControllerType::Nova);
                        for entry in cloud.hosts.values() {
                            if let Some(b) = &entry.fence {
                                let ctl = &c.controllers[&b.controller];
                                let spec = ctl.controller_type().capability(&b.capability);
                                prop_assert!(spec.is_some_and(|s| s.unfence.is_some()));
                            }
                        }
                    }
                }
                Err(issues) => {
                    prop_assert!(issues.iter().any(|i| i.is_error()));
                    for i in &issues {
                        prop_assert!(i.line.is_some() || i.path.is_empty(), "{:?}", i);
                    }
                }
            }
        }
    }
}
