//! Configuration loading, end to end: the shipped examples load, every kind of mistake is
//! reported with its exact path in one run, the capability doc matches the catalog, and no
//! input, however wrong, panics the parser or the validator.

use qfence_model::config::{Issue, Severity, load_str};

const LAB: &str = include_str!("../../../examples/lab.yaml");
const PG_DOCKER: &str = include_str!("../../../examples/pg-docker.yaml");

fn show(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{} {:?} {}\n", i.severity, i.line, i))
        .collect()
}

#[test]
fn the_examples_load_without_errors() {
    for (name, text) in [("lab.yaml", LAB), ("pg-docker.yaml", PG_DOCKER)] {
        match load_str(text, name) {
            Ok(l) => eprintln!("{name}: warnings:\n{}", show(&l.warnings)),
            Err(e) => panic!("{name}:\n{}", show(&e)),
        }
    }
}

/// One file with a mistake of every kind the validator knows, each at a known path.
const BROKEN: &str = r#"
cluster: {name: lab, colour: blue}
sites:
  dc1: {}
  dc2: {}
  dc2: {}
  dc4: {}
  witness: {witness: true}
orchestrators:
  dc1-a: {site: dc1, address: "127.0.0.1:7401"}
  dc2-a: {site: dc2, address: "127.0.0.1:7402"}
controllers:
  bmc-dc1:
    type: redfish
    endpoint: https://127.0.0.1:8443
    site: dc1
    reach: [dc2, dc3]
    secret: lab-redfish
    username: qfence
    password: hunter2
  bmc-dc2:
    type: redfish
    endpoint: "https://[::1"
    site: dc2
    secret: lab-redfish
    username: qfence
  pve-dc2:
    type: proxmox
    endpoint: https://127.0.0.1:8007
    site: dc2
    secret: lab-proxmox
    token_id: qfence@pve!fence
  pve-dc4:
    type: proxmox
    endpoint: https://127.0.0.1:8008
    site: dc4
    secret: lab-proxmox
    token_id: qfence@pve!fence
  fgt-edge:
    type: fortigate
    endpoint: https://127.0.0.1:8445
    site: witness
    secret: lab-fortigate
    tls: {pin: "sha256:1234"}
plans:
  erp-db:
    owner: dc3
    fence_timeout_seconds: 45
    failover_after_seconds: 30
    instances:
      dc1:
        - {controller: bmc-dc1, capability: power.of, resource: pve-dc1-01, role: fence, required: true}
        - {controller: pve-dc1, capability: vm.stop, resource: pve-dc1-01/101, role: fence}
        - {controller: bmc-dc1, capability: power.status, resource: pve-dc1-01, role: health, required: true}
        - {controller: bmc-dc1, capability: power.status, resource: pve-dc1-01, role: healthy}
        - {controller: fgt-edge, capability: vip.own, resource: vip-erp-db, role: service}
      dc2:
        - {controller: pve-dc2, capability: vm.stop, resource: "101", role: fence}
        - {controller: pve-dc2, capability: vm.status, resource: pve-dc2-01/101, role: switchover}
    service:
      - {controller: pve-dc2, capability: vm.start, resource: pve-dc2-01/101, role: switchover}
  lonely:
    owner: dc1
    instances:
      dc1:
        - {controller: bmc-dc1, capability: power.off, resource: pve-dc1-01, role: fence, required: true}
"#;

