//! Configurations built in code, mirroring `examples/lab.yaml` (the demo lab) and a
//! PostgreSQL plan with an application-level fence.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_core::BindingKey;
use qfence_model::config::{
    Binding, ClusterConfig, Config, ControllerConfig, ControllerKind, OrchestratorConfig,
    PlanConfig, ProxmoxAuth, RedfishAuth, SiteConfig, TlsTrust, ValidatedConfig,
};
use qfence_model::ids::SecretRef;
use qfence_model::{BindingId, ControllerId, FenceLevel, OrchestratorId, PlanId, Role, SiteId};

pub fn site(s: &str) -> SiteId {
    SiteId::new(s).unwrap()
}

pub fn plan_id(s: &str) -> PlanId {
    PlanId::new(s).unwrap()
}

fn url(s: &str) -> url::Url {
    url::Url::parse(s).unwrap()
}

fn controller(site_name: &str, reach: &[&str], kind: ControllerKind) -> ControllerConfig {
    ControllerConfig {
        site: site(site_name),
        reach: reach.iter().map(|s| site(s)).collect(),
        secret: Some(SecretRef::new("lab-secret").unwrap()),
        tls: TlsTrust::Insecure,
        timeout: Duration::from_secs(10),
        kind,
    }
}

pub fn bind(controller: &str, capability: &str, resource: &str, role: Role) -> Binding {
    Binding {
        controller: ControllerId::new(controller).unwrap(),
        capability: capability.into(),
        resource: resource.into(),
        role,
        required: false,
        params: BTreeMap::new(),
        id: None,
    }
}

pub fn required(mut b: Binding) -> Binding {
    b.required = true;
    b
}

pub fn with_param(mut b: Binding, k: &str, v: &str) -> Binding {
    b.params.insert(k.into(), v.into());
    b
}

fn base_plan(owner: &str) -> PlanConfig {
    PlanConfig {
        owner: site(owner),
        priority: Vec::new(),
        interval: Duration::from_secs(10),
        freshness: Duration::from_secs(30),
        recovery_after: Duration::from_secs(30),
        max_recoveries: 1,
        failover_after: Duration::from_secs(60),
        failover_after_definitive: None,
        fence_timeout: Duration::from_secs(30),
        max_retries: 2,
        unfence_on_promote: true,
        auto_failover: true,
        standby: Default::default(),
        rejoin: Default::default(),
        instances: BTreeMap::new(),
        service: Vec::new(),
    }
}

