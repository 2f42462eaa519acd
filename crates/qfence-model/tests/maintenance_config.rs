//! What issue 16 (orchestrator maintenance, host agents) adds to the configuration: the
//! maintenance keys of `cluster:`, and the `agent` controller type (host agents' unit checks,
//! restarts and a masked unit as a secondary fence). Each loads, and every mistake is
//! reported at once with its path.

use qfence_model::config::{ControllerKind, Issue, Severity, load_str};
use qfence_model::{AgentAlgorithm, ControllerType, FenceLevel, Role};

fn show(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{} {} {}\n", i.severity, i.path, i.message))
        .collect()
}

const HEAD: &str = r#"
cluster: {name: lab}
sites:
  dc1: {}
  dc2: {}
orchestrators:
  o1: {site: dc1, address: "127.0.0.1:7401"}
  o2: {site: dc2, address: "127.0.0.1:7402"}
controllers:
  bmc-dc1: {type: redfish, endpoint: "https://127.0.0.1:8443", site: dc1, reach: [dc2], secret: s, username: q}
  bmc-dc2: {type: redfish, endpoint: "https://127.0.0.1:8444", site: dc2, reach: [dc1], secret: s, username: q}
"#;

fn with(rest: &str) -> String {
    format!("{HEAD}{rest}")
}

const GOOD: &str = r#"
  agents-dc1: {type: agent, site: dc1}
  agents-dc2: {type: agent, site: dc2, timeout_seconds: 5}
plans:
  app:
    owner: dc1
    instances:
      dc1:
        - {controller: bmc-dc1, capability: power.off, resource: db-1, role: fence, required: true}
        - {controller: agents-dc1, capability: unit.mask, resource: db-1/app.service, role: fence}
        - {controller: agents-dc1, capability: unit.health, resource: db-1/app.service, role: health,
           params: {http_url: "http://127.0.0.1:8080/health"}}
        - {controller: agents-dc1, capability: unit.health, resource: db-1/app.service, role: readiness,
           params: {tcp_port: 8080, command: "/usr/bin/app-ready --quiet"}}
        - {controller: agents-dc1, capability: unit.restart, resource: db-1/app.service, role: recovery}
      dc2:
        - {controller: bmc-dc2, capability: power.off, resource: db-2, role: fence, required: true}
        - {controller: agents-dc2, capability: unit.mask, resource: db-2/app.service, role: fence}
        - {controller: agents-dc2, capability: unit.health, resource: db-2/app.service, role: health}
"#;

#[test]
fn an_agent_controller_loads_with_unit_bindings_and_its_mask_is_an_application_fence() {
    let l = load_str(&with(GOOD), "agent.yaml").unwrap_or_else(|e| panic!("{}", show(&e)));
    let c = &l.config;
    let agents = c.controller("agents-dc1").unwrap();
    assert_eq!(agents.kind, ControllerKind::Agent);
    assert_eq!(agents.controller_type(), ControllerType::Agent);
    assert_eq!(agents.secret, None);
    assert_eq!(c.controller("agents-dc2").unwrap().timeout.as_secs(), 5);
    let plan = c.plan("app").unwrap();
    let mask = plan
        .instance(&"dc1".try_into().unwrap())
        .unwrap()
        .iter()
        .find(|b| b.capability == "unit.mask")
        .unwrap();
    assert_eq!(mask.role, Role::Fence);
    assert_eq!(
        agents.fence_level(c.capability(mask)),
        Some(FenceLevel::Application)
    );
}