#[test]
fn every_mistake_is_reported_with_its_exact_path_in_one_run() {
    let issues = load_str(BROKEN, "broken.yaml").expect_err("the file is broken");
    let expected: &[(&str, Severity, &str)] = &[
        // unknown key, with the allowed ones
        (
            "cluster.colour",
            Severity::Error,
            "allowed: name, lease_seconds",
        ),
        // duplicate name
        ("sites.dc2", Severity::Error, "duplicate name \"dc2\""),
        // unknown site
        (
            "controllers.bmc-dc1.reach[1]",
            Severity::Error,
            "unknown site \"dc3\"; sites: dc1, dc2, dc4, witness",
        ),
        // inline credential
        (
            "controllers.bmc-dc1.password",
            Severity::Error,
            "secret: NAME",
        ),
        // an endpoint that does not parse
        (
            "controllers.bmc-dc2.endpoint",
            Severity::Error,
            "is not a URL",
        ),
        // bad pin
        (
            "controllers.fgt-edge.tls.pin",
            Severity::Error,
            "64 hex digits",
        ),
        // a controller at a witness site
        ("controllers.fgt-edge.site", Severity::Error, "witness"),
        // a controller no orchestrator may call
        (
            "controllers.pve-dc4.site",
            Severity::Error,
            "no orchestrator may call this controller",
        ),
        // owner not one of the plan's sites
        (
            "plans.erp-db.owner",
            Severity::Error,
            "not one of the plan's sites: dc1, dc2",
        ),
        // timing relation, with the values
        (
            "plans.erp-db.fence_timeout_seconds",
            Severity::Error,
            "fence_timeout_seconds (45) must be less than failover_after_seconds (30)",
        ),
        // unknown capability, with the type's capabilities
        (
            "plans.erp-db.instances.dc1[0].capability",
            Severity::Error,
            "\"power.of\" is not a capability of controller \"bmc-dc1\" (redfish): power.off, power.status",
        ),
        // unknown controller
        (
            "plans.erp-db.instances.dc1[1].controller",
            Severity::Error,
            "unknown controller \"pve-dc1\"",
        ),
        // required on a non-fence binding
        (
            "plans.erp-db.instances.dc1[2].required",
            Severity::Error,
            "only fence bindings",
        ),
        // unknown role
        (
            "plans.erp-db.instances.dc1[3].role",
            Severity::Error,
            "unknown role \"healthy\"; allowed: fence",
        ),
        // a service binding inside a site's instance
        (
            "plans.erp-db.instances.dc1[4].role",
            Severity::Error,
            "service list",
        ),
        // a resource of the wrong shape
        (
            "plans.erp-db.instances.dc2[0].resource",
            Severity::Error,
            "node/vmid",
        ),
        // a role the capability may not take
        (
            "plans.erp-db.instances.dc2[1].role",
            Severity::Error,
            "vm.status may not take the role switchover; it takes: health",
        ),
        // a site binding in service
        (
            "plans.erp-db.service[0].role",
            Severity::Error,
            "only service bindings",
        ),
        // fewer than two sites
        (
            "plans.lonely.instances",
            Severity::Error,
            "two sites or more",
        ),
    ];
    let mut missing = Vec::new();
    for (path, severity, part) in expected {
        let found = issues
            .iter()
            .any(|i| i.path == *path && i.severity == *severity && i.message.contains(part));
        if !found {
            missing.push(format!("{severity} at {path} containing {part:?}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not reported:\n{}\nreported:\n{}",
        missing.join("\n"),
        show(&issues)
    );
    // Sorted by path (every index here has one digit, so byte order is the natural order),
    // and every issue has a line.
    let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
    assert!(paths.windows(2).all(|w| w[0] <= w[1]), "{paths:#?}");
    assert!(issues.iter().all(|i| i.line.is_some()), "{}", show(&issues));
}

/// The lab, with one line replaced: the result's issues, errors and warnings.
fn lab_with(from: &str, to: &str) -> Vec<Issue> {
    assert!(LAB.contains(from), "the lab has no {from:?}");
    let text = LAB.replacen(from, to, 1);
    match load_str(&text, "lab.yaml") {
        Ok(l) => l.warnings,
        Err(e) => e,
    }
}

fn has(issues: &[Issue], path: &str, severity: Severity, part: &str) -> bool {
    issues
        .iter()
        .any(|i| i.path == path && i.severity == severity && i.message.contains(part))
}

#[track_caller]
fn assert_reports(issues: &[Issue], path: &str, severity: Severity, part: &str) {
    assert!(
        has(issues, path, severity, part),
        "no {severity} at {path} containing {part:?}:\n{}",
        show(issues)
    );
}

#[test]
fn missing_keys_and_wrong_types_are_reported_where_they_belong() {
    let i = lab_with(
        "    username: qfence\n    tls: {insecure: true}\n  bmc-dc2:",
        "    tls: {insecure: true}\n  bmc-dc2:",
    );
    assert_reports(
        &i,
        "controllers.bmc-dc1.username",
        Severity::Error,
        "missing",
    );
    let i = lab_with("interval_seconds: 10", "interval_seconds: ten");
    assert_reports(
        &i,
        "plans.erp-db.interval_seconds",
        Severity::Error,
        "found a string (\"ten\")",
    );
    let i = lab_with("unfence_on_promote: true", "unfence_on_promote: 1");
    assert_reports(
        &i,
        "plans.erp-db.unfence_on_promote",
        Severity::Error,
        "expected true or false",
    );
    let i = lab_with(
        "    type: redfish\n    endpoint: https://127.0.0.1:8443",
        "    type: redfsh\n    endpoint: https://127.0.0.1:8443",
    );
    assert_reports(
        &i,
        "controllers.bmc-dc1.type",
        Severity::Error,
        "allowed: redfish, ipmi, proxmox",
    );
    let i = lab_with("vdom: root", "vdom: root\n    colour: red");
    assert_reports(
        &i,
        "controllers.fgt-edge.colour",
        Severity::Error,
        "allowed: type, site, reach, secret, timeout_seconds, endpoint, tls, vdom",
    );
}

#[test]
fn fractional_timings_are_accepted_and_their_relations_checked_with_values() {
    let text = LAB.replacen(
        "interval_seconds: 10",
        "interval_seconds: 0.5\n    freshness_seconds: 0.25",
        1,
    );
    let i = load_str(&text, "lab.yaml").unwrap_err();
    assert_reports(
        &i,
        "plans.erp-db.freshness_seconds",
        Severity::Error,
        "freshness_seconds (0.25) must be at least interval_seconds (0.5)",
    );
    let text = LAB.replacen("interval_seconds: 10", "interval_seconds: 0.5", 1);
    let plan = load_str(&text, "lab.yaml")
        .unwrap()
        .config
        .plan("erp-db")
        .cloned()
        .unwrap();
    assert_eq!(plan.interval.as_millis(), 500);
    assert_eq!(plan.fence_timeout.as_millis(), 6000);
    assert_eq!(
        plan.freshness.as_millis(),
        6500,
        "freshness defaults to three intervals or, longer here, the fence timeout plus one"
    );
    let text = LAB.replacen(
        "interval_seconds: 10",
        "interval_seconds: 0.5\n    freshness_seconds: 2\n    fence_timeout_seconds: 6",
        1,
    );
    let i = load_str(&text, "lab.yaml").unwrap_err();
    assert_reports(
        &i,
        "plans.erp-db.freshness_seconds",
        Severity::Error,
        "freshness_seconds (2) must be at least fence_timeout_seconds plus interval_seconds (6.5)",
    );

    let i = lab_with(
        "interval_seconds: 10",
        "interval_seconds: 10\n    fence_timeout_seconds: 4",
    );
    assert_reports(
        &i,
        "plans.erp-db.fence_timeout_seconds",
        Severity::Error,
        "fence_timeout_seconds (4) must be more than the timeout_seconds (5) of controller \"bmc-dc1\"",
    );
}

#[test]
fn durations_below_the_floor_are_refused_each_with_its_path_and_the_floor() {
    let text = LAB
        .replacen("  name: lab\n", "  name: lab\n  lease_seconds: 0.0001\n", 1)
        .replacen(
            "interval_seconds: 10",
            "interval_seconds: 1e-12\n    fence_timeout_seconds: 0.05",
            1,
        )
        .replacen(
            "    username: qfence\n    tls: {insecure: true}",
            "    username: qfence\n    timeout_seconds: 0.0004\n    tls: {insecure: true}",
            1,
        );
    let issues = load_str(&text, "lab.yaml").unwrap_err();
    for path in [
        "cluster.lease_seconds",
        "plans.erp-db.interval_seconds",
        "plans.erp-db.fence_timeout_seconds",
        "controllers.bmc-dc1.timeout_seconds",
    ] {
        assert_reports(&issues, path, Severity::Error, "below the floor of 0.1 s");
    }
    assert_reports(
        &issues,
        "plans.erp-db.interval_seconds",
        Severity::Error,
        "1e-12 s is below",
    );
    // A seconds parameter has the same floor.
    let issues = pg_docker_with(&[("max_lag_seconds: 30", "max_lag_seconds: 0.001")]);
    assert!(
        issues
            .iter()
            .any(|i| i.path.ends_with("params.max_lag_seconds")
                && i.message.contains("at least 0.1")),
        "{}",
        show(&issues)
    );
    // The floor itself is a duration.
    let text = LAB.replacen(
        "interval_seconds: 10",
        "interval_seconds: 0.1\n    failover_after_seconds: 1\n    fence_timeout_seconds: 0.5\n    \
         recovery_after_seconds: 0.5",
        1,
    );
    let i = load_str(&text, "lab.yaml").map(|_| ()).unwrap_err();
    assert!(
        !i.iter().any(|i| i.path.ends_with("interval_seconds")),
        "{}",
        show(&i)
    );
}

#[test]
fn failover_after_definitive_is_off_by_default_and_at_least_one() {
    let plan = |text: &str| load_str(text, "lab.yaml").map(|l| l.config.plan("erp-db").cloned());
    assert_eq!(plan(LAB).unwrap().unwrap().failover_after_definitive, None);
    let two = LAB.replacen(
        "interval_seconds: 10",
        "interval_seconds: 10\n    failover_after_definitive: 2",
        1,
    );
    assert_eq!(
        plan(&two).unwrap().unwrap().failover_after_definitive,
        Some(2)
    );
    let i = lab_with(
        "interval_seconds: 10",
        "interval_seconds: 10\n    failover_after_definitive: 0",
    );
    assert_reports(
        &i,
        "plans.erp-db.failover_after_definitive",
        Severity::Error,
        "must be at least 1",
    );
}

#[test]
fn timings_left_out_are_the_defaults_scaled_up_with_a_longer_interval() {
    let plan = |interval: &str| {
        let text = LAB.replacen("interval_seconds: 10", interval, 1);
        let p = load_str(&text, "lab.yaml")
            .unwrap()
            .config
            .plan("erp-db")
            .cloned();
        let p = p.unwrap();
        [
            p.interval,
            p.freshness,
            p.recovery_after,
            p.failover_after,
            p.fence_timeout,
        ]
        .map(|d| d.as_secs_f64())
    };
    assert_eq!(
        plan("auto_failover: true"),
        [2.0, 8.0, 4.0, 8.0, 6.0],
        "the defaults (freshness: the fence timeout plus an interval)"
    );
    assert_eq!(plan("interval_seconds: 10"), [10.0, 40.0, 20.0, 40.0, 30.0]);
    // A shorter interval checks more often and keeps the windows.
    assert_eq!(plan("interval_seconds: 0.5"), [0.5, 6.5, 4.0, 8.0, 6.0]);
}

#[test]
fn a_site_without_a_required_fence_is_a_warning_not_an_error() {
    let text = LAB.replacen(
        "role: fence, required: true}\n        - {controller: pve-dc2",
        "role: fence}\n        - {controller: pve-dc2",
        1,
    );
    assert_ne!(text, LAB);
    let loaded = load_str(&text, "lab.yaml").expect("only a warning");
    assert_reports(
        &loaded.warnings,
        "plans.erp-db.instances.dc2",
        Severity::Warning,
        "no required fence",
    );
}

#[test]
fn a_required_fence_only_the_lost_site_can_call_is_a_warning() {
    let i = lab_with("    reach: [dc1]\n", "");
    assert_reports(
        &i,
        "plans.erp-db.instances.dc2",
        Severity::Warning,
        "if dc2 is lost, nothing can prove it fenced",
    );
}

#[test]
fn credentials_are_refused_wherever_they_appear() {
    let i = lab_with("vdom: root", "vdom: root\n    api_key: 0123456789");
    assert_reports(
        &i,
        "controllers.fgt-edge.api_key",
        Severity::Error,
        "secret: NAME",
    );
    let i = lab_with(
        "https://127.0.0.1:8006",
        "https://root:hunter2@127.0.0.1:8006",
    );
    assert_reports(
        &i,
        "controllers.pve-dc1.endpoint",
        Severity::Error,
        "secret: NAME",
    );
    let i = lab_with("secret: lab-fortigate", "secret: {value: hunter2}");
    assert_reports(
        &i,
        "controllers.fgt-edge.secret",
        Severity::Error,
        "never the credential itself",
    );
    let i = lab_with(
        "params: {max_age_seconds: 120}",
        "params: {max_age_seconds: 120, Password: x}",
    );
    assert_reports(
        &i,
        "plans.erp-db.instances.dc1[2].params.Password",
        Severity::Error,
        "secret: NAME",
    );
    assert!(
        i.iter().all(|i| !i.message.contains("hunter2")),
        "a credential was echoed"
    );
}

#[test]
fn params_are_checked_per_capability() {
    let i = lab_with(
        "params: {dc1: 10.1.1.5, dc2: 10.2.1.5}",
        "params: {dc1: 10.1.1.5, dc3: nowhere}",
    );
    assert_reports(
        &i,
        "plans.erp-db.service[0].params",
        Severity::Error,
        "missing: dc2",
    );
    assert_reports(
        &i,
        "plans.erp-db.service[0].params.dc3",
        Severity::Error,
        "not one of them: dc1, dc2",
    );
    let i = lab_with(
        "params: {max_age_seconds: 120}",
        "params: {max_lag_bytes: 5}",
    );
    assert_reports(
        &i,
        "plans.erp-db.instances.dc1[2].params.max_lag_bytes",
        Severity::Error,
        "takes: max_age_seconds, max_fail_count",
    );
    let i = lab_with(
        "params: {max_age_seconds: 120}",
        "params: {max_fail_count: -1}",
    );
    assert_reports(
        &i,
        "plans.erp-db.instances.dc1[2].params.max_fail_count",
        Severity::Error,
        "expected a whole number",
    );
}

#[test]
fn witness_sites_hold_no_instances_and_owners_must_be_plan_sites() {
    let i = lab_with(
        "      dc2:\n        - {controller: bmc-dc2",
        "      witness:\n        - {controller: bmc-dc2",
    );
    assert_reports(
        &i,
        "plans.erp-db.instances.witness",
        Severity::Error,
        "witness site",
    );
}

#[test]
fn tls_pins_are_normalised_and_insecure_is_warned() {
    let colons = vec!["AB"; 32].join(":");
    let text = LAB.replacen(
        "tls: {insecure: true}",
        &format!("tls: {{pin: \"sha256:{colons}\"}}"),
        1,
    );
    let loaded = load_str(&text, "lab.yaml").unwrap();
    let c = loaded.config.controller("bmc-dc1").unwrap();
    assert_eq!(c.tls, qfence_model::config::TlsTrust::Pin("ab".repeat(32)));
    assert!(!has(
        &loaded.warnings,
        "controllers.bmc-dc1.tls.insecure",
        Severity::Warning,
        ""
    ));
    assert_reports(
        &loaded.warnings,
        "controllers.bmc-dc2.tls.insecure",
        Severity::Warning,
        "pin or ca_file",
    );
    let i = lab_with(
        "tls: {insecure: true}",
        "tls: {insecure: true, ca_file: /ca.pem}",
    );
    assert_reports(
        &i,
        "controllers.bmc-dc1.tls",
        Severity::Error,
        "only one of pin, ca_file, insecure",
    );
}

#[test]
fn duplicate_keys_and_bindings_are_errors() {
    let i = lab_with("    owner: dc1\n", "    owner: dc1\n    owner: dc2\n");
    assert_reports(
        &i,
        "plans.erp-db.owner",
        Severity::Error,
        "duplicate key \"owner\"",
    );
    let dup = "        - {controller: pve-dc1, capability: vm.stop, resource: pve-dc1-01/101, role: fence}\n";
    let i = lab_with(dup, &format!("{dup}{dup}"));
    assert_reports(
        &i,
        "plans.erp-db.instances.dc1[2]",
        Severity::Error,
        "the same as [1]",
    );
}

#[test]
fn a_binding_id_is_named_or_derived_and_unique_in_its_list() {
    let fence = "        - {controller: pve-dc1, capability: vm.stop, resource: pve-dc1-01/101, role: fence}\n";
    let named = "        - {id: stop-101, controller: pve-dc1, capability: vm.stop, resource: pve-dc1-01/101, role: fence}\n";
    let ids = |text: &str| {
        let l = load_str(text, "lab.yaml").unwrap_or_else(|i| panic!("{}", show(&i)));
        let plan = l.config.plan("erp-db").unwrap();
        plan.instances[&qfence_model::SiteId::new("dc1").unwrap()]
            .iter()
            .map(|b| b.stable_id().to_string())
            .collect::<Vec<_>>()
    };
    let before = ids(LAB);
    let with_name = ids(&LAB.replacen(fence, named, 1));
    assert!(with_name.contains(&"stop-101".to_owned()), "{with_name:?}");
    // A derived id is the binding's own: inserting another binding before it leaves it as
    // it was, where its position moves on.
    let extra = "        - {controller: pve-dc1, capability: vm.status, resource: pve-dc1-01/999, role: health}\n";
    let inserted = ids(&LAB.replacen(fence, &format!("{extra}{fence}"), 1));
    assert_eq!(inserted[0], before[0]);
    assert_eq!(&inserted[2..], &before[1..], "{inserted:?} {before:?}");
    assert!(!before.contains(&inserted[1]));
    // Two bindings named alike are refused at the later one's id.
    let twin = "        - {id: stop-101, controller: pve-dc1, capability: vm.start, resource: pve-dc1-01/101, role: recovery}\n";
    let issues = lab_with(fence, &format!("{named}{twin}"));
    assert_reports(
        &issues,
        "plans.erp-db.instances.dc1[2].id",
        Severity::Error,
        "duplicate binding id \"stop-101\": the same as [1]'s",
    );
    let issues = lab_with(
        fence,
        "        - {id: 'not a name', controller: pve-dc1, capability: vm.stop, resource: pve-dc1-01/101, role: fence}\n",
    );
    assert_reports(
        &issues,
        "plans.erp-db.instances.dc1[1].id",
        Severity::Error,
        "not a valid name",
    );
}

#[test]
fn syntax_errors_and_empty_files_are_issues_too() {
    let i = load_str("cluster: {name: lab\n", "x.yaml").unwrap_err();
    assert_eq!(i.len(), 1);
    assert!(
        i[0].message.starts_with("x.yaml is not valid YAML"),
        "{}",
        show(&i)
    );
    let i = load_str("", "x.yaml").unwrap_err();
    assert_reports(&i, "", Severity::Error, "empty");
    let i = load_str(
        "cluster: {name: x}\nsites: {}\norchestrators: {a: {site: dc1, address: 'h:1'}}\n",
        "x.yaml",
    )
    .unwrap_err();
    assert_reports(&i, "sites", Severity::Error, "at least one site");
    assert_reports(
        &i,
        "orchestrators.a.site",
        Severity::Error,
        "unknown site \"dc1\"; sites: (none)",
    );
    let i = load_str("cluster: lab\n", "x.yaml").unwrap_err();
    assert_reports(
        &i,
        "cluster",
        Severity::Error,
        "expected a mapping with keys name, lease_seconds, maintenance_timeout_seconds, \
         agent_algorithm, agent_migrations_per_second, found a string (\"lab\")",
    );
    assert_reports(&i, "sites", Severity::Error, "missing");
    let i = load_str("- 1\n- 2\n", "x.yaml").unwrap_err();
    assert_reports(&i, "", Severity::Error, "expected a mapping");
}

#[test]
fn the_lab_decodes_to_what_the_file_says() {
    use qfence_model::Role;
    let loaded = load_str(LAB, "lab.yaml").unwrap();
    let config = loaded.config.config();
    assert_eq!(config.cluster.name, "lab");
    assert!(config.sites["witness"].witness);
    assert_eq!(config.orchestrators.len(), 3);
    let plan = loaded.config.plan("erp-db").unwrap();
    assert_eq!(plan.owner.as_str(), "dc1");
    assert!(plan.unfence_on_promote);
    // Left out: four of the lab's 10 s intervals.
    assert_eq!(plan.failover_after.as_secs(), 40);
    let fences: Vec<_> = plan
        .bindings(&"dc1".try_into().unwrap(), Role::Fence)
        .collect();
    assert_eq!(fences.len(), 2);
    assert!(fences[0].1.required && !fences[1].1.required);
    let dc2 = "dc2".try_into().unwrap();
    let required: Vec<_> = plan
        .required_fences(&dc2)
        .map(|(i, b)| (i, b.controller.as_str()))
        .collect();
    assert_eq!(required, [(0, "bmc-dc2")]);
    assert_eq!(plan.instance(&dc2).map(<[_]>::len), Some(5));
    assert_eq!(loaded.config.plans().count(), 1);
    assert_eq!(plan.service[0].params["dc2"], "10.2.1.5");
    let bmc = loaded.config.controller("bmc-dc1").unwrap();
    assert!(bmc.callable_from(&"dc2".try_into().unwrap()));
    assert_eq!(
        loaded.config.capability(fences[0].1).unfence,
        Some("power.on")
    );
    // Only the lab's insecure TLS is warned about.
    assert!(
        loaded
            .warnings
            .iter()
            .all(|w| w.path.ends_with("tls.insecure"))
    );
}

#[test]
fn capability_doc_matches_the_catalog() {
    use qfence_model::ControllerType;
    const DOC: &str = include_str!("../../../docs/specs/capabilities.md");
    let header = "| type | capability | roles | level | unfence | resource |";
    let start = DOC.find(header).expect("the doc has the catalog table");
    let mut documented: Vec<String> = DOC[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            cells.join(" | ")
        })
        .collect();
    let mut code: Vec<String> = ControllerType::ALL
        .iter()
        .flat_map(|t| {
            t.capabilities().iter().map(move |c| {
                [
                    t.as_str().to_owned(),
                    c.name.to_owned(),
                    c.role_names(),
                    c.level.map_or("-".to_owned(), |l| l.as_str().to_owned()),
                    c.unfence.unwrap_or("-").to_owned(),
                    c.resource.as_str().to_owned(),
                ]
                .join(" | ")
            })
        })
        .collect();
    assert!(code.len() > 10);
    documented.sort();
    code.sort();
    let only_doc: Vec<_> = documented.iter().filter(|r| !code.contains(r)).collect();
    let only_code: Vec<_> = code.iter().filter(|r| !documented.contains(r)).collect();
    assert!(
        only_doc.is_empty() && only_code.is_empty(),
        "docs/specs/capabilities.md and catalog.rs differ\nonly in the doc: {only_doc:#?}\nonly in the code: {only_code:#?}"
    );
}

/// Regression: a controller with a mistake of its own used to drop out of the cross-checks, so
/// the mistakes of the bindings that name it, and its missing caller, went unreported until the
/// controller was fixed. Every problem is reported in one run.
#[test]
fn a_broken_controller_still_has_its_bindings_and_callers_checked() {
    let text = r#"
cluster: {name: lab}
sites: {dc1: {}, dc2: {}}
orchestrators:
  dc1-a: {site: dc1, address: "127.0.0.1:7401"}
controllers:
  bmc-dc1: {type: redfish, endpoint: "https://127.0.0.1:8443", site: dc1, username: admin}
  pve-dc2: {type: proxmox, endpoint: "not a url", site: dc2, secret: x, token_id: "root@pam!q"}
plans:
  erp-db:
    owner: dc1
    instances:
      dc1:
        - {controller: bmc-dc1, capability: power.of, resource: h1, role: fence, required: true}
      dc2:
        - {controller: pve-dc2, capability: vm.stop, resource: "101", role: health}
"#;
    let issues = load_str(text, "broken.yaml").expect_err("the file has errors");
    assert_reports(
        &issues,
        "controllers.bmc-dc1.secret",
        Severity::Error,
        "missing",
    );
    assert_reports(
        &issues,
        "controllers.pve-dc2.endpoint",
        Severity::Error,
        "not a URL",
    );
    assert_reports(
        &issues,
        "controllers.pve-dc2.site",
        Severity::Error,
        "no orchestrator may call",
    );
    assert_reports(
        &issues,
        "plans.erp-db.instances.dc1[0].capability",
        Severity::Error,
        "\"power.of\" is not a capability of controller \"bmc-dc1\" (redfish): power.off, power.status",
    );
    assert_reports(
        &issues,
        "plans.erp-db.instances.dc2[0].role",
        Severity::Error,
        "may not take the role health",
    );
    assert_reports(
        &issues,
        "plans.erp-db.instances.dc2[0].resource",
        Severity::Error,
        "node/vmid",
    );
}

fn pg_docker_with(edits: &[(&str, &str)]) -> Vec<Issue> {
    let mut text = PG_DOCKER.to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "pg-docker.yaml has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    match load_str(&text, "pg-docker.yaml") {
        Ok(l) => l.warnings,
        Err(e) => e,
    }
}

/// Regression: drivers read params validation refused (db.health's `expect_role`, the IPMI
/// watchdog's `timeout_seconds`), so a binding could not set them. The catalog now declares
/// every param a driver reads, and validation checks against it.
#[test]
fn every_param_a_driver_reads_is_accepted_and_checked() {
    const HEALTH: &str =
        "{controller: pg-dc1, capability: db.health, resource: self, role: health}";
    let ok = pg_docker_with(&[(
        HEALTH,
        "{controller: pg-dc1, capability: db.health, resource: self, role: health, params: {expect_role: primary}}",
    )]);
    assert!(
        ok.iter().all(|i| !i.path.contains("params")),
        "{}",
        show(&ok)
    );
    let bad = pg_docker_with(&[(
        HEALTH,
        "{controller: pg-dc1, capability: db.health, resource: self, role: health, params: {expect_role: leader}}",
    )]);
    assert!(
        bad.iter().any(|i| i.path.ends_with("params.expect_role")
            && i.severity == Severity::Error
            && i.message.contains("one of: primary, replica")),
        "{}",
        show(&bad)
    );

    let ipmi = |seconds: &str| {
        pg_docker_with(&[
            (
                "  docker-dc1:\n",
                "  ipmi-db1:\n    type: ipmi\n    endpoint: 127.0.0.1:623\n    site: dc1\n    secret: apps-ipmi\n    username: qfence\n  docker-dc1:\n",
            ),
            (
                HEALTH,
                &format!(
                    "{HEALTH}\n        - {{controller: ipmi-db1, capability: watchdog, resource: db1, role: dead-man, params: {{timeout_seconds: {seconds}}}}}"
                ),
            ),
        ])
    };
    let ok = ipmi("30");
    assert!(
        ok.iter().all(|i| !i.path.contains("params")),
        "{}",
        show(&ok)
    );
    let bad = ipmi("0");
    assert!(
        bad.iter()
            .any(|i| i.path.ends_with("params.timeout_seconds")
                && i.severity == Severity::Error
                && i.message.contains("from 1 to 6553")),
        "{}",
        show(&bad)
    );
}

#[test]
fn capability_params_doc_matches_the_catalog() {
    use qfence_model::ControllerType;
    use qfence_model::catalog::Params;
    const DOC: &str = include_str!("../../../docs/specs/capabilities.md");
    let header = "| type | capability | param | default | value | meaning |";
    let start = DOC.find(header).expect("the doc has the params table");
    let mut documented: Vec<String> = DOC[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            cells.join(" | ")
        })
        .collect();
    let mut code: Vec<String> = Vec::new();
    for t in ControllerType::ALL {
        for c in t.capabilities() {
            let specs: Vec<_> = match c.params {
                Params::Named(list) => list.iter().collect(),
                Params::PerSite(spec) => vec![spec],
            };
            for p in specs {
                code.push(
                    [
                        t.as_str().to_owned(),
                        c.name.to_owned(),
                        p.name.to_owned(),
                        p.default.unwrap_or("-").to_owned(),
                        p.ty.describe(),
                        p.meaning.split_whitespace().collect::<Vec<_>>().join(" "),
                    ]
                    .join(" | "),
                );
            }
        }
    }
    assert!(code.len() >= 7);
    documented.sort();
    code.sort();
    let only_doc: Vec<_> = documented.iter().filter(|r| !code.contains(r)).collect();
    let only_code: Vec<_> = code.iter().filter(|r| !documented.contains(r)).collect();
    assert!(
        only_doc.is_empty() && only_code.is_empty(),
        "docs/specs/capabilities.md's params table and catalog.rs differ\nonly in the doc: {only_doc:#?}\nonly in the code: {only_code:#?}"
    );
}

