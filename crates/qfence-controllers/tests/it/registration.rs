//! Registration's four steps against sushy-tools, with a configuration built in code.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use qfence_controllers::registration::{Registration, StepStatus, discover, register};
use qfence_controllers::{SecretSource, SecretStore};
use qfence_model::config::{
    Binding, ClusterConfig, Config, ControllerConfig, ControllerKind, OrchestratorConfig,
    PlanConfig, RedfishAuth, SiteConfig, TlsTrust, ValidatedConfig,
};
use qfence_model::ids::SecretRef;
use qfence_model::{ControllerId, Grade, OrchestratorId, PlanId, Role, SiteId};

use crate::emulators::{NODE1_UUID, Sushy};

fn id<T: TryFrom<&'static str>>(s: &'static str) -> T
where
    T::Error: std::fmt::Debug,
{
    T::try_from(s).unwrap()
}

fn redfish(s: &Sushy, site: &'static str, secret: &'static str) -> ControllerConfig {
    ControllerConfig {
        site: id(site),
        reach: vec![],
        secret: Some(id::<SecretRef>(secret)),
        tls: TlsTrust::CaFile(s.ca_file()),
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Redfish {
            endpoint: s.endpoint(),
            username: "admin".into(),
            auth: RedfishAuth::Basic,
        },
    }
}

fn binding(resource: &str) -> Binding {
    Binding {
        controller: id("bmc-dc1"),
        capability: "power.off".into(),
        resource: resource.into(),
        role: Role::Fence,
        required: true,
        params: BTreeMap::new(),
        id: None,
    }
}

fn config(s: &Sushy) -> ValidatedConfig {
    let mut sites = BTreeMap::new();
    sites.insert(id::<SiteId>("dc1"), SiteConfig::default());
    sites.insert(id::<SiteId>("dc2"), SiteConfig::default());
    let mut orchestrators = BTreeMap::new();
    for (o, site) in [("orch-dc1", "dc1"), ("orch-dc2", "dc2")] {
        orchestrators.insert(
            id::<OrchestratorId>(o),
            OrchestratorConfig {
                site: id(site),
                address: "127.0.0.1:7000".into(),
            },
        );
    }
    let mut controllers = BTreeMap::new();
    controllers.insert(id::<ControllerId>("bmc-dc1"), redfish(s, "dc1", "bmc-dc1"));
    controllers.insert(id::<ControllerId>("bmc-copy"), redfish(s, "dc1", "bmc-dc1"));
    controllers.insert(
        id::<ControllerId>("bmc-nosecret"),
        redfish(s, "dc1", "absent"),
    );
    let mut instances = BTreeMap::new();
    instances.insert(
        id::<SiteId>("dc1"),
        vec![binding("node1"), binding("node9")],
    );
    let plan = PlanConfig {
        owner: id("dc1"),
        priority: vec![],
        interval: Duration::from_secs(10),
        freshness: Duration::from_secs(30),
        recovery_after: Duration::from_secs(30),
        max_recoveries: 1,
        failover_after: Duration::from_secs(60),
        failover_after_definitive: None,
        fence_timeout: Duration::from_secs(30),
        max_retries: 2,
        unfence_on_promote: false,
        auto_failover: true,
        standby: Default::default(),
        rejoin: Default::default(),
        instances,
        service: vec![],
    };
    let mut plans = BTreeMap::new();
    plans.insert(id::<PlanId>("erp-db"), plan);
    ValidatedConfig::assume_valid(Config {
        cluster: ClusterConfig {
            name: "test".into(),
            lease: Duration::from_secs(2),
            maintenance: Default::default(),
        },
        sites,
        orchestrators,
        controllers,
        plans,
        instance_ha: BTreeMap::new(),
    })
}

fn secrets(dir: &std::path::Path) -> SecretStore {
    let p = dir.join("bmc-dc1");
    std::fs::write(&p, "password\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    SecretStore::new(vec![SecretSource::Files(dir.into())])
}

#[tokio::test]
async fn the_four_steps_grade_capabilities_warn_of_duplicates_and_check_each_binding() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    let cfg = config(&s);
    let dir = tempfile::tempdir().unwrap();
    let store = secrets(dir.path());
    let known = BTreeMap::new();
    let reg = Registration {
        config: &cfg,
        controller: &id("bmc-dc1"),
        orchestrator: &id("orch-dc1"),
        secrets: &store,
        known: &known,
        timeout: Duration::from_secs(10),
    };
    let report = register(reg).await;
    let text = report.to_string();
    eprintln!("{text}");
    let status: Vec<StepStatus> = report.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        status,
        [
            StepStatus::Ok,
            StepStatus::Ok,
            StepStatus::Warning,
            StepStatus::Failed
        ],
        "{text}"
    );
    assert!(
        text.contains("controller bmc-copy points at the same endpoint"),
        "{text}"
    );
    assert!(
        text.contains(&s.cert_fingerprint()),
        "shows the fingerprint to pin: {text}"
    );
    assert!(
        !text.contains("password\n") && !text.contains(": password"),
        "{text}"
    );
    let grade = |c: &str| {
        report
            .grades
            .iter()
            .find(|g| g.capability == c)
            .unwrap()
            .grade
    };
    assert_eq!(grade("power.status"), Grade::Proven);
    assert_eq!(grade("power.off"), Grade::Unverifiable);
    assert_eq!(report.bindings.len(), 2);
    assert!(
        report.bindings[0].problems.is_empty(),
        "{:?}",
        report.bindings[0]
    );
    assert!(
        report.bindings[1].problems[0].contains("node9"),
        "{:?}",
        report.bindings[1]
    );
    assert!(!report.passed());

    // The same controller, registered before under another name, is a duplicate identity.
    let known: BTreeMap<ControllerId, String> =
        [(id("bmc-old"), report.identity.clone().unwrap().id)].into();
    let again = register(Registration {
        known: &known,
        ..reg
    })
    .await;
    assert!(
        again
            .to_string()
            .contains("controller bmc-old has the same identity")
    );

    // Discovery offers the real systems.
    let found = discover(reg).await.unwrap();
    assert!(found.iter().any(|d| d.resource == NODE1_UUID), "{found:?}");
}

#[tokio::test]
async fn a_site_outside_reach_or_an_unresolved_secret_stops_before_any_call() {
    let Some(s) = Sushy::start(Some("0")) else {
        return;
    };
    let cfg = config(&s);
    let dir = tempfile::tempdir().unwrap();
    let store = secrets(dir.path());
    let known = BTreeMap::new();
    let base = Registration {
        config: &cfg,
        controller: &id("bmc-dc1"),
        orchestrator: &id("orch-dc2"),
        secrets: &store,
        known: &known,
        timeout: Duration::from_secs(10),
    };
    let r = register(base).await;
    assert_eq!(r.steps[0].status, StepStatus::Failed);
    assert!(r.steps[0].notes[0].contains("site dc2"), "{r}");
    assert!(r.steps[2..].iter().all(|s| s.status == StepStatus::Skipped));
    assert!(discover(base).await.unwrap_err().contains("site dc2"));

    let r = register(Registration {
        controller: &id("bmc-nosecret"),
        orchestrator: &id("orch-dc1"),
        ..base
    })
    .await;
    assert_eq!(r.steps[1].status, StepStatus::Failed, "{r}");
    assert!(
        r.steps[1].notes[0].contains("\"absent\" was not found"),
        "{r}"
    );
}