/// The lab's sites, orchestrators and controllers (plus IPMI BMCs with watchdogs, a FortiGate
/// shield policy and PostgreSQL servers, which only the plans that need them bind).
fn base_config() -> Config {
    let mut controllers = BTreeMap::new();
    let mut add = |name: &str, c: ControllerConfig| {
        controllers.insert(ControllerId::new(name).unwrap(), c);
    };
    // As in the lab, each BMC is reachable from the other site; dc3 only joins three-site
    // plans (see `config_with`).
    for (dc, others, port) in [
        ("dc1", &["dc2"][..], 8443),
        ("dc2", &["dc1"][..], 8444),
        ("dc3", &["dc1", "dc2"][..], 8446),
    ] {
        let other = others[0];
        add(
            &format!("bmc-{dc}"),
            controller(
                dc,
                others,
                ControllerKind::Redfish {
                    endpoint: url(&format!("https://127.0.0.1:{port}")),
                    username: "qfence".into(),
                    auth: RedfishAuth::Session,
                },
            ),
        );
        add(
            &format!("pve-{dc}"),
            controller(
                dc,
                &[],
                ControllerKind::Proxmox {
                    endpoint: url(&format!("https://127.0.0.1:{}", port - 437)),
                    auth: ProxmoxAuth::Token {
                        token_id: "qfence@pve!fence".into(),
                    },
                },
            ),
        );
        add(
            &format!("ipmi-{dc}"),
            controller(
                dc,
                &[other],
                ControllerKind::Ipmi {
                    endpoint: "127.0.0.1:623".into(),
                    username: "qfence".into(),
                    cipher_suite: 17,
                },
            ),
        );
        add(
            &format!("pg-{dc}"),
            controller(
                dc,
                &[],
                ControllerKind::Postgres {
                    endpoint: url("postgresql://127.0.0.1:5432/postgres"),
                    username: "qfence".into(),
                },
            ),
        );
    }
    add(
        "fgt-edge",
        controller(
            "dc1",
            &["dc2"],
            ControllerKind::Fortigate {
                endpoint: url("https://127.0.0.1:8445"),
                vdom: Some("root".into()),
            },
        ),
    );
    let mut sites = BTreeMap::new();
    sites.insert(site("dc1"), SiteConfig::default());
    sites.insert(site("dc2"), SiteConfig::default());
    sites.insert(site("dc3"), SiteConfig::default());
    sites.insert(site("witness"), SiteConfig { witness: true });
    let mut orchestrators = BTreeMap::new();
    for (name, s, port) in [
        ("dc1-a", "dc1", 7401),
        ("dc2-a", "dc2", 7402),
        ("witness-a", "witness", 7403),
    ] {
        orchestrators.insert(
            OrchestratorId::new(name).unwrap(),
            OrchestratorConfig {
                site: site(s),
                address: format!("127.0.0.1:{port}"),
            },
        );
    }
    let _ = FenceLevel::Compute;
    Config {
        cluster: ClusterConfig {
            name: "lab".into(),
            lease: Duration::from_secs(2),
            maintenance: Default::default(),
        },
        sites,
        orchestrators,
        controllers,
        plans: BTreeMap::new(),
        instance_ha: BTreeMap::new(),
    }
}

/// The lab's erp-db instance at `dc`, in `examples/lab.yaml`'s order:
/// 0 power.off (required fence), 1 vm.stop (secondary fence), 2 replication.lag (readiness),
/// 3 vm.status (health), 4 vm.start (switchover).
fn erp_instance(dc: &str) -> Vec<Binding> {
    let host = format!("pve-{dc}-01");
    let vm = format!("{host}/101");
    vec![
        required(bind(&format!("bmc-{dc}"), "power.off", &host, Role::Fence)),
        bind(&format!("pve-{dc}"), "vm.stop", &vm, Role::Fence),
        with_param(
            bind(
                &format!("pve-{dc}"),
                "replication.lag",
                "101-1",
                Role::Readiness,
            ),
            "max_age_seconds",
            "120",
        ),
        bind(&format!("pve-{dc}"), "vm.status", &vm, Role::Health),
        bind(&format!("pve-{dc}"), "vm.start", &vm, Role::Switchover),
    ]
}

/// The lab's erp-db plan.
pub fn erp_plan() -> PlanConfig {
    let mut p = base_plan("dc1");
    p.instances.insert(site("dc1"), erp_instance("dc1"));
    p.instances.insert(site("dc2"), erp_instance("dc2"));
    let mut vip = bind("fgt-edge", "vip.own", "vip-erp-db", Role::Service);
    vip.params.insert("dc1".into(), "10.1.1.5".into());
    vip.params.insert("dc2".into(), "10.2.1.5".into());
    p.service.push(vip);
    p
}

/// erp-db across three sites (dc3 added like the others), with a priority.
pub fn erp_plan_three(priority: &[&str]) -> PlanConfig {
    let mut p = erp_plan();
    p.instances.insert(site("dc3"), erp_instance("dc3"));
    p.priority = priority.iter().map(|s| site(s)).collect();
    p.service[0].params.insert("dc3".into(), "10.3.1.5".into());
    p
}

/// The lab's erp-db plan with extras: at each site, 5 vm.start as recovery, 6 an IPMI
/// watchdog as dead-man (timeout 60 s), 7 a FortiGate policy as shield.
pub fn erp_plan_full() -> PlanConfig {
    let mut p = erp_plan();
    for (dc, policy) in [("dc1", "11"), ("dc2", "12")] {
        let inst = p.instances.get_mut(&site(dc)).unwrap();
        inst.push(bind(
            &format!("pve-{dc}"),
            "vm.start",
            &format!("pve-{dc}-01/101"),
            Role::Recovery,
        ));
        inst.push(with_param(
            bind(
                &format!("ipmi-{dc}"),
                "watchdog",
                &format!("pve-{dc}-01"),
                Role::DeadMan,
            ),
            "timeout_seconds",
            "60",
        ));
        inst.push(bind("fgt-edge", "policy.disable", policy, Role::Shield));
    }
    p
}