/// A dead-man countdown shorter than three intervals is refused at its path (issue 12): it is
/// renewed once an interval, and a failed renewal or a drain may skip one.
#[test]
fn a_dead_man_countdown_under_three_intervals_is_refused_with_its_path() {
    let with_watchdog = |countdown: u32| {
        LAB.replacen(
            "controllers:\n",
            "controllers:\n  ipmi-dc1:\n    type: ipmi\n    endpoint: 127.0.0.1:6230\n    \
             site: dc1\n    secret: lab-ipmi\n    username: qfence\n",
            1,
        )
        .replacen(
            "      dc1:\n",
            &format!(
                "      dc1:\n        - {{controller: ipmi-dc1, capability: watchdog, resource: \
                 pve-dc1-01, role: dead-man, params: {{timeout_seconds: {countdown}}}}}\n"
            ),
            1,
        )
    };
    // interval_seconds is 10 in the lab: 29 s is too short, 30 s is enough.
    let issues = load_str(&with_watchdog(29), "lab.yaml").expect_err("refused");
    let issue = issues
        .iter()
        .find(|i| i.path == "plans.erp-db.instances.dc1[0].params.timeout_seconds")
        .unwrap_or_else(|| panic!("no issue at the countdown's path: {issues:#?}"));
    assert_eq!(issue.severity, Severity::Error);
    assert!(
        issue
            .message
            .contains("at least three intervals (3 x interval_seconds = 30 s)"),
        "{}",
        issue.message
    );
    load_str(&with_watchdog(30), "lab.yaml").expect("three intervals are enough");
}