#[test]
fn every_mistake_of_an_agent_controller_and_its_bindings_is_reported_in_one_run() {
    let broken = r#"
  agents-dc1: {type: agent, site: dc1, secret: s, endpoint: "https://h"}
  agents-dc2: {type: agent, site: dc2}
plans:
  app:
    owner: dc1
    instances:
      dc1:
        - {controller: bmc-dc1, capability: power.off, resource: db-1, role: fence, required: true}
        - {controller: agents-dc2, capability: unit.mask, resource: db-1/app.service, role: fence, required: true}
        - {controller: agents-dc2, capability: unit.health, resource: app.service, role: health}
        - {controller: agents-dc2, capability: unit.health, resource: db-1/app.service, role: readiness,
           params: {tcp_port: 70000, http_url: "ftp://h/x", shell: "true"}}
        - {controller: agents-dc2, capability: unit.unmask, resource: db-1/app.service, role: switchover}
      dc2:
        - {controller: bmc-dc2, capability: power.off, resource: db-2, role: fence, required: true}
        - {controller: agents-dc2, capability: unit.restart, resource: db-2/app.service, role: fence}
"#;
    let issues = load_str(&with(broken), "agent.yaml").unwrap_err();
    let errors: Vec<&Issue> = issues
        .iter()
        .filter(|i| i.severity == Severity::Error)
        .collect();
    let expect = [
        ("controllers.agents-dc1.endpoint", "endpoint"),
        ("controllers.agents-dc1.secret", "takes no secret"),
        (
            "plans.app.instances.dc1[1].required",
            "never proves a site stopped",
        ),
        ("plans.app.instances.dc1[2].resource", "host/unit"),
        ("plans.app.instances.dc1[3].params.tcp_port", "1 to 65535"),
        ("plans.app.instances.dc1[3].params.http_url", "http://"),
        (
            "plans.app.instances.dc1[3].params.shell",
            "tcp_port, http_url, command",
        ),
        (
            "plans.app.instances.dc1[4].capability",
            "unit.health, unit.restart, unit.mask",
        ),
        ("plans.app.instances.dc2[1].role", "recovery"),
    ];
    for (path, part) in expect {
        assert!(
            errors
                .iter()
                .any(|i| i.path == path && i.message.contains(part)),
            "no error at {path} saying {part:?}:\n{}",
            show(&issues)
        );
    }
    assert_eq!(errors.len(), expect.len(), "{}", show(&issues));
}

#[test]
fn the_maintenance_keys_default_to_cloudstacks_and_are_read_when_given() {
    let l = load_str(&with(""), "x.yaml").unwrap_or_else(|e| panic!("{}", show(&e)));
    let m = l.config.config().cluster.maintenance;
    assert_eq!(m.timeout.as_secs(), 3600, "60 min, as CloudStack's");
    assert_eq!(m.agent_algorithm, AgentAlgorithm::Static);
    assert_eq!(m.agent_migrations_per_second, 20);
    let text = with("").replace(
        "cluster: {name: lab}",
        "cluster: {name: lab, maintenance_timeout_seconds: 900, agent_algorithm: roundrobin, \
         agent_migrations_per_second: 50}",
    );
    let l = load_str(&text, "x.yaml").unwrap_or_else(|e| panic!("{}", show(&e)));
    let m = l.config.config().cluster.maintenance;
    assert_eq!(
        (
            m.timeout.as_secs(),
            m.agent_algorithm,
            m.agent_migrations_per_second
        ),
        (900, AgentAlgorithm::RoundRobin, 50)
    );
}

#[test]
fn every_mistake_in_the_maintenance_keys_is_reported_in_one_run() {
    let text = with("").replace(
        "cluster: {name: lab}",
        "cluster: {name: lab, maintenance_timeout_seconds: -5, agent_algorithm: round-robin, \
         agent_migrations_per_second: 0}",
    );
    let issues = load_str(&text, "x.yaml").unwrap_err();
    for (path, part) in [
        (
            "cluster.maintenance_timeout_seconds",
            "expected a positive number of seconds",
        ),
        (
            "cluster.agent_algorithm",
            "allowed: static, roundrobin, shuffle",
        ),
        ("cluster.agent_migrations_per_second", "must be 1 or more"),
    ] {
        assert!(
            issues
                .iter()
                .any(|i| i.path == path && i.message.contains(part)),
            "no error at {path} saying {part:?}:\n{}",
            show(&issues)
        );
    }
    assert_eq!(issues.len(), 3, "{}", show(&issues));
}