/// A PostgreSQL plan: 0 db.demote (application fence, secondary), 1 power.off (required),
/// 2 replication.lag (readiness), 3 db.promote (switchover), 4 db.health (health).
pub fn pg_plan() -> PlanConfig {
    let mut p = base_plan("dc1");
    p.unfence_on_promote = false;
    for dc in ["dc1", "dc2"] {
        p.instances.insert(
            site(dc),
            vec![
                bind(&format!("pg-{dc}"), "db.demote", "self", Role::Fence),
                required(bind(
                    &format!("bmc-{dc}"),
                    "power.off",
                    &format!("db-{dc}"),
                    Role::Fence,
                )),
                bind(
                    &format!("pg-{dc}"),
                    "replication.lag",
                    "self",
                    Role::Readiness,
                ),
                bind(&format!("pg-{dc}"), "db.promote", "self", Role::Switchover),
                bind(&format!("pg-{dc}"), "db.health", "self", Role::Health),
            ],
        );
    }
    p
}

/// [`pg_plan`] with hot standbys: 5 db.standby (standby) at each site, following the owner's
/// address.
pub fn pg_hot_plan() -> PlanConfig {
    let mut p = pg_plan();
    p.standby = qfence_model::config::StandbyPosture::Hot;
    for (dc, list) in p.instances.iter_mut() {
        let b = bind(&format!("pg-{dc}"), "db.standby", "self", Role::Standby);
        let b = with_param(
            with_param(b, "dc1", "10.0.1.5:5432"),
            "dc2",
            "10.0.2.5:5432",
        );
        list.push(b);
    }
    p
}

/// A configuration holding `plans`, wrapped as valid, each binding without an `id` named
/// after its place in its list (`b0`, `b1`, ...): what lets a decision test write the key
/// [`placed`] `("dc1", 0)` without the plan at hand. Ids in list order also keep the keys'
/// order what positions gave, so the sim explores the same schedules from the same seeds.
/// [`config_derived`] keeps the ids a configuration file without `id`s has.
pub fn config_with(plans: Vec<(&str, PlanConfig)>) -> ValidatedConfig {
    let named = plans
        .into_iter()
        .map(|(name, mut p)| {
            for list in p.instances.values_mut().chain([&mut p.service]) {
                for (i, b) in list.iter_mut().enumerate() {
                    b.id.get_or_insert_with(|| BindingId::new(format!("b{i}")).unwrap());
                }
            }
            (name, p)
        })
        .collect();
    config_derived(named)
}

/// The key of the binding at `index` of `site`'s list (`None`: the service list) in a
/// configuration from [`config_with`], which named it after that place.
pub fn placed(site_name: Option<&str>, index: usize) -> BindingKey {
    BindingKey {
        site: site_name.map(site),
        id: BindingId::new(format!("b{index}")).unwrap(),
        at: index,
    }
}

/// A configuration holding `plans` as they are, wrapped as valid: bindings without an `id`
/// have their derived one.
pub fn config_derived(plans: Vec<(&str, PlanConfig)>) -> ValidatedConfig {
    let mut c = base_config();
    if plans
        .iter()
        .any(|(_, p)| p.instances.contains_key(&site("dc3")))
    {
        for bmc in ["bmc-dc1", "bmc-dc2"] {
            c.controllers.get_mut(bmc).unwrap().reach.push(site("dc3"));
        }
    }
    for (name, p) in plans {
        c.plans.insert(plan_id(name), p);
    }
    ValidatedConfig::assume_valid(c)
}

/// The demo lab: erp-db only.
pub fn lab() -> ValidatedConfig {
    config_with(vec![("erp-db", erp_plan())])
}
